#include "workloads/sim/cli.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ostream>

#include "workloads/sim/enumerate.hpp"
#include "workloads/sim/task_file.hpp"

namespace infrarsi::sim {

namespace {

const char* metrics_prefix = "INFRARSI_METRICS ";
const char* oom_prefix = "INFRARSI_OOM ";

bool parse_u64(const std::string& text, std::uint64_t& out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  errno = 0;
  char* end = nullptr;
  auto v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    return false;
  out = v;
  return true;
}

std::string describe_kernels(const kernel_settings& k) {
  std::string s = to_text(k);
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

} // namespace

std::unique_ptr<CLI::App> make_app(cli_state& st) {
  auto app = std::make_unique<CLI::App>(
      "infrarsi-sim: a simulated distributed LLM training job (dense and MoE, 8 to 512 GPUs).\n"
      "Prints one INFRARSI_METRICS line per step (times in SIMULATED seconds) and a final line;\n"
      "exit 2 on an invalid parallel layout, 86 (after an INFRARSI_OOM line on stderr) when a\n"
      "GPU's memory would be exceeded. Reads the kernel choices from ./kernels.conf.\n"
      "See docs/simulator.md.",
      "infrarsi-sim");
  app->option_defaults()->always_capture_default()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast); // like argparse: the last value wins
  app->get_formatter()->column_width(34);

  const char* cluster = "Cluster";
  app->add_option("--gpu", st.gpu, "GPU type: A100-80GB, H100-80GB, H200-141GB")->group(cluster);
  app->add_option("--gpus", st.gpus, "number of GPUs (1..8, or whole 8-GPU nodes up to 512)")
      ->group(cluster);

  const char* model = "Model";
  app->add_option("--model", st.model,
                  "preset: llama3-8b, yi-9b, codellama-34b, llama2-7b, llama3-70b, "
                  "mixtral-8x7b, deepseek-moe-16b, gpt-1.7b ... gpt-1t")
      ->group(model);
  app->add_option("--layers", st.layers, "override: transformer layers")->group(model);
  app->add_option("--hidden", st.hidden, "override: hidden size")->group(model);
  app->add_option("--heads", st.heads, "override: attention heads")->group(model);
  app->add_option("--kv-heads", st.kv_heads, "override: query groups (GQA)")->group(model);
  app->add_option("--ffn", st.ffn, "override: MLP hidden size")->group(model);
  app->add_option("--vocab", st.vocab, "override: vocabulary size")->group(model);
  app->add_option("--experts", st.experts, "override: MoE experts (0: dense)")->group(model);
  app->add_option("--top-k", st.top_k, "override: experts per token")->group(model);
  app->add_option("--expert-ffn", st.expert_ffn, "override: expert MLP hidden size")->group(model);
  app->add_option("--shared-expert-ffn", st.shared_expert_ffn,
                  "override: shared-expert MLP hidden size (0: none)")
      ->group(model);
  app->add_option("--seq-len", st.seq_len, "sequence length (tokens)")->group(model);
  app->add_option("--global-batch", st.global_batch, "sequences per step")->group(model);

  const char* knobs = "Parallelism and knobs";
  auto& par = st.parallel;
  app->add_option("--tp", par.tp, "tensor parallel size")->group(knobs);
  app->add_option("--pp", par.pp, "pipeline parallel size")->group(knobs);
  app->add_option("--ep", par.ep, "expert parallel size (MoE)")->group(knobs);
  app->add_option("--vpp", par.vpp, "virtual pipeline stages per GPU (interleaved 1F1B)")
      ->group(knobs);
  app->add_option("--micro-batch", par.micro_batch, "sequences per micro-batch")->group(knobs);
  app->add_option("--recompute", st.recompute, "activation recomputation")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->group(knobs);
  app->add_option("--sequence-parallel", par.sequence_parallel,
                  "sequence parallelism (1/0, true/false)")
      ->group(knobs);
  app->add_option("--distributed-optimizer", par.distributed_optimizer,
                  "ZeRO-1: shard the optimizer state over data parallel")
      ->group(knobs);
  app->add_option("--overlap-grad-reduce", par.overlap_grad_reduce,
                  "overlap the gradient reduce with the last backward")
      ->group(knobs);
  app->add_option("--overlap-param-gather", par.overlap_param_gather,
                  "overlap the parameter all-gather with the next forward (needs ZeRO-1)")
      ->group(knobs);
  app->add_option("--bucket-mb", par.bucket_mb, "gradient communication bucket, MB")->group(knobs);
  app->add_option("--cuda-graphs", par.cuda_graphs, "capture layers in CUDA graphs")->group(knobs);
  app->add_option("--kernels", st.kernels_path, "kernel choices file (the patched code)")
      ->group(knobs);
  app->add_option("--memory-cap-bytes", st.memory_cap_bytes,
                  "simulated per-GPU memory cap, bytes (0: the GPU's memory)")
      ->group(knobs);

  const char* run = "Run";
  app->add_option("--steps", st.run.steps, "training steps")
      ->check(CLI::Range(1, 100000))
      ->group(run);
  app->add_option("--warmup-steps", st.run.warmup_steps, "leading steps marked warm-up")
      ->check(CLI::Range(0, 100000))
      ->group(run);
  app->add_option("--seed", st.run.seed, "cluster noise seed")->group(run);
  app->add_option("--launch-id", st.run.launch_id,
                  "per-launch noise stream (default: $INFRARSI_TRIAL_ID)")
      ->group(run)
      ->each([&st](const std::string&) { st.launch_id_given = true; });
  app->add_option("--attempt", st.run.attempt, "retry number (default: $INFRARSI_ATTEMPT)")
      ->group(run)
      ->each([&st](const std::string&) { st.attempt_given = true; });
  app->add_option("--noise", st.noise, "cluster noise on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->group(run);
  app->add_option("--cv", st.run.cv_override,
                  "per-step coefficient of variation (default: the cluster's)")
      ->group(run);

  const char* modes = "Modes";
  app->add_flag("--truth", st.truth,
                "print the noise-free step time and memory of this configuration as JSON")
      ->group(modes);
  app->add_flag("--enumerate", st.enumerate,
                "price every configuration of --task's knob space and patch subsets (JSON lines "
                "and a summary)")
      ->group(modes);
  app->add_option("--task", st.task, "task file for --enumerate")->group(modes);
  app->add_option("--patches", st.patches_mode, "enumerate: patch subsets none, legit, all")
      ->check(CLI::IsMember({"none", "legit", "all"}))
      ->group(modes);
  app->add_option("--top", st.top, "enumerate: print only the N fastest that fit (0: all)")
      ->group(modes);
  app->add_flag("--summary-only", st.summary_only, "enumerate: print only the summary")
      ->group(modes);
  app->add_flag("--include-invalid", st.include_invalid,
                "enumerate: also print configurations with an invalid layout")
      ->group(modes);
  return app;
}

std::string resolve_config(const cli_state& st, sim_config& out) {
  out = sim_config{};
  const model_spec* preset = find_model(st.model);
  if (preset == nullptr)
    return "unknown model preset '" + st.model + "' (--model)";
  model_spec m = *preset;
  if (st.layers > 0)
    m.layers = st.layers;
  if (st.hidden > 0)
    m.hidden = st.hidden;
  if (st.heads > 0)
    m.heads = st.heads;
  if (st.kv_heads > 0)
    m.kv_heads = st.kv_heads;
  if (st.ffn > 0)
    m.ffn = st.ffn;
  if (st.vocab > 0)
    m.vocab = st.vocab;
  if (st.experts >= 0)
    m.experts = st.experts;
  if (st.top_k > 0)
    m.top_k = st.top_k;
  if (st.expert_ffn > 0)
    m.expert_ffn = st.expert_ffn;
  if (st.shared_expert_ffn >= 0)
    m.shared_expert_ffn = st.shared_expert_ffn;
  if (st.layers < 0 || st.hidden < 0 || st.heads < 0 || st.kv_heads < 0 || st.ffn < 0 ||
      st.vocab < 0 || st.top_k < 0 || st.expert_ffn < 0)
    return "model dimensions must not be negative";
  const hardware_profile* hw = find_hardware(st.gpu);
  if (hw == nullptr)
    return "unknown GPU '" + st.gpu + "' (--gpu: A100-80GB, H100-80GB, H200-141GB)";
  out.hardware = hw->name;
  out.gpus = st.gpus;
  out.model = m;
  out.seq_len = st.seq_len;
  out.global_batch = st.global_batch;
  out.parallel = st.parallel;
  out.parallel.recompute = st.recompute == "full"        ? recompute_mode::full
                           : st.recompute == "selective" ? recompute_mode::selective
                                                         : recompute_mode::none;
  out.memory_cap_bytes = st.memory_cap_bytes;
  return {};
}

namespace {

int run_enumerate(const cli_state& st, std::ostream& out, std::ostream& err) {
  if (st.task.empty()) {
    err << "infrarsi-sim: --enumerate needs --task FILE\n";
    return exit_usage;
  }
  std::string file_error;
  auto task = read_task_file(st.task, file_error);
  if (!task) {
    err << "infrarsi-sim: " << file_error << "\n";
    return 1;
  }
  patch_scope scope = st.patches_mode == "none"  ? patch_scope::none
                      : st.patches_mode == "all" ? patch_scope::all
                                                 : patch_scope::legit;
  auto knobs_json = [](const tuning::knob_assignment& a) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [name, value] : a)
      std::visit([&j, &n = name](const auto& x) { j[n] = x; }, value);
    return j;
  };
  auto entry_json = [&](const enumerated_config& c) {
    nlohmann::ordered_json j;
    j["knobs"] = knobs_json(c.knobs);
    j["patches"] = c.patches;
    j["valid"] = c.valid;
    if (!c.valid) {
      j["error"] = c.error;
      return j;
    }
    j["oom"] = c.oom;
    j["contract"] = to_string(c.contract);
    j["step_time_s"] = c.step_time_s;
    j["peak_memory_bytes"] = static_cast<std::uint64_t>(c.peak_memory_bytes);
    j["tflops_per_gpu"] = c.tflops_per_gpu;
    j["mfu"] = c.mfu;
    return j;
  };
  std::vector<enumerated_config> best;
  bool stream = !st.summary_only && st.top <= 0;
  auto sink = [&](const enumerated_config& c) {
    if (stream) {
      if (c.valid || st.include_invalid)
        out << entry_json(c).dump() << "\n";
      return;
    }
    if (st.top > 0 && c.valid && !c.oom && c.contract == contract_kind::ok) {
      best.push_back(c);
      if (best.size() > static_cast<std::size_t>(4 * st.top)) {
        std::sort(best.begin(), best.end(),
                  [](const auto& a, const auto& b) { return a.step_time_s < b.step_time_s; });
        best.resize(static_cast<std::size_t>(st.top));
      }
    }
  };
  enumeration_summary summary;
  std::string why;
  if (!enumerate_task(*task, scope, sink, summary, why)) {
    err << "infrarsi-sim: cannot enumerate " << st.task << ": " << why << "\n";
    return exit_usage;
  }
  if (st.top > 0) {
    std::stable_sort(best.begin(), best.end(),
                     [](const auto& a, const auto& b) { return a.step_time_s < b.step_time_s; });
    if (best.size() > static_cast<std::size_t>(st.top))
      best.resize(static_cast<std::size_t>(st.top));
    for (const auto& c : best)
      out << entry_json(c).dump() << "\n";
  }
  nlohmann::ordered_json s;
  s["event"] = "summary";
  s["task"] = task->name;
  s["assignments"] = summary.assignments;
  s["patch_subsets"] = summary.patch_subsets;
  s["configurations"] = summary.configurations;
  s["valid"] = summary.valid;
  s["invalid"] = summary.invalid;
  s["oom"] = summary.oom;
  s["contract_violating"] = summary.contract_violating;
  if (summary.baseline)
    s["baseline"] = entry_json(*summary.baseline);
  if (summary.optimum)
    s["optimum"] = entry_json(*summary.optimum);
  if (summary.baseline && summary.optimum && summary.baseline->valid && !summary.baseline->oom)
    s["speedup"] = summary.baseline->step_time_s / summary.optimum->step_time_s;
  out << s.dump() << "\n";
  return 0;
}

} // namespace

int run_program(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                const std::string& env_trial_id, const std::string& env_attempt) {
  cli_state st;
  auto app = make_app(st);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app->parse(std::move(reversed));
  } catch (const CLI::CallForHelp&) {
    out << app->help();
    return 0;
  } catch (const CLI::ParseError& e) {
    err << "infrarsi-sim: " << e.what() << " (see --help)\n";
    return exit_usage;
  }
  if (st.enumerate)
    return run_enumerate(st, out, err);

  sim_config cfg;
  if (auto why = resolve_config(st, cfg); !why.empty()) {
    err << "infrarsi-sim: " << why << "\n";
    return exit_usage;
  }
  std::string why;
  auto kernels = load_kernels(st.kernels_path, why);
  if (!kernels) {
    err << "infrarsi-sim: " << why << "\n";
    return exit_usage;
  }
  cfg.kernels = *kernels;
  run_options run = st.run;
  run.noise = st.noise == "on";
  if (!st.launch_id_given && !env_trial_id.empty() && !parse_u64(env_trial_id, run.launch_id)) {
    err << "infrarsi-sim: INFRARSI_TRIAL_ID='" << env_trial_id << "' is not a number\n";
    return exit_usage;
  }
  if (!st.attempt_given && !env_attempt.empty() && !parse_u64(env_attempt, run.attempt)) {
    err << "infrarsi-sim: INFRARSI_ATTEMPT='" << env_attempt << "' is not a number\n";
    return exit_usage;
  }

  auto t = compute_truth(cfg);
  if (!t.valid) {
    if (st.truth)
      out << truth_json(cfg, t).dump() << "\n";
    err << "infrarsi-sim: invalid parallel layout: " << t.error << "\n";
    return exit_usage;
  }
  for (const auto& w : t.lay.warnings)
    err << "infrarsi-sim: warning: " << w << "\n";
  if (st.truth) {
    out << truth_json(cfg, t).dump() << "\n";
    return 0;
  }
  out << "infrarsi-sim: " << cfg.model.name << " (" << cfg.model.layers << " layers, "
      << static_cast<std::uint64_t>(t.params_total) << " parameters) on " << cfg.gpus << " x "
      << t.hw->name << ": TP=" << t.lay.tp << " PP=" << t.lay.pp << " DP=" << t.lay.dp
      << " EP=" << t.lay.ep << " VPP=" << t.lay.vpp << " micro-batch=" << t.lay.micro_batch << " ("
      << t.lay.num_microbatches << " per step) recompute=" << to_string(cfg.parallel.recompute)
      << "; kernels: " << describe_kernels(cfg.kernels) << "; times are simulated seconds\n";
  if (t.oom) {
    err << oom_prefix << oom_json(cfg, t).dump() << "\n";
    err << "infrarsi-sim: " << oom_json(cfg, t)["message"].get<std::string>() << "\n";
    err.flush();
    return exit_oom;
  }
  for (const auto& line : simulate_run(cfg, t, run))
    out << metrics_prefix << line.dump() << "\n";
  out.flush();
  return 0;
}

} // namespace infrarsi::sim
