#pragma once
/// @file decisions.hpp
/// Every decision a tuning run logs, as a pure function of the task and the run folded up to the
/// decision: the planner's proposal, the doctor's calibration, a trial's verdict, a candidate's
/// re-verification and the promotion. The actors call these and log their output verbatim; the
/// replay audit (runtime/replay.hpp) calls them again on the events before each logged decision
/// and byte-compares. Nothing here reads a clock, a file, the network or a random device.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "adapters/trial_launcher.hpp"
#include "decide/next_step.hpp"
#include "messages/codec.hpp"
#include "store/run_projection.hpp"
#include "tuning/planner.hpp"
#include "tuning/task.hpp"

namespace infrarsi::decide {

/// The run's budget as locked at init (ContractLocked "budget": `tune --trials` included), else
/// the task's (runs locked before a key was recorded). Every decision reads the budget here, so a
/// resume cannot change it.
struct run_budget {
  /// Search (explore) trials.
  std::uint32_t trials = 0;
  /// The doctor's baseline runs.
  std::uint32_t baseline_repeats = 0;
  /// Candidates re-verified against the baseline.
  std::uint32_t verify_top = 0;
  /// Interleaved baseline/candidate pairs per candidate and round.
  std::uint32_t verify_repeats = 0;
  /// Wall-clock limit of the search stage, seconds (a supervisor's life; logged when it expires).
  double wall_clock_s = 0;
  /// The measurement rule the run was locked with (measurement_rule_of).
  bool adaptive = false;
  /// Adaptive rule: the doctor's target minimum detectable speedup (fraction), its baseline runs
  /// at most, and the interleaved pairs per candidate and round at most. A fixed-rule run (locked
  /// before these were recorded): 0, baseline_repeats and verify_repeats.
  double target_mds = 0;
  std::uint32_t max_baseline_repeats = 0;
  std::uint32_t max_verify_repeats = 0;
  /// Ablations before promotion at most (decide/minimal_change.hpp): the locked
  /// budget.ablations of a run locked with the minimal-change rule; 0 for a run locked before it.
  std::uint32_t ablations = 0;
};
run_budget budget_of(const tuning::task_spec& task, const store::run_state& run);

/// The measurement rule new runs are locked with (ContractLocked "measurement_rule"): the
/// doctor repeats the baseline until it reaches budget.target_mds or max_baseline_repeats and
/// re-measures a disturbed baseline (plan_doctor); re-verification is a group-sequential test
/// (reverification_looks). A run locked without the key measured with "fixed/0": exactly
/// baseline_repeats baselines and verify_repeats pairs per round, and replays so.
inline constexpr const char* current_measurement_rule = "adaptive/1";

/// True when `run` was locked with the adaptive rule (ContractLocked "measurement_rule" is
/// "adaptive/1"); false for runs locked before it existed, and before init.
bool adaptive_measurement(const store::run_state& run);

/// The margin a re-verified speedup must clear, as a fraction: the doctor's minimum detectable
/// speedup (BaselineCalibrated noise), and in adaptive runs at most budget.target_mds (a noisier
/// machine costs more measurements, not a higher bar). 0 before the doctor.
double promotion_margin(const store::run_state& run);

/// What the doctor does next under the adaptive rule, from the baseline attempts that have ended
/// (call it when none is in flight). Pure: from the logged results.
struct doctor_plan {
  /// Disturbed baselines (tuning::disturbed_repeats over their timed steps) to re-measure once,
  /// each as the next attempt of its trial, which then replaces it.
  std::vector<attempt_id> remeasure;
  /// New baseline runs to add: enough for the target at the 80 % upper confidence limit of the
  /// measured log-sd (tuning::log_sd_upper_limit, tuning::repeats_for_mds), at least one, within
  /// max_baseline_repeats; 0: calibrate now (the target is reached when the minimum detectable
  /// speedup at that limit is at most budget.target_mds, or the cap is).
  std::uint32_t more = 0;
  /// The doctor's verdict, BaselineCalibrated "measurement": {"rule", "target_mds",
  /// "max_baseline_repeats", "runs", "baseline_trials", "log_sd", "cv", "mds_reached",
  /// "log_sd_upper80", "mds_upper80", "reached", "runs_needed", "disturbed": [{"trial_id", "attempt", "step_time_s", "z",
  /// "action": "re-measured" | "kept"}], "verdict": "target_reached" | "max_repeats" |
  /// "too_few_runs", and when the target is not reached "would_reach": {"runs",
  /// "cv_at_max_repeats", "timed_steps" (null: more steps cannot, the runs differ by more than
  /// their steps' noise explains), "timed_steps_now"} and "message" in words}.
  nlohmann::json measurement;
};
doctor_plan plan_doctor(const tuning::task_spec& task, const store::run_state& run);

/// One look of the group-sequential re-verification of a candidate (adaptive rule).
struct sequential_look {
  /// 1-based look number, and the interleaved pairs it saw (look x verify_repeats).
  std::uint32_t look = 0;
  std::uint32_t pairs = 0;
  /// The O'Brien-Fleming critical z of the look and its nominal two-sided level
  /// (tuning::group_sequential_nominal_alpha).
  double critical_z = 0;
  double nominal_alpha = 0;
  /// Welch speedup estimate on the first `pairs` pairs with the interval at the nominal level:
  /// the repeated confidence interval of the look.
  tuning::speedup_estimate estimate;
  /// "continue", "promote" (the interval's lower bound clears 1 + the margin), "futile" (its
  /// upper bound is below 1 + the margin), "max_pairs" (undecided at the last look),
  /// "disturbed" (either side's log-sd above 3x the doctor's).
  std::string decision;
};

/// The sequential re-verification of `candidate` in `round` so far: every look whose pairs have
/// ended, up to the first that is not "continue". The method: a two-sided group-sequential test
/// on the Welch statistic of log step times with K = max_verify_repeats / verify_repeats equally
/// spaced looks and O'Brien-Fleming boundaries at overall level 0.05 (O'Brien and Fleming 1979;
/// Jennison and Turnbull 2000, ch. 2 and 9): at each look the repeated confidence interval uses
/// Student t at the look's nominal level, and all K intervals cover the true speedup at once
/// with probability about 0.95, so stopping at the first decisive look keeps the error of
/// every decision (promote, futile) at most about 0.05; a promotion of a candidate no faster than
/// the baseline needs the upper miss, probability about 0.025 per candidate. Re-testing every
/// look at 95 % would not (the error of K looks adds up). `failed` counts interleaved runs that
/// failed or broke the contract (then nothing is promotable). The runs are the latest attempt of
/// each interleaved trial, in trial order: an attempt lost and re-queued (or re-measured after
/// the clock check) is replaced by its next one in its trial's place, so a run that lost and
/// re-ran some looks at the same pairs as one that never lost them. Reads the budget from the
/// run's ContractLocked document.
struct sequential_state {
  std::vector<sequential_look> looks;
  std::uint32_t looks_max = 0;
  std::uint32_t pairs_per_look = 0;
  std::size_t failed = 0;
  /// The last look's decision, or "pending" before the first look.
  std::string decision = "pending";
  /// Usable baseline and candidate step times of the round, in log order.
  std::vector<double> baseline_times_s;
  std::vector<double> candidate_times_s;
};
sequential_state reverification_looks(const store::run_state& run, std::uint64_t candidate,
                                      std::uint32_t round);

/// The contract as locked at init (the `contract` object of the ContractLocked event; its SHA-256
/// is the run's contract hash).
nlohmann::json contract_json(const tuning::task_spec& task);

/// The keys in which `task`'s contract differs from a locked one (the `contract` object of a
/// ContractLocked event): "" when equal, else e.g. "contract.loss_rtol (locked 0.0001, now 0.02)".
std::string contract_changes(const nlohmann::json& locked, const tuning::task_spec& task);

/// Memory one rank may use before it runs out, bytes: limits.device_memory_bytes, else
/// limits.memory_cap_bytes; 0: unknown. Recorded at init (contract_locked
/// "memory_capacity_bytes"); a resume must not change it.
std::uint64_t memory_capacity_bytes(const tuning::task_spec& task);

/// The planner's input for a run as folded so far. Runs that record their policy take the search
/// budget and the memory capacity from their contract_locked document (so `tune --trials` sizes
/// the initial design, and a resume plans with what init saw); older runs from the task. Lost attempts carry no measurement and are
/// left out, so a run that lost a trial and re-ran it plans exactly as one that never lost it.
tuning::planner_input planner_input_for(const tuning::task_spec& task, const store::run_state& run);

/// What becomes of one served experience seed (issue 16, part 3): proposed in the initial design
/// now (`propose`), proposed already (`trial`: its explore trial), or not, with the reason
/// (tuning::seed_refusal, served twice, or the initial design full).
struct seed_disposition {
  tuning::configuration config;
  bool propose = false;
  std::optional<std::uint64_t> trial;
  std::string reason;
};

/// The dispositions of the run's served seeds, in the pack's order (best verified speedup
/// first); empty for runs whose pack predates "serving": "propose-or-explain/1" (their seeds
/// went to the policy, and replay keeps it so) and for runs without seeds. `policy_name` picks
/// the memory model's options (tuning::memory_options_for).
std::vector<seed_disposition> experience_seed_plan(const tuning::task_spec& task,
                                                   const store::run_state& run,
                                                   const std::string& policy_name);

/// The planner's reply: {"policy": ..., "proposals": [{"config", "predicted_speedup", "reason",
/// "prior_speedup"?, "p_oom"?}], "stop_reason"?} with at most `n` proposals (empty: the search
/// space is exhausted, or the policy's stopping rule said stop, with "stop_reason"), from the
/// run's policy (store::run_policy). An unknown policy gives no proposals and a stop_reason naming it.
/// With served seeds (experience_seed_plan not empty) the seeds to propose come first (reason
/// "initial design: experience bank seed"), the policy plans the rest of the batch without the
/// seeds, and "experience_seeds": [{"config", "proposed": true | "reason"}] says what became of
/// each seed not proposed in an earlier batch. `encodings`: the run's encoding cache kept by the
/// caller from one call to the next (tuning::encoding_cache; the planner actor keeps one per
/// run), or nullptr; the document is the same either way.
std::string proposal_doc(const tuning::task_spec& task, const store::run_state& run,
                         std::uint32_t n, tuning::encoding_cache* encodings = nullptr);

/// As above, from `policy` itself (a policy tuning::make_policy does not build, e.g. the
/// benchmark's optuna_tpe/1); the run's recorded policy name is not consulted.
std::string proposal_doc(const tuning::task_spec& task, const store::run_state& run,
                         std::uint32_t n, const tuning::planner_policy& policy,
                         tuning::encoding_cache* encodings = nullptr);

/// The scope lock of the run (init's SHA-256 of every editable and frozen file, by path relative
/// to the workload directory), read from its ContractLocked document; empty before init.
std::map<std::string, std::string> scope_lock(const store::run_state& run);

/// Why the doctor stops launching baseline runs before its repeats are done, or "": no baseline
/// attempt ended ok, and two ended launch_error with the same cause (their details equal once
/// digits are dropped: trial ids, directories and pids differ, the cause does not). A launch
/// error of the unchanged baseline configuration that repeats will repeat again; the doctor
/// then calibrates at once, which fails naming every attempt (calibrate_doc), instead of
/// spending the remaining repeats on it. The text: "trial 1 attempt 0 ended launch_error with
/// the cause of trial 0 attempt 0: DETAIL".
std::string baseline_launch_failure(const store::run_state& run);

/// The doctor's calibration from the run's finished baseline trials: noise (CV, log-sd, minimum
/// detectable speedup at alpha 0.05 / power 0.8), phase means, the loss reference. {"error": ...}
/// when no baseline completed its timed window: "no baseline run completed with its timed
/// window: trial 0 attempt 0 launch_error: DETAIL; ..." (each ended baseline attempt, its detail
/// cut to 300 characters). Adaptive runs: from the latest attempt of each
/// baseline trial, in trial order, the runs plan_doctor measured (a re-measured disturbed one is
/// replaced; a lost attempt is invisible, its re-run counts in its trial's place whatever the
/// log's order), with the doctor's verdict (`measurement`, plan_doctor).
std::string calibrate_doc(const tuning::task_spec& task, const store::run_state& run);

/// The verifier's verdict on one ended trial attempt: outcome, violations (reason-coded, see
/// tuning/contract_check.hpp), timed step time. Error errc::not_found if it has not ended.
caf::expected<std::string> check_doc(const tuning::task_spec& task, const store::run_state& run,
                                     std::uint64_t trial_id, std::uint32_t attempt);

/// The re-verification of candidate trial `candidate` from its latest round of interleaved pairs:
/// Welch speedup estimate on log step times with its 95% interval, and whether it may be
/// promoted (lower bound above 1 + the minimum detectable speedup, every run passed, variance
/// not above 3x the doctor's; otherwise `remeasure` once). Adaptive runs: the deciding look of
/// the sequential test (reverification_looks), its repeated confidence interval, every look
/// (`looks`), the method (`sequential`) and the margin (`promotion_margin`). Error
/// errc::not_found.
caf::expected<std::string> reverify_doc(const store::run_state& run, std::uint64_t candidate);

/// The candidates to re-verify: up to budget_of(task, run).verify_top distinct verified explore
/// configurations faster than the baseline's mean, fastest first, as (trial id, configuration).
std::vector<std::pair<std::uint64_t, tuning::configuration>>
reverify_candidates(const tuning::task_spec& task, const store::run_state& run);

/// The promotion decision over the logged re-verifications: the promotable candidate with the
/// highest verified speedup, or {"promoted": false, "reason": ...}. A run locked with the
/// minimal-change rule promotes the smallest accepted ablation of that bundle instead
/// (decide/minimal_change.hpp), with the plan in "minimal_change" and the bundle's trial in
/// "bundle_trial".
nlohmann::json promotion_decision(const tuning::task_spec& task, const store::run_state& run);

/// The ExperienceRecorded document of a promotion (issue 16): the finding the experience bank
/// files, {"hardware": ContractLocked hardware_fingerprint, "workload": its workload_signature,
/// "run": run id, "config": the promoted configuration (knobs and patch names), "change": its
/// difference from the baseline, "speedup", "ci_low", "ci_high" (the verified speedup and its
/// 95 % interval, as in `promotion`), "pairs", "promotion_sequence": the stream sequence of the
/// CandidatePromoted it comes with}; std::nullopt when `promotion` promoted nothing. Appended in
/// the same batch as the CandidatePromoted (the supervisor), recomputed by replay.
/// Runs locked with identities add "hardware_identity", "workload_identity",
/// "peak_memory_bytes" and "failed_settings"; runs locked with "experience_record" 2 also what
/// the models learnt: "effects" (decide::prior_revision_of's effects with at least one usable
/// trial: each setting's revised speedup with its 95 % interval) and "memory"
/// (decide::memory_model_of without its per-trial predictions: the per-setting memory prices
/// with their intervals and the OOM boundary around the baseline and the promoted
/// configuration), both computed with `promotion` as the run's promotion.
std::optional<nlohmann::json> experience_record_doc(const tuning::task_spec& task,
                                                    const store::run_state& run,
                                                    const nlohmann::json& promotion,
                                                    std::uint64_t promotion_sequence);

/// The finding format ContractLocked "experience_record" asks for: 2 (effects and memory).
inline constexpr int experience_record_version = 2;

/// The ContractLocked document of init: the task's text and source path ("task_toml",
/// "task_path": the log is self-contained, replay needs no file), the contract and its SHA-256,
/// the knobs and patches with the scope lock (`lock`, adapters::lock_scope), the budget
/// (`search_trials` is `tune --trials` or budget.trials), hardware and its fingerprint, the
/// workload signature, seed, search policy and memory capacity.
nlohmann::json contract_locked_doc(const tuning::task_spec& task, const nlohmann::json& lock,
                                   const nlohmann::json& hardware,
                                   const std::string& hardware_fingerprint,
                                   const std::string& task_text, std::uint64_t seed,
                                   std::uint32_t search_trials);

/// The loss reference a trial of `run` carries for the node-runner's early stop
/// (trial_request::loss_reference; docs/node-runner.md "Early stop"):
/// tuning::early_stop_reference(run.reference) once the doctor has calibrated (run.reference.loss
/// not empty), else nullopt. The supervisor and the bench's run driver both call it.
std::optional<tuning::loss_reference> early_stop_reference(const store::run_state& run);

/// The patches of `config` that the smoke probe must try first (trial_request::smoke_patches):
/// those never in a usable trial of the run (any purpose; tuning::trial_record::usable), in
/// config order; none when the task has no [smoke] launch. The supervisor puts them into each
/// TrialSpec it dispatches, the benchmark's run driver into each measurement.
std::vector<std::string> smoke_patches(const tuning::task_spec& task, const store::run_state& run,
                                       const tuning::configuration& config);

/// The TrialSpec of an attempt: `req` (adapters::make_trial_spec) with its structured purpose.
messages::trial_spec_msg trial_spec(const adapters::trial_request& req, tuning::purpose_kind kind,
                                    std::uint64_t candidate_trial, std::uint32_t round);

/// The terminal result of an attempt refused before launch (contract_violation, `why`).
messages::trial_result_msg refused_result(std::uint64_t trial_id, std::uint32_t attempt,
                                          const std::string& why);

/// A StageEvent payload for stage "init", "doctor", "run", "report" or "apply".
messages::stage_event_msg stage_payload(const std::string& stage);

/// What a planner reply becomes: the ProposalsMade document {"n", "at", "planner"} (`at`: the
/// planner saw the run's first `at` events), one explore launch
/// per proposal (trial ids from run.next_trial_id()), and when there is none the SearchStopped
/// document (reason "policy"). Error errc::corrupt_data for an unreadable reply or
/// configuration, errc::invalid_argument for a proposal that breaks the task's constraints.
struct batch {
  nlohmann::json document;
  std::vector<launch> launches;
  nlohmann::json stopped;
};
caf::expected<batch> proposal_batch(const tuning::task_spec& task, const store::run_state& run,
                                    std::uint32_t n, std::uint64_t at,
                                    const std::string& planner_reply);

/// The commit message of a promotion: the change, the run, the verified speedup and interval,
/// the launch configuration.
std::string commit_message(const tuning::task_spec& task, const std::string& run_id,
                           const nlohmann::json& promotion);

} // namespace infrarsi::decide
