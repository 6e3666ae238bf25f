#pragma once
/// @file model.hpp
/// The cluster simulator's models, pure and deterministic (no I/O, no clocks): hardware
/// profiles, transformer shapes, the parallel layout and its constraints, and the noise-free
/// ("truth") step time and per-GPU peak memory of one configuration. Every formula and constant
/// is explained, with its source, in docs/simulator.md; the main sources are
///  - Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
///    Megatron-LM" (SC21): FLOPs per step (eq. 3), pipeline bubble (p-1)/(v m) (sec. 2.2),
///    rank order and communication volumes;
///  - Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models":
///    activation bytes per layer sbh(34 + 5as/h), sequence parallelism, selective recomputation
///    and the interleaved-schedule memory factor (1 + (p-1)/(p v)) (sec. 4);
///  - Rajbhandari et al. 2020 (ZeRO) and Megatron-LM's distributed-optimizer notes: 18 bytes per
///    parameter with mixed precision and Adam, 6 + 12/d with the optimizer state sharded;
///  - the ring all-reduce cost 2(n-1)/n * bytes / bandwidth (Patarasuk & Yuan 2009, NCCL docs).

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/sim/kernels.hpp"

namespace infrarsi::sim {

/// One GPU type and the cluster built from it (DGX/HGX-style nodes of 8 GPUs, one InfiniBand
/// NIC per GPU). Bandwidths are achievable (not marketing) figures; see docs/simulator.md.
struct hardware_profile {
  std::string name;               ///< "A100-80GB", "H100-80GB", "H200-141GB"
  double peak_bf16_flops = 0;     ///< dense bf16 tensor-core peak, FLOP/s
  std::uint64_t memory_bytes = 0; ///< device memory as nvidia-smi reports it, bytes
  double hbm_bandwidth = 0;       ///< achievable HBM bandwidth, bytes/s
  double nvlink_bandwidth = 0;    ///< achievable NVLink bus bandwidth per GPU, bytes/s
  double nvlink_latency_s = 0;    ///< per ring step inside a node, seconds
  double ib_bandwidth = 0;        ///< achievable InfiniBand bandwidth per GPU, bytes/s
  double ib_latency_s = 0;        ///< per ring step across nodes, seconds
  double gemm_efficiency = 0;     ///< fraction of peak a large bf16 GEMM sustains
  double gemm_half_dim = 0;       ///< GEMM depth K at which the per-tile efficiency halves
  double flash2_efficiency = 0;   ///< FlashAttention-2 forward, fraction of peak
  double flash3_efficiency = 0;   ///< FlashAttention-3 forward (0: not supported, use flash2)
  double kernel_launch_s = 0;     ///< CPU cost of one eager kernel launch, seconds
  int gpus_per_node = 8;
  double step_cv = 0; ///< per-step coefficient of variation on one node
};

/// Every built-in hardware profile.
const std::vector<hardware_profile>& hardware_profiles();
/// The profile named `name` (case-insensitive), or nullptr.
const hardware_profile* find_hardware(const std::string& name);

/// Decoder-only transformer shape. `experts == 0` is a dense model; otherwise every layer's MLP
/// is a mixture of `experts` experts with top-`top_k` routing (plus an always-on shared expert
/// MLP of `shared_expert_ffn` when non-zero).
struct model_spec {
  std::string name = "custom";
  int layers = 32;
  int hidden = 4096;
  int heads = 32;
  int kv_heads = 0; ///< query groups (GQA); 0: same as heads (MHA)
  int ffn = 14336;  ///< MLP hidden size (dense)
  int vocab = 128256;
  bool swiglu = true;       ///< SwiGLU MLP (three matrices); false: GeLU (two matrices)
  bool rmsnorm = true;      ///< RMSNorm; false: LayerNorm (with bias)
  bool rope = true;         ///< rotary embeddings; false: learned absolute positions
  bool dropout = false;     ///< attention and hidden dropout (GPT-3 style, as in Korthikanti)
  bool linear_bias = false; ///< biases on the linear layers (GPT-3 style)
  bool tied_embeddings = false;
  int experts = 0;
  int top_k = 0;
  int expert_ffn = 0;
  int shared_expert_ffn = 0;

  [[nodiscard]] int query_groups() const { return kv_heads > 0 ? kv_heads : heads; }
  [[nodiscard]] bool moe() const { return experts > 0; }
};

/// Built-in model shapes (llama3-8b, yi-9b, codellama-34b, mixtral-8x7b, deepseek-moe-16b, and
/// the GPT shapes of the validation table).
const std::vector<model_spec>& model_presets();
/// The preset named `name`, or nullptr.
const model_spec* find_model(const std::string& name);

/// Activation recomputation (Korthikanti et al. 2022, sec. 4.3 and 5).
enum class recompute_mode : std::uint8_t { none, selective, full };
const char* to_string(recompute_mode m);

/// The launch knobs of a Megatron-style job. Defaults: everything off, TP=PP=EP=1.
struct parallel_config {
  int tp = 1;          ///< tensor parallel size
  int pp = 1;          ///< pipeline parallel size
  int ep = 1;          ///< expert parallel size (MoE only)
  int vpp = 1;         ///< virtual pipeline stages per GPU (interleaved 1F1B)
  int micro_batch = 1; ///< sequences per micro-batch
  recompute_mode recompute = recompute_mode::none;
  bool sequence_parallel = false;     ///< no-op (with a warning) when tp == 1, as in Megatron
  bool distributed_optimizer = false; ///< ZeRO-1: optimizer state sharded over data parallel
  bool overlap_grad_reduce = false;   ///< gradient reduce overlapped with the last backward
  bool overlap_param_gather = false;  ///< parameter all-gather overlapped with the next forward
  double bucket_mb = 40;              ///< gradient communication bucket, MB (1e6 bytes)
  bool cuda_graphs = false;           ///< capture each layer's kernels in CUDA graphs
};

/// One simulated job: cluster, model, work and knobs.
struct sim_config {
  std::string hardware = "H100-80GB";
  int gpus = 8;
  model_spec model;
  int seq_len = 4096;
  int global_batch = 256; ///< sequences per step
  parallel_config parallel;
  kernel_settings kernels;
  /// Simulated device memory cap per GPU, bytes; 0: the GPU's own memory.
  std::uint64_t memory_cap_bytes = 0;
};

/// The resolved parallel layout.
struct layout {
  int tp = 1, pp = 1, dp = 1, ep = 1, vpp = 1;
  int micro_batch = 1;
  int num_microbatches = 1; ///< per pipeline per step
  int nodes = 1;
  bool sequence_parallel = false; ///< effective (false when tp == 1)
  int vocab_padded = 0;           ///< vocabulary padded to a multiple of 128 * tp (Megatron)
  int layers_per_chunk = 0;       ///< layers / (pp * vpp)
  std::vector<std::string> warnings;
};

/// Checks the configuration and resolves the layout. Returns "" on success, otherwise the
/// violated constraint with its values, e.g. "tensor parallel size 8 does not divide the 4 query
/// groups (--tp 8, --kv-heads 4)".
std::string check_layout(const sim_config& cfg, layout& out);

/// Per-GPU memory of the most loaded GPU of one pipeline stage, bytes.
struct memory_breakdown {
  int stage = 0;
  double weights = 0;     ///< bf16 parameters
  double gradients = 0;   ///< fp32 main gradients
  double optimizer = 0;   ///< fp32 master weights + Adam moments (sharded with ZeRO-1)
  double activations = 0; ///< stored for backward, all in-flight micro-batches
  double transient = 0;   ///< largest short-lived buffer (recompute, logits, dispatch)
  double overhead = 0;    ///< CUDA context, NCCL buffers, allocator fragmentation, graphs
  [[nodiscard]] double total() const {
    return weights + gradients + optimizer + activations + transient + overhead;
  }
};

/// Where a step's time goes (seconds); they add up to the step time.
struct phase_times {
  double data_s = 0;          ///< data loading and per-step bookkeeping
  double forward_s = 0;       ///< forward compute of the slowest stage, all micro-batches
  double backward_s = 0;      ///< backward compute incl. recomputation, all micro-batches
  double bubble_s = 0;        ///< pipeline fill and drain (Narayanan et al. 2021)
  double communication_s = 0; ///< exposed TP, EP, PP and DP communication
  double optimizer_s = 0;     ///< optimizer step
  [[nodiscard]] double total() const {
    return data_s + forward_s + backward_s + bubble_s + communication_s + optimizer_s;
  }
};

/// Exposed communication by kind (seconds per step; sum is phase_times::communication_s).
struct communication_times {
  double tp_s = 0, ep_s = 0, pp_s = 0, dp_s = 0;
};

/// Whether a configuration does the contracted work with the reference numerics.
enum class contract_kind : std::uint8_t {
  ok,         ///< same work, loss within numerical noise of the reference
  loss_drift, ///< same work, but the loss drifts (optimizer_states = bf16)
  less_work,  ///< reports the same tokens but computes fewer (data_loader = fast)
};
const char* to_string(contract_kind c);

/// The noise-free behaviour of one configuration.
struct truth {
  bool valid = false;
  std::string error; ///< when !valid: the violated constraint
  layout lay;
  const hardware_profile* hw = nullptr;
  phase_times phases;
  communication_times comm;
  double step_time_s = 0;
  std::vector<memory_breakdown> stages; ///< one per pipeline stage
  memory_breakdown peak;                ///< the most loaded stage
  double peak_memory_bytes = 0;
  std::uint64_t capacity_bytes = 0; ///< min(device memory, cap)
  bool oom = false;
  int oom_rank = -1;                  ///< global rank of the first GPU over capacity
  double model_flops = 0;             ///< per step, without recomputation (MFU convention)
  double hardware_flops = 0;          ///< per step, with recomputation (HFU convention)
  double tflops_per_gpu = 0;          ///< model FLOP/s per GPU / 1e12
  double hardware_tflops_per_gpu = 0; ///< hardware FLOP/s per GPU / 1e12
  double mfu = 0, hfu = 0;            ///< fractions of peak
  double params_total = 0, params_active = 0;
  std::uint64_t tokens_per_step = 0; ///< global batch x sequence length (contracted work)
  contract_kind contract = contract_kind::ok;
  bool flash3_fallback = false; ///< flash3 requested on a GPU without it
};

/// Computes the truth of `cfg`. Never throws; an invalid layout gives valid == false and the
/// reason in `error`. Cost: a few microseconds (pure arithmetic), so a task's whole knob space
/// can be enumerated.
truth compute_truth(const sim_config& cfg);

/// Parameter count of the model (total and active per token), vocabulary as given.
void count_parameters(const model_spec& m, int seq_len, double& total, double& active);

/// Activation bytes one transformer layer stores for backward for one micro-batch of `b`
/// sequences of length `s`, on one GPU, with tensor parallel size `t`, following Korthikanti et
/// al. 2022 sec. 4 adapted to the model's MLP, attention and kernels (docs/simulator.md). For a
/// GPT-3 layer (GeLU 4h MLP, LayerNorm, dropout, MHA, fused softmax, no recomputation, t = 1)
/// it is exactly s*b*h*(34 + 5*a*s/h).
double layer_activation_bytes(const model_spec& m, const kernel_settings& k, double s, double b,
                              int t, bool sequence_parallel, recompute_mode mode);

} // namespace infrarsi::sim
