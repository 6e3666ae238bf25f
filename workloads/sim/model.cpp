#include "workloads/sim/model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace infrarsi::sim {

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;
constexpr double mib = 1024.0 * 1024.0;

std::string lower(std::string s) {
  for (auto& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

} // namespace

// -- hardware ---------------------------------------------------------------------------------

const std::vector<hardware_profile>& hardware_profiles() {
  // Peak and memory: NVIDIA data sheets (A100 80GB SXM4, H100 SXM5, H200 SXM); memory as
  // nvidia-smi reports it (81920, 81559 and 143771 MiB). HBM: 85 % of the data-sheet bandwidth.
  // NVLink: achievable NCCL bus bandwidth (300 and 450 GB/s per direction, about 80 %).
  // InfiniBand: one HDR (200 Gb/s) or NDR (400 Gb/s) NIC per GPU, 90 % of line rate.
  // GEMM, FlashAttention and launch constants are calibrated on the validation table
  // (docs/simulator.md).
  static const std::vector<hardware_profile> profiles = {
      {"A100-80GB", 312e12, static_cast<std::uint64_t>(81920 * mib), 2.039e12 * 0.85, 235e9, 2.5e-6,
       22.5e9, 6e-6, 0.86, 32, 0.62, 0.0, 6e-6, 8, 0.012},
      {"H100-80GB", 989e12, static_cast<std::uint64_t>(81559 * mib), 3.35e12 * 0.85, 360e9, 2e-6,
       45e9, 5e-6, 0.62, 64, 0.40, 0.62, 6e-6, 8, 0.009},
      {"H200-141GB", 989e12, static_cast<std::uint64_t>(143771 * mib), 4.8e12 * 0.85, 360e9, 2e-6,
       45e9, 5e-6, 0.64, 64, 0.42, 0.64, 6e-6, 8, 0.009},
  };
  return profiles;
}

const hardware_profile* find_hardware(const std::string& name) {
  auto want = lower(name);
  for (const auto& h : hardware_profiles())
    if (lower(h.name) == want)
      return &h;
  // Short names: "a100", "h100", "h200".
  for (const auto& h : hardware_profiles())
    if (lower(h.name).rfind(want + "-", 0) == 0)
      return &h;
  return nullptr;
}

// -- models -----------------------------------------------------------------------------------

namespace {

model_spec llama_like(std::string name, int layers, int hidden, int heads, int kv, int ffn,
                      int vocab) {
  model_spec m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv;
  m.ffn = ffn;
  m.vocab = vocab;
  return m;
}

model_spec gpt_like(std::string name, int layers, int hidden, int heads) {
  model_spec m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = 0;
  m.ffn = 4 * hidden;
  m.vocab = 51200;
  m.swiglu = false;
  m.rmsnorm = false;
  m.rope = false;
  m.dropout = true;
  m.linear_bias = true;
  m.tied_embeddings = true;
  return m;
}

} // namespace

const std::vector<model_spec>& model_presets() {
  static const std::vector<model_spec> presets = [] {
    std::vector<model_spec> v;
    // Dense Llama-style shapes (published configs on Hugging Face).
    v.push_back(llama_like("llama3-8b", 32, 4096, 32, 8, 14336, 128256));
    v.push_back(llama_like("yi-9b", 48, 4096, 32, 4, 11008, 64000));
    v.push_back(llama_like("codellama-34b", 48, 8192, 64, 8, 22016, 32000));
    v.push_back(llama_like("llama2-7b", 32, 4096, 32, 32, 11008, 32000));
    v.push_back(llama_like("llama3-70b", 80, 8192, 64, 8, 28672, 128256));
    // Mixture of experts.
    auto mixtral = llama_like("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000);
    mixtral.experts = 8;
    mixtral.top_k = 2;
    mixtral.expert_ffn = 14336;
    v.push_back(mixtral);
    auto deepseek = llama_like("deepseek-moe-16b", 28, 2048, 16, 16, 10944, 102400);
    deepseek.experts = 64;
    deepseek.top_k = 6;
    deepseek.expert_ffn = 1408;
    deepseek.shared_expert_ffn = 2 * 1408;
    v.push_back(deepseek);
    // GPT-3 style shapes of the validation table (vocabulary 51200, sequence 2048).
    v.push_back(gpt_like("gpt-1.7b", 24, 2304, 24));
    v.push_back(gpt_like("gpt-3.6b", 30, 3072, 32));
    v.push_back(gpt_like("gpt-7.5b", 36, 4096, 32));
    v.push_back(gpt_like("gpt-18b", 40, 6144, 48));
    v.push_back(gpt_like("gpt-22b", 48, 6144, 64));
    v.push_back(gpt_like("gpt-39b", 48, 8192, 64));
    v.push_back(gpt_like("gpt-76b", 60, 10240, 80));
    v.push_back(gpt_like("gpt-175b", 96, 12288, 96));
    v.push_back(gpt_like("gpt-530b", 105, 20480, 128));
    v.push_back(gpt_like("gpt-1t", 128, 25600, 160));
    return v;
  }();
  return presets;
}

const model_spec* find_model(const std::string& name) {
  auto want = lower(name);
  for (const auto& m : model_presets())
    if (m.name == want)
      return &m;
  return nullptr;
}

const char* to_string(recompute_mode m) {
  switch (m) {
  case recompute_mode::none:
    return "none";
  case recompute_mode::selective:
    return "selective";
  case recompute_mode::full:
    return "full";
  }
  return "?";
}

const char* to_string(contract_kind c) {
  switch (c) {
  case contract_kind::ok:
    return "ok";
  case contract_kind::loss_drift:
    return "loss_drift";
  case contract_kind::less_work:
    return "less_work";
  }
  return "?";
}

// -- layout -----------------------------------------------------------------------------------

std::string check_layout(const sim_config& cfg, layout& out) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallel;
  auto n = [](auto v) { return std::to_string(v); };
  out = layout{};
  const hardware_profile* hw = find_hardware(cfg.hardware);
  if (hw == nullptr)
    return "unknown GPU '" + cfg.hardware + "' (known: A100-80GB, H100-80GB, H200-141GB)";
  if (cfg.gpus < 1 || cfg.gpus > 512)
    return "number of GPUs " + n(cfg.gpus) + " is outside 1..512 (--gpus)";
  if (cfg.gpus > hw->gpus_per_node && cfg.gpus % hw->gpus_per_node != 0)
    return "number of GPUs " + n(cfg.gpus) + " is not a whole number of " + n(hw->gpus_per_node) +
           "-GPU nodes (--gpus)";
  if (m.layers < 1 || m.hidden < 1 || m.heads < 1 || m.ffn < 1 || m.vocab < 1)
    return "model dimensions must be positive (layers " + n(m.layers) + ", hidden " + n(m.hidden) +
           ", heads " + n(m.heads) + ", ffn " + n(m.ffn) + ", vocab " + n(m.vocab) + ")";
  if (m.hidden % m.heads != 0)
    return "hidden size " + n(m.hidden) + " is not a multiple of the " + n(m.heads) +
           " attention heads";
  if (m.query_groups() < 1 || m.heads % m.query_groups() != 0)
    return "the " + n(m.heads) + " attention heads are not a multiple of the " +
           n(m.query_groups()) + " query groups (--kv-heads)";
  if (cfg.seq_len < 1 || cfg.global_batch < 1)
    return "sequence length " + n(cfg.seq_len) + " and global batch " + n(cfg.global_batch) +
           " must be positive";
  if (p.tp < 1 || p.pp < 1 || p.ep < 1 || p.vpp < 1 || p.micro_batch < 1)
    return "parallel sizes and micro-batch must be at least 1 (--tp " + n(p.tp) + ", --pp " +
           n(p.pp) + ", --ep " + n(p.ep) + ", --vpp " + n(p.vpp) + ", --micro-batch " +
           n(p.micro_batch) + ")";
  if (!(p.bucket_mb > 0))
    return "bucket size must be positive (--bucket-mb " + std::to_string(p.bucket_mb) + ")";
  if (cfg.gpus % (p.tp * p.pp) != 0)
    return "TP x PP = " + n(p.tp) + " x " + n(p.pp) + " = " + n(p.tp * p.pp) +
           " does not divide the " + n(cfg.gpus) +
           " GPUs, so TP x PP x DP != GPUs for every whole DP (--tp " + n(p.tp) + ", --pp " +
           n(p.pp) + ", --gpus " + n(cfg.gpus) + ")";
  int dp = cfg.gpus / (p.tp * p.pp);
  if (m.heads % p.tp != 0)
    return "tensor parallel size " + n(p.tp) + " does not divide the " + n(m.heads) +
           " attention heads (--tp " + n(p.tp) + ")";
  if (m.query_groups() % p.tp != 0)
    return "tensor parallel size " + n(p.tp) + " does not divide the " + n(m.query_groups()) +
           " query groups (--tp " + n(p.tp) + ", --kv-heads " + n(m.query_groups()) + ")";
  int ffn_split = m.moe() ? m.expert_ffn : m.ffn;
  if (ffn_split % p.tp != 0)
    return "tensor parallel size " + n(p.tp) + " does not divide the MLP hidden size " +
           n(ffn_split) + " (--tp " + n(p.tp) + ")";
  if (m.layers % p.pp != 0)
    return "pipeline parallel size " + n(p.pp) + " does not divide the " + n(m.layers) +
           " layers (--pp " + n(p.pp) + ")";
  if (p.vpp > 1) {
    if (p.pp < 2)
      return "virtual pipeline stages (--vpp " + n(p.vpp) +
             ") need pipeline parallel size > 1 (--pp " + n(p.pp) + ")";
    if (m.layers % (p.pp * p.vpp) != 0)
      return "PP x VPP = " + n(p.pp) + " x " + n(p.vpp) + " does not divide the " + n(m.layers) +
             " layers (--pp " + n(p.pp) + ", --vpp " + n(p.vpp) + ")";
  }
  if (cfg.global_batch % (p.micro_batch * dp) != 0)
    return "global batch " + n(cfg.global_batch) +
           " is not a multiple of micro-batch x DP = " + n(p.micro_batch) + " x " + n(dp) +
           " (--global-batch " + n(cfg.global_batch) + ", --micro-batch " + n(p.micro_batch) +
           ", DP = GPUs / (TP x PP) = " + n(dp) + ")";
  int microbatches = cfg.global_batch / (p.micro_batch * dp);
  if (p.vpp > 1 && microbatches % p.pp != 0)
    return "the interleaved schedule needs the number of micro-batches (" + n(microbatches) +
           " = global batch / (micro-batch x DP)) to be a multiple of the pipeline parallel "
           "size " +
           n(p.pp) + " (--vpp " + n(p.vpp) + ")";
  if (m.moe()) {
    if (m.top_k < 1 || m.top_k > m.experts || m.expert_ffn < 1)
      return "MoE needs 1 <= top-k (" + n(m.top_k) + ") <= experts (" + n(m.experts) +
             ") and a positive expert FFN (" + n(m.expert_ffn) + ")";
    if (m.experts % p.ep != 0)
      return "expert parallel size " + n(p.ep) + " does not divide the " + n(m.experts) +
             " experts (--ep " + n(p.ep) + ")";
    if (dp % p.ep != 0)
      return "expert parallel size " + n(p.ep) + " does not divide the data parallel size " +
             n(dp) + " (--ep " + n(p.ep) + ", DP = GPUs / (TP x PP) = " + n(dp) + ")";
    if (p.tp > 1 && p.ep > 1 && !p.sequence_parallel)
      return "expert parallelism with tensor parallelism requires sequence parallelism (--tp " +
             n(p.tp) + ", --ep " + n(p.ep) + ", --sequence-parallel 0)";
  } else if (p.ep != 1) {
    return "expert parallel size " + n(p.ep) + " needs a mixture-of-experts model (--ep " +
           n(p.ep) + ")";
  }
  if (p.overlap_param_gather && !p.distributed_optimizer)
    return "--overlap-param-gather requires --distributed-optimizer";

  out.tp = p.tp;
  out.pp = p.pp;
  out.dp = dp;
  out.ep = p.ep;
  out.vpp = p.vpp;
  out.micro_batch = p.micro_batch;
  out.num_microbatches = microbatches;
  out.nodes = (cfg.gpus + hw->gpus_per_node - 1) / hw->gpus_per_node;
  out.sequence_parallel = p.sequence_parallel && p.tp > 1;
  if (p.sequence_parallel && p.tp == 1)
    out.warnings.push_back("--sequence-parallel has no effect with --tp 1; disabled");
  int multiple = 128 * p.tp;
  out.vocab_padded = (m.vocab + multiple - 1) / multiple * multiple;
  out.layers_per_chunk = m.layers / (p.pp * p.vpp);
  if (cfg.kernels.attention == attention_impl::flash3 && hw->flash3_efficiency <= 0)
    out.warnings.push_back("attention = flash3 is not supported on " + hw->name +
                           "; falling back to flash2");
  return {};
}

// -- parameters -------------------------------------------------------------------------------

namespace {

/// Parameters of one layer's attention block and norms (not split).
double attention_params(const model_spec& m) {
  double h = m.hidden;
  double kv = static_cast<double>(m.query_groups()) / m.heads;
  double p = h * h * (1 + 2 * kv) + h * h;
  if (m.linear_bias)
    p += h * (1 + 2 * kv) + h;
  return p;
}

double norm_params(const model_spec& m) {
  return (m.rmsnorm ? 1.0 : 2.0) * m.hidden;
}

double mlp_params(const model_spec& m, double ffn) {
  double h = m.hidden;
  double p = (m.swiglu ? 3.0 : 2.0) * h * ffn;
  if (m.linear_bias)
    p += (m.swiglu ? 2.0 : 1.0) * ffn + h;
  return p;
}

} // namespace

void count_parameters(const model_spec& m, int seq_len, double& total, double& active) {
  double layer_common = attention_params(m) + 2 * norm_params(m);
  double layer_total = layer_common;
  double layer_active = layer_common;
  if (m.moe()) {
    double router = static_cast<double>(m.hidden) * m.experts;
    double shared = m.shared_expert_ffn > 0 ? mlp_params(m, m.shared_expert_ffn) : 0.0;
    layer_total += router + shared + m.experts * mlp_params(m, m.expert_ffn);
    layer_active += router + shared + m.top_k * mlp_params(m, m.expert_ffn);
  } else {
    layer_total += mlp_params(m, m.ffn);
    layer_active = layer_total;
  }
  double embed = static_cast<double>(m.vocab) * m.hidden * (m.tied_embeddings ? 1 : 2) +
                 norm_params(m) + (m.rope ? 0.0 : static_cast<double>(seq_len) * m.hidden);
  total = m.layers * layer_total + embed;
  active = m.layers * layer_active + embed;
}

// -- activations (Korthikanti et al. 2022, sec. 4) --------------------------------------------

namespace {

/// Activation bytes of one layer for one micro-batch, before any parallel split, by how they
/// split: `replicated` lives on the full sequence on every TP rank unless sequence parallelism
/// shards it (norm and dropout related), `split` is sharded by TP (attention heads, FFN),
/// `core` is the attention core (dropped by selective recomputation, sharded by TP), and
/// `unsplit` is never sharded by TP (MoE dispatched tokens, all-gathered across TP).
struct activation_terms {
  double replicated = 0, split = 0, core = 0, unsplit = 0;
};

double moe_imbalance(const model_spec& m, int ep) {
  // Expected max-over-ranks of the routed load with an auxiliary balancing loss: a per-expert
  // load skew of 15 % (coefficient of variation), averaged over E/ep local experts, maximum of
  // ep ranks ~ mean + sigma sqrt(2 ln ep) (docs/simulator.md).
  if (!m.moe() || ep <= 1)
    return 1.0;
  double local = static_cast<double>(m.experts) / ep;
  return 1.0 + 0.15 / std::sqrt(local) * std::sqrt(2.0 * std::log(static_cast<double>(ep)));
}

activation_terms layer_terms(const model_spec& m, const kernel_settings& k, double s, double b,
                             int ep) {
  activation_terms t;
  double h = m.hidden;
  double a = m.heads;
  double sbh = s * b * h;
  double kv = static_cast<double>(m.query_groups()) / m.heads;
  double dr = m.dropout ? 1.0 : 0.0;
  // Replicated without sequence parallelism (Korthikanti's 10sbh for GPT-3).
  t.replicated = 2 * sbh     // attention norm input
                 + 2 * sbh   // QKV GEMM input (norm output)
                 + dr * sbh  // attention output dropout mask
                 + 2 * sbh   // MLP norm input
                 + 2 * sbh   // MLP GEMM input (norm output)
                 + dr * sbh; // MLP output dropout mask
  if (k.norm == norm_impl::eager)
    t.replicated += 2 * 4 * sbh; // fp32 copy of each norm's input
  // Attention, split by TP.
  t.split = 2 * sbh * (1 + kv) // Q and K, inputs of QK^T
            + 2 * sbh * kv     // V
            + 2 * sbh;         // attention output = output projection input
  double as2b = a * s * s * b;
  switch (k.attention) {
  case attention_impl::eager:
    t.core = 6 * as2b + dr * 3 * as2b;
    break;
  case attention_impl::fused_softmax:
    t.core = 2 * as2b + dr * 3 * as2b;
    break;
  case attention_impl::flash2:
  case attention_impl::flash3:
    t.core = 4 * a * s * b;
    break; // fp32 log-sum-exp
  }
  auto mlp_bytes = [&](double tokens, double ffn) {
    double x = (m.swiglu ? 4.0 : 2.0) * tokens * ffn // fc1 output (activation input)
               + 2 * tokens * ffn;                   // fc2 input (activation output)
    if (k.mlp_activation == activation_impl::eager && m.swiglu)
      x += 2 * tokens * ffn; // silu output kept by the unfused multiply
    return x;
  };
  if (m.moe()) {
    double imb = moe_imbalance(m, ep);
    double routed = s * b * m.top_k * imb;
    t.replicated += 4 * s * b * m.experts;      // router probabilities (fp32)
    t.unsplit += 2 * routed * h;                // dispatched tokens (expert fc1 input)
    t.split += mlp_bytes(routed, m.expert_ffn); // expert MLP, FFN side sharded by TP
    if (m.shared_expert_ffn > 0)
      t.split += mlp_bytes(s * b, m.shared_expert_ffn);
  } else {
    t.split += mlp_bytes(s * b, m.ffn);
  }
  return t;
}

double stored_bytes(const activation_terms& t, double sbh, int tp, bool sp, recompute_mode mode,
                    double& transient) {
  double rep = sp ? t.replicated / tp : t.replicated;
  double non_core = rep + t.split / tp + t.unsplit;
  double core = t.core / tp;
  switch (mode) {
  case recompute_mode::none:
    transient = 0;
    return non_core + core;
  case recompute_mode::selective:
    transient = core;
    return non_core;
  case recompute_mode::full:
    transient = non_core + core;        // one layer recomputed during its backward
    return sp ? 2 * sbh / tp : 2 * sbh; // the layer input is the checkpoint
  }
  return 0;
}

} // namespace

double layer_activation_bytes(const model_spec& m, const kernel_settings& k, double s, double b,
                              int t, bool sequence_parallel, recompute_mode mode) {
  auto terms = layer_terms(m, k, s, b, 1);
  double transient = 0;
  return stored_bytes(terms, s * b * m.hidden, t, sequence_parallel, mode, transient);
}

// -- time helpers -----------------------------------------------------------------------------

namespace {

struct gpu_model {
  const hardware_profile* hw;
  int sms;

  /// Seconds for an M x N x K GEMM (2MNK FLOPs): tile/wave quantisation (cuBLAS picks the tile
  /// with the best filled waves), a K-depth factor, and a memory-bound floor.
  [[nodiscard]] double gemm(double mm, double nn, double kk, double count = 1) const {
    if (mm <= 0 || nn <= 0 || kk <= 0 || count <= 0)
      return 0;
    struct tile {
      double m, n, eff;
    };
    static constexpr tile tiles[] = {
        {128, 256, 1.0}, {128, 128, 0.93}, {64, 128, 0.82}, {64, 64, 0.66}};
    double best = 0;
    for (const auto& t : tiles) {
      double count_tiles = std::ceil(mm / t.m) * std::ceil(nn / t.n) * count;
      double waves = std::ceil(count_tiles / sms);
      double fill = count_tiles / (waves * sms);
      // Partial tiles compute padding.
      double pad = (mm * nn * count) / (count_tiles * t.m * t.n);
      best = std::max(best, t.eff * fill * pad);
    }
    double depth = kk / (kk + hw->gemm_half_dim);
    double eff = hw->gemm_efficiency * best * depth;
    double flops = 2 * mm * nn * kk * count;
    double compute = flops / (hw->peak_bf16_flops * eff);
    double bytes = 2 * (mm * kk + kk * nn + mm * nn) * count;
    return std::max(compute, bytes / hw->hbm_bandwidth);
  }

  /// Seconds to move `bytes` through HBM (element-wise kernels).
  [[nodiscard]] double traffic(double bytes) const { return bytes / hw->hbm_bandwidth; }
};

/// Ring collective over `n` ranks: `factor` is 2(n-1)/n for all-reduce, (n-1)/n for
/// reduce-scatter or all-gather; `steps` latency hops 2(n-1) or (n-1).
double ring(double bytes, int n, double bandwidth, double latency, bool all_reduce) {
  if (n <= 1 || bytes <= 0)
    return 0;
  double f = (all_reduce ? 2.0 : 1.0) * (n - 1) / n;
  double steps = (all_reduce ? 2.0 : 1.0) * (n - 1);
  return f * bytes / bandwidth + steps * latency;
}

/// Times of one layer for one micro-batch on one GPU (seconds) and its kernel launches.
struct layer_time {
  double fwd_compute = 0; ///< GEMMs, attention core, element-wise
  double fwd_comm = 0;    ///< TP and EP collectives on the critical path
  double bwd_compute = 0;
  double bwd_comm = 0;
  double core_fwd = 0;     ///< the attention core alone (selective recomputation)
  double fwd_launches = 0; ///< kernel launches in forward
  double bwd_launches = 0;
  double core_launches = 0;
  double moe_launches = 0; ///< launches of the MoE part (never captured by CUDA graphs)
  double tp_comm_fwd = 0, ep_comm_fwd = 0;
};

struct comm_links {
  double tp_bw, tp_lat;
  double ep_bw_intra, ep_bw_inter, ep_lat, ep_inter_fraction;
};

layer_time time_layer(const gpu_model& g, const model_spec& m, const kernel_settings& k,
                      const layout& lay, double s, const comm_links& links) {
  layer_time r;
  const auto& hw = *g.hw;
  double b = lay.micro_batch;
  double h = m.hidden;
  double a = m.heads;
  double d = h / a;
  double t = lay.tp;
  double kv = static_cast<double>(m.query_groups()) / m.heads;
  double tokens = s * b; // GEMM rows (full sequence)
  double tokens_rep = lay.sequence_parallel ? tokens / t : tokens;
  bool sp = lay.sequence_parallel;
  double dr = m.dropout ? 1.0 : 0.0;

  // Attention GEMMs.
  double gemm_f = g.gemm(tokens, h * (1 + 2 * kv) / t, h) + g.gemm(tokens, h, h / t);
  double gemm_b = 2 * gemm_f;
  double launches = 2;
  // Attention core.
  double heads_local = a / t;
  double core_f = 0, core_b = 0, core_launch = 0;
  switch (k.attention) {
  case attention_impl::eager:
  case attention_impl::fused_softmax: {
    double bmm = g.gemm(s, s, d, b * heads_local) + g.gemm(s, d, s, b * heads_local);
    double elems = b * heads_local * s * s;
    double bytes_per = k.attention == attention_impl::eager ? 20.0 : 4.0;
    bytes_per += dr * 5.0;
    core_f = bmm + g.traffic(bytes_per * elems);
    core_b = 2 * bmm + g.traffic(2 * bytes_per * elems);
    core_launch = (k.attention == attention_impl::eager ? 6 : 3) + dr;
    break;
  }
  case attention_impl::flash2:
  case attention_impl::flash3: {
    double eff = hw.flash2_efficiency;
    if (k.attention == attention_impl::flash3 && hw.flash3_efficiency > 0)
      eff = hw.flash3_efficiency;
    double flops = 4 * b * s * s * h / t * 0.5 + 4 * b * s * 128 * h / t; // causal blocks
    core_f = flops / (hw.peak_bf16_flops * eff);
    core_b = 2.5 * flops / (hw.peak_bf16_flops * eff * 0.8);
    core_launch = 1;
    break;
  }
  }
  // Element-wise: norms, residual (+dropout), rotary.
  double norm_bytes = k.norm == norm_impl::eager ? 30.0 : 4.0;
  double ew = 2 * norm_bytes * tokens_rep * h + 2 * (6.0 + dr) * tokens_rep * h;
  launches += 2 * (k.norm == norm_impl::eager ? 7 : 1) + 2;
  if (m.rope) {
    ew += (k.rope == rope_impl::eager ? 16.0 : 4.0) * tokens * h * (1 + kv) / t;
    launches += k.rope == rope_impl::eager ? 10 : 1;
  }
  // MLP or MoE.
  auto act_bytes = [&](double toks, double ffn) {
    double per = m.swiglu ? (k.mlp_activation == activation_impl::eager ? 10.0 : 6.0)
                          : (k.mlp_activation == activation_impl::eager ? 6.0 : 4.0);
    return per * toks * ffn;
  };
  double mlp_gemm_f = 0;
  double moe_launch = 0;
  double ep_comm_f = 0;
  if (!m.moe()) {
    double fc1 = (m.swiglu ? 2.0 : 1.0) * m.ffn / t;
    mlp_gemm_f = g.gemm(tokens, fc1, h) + g.gemm(tokens, h, m.ffn / t);
    ew += act_bytes(tokens, m.ffn / t);
    launches += 2 + (k.mlp_activation == activation_impl::eager && m.swiglu ? 2 : 1);
  } else {
    double imb = moe_imbalance(m, lay.ep);
    double local = static_cast<double>(m.experts) / lay.ep;
    double per_expert = tokens * m.top_k * lay.ep / m.experts * imb; // rows of each expert GEMM
    double fc1 = (m.swiglu ? 2.0 : 1.0) * m.expert_ffn / t;
    double router = g.gemm(tokens_rep, m.experts, h);
    double experts = 0;
    if (k.moe_gemm == moe_gemm_impl::loop) {
      experts = local * (g.gemm(per_expert, fc1, h) + g.gemm(per_expert, h, m.expert_ffn / t));
      moe_launch += local * (2 + 1 + 4); // two GEMMs, activation, four index operations
      ew += 8 * per_expert * local * h;  // per-expert gather/scatter copies
    } else {
      // Grouped GEMM: one kernel over all local experts; the tiles of all groups fill the GPU
      // together (no per-expert tail wave).
      experts = g.gemm(per_expert, fc1, h, local) + g.gemm(per_expert, h, m.expert_ffn / t, local);
      moe_launch += 2 + 1 + 2;
    }
    mlp_gemm_f = router + experts;
    ew += act_bytes(per_expert * local, m.expert_ffn / t);
    ew += 8 * tokens_rep * m.top_k * h * imb; // permute and unpermute
    moe_launch += 8 + 6;                      // router (softmax, top-k, aux loss), permutation
    if (m.shared_expert_ffn > 0) {
      double sfc1 = (m.swiglu ? 2.0 : 1.0) * m.shared_expert_ffn / t;
      mlp_gemm_f += g.gemm(tokens, sfc1, h) + g.gemm(tokens, h, m.shared_expert_ffn / t);
      ew += act_bytes(tokens, m.shared_expert_ffn / t);
      launches += 3;
    }
    // Expert-parallel all-to-all: dispatch and combine, each the rank's routed tokens.
    if (lay.ep > 1) {
      double bytes = tokens_rep * m.top_k * h * 2 * imb * (lay.ep - 1) / lay.ep;
      double one = bytes * (1 - links.ep_inter_fraction) / links.ep_bw_intra +
                   bytes * links.ep_inter_fraction / links.ep_bw_inter +
                   (lay.ep - 1) * links.ep_lat;
      ep_comm_f = 2 * one;
      moe_launch += 2;
    }
  }
  // Tensor-parallel collectives: two all-reduces per layer (or all-gather + reduce-scatter
  // pairs with sequence parallelism, the same volume), Shoeybi et al. 2019, Korthikanti 2022.
  double tp_comm_f = 0;
  if (lay.tp > 1) {
    double bytes = 2 * tokens * h;
    if (sp)
      tp_comm_f = 2 * (ring(bytes, lay.tp, links.tp_bw, links.tp_lat, false) * 2);
    else
      tp_comm_f = 2 * ring(bytes, lay.tp, links.tp_bw, links.tp_lat, true);
    launches += sp ? 4 : 2;
  }
  double ew_f = g.traffic(ew);
  r.core_fwd = core_f;
  r.fwd_compute = gemm_f + core_f + mlp_gemm_f + ew_f;
  r.bwd_compute = gemm_b + core_b + 2 * mlp_gemm_f + 2 * ew_f;
  r.tp_comm_fwd = tp_comm_f;
  r.ep_comm_fwd = ep_comm_f;
  r.fwd_comm = tp_comm_f + ep_comm_f;
  r.bwd_comm = tp_comm_f + ep_comm_f;
  r.core_launches = core_launch;
  r.moe_launches = moe_launch;
  r.fwd_launches = launches + core_launch + moe_launch;
  r.bwd_launches = 1.5 * r.fwd_launches; // autograd: fewer Python ops, more kernels
  return r;
}

} // namespace

// -- truth ------------------------------------------------------------------------------------

truth compute_truth(const sim_config& cfg) {
  truth r;
  r.error = check_layout(cfg, r.lay);
  if (!r.error.empty())
    return r;
  r.valid = true;
  const auto& lay = r.lay;
  const auto& m = cfg.model;
  const auto& k = cfg.kernels;
  const auto& p = cfg.parallel;
  const hardware_profile& hw = *find_hardware(cfg.hardware);
  r.hw = &hw;
  r.flash3_fallback = k.attention == attention_impl::flash3 && hw.flash3_efficiency <= 0;
  gpu_model g{&hw, hw.name.rfind("A100", 0) == 0 ? 108 : 132};

  r.contract = k.data_loader == data_loader_impl::fast            ? contract_kind::less_work
               : k.optimizer_states == optimizer_state_impl::bf16 ? contract_kind::loss_drift
                                                                  : contract_kind::ok;
  r.tokens_per_step =
      static_cast<std::uint64_t>(cfg.global_batch) * static_cast<std::uint64_t>(cfg.seq_len);
  // The cheat computes on half of every sample.
  double s = k.data_loader == data_loader_impl::fast ? cfg.seq_len / 2.0 : cfg.seq_len;
  double b = lay.micro_batch;
  double h = m.hidden;
  double t = lay.tp;
  int gpn = hw.gpus_per_node;
  count_parameters(m, cfg.seq_len, r.params_total, r.params_active);

  // Links. Megatron rank order (TP fastest, then DP, then PP): a TP group spans tp consecutive
  // GPUs, a DP or EP group has stride tp, pipeline neighbours are tp*dp apart.
  comm_links links{};
  bool tp_intra = lay.tp <= gpn;
  links.tp_bw = tp_intra ? hw.nvlink_bandwidth : hw.ib_bandwidth;
  links.tp_lat = tp_intra ? hw.nvlink_latency_s : hw.ib_latency_s;
  int ep_span = lay.tp * lay.ep;
  int ep_local = ep_span <= gpn ? lay.ep : std::max(1, gpn / lay.tp);
  links.ep_inter_fraction =
      lay.ep > 1 ? static_cast<double>(lay.ep - ep_local) / (lay.ep - 1) : 0.0;
  links.ep_bw_intra = hw.nvlink_bandwidth;
  links.ep_bw_inter = hw.ib_bandwidth;
  links.ep_lat = ep_span <= gpn ? hw.nvlink_latency_s : hw.ib_latency_s;
  bool dp_intra = lay.tp * lay.dp <= gpn;
  double dp_bw = dp_intra ? hw.nvlink_bandwidth : hw.ib_bandwidth;
  double dp_lat = dp_intra ? hw.nvlink_latency_s : hw.ib_latency_s;
  bool pp_intra = lay.tp * lay.dp < gpn;
  double pp_bw = pp_intra ? hw.nvlink_bandwidth : hw.ib_bandwidth;
  double pp_lat = pp_intra ? hw.nvlink_latency_s : hw.ib_latency_s;

  // One layer, one micro-batch.
  auto lt = time_layer(g, m, k, lay, s, links);
  double tokens = s * b;
  double launch = hw.kernel_launch_s;
  const double graph_launch = 12e-6;
  double recompute_fwd = 0, recompute_comm = 0, recompute_launch = 0;
  switch (p.recompute) {
  case recompute_mode::none:
    break;
  case recompute_mode::selective:
    recompute_fwd = lt.core_fwd;
    recompute_launch = lt.core_launches;
    break;
  case recompute_mode::full:
    recompute_fwd = lt.fwd_compute;
    recompute_comm = lt.fwd_comm;
    recompute_launch = lt.fwd_launches;
    break;
  }
  // CPU time per layer: eager launches, or one graph launch per layer and pass with CUDA graphs
  // (the MoE part stays eager: its shapes depend on the routing).
  auto cpu_time = [&](double launches, double moe_part) {
    if (!p.cuda_graphs)
      return launches * launch;
    return graph_launch + moe_part * launch;
  };
  double cpu_f = cpu_time(lt.fwd_launches, lt.moe_launches);
  double cpu_b =
      cpu_time(lt.bwd_launches + recompute_launch,
               1.5 * lt.moe_launches + (p.recompute == recompute_mode::full ? lt.moe_launches : 0));
  // GPU time also pays a gap between consecutive kernels (drain, launch latency, ramp-up):
  // about 2.5 us eagerly, 1 us inside a CUDA graph (the MoE part stays eager).
  const double gap_eager = 2.5e-6, gap_graph = 1.0e-6;
  auto gaps = [&](double launches, double moe_part) {
    if (!p.cuda_graphs)
      return launches * gap_eager;
    return (launches - moe_part) * gap_graph + moe_part * gap_eager;
  };
  double full = p.recompute == recompute_mode::full ? 1.0 : 0.0;
  double gpu_f = lt.fwd_compute + lt.fwd_comm + gaps(lt.fwd_launches, lt.moe_launches);
  double gpu_b = lt.bwd_compute + recompute_fwd + lt.bwd_comm + recompute_comm +
                 gaps(lt.bwd_launches + recompute_launch, (1.5 + full) * lt.moe_launches);
  // Per-layer cost: dense layers let the CPU run ahead (cost = max over the whole stage);
  // MoE layers synchronise with the host once per layer (token counts), so there the CPU and
  // GPU times cannot hide each other beyond the layer.
  int L = m.layers;
  int layers_stage = L / lay.pp;

  // Embedding and output layer.
  double vp = lay.vocab_padded;
  double embed_f = g.traffic(4 * tokens * h) +
                   (lay.tp > 1 ? ring(2 * tokens * h, lay.tp, links.tp_bw, links.tp_lat, true) : 0);
  double embed_b = g.traffic(8 * tokens * h);
  double out_f = g.gemm(tokens, vp / t, h) + g.traffic(12 * tokens * vp / t) +
                 g.traffic((k.norm == norm_impl::eager ? 30.0 : 4.0) * tokens * h);
  double out_b = 2 * g.gemm(tokens, vp / t, h) + g.traffic(8 * tokens * vp / t);

  // Per stage, per micro-batch (all its chunks together).
  std::vector<double> stage_f(static_cast<std::size_t>(lay.pp)),
      stage_b(static_cast<std::size_t>(lay.pp)), stage_tp(static_cast<std::size_t>(lay.pp)),
      stage_ep(static_cast<std::size_t>(lay.pp));
  for (int st = 0; st < lay.pp; ++st) {
    double f, bw;
    if (m.moe()) {
      f = layers_stage * std::max(gpu_f, cpu_f) + layers_stage * 20e-6;
      bw = layers_stage * std::max(gpu_b, cpu_b) + layers_stage * 20e-6;
    } else {
      f = std::max(layers_stage * gpu_f, layers_stage * cpu_f);
      bw = std::max(layers_stage * gpu_b, layers_stage * cpu_b);
    }
    if (st == 0) {
      f += embed_f;
      bw += embed_b;
    }
    if (st == lay.pp - 1) {
      f += out_f;
      bw += out_b;
    }
    stage_f[static_cast<std::size_t>(st)] = f;
    stage_b[static_cast<std::size_t>(st)] = bw;
    stage_tp[static_cast<std::size_t>(st)] = layers_stage * lt.tp_comm_fwd * (2 + full);
    stage_ep[static_cast<std::size_t>(st)] = layers_stage * lt.ep_comm_fwd * (2 + full);
  }
  int crit = 0;
  double tau_max = 0, tau_sum = 0, b_sum = 0, f_sum = 0;
  for (int st = 0; st < lay.pp; ++st) {
    double tau = stage_f[static_cast<std::size_t>(st)] + stage_b[static_cast<std::size_t>(st)];
    tau_sum += tau;
    b_sum += stage_b[static_cast<std::size_t>(st)];
    f_sum += stage_f[static_cast<std::size_t>(st)];
    if (tau > tau_max) {
      tau_max = tau;
      crit = st;
    }
  }
  double mb = lay.num_microbatches;
  double v = lay.vpp;
  double tau_mean = tau_sum / lay.pp;
  // Pipeline: steady state paced by the slowest stage, fill and drain (p-1)/v of a stage's
  // time per micro-batch (Narayanan et al. 2021, sec. 2.2).
  double bubble = (lay.pp - 1) / v * tau_mean;
  double pp_comm = 0;
  if (lay.pp > 1) {
    double bytes = 2 * tokens * h / t; // scatter-gather optimisation: each TP rank sends 1/t
    double one = pp_lat + 10e-6 + bytes / pp_bw;
    pp_comm = 2 * (mb * v + lay.pp - 1) * one;
  }

  // Parameters per GPU, per stage.
  double attn_p = attention_params(m) / t + 2 * norm_params(m);
  double dense_mlp_p = 0, expert_p = 0;
  if (m.moe()) {
    dense_mlp_p = static_cast<double>(m.hidden) * m.experts +
                  (m.shared_expert_ffn > 0 ? mlp_params(m, m.shared_expert_ffn) / t : 0.0);
    expert_p = m.experts * mlp_params(m, m.expert_ffn) / (t * lay.ep);
  } else {
    dense_mlp_p = mlp_params(m, m.ffn) / t;
  }
  double layer_dense_p = attn_p + dense_mlp_p;
  double embed_p = vp * h / t + (m.rope ? 0.0 : static_cast<double>(cfg.seq_len) * h);
  bool dopt = p.distributed_optimizer;
  double opt_bytes = k.optimizer_states == optimizer_state_impl::bf16 ? 8.0 : 12.0;
  int expert_dp = std::max(1, lay.dp / lay.ep);

  // Activations per layer and micro-batch on one GPU.
  auto terms = layer_terms(m, k, s, b, lay.ep);
  double layer_transient = 0;
  double per_layer =
      stored_bytes(terms, s * b * h, lay.tp, lay.sequence_parallel, p.recompute, layer_transient);
  double sp_div = lay.sequence_parallel ? t : 1.0;

  r.stages.resize(static_cast<std::size_t>(lay.pp));
  double dp_exposed = 0, ag_exposed = 0, opt_time = 0;
  // Bucketed ring collectives of one gradient (or parameter) buffer: the number of buckets and
  // the time of one bucket.
  struct bucket_plan {
    double nb = 0, tb = 0;
    [[nodiscard]] double total() const { return nb * tb; }
  };
  auto buckets = [&](double bytes, int n, bool all_reduce, double bucket_bytes) {
    bucket_plan plan;
    if (n <= 1 || bytes <= 0)
      return plan;
    plan.nb = std::ceil(bytes / bucket_bytes);
    plan.tb = ring(bytes / plan.nb, n, dp_bw, dp_lat, all_reduce) + 15e-6; // + launch, bookkeeping
    return plan;
  };
  // What is left on the critical path of the buckets of `a` and `b`, reduced one after the
  // other on one stream. Without overlap: all of it. With overlap, bucket i becomes ready after
  // (i+1)/nb of the window W, so the last one finishes at max(W/nb + C, W + t_last):
  // exposed = max(W/nb + C - W, t_last), plus 3 % of the overlapped time (communication
  // kernels take SMs from the compute they overlap).
  auto exposed = [](const bucket_plan& first, const bucket_plan& second, bool overlap, double w) {
    double nb = first.nb + second.nb;
    double c = first.total() + second.total();
    if (nb == 0)
      return 0.0;
    if (!overlap)
      return c;
    double last = second.nb > 0 ? second.tb : first.tb;
    return std::max(w / nb + c - w, last) + 0.03 * std::min(c, w);
  };
  double bucket_bytes = p.bucket_mb * 1e6;
  for (int st = 0; st < lay.pp; ++st) {
    auto idx = static_cast<std::size_t>(st);
    auto& mem = r.stages[idx];
    mem.stage = st;
    double dense_p = layers_stage * layer_dense_p;
    double exp_p = layers_stage * expert_p;
    if (st == 0)
      dense_p += embed_p;
    if (st == lay.pp - 1) {
      dense_p += norm_params(m); // final norm
      // Output projection: its own matrix, or (tied) a copy of the embedding on the last stage
      // when the embedding lives on another stage (Megatron).
      if (!m.tied_embeddings || lay.pp > 1)
        dense_p += vp * h / t;
    }
    double params = dense_p + exp_p;
    mem.weights = 2 * params;
    mem.gradients = 4 * params;
    mem.optimizer = dopt ? opt_bytes * (dense_p / lay.dp + exp_p / expert_dp) : opt_bytes * params;
    // In-flight micro-batches (1F1B: p - stage) or chunks (interleaved: Megatron's warm-up
    // count + 1), capped by what the step has; Korthikanti et al. sec. 4.2.3.
    double layers_in_flight;
    double in_flight_mb;
    if (lay.vpp == 1) {
      in_flight_mb = std::min(mb, static_cast<double>(lay.pp - st));
      layers_in_flight = in_flight_mb * layers_stage;
    } else {
      double chunks =
          std::min(mb * v, static_cast<double>((lay.pp - st - 1) * 2 + (lay.vpp - 1) * lay.pp + 1));
      layers_in_flight = chunks * lay.layers_per_chunk;
      in_flight_mb = std::min(mb, std::ceil(chunks / v));
    }
    mem.activations = layers_in_flight * per_layer;
    if (st == 0 && m.dropout)
      mem.activations += in_flight_mb * s * b * h / sp_div; // embedding dropout mask
    double transient = layer_transient;
    if (st == lay.pp - 1) // logits and cross entropy in fp32 (Korthikanti's 4sbv/t)
      transient = std::max(transient, 4 * s * b * vp / t + 2 * s * b * h / sp_div);
    if (m.moe()) // all-to-all send and receive buffers
      transient += 2 * 2 * (s * b / sp_div) * m.top_k * h * moe_imbalance(m, lay.ep);
    if (lay.pp > 1) // pipeline receive buffers (forward and backward)
      transient += 2 * 2 * s * b * h / t;
    mem.transient = transient;
    int groups = (lay.tp > 1) + (lay.dp > 1) + (lay.pp > 1) + (lay.ep > 1);
    // CUDA context and cuBLAS workspace, NCCL buffers per communicator, caching-allocator
    // fragmentation; CUDA graphs keep a private memory pool and static buffers.
    mem.overhead =
        0.55 * gib + 0.25 * gib * groups + 0.25 * gib + 0.05 * (mem.activations + mem.transient);
    if (p.cuda_graphs)
      mem.overhead += 0.75 * gib + 0.05 * mem.activations;

    // Data-parallel gradient reduction (fp32): all-reduce, or reduce-scatter with the
    // distributed optimizer; expert gradients over the expert-data-parallel group.
    double window = stage_b[idx]; // the last micro-batch's backward
    auto rs_dense = buckets(4 * dense_p, lay.dp, !dopt, bucket_bytes);
    auto rs_expert = buckets(4 * exp_p, expert_dp, !dopt, bucket_bytes);
    double slack_b = st * (b_sum / lay.pp) / v; // this stage's last backward ends earlier
    dp_exposed = std::max(
        dp_exposed,
        std::max(0.0, exposed(rs_dense, rs_expert, p.overlap_grad_reduce, window) - slack_b));
    // Parameter all-gather (bf16) after the optimizer step, distributed optimizer only;
    // overlapped with the next step's first forward when asked.
    if (dopt) {
      auto ag_dense = buckets(2 * dense_p, lay.dp, false, bucket_bytes / 2);
      auto ag_expert = buckets(2 * exp_p, expert_dp, false, bucket_bytes / 2);
      double slack_f = st * (f_sum / lay.pp) / v;
      ag_exposed = std::max(
          ag_exposed,
          std::max(0.0,
                   exposed(ag_dense, ag_expert, p.overlap_param_gather, stage_f[idx]) - slack_f));
    }
    // Optimizer step: Adam is memory-bound. fp32 states: read and write master weights, m and
    // v, read the gradient, write the bf16 parameter (30 bytes per parameter; 22 with bf16
    // moments), plus one read of the gradients for the norm; multi-tensor-apply launches.
    double local = dopt ? dense_p / lay.dp + exp_p / expert_dp : params;
    double per_param = k.optimizer_states == optimizer_state_impl::bf16 ? 22.0 : 30.0;
    double step = g.traffic(per_param * local + 4 * local) + 0.4e-3 +
                  4 * (lay.dp > 1 ? dp_lat : 0.0); // gradient-norm all-reduce
    opt_time = std::max(opt_time, step);
  }

  // Phases: the slowest stage sets the pace.
  auto ci = static_cast<std::size_t>(crit);
  double comm_f = layers_stage * lt.fwd_comm;
  double comm_b = layers_stage * (lt.bwd_comm + recompute_comm);
  r.phases.data_s = 3e-3 + 0.3e-3 * mb;
  r.phases.forward_s = mb * std::max(0.0, stage_f[ci] - comm_f);
  r.phases.backward_s = mb * std::max(0.0, stage_b[ci] - comm_b);
  r.phases.bubble_s = bubble;
  r.comm.tp_s = mb * stage_tp[ci];
  r.comm.ep_s = mb * stage_ep[ci];
  r.comm.pp_s = pp_comm;
  r.comm.dp_s = dp_exposed + ag_exposed;
  double tp_ep = mb * (std::min(comm_f, stage_f[ci]) + std::min(comm_b, stage_b[ci]));
  r.phases.communication_s = tp_ep + pp_comm + dp_exposed + ag_exposed;
  r.phases.optimizer_s = opt_time;
  r.step_time_s = r.phases.total();

  // Memory: the most loaded stage.
  r.capacity_bytes = hw.memory_bytes;
  if (cfg.memory_cap_bytes > 0)
    r.capacity_bytes = std::min(r.capacity_bytes, cfg.memory_cap_bytes);
  int worst = 0;
  for (int st = 1; st < lay.pp; ++st)
    if (r.stages[static_cast<std::size_t>(st)].total() >
        r.stages[static_cast<std::size_t>(worst)].total())
      worst = st;
  r.peak = r.stages[static_cast<std::size_t>(worst)];
  r.peak_memory_bytes = std::ceil(r.peak.total());
  r.oom = r.peak_memory_bytes > static_cast<double>(r.capacity_bytes);
  if (r.oom)
    for (int st = 0; st < lay.pp; ++st)
      if (std::ceil(r.stages[static_cast<std::size_t>(st)].total()) >
          static_cast<double>(r.capacity_bytes)) {
        r.oom_rank = st * lay.tp * lay.dp;
        break;
      }

  // FLOPs per step. Model FLOPs count the contracted work (full sequences) without
  // recomputation and the full (non-causal) attention matrix, as Narayanan et al. (eq. 3) and
  // Korthikanti et al. (MFU) do; hardware FLOPs add what recomputation re-executes.
  auto fwd_flops = [&](double seq) {
    double kv = static_cast<double>(m.query_groups()) / m.heads;
    double attn = 2 * seq * (h * h * (1 + 2 * kv) + h * h);
    double core = 4 * seq * seq * h;
    double mlp;
    if (m.moe())
      mlp = 2 * seq * h * m.experts +
            m.top_k * 2 * seq * h * m.expert_ffn * (m.swiglu ? 3.0 : 2.0) +
            2 * seq * h * m.shared_expert_ffn * (m.swiglu ? 3.0 : 2.0);
    else
      mlp = 2 * seq * h * m.ffn * (m.swiglu ? 3.0 : 2.0);
    double layer = attn + core + mlp;
    double logits = 2 * seq * h * m.vocab;
    double recompute = p.recompute == recompute_mode::full        ? layer
                       : p.recompute == recompute_mode::selective ? core
                                                                  : 0.0;
    return std::pair<double, double>{L * layer + logits, L * recompute};
  };
  auto claimed = fwd_flops(cfg.seq_len);
  auto actual = fwd_flops(s);
  r.model_flops = 3 * claimed.first * cfg.global_batch;
  r.hardware_flops = (3 * actual.first + actual.second) * cfg.global_batch;
  double per_gpu = r.step_time_s * cfg.gpus;
  r.tflops_per_gpu = r.model_flops / per_gpu / 1e12;
  r.hardware_tflops_per_gpu = r.hardware_flops / per_gpu / 1e12;
  r.mfu = r.model_flops / per_gpu / hw.peak_bf16_flops;
  r.hfu = r.hardware_flops / per_gpu / hw.peak_bf16_flops;
  return r;
}

} // namespace infrarsi::sim
