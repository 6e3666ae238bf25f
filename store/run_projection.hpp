#pragma once
/// @file run_projection.hpp
/// The state of one tuning run, folded from its event stream (a projection: apply never fails
/// and does no I/O). Everything the planner, the verifier, the report and replay need is here;
/// nothing else holds run state.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/event_log.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/priors.hpp"
#include "tuning/stats.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::store {

/// A TrialSpec message as a configuration (knobs typed as on the wire, patches sorted).
tuning::configuration configuration_of(const wire::TrialSpec& spec);

/// knob_value <-> JSON with an explicit type tag: {"int": 4}, {"real": 0.5}, {"bool": true},
/// {"text": "sdpa"} (plain JSON numbers would lose the int/real distinction).
nlohmann::json to_tagged_json(const tuning::knob_value& v);
std::optional<tuning::knob_value> from_tagged_json(const nlohmann::json& j);

/// A configuration as JSON: {"knobs": {name: tagged value}, "patches": [...]}, and back.
nlohmann::json to_json(const tuning::configuration& c);
std::optional<tuning::configuration> configuration_from_json(const nlohmann::json& j);

/// Priors as JSON and back (the PriorsLoaded document).
nlohmann::json to_json(const tuning::prior_set& p);
tuning::prior_set priors_from_json(const nlohmann::json& j);

/// One interleaved re-verification of a candidate against the baseline.
struct reverification {
  std::uint64_t candidate_trial = 0;
  tuning::configuration config;
  std::vector<double> baseline_times_s;
  std::vector<double> candidate_times_s;
  tuning::speedup_estimate estimate;
  bool promotable = false;
  std::string reason;
  /// Measurement round (1, then 2 when the first was re-measured).
  std::uint32_t round = 1;
  /// The verifier asked for another round (measured under visibly higher variance).
  bool remeasure = false;
};

/// The state of one run.
struct run_state {
  std::string run_id;
  std::string task_path;
  std::uint64_t seed = 0;
  /// The init document (scope hashes, contract hash, hardware), if init ran.
  std::optional<nlohmann::json> contract_doc;
  /// Patches found at init to touch paths outside the editable scope.
  std::vector<std::string> out_of_scope_patches;
  tuning::prior_set priors;
  bool priors_loaded = false;
  std::vector<tuning::configuration> experience_seeds;
  bool experience_seeded = false;
  /// The doctor's results, if it ran.
  std::optional<tuning::noise_estimate> noise;
  tuning::loss_reference reference;
  std::optional<nlohmann::json> doctor_doc;
  /// Every trial attempt in order of proposal.
  std::vector<tuning::trial_record> trials;
  std::vector<reverification> reverifications;
  std::optional<nlohmann::json> promotion;
  std::optional<nlohmann::json> report;
  std::optional<nlohmann::json> applied;
  /// Stages started and completed (init, doctor, run, report, apply).
  std::vector<std::string> stages_started;
  std::vector<std::string> stages_completed;
  /// Events folded, and how many of unknown kinds were skipped.
  std::uint64_t events = 0;

  /// The record of trial `id` attempt `attempt`, or nullptr.
  [[nodiscard]] const tuning::trial_record* find(std::uint64_t id, std::uint32_t attempt) const;
  [[nodiscard]] tuning::trial_record* find(std::uint64_t id, std::uint32_t attempt);
  /// The next unused trial id.
  [[nodiscard]] std::uint64_t next_trial_id() const;
  [[nodiscard]] bool stage_done(const std::string& stage) const;
};

/// Folds a run's stream into a run_state.
class run_projection final : public projection {
public:
  explicit run_projection(std::string run_id) { state_.run_id = std::move(run_id); }
  void apply(const recorded_event& event) override;
  [[nodiscard]] const run_state& state() const noexcept { return state_; }

private:
  run_state state_;
};

/// Reads the whole stream of `run_id` into a run_state. Errors from the log pass through.
[[nodiscard]] caf::expected<run_state> load_run(const event_log& log, const std::string& run_id);

} // namespace infrarsi::store
