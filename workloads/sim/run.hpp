#pragma once
/// @file run.hpp
/// A simulated training run: turns a configuration's truth into the per-step metrics a real job
/// prints, with cluster noise (per-step log-normal jitter, rare straggler steps, a per-launch
/// offset) drawn from a seed, warm-up steps, and a deterministic synthetic loss trajectory.
/// Pure: the same inputs give byte-identical output (no clocks, own RNG).

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/sim/model.hpp"

namespace infrarsi::sim {

/// How to run. Defaults: 10 steps, 2 warm-up steps, noise on.
struct run_options {
  int steps = 10;
  int warmup_steps = 2;
  std::uint64_t seed = 0;      ///< cluster noise seed
  std::uint64_t launch_id = 0; ///< per-launch noise stream (the trial id)
  std::uint64_t attempt = 0;   ///< retry of the same trial: a new launch, new noise
  bool noise = true;
  double cv_override = -1; ///< per-step coefficient of variation; < 0: the cluster's own
};

/// The cluster's noise parameters for a truth (docs/simulator.md).
struct noise_params {
  double step_cv = 0;                               ///< per-step log-normal sigma
  double launch_sigma = 0;                          ///< per-launch log-normal sigma
  double straggler_p = 0;                           ///< probability that a step hits a straggler
  double straggler_min = 1.15, straggler_max = 1.6; ///< its slowdown factor range
};
noise_params cluster_noise(const sim_config& cfg, const truth& t, const run_options& opt);

/// The synthetic loss at `step` (0-based) for a configuration: a Chinchilla-style curve
/// L = E + A/N^alpha + B/D^beta (Hoffmann et al. 2022) in the tokens D seen so far, a
/// data-order wobble that depends on the step only, a numerical-noise term of relative size
/// ~3e-4 that depends on the reduction order (TP, PP, DP, micro-batch, ...), and the effect of
/// work- or numerics-changing kernels (less data seen; a drift of 1.5 % + 0.5 % per step).
double synthetic_loss(const sim_config& cfg, const truth& t, int step);

/// Metrics lines of a run: `steps` step objects, then the final object. Requires t.valid and
/// !t.oom. Each step object has step, loss, tokens, step_time_s, data_s, forward_s,
/// backward_s, optimizer_s, communication_s, bubble_s, peak_memory_bytes, warmup.
std::vector<nlohmann::ordered_json> simulate_run(const sim_config& cfg, const truth& t,
                                                 const run_options& opt);

/// The truth as JSON (what `--truth` prints).
nlohmann::ordered_json truth_json(const sim_config& cfg, const truth& t);

/// The OOM report: {"gpu", "rank", "node", "stage", "needed_bytes", "available_bytes", ...}.
nlohmann::ordered_json oom_json(const sim_config& cfg, const truth& t);

/// Deterministic 64-bit mixing (splitmix64 finaliser).
std::uint64_t mix64(std::uint64_t x);

} // namespace infrarsi::sim
