#include "bench/sim_evaluator.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "tuning/contract_check.hpp"
#include "tuning/planner.hpp"
#include "workloads/sim/cli.hpp"
#include "workloads/sim/enumerate.hpp"
#include "workloads/sim/run.hpp"

namespace infrarsi::bench {

namespace {

/// The task's argv rendered for the default assignment (argv[0] left out), as the launcher
/// would render it for trial 0.
std::vector<std::string> rendered_args(const tuning::task_spec& task, std::string& why) {
  std::map<std::string, std::string> builtins{
      {"trial_id", "0"},
      {"attempt", "0"},
      {"trial_dir", "/tmp/infrarsi-search-quality"},
      {"memory_cap_bytes", std::to_string(task.limits.memory_cap_bytes)}};
  auto vars = tuning::template_vars(task, task.default_assignment(), builtins);
  std::vector<std::string> args;
  auto ws = tuning::render_template(task.workload.world_size, vars, why);
  if (!ws) {
    why = "workload.world_size: " + why;
    return {};
  }
  vars["world_size"] = *ws;
  for (std::size_t i = 1; i < task.workload.argv.size(); ++i) {
    auto a = tuning::render_template(task.workload.argv[i], vars, why);
    if (!a) {
      why = "workload.argv[" + std::to_string(i) + "]: " + why;
      return {};
    }
    args.push_back(std::move(*a));
  }
  return args;
}

/// The run settings (steps, warm-up, noise) of `task`'s command line as the simulator reads
/// them; false with `why` ("WHERE: the simulator rejects the task's WHAT: ...") otherwise.
bool run_options_of(const tuning::task_spec& task, const std::string& where, const char* what,
                    sim::run_options& out, std::string& why) {
  auto args = rendered_args(task, why);
  if (!why.empty()) {
    why = where + ": " + why;
    return false;
  }
  sim::cli_state state;
  auto app = sim::make_app(state);
  try {
    app->parse(std::vector<std::string>(args.rbegin(), args.rend()));
  } catch (const CLI::ParseError& e) {
    why = where + ": the simulator rejects the task's " + what + ": " + e.what();
    return false;
  }
  out = state.run;
  out.noise = state.noise != "off";
  return true;
}

/// One metrics line of the simulator as the launcher's parser reads it.
tuning::step_point step_of(const nlohmann::json& j) {
  tuning::step_point s;
  s.step = j.value("step", 0u);
  s.loss = j.value("loss", 0.0);
  s.tokens = j.value("tokens", std::uint64_t{0});
  s.step_time_s = j.value("step_time_s", 0.0);
  s.warmup = j.value("warmup", false);
  return s;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v)
    out += (out.empty() ? "" : ",") + s;
  return out;
}

} // namespace

bool sim_evaluator::is_sim_task(const tuning::task_spec& task) {
  if (task.workload.argv.empty())
    return false;
  const auto& prog = task.workload.argv.front();
  const std::string tail = "infrarsi-sim";
  return prog.size() >= tail.size() && prog.compare(prog.size() - tail.size(), tail.size(), tail) == 0;
}

std::unique_ptr<sim_evaluator> sim_evaluator::create(tuning::task_spec task, std::string& why) {
  const std::string where = "task '" + task.name + "' (" + task.source + ")";
  if (!is_sim_task(task)) {
    why = where + ": workload.argv[0] is not the simulator (infrarsi-sim)";
    return nullptr;
  }
  std::unique_ptr<sim_evaluator> ev{new sim_evaluator(std::move(task))};
  const auto& t = ev->task_;

  // The run settings of the task's own command line (steps, warm-up, noise), as the simulator
  // would read them: the knob flags do not change them, so the default assignment's argv does.
  if (!run_options_of(t, where, "command line", ev->run_, why))
    return nullptr;

  // The smoke launch (task_spec::smoke): the task with its argv, world size and contract.
  if (t.smoke) {
    auto small = tuning::smoke_task(t);
    if (!run_options_of(small, where, "smoke.argv", ev->smoke_run_, why))
      return nullptr;
    ev->smoke_task_ = std::move(small);
  }

  // The baseline: its GPU count (for the cost of a failed launch), truth and loss trajectory
  // (the verifier's reference; the simulator's loss does not depend on the noise seed).
  auto base = tuning::baseline_configuration(t);
  auto p = ev->price(base);
  if (p.failure != tuning::trial_outcome::unset || p.truth.oom ||
      p.truth.contract != sim::contract_kind::ok) {
    why = where + ": the baseline configuration does not run: " +
          (p.detail.empty() ? std::string{"out of memory"} : p.detail);
    return nullptr;
  }
  ev->task_gpus_ = p.cfg.gpus;
  ev->baseline_step_s_ = p.truth.step_time_s;
  {
    auto opt = ev->run_;
    opt.seed = 0;
    opt.noise = false;
    auto lines = sim::simulate_run(p.cfg, p.truth, opt);
    tuning::trial_record rec;
    for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
      tuning::step_point s;
      s.step = lines[i].value("step", 0u);
      s.loss = lines[i].value("loss", 0.0);
      rec.steps.push_back(s);
    }
    ev->reference_ = tuning::make_loss_reference({rec});
  }

  // Patch pairs that do not apply together (what init finds with `git apply --check`).
  for (std::size_t i = 0; i < t.patches.size(); ++i)
    for (std::size_t j = i + 1; j < t.patches.size(); ++j) {
      std::vector<std::string> pair{t.patches[i].name, t.patches[j].name};
      std::sort(pair.begin(), pair.end());
      std::string err;
      if (!ev->kernels_for(pair, err))
        ev->incompatible_.emplace_back(t.patches[i].name, t.patches[j].name);
    }

  // The oracle.
  auto start = std::chrono::steady_clock::now();
  sim::enumeration_summary summary;
  if (!sim::enumerate_task(t, sim::patch_scope::legit, {}, summary, why)) {
    why = where + ": enumeration failed: " + why;
    return nullptr;
  }
  ev->oracle_wall_s_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!summary.optimum) {
    why = where + ": no configuration of the space fits in memory and keeps the contract";
    return nullptr;
  }
  tuning::configuration best;
  best.knobs = summary.optimum->knobs;
  best.patches = summary.optimum->patches;
  std::sort(best.patches.begin(), best.patches.end());
  ev->optimum_step_s_ = summary.optimum->step_time_s;
  ev->optimum_text_ = best.diff_from(base);
  ev->space_size_ = summary.configurations;
  return ev;
}

const std::optional<sim::kernel_settings>&
sim_evaluator::kernels_for(const std::vector<std::string>& patches, std::string& why) {
  auto key = join(patches);
  auto it = kernels_.find(key);
  if (it == kernels_.end()) {
    std::string err;
    auto k = sim::patched_kernels(task_, patches, err);
    it = kernels_.emplace(key, std::make_pair(std::move(k), err)).first;
  }
  why = it->second.second;
  return it->second.first;
}

sim_evaluator::priced sim_evaluator::price(const tuning::configuration& raw) {
  priced p;
  p.gpus = task_gpus_;
  auto config = canonical_configuration(task_, raw);
  // Refused before launch: unknown knob or patch, value outside the domain (the launcher's
  // complete_assignment), a broken constraint (contract_violation, as the node-runner reports
  // it), patches that do not apply together.
  for (const auto& [name, value] : config.knobs) {
    const auto* k = task_.find_knob(name);
    std::string why;
    if (k == nullptr) {
      p.failure = tuning::trial_outcome::launch_error;
      p.detail = "unknown knob '" + name + "'";
      return p;
    }
    if (!tuning::in_domain(*k, value, why)) {
      p.failure = tuning::trial_outcome::launch_error;
      p.detail = "knob '" + name + "' = " + tuning::to_string(value) + ": expected " + why;
      return p;
    }
  }
  for (const auto& name : config.patches)
    if (task_.find_patch(name) == nullptr) {
      p.failure = tuning::trial_outcome::launch_error;
      p.detail = "unknown patch '" + name + "'";
      return p;
    }
  if (auto v = tuning::constraint_violation(task_, config); !v.empty()) {
    p.failure = tuning::trial_outcome::contract_violation;
    p.detail = "constraint: " + v.substr(std::string{"constraint "}.size());
    return p;
  }
  std::string why;
  const auto& kernels = kernels_for(config.patches, why);
  if (!kernels) {
    p.failure = tuning::trial_outcome::launch_error;
    p.detail = "patches do not apply: " + why;
    return p;
  }
  // Launched: a command line or layout the simulator rejects exits with status 2 after start-up.
  auto cfg = sim::task_config(task_, config.knobs, *kernels, why);
  if (!cfg) {
    p.failure = tuning::trial_outcome::launch_error;
    p.launched = true;
    p.detail = why;
    return p;
  }
  p.cfg = *cfg;
  p.gpus = cfg->gpus;
  p.truth = sim::compute_truth(p.cfg);
  if (!p.truth.valid) {
    p.failure = tuning::trial_outcome::launch_error;
    p.launched = true;
    p.detail = p.truth.error;
  }
  return p;
}

tuning::trial_record sim_evaluator::smoke_run(const tuning::configuration& config, bool patched,
                                              std::uint64_t trial_id, std::uint32_t attempt) {
  tuning::trial_record rec;
  rec.finished = true;
  rec.config = config;
  if (!patched)
    rec.config.patches.clear();
  std::string why;
  const auto& kernels = kernels_for(rec.config.patches, why);
  if (!kernels) {
    rec.outcome = tuning::trial_outcome::launch_error;
    rec.detail = "patches do not apply: " + why;
    return rec;
  }
  auto cfg = sim::task_config(*smoke_task_, rec.config.knobs, *kernels, why);
  sim::truth truth;
  if (cfg)
    truth = sim::compute_truth(*cfg);
  if (!cfg || !truth.valid) {
    rec.outcome = tuning::trial_outcome::launch_error;
    rec.detail = cfg ? truth.error : why;
    rec.wall_time_s = sim_failed_launch_s;
    rec.device_seconds = sim_failed_launch_s * (cfg ? cfg->gpus : 1);
    return rec;
  }
  if (truth.oom) {
    rec.outcome = tuning::trial_outcome::oom;
    rec.wall_time_s = sim_failed_launch_s;
    rec.device_seconds = sim_failed_launch_s * cfg->gpus;
    return rec;
  }
  auto opt = smoke_run_;
  opt.seed = seed_;
  opt.launch_id = trial_id;
  opt.attempt = attempt;
  auto lines = sim::simulate_run(*cfg, truth, opt);
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    rec.steps.push_back(step_of(lines[i]));
  }
  const auto& fin = lines.back();
  rec.declared.final_seen = true;
  rec.declared.global_batch = fin.value("global_batch", std::uint64_t{0});
  rec.declared.params = fin.value("params", std::uint64_t{0});
  rec.declared.layers = fin.value("layers", std::uint64_t{0});
  rec.device_seconds = fin.value("device_seconds", 0.0);
  rec.wall_time_s = fin.value("simulated_wall_s", 0.0);
  rec.outcome = tuning::trial_outcome::ok;
  return rec;
}

std::optional<double> sim_evaluator::true_step_time(const tuning::configuration& config) {
  auto p = price(config);
  if (p.failure != tuning::trial_outcome::unset || p.truth.oom ||
      p.truth.contract != sim::contract_kind::ok)
    return std::nullopt;
  return p.truth.step_time_s;
}

tuning::trial_record sim_evaluator::measure(const tuning::configuration& config,
                                            std::uint64_t trial_id, std::uint32_t attempt,
                                            const std::string& purpose,
                                            const tuning::loss_reference* early_stop,
                                            const std::vector<std::string>& smoke_patches) {
  tuning::trial_record rec;
  rec.trial_id = trial_id;
  rec.attempt = attempt;
  rec.purpose = purpose;
  rec.config = config;
  rec.dispatched = true;
  rec.finished = true;
  rec.verified = true;
  auto p = price(config);
  if (p.failure != tuning::trial_outcome::unset) {
    rec.outcome = p.failure;
    rec.detail = p.detail;
    if (p.failure == tuning::trial_outcome::contract_violation)
      rec.violations.push_back(p.detail);
    rec.device_seconds = p.launched ? sim_failed_launch_s * p.gpus : 0.0;
    rec.wall_time_s = p.launched ? sim_failed_launch_s : 0.0;
    return rec;
  }
  // The smoke probe (as adapters::run_trial: after the refusals before launch, before the full
  // launch): the smoke launch unpatched and patched; a violation ends the trial at their cost.
  double smoke_device_s = 0;
  if (!smoke_patches.empty() && smoke_task_ && !config.patches.empty()) {
    auto unpatched = smoke_run(config, false, trial_id, attempt);
    // An unusable reference, or one whose loss does not fall (a vacuous probe), ends the probe
    // before the patched launch (as the launcher); the full launch then judges the patches.
    auto patched = tuning::smoke_reference_problem(smoke_task_->contract, unpatched)
                       || tuning::smoke_vacuous(smoke_task_->contract, unpatched)
                     ? tuning::trial_record{}
                     : smoke_run(config, true, trial_id, attempt);
    smoke_device_s = unpatched.device_seconds + patched.device_seconds;
    if (auto v = tuning::smoke_violation(smoke_task_->contract, unpatched, patched)) {
      rec.outcome = tuning::trial_outcome::contract_violation;
      rec.detail = tuning::smoke_probe_detail(*v, smoke_patches);
      rec.violations = {rec.detail};
      rec.device_seconds = smoke_device_s;
      rec.wall_time_s = unpatched.wall_time_s + patched.wall_time_s;
      return rec;
    }
  }
  rec.device_seconds = smoke_device_s; // the cost below is added to it
  if (p.truth.oom) {
    // The simulator prints its OOM report and exits 86 before the first step. Nothing was
    // measured: the peak stays 0 (the planner's memory model treats an OOM trial as censored at
    // planner_input::memory_capacity_bytes).
    rec.outcome = tuning::trial_outcome::oom;
    rec.detail = "INFRARSI_OOM " + sim::oom_json(p.cfg, p.truth).dump();
    rec.device_seconds += sim_failed_launch_s * p.gpus;
    rec.wall_time_s = sim_failed_launch_s;
    return rec;
  }
  auto opt = run_;
  opt.seed = seed_;
  opt.launch_id = trial_id;
  opt.attempt = attempt;
  auto lines = sim::simulate_run(p.cfg, p.truth, opt);
  std::map<std::string, double> phase_sum;
  std::optional<std::string> stopped; // the early stop's violation, as the node-runner's
  double unrun_s = 0;                 // simulated seconds of the steps an early stop saved
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    if (stopped) {
      unrun_s += lines[i].value("step_time_s", 0.0);
      continue;
    }
    const auto& j = lines[i];
    const auto s = step_of(j);
    rec.steps.push_back(s);
    for (const char* phase : {"data", "forward", "backward", "optimizer", "communication"})
      phase_sum[phase] += j.value(std::string{phase} + "_s", 0.0);
    rec.peak_memory_bytes = std::max(rec.peak_memory_bytes, j.value("peak_memory_bytes",
                                                                    std::uint64_t{0}));
    if (early_stop != nullptr)
      if (auto v = tuning::early_violation(task_.contract, *early_stop, rec.steps,
                                           rec.steps.size() - 1))
        stopped = tuning::early_stop_detail(*v, s.step, task_.contract.steps);
  }
  if (!rec.steps.empty())
    for (const auto& [phase, sum] : phase_sum)
      rec.phase_s[phase] = sum / static_cast<double>(rec.steps.size());
  const auto& fin = lines.back();
  rec.declared.final_seen = true;
  rec.declared.global_batch = fin.value("global_batch", std::uint64_t{0});
  rec.declared.params = fin.value("params", std::uint64_t{0});
  rec.declared.layers = fin.value("layers", std::uint64_t{0});
  if (fin.contains("timed_steps") && fin["timed_steps"].size() == 2)
    rec.declared.timed_steps = std::make_pair(fin["timed_steps"][0].get<std::uint32_t>(),
                                              fin["timed_steps"][1].get<std::uint32_t>());
  const double launch_device_s = fin.value("device_seconds", 0.0);
  rec.device_seconds = smoke_device_s + launch_device_s;
  rec.wall_time_s = fin.value("simulated_wall_s", 0.0);
  if (stopped) {
    // Stopped by the early stop: the steps after it did not run. The simulated wall time is
    // start-up plus the steps, so the launch cost its wall time less theirs, on every GPU.
    double full_s = rec.wall_time_s;
    rec.wall_time_s = std::max(0.0, full_s - unrun_s);
    rec.device_seconds =
      smoke_device_s + (full_s > 0 ? launch_device_s * rec.wall_time_s / full_s : 0.0);
    rec.declared = {};
    rec.outcome = tuning::trial_outcome::contract_violation;
    rec.detail = *stopped;
    rec.violations = {*stopped};
    return rec;
  }
  rec.outcome = tuning::trial_outcome::ok;
  rec.timed_step_time_s = tuning::timed_step_time(task_.contract, rec.steps);
  rec.violations = tuning::check_contract(task_.contract, reference_, rec);
  if (rec.violations.empty() && p.truth.contract != sim::contract_kind::ok)
    // Not expected (the loss check catches both; tests/contract/cheats_test.cpp), but a
    // configuration the simulator knows to break the contract never passes.
    rec.violations.push_back(std::string{p.truth.contract == sim::contract_kind::less_work
                                             ? "tokens"
                                             : "loss_drift"} +
                             ": the simulator's truth says " + sim::to_string(p.truth.contract));
  if (!rec.violations.empty()) {
    rec.outcome = tuning::trial_outcome::contract_violation;
    rec.detail = rec.violations.front();
  }
  return rec;
}

} // namespace infrarsi::bench
