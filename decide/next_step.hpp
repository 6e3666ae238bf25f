#pragma once
/// @file next_step.hpp
/// The supervisor's step function: given a run as folded so far, the free node slots and what the
/// supervisor has outstanding (requests it sent and has no answer to yet, which are not in the
/// log), what to do next and why. Pure: no CAF, no I/O, no clock — the wall-clock expiry is an
/// input the supervisor logs (SearchStopped) before acting on it. The supervisor actor, the
/// replay audit and the search-quality benchmark drive runs with this one function.
///
/// The stage machine it encodes (docs/architecture.md "The step function"):
///   init -> doctor (baseline_repeats baselines in parallel; adaptive runs: a disturbed one
///           re-measured and more until the target MDS or the cap, plan_doctor; calibrate,
///           verdicts)
///        -> run (propose batches as large as the free slots until the budget, the policy's stop
///           rule or the wall clock ends the search; verify every result; then re-verify the
///           candidates, each in its own sequence of interleaved baseline/candidate runs
///           (adaptive runs: until the group-sequential test decides, reverification_looks);
///           minimal-change runs: the ablations of the winning bundle, each an ablation trial
///           and then its own re-verification, plan_ablations; promote) -> report -> apply.
/// Before any of that: an attempt dispatched by an earlier life of the supervisor and never
/// finished is lost; a lost attempt is re-queued once as the next attempt of the same trial (up
/// to max_attempts); an attempt that failed only the harness-clock check is re-queued once the
/// same way (clock_remeasure_due); a trial proposed but never dispatched is dispatched.

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/run_projection.hpp"
#include "tuning/task.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::decide {

/// (trial id, attempt).
using attempt_id = std::pair<std::uint64_t, std::uint32_t>;

/// Attempts of one trial at most (each lost attempt is re-queued once as the next one; a trial
/// whose attempt max_attempts - 1 is lost stays lost).
inline constexpr std::uint32_t max_attempts = 8;

/// What the supervisor has asked for and not yet been answered (not in the log).
struct outstanding {
  /// Attempts this supervisor dispatched whose result has not arrived.
  std::set<attempt_id> running;
  /// Attempts whose verdict was requested.
  std::set<attempt_id> verifying;
  /// Candidates whose re-verification estimate was requested.
  std::set<std::uint64_t> reverifying;
  /// A proposal batch was requested from the planner.
  bool proposing = false;
  /// The doctor's calibration was requested.
  bool calibrating = false;
  /// init, promote, report or apply is in progress (they run alone).
  bool exclusive = false;
};

/// One trial attempt to hand to a node-runner.
struct launch {
  std::uint64_t trial_id = 0;
  std::uint32_t attempt = 0;
  tuning::configuration config;
  tuning::purpose_kind kind = tuning::purpose_kind::unknown;
  /// verify-*: the candidate trial and the round.
  std::uint64_t candidate_trial = 0;
  std::uint32_t round = 0;
  /// Its TrialProposed is already logged (a trial queued before a restart, or just proposed).
  bool proposed = false;
};

enum class step_kind {
  /// Nothing to do until an answer arrives.
  wait,
  /// The run is complete (apply done).
  done,
  /// Append StageStarted(stage).
  begin_stage,
  /// Append StageCompleted(stage).
  end_stage,
  /// Lock the scope and contract, load priors and experience (ContractLocked, PriorsLoaded,
  /// ExperienceSeeded).
  init,
  /// Append TrialLost for `attempts` (dispatched by an earlier life, never finished).
  lose,
  /// Append TrialProposed (unless proposed) and TrialDispatched for each of `launches`, then send
  /// each to a free node-runner.
  launch,
  /// Ask the verifier for the verdicts of `attempts` (TrialVerified each).
  verify,
  /// Ask the planner for `n` proposals (ProposalsMade, then TrialProposed for each).
  propose,
  /// Append SearchStopped(`stop`).
  stop_search,
  /// Ask the verifier for the doctor's calibration (BaselineCalibrated).
  calibrate,
  /// Ask the verifier for candidate `candidate`'s re-verification estimate (CandidateReverified);
  /// `candidate` is an explore trial, or an ablation trial (decide/minimal_change.hpp).
  reverify,
  /// Append CandidatePromoted (decide::promotion_decision).
  promote,
  /// Write the report (ReportWritten).
  report,
  /// Apply the promotion (ApplyStarted, then ChangesApplied).
  apply,
  /// Ask the LLM again (round `n`: decide::llm_round_due): its requests, answers and parses are
  /// logged as at init; a valid priors answer is logged with the PriorsLoaded it gives.
  llm_round,
};

/// The name of a step kind ("wait", "launch", ...), for progress lines and tests.
const char* to_string(step_kind k);

/// What to do next.
struct step {
  step_kind kind = step_kind::wait;
  /// begin_stage / end_stage: "init", "doctor", "run", "report" or "apply".
  std::string stage;
  /// lose / verify.
  std::vector<attempt_id> attempts;
  /// launch: at most the free slots.
  std::vector<launch> launches;
  /// propose: the batch size (>= 1, <= free slots, <= the search trials left); llm_round: the
  /// round.
  std::uint32_t n = 0;
  /// reverify.
  std::uint64_t candidate = 0;
  /// stop_search: the SearchStopped document {"reason", "detail", "search_trials", "budget"}.
  nlohmann::json stop;
  /// Why, in words (progress lines).
  std::string reason;
};

/// Inputs of next_step that are not in the log.
struct step_input {
  /// Node slots not running anything.
  std::uint32_t free_slots = 0;
  outstanding busy;
  /// The search stage's wall-clock limit has passed (the supervisor's own timer).
  bool wall_clock_expired = false;
};

/// The next thing to do for `run` (folded up to now) of `task`. Deterministic in its inputs.
/// Budgets are those logged at init (budget_of). Nothing is proposed while a finished trial waits
/// for its verdict (the planner would see a result without its timed step time).
step next_step(const tuning::task_spec& task, const store::run_state& run, const step_input& in);

/// The re-measure rule of the harness-clock check (tuning::clock_rule::step_median): a verified
/// attempt whose every violation is the clock check's (code `clock`) may be a loaded machine
/// rather than a fake timer, so it is re-measured once: re-queued as the next attempt of the same
/// trial (same configuration, purpose, candidate and round), which then replaces it (its
/// verdict counts; a re-verification pair is re-run, not vetoed). True when `t` is such an
/// attempt, is the latest of its trial, no earlier attempt of the trial failed the clock check
/// alone (a second failure stands), it is not a doctor's baseline (nothing depends on a
/// baseline's verdict) and attempt + 1 < max_attempts. Pure: from the logged verdicts only.
bool clock_remeasure_due(const store::run_state& run, const tuning::trial_record& t);

/// Search trials of the run: distinct explore trial ids proposed so far.
std::uint32_t search_trials(const store::run_state& run);

/// The SearchStopped document for `reason` ("budget", "policy", "wall_clock") and `detail`.
nlohmann::json search_stopped_doc(const std::string& reason, const std::string& detail,
                                  std::uint32_t search_trials, std::uint32_t budget);

} // namespace infrarsi::decide
