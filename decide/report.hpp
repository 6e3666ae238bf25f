#pragma once
/// @file report.hpp
/// The run's report: report.json (machine-readable) and report.md (for people), derived only from
/// the folded event log (store/run_projection.hpp) and the task.

#include <string>

#include <nlohmann/json.hpp>

#include "store/run_projection.hpp"
#include "tuning/task.hpp"

namespace infrarsi::decide {

/// report.json: run, task, hardware, baseline (configuration, step time, noise, phases), every
/// trial (configuration, outcome, timed step time, speedup vs baseline, violations, evidence,
/// wall time, device-seconds, peak memory), re-verifications, the promoted configuration with
/// its verified speedup and 95% interval and the source paths its patches touch, device-seconds
/// spent on failed trials by outcome, "contract_coverage" (the checks the task's output cannot
/// decide, tuning::vacuous_checks, and what enforces the work instead, tuning::work_enforced_by),
/// and MFU where the workload's FLOPs per step are known
/// (task constant `flops_per_step` and `peak_flops`; otherwise null with the reason).
nlohmann::json make_report(const tuning::task_spec& task, const store::run_state& run);

/// report.md rendered from report.json.
std::string render_markdown(const nlohmann::json& report);

} // namespace infrarsi::decide
