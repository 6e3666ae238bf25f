#include "workloads/sim/enumerate.hpp"

#include <algorithm>
#include <cmath>

#include "workloads/sim/cli.hpp"

namespace infrarsi::sim {

namespace {

bool knob_domain(const tuning::knob_spec& k, std::vector<tuning::knob_value>& out,
                 std::string& why) {
  out.clear();
  switch (k.type) {
  case tuning::knob_type::boolean:
    out = {false, true};
    return true;
  case tuning::knob_type::choice:
    out = k.values;
    return true;
  case tuning::knob_type::integer:
    if (!k.values.empty()) {
      out = k.values;
      return true;
    }
    if (k.min && k.max) {
      auto lo = static_cast<std::int64_t>(std::ceil(*k.min));
      auto hi = static_cast<std::int64_t>(std::floor(*k.max));
      if (hi - lo + 1 > 64) {
        why = "knob '" + k.name + "' ranges over " + std::to_string(hi - lo + 1) +
              " values; enumeration needs an explicit list (values = [...])";
        return false;
      }
      for (auto v = lo; v <= hi; ++v)
        out.emplace_back(v);
      return true;
    }
    why = "knob '" + k.name + "' has no domain";
    return false;
  case tuning::knob_type::real:
    if (!k.values.empty()) {
      out = k.values;
      return true;
    }
    why = "knob '" + k.name + "' is a continuous range; enumeration needs values = [...]";
    return false;
  }
  return false;
}

struct argv_parser {
  cli_state state;
  std::unique_ptr<CLI::App> app = make_app(state);
  std::string kernels_path;
  std::map<std::string, CLI::Option*> options; // name -> option (nullptr: unknown)

  /// The common case, about 40 times faster than a full CLI11 parse: every argument is an
  /// `--option value` pair of a single-valued option. Each value goes through the option's own
  /// conversion and validators. Returns false (nothing decided) for anything else, and the
  /// caller runs the full parser.
  bool fast_parse(const std::vector<std::string>& args) {
    if (args.size() % 2 != 0)
      return false;
    std::vector<CLI::Option*> opts;
    for (std::size_t i = 0; i < args.size(); i += 2) {
      const auto& name = args[i];
      if (name.size() < 3 || name.compare(0, 2, "--") != 0 || name.find('=') != std::string::npos)
        return false;
      auto cached = options.find(name);
      CLI::Option* opt = cached != options.end() ? cached->second
                                                 : (options[name] = app->get_option_no_throw(name));
      if (opt == nullptr || opt->get_expected_min() != 1 || opt->get_type_size() != 1)
        return false;
      if (std::find(opts.begin(), opts.end(), opt) != opts.end())
        return false; // given twice: let CLI11 decide
      opts.push_back(opt);
    }
    for (std::size_t i = 0; i < opts.size(); ++i) {
      opts[i]->clear();
      opts[i]->add_result(args[2 * i + 1]);
      opts[i]->run_callback();
    }
    return true;
  }

  /// Renders the task's argv for `knobs` and parses it. Returns "" or the error.
  std::string parse(const tuning::task_spec& task, const tuning::knob_assignment& knobs,
                    sim_config& cfg) {
    std::map<std::string, std::string> builtins{
        {"trial_id", "0"},
        {"attempt", "0"},
        {"trial_dir", "/tmp/infrarsi-sim-enumerate"},
        {"memory_cap_bytes", std::to_string(task.limits.memory_cap_bytes)}};
    auto vars = tuning::template_vars(task, knobs, builtins);
    std::string why;
    auto ws = tuning::render_template(task.workload.world_size, vars, why);
    if (!ws)
      return "workload.world_size: " + why;
    vars["world_size"] = *ws;
    std::vector<std::string> args;
    for (std::size_t i = 1; i < task.workload.argv.size(); ++i) { // without argv[0]
      auto a = tuning::render_template(task.workload.argv[i], vars, why);
      if (!a)
        return "workload.argv: " + why;
      args.push_back(std::move(*a));
    }
    state = cli_state{};
    try {
      if (!fast_parse(args)) {
        state = cli_state{};
        app->parse(std::vector<std::string>(args.rbegin(), args.rend()));
      }
    } catch (const CLI::ParseError& e) {
      return std::string{"command line: "} + e.what();
    }
    if (state.truth || state.enumerate)
      return "the task's argv selects a mode (--truth/--enumerate)";
    kernels_path = state.kernels_path;
    return resolve_config(state, cfg);
  }
};

std::string join_path(const std::string& dir, const std::string& file) {
  if (!file.empty() && file.front() == '/')
    return file;
  return dir + "/" + file;
}

} // namespace

std::optional<kernel_settings> patched_kernels(const tuning::task_spec& task,
                                               const std::vector<std::string>& patches,
                                               std::string& why) {
  std::string text;
  auto path = join_path(task.workload.workdir, "kernels.conf");
  if (!read_text_file(path, text)) {
    why = "cannot read '" + path + "'";
    return std::nullopt;
  }
  for (const auto& p : task.patches) {
    if (std::find(patches.begin(), patches.end(), p.name) == patches.end())
      continue;
    std::string diff;
    if (!read_text_file(p.file, diff)) {
      why = "cannot read patch '" + p.file + "'";
      return std::nullopt;
    }
    auto next = apply_unified_diff(text, diff, why);
    if (!next) {
      why = "patch '" + p.name + "': " + why;
      return std::nullopt;
    }
    text = std::move(*next);
  }
  return parse_kernels(text, path, why);
}

std::optional<sim_config> task_config(const tuning::task_spec& task,
                                      const tuning::knob_assignment& knobs,
                                      const kernel_settings& kernels, std::string& why) {
  auto full = task.default_assignment();
  for (const auto& [k, v] : knobs)
    full[k] = v;
  argv_parser parser;
  sim_config cfg;
  why = parser.parse(task, full, cfg);
  if (!why.empty())
    return std::nullopt;
  cfg.kernels = kernels;
  return cfg;
}

bool enumerate_task(const tuning::task_spec& task, patch_scope scope,
                    const std::function<void(const enumerated_config&)>& sink,
                    enumeration_summary& summary, std::string& why) {
  summary = enumeration_summary{};
  // Knob domains, in task order.
  std::vector<std::vector<tuning::knob_value>> domains;
  for (const auto& k : task.knobs) {
    std::vector<tuning::knob_value> d;
    if (!knob_domain(k, d, why))
      return false;
    if (d.empty()) {
      why = "knob '" + k.name + "' has an empty domain";
      return false;
    }
    domains.push_back(std::move(d));
  }
  // The kernels file the default assignment reads, and every patch subset that applies.
  argv_parser parser;
  sim_config base_cfg;
  auto defaults = task.default_assignment();
  if (auto err = parser.parse(task, defaults, base_cfg); !err.empty()) {
    why = "the default assignment: " + err;
    return false;
  }
  std::string base_text;
  auto kernels_file = join_path(task.workload.workdir, parser.kernels_path);
  if (!read_text_file(kernels_file, base_text)) {
    why = "cannot read '" + kernels_file + "'";
    return false;
  }
  if (task.patches.size() > 12) {
    why = "more than 12 patches (" + std::to_string(task.patches.size()) + " subsets would be " +
          std::to_string(1u << task.patches.size()) + ")";
    return false;
  }
  std::vector<std::string> diffs;
  for (const auto& p : task.patches) {
    std::string d;
    if (!read_text_file(p.file, d)) {
      why = "cannot read patch '" + p.file + "'";
      return false;
    }
    diffs.push_back(std::move(d));
  }
  struct subset {
    std::vector<std::string> names;
    kernel_settings kernels;
  };
  std::vector<subset> subsets;
  auto n_subsets = 1u << task.patches.size();
  for (unsigned mask = 0; mask < n_subsets; ++mask) {
    std::string text = base_text;
    subset s;
    bool applies = true;
    for (std::size_t i = 0; i < task.patches.size() && applies; ++i) {
      if ((mask & (1u << i)) == 0)
        continue;
      std::string err;
      auto next = apply_unified_diff(text, diffs[i], err);
      if (!next) {
        if (mask == (1u << i)) {
          why =
              "patch '" + task.patches[i].name + "' does not apply to " + kernels_file + ": " + err;
          return false;
        }
        applies = false; // conflicts with another patch of the subset
        break;
      }
      text = std::move(*next);
      s.names.push_back(task.patches[i].name);
    }
    if (!applies)
      continue;
    std::string err;
    auto k = parse_kernels(text, kernels_file, err);
    if (!k) {
      why = "patches {" + std::to_string(mask) + "}: " + err;
      return false;
    }
    s.kernels = *k;
    bool keeps_contract = k->optimizer_states == optimizer_state_impl::fp32 &&
                          k->data_loader == data_loader_impl::reference;
    if (scope == patch_scope::none && mask != 0)
      continue;
    if (scope == patch_scope::legit && !keeps_contract)
      continue;
    subsets.push_back(std::move(s));
  }
  summary.patch_subsets = subsets.size();

  // Odometer over the knob domains (last knob fastest).
  std::vector<std::size_t> index(domains.size(), 0);
  tuning::knob_assignment assignment;
  enumerated_config entry;
  for (bool more = true; more;) {
    for (std::size_t i = 0; i < domains.size(); ++i)
      assignment[task.knobs[i].name] = domains[i][index[i]];
    ++summary.assignments;
    sim_config cfg;
    auto parse_error = parser.parse(task, assignment, cfg);
    bool is_default = assignment == defaults;
    for (std::size_t si = 0; si < subsets.size(); ++si) {
      const auto& s = subsets[si];
      entry.knobs = assignment;
      entry.patches = s.names;
      entry.oom = false;
      entry.contract = contract_kind::ok;
      entry.step_time_s = entry.peak_memory_bytes = entry.tflops_per_gpu = entry.mfu = 0;
      if (!parse_error.empty()) {
        entry.valid = false;
        entry.error = parse_error;
      } else {
        cfg.kernels = s.kernels;
        auto t = compute_truth(cfg);
        entry.valid = t.valid;
        entry.error = t.error;
        if (t.valid) {
          entry.oom = t.oom;
          entry.contract = t.contract;
          entry.step_time_s = t.step_time_s;
          entry.peak_memory_bytes = t.peak_memory_bytes;
          entry.tflops_per_gpu = t.tflops_per_gpu;
          entry.mfu = t.mfu;
        }
      }
      ++summary.configurations;
      if (!entry.valid) {
        ++summary.invalid;
      } else {
        ++summary.valid;
        if (entry.oom)
          ++summary.oom;
        if (entry.contract != contract_kind::ok)
          ++summary.contract_violating;
        if (!entry.oom && entry.contract == contract_kind::ok &&
            (!summary.optimum || entry.step_time_s < summary.optimum->step_time_s))
          summary.optimum = entry;
      }
      if (is_default && s.names.empty())
        summary.baseline = entry;
      if (sink)
        sink(entry);
    }
    // Advance.
    more = false;
    for (std::size_t i = domains.size(); i-- > 0;) {
      if (++index[i] < domains[i].size()) {
        more = true;
        break;
      }
      index[i] = 0;
    }
    if (domains.empty())
      more = false;
  }
  return true;
}

} // namespace infrarsi::sim
