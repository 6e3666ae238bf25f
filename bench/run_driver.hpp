#pragma once
/// @file run_driver.hpp
/// One benchmark run driven exactly as the supervisor (actors/supervisor.cpp) drives a tuning
/// run, in process and with a simulated clock: an event log (store::memory_event_log) and its
/// projection (store::run_projection), and a loop on decide::next_step whose every step is
/// answered with the decision functions the supervisor's actors call (decide/decisions.hpp) and
/// logged as the supervisor logs it:
///
///   begin_stage / end_stage  StageStarted / StageCompleted
///   init                     ContractLocked (decide::contract_locked_doc with the benchmark's
///                            budget, "policy" = the policy under test, the evaluator's patch
///                            conflicts and memory capacity), PriorsLoaded, ExperienceSeeded
///                            (no seeds)
///   launch                   TrialProposed (unless proposed) and TrialDispatched with
///                            decide::trial_spec (a patch outside the editable scope: a refused
///                            TrialCompleted instead, as do_launch); the evaluator measures the
///                            trial, which is then in flight until its simulated end
///   (a trial ends)           TrialCompleted with the evaluator's result as a TrialResult
///   verify                   TrialVerified (decide::check_doc)
///   propose                  ProposalsMade + TrialProposed each (decide::proposal_doc, or the
///                            policy object for one tuning::make_policy does not build, e.g.
///                            optuna_tpe/1; decide::proposal_batch), SearchStopped when empty
///   stop_search              SearchStopped
///   calibrate                BaselineCalibrated (decide::calibrate_doc)
///   reverify                 CandidateReverified (decide::reverify_doc)
///   promote                  CandidatePromoted (decide::promotion_decision)
/// The run ends with its "run" stage (no report, no apply).
///
/// Concurrency, deterministically: `nodes` slots; up to `nodes` trials are in flight. A trial
/// launched at simulated time T ends at T + its wall time (the evaluator's wall_time_s: the
/// simulator's simulated wall time, a real trial's measured one; 0 for a trial refused before
/// launch). When next_step says wait, the in-flight trial that ends first (ties: lowest trial id,
/// then attempt) completes: the clock moves to its end and its TrialCompleted is folded. So with
/// nodes > 1 the planner proposes with the trials still in flight in its history (proposed and
/// dispatched, not finished), exactly as the supervisor's planner does (next_step's free slots =
/// nodes - in flight, busy.running = the in-flight set). The evaluator measures a trial when it
/// is launched (its result is a function of the configuration, seed, trial id and attempt for the
/// simulator); the result is revealed only at the trial's end.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/evaluator.hpp"
#include "decide/experience_serving.hpp"
#include "messages/codec.hpp"
#include "store/run_projection.hpp"
#include "tuning/planner.hpp"
#include "tuning/priors.hpp"

namespace infrarsi::bench {

/// How one run is driven. Defaults inline.
struct driver_options {
  /// Node slots (trials in flight at most); >= 1.
  std::uint32_t nodes = 1;
  /// The budget logged at init (ContractLocked "budget"): search trials, doctor baselines,
  /// candidates re-verified, interleaved pairs per candidate and round.
  std::uint32_t trials = 40;
  std::uint32_t baseline_repeats = 3;
  std::uint32_t verify_top = 2;
  std::uint32_t verify_repeats = 3;
  /// The policy under test (ContractLocked "policy").
  std::string policy_name;
  /// Used for proposals when tuning::make_policy(policy_name) builds none (optuna_tpe/1); else
  /// ignored (decide::proposal_doc builds the run's policy, as the planner actor does).
  const tuning::planner_policy* policy = nullptr;
  /// The run's seed (RunCreated; the planner's seed and the evaluator's noise).
  std::uint64_t seed = 0;
  /// The priors the llm-proposer would load (PriorsLoaded).
  tuning::prior_set priors;
  /// The task file's text (ContractLocked "task_toml"; "" is fine).
  std::string task_text;
  /// Set: the run is served `experience_records` (ExperienceRecorded documents of earlier runs)
  /// by decide::experience_pack in this mode, as the curator serves a bank; unset: no seeds.
  std::optional<decide::experience_mode> experience;
  std::vector<nlohmann::json> experience_records;
  /// False: the pack's prior adjustment (decide::experience_priors) is not applied: the
  /// benchmark's ablation of it (`--no-experience-priors`); the supervisor always applies it.
  bool experience_priors = true;
};

/// When a trial attempt ran on the simulated clock, seconds.
struct trial_times {
  double launched_s = 0;
  double ended_s = 0;
};

/// A driven run.
struct driven_run {
  /// The run folded at the end (its "run" stage done, or where it stopped on an error).
  store::run_state state;
  /// Non-empty: the run could not finish (the policy threw, the planner's reply was refused,
  /// no baseline ran, the evaluator failed), as the supervisor would end it.
  std::string error;
  /// The planner's proposal item (config, predicted_speedup, reason, ...) of each explore trial.
  std::map<std::uint64_t, nlohmann::json> proposals;
  /// Simulated times of every attempt (trial id, attempt).
  std::map<std::pair<std::uint64_t, std::uint32_t>, trial_times> times;
  /// Simulated time at which the last search (explore) trial ended, and the run ended.
  double search_end_s = 0;
  double end_s = 0;
  /// Trials whose verdict (decide::check_doc against the run's own loss reference) differs in
  /// usability from the evaluator's own judgement (expected 0).
  std::size_t verdict_mismatches = 0;
  /// Planner calls (ProposalsMade events) and the largest number of trials in flight.
  std::size_t proposal_calls = 0;
  std::uint32_t max_in_flight = 0;
  /// The planner_input's initial_design at the first proposal (decide::planner_input_for).
  std::size_t initial_design = 0;
  /// The ExperienceRecorded document appended with the promotion (null: nothing promoted).
  nlohmann::json experience_record;
};

/// Drives one run of `ev`'s task (ev.begin_run(o.seed) is called here). Never throws for what
/// the supervisor would end a run for (see driven_run::error).
driven_run drive_run(evaluator& ev, const driver_options& o);

/// An evaluator's trial as the node-runner's TrialResult (what TrialCompleted carries): the
/// outcome before the verifier (a trial that ran its steps and failed only the contract check is
/// Ok: the verifier judges it again), steps with their phases, wall time, device-seconds, peak
/// memory, detail (the first violation of one refused before launch) and the final line.
messages::trial_result_msg result_message(const tuning::trial_record& rec);

} // namespace infrarsi::bench
