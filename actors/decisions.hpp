#pragma once
/// @file decisions.hpp
/// Every decision a tuning run logs, as a pure function of the task and the run folded up to the
/// decision: the planner's proposal, the doctor's calibration, a trial's verdict, a candidate's
/// re-verification and the promotion. The actors call these and log their output verbatim; the
/// replay audit (runtime/replay.hpp) calls them again on the events before each logged decision
/// and byte-compares. Nothing here reads a clock, a file, the network or a random device.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "store/run_projection.hpp"
#include "tuning/planner.hpp"
#include "tuning/task.hpp"

namespace infrarsi::actors {

/// Purpose suffix of a candidate's re-verification runs ("verify-baseline" + tag,
/// "verify-candidate" + tag): "/<id>" for the first round, "/<id>#<round>" after.
std::string verify_tag(std::uint64_t candidate, std::uint32_t round);

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

/// The planner's reply: {"policy": ..., "proposals": [{"config", "predicted_speedup", "reason",
/// "prior_speedup"?, "p_oom"?}], "stop_reason"?} with at most `n` proposals (empty: the search
/// space is exhausted, or the policy's stopping rule said stop, with "stop_reason"), from the
/// run's policy (store::run_policy). An unknown policy gives no proposals and a stop_reason naming it.
std::string proposal_doc(const tuning::task_spec& task, const store::run_state& run,
                         std::uint32_t n);

/// The doctor's calibration from the run's finished baseline trials: noise (CV, log-sd, minimum
/// detectable speedup at alpha 0.05 / power 0.8), phase means, the loss reference. {"error": ...}
/// when no baseline completed its timed window.
std::string calibrate_doc(const tuning::task_spec& task, const store::run_state& run);

/// The verifier's verdict on one ended trial attempt: outcome, violations (reason-coded, see
/// tuning/contract_check.hpp), timed step time. Error errc::not_found if it has not ended.
caf::expected<std::string> check_doc(const tuning::task_spec& task, const store::run_state& run,
                                     std::uint64_t trial_id, std::uint32_t attempt);

/// The re-verification of candidate trial `candidate` from its latest round of interleaved pairs:
/// Welch speedup estimate on log step times with its 95% interval, and whether it may be
/// promoted (lower bound above 1 + the minimum detectable speedup, every run passed, variance
/// not above 3x the doctor's; otherwise `remeasure` once). Error errc::not_found.
caf::expected<std::string> reverify_doc(const store::run_state& run, std::uint64_t candidate);

/// The candidates to re-verify: up to budget.verify_top distinct verified explore
/// configurations faster than the baseline's mean, fastest first, as (trial id, configuration).
std::vector<std::pair<std::uint64_t, tuning::configuration>>
reverify_candidates(const tuning::task_spec& task, const store::run_state& run);

/// The promotion decision over the logged re-verifications: the promotable candidate with the
/// highest verified speedup, or {"promoted": false, "reason": ...}.
nlohmann::json promotion_decision(const tuning::task_spec& task, const store::run_state& run);

} // namespace infrarsi::actors
