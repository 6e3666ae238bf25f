#pragma once
/// @file launch_config.hpp
/// What the apply stage hands the user for a promoted configuration: its launch command rendered
/// like a trial's rank 0 (promoted/launch.json) and the source paths its patches touch, checked
/// against the task's editable and frozen scopes. Pure apart from reading the patch files.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tuning/task.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::adapters {

/// The launch command of `config`, rendered like a trial's rank 0 (built-ins trial_id = 0,
/// attempt = 0, trial_dir = ".", rank = 0, memory_cap_bytes = the task's cap, world_size as the
/// task's world_size template renders): {"config": store::to_json(config), "workdir",
/// "argv": [...], "env": {...}, "world_size": text ("1" when the template does not render),
/// "speedup", "ci_low"}, and "env_unset": [names] when a workload.env knob of the configuration is
/// "unset" (tuning::unset_env_value: the variable is left out of "env" and must not be set when
/// launching). With workload.launcher "slurm" also "launcher": "slurm" and "srun_args": [...]
/// (rendered); with "torchrun", "launcher", "torchrun_program" and "torchrun_args" (rendered). `speedup` and `ci_low` are the verified speedup (x, baseline time over
/// candidate time) and the lower end of its 95% interval. A template that does not render (an
/// unknown placeholder, an unbalanced brace) is kept as written; never fails. This is the content
/// of promoted/launch.json (written as dump(2) plus a newline).
nlohmann::json launch_config(const tuning::task_spec& task, const tuning::configuration& config,
                             double speedup, double ci_low);

/// Paths the patches of a promoted configuration touch.
struct patch_paths_report {
  /// Every path (relative to the workload directory) a patch names, unique, in order of first
  /// appearance over the patches in the configuration's order.
  std::vector<std::string> touched;
  /// The touched paths that are outside the editable scope or inside the frozen one, unique, in
  /// the same order. Empty: the promotion may be applied.
  std::vector<std::string> outside;
};

/// The paths each patch of `config` touches (adapters::patch_paths over its diff) checked with
/// adapters::path_in_scope against task.scope. Reads the patch files; a patch name the task does
/// not define, or a patch file that cannot be read, contributes no paths (the caller applies
/// the patch files and fails there).
patch_paths_report promoted_patch_paths(const tuning::task_spec& task,
                                        const tuning::configuration& config);

} // namespace infrarsi::adapters
