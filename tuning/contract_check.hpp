#pragma once
/// @file contract_check.hpp
/// Checks one trial against the task contract: the same work (steps, tokens per step), the same
/// numerics (loss within tolerance of the baseline's reference at each checkpoint; NaN/Inf never
/// passes), the contracted timing window, and reported times that agree with wall time.

#include <map>
#include <string>
#include <vector>

#include "tuning/trial.hpp"

namespace infrarsi::tuning {

/// The baseline's loss trajectory, calibrated from the doctor's repeated runs.
struct loss_reference {
  /// Mean loss of the baseline runs per step.
  std::map<std::uint32_t, double> loss;
  /// Largest absolute deviation of any baseline run from that mean, per step (0 when the
  /// workload is bit-deterministic).
  std::map<std::uint32_t, double> spread;
};

/// Builds the reference from the baseline runs (their steps; runs missing a step are ignored
/// for that step).
loss_reference make_loss_reference(const std::vector<trial_record>& baselines);

/// Allowed |loss - reference| at one step:
///   max(contract.loss_atol, contract.loss_rtol * |reference|, 3 * spread)
/// (the calibration rule: three times the largest deviation seen among identical baselines).
double loss_tolerance(const contract_spec& contract, const loss_reference& ref,
                      std::uint32_t step);

/// Median step time over the contract's timed window (0 if any timed step is missing).
double timed_step_time(const contract_spec& contract, const std::vector<step_point>& steps);

/// The violations of `trial` (empty: it passed). Only meaningful for trials that ended ok.
/// Each message names the invariant and the evidence, e.g.
/// "tokens: step 3 reported 2048 tokens, the contract says 4096".
std::vector<std::string> check_contract(const contract_spec& contract, const loss_reference& ref,
                                        const trial_record& trial);

} // namespace infrarsi::tuning
