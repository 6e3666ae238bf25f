#pragma once
/// @file metrics.hpp
/// Reads per-step training metrics from a workload's stdout: JSON lines after a fixed prefix
/// (workloads/torch_gpt protocol, docs/task-contract.md), or a user-given regular expression for
/// unmodified scripts that print lines like `iter 10: loss 2.31, time 95.2ms`.

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tuning/task.hpp"

namespace infrarsi::adapters {

/// Metrics of one step. Times in seconds, memory in bytes; unset optionals were not reported.
struct step_sample {
  std::uint32_t step = 0;
  double loss = 0.0;
  /// Tokens the step's loss was computed over, whole global batch (0: not reported).
  std::uint64_t tokens = 0;
  double step_time_s = 0.0;
  std::optional<double> data_s;
  std::optional<double> forward_s;
  std::optional<double> backward_s;
  std::optional<double> optimizer_s;
  std::optional<double> communication_s;
  std::optional<std::uint64_t> peak_memory_bytes;
  /// A warm-up step (executed and reported, excluded from timing).
  bool warmup = false;
  /// Evaluation loss on fixed held-out data reported with this step (JSON key `eval_loss`,
  /// regex field `eval_loss`); NaN when reported as null, a string or nan/inf; unset: none.
  std::optional<double> eval_loss;
};

/// Incremental parser for the reporting rank's stdout, one line at a time.
class metrics_parser {
public:
  /// Errors: none at construction; an invalid regex is reported by `config_error()`.
  explicit metrics_parser(const tuning::metrics_spec& spec);

  /// Feeds one line (without the newline). Lines that are not metrics are ignored; malformed
  /// metrics lines are counted and the first is kept in `first_malformed()`.
  void feed(std::string_view line);

  [[nodiscard]] const std::vector<step_sample>& steps() const noexcept { return steps_; }
  /// True once a JSON final line ({"event": "final", ...}) has been read.
  [[nodiscard]] bool final_seen() const noexcept { return final_.has_value(); }
  /// The final line's object, if seen.
  [[nodiscard]] const std::optional<nlohmann::json>& final_line() const noexcept { return final_; }
  [[nodiscard]] std::size_t malformed_lines() const noexcept { return malformed_; }
  [[nodiscard]] const std::string& first_malformed() const noexcept { return first_malformed_; }
  /// Non-empty when the spec's regex does not compile (the message says why).
  [[nodiscard]] const std::string& config_error() const noexcept { return config_error_; }

private:
  void feed_json(std::string_view body, std::string_view line);
  void feed_regex(const std::string& line);
  void malformed(std::string_view line, const std::string& why);

  tuning::metrics_spec spec_;
  std::optional<std::regex> regex_;
  std::vector<step_sample> steps_;
  std::optional<nlohmann::json> final_;
  std::size_t malformed_ = 0;
  std::string first_malformed_;
  std::string config_error_;
};

/// The first OOM pattern that occurs in `line`, or nullptr.
const std::string* find_oom_pattern(const tuning::metrics_spec& spec, std::string_view line);

} // namespace infrarsi::adapters
