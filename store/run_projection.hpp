#pragma once
/// @file run_projection.hpp
/// The state of one tuning run, folded from its event stream (a projection: apply never fails
/// and does no I/O). Everything the planner, the verifier, the report and replay need is here;
/// nothing else holds run state.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
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

/// Folds a TrialResult into `t` (what TrialCompleted records): finished, outcome, steps and
/// their mean phase times, wall time, device-seconds, peak memory, detail and the work the final
/// line declares. The trial's identity, purpose and configuration are left as they are.
void apply_result(tuning::trial_record& t, const wire::TrialResult& m);

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

/// When an attempt in flight started and was stopped, as the log recorded it (the events'
/// recorded_at_ns, ns since the Unix epoch): what a lost attempt's wall time is computed from.
struct attempt_clock {
  /// recorded_at_ns of the attempt's TrialDispatched.
  std::int64_t dispatched_at_ns = 0;
  /// recorded_at_ns of a RunInterrupted that listed the attempt in flight (0: none): that life
  /// stopped the attempt's processes then.
  std::int64_t interrupted_at_ns = 0;
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
  /// Pairs of patches that do not apply together (ContractLocked "patch_conflicts").
  std::vector<std::pair<std::string, std::string>> patch_conflicts;
  tuning::prior_set priors;
  bool priors_loaded = false;
  std::vector<tuning::configuration> experience_seeds;
  bool experience_seeded = false;
  /// The pack says "serving": "propose-or-explain/1" (issue 16): the decision layer proposes
  /// every served seed in the initial design or says why not (decide::proposal_doc); packs of
  /// older runs leave the seeds to the policy, as those runs did.
  bool experience_seeds_explained = false;
  /// Where the served seeds come from (issue 16): {"mode", "not_served", "seeds":
  /// [{"origin_hardware", "match", "same_workload", "speedup", "run", "peak_memory_bytes"}, ...]
  /// in the order of experience_seeds}; null for a pack logged before serving modes existed.
  nlohmann::json experience_pack;
  /// The doctor's results, if it ran.
  std::optional<tuning::noise_estimate> noise;
  tuning::loss_reference reference;
  std::optional<nlohmann::json> doctor_doc;
  /// Every trial attempt in order of proposal.
  std::vector<tuning::trial_record> trials;
  std::vector<reverification> reverifications;
  /// Attempts dispatched and not yet ended (trial id, attempt), with their clock. A TrialLost
  /// sets the attempt's wall_time_s from it: from its dispatch to the RunInterrupted that listed
  /// it, else to the TrialLost itself, at most the attempt's timeout_s (docs/event-log.md "What
  /// a lost attempt is charged"). The entry leaves when the attempt ends.
  std::map<std::pair<std::uint64_t, std::uint32_t>, attempt_clock> in_flight;
  /// Results that arrived for attempts already marked lost (TrialResultStale): recorded, never
  /// counted.
  std::uint64_t stale_results = 0;
  std::optional<nlohmann::json> promotion;
  std::optional<nlohmann::json> report;
  std::optional<nlohmann::json> applied;
  /// SearchStopped: why the search ended ({"reason", "detail", ...}), once it has.
  std::optional<nlohmann::json> search_stopped;
  /// ApplyStarted: apply's logged intent (the commit it is about to make).
  std::optional<nlohmann::json> apply_intent;
  /// The latest ProposalsMade document ({"n", "planner"}), and how many explore trials have
  /// been proposed from it since (its proposals are taken in order).
  std::optional<nlohmann::json> last_proposals;
  std::uint64_t proposals_taken = 0;
  /// The llm-proposer's exchanges in log order (issue 15; decide/llm.hpp): each LlmRequested,
  /// LlmResponded and LlmAnswerParsed document with "event": "request" | "response" | "parsed".
  std::vector<nlohmann::json> llm;
  /// RunInterrupted events (a signal stopped the run).
  std::uint64_t interruptions = 0;
  /// Stages started and completed (init, doctor, run, report, apply).
  std::vector<std::string> stages_started;
  std::vector<std::string> stages_completed;
  /// Events folded, and how many of unknown kinds were skipped.
  std::uint64_t events = 0;

  /// The record of trial `id` attempt `attempt`, or nullptr.
  [[nodiscard]] const tuning::trial_record* find(std::uint64_t id, std::uint32_t attempt) const;
  [[nodiscard]] tuning::trial_record* find(std::uint64_t id, std::uint32_t attempt);
  /// The latest attempt of every trial, in order of first proposal.
  [[nodiscard]] std::vector<const tuning::trial_record*> latest_attempts() const;
  /// The next unused trial id.
  [[nodiscard]] std::uint64_t next_trial_id() const;
  [[nodiscard]] bool stage_done(const std::string& stage) const;
};

/// The search policy of a run: its ContractLocked document's "policy" (a tuning::make_policy
/// name). Runs logged before the policy was recorded used "seeded_local_search/1"; a run not yet
/// locked gets tuning::default_policy_name.
std::string run_policy(const run_state& run);

/// Folds a run's stream into a run_state.
class run_projection final : public projection {
public:
  explicit run_projection(std::string run_id) { state_.run_id = std::move(run_id); }
  /// A projection restored from a snapshot: `state` is the fold of the stream's first `covered`
  /// events, of which `unknown_kinds_skipped` were of unknown kinds (state.events were
  /// applied); fold_stream() continues at sequence `covered`.
  run_projection(run_state state, std::uint64_t covered, std::uint64_t unknown_kinds_skipped);
  void apply(const recorded_event& event) override;
  [[nodiscard]] const run_state& state() const noexcept { return state_; }

private:
  run_state state_;
};

/// Reads the whole stream of `run_id` into a run_state. Errors from the log pass through.
[[nodiscard]] caf::expected<run_state> load_run(const event_log& log, const std::string& run_id);

// -- snapshots of the run projection (docs/event-log.md "Snapshots") ---------------------------

/// Format tag of the run_state snapshots this build writes and trusts. Any change to what the
/// fold computes or to the JSON layout below bumps the number; snapshots of another format are
/// ignored (the stream is folded from the start instead), never migrated or trusted.
inline constexpr const char* run_state_format = "infrarsi-run-state/8";

/// A run_state as canonical JSON text (compact, keys sorted, every field the fold fills).
/// Doubles are written shortest round-trip and read back bit-exactly; non-finite doubles, which
/// JSON lacks, are the strings "NaN", "Infinity" and "-Infinity"; a text field that is not valid
/// UTF-8 (workload output cut mid-character) is {"hex": "<bytes>"}; an absent optional is an
/// absent key. Two states serialize to the same bytes iff their fields are equal, so this is
/// also how tests compare states. Layout: docs/event-log.md.
[[nodiscard]] std::string serialize_run_state(const run_state& state);

/// Parses serialize_run_state's output. Error: errc::corrupt_data naming the first field that is
/// missing or of the wrong type (e.g. "trials[3].steps[7]: expected an array of 6 values").
[[nodiscard]] caf::expected<run_state> parse_run_state(std::string_view json);

/// How load_run_with_snapshot obtained the state.
struct run_load {
  run_state state;
  /// The stored snapshot was used and only the tail was folded.
  bool used_snapshot = false;
  /// Events of the stream the snapshot covered (0 when none was used).
  std::uint64_t snapshot_covered = 0;
  /// Events read from the log on top of the snapshot (or from the start).
  std::uint64_t events_folded = 0;
  /// Events of kinds unknown to this build among all covered (snapshot and tail), skipped.
  std::uint64_t unknown_kinds_skipped = 0;
  /// Why no snapshot was used ("" when one was), e.g. "no snapshot", "snapshot format
  /// 'infrarsi-run-state/0' is not 'infrarsi-run-state/1'", "snapshot covers 12 events but the
  /// stream holds 10", "snapshot unreadable: corrupt_data: ...", "snapshot unparsable: ...".
  std::string reason;
};

/// Reads `run_id`'s state from its stored snapshot plus the events after it. The snapshot is
/// used only when it is of format run_state_format, parses, covers no more events than the
/// stream holds, and is consistent (its run id, and applied + skipped events = covered);
/// otherwise the whole stream is folded and `reason` says why. Either way the state equals
/// load_run's. Errors from reading the events pass through; a snapshot that cannot be read is
/// not an error (it is ignored with its reason).
[[nodiscard]] caf::expected<run_load> load_run_with_snapshot(const event_log& log,
                                                             const std::string& run_id);

/// Stores a snapshot of `run_id`'s state (format run_state_format) covering the stream as it is
/// now, built with load_run_with_snapshot (so from the previous snapshot plus the tail). Returns
/// the number of events it covers. Errors: those of load_run_with_snapshot and of
/// event_log::write_snapshot (errc::not_permitted on a read-only log).
[[nodiscard]] caf::expected<std::uint64_t> snapshot_run(event_log& log, const std::string& run_id);

} // namespace infrarsi::store
