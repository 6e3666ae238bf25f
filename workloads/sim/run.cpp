#include "workloads/sim/run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace infrarsi::sim {

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace {

/// splitmix64 stream: portable and reproducible everywhere (unlike std:: distributions).
class rng {
public:
  explicit rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Standard normal (Box-Muller).
  double normal() {
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300)
      u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

private:
  std::uint64_t state_;
};

std::uint64_t combine(std::uint64_t h, std::uint64_t v) {
  return mix64(h ^ mix64(v));
}

/// Hash of everything that changes the order of floating-point reductions (and so the last
/// bits of the loss): layout, micro-batch, bucketing, fused kernels. Recomputation, overlap and
/// CUDA graphs replay the same arithmetic and do not enter.
std::uint64_t numerics_hash(const sim_config& cfg, const truth& t) {
  std::uint64_t hsh = 0x5eed;
  for (std::uint64_t v :
       {static_cast<std::uint64_t>(t.lay.tp), static_cast<std::uint64_t>(t.lay.pp),
        static_cast<std::uint64_t>(t.lay.dp), static_cast<std::uint64_t>(t.lay.ep),
        static_cast<std::uint64_t>(t.lay.vpp), static_cast<std::uint64_t>(t.lay.micro_batch),
        static_cast<std::uint64_t>(t.lay.sequence_parallel),
        static_cast<std::uint64_t>(cfg.parallel.distributed_optimizer),
        static_cast<std::uint64_t>(cfg.parallel.bucket_mb * 1000),
        static_cast<std::uint64_t>(cfg.kernels.norm),
        static_cast<std::uint64_t>(cfg.kernels.mlp_activation),
        static_cast<std::uint64_t>(cfg.kernels.rope),
        static_cast<std::uint64_t>(cfg.kernels.attention),
        static_cast<std::uint64_t>(cfg.kernels.moe_gemm)})
    hsh = combine(hsh, v);
  return hsh;
}

double normal_at(std::uint64_t key) {
  rng r{key};
  return r.normal();
}

double uniform_at(std::uint64_t key) {
  rng r{key};
  return r.uniform();
}

} // namespace

noise_params cluster_noise(const sim_config& cfg, const truth& t, const run_options& opt) {
  (void)cfg;
  noise_params n;
  double nodes = t.lay.nodes;
  n.step_cv = t.hw->step_cv * (1 + 0.35 * std::log2(nodes));
  if (opt.cv_override >= 0)
    n.step_cv = opt.cv_override;
  n.launch_sigma = 0.6 * n.step_cv;
  n.straggler_p = std::min(0.1, 0.01 * std::sqrt(nodes));
  return n;
}

double synthetic_loss(const sim_config& cfg, const truth& t, int step) {
  // Hoffmann et al. 2022 (Chinchilla), eq. 10 fit: E = 1.69, A = 406.4, B = 410.7,
  // alpha = 0.34, beta = 0.28; N parameters (active), D tokens seen so far.
  const double e = 1.69, a = 406.4, b = 410.7, alpha = 0.34, beta = 0.28;
  bool less_work = cfg.kernels.data_loader == data_loader_impl::fast;
  double tokens = static_cast<double>(t.tokens_per_step) * (less_work ? 0.5 : 1.0);
  double d = tokens * (step + 1);
  double n = std::max(1.0, t.params_active);
  double loss = e + a / std::pow(n, alpha) + b / std::pow(d, beta);
  loss = std::min(loss, std::log(static_cast<double>(cfg.model.vocab)));
  // Data order: the same for every configuration that sees the same samples.
  std::uint64_t stream = less_work ? 1 : 0;
  double amplitude = less_work ? 0.02 * std::sqrt(2.0) : 0.02;
  loss += amplitude *
          (2 * uniform_at(combine(combine(0xda7a, stream), static_cast<std::uint64_t>(step))) - 1);
  // Reduction-order noise.
  loss *= 1 + 3e-4 * normal_at(combine(numerics_hash(cfg, t), static_cast<std::uint64_t>(step)));
  // bf16 Adam moments: a drift that grows with the steps.
  if (cfg.kernels.optimizer_states == optimizer_state_impl::bf16)
    loss *= 1 + 0.015 + 0.005 * step;
  return loss;
}

std::vector<nlohmann::ordered_json> simulate_run(const sim_config& cfg, const truth& t,
                                                 const run_options& opt) {
  std::vector<nlohmann::ordered_json> lines;
  auto noise = cluster_noise(cfg, t, opt);
  rng r{combine(combine(combine(0x1a0c4, opt.seed), opt.launch_id), opt.attempt)};
  double launch_offset = opt.noise ? std::exp(noise.launch_sigma * r.normal()) : 1.0;
  double total_time = 0;
  std::vector<double> timed;
  double last_loss = 0;
  for (int step = 0; step < opt.steps; ++step) {
    double factor = launch_offset;
    double straggle_extra = 0;
    if (opt.noise) {
      factor *= std::exp(noise.step_cv * r.normal());
      double u = r.uniform();
      double v = r.uniform();
      if (u < noise.straggler_p)
        straggle_extra =
            (noise.straggler_min + (noise.straggler_max - noise.straggler_min) * v - 1);
    }
    bool warmup = step < opt.warmup_steps;
    if (warmup) // first step: allocator growth, NCCL setup, autotuning (and graph capture)
      factor *= step == 0 ? (1.8 + (cfg.parallel.cuda_graphs ? 1.5 : 0.0)) : 1.1;
    auto ph = t.phases;
    double data = ph.data_s * factor;
    double fwd = ph.forward_s * factor;
    double bwd = ph.backward_s * factor;
    double opt_s = ph.optimizer_s * factor;
    double comm = ph.communication_s * factor;
    double bubble = ph.bubble_s * factor;
    double subtotal = data + fwd + bwd + opt_s + comm + bubble;
    comm += straggle_extra * subtotal; // the others wait for the straggler in a collective
    double step_time = subtotal * (1 + straggle_extra);
    total_time += step_time;
    if (!warmup)
      timed.push_back(step_time);
    last_loss = synthetic_loss(cfg, t, step);
    nlohmann::ordered_json j;
    j["step"] = step;
    j["loss"] = last_loss;
    j["tokens"] = t.tokens_per_step;
    j["step_time_s"] = step_time;
    j["data_s"] = data;
    j["forward_s"] = fwd;
    j["backward_s"] = bwd;
    j["optimizer_s"] = opt_s;
    j["communication_s"] = comm;
    j["bubble_s"] = bubble;
    j["peak_memory_bytes"] = static_cast<std::uint64_t>(t.peak_memory_bytes);
    j["warmup"] = warmup;
    lines.push_back(std::move(j));
  }
  std::sort(timed.begin(), timed.end());
  double median = timed.empty() ? 0.0
                  : timed.size() % 2 == 1
                      ? timed[timed.size() / 2]
                      : 0.5 * (timed[timed.size() / 2 - 1] + timed[timed.size() / 2]);
  // Model start-up (process launch, NCCL init, weight init) in simulated seconds.
  double startup = 30.0 + 2e-9 * t.params_total / cfg.gpus * 10;
  nlohmann::ordered_json f;
  f["event"] = "final";
  f["status"] = "ok";
  f["simulated"] = true;
  f["steps"] = opt.steps;
  f["tokens_per_step"] = t.tokens_per_step;
  f["tokens_total"] = t.tokens_per_step * static_cast<std::uint64_t>(opt.steps);
  f["final_loss"] = last_loss;
  f["params"] = static_cast<std::uint64_t>(t.params_total);
  f["params_active"] = static_cast<std::uint64_t>(t.params_active);
  f["layers"] = cfg.model.layers;
  f["model"] = cfg.model.name;
  f["gpu"] = t.hw->name;
  f["gpus"] = cfg.gpus;
  f["nodes"] = t.lay.nodes;
  f["tp"] = t.lay.tp;
  f["pp"] = t.lay.pp;
  f["dp"] = t.lay.dp;
  f["ep"] = t.lay.ep;
  f["vpp"] = t.lay.vpp;
  f["micro_batch"] = t.lay.micro_batch;
  f["num_microbatches"] = t.lay.num_microbatches;
  f["global_batch"] = cfg.global_batch;
  f["seq_len"] = cfg.seq_len;
  f["recompute"] = to_string(cfg.parallel.recompute);
  f["sequence_parallel"] = t.lay.sequence_parallel;
  f["distributed_optimizer"] = cfg.parallel.distributed_optimizer;
  f["overlap_grad_reduce"] = cfg.parallel.overlap_grad_reduce;
  f["overlap_param_gather"] = cfg.parallel.overlap_param_gather;
  f["bucket_mb"] = cfg.parallel.bucket_mb;
  f["cuda_graphs"] = cfg.parallel.cuda_graphs;
  f["kernels"] = {{"norm", to_string(cfg.kernels.norm)},
                  {"mlp_activation", to_string(cfg.kernels.mlp_activation)},
                  {"rope", to_string(cfg.kernels.rope)},
                  {"attention", to_string(cfg.kernels.attention)},
                  {"moe_gemm", to_string(cfg.kernels.moe_gemm)},
                  {"optimizer_states", to_string(cfg.kernels.optimizer_states)},
                  {"data_loader", to_string(cfg.kernels.data_loader)}};
  f["peak_memory_bytes"] = static_cast<std::uint64_t>(t.peak_memory_bytes);
  f["memory_capacity_bytes"] = t.capacity_bytes;
  f["timed_steps"] = {std::min(opt.warmup_steps, opt.steps - 1), opt.steps - 1};
  f["step_time_median_s"] = median;
  double model_flops_per_s = median > 0 ? t.model_flops / median : 0.0;
  f["tflops_per_gpu"] = model_flops_per_s / cfg.gpus / 1e12;
  f["mfu"] = model_flops_per_s / cfg.gpus / t.hw->peak_bf16_flops;
  f["simulated_wall_s"] = startup + total_time;
  f["device_seconds"] = (startup + total_time) * cfg.gpus;
  f["seed"] = opt.seed;
  f["launch_id"] = opt.launch_id;
  f["attempt"] = opt.attempt;
  f["noise"] = opt.noise;
  lines.push_back(std::move(f));
  return lines;
}

nlohmann::ordered_json truth_json(const sim_config& cfg, const truth& t) {
  nlohmann::ordered_json j;
  j["valid"] = t.valid;
  if (!t.valid) {
    j["error"] = t.error;
    return j;
  }
  j["oom"] = t.oom;
  j["contract"] = to_string(t.contract);
  j["step_time_s"] = t.step_time_s;
  j["peak_memory_bytes"] = static_cast<std::uint64_t>(t.peak_memory_bytes);
  j["memory_capacity_bytes"] = t.capacity_bytes;
  j["tokens_per_step"] = t.tokens_per_step;
  j["tflops_per_gpu"] = t.tflops_per_gpu;
  j["hardware_tflops_per_gpu"] = t.hardware_tflops_per_gpu;
  j["mfu"] = t.mfu;
  j["hfu"] = t.hfu;
  j["model_flops_per_step"] = t.model_flops;
  j["params"] = static_cast<std::uint64_t>(t.params_total);
  j["params_active"] = static_cast<std::uint64_t>(t.params_active);
  j["phases"] = {{"data_s", t.phases.data_s},
                 {"forward_s", t.phases.forward_s},
                 {"backward_s", t.phases.backward_s},
                 {"bubble_s", t.phases.bubble_s},
                 {"communication_s", t.phases.communication_s},
                 {"optimizer_s", t.phases.optimizer_s}};
  j["communication"] = {
      {"tp_s", t.comm.tp_s}, {"ep_s", t.comm.ep_s}, {"pp_s", t.comm.pp_s}, {"dp_s", t.comm.dp_s}};
  j["layout"] = {{"gpu", t.hw->name},
                 {"gpus", cfg.gpus},
                 {"nodes", t.lay.nodes},
                 {"tp", t.lay.tp},
                 {"pp", t.lay.pp},
                 {"dp", t.lay.dp},
                 {"ep", t.lay.ep},
                 {"vpp", t.lay.vpp},
                 {"micro_batch", t.lay.micro_batch},
                 {"num_microbatches", t.lay.num_microbatches},
                 {"sequence_parallel", t.lay.sequence_parallel},
                 {"vocab_padded", t.lay.vocab_padded}};
  auto mem = [](const memory_breakdown& m) {
    return nlohmann::ordered_json{{"stage", m.stage},
                                  {"weights", m.weights},
                                  {"gradients", m.gradients},
                                  {"optimizer", m.optimizer},
                                  {"activations", m.activations},
                                  {"transient", m.transient},
                                  {"overhead", m.overhead},
                                  {"total", m.total()}};
  };
  j["memory_peak_stage"] = mem(t.peak);
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const auto& s : t.stages)
    stages.push_back(mem(s));
  j["memory_by_stage"] = std::move(stages);
  if (!t.lay.warnings.empty())
    j["warnings"] = t.lay.warnings;
  return j;
}

nlohmann::ordered_json oom_json(const sim_config& cfg, const truth& t) {
  int rank = std::max(0, t.oom_rank);
  int gpn = t.hw->gpus_per_node;
  const memory_breakdown* stage = &t.peak;
  for (const auto& s : t.stages)
    if (s.stage * t.lay.tp * t.lay.dp == rank)
      stage = &s;
  double needed = std::ceil(stage->total());
  double available = static_cast<double>(t.capacity_bytes);
  auto gib = [](double x) { return x / (1024.0 * 1024.0 * 1024.0); };
  char msg[256];
  std::snprintf(msg, sizeof msg,
                "CUDA out of memory (simulated): GPU %d (node %d) of %s needs %.2f GiB, total "
                "capacity %.2f GiB",
                rank % gpn, rank / gpn, t.hw->name.c_str(), gib(needed), gib(available));
  return nlohmann::ordered_json{{"gpu", rank % gpn},
                                {"node", rank / gpn},
                                {"rank", rank},
                                {"stage", stage->stage},
                                {"device", t.hw->name},
                                {"gpus", cfg.gpus},
                                {"needed_bytes", static_cast<std::uint64_t>(needed)},
                                {"available_bytes", t.capacity_bytes},
                                {"message", msg}};
}

} // namespace infrarsi::sim
