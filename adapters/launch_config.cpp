#include "adapters/launch_config.hpp"

#include <algorithm>
#include <exception>
#include <string>
#include <fstream>
#include <iterator>
#include <map>

#include "adapters/environment.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::adapters {

namespace {

/// `text` as one POSIX shell word: unchanged when it holds only safe characters, else in single
/// quotes (a quote inside as '\\'').
std::string shell_quote(const std::string& text) {
  if (!text.empty()
      && text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                "_-./=:,+@%")
           == std::string::npos)
    return text;
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

} // namespace

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
  // The exact command lines a user runs, run from the promoted/ directory (the patches are
  // copied to promoted/patches/): apply each patch to the workload, then launch.
  nlohmann::json patches = nlohmann::json::array();
  nlohmann::json apply = nlohmann::json::array();
  for (const auto& p : config.patches) {
    const auto* spec = task.find_patch(p);
    patches.push_back({{"name", p},
                       {"file", "patches/" + p + ".patch"},
                       {"source", spec != nullptr ? spec->file : std::string{}}});
    apply.push_back("patch -p1 -d " + shell_quote(task.workload.workdir) + " < "
                    + shell_quote("patches/" + p + ".patch"));
  }
  doc["patches"] = patches;
  doc["apply_patches"] = apply;
  // "env [-u NAME]... [K=V]... " ("" when there is nothing to set or unset).
  auto env_words = [&](const std::string& extra) {
    std::string w;
    for (const auto& k : env_unset)
      w += " -u " + shell_quote(k.get<std::string>());
    for (const auto& [k, v] : env.items())
      w += " " + shell_quote(k + "=" + v.get<std::string>());
    w += extra;
    return w.empty() ? w : "env" + w + " ";
  };
  auto joined = [](const nlohmann::json& args) {
    std::string out;
    for (const auto& a : args)
      out += (out.empty() ? "" : " ") + shell_quote(a.get<std::string>());
    return out;
  };
  const std::string cd = "cd " + shell_quote(task.workload.workdir) + " && ";
  const std::string world = doc["world_size"].get<std::string>();
  std::string command;
  switch (task.workload.launcher) {
  case tuning::launcher_kind::command:
    command = cd + env_words("") + joined(argv);
    break;
  case tuning::launcher_kind::slurm:
    // Inside an allocation; infrarsi's per-rank wrapper (adapters/cluster_launch.hpp) maps
    // Slurm's variables to RANK, LOCAL_RANK and WORLD_SIZE; a job that reads Slurm's own needs
    // nothing more.
    command = cd + env_words("") + "srun --ntasks=" + shell_quote(world)
              + " --kill-on-bad-exit=1 --export=ALL"
              + (doc["srun_args"].empty() ? "" : " " + joined(doc["srun_args"])) + " "
              + joined(argv);
    break;
  case tuning::launcher_kind::torchrun:
    command = cd + env_words("") + joined(doc["torchrun_program"])
              + " --nnodes=1 --nproc_per_node=" + shell_quote(world)
              + (doc["torchrun_args"].empty() ? "" : " " + joined(doc["torchrun_args"]))
              + " --no_python " + joined(argv);
    break;
  case tuning::launcher_kind::ranks: {
    // One process per rank with the torchrun environment contract, as the node-runner starts
    // them (argv rendered for each rank), then wait for all.
    int n = 1;
    try {
      n = std::max(1, std::stoi(world));
    } catch (const std::exception&) {
      n = 1;
    }
    const bool dist = n > 1 || task.workload.distributed_env == tuning::distributed_env_kind::always;
    std::string ranks;
    for (int r = 0; r < n; ++r) {
      auto rv = vars;
      rv["rank"] = std::to_string(r);
      nlohmann::json rank_argv = nlohmann::json::array();
      for (const auto& a : task.workload.argv)
        rank_argv.push_back(tuning::render_template(a, rv, why).value_or(a));
      std::string line =
        env_words(dist ? " RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r)
                           + " WORLD_SIZE=" + std::to_string(n) + " LOCAL_WORLD_SIZE="
                           + std::to_string(n) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=29500"
                       : std::string{})
        + joined(rank_argv);
      ranks += (n > 1 ? line + " & " : line);
    }
    command = cd + (n > 1 ? "{ " + ranks + "wait; }" : ranks);
    break;
  }
  }
  doc["command"] = command;
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
