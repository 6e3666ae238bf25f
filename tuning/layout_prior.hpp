#pragma once
/// @file layout_prior.hpp
/// The analytic prior of a parallel layout: a step time and a peak memory per GPU for any
/// configuration of a task whose knobs declare their role in the layout (knob_spec::role: tp,
/// pp, micro-batch, recomputation, ...), computed from the task's [model] and [hardware] tables
/// alone. It is the prior mean of the planner's time model and of its censored memory model;
/// live trials revise it (tuning/bayes_policy.hpp). Pure and deterministic; it shares no code
/// with the cluster simulator (workloads/sim), which stays an independent world.
///
/// Formulas (docs/planner.md "Analytic prior" gives them with the same symbols). Symbols: L
/// layers, h hidden, a heads, f FFN width, V vocabulary, s sequence length, B global batch
/// (sequences per step), G GPUs, t/p/v/c/d tensor/pipeline/virtual/context/data-parallel sizes,
/// b micro-batch (sequences), m = B / (b d) micro-batches per pipeline and step.
///  - Compute: training FLOPs per token and layer 3 x (forward 2 (2h^2 + 2 h h_kv) + 2 k_f h f +
///    4 s h), k_f = 2 matrices of the FFN (3 when declared gated), recomputation adds one
///    forward (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
///    Clusters Using Megatron-LM", SC21, section 5.1 and appendix: 72 B s L h^2 (1 + s/(6h) +
///    V/(12 L h)) without recomputation, 96 B s L h^2 (...) with it); the logits 6 h V per token
///    on the last stage. The slowest stage sets the pace: ceil(L / (p v)) v layers.
///    Per-GPU rate: peak x efficiency, efficiency = e_max x n/(n + n_half) x w/(w + w_half) with
///    n = b s / c tokens per micro-batch and GPU and w = h / t the per-GPU GEMM width (an
///    assumption: small GEMMs under-use a GPU; e_max = 0.5, n_half = 128, w_half = 128).
///  - Pipeline bubble: the step takes (m + (p - 1)/v) / m times the bubble-free time (ibid.,
///    section 2.2: bubble fraction (p - 1)/m, divided by v with interleaving).
///  - Tensor parallelism: 4 all-reduces of b s h 16-bit values per layer and micro-batch
///    (2 forward, 2 backward; 6 with recomputation; ibid. section 3.2 and Korthikanti et al.
///    2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.2.2: the
///    same volume as all-gather + reduce-scatter with sequence parallelism), each a ring
///    all-reduce of 2 (t-1)/t x its bytes (Patarasuk and Yuan 2009, "Bandwidth optimal
///    all-reduce algorithms for clusters of workstations", JPDC 69(2)).
///  - Pipeline: per micro-batch and stage boundary an activation and a gradient of b s h 16-bit
///    values (divided by t with sequence parallelism), x v with interleaving (Narayanan 2021,
///    section 2.2.2).
///  - Data parallelism: one ring all-reduce of the stage's 16-bit gradients per step, not
///    overlapped; ZeRO-3 adds the parameter all-gathers, 1.5x the volume (Rajbhandari et al.
///    2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC20,
///    section 7).
///  - Placement: Megatron's rank order (tensor-parallel ranks adjacent, then context, then data,
///    then pipeline): a group of ranks `stride` apart crosses nodes when size x stride exceeds
///    the GPUs per node; its ring then runs over the nodes' links, each node's link shared by
///    the min(stride, GPUs per node) groups with a member on that node; else at the intra-node
///    bandwidth.
///  - Memory of the first pipeline stage (the largest): model states per parameter 16 bytes
///    under mixed-precision Adam, 4 + 12/d with ZeRO-1 or a distributed optimizer, 2 + 14/d
///    with ZeRO-2, 16/d with ZeRO-3 (Rajbhandari et al. 2020, section 3.1 and figure 1, K = 12),
///    over the stage's parameters / t; activations per layer and micro-batch s b h (10 + 24/t +
///    5 a s/(h t)) bytes, s b h/t (34 + 5 a s/h) with sequence parallelism, s b h (10 + 24/t) /
///    (34/t) with selective recomputation, 2 s b h (/t with sequence parallelism) with full
///    recomputation (Korthikanti et al. 2022, table 2 and section 4.1), without the 5 a s/h
///    term of the stored attention scores when [model] attention = "flash" (Dao et al. 2022,
///    "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness", NeurIPS:
///    memory linear in s), divided by c; the first
///    stage holds min(p, m) micro-batches of its layers, x (1 + (p-1)/(p v)) with interleaving
///    (ibid., section 4.2.3); the logits 4 s b V / t bytes when p = 1; plus a fixed 1 GiB of
///    CUDA context, communication buffers and allocator slack (an assumption).
///
/// Units: seconds, bytes, FLOPs. Errors: a layout that does not divide (G by t p c, L by p v,
/// heads by t, B by b d) is `valid == false` with the reason.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "tuning/task.hpp"

namespace infrarsi::tuning {

/// What the prior says of one configuration.
struct layout_estimate {
  /// False when the layout is not legal for the model and GPUs (why_invalid says why); the
  /// other fields are then 0.
  bool valid = false;
  std::string why_invalid;
  /// Predicted seconds per training step and its parts (seconds): the slowest stage's compute
  /// including recomputation, the pipeline bubble, tensor-, pipeline- and data-parallel
  /// communication (not overlapped).
  double step_time_s = 0.0;
  double compute_s = 0.0;
  double bubble_s = 0.0;
  double tp_comm_s = 0.0;
  double pp_comm_s = 0.0;
  double dp_comm_s = 0.0;
  /// Predicted peak memory of one GPU of the first pipeline stage, bytes, and its parts.
  double peak_memory_bytes = 0.0;
  double model_state_bytes = 0.0;
  double activation_bytes = 0.0;
  /// The layout's sizes as resolved (knob, else its rule: d = G / (t p c), m = B / (b d)).
  std::int64_t tp = 1, pp = 1, vpp = 1, cp = 1, dp = 1, micro_batch = 1, micro_batches = 1;
};

/// The analytic prior of one task.
class layout_prior {
public:
  /// The prior of `task`, or nullopt (with `why`) when the task cannot have one: no knob
  /// declares a role; no [model] table, or one without layers, hidden, heads, seq_len and
  /// global_batch; no [hardware] table, or a GPU whose peak is neither declared (peak_tflops)
  /// nor in the table of known GPUs. A task without roles keeps the planner's behaviour before
  /// the prior existed.
  static std::optional<layout_prior> from_task(const task_spec& task, std::string& why);

  /// The estimate for the knob values of `knobs` (missing knobs take their defaults).
  [[nodiscard]] layout_estimate estimate(const knob_assignment& knobs) const;

  /// GPUs of the job (hardware.gpus_per_node x hardware.nodes).
  [[nodiscard]] std::int64_t gpus() const { return gpus_; }
  /// Dense 16-bit peak of one GPU, FLOP/s; bandwidths, bytes per second.
  [[nodiscard]] double peak_flops() const { return peak_flops_; }
  [[nodiscard]] double intra_node_bytes_per_s() const { return intra_bw_; }
  [[nodiscard]] double inter_node_bytes_per_s() const { return inter_bw_; }
  /// Parameters of the model (12 L h^2-type count from [model], embeddings included).
  [[nodiscard]] double parameters() const { return params_; }

private:
  const task_spec* task_ = nullptr;
  std::string role_knob_[12];
  std::int64_t layers_ = 0, hidden_ = 0, heads_ = 0, kv_heads_ = 0, ffn_ = 0, vocab_ = 0,
               seq_ = 0, global_batch_ = 0, experts_ = 1, experts_per_token_ = 1;
  std::int64_t gpus_ = 1, gpus_per_node_ = 1;
  double peak_flops_ = 0.0, intra_bw_ = 0.0, inter_bw_ = 0.0;
  double params_ = 0.0, layer_params_ = 0.0, embedding_params_ = 0.0;
  bool gated_ = false;
  bool flash_ = false;
};

/// What the planner's models take from the prior for configuration knobs `c` (one home for the
/// policy, the prior revision and the report): log(step time of c / step time of `baseline`)
/// (the time model's prior mean) and log(peak bytes of c) (the memory model's offset); (0, 0)
/// when `c` or the baseline is invalid (the prior then says nothing of it).
std::pair<double, double> layout_offsets(const layout_prior& prior, const layout_estimate& baseline,
                                         const knob_assignment& c);

/// Dense 16-bit tensor-core peak of a GPU named like "A100-SXM4-80GB", "H100", "V100-16GB",
/// "T4", TFLOP/s (vendor datasheets: NVIDIA T4 65, V100 SXM2 125 (PCIe 112), A100 312, H100
/// SXM 989 (PCIe 756), H200 989, A10 125, L4 121, L40S 362, MI250X 383, MI300X 1307); 0 when
/// the name matches none.
double gpu_peak_tflops(const std::string& gpu);

/// Bandwidth of one GPU to the other GPUs of its node, and of one node to the other nodes, for
/// an interconnect text such as "nvlink", "pcie", "nvlink+infiniband", "ethernet", bytes per
/// second: NVLink 2 (V100) 150 GB/s, NVLink 3 (A100) 300 GB/s, NVLink 4 (H100/H200) 450 GB/s,
/// PCIe 4 x16 25 GB/s (12 GB/s for PCIe 3 on T4/V100/P100); between nodes InfiniBand HDR
/// 25 GB/s per GPU of the node, else one 100 Gb/s Ethernet port (12.5 GB/s) per node. The
/// figures declared in [hardware] (intra_node_gb_per_s, inter_node_gb_per_s) override them.
double default_intra_node_bytes_per_s(const hardware_spec& hw);
double default_inter_node_bytes_per_s(const hardware_spec& hw);

} // namespace infrarsi::tuning
