#pragma once
/// @file experience_seeds.hpp
/// Whether an experience-bank seed (a configuration promoted in an earlier run on the same
/// hardware and workload) can be proposed now (issue 16, part 3: every served seed is proposed
/// in the initial design or the report says why not). Pure and deterministic.

#include <string>

#include "tuning/planner.hpp"

namespace infrarsi::tuning {

/// Why `seed` cannot be proposed given `in` (its task, history, excluded and incompatible
/// patches, memory capacity), "" when it can. Checked in this order, the first that holds is
/// the reason: a knob the task does not have, a task knob it leaves unset, a value outside the
/// knob's searched values, a patch the task does not have ("not in this task's search space:
/// ..."); it is the baseline configuration; it was tried in this run already; a patch excluded
/// at init (out of scope, does not apply alone) or a pair that does not apply together; a
/// broken constraint (tuning::first_violation's text); at least as memory-hungry by the task's
/// tags as a configuration that ran out of memory; the censored memory model of
/// `memory_policy` (tuning::fit_run_memory with memory_options_for(memory_policy, search trials
/// spent, in.search_budget)) predicting
/// P(OOM) > 0.5 ("the memory model predicts it does not fit: P(OOM) 0.73").
std::string seed_refusal(const planner_input& in, const configuration& seed,
                         const std::string& memory_policy);

} // namespace infrarsi::tuning
