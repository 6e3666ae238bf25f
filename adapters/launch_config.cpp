#include "adapters/launch_config.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>

#include "adapters/environment.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::adapters {

nlohmann::json launch_config(const tuning::task_spec& task, const tuning::configuration& config,
                             double speedup, double ci_low) {
  auto vars =
      tuning::template_vars(task, config.knobs,
                            {{"trial_id", "0"},
                             {"attempt", "0"},
                             {"trial_dir", "."},
                             {"rank", "0"},
                             {"memory_cap_bytes", std::to_string(task.limits.memory_cap_bytes)}});
  std::string why;
  if (auto ws = tuning::render_template(task.workload.world_size, vars, why))
    vars.emplace("world_size", *ws);
  nlohmann::json argv = nlohmann::json::array();
  for (const auto& a : task.workload.argv)
    argv.push_back(tuning::render_template(a, vars, why).value_or(a));
  nlohmann::json env = nlohmann::json::object();
  nlohmann::json env_unset = nlohmann::json::array();
  for (const auto& [k, v] : task.workload.env) {
    auto rendered = tuning::render_template(v, vars, why).value_or(v);
    const auto* knob = tuning::sole_knob_of(task, v);
    if (knob != nullptr && tuning::may_be_unset(*knob) && rendered == tuning::unset_env_value)
      env_unset.push_back(k); // the trial ran without it
    else
      env[k] = rendered;
  }
  auto ws = vars.find("world_size");
  nlohmann::json doc = {{"config", store::to_json(config)},
                        {"workdir", task.workload.workdir},
                        {"argv", argv},
                        {"env", env},
                        {"world_size", ws != vars.end() ? ws->second : std::string{"1"}},
                        {"speedup", speedup},
                        {"ci_low", ci_low}};
  if (!env_unset.empty())
    doc["env_unset"] = env_unset;
  // The cluster launchers' own options are part of how the configuration is launched (a knob
  // may render into them); the ranks and command launchers' documents stay as they were.
  auto rendered = [&](const std::vector<std::string>& templates) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& a : templates)
      out.push_back(tuning::render_template(a, vars, why).value_or(a));
    return out;
  };
  if (task.workload.launcher == tuning::launcher_kind::slurm) {
    doc["launcher"] = tuning::to_string(task.workload.launcher);
    doc["srun_args"] = rendered(task.workload.srun_args);
  } else if (task.workload.launcher == tuning::launcher_kind::torchrun) {
    doc["launcher"] = tuning::to_string(task.workload.launcher);
    doc["torchrun_program"] = task.workload.torchrun_program;
    doc["torchrun_args"] = rendered(task.workload.torchrun_args);
  }
  return doc;
}

patch_paths_report promoted_patch_paths(const tuning::task_spec& task,
                                        const tuning::configuration& config) {
  patch_paths_report r;
  auto add = [](std::vector<std::string>& to, const std::string& path) {
    if (std::find(to.begin(), to.end(), path) == to.end())
      to.push_back(path);
  };
  for (const auto& name : config.patches) {
    const auto* spec = task.find_patch(name);
    if (spec == nullptr)
      continue;
    std::ifstream in{spec->file};
    std::string text{std::istreambuf_iterator<char>{in}, {}};
    for (const auto& path : patch_paths(text)) {
      add(r.touched, path);
      if (!path_in_scope(path, task.scope.editable) || path_in_scope(path, task.scope.frozen))
        add(r.outside, path);
    }
  }
  return r;
}

} // namespace infrarsi::adapters
