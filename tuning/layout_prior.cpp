#include "tuning/layout_prior.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace infrarsi::tuning {

namespace {

// Indexes into knob_roles().
enum role_index : int {
  r_tp = 0,
  r_pp,
  r_vpp,
  r_cp,
  r_ep,
  r_dp,
  r_micro_batch,
  r_grad_accum,
  r_recompute,
  r_sequence_parallel,
  r_zero_stage,
  r_distributed_optimizer,
  r_count
};

std::string lower(std::string s) {
  for (auto& ch : s)
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// "t4" as a token of a GPU name: not inside another word or number ("rtx4090" is not a T4).
bool has_token(const std::string& s, const std::string& token) {
  for (auto pos = s.find(token); pos != std::string::npos; pos = s.find(token, pos + 1)) {
    bool left = pos == 0 || !std::isalnum(static_cast<unsigned char>(s[pos - 1]));
    auto end = pos + token.size();
    bool right = end == s.size() || !std::isalnum(static_cast<unsigned char>(s[end]));
    if (left && right)
      return true;
  }
  return false;
}

// Adam under mixed precision: 2 (16-bit weights) + 2 (16-bit gradients) + K = 12 (fp32 master
// weights, momentum, variance) bytes per parameter; ZeRO stage z shards the last parts over d.
double state_bytes_per_parameter(std::int64_t zero_stage, double d) {
  switch (zero_stage) {
    case 0: return 16.0;
    case 1: return 4.0 + 12.0 / d;
    case 2: return 2.0 + 14.0 / d;
    default: return 16.0 / d;
  }
}

constexpr double efficiency_max = 0.5;
constexpr double tokens_half = 128.0;
constexpr double width_half = 128.0;
constexpr double fixed_overhead_bytes = 1024.0 * 1024.0 * 1024.0;

} // namespace

std::pair<double, double> layout_offsets(const layout_prior& prior, const layout_estimate& baseline,
                                         const knob_assignment& c) {
  if (!baseline.valid)
    return {0.0, 0.0};
  auto e = prior.estimate(c);
  if (!e.valid)
    return {0.0, 0.0};
  return {std::log(e.step_time_s) - std::log(baseline.step_time_s), std::log(e.peak_memory_bytes)};
}

double gpu_peak_tflops(const std::string& gpu) {
  auto g = lower(gpu);
  if (contains(g, "h200") || contains(g, "gh200"))
    return 989.0;
  if (contains(g, "h100") || contains(g, "h800"))
    return contains(g, "pcie") ? 756.0 : 989.0;
  if (contains(g, "a100") || contains(g, "a800"))
    return 312.0;
  if (contains(g, "v100"))
    return contains(g, "pcie") ? 112.0 : 125.0;
  if (contains(g, "l40s"))
    return 362.0;
  if (has_token(g, "l4") || g.rfind("l4-", 0) == 0)
    return 121.0;
  if (has_token(g, "a10") || g.rfind("a10-", 0) == 0)
    return 125.0;
  if (has_token(g, "t4") || g.rfind("t4-", 0) == 0)
    return 65.0;
  if (contains(g, "mi300x"))
    return 1307.0;
  if (contains(g, "mi250x"))
    return 383.0;
  return 0.0;
}

double default_intra_node_bytes_per_s(const hardware_spec& hw) {
  if (hw.intra_node_bytes_per_s > 0)
    return hw.intra_node_bytes_per_s;
  auto link = lower(hw.interconnect);
  auto g = lower(hw.gpu);
  bool old_pcie = has_token(g, "t4") || g.rfind("t4-", 0) == 0 || contains(g, "v100")
                  || contains(g, "p100");
  if (contains(link, "nvlink") || contains(link, "nvswitch") || contains(link, "sxm")) {
    if (contains(g, "h100") || contains(g, "h200") || contains(g, "h800"))
      return 450e9;
    if (contains(g, "v100"))
      return 150e9;
    return 300e9;
  }
  return old_pcie ? 12e9 : 25e9;
}

double default_inter_node_bytes_per_s(const hardware_spec& hw) {
  if (hw.inter_node_bytes_per_s > 0)
    return hw.inter_node_bytes_per_s;
  auto link = lower(hw.interconnect);
  // A node's bandwidth to the other nodes: one 200 Gb/s InfiniBand HDR port per GPU, or one
  // 100 Gb/s Ethernet port per node.
  if (contains(link, "infiniband") || has_token(link, "ib") || contains(link, "roce"))
    return 25e9 * static_cast<double>(std::max<std::uint32_t>(1, hw.gpus_per_node));
  return 12.5e9;
}

std::optional<layout_prior> layout_prior::from_task(const task_spec& task, std::string& why) {
  layout_prior p;
  p.task_ = &task;
  const auto& roles = knob_roles();
  bool any = false;
  for (const auto& k : task.knobs) {
    if (k.role.empty())
      continue;
    auto it = std::find(roles.begin(), roles.end(), k.role);
    if (it == roles.end())
      continue;
    p.role_knob_[it - roles.begin()] = k.name;
    any = true;
  }
  if (!any) {
    why = "no knob declares a layout role";
    return std::nullopt;
  }
  if (!task.model.declared) {
    why = "the task has no [model] table";
    return std::nullopt;
  }
  auto shape = [&](const char* key, std::int64_t fallback) {
    auto it = task.model.shape.find(key);
    return it != task.model.shape.end() ? it->second : fallback;
  };
  for (const char* key : {"layers", "hidden", "heads", "seq_len", "global_batch"})
    if (shape(key, 0) <= 0) {
      why = std::string{"[model] lacks "} + key;
      return std::nullopt;
    }
  if (!task.hardware.declared) {
    why = "the task has no [hardware] table";
    return std::nullopt;
  }
  p.layers_ = shape("layers", 0);
  p.hidden_ = shape("hidden", 0);
  p.heads_ = shape("heads", 0);
  p.kv_heads_ = shape("kv_heads", p.heads_);
  p.ffn_ = shape("ffn", 4 * p.hidden_);
  p.vocab_ = shape("vocab", 0);
  p.seq_ = shape("seq_len", 0);
  p.global_batch_ = shape("global_batch", 0);
  p.experts_ = task.model.architecture == "moe" ? shape("experts", 1) : 1;
  p.experts_per_token_ = task.model.architecture == "moe" ? shape("experts_per_token", 1) : 1;
  // A gated FFN (SwiGLU, three matrices) keeps the parameters of a 4h one at f = 8h/3
  // (Shazeer 2020, "GLU Variants Improve Transformer"): a declared f under 3.5 h is taken as
  // gated.
  p.gated_ = static_cast<double>(p.ffn_) < 3.5 * static_cast<double>(p.hidden_);
  p.flash_ = task.model.attention == "flash";
  p.gpus_per_node_ = task.hardware.gpus_per_node;
  p.gpus_ = static_cast<std::int64_t>(task.hardware.gpus_per_node) * task.hardware.nodes;
  double tflops = task.hardware.peak_tflops > 0 ? task.hardware.peak_tflops
                                                : gpu_peak_tflops(task.hardware.gpu);
  if (!(tflops > 0)) {
    why = "the peak of GPU \"" + task.hardware.gpu
          + "\" is not known (declare hardware.peak_tflops)";
    return std::nullopt;
  }
  p.peak_flops_ = tflops * 1e12;
  p.intra_bw_ = default_intra_node_bytes_per_s(task.hardware);
  p.inter_bw_ = default_inter_node_bytes_per_s(task.hardware);
  const double h = static_cast<double>(p.hidden_);
  const double h_kv = h * static_cast<double>(p.kv_heads_) / static_cast<double>(p.heads_);
  const double f = static_cast<double>(p.ffn_);
  const double k_f = p.gated_ ? 3.0 : 2.0;
  p.layer_params_ = 2.0 * h * h + 2.0 * h * h_kv + k_f * h * f * static_cast<double>(p.experts_);
  p.embedding_params_ = static_cast<double>(p.vocab_) * h;
  p.params_ = static_cast<double>(p.layers_) * p.layer_params_ + p.embedding_params_;
  return p;
}

layout_estimate layout_prior::estimate(const knob_assignment& knobs) const {
  layout_estimate e;
  auto value = [&](int role) -> const knob_value* {
    const auto& name = role_knob_[role];
    if (name.empty())
      return nullptr;
    if (auto it = knobs.find(name); it != knobs.end())
      return &it->second;
    if (const auto* k = task_->find_knob(name))
      return &k->default_value;
    return nullptr;
  };
  auto integer = [&](int role, std::int64_t fallback) {
    const auto* v = value(role);
    if (v == nullptr)
      return fallback;
    if (const auto* i = std::get_if<std::int64_t>(v))
      return *i;
    if (const auto* d = std::get_if<double>(v))
      return static_cast<std::int64_t>(std::llround(*d));
    if (const auto* b = std::get_if<bool>(v))
      return static_cast<std::int64_t>(*b ? 1 : 0);
    return fallback;
  };
  auto flag = [&](int role) {
    const auto* v = value(role);
    if (v == nullptr)
      return false;
    if (const auto* b = std::get_if<bool>(v))
      return *b;
    return integer(role, 0) != 0;
  };
  // Recomputation: 0 none, 1 selective, 2 full.
  int recompute = 0;
  if (const auto* v = value(r_recompute)) {
    if (const auto* b = std::get_if<bool>(v))
      recompute = *b ? 2 : 0;
    else if (const auto* s = std::get_if<std::string>(v)) {
      auto t = lower(*s);
      recompute = t == "full" || t == "true" || t == "on" || t == "1" ? 2
                  : t == "selective"                                  ? 1
                                                                      : 0;
    }
  }
  const std::int64_t t = integer(r_tp, 1);
  const std::int64_t p = integer(r_pp, 1);
  const std::int64_t v = std::max<std::int64_t>(1, integer(r_vpp, 1));
  const std::int64_t c = integer(r_cp, 1);
  const std::int64_t ep = integer(r_ep, 1);
  const std::int64_t b = integer(r_micro_batch, 1);
  const bool sp = flag(r_sequence_parallel) && t > 1;
  std::int64_t zero = integer(r_zero_stage, 0);
  if (zero < 1 && flag(r_distributed_optimizer))
    zero = 1;
  auto invalid = [&](std::string why) {
    layout_estimate bad;
    bad.why_invalid = std::move(why);
    return bad;
  };
  if (t < 1 || p < 1 || c < 1 || ep < 1 || b < 1)
    return invalid("a layout size below 1");
  if (gpus_ % (t * p * c) != 0)
    return invalid(std::to_string(gpus_) + " GPUs are not divisible by tp x pp x cp = "
                   + std::to_string(t * p * c));
  std::int64_t d = gpus_ / (t * p * c);
  if (!role_knob_[r_dp].empty()) {
    d = integer(r_dp, d);
    if (d < 1 || t * p * c * d != gpus_)
      return invalid("tp x pp x cp x dp = " + std::to_string(t * p * c * std::max<std::int64_t>(d, 0))
                     + " is not the " + std::to_string(gpus_) + " GPUs");
  }
  if (heads_ % t != 0)
    return invalid(std::to_string(heads_) + " heads are not divisible by tp " + std::to_string(t));
  if (p * v > layers_)
    return invalid("pp x vpp = " + std::to_string(p * v) + " exceeds the "
                   + std::to_string(layers_) + " layers");
  if (v > 1 && p == 1)
    return invalid("interleaving (vpp > 1) needs pp > 1");
  if (experts_ % ep != 0 || (d * c) % ep != 0)
    return invalid("ep " + std::to_string(ep) + " divides neither the experts nor dp x cp");
  std::int64_t m = 0;
  if (!role_knob_[r_grad_accum].empty()) {
    m = integer(r_grad_accum, 1);
    if (m < 1 || b * d * m != global_batch_)
      return invalid("micro-batch x dp x grad_accum is not the global batch "
                     + std::to_string(global_batch_));
  } else {
    if (global_batch_ % (b * d) != 0)
      return invalid("global batch " + std::to_string(global_batch_)
                     + " is not divisible by micro-batch x dp = " + std::to_string(b * d));
    m = global_batch_ / (b * d);
  }
  if (v > 1 && m % p != 0)
    return invalid("interleaving needs the micro-batches per step to be a multiple of pp");

  const double h = static_cast<double>(hidden_);
  const double h_kv = h * static_cast<double>(kv_heads_) / static_cast<double>(heads_);
  const double f = static_cast<double>(ffn_);
  const double s = static_cast<double>(seq_);
  const double a = static_cast<double>(heads_);
  const double V = static_cast<double>(vocab_);
  const double L = static_cast<double>(layers_);
  const double k_f = gated_ ? 3.0 : 2.0;
  const double td = static_cast<double>(t), pd = static_cast<double>(p),
               vd = static_cast<double>(v), cd = static_cast<double>(c),
               dd = static_cast<double>(d), bd = static_cast<double>(b),
               md = static_cast<double>(m);

  // -- compute: FLOPs per token of one layer, forward; training = 3 forwards (+1 with full
  // recomputation, + the attention core with selective recomputation).
  const double attn_core = 4.0 * s * h;
  const double forward_layer = 2.0 * (2.0 * h * h + 2.0 * h * h_kv)
                               + 2.0 * k_f * h * f * static_cast<double>(experts_per_token_)
                               + attn_core;
  const double train_layer = 3.0 * forward_layer
                             + (recompute == 2 ? forward_layer : recompute == 1 ? attn_core : 0.0);
  const double logits = 6.0 * h * V;
  // Stages are cut in whole layers; the logits count as logits/train_layer layers of a balanced
  // partition (DeepSpeed's and Megatron's uneven first/last stages).
  const double layer_equivalents = L + logits / train_layer;
  const double stage_layers =
    p * v == 1 ? layer_equivalents : std::ceil(layer_equivalents / (pd * vd) - 1e-9) * vd;
  const double tokens_per_replica = static_cast<double>(global_batch_) * s / dd;
  const double flops_per_gpu = tokens_per_replica * stage_layers * train_layer / (td * cd);
  const double n = bd * s / cd;
  const double w = h / td;
  const double efficiency = efficiency_max * n / (n + tokens_half) * w / (w + width_half);
  e.compute_s = flops_per_gpu / (peak_flops_ * efficiency);
  e.bubble_s = e.compute_s * (pd - 1.0) / (vd * md);

  // -- placement (rank order tp, cp, dp, pp): a group of ranks `stride` apart whose span
  // (size x stride) exceeds a node runs its ring over the nodes' links, each node's link shared
  // by the min(stride, GPUs per node) groups that have a member on it; otherwise at the
  // intra-node bandwidth.
  const auto gpn = static_cast<double>(gpus_per_node_);
  auto bandwidth = [&](double size, double stride) {
    if (size * stride <= gpn)
      return intra_bw_;
    return std::min(intra_bw_, inter_bw_ / std::min(stride, gpn));
  };
  const double activation_message = bd * s * h * 2.0 / cd; // bytes, 16-bit values

  // -- tensor parallelism: 4 all-reduces per layer and micro-batch (6 with full recomputation)
  if (t > 1) {
    const double count = recompute == 2 ? 6.0 : 4.0;
    const double layers_here = std::ceil(L / (pd * vd) - 1e-9) * vd;
    e.tp_comm_s = md * layers_here * count * 2.0 * (td - 1.0) / td * activation_message
                  / bandwidth(td, 1.0);
  }
  // -- expert parallelism: two all-to-alls forward and two backward per layer and micro-batch
  if (ep > 1) {
    const double layers_here = std::ceil(L / (pd * vd) - 1e-9) * vd;
    const double epd = static_cast<double>(ep);
    e.tp_comm_s += md * layers_here * 4.0 * activation_message
                   * static_cast<double>(experts_per_token_) * (epd - 1.0) / epd
                   / bandwidth(epd, td * cd);
  }
  // -- pipeline: an activation forward and a gradient backward per micro-batch and boundary
  if (p > 1) {
    const double message = sp ? activation_message / td : activation_message;
    e.pp_comm_s = md * vd * 2.0 * message / bandwidth(2.0, td * cd * dd);
  }
  // -- data parallelism: one ring all-reduce of the stage's 16-bit gradients per step (over
  // dp x cp ranks)
  const double stage_params =
    (std::ceil(L / (pd * vd) - 1e-9) * vd * layer_params_ + embedding_params_) / td;
  const double replicas = dd * cd;
  if (replicas > 1.0) {
    double volume = 2.0 * (replicas - 1.0) / replicas * 2.0 * stage_params;
    if (zero >= 3)
      volume *= 1.5;
    e.dp_comm_s = volume / bandwidth(replicas, td);
  }
  e.step_time_s = e.compute_s + e.bubble_s + e.tp_comm_s + e.pp_comm_s + e.dp_comm_s;

  // -- memory of one GPU of the first stage
  const double expert_share =
    experts_ > 1 ? (k_f * h * f * static_cast<double>(experts_)) / layer_params_ : 0.0;
  const double layer_params_gpu =
    layer_params_ * (1.0 - expert_share + expert_share / static_cast<double>(ep)) / td;
  const double first_layers = std::ceil(L / (pd * vd) - 1e-9) * vd;
  const double params_gpu = first_layers * layer_params_gpu + embedding_params_ / td;
  e.model_state_bytes = params_gpu * state_bytes_per_parameter(zero, replicas);
  double per_layer = 0.0; // bytes per layer and micro-batch
  const double sbh = s * bd * h;
  if (recompute == 2)
    per_layer = 2.0 * sbh / (sp ? td : 1.0);
  else if (recompute == 1)
    per_layer = sp ? 34.0 * sbh / td : sbh * (10.0 + 24.0 / td);
  else {
    // FlashAttention stores no s x s scores (Dao et al. 2022): the 5 a s / h term is gone.
    const double scores = flash_ ? 0.0 : 5.0 * a * s / h;
    per_layer = sp ? sbh / td * (34.0 + scores) : sbh * (10.0 + 24.0 / td + scores / td);
  }
  per_layer /= cd;
  double in_flight_layers = 0.0;
  if (p == 1)
    in_flight_layers = L;
  else {
    in_flight_layers = first_layers * std::min(pd, md);
    if (v > 1)
      in_flight_layers *= 1.0 + (pd - 1.0) / (pd * vd);
  }
  e.activation_bytes = per_layer * in_flight_layers;
  if (p == 1)
    e.activation_bytes += 4.0 * s * bd * V / (td * cd);
  e.peak_memory_bytes = e.model_state_bytes + e.activation_bytes + fixed_overhead_bytes;

  e.valid = true;
  e.tp = t;
  e.pp = p;
  e.vpp = v;
  e.cp = c;
  e.dp = d;
  e.micro_batch = b;
  e.micro_batches = m;
  return e;
}

} // namespace infrarsi::tuning
