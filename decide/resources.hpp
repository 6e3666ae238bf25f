#pragma once
/// @file resources.hpp
/// What a run spends and what it keeps on disk, as pure functions of its events: the
/// device-seconds charged to every attempt (lost ones included) and which trials keep their copy
/// of the workload (docs/tune.md "Device-seconds" and "Trial directories").

#include <cstdint>
#include <vector>

#include "decide/next_step.hpp"
#include "store/run_projection.hpp"
#include "tuning/task.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::decide {

/// Device-seconds charged to attempt `t` of `task`: what its node-runner measured
/// (TrialResult.device_seconds: wall time x world size) when it ended with a result; for a lost
/// attempt, the wall time the log shows it held its node (t.wall_time_s, store::run_projection:
/// from TrialDispatched to the RunInterrupted that listed it, else to the TrialLost, at most its
/// timeout) times its world size (tuning::world_size_of for its knobs; 1 when the template does
/// not render). 0 for an attempt not ended. Seconds of device time.
double charged_device_seconds(const tuning::task_spec& task, const tuning::trial_record& t);

/// Device-seconds a run has spent: charged_device_seconds summed over every attempt.
struct device_spend {
  /// Every attempt, device-seconds.
  double total_s = 0.0;
  /// Lost attempts (TrialLost): how many, and their device-seconds (included in total_s).
  std::uint32_t lost_attempts = 0;
  double lost_s = 0.0;
};

/// The device-seconds `run` has spent (the report's "device_seconds_total" and the run summary
/// line both come from here).
device_spend device_seconds_spent(const tuning::task_spec& task, const store::run_state& run);

/// Ended attempts that keep their copy of the workload by default, besides the kept trials
/// (removable_trial_copies; `infrarsi tune --keep-trial-copies`).
inline constexpr std::uint32_t default_keep_trial_copies = 4;

/// The retention rule of trial copies (docs/tune.md "Trial directories"): the attempts whose
/// copy of the workload (the node's trial-<id>-<attempt>/workdir) may be removed now. Kept are:
/// every attempt not ended, or ended and still waiting for its verdict; the latest attempt of
/// the run's first baseline trial, of every re-verification candidate (reverify_candidates) and
/// re-verified candidate, and of the promoted trial; and the last `keep_last` ended attempts in
/// log order. Every other ended attempt is removable, in log order. The rule names copies only:
/// a trial's logs (rank-N.stdout/.stderr, result) are never removed.
std::vector<attempt_id> removable_trial_copies(const tuning::task_spec& task,
                                               const store::run_state& run,
                                               std::uint32_t keep_last);

} // namespace infrarsi::decide
