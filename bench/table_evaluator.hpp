#pragma once
/// @file table_evaluator.hpp
/// The benchmark evaluator for a task whose trials are replayed from a published table of real
/// training runs (bench/tables/: CSV files of measured step times and outcomes of real clusters,
/// one task file per fixed-work subset; bench/README.md "Real tables"). In process, like the
/// simulator's evaluator: no subprocess, microseconds per trial.
///
/// A table task names its table and how a configuration selects rows in its workload argv
/// (argv[0] ends in "replay", bench/tables/replay), rendered for the configuration as the launcher
/// renders it:
///
///   --table FILE              the CSV, relative to workload.workdir ('#' lines are comments)
///   --where COLUMN=VALUE      every row of the task's subset has VALUE in COLUMN (repeatable)
///   --match COLUMN=VALUE      the configuration's value of COLUMN, from a knob placeholder
///                             ("tp={tp}"); VALUE "A*B" (two integers) stands for their product
///                             (so a knob rendered 0/1 can select a column value 0); repeatable
///   --time-column COLUMN      measured seconds per step of an ok row
///   --outcome-column COLUMN   ok; fail or oom (a failed run); missing, unknown, no_result or ""
///                             (no result: the row counts as absent). Default "outcome"
///   --memory-column COLUMN    measured peak memory per GPU of an ok row (optional)
///   --memory-unit BYTES       bytes per unit of that column (default 1; GB columns: 2^30)
///   --gpus N                  GPUs of the job (device-seconds)
///   --noise-sd SD             log-normal noise of a replayed step time (default 0.01)
/// Numbers compare as numbers ("1" matches "1.0"), other values as text.
///
/// A trial of configuration C (rows: the subset's rows whose --match columns equal C's values):
///  1. refused before launch (0 device-seconds): a knob or value the task does not have
///     (launch_error), a broken constraint (contract_violation "constraint: ...", as the
///     node-runner reports it);
///  2. no row with a result: launch_error "not in the table" (0 device-seconds: the table cannot
///     say what the launch would have cost);
///  3. an ok row (several: the geometric mean of their step times): outcome ok with the task's
///     contract.steps steps of contract.tokens_per_step tokens, each step the row's step time x
///     exp(sd x z), z one standard normal draw per trial from (seed, trial id, attempt) (the
///     simulator's rule: the same seed and trial id see the same noise); the steps before the
///     timed window are marked warm-up; one fixed falling loss trajectory for every trial (the
///     tables hold only configurations that train the same model on the same data); peak
///     memory the --memory-column's value (the largest of the rows; memory_source workload) or
///     0 (unobserved: the table has none; a host's resident memory is not device memory); wall
///     time steps x step time, device-seconds wall time x GPUs;
///  4. only failed rows: outcome oom, peak memory 0 (unobserved: the planner's memory model
///     censors it at the device memory), wall time table_failed_launch_s, device-seconds
///     table_failed_launch_s x GPUs (a launch that fails at start-up or at its first step).
/// The oracle: true_step_time is the row's step time without noise (nullopt for failed, absent
/// or illegal configurations); the optimum is the fastest ok configuration of the subset.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/evaluator.hpp"
#include "tuning/contract_check.hpp"

namespace infrarsi::bench {

/// Start-up charged to a replayed trial whose table row failed (out of memory or crashed),
/// seconds; times the job's GPUs gives its device-seconds.
inline constexpr double table_failed_launch_s = 60.0;

/// A CSV file of a real table: its '#' comment lines, header and rows (RFC 4180 quoting).
struct table_csv {
  std::string path;
  std::vector<std::string> comments; ///< '#' lines without the '#', in order
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows; ///< each as long as `columns`
  /// Line number in the file of each row (1-based), for messages.
  std::vector<std::size_t> lines;
  /// Index of `name` in columns, or -1.
  [[nodiscard]] int column(const std::string& name) const;
};

/// Reads `path`. Returns nullopt with `why` ("FILE:LINE: ...") when it cannot be read, has no
/// header, or a row has another number of fields than the header.
std::optional<table_csv> read_table_csv(const std::string& path, std::string& why);

/// What the table says of one configuration of a table task.
struct table_entry {
  enum class status : std::uint8_t {
    ok,      ///< at least one row ran: step_time_s is its (geometric mean) step time
    failed,  ///< only failed rows (out of memory or crashed): replayed as oom
    absent,  ///< legal, but no row with a result
  };
  tuning::configuration config; ///< canonical (bench::canonical_configuration)
  status outcome = status::absent;
  double step_time_s = 0.0;     ///< seconds (ok only)
  double peak_memory_bytes = 0; ///< bytes; 0: not recorded
  std::vector<std::size_t> rows; ///< indices into the table's rows (its subset rows of C)
};

/// Evaluator of one table task (see the file comment).
class table_evaluator final : public evaluator {
public:
  /// Whether `task` is a table task (workload.argv[0] ends in "replay").
  static bool is_table_task(const tuning::task_spec& task);

  /// Creates the evaluator of `task`: reads the table, renders the argv for every knob
  /// assignment of the task (each knob at tuning::search_values) and indexes the subset's rows by
  /// configuration. Returns nullptr with `why` (naming the task file, the argv option or the
  /// table's file and line) when the task is not a table task, an option is missing or malformed,
  /// the table cannot be read or lacks a named column, a row's outcome is not one of the known
  /// words, a subset row matches no legal configuration of the task, or the baseline is not an
  /// ok row.
  static std::unique_ptr<table_evaluator> create(tuning::task_spec task, std::string& why);

  [[nodiscard]] const tuning::task_spec& task() const override { return task_; }
  void begin_run(std::uint64_t seed) override { seed_ = seed; }
  [[nodiscard]] tuning::trial_record measure(const tuning::configuration& config,
                                             std::uint64_t trial_id, std::uint32_t attempt,
                                             const std::string& purpose,
                                             const tuning::loss_reference* early_stop =
                                               nullptr,
                                             const std::vector<std::string>& smoke_patches =
                                               {}) override;
  [[nodiscard]] std::optional<double> true_step_time(const tuning::configuration& config) override;
  [[nodiscard]] double optimum_step_time() override { return optimum_step_s_; }
  [[nodiscard]] std::string optimum_description() override { return optimum_text_; }
  /// Legal configurations (every knob assignment that keeps the constraints).
  [[nodiscard]] std::uint64_t optimum_space_size() override { return legal_.size(); }
  [[nodiscard]] double baseline_true_step_time() override { return baseline_step_s_; }
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> incompatible_patches() override {
    return {};
  }

  /// Every legal configuration with what the table says of it, baseline first, then in the
  /// order of the knob grid (the task's first knob varies fastest).
  [[nodiscard]] const std::vector<table_entry>& legal() const { return legal_; }
  /// The entry of `config` (canonicalised), or nullptr when it is not legal.
  [[nodiscard]] const table_entry* find(const tuning::configuration& config) const;
  /// The baseline's entry.
  [[nodiscard]] const table_entry& baseline() const { return legal_.front(); }
  /// The table and the subset's row indices (every row the --where options select).
  [[nodiscard]] const table_csv& table() const { return table_; }
  [[nodiscard]] const std::vector<std::size_t>& subset_rows() const { return subset_; }
  /// GPUs of the job (--gpus), log-sd of the replay noise (--noise-sd).
  [[nodiscard]] int gpus() const { return gpus_; }
  [[nodiscard]] double noise_sd() const { return noise_sd_; }
  /// Configurations the subset's rows have a result for (ok or failed).
  [[nodiscard]] std::size_t recorded() const;

private:
  explicit table_evaluator(tuning::task_spec task) : task_(std::move(task)) {}

  tuning::task_spec task_;
  table_csv table_;
  std::vector<std::size_t> subset_;
  std::vector<table_entry> legal_;
  std::map<std::string, std::size_t> index_; ///< configuration key -> legal_ index
  std::uint64_t seed_ = 0;
  int gpus_ = 1;
  double noise_sd_ = 0.01;
  std::vector<double> loss_; ///< the loss of every step, the same for every trial
  double baseline_step_s_ = 0;
  double optimum_step_s_ = 0;
  std::string optimum_text_;
};

// ---- scoring over a table (the benchmark's closed forms; bench/README.md "Real tables") --------

/// Expected best fraction of the optimum after k distinct configurations drawn uniformly without
/// replacement from `candidates` (the legal configurations other than the baseline), each
/// scored f_i = optimum / min(baseline, t_i) with t_i = infinity for a failed or absent one (no
/// improvement over the baseline): sorting f ascending, E = sum_j f_(j) C(j-1, k-1) / C(M, k)
/// (M candidates; k >= M: the largest f). `fractions` are the f_i. 0 when empty or k = 0.
double random_expected_best(std::vector<double> fractions, std::size_t k);

/// Spearman's rank correlation of `x` and `y` (average ranks for ties); nullopt when fewer than
/// 3 pairs or a side is constant.
std::optional<double> spearman(const std::vector<double>& x, const std::vector<double>& y);

} // namespace infrarsi::bench
