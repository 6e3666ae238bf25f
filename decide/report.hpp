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
/// wall time, device-seconds, peak memory and its "memory_source": tuning::to_string of the
/// trial's memory_source, "unobserved" when a task declaring device memory measured none),
/// re-verifications, the promoted configuration with
/// its verified speedup and 95% interval and the source paths its patches touch, device-seconds
/// spent on failed trials by outcome, "contract_coverage" (the checks the task's output cannot
/// decide, tuning::vacuous_checks, and what enforces the work instead, tuning::work_enforced_by),
/// and MFU where the workload's FLOPs per step are known
/// (task constant `flops_per_step` and `peak_flops`; otherwise null with the reason).
/// Per trial also "verdict" (ok, contract_violation, or the outcome), "tokens_per_s" (tokens per
/// step / timed step time) and "mfu". What report.html draws (decide/report_html.hpp), all
/// derived here: "search_progress" (finished trials in log order: speedup, best so far),
/// "noise_band" (exp(+-1.96 x the doctor's log sd) and the promotion bar 1 + margin),
/// "prior_revision" effects with 95% intervals (prior: exp(+-1.96 x time_model_options::main_sd)
/// around the prior; revised: exp(+-1.96 x posterior log sd)) and "points" (per usable search
/// trial: measured, prior and sequential posterior speedups), "memory_model" (the censored
/// peak-memory model as the planner fits it, tuning::fit_run_memory: per setting a memory factor
/// with its 95% interval and bytes over the baseline's predicted peak; per OOM or measured trial
/// the predicted peak with its 95% interval, the measured peak, P(OOM); the capacity),
/// "top_configurations" (the 10 fastest usable configurations, then failed trials: s/step,
/// speedup, tokens/s, MFU, peak memory, verdict) and promoted "attribution" (each setting of the
/// promoted change: the revised model's speedup alone with its interval, and the speedup of a
/// usable trial that changed only it; "rest" = verified speedup / product of the model's;
/// "ablation": the ablation that undid it before the promotion, decide/minimal_change.hpp).
/// With served experience seeds, "experience_seeds": per seed its "config" and "change", and
/// either the explore "trial" it was proposed as (its "outcome" and "speedup") or the "reason"
/// it was not (decide::experience_seed_plan).
nlohmann::json make_report(const tuning::task_spec& task, const store::run_state& run);

/// report.md rendered from report.json.
std::string render_markdown(const nlohmann::json& report);

/// report.json "prior_revision" (tuning::revise_priors over the run's trials not lost, noise
/// the doctor's log sd or 0.02): {"policy", "search_trials", "priors_given", "spearman_prior",
/// "spearman_posterior" (null when undefined), "effects": per one-hot feature ("knob=value" or
/// "+patch") "prior_speedup", "prior_low", "prior_high" (null without a prior),
/// "posterior_speedup", "posterior_log_sd", "posterior_low", "posterior_high" (95 %:
/// exp(+-1.96 sd)), "trials" (usable trials with it active), "confounded_with"; "points"}.
/// Also what a finding records of the run's effects (decide::experience_record_doc).
nlohmann::json prior_revision_of(const tuning::task_spec& task, const store::run_state& run);

/// report.json "memory_model": the censored peak-memory model the planner fits
/// (tuning::fit_run_memory over decide::planner_input_for): {"fitted", "capacity_bytes",
/// "capacity_inferred", "device_memory_bytes", "memory_cap_bytes", "why" (not fitted),
/// "baseline_predicted_bytes", "prices": per single change from the baseline its "feature",
/// peak-memory "factor" with "factor_low"/"factor_high" (95 %) and "bytes" over the baseline's
/// predicted peak; "trials": per OOM or measured trial the predicted peak (bytes, 95 %), the
/// measured peak and P(OOM); "boundary": per numeric knob, around the baseline and the promoted
/// configuration, P(OOM) of each value (1 - Phi((log capacity - mean) / sd)) and "fits_up_to",
/// the largest value with P(OOM) < 0.5}. Also what a finding records of the run's memory.
nlohmann::json memory_model_of(const tuning::task_spec& task, const store::run_state& run);

} // namespace infrarsi::decide
