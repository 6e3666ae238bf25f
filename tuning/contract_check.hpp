#pragma once
/// @file contract_check.hpp
/// Checks one trial against the task contract: the same work (steps, tokens per step), the same
/// numerics (loss within tolerance of the baseline's reference at each checkpoint; NaN/Inf never
/// passes), the contracted timing window, and reported times that agree with wall time.

#include <limits>
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

/// Reason codes: every violation message starts with one of these and ": ", then the evidence.
///   steps            fewer/more steps than the contract, or steps out of order
///   tokens           a step reported other than the contract's tokens per step
///   global_batch, params, layers
///                    the final line declares other work than the contract's
///   loss_non_finite  a NaN or infinite loss
///   loss_not_falling the loss did not fall while the reference did (backward or optimizer skipped)
///   loss_drift       the loss left the tolerance band around the reference at a checkpoint
///   timed_window     the workload timed other steps than the contract's window (or marked a
///                    step of the window as warm-up), or did not report the whole window
///   step_times       reported step times disagree with the harness clock or the wall time
///                    (fake timers, unit slips), or are not positive
///   scope            (set by the node-runner, before launch) a file changed outside the scope
///   constraint       (set by the node-runner, before launch) the configuration breaks one of
///                    the task's constraints, e.g. "constraint: 'heads % tp == 0' is false for
///                    heads=32, tp=3"
/// e.g. "tokens: step 3 reported 2048 tokens, the contract says 4096".
std::string violation_code(const std::string& message);

/// The violations of `trial` (empty: it passed). Only meaningful for trials that ended ok.
/// Every violated invariant is reported once (its first evidence), in the order above.
std::vector<std::string> check_contract(const contract_spec& contract, const loss_reference& ref,
                                        const trial_record& trial);

/// The harness-clock cross-check of the timed window (no violation text; for reports and tests).
struct clock_check_result {
  /// False when it could not be made (fewer than two observed steps in the window, or the
  /// contract waives it); `why` says which.
  bool made = false;
  std::string why;
  /// Steps (a, b]: the reported step times of steps a+1..b are compared with
  /// observed_at(b) - observed_at(a). a is the step before the window when it was observed.
  std::uint32_t from_step = 0;
  std::uint32_t to_step = 0;
  /// Sum of the reported step times over (a, b], seconds.
  double reported_s = 0.0;
  /// observed_at(b) - observed_at(a), seconds on the node-runner's clock.
  double observed_s = 0.0;
  /// reported / observed - 1.
  [[nodiscard]] double disagreement() const {
    if (observed_s > 0)
      return reported_s / observed_s - 1.0;
    return reported_s > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  }
};

/// Below this observed duration the cross-check is not made (unless the reported window is at
/// least four times as long: then the lines arrived in a burst and the check fails): the arrival jitter of a pipe read
/// (about a millisecond) would exceed the tolerance.
inline constexpr double min_clock_window_s = 0.05;

/// Absolute slack of the clock cross-check per compared step, seconds: the work between two
/// steps that no step timer covers (printing and flushing the metrics line, resetting a peak
/// counter), which a loaded machine can stretch to a few milliseconds.
inline constexpr double clock_slack_per_step_s = 0.005;

clock_check_result clock_check(const contract_spec& contract, const std::vector<step_point>& steps);

} // namespace infrarsi::tuning
