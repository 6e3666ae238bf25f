#pragma once
/// @file evaluator.hpp
/// What the search-quality benchmark (bench/search_quality.cpp) measures a policy against: one
/// task, a way to run one trial of a configuration and get it back finished and verified, and
/// an oracle that knows the noise-free step time of any configuration and the exhaustive
/// optimum. The simulator implements it in process (bench/sim_evaluator.hpp); a real-workload
/// implementation runs trials through the node-runner's launcher and takes its "truth" from
/// repeated measurements. Nothing here depends on the simulator.
///
/// Units: step times in seconds of the task's own clock (simulated seconds when the task's
/// contract says `simulated_time`), device-seconds = seconds x devices, memory in bytes.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tuning/contract_check.hpp"
#include "tuning/task.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::bench {

/// Canonical form of a configuration of `task` (for equality, keys and truth lookups): every
/// knob present (the task's defaults filled in), patches sorted and unique.
inline tuning::configuration canonical_configuration(const tuning::task_spec& task,
                                                     const tuning::configuration& c) {
  tuning::configuration out;
  out.knobs = task.default_assignment();
  for (const auto& [k, v] : c.knobs)
    out.knobs[k] = v;
  out.patches = c.patches;
  std::sort(out.patches.begin(), out.patches.end());
  out.patches.erase(std::unique(out.patches.begin(), out.patches.end()), out.patches.end());
  return out;
}

/// One task's trials and its oracle. Not thread-safe (implementations cache).
class evaluator {
public:
  virtual ~evaluator() = default;

  /// The task (loaded from its file; the same object for the evaluator's life).
  [[nodiscard]] virtual const tuning::task_spec& task() const = 0;

  /// Starts one benchmark run (one policy on this task with one seed). Trials measured after it
  /// draw their noise from (seed, trial_id, attempt): a simulator seeds its cluster noise with
  /// it, so two runs with the same seed see the same noise for the same trial ids; a real
  /// workload has its own noise and ignores it.
  virtual void begin_run(std::uint64_t seed) = 0;

  /// Runs one trial of `config` and returns it finished and verified, as the event-log
  /// projection would hold it after TrialCompleted and TrialVerified:
  ///  - `outcome` ok, oom, crash, timeout, launch_error or contract_violation; `finished` and
  ///    `verified` true; `trial_id`, `attempt`, `purpose`, `config` as given;
  ///  - ok: `steps` (every reported step), `timed_step_time_s` (median over the contract's timed
  ///    window, seconds), `phase_s`, `peak_memory_bytes`;
  ///  - contract_violation: `violations` non-empty, each "CODE: evidence" with a code of
  ///    tuning/contract_check.hpp (loss_drift, tokens, constraint, ...);
  ///  - `device_seconds`: what the trial cost (a failed trial costs what it used before it
  ///    failed; a trial refused before launch costs 0); `detail`: the failure in words.
  /// `early_stop` (nullptr: the trial runs to its end): the loss reference the trial's TrialSpec
  /// carries (decide::early_stop_reference, adapters::loss_reference_of): as the node-runner,
  /// the trial stops at the first step tuning::early_violation proves a violation, and ends
  /// contract_violation with the steps read so far, detail and violations[0]
  /// tuning::early_stop_detail, and the cost of what ran until then.
  /// `smoke_patches` (empty: no probe): the patches the TrialSpec names for the smoke probe
  /// (decide::smoke_patches): with the task's [smoke], as the node-runner, the smoke launch runs
  /// unpatched and patched first, a violation (tuning::smoke_violation) ends the trial as
  /// contract_violation (detail and violations[0] tuning::smoke_probe_detail) with no steps and the cost of the two
  /// launches, and otherwise their cost is added to the trial's device-seconds.
  /// Never throws for a bad configuration (that is an outcome); throws std::runtime_error only
  /// when the evaluator itself cannot run (an unreadable workload file).
  [[nodiscard]] virtual tuning::trial_record measure(const tuning::configuration& config,
                                                     std::uint64_t trial_id,
                                                     std::uint32_t attempt,
                                                     const std::string& purpose,
                                                     const tuning::loss_reference* early_stop =
                                                       nullptr,
                                                     const std::vector<std::string>&
                                                       smoke_patches = {}) = 0;

  /// Noise-free step time of `config`, seconds; nullopt when it would not give a usable trial
  /// (breaks a constraint, invalid layout, a patch that does not apply, out of memory, breaks
  /// the contract).
  [[nodiscard]] virtual std::optional<double> true_step_time(const tuning::configuration& config) = 0;

  /// The exhaustive optimum: the fastest configuration of the whole space (knobs x patch
  /// subsets) that fits in memory and keeps the contract. Step time in seconds, and the
  /// configuration in words ("tp=1,... | fused_rope,...").
  [[nodiscard]] virtual double optimum_step_time() = 0;
  [[nodiscard]] virtual std::string optimum_description() = 0;
  /// Size of the space the optimum was taken over (configurations priced); 0 when unknown.
  [[nodiscard]] virtual std::uint64_t optimum_space_size() { return 0; }

  /// Noise-free step time of the baseline (every knob at its default, no patch), seconds.
  [[nodiscard]] virtual double baseline_true_step_time() = 0;

  /// Pairs of the task's patches that do not apply together (what `infrarsi init` finds and
  /// hands the planner as planner_input::incompatible_patches), in task order.
  [[nodiscard]] virtual std::vector<std::pair<std::string, std::string>> incompatible_patches() = 0;

  /// Memory one rank may use before it runs out, bytes (planner_input::memory_capacity_bytes,
  /// as `infrarsi tune` sets it): the task's limits.device_memory_bytes, else
  /// limits.memory_cap_bytes; 0: unknown.
  [[nodiscard]] virtual double memory_capacity_bytes() const {
    const auto& l = task().limits;
    return static_cast<double>(l.device_memory_bytes > 0 ? l.device_memory_bytes
                                                         : l.memory_cap_bytes);
  }
};

} // namespace infrarsi::bench
