#pragma once
/// @file contract_check.hpp
/// Checks one trial against the task contract: the same work (steps, tokens per step), the same
/// numerics (by contract.loss_mode: the loss within tolerance of the baseline's reference at each
/// checkpoint, the mean loss of each window of steps, or the eval loss at the eval steps; NaN/Inf
/// never passes), the contracted timing window, and reported times that agree with wall time.
/// The formulas and their sources: docs/task-contract.md "Loss invariants".

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tuning/trial.hpp"

namespace infrarsi::tuning {

/// The baseline's mean training loss over one window of steps (contract.loss_mode window),
/// calibrated from the doctor's repeated runs.
struct loss_window_reference {
  /// Inclusive steps of the window.
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  /// Mean over the baseline runs of each run's mean loss over the window (loss units).
  double mean = 0.0;
  /// Within-window variance of the per-step loss (loss units squared), pooled over the runs:
  /// the mean of each run's window_variance (successive differences, robust to the falling
  /// trend; see window_stats).
  double within_var = 0.0;
  /// Sample variance (n - 1) of the runs' window means, loss units squared; 0 with one run or
  /// with bit-identical repeats.
  double between_var = 0.0;
  /// Baseline runs that reported every step of the window.
  std::uint32_t runs = 0;
};

/// The baseline's loss, calibrated from the doctor's repeated runs: per step (pointwise), per
/// window (window mode) and per eval step (eval mode).
struct loss_reference {
  /// Mean loss of the baseline runs per step.
  std::map<std::uint32_t, double> loss;
  /// Largest absolute deviation of any baseline run from that mean, per step (0 when the
  /// workload is bit-deterministic).
  std::map<std::uint32_t, double> spread;
  /// window mode: one entry per window (loss_windows), in step order; empty otherwise.
  std::vector<loss_window_reference> windows;
  /// eval mode: mean eval loss of the baseline runs per step that reported one, and the largest
  /// absolute deviation of a run from it; empty otherwise.
  std::map<std::uint32_t, double> eval_loss;
  std::map<std::uint32_t, double> eval_spread;
};

/// Builds the per-step reference from the baseline runs (their steps; runs missing a step are
/// ignored for that step). The windows and eval maps stay empty (loss_mode pointwise).
loss_reference make_loss_reference(const std::vector<trial_record>& baselines);

/// As above, plus what contract.loss_mode compares: window mode fills `windows` over
/// loss_windows(contract.loss_window, last step any baseline reported) from the runs that
/// reported every step of a window (a window no run reported whole is left out); eval mode fills
/// `eval_loss`/`eval_spread` from the finite eval losses the runs reported (at contract.eval_steps
/// when given, else at every step).
loss_reference make_loss_reference(const contract_spec& contract,
                                   const std::vector<trial_record>& baselines);

/// Allowed |loss - reference| at one step:
///   max(contract.loss_atol, contract.loss_rtol * |reference|, 3 * spread)
/// (the calibration rule: three times the largest deviation seen among identical baselines).
double loss_tolerance(const contract_spec& contract, const loss_reference& ref,
                      std::uint32_t step);

/// Allowed |eval loss - reference| at an eval step: the rule of loss_tolerance on
/// ref.eval_loss / ref.eval_spread. An eval loss is measured on fixed data with the model's
/// parameters, so an honest batch split changes it by rounding only.
double eval_loss_tolerance(const contract_spec& contract, const loss_reference& ref,
                           std::uint32_t step);

/// The windows of window mode over steps 0..last_step: [0, n-1], [n, 2n-1], ..., the last one
/// extended to last_step so that no step is left out (fewer than n steps in all: one window
/// [0, last_step]). Empty when n < 2.
std::vector<std::pair<std::uint32_t, std::uint32_t>> loss_windows(std::uint32_t n,
                                                                  std::uint32_t last_step);

/// Mean and within-window variance of one run's loss over steps [first, last].
struct window_stats {
  /// Steps of the window the run reported with a finite loss.
  std::size_t n = 0;
  /// Mean loss over those steps.
  double mean = 0.0;
  /// Variance of the per-step loss noise, loss units squared, by the mean square successive
  /// difference: sum_{i=1}^{n-1} (x_i - x_{i-1})^2 / (2 (n - 1)) over the steps in order. For
  /// independent noise of variance s^2 around a smooth trend of slope b per step its expectation
  /// is s^2 + b^2 / 2, so the falling loss barely counts (von Neumann, Kent, Bellinson & Hart,
  /// "The mean square successive difference", Ann. Math. Statist. 12(2), 1941). 0 when n < 2.
  double variance = 0.0;
};
window_stats window_of(const std::vector<step_point>& steps, std::uint32_t first,
                       std::uint32_t last);

/// Multiplier of the window test's standard error: |difference| <= 4 standard errors is a
/// two-sided normal false-rejection rate of 6.3e-5 per window (a run of 20 windows: ~1.3e-3).
inline constexpr double loss_window_k = 4.0;

/// Allowed |trial window mean - reference window mean|, loss units:
///   max(loss_atol, loss_rtol x |ref.mean|, loss_window_k x se),
///   se^2 = (trial_var + ref.within_var) / n + ref.between_var x (1 + 1 / ref.runs)
/// where trial_var is the trial's own window_stats::variance over its n steps. The first term is
/// the variance of a difference of two means of n steps with independent per-step noise (a
/// batch split that reports another micro-batch's loss has its own, larger noise: hence the
/// trial's variance, not the baseline's); the reference's noise term is not divided by the
/// number of runs because bit-identical repeats share one sample order. The second is the
/// run-to-run variation of a window's mean that within-window noise does not explain, once for
/// the trial and 1 / runs for the reference mean (standard error of a difference of means with
/// estimated variances; the Welch form without its degrees of freedom, the factor k covering
/// them). runs 0 counts as 1.
double window_tolerance(const contract_spec& contract, const loss_window_reference& ref,
                        double trial_var, std::size_t n);

/// Median step time over the contract's timed window (0 if any timed step is missing).
double timed_step_time(const contract_spec& contract, const std::vector<step_point>& steps);

/// Reason codes: every violation message starts with one of these and ": ", then the evidence.
///   steps            fewer/more steps than the contract, or steps out of order
///   tokens           a step reported other than the contract's tokens per step
///   global_batch, params, layers
///                    the final line declares other work than the contract's
///   loss_non_finite  a NaN or infinite loss
///   loss_not_falling the loss did not fall while the reference did (backward or optimizer skipped):
///                    between the first and last checkpoint (pointwise), window (window) or eval
///                    step (eval)
///   loss_drift       the loss left the tolerance band around the reference at a checkpoint
///                    (pointwise), a window's mean left it (window), or an eval loss did (eval)
///   timed_window     the workload timed other steps than the contract's window (or marked a
///                    step of the window as warm-up), or did not report the whole window
///   step_times       reported step times add up to more than the wall time, are not positive,
///                    or (clock_rule::window_sum runs) disagree with the harness clock
///   clock            (clock_rule::step_median runs) the median step time disagrees with the
///                    harness clock beyond its allowance (fake or partial timers, unit slips,
///                    buffered lines); next_step re-measures such a trial once
///   scope            (set by the node-runner, before launch) a file changed outside the scope
///   constraint       (set by the node-runner, before launch) the configuration breaks one of
///                    the task's constraints, e.g. "constraint: 'heads % tp == 0' is false for
///                    heads=32, tp=3"
/// e.g. "tokens: step 3 reported 2048 tokens, the contract says 4096".
std::string violation_code(const std::string& message);

/// The violations of `trial` (empty: it passed). Only meaningful for trials that ended ok.
/// How the harness-clock cross-check is made. A run records its rule at init (ContractLocked
/// "clock_rule", clock_rule_name) so that replay judges every trial by the rule it was judged by.
/// This enum only grows.
enum class clock_rule : std::uint8_t {
  /// "window_sum/0": the sum of the reported step times over the window against the time between
  /// the window's two end lines, within clock_tolerance x that time + clock_slack_per_step_s per
  /// step (violation code `step_times`). One line read late at either end moves it (a loaded
  /// machine). Runs locked before the rule was recorded were judged by it.
  window_sum = 0,
  /// "step_median/1": per compared step, reported time minus the time between its line and the
  /// previous one; the median over the window, within a band around the doctor's offset
  /// (clock_band_for; violation code `clock`). Robust to a minority of late lines; a timer that
  /// lies on most steps moves the median.
  step_median = 1,
};

/// The rule of new runs.
inline constexpr clock_rule current_clock_rule = clock_rule::step_median;

/// "window_sum/0" or "step_median/1".
const char* clock_rule_name(clock_rule r);

/// The rule named `name` (clock_rule_name), or nullopt for an unknown name.
std::optional<clock_rule> parse_clock_rule(const std::string& name);

/// What the clock cross-check is given besides the contract.
struct clock_options {
  /// The run's rule (default: that of new runs).
  clock_rule rule = current_clock_rule;
  /// step_median: the doctor's calibration (clock_calibration::offset_s, skew_s; 0 before the
  /// doctor or without one), seconds per step.
  double offset_s = 0.0;
  double skew_s = 0.0;
};

/// Every violated invariant is reported once (its first evidence), in the order above.
std::vector<std::string> check_contract(const contract_spec& contract, const loss_reference& ref,
                                        const trial_record& trial,
                                        const clock_options& clock = {});

/// The first violation that steps[from..] of a running trial already prove, judging each step as
/// the newest one reported (call it with `from` = the index of the first new step after each
/// read), or nullopt. Only checks check_contract makes on the finished trial, with its messages,
/// on evidence that is complete when the step is reported:
///   tokens           the step reported other than contract.tokens_per_step;
///   loss_non_finite  a NaN or infinite training loss (or, in eval mode, eval loss);
///   loss_drift       pointwise: the step is a checkpoint with a reference and its loss is outside
///                    loss_tolerance; window: the step ends a reference window whose steps were
///                    all reported finite and the window's mean is outside window_tolerance; eval:
///                    the step is an eval step with a reference and its eval loss is outside
///                    eval_loss_tolerance.
/// A trial with such a step fails check_contract whatever it reports later, so stopping it then
/// (the node-runner's early stop, docs/node-runner.md) changes no verdict and saves the
/// device-seconds of its remaining steps. With an empty `ref.loss` (before the doctor's
/// calibration) only tokens and loss_non_finite are judged.
std::optional<std::string> early_violation(const contract_spec& contract,
                                           const loss_reference& ref,
                                           const std::vector<step_point>& steps,
                                           std::size_t from = 0);

/// The smoke probe's verdict (task_spec::smoke, docs/node-runner.md "Smoke probe"): the work and
/// numerics checks of check_contract (steps, tokens, declared work, finite loss, the loss at every
/// checkpoint within loss_tolerance) of the `patched` smoke run against the `unpatched` one as the
/// reference (`contract`: smoke_spec::contract). Timing is not judged (a smoke run's times say
/// nothing about the full job). nullopt when the patched run keeps the contract, when either
/// run did not end ok or the unpatched one is no reference (smoke_reference_problem: an
/// inconclusive probe), or when the unpatched loss does not fall (smoke_vacuous: a vacuous probe);
/// the full trial then judges the patch. Otherwise the first violation, e.g. "loss_drift: step 0
/// loss 2.95 vs reference 2.90 ...".
std::optional<std::string> smoke_violation(const contract_spec& contract,
                                           const trial_record& unpatched,
                                           const trial_record& patched);

/// The first of the work checks of check_contract (steps, tokens, declared work, finite loss) a
/// smoke launch's `run` fails against its own `contract` (smoke_spec::contract), e.g. "steps:
/// reported 3 steps, the contract says 5"; nullopt when it keeps them. Used by `infrarsi check
/// --smoke` and smoke_reference_problem.
std::optional<std::string> smoke_own_violation(const contract_spec& contract,
                                               const trial_record& run);

/// Why the `unpatched` smoke run cannot be the probe's reference, or nullopt when it can: it did
/// not end ok ("the unpatched smoke run ended timeout (...)"), or it breaks the work checks of its
/// own `contract` (smoke_spec::contract; e.g. "the unpatched smoke run breaks [smoke]: steps:
/// reported 3 steps, the contract says 5"): a wrong [smoke] declaration, not any patch's fault.
/// smoke_violation is nullopt whenever this is set; the launcher then skips the patched launch.
std::optional<std::string> smoke_reference_problem(const contract_spec& contract,
                                                   const trial_record& unpatched);

/// The smallest fall of the unpatched smoke loss that smoke_vacuous counts as a fall, as a fraction
/// of the first step's |loss| (dimensionless), whatever the contract's tolerances: without it a
/// contract with loss_atol = loss_rtol = 0 would count a rounding-size wobble as learning. A
/// choice of this harness, not a published figure: 0.1 % is about three times the reduction-order
/// noise of the simulator's loss (docs/simulator.md "Loss").
inline constexpr double smoke_min_loss_fall_rel = 1e-3;

/// The fall the unpatched smoke loss must exceed (loss units) for the probe to judge numerics:
///   max(contract.loss_atol, contract.loss_rtol x |first|, smoke_min_loss_fall_rel x |first|)
/// with `first` the loss of its first step: the probe's own tolerance at that step (the band a
/// patched loss may leave it by; loss_tolerance with no spread), or the relative margin.
double smoke_min_loss_fall(const contract_spec& contract, double first);

/// Why the `unpatched` smoke run cannot tell a numerics change although it is a usable reference
/// (smoke_reference_problem is nullopt), or nullopt when it can: its loss does not fall over its
/// steps. With `first` and `last` the losses of its first and last reported steps (by step
/// number), the loss falls when first - last > smoke_min_loss_fall(contract, first). A loss that
/// training does not move by more than the probe's tolerance does not show what a patch does to
/// the training either (a data loader that skips samples, a skipped or drifting update): e.g. a
/// small model whose loss sits at its ceiling ln(vocabulary), 10.37 for 32,000 tokens, for all its
/// steps. Such a probe is "vacuous" (docs/node-runner.md "Smoke probe"): the patched launch is not
/// worth running, and the full launch judges the patch. The reason reads e.g. "the unpatched smoke
/// loss went 10.3735 -> 10.3647 over 3 steps (fell by 0.0088, not more than 0.103735 =
/// max(loss_atol 0, loss_rtol 0.01 x 10.3735, 0.001 x 10.3735)); a probe whose loss does not fall
/// cannot tell a numerics change". nullopt too when the rule cannot be applied: fewer than two
/// steps, or a loss that is not finite (smoke_reference_problem's).
std::optional<std::string> smoke_vacuous(const contract_spec& contract,
                                         const trial_record& unpatched);

/// The note an ok trial's detail carries when its smoke probe was vacuous (smoke_vacuous):
/// "smoke probe vacuous: REASON (fix [smoke]: infrarsi check --smoke)".
std::string smoke_vacuous_detail(const std::string& reason);

/// The REASON of the smoke_vacuous_detail `detail` carries (anywhere in it), or nullopt.
std::optional<std::string> smoke_vacuous_reason(const std::string& detail);

/// Whether `detail` carries a smoke_vacuous_detail.
bool is_smoke_vacuous(const std::string& detail);

/// The note an ok trial's detail carries when its smoke probe was inconclusive because of the
/// reference (smoke_reference_problem): "smoke probe inconclusive: REASON (fix [smoke]: infrarsi
/// check --smoke)".
std::string smoke_inconclusive_detail(const std::string& reason);

/// The REASON of the smoke_inconclusive_detail `detail` carries (anywhere in it), or nullopt.
std::optional<std::string> smoke_inconclusive_reason(const std::string& detail);

/// Whether `detail` carries a smoke_inconclusive_detail.
bool is_smoke_inconclusive(const std::string& detail);

/// The detail of a trial ended by its smoke probe: "VIOLATION; smoke probe of P1, P2 (the full
/// launch did not start)". Its violation code is the violation's (violation_code).
std::string smoke_probe_detail(const std::string& violation,
                               const std::vector<std::string>& patches);

/// Whether `detail` is a smoke_probe_detail.
bool is_smoke_probe(const std::string& detail);

/// The detail of a trial stopped early: "VIOLATION; stopped early at step S of N" (" of N" only
/// when contract_steps > 0). Its violation code is the violation's (violation_code).
std::string early_stop_detail(const std::string& violation, std::uint32_t step,
                              std::uint32_t contract_steps);

/// Whether `detail` is an early_stop_detail.
bool is_early_stop(const std::string& detail);

/// The part of `ref` a trial carries for early_violation: the first `max_points` steps of the
/// per-step reference (with their spreads), windows and eval steps (a long run's early steps are
/// where stopping saves the most; later ones are judged by check_contract at the end).
loss_reference early_stop_reference(const loss_reference& ref, std::size_t max_points = 256);

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

/// The window_sum/0 cross-check of the timed window (see clock_rule::window_sum).
clock_check_result clock_check(const contract_spec& contract, const std::vector<step_point>& steps);

/// The step_median/1 cross-check of the timed window (no violation text; see
/// clock_rule::step_median).
struct step_clock_result {
  /// False when it could not be made (no compared step, a window observed for under
  /// min_clock_window_s with under 4 x that reported, or the contract waives it); `why` says which.
  bool made = false;
  std::string why;
  /// The compared steps lie in (from_step, to_step].
  std::uint32_t from_step = 0;
  std::uint32_t to_step = 0;
  /// Steps compared: a step of the window whose line and the previous step's line were both
  /// observed.
  std::size_t compared = 0;
  /// Median over the compared steps of (reported step time - time between the step's line and
  /// the previous one on the harness clock), seconds. Negative: the timer reports less than the
  /// clock saw (a fake or partial timer, or work between steps no timer covers); positive: the
  /// lines arrived faster than the steps they report (buffered output).
  double median_difference_s = 0.0;
  /// Median time between consecutive lines of the compared steps, seconds.
  double median_interval_s = 0.0;
  /// median_difference_s / median_interval_s.
  [[nodiscard]] double disagreement() const {
    if (median_interval_s > 0)
      return median_difference_s / median_interval_s;
    return median_difference_s > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  }
};
step_clock_result step_clock_check(const contract_spec& contract,
                                   const std::vector<step_point>& steps);

/// Below this fraction of the median interval the doctor's offset is not followed: a median step
/// reporting less than half the clock's time plus the band is never explained by the machine.
inline constexpr double max_clock_offset_fraction = 0.5;

/// The band a step_median check's median_difference_s must lie in, seconds:
///   center = max(min(offset_s, 0), -max_clock_offset_fraction x median_interval_s)
///   half_width = clock_tolerance x median_interval_s + clock_slack_per_step_s
///                + min(skew_s, clock_tolerance x median_interval_s)
/// The offset is the time per step the doctor's honest baselines showed outside their step
/// timers on this machine (a loaded CPU makes a process that printed its line wait for the CPU
/// before its next step starts); only time outside the timer (offset <= 0) is followed. The skew
/// (how much the baselines differed from the offset) widens the band by at most the tolerance
/// again.
struct clock_band {
  double center_s = 0.0;
  double half_width_s = 0.0;
  /// The offset and skew used (after the limits above), seconds.
  double offset_s = 0.0;
  double skew_s = 0.0;
  [[nodiscard]] bool contains(double difference_s) const {
    return std::abs(difference_s - center_s) <= half_width_s;
  }
};
clock_band clock_band_for(const contract_spec& contract, const step_clock_result& check,
                          const clock_options& options);

/// The doctor's calibration of the step_median check from its baseline runs.
struct clock_calibration {
  /// Baselines whose check could be made.
  std::size_t runs = 0;
  /// Each of those baselines' median_difference_s, seconds, in the order given.
  std::vector<double> differences_s;
  /// The median of differences_s, seconds per step (0 with no run): the machine's offset.
  double offset_s = 0.0;
  /// The largest |difference - offset_s| among them, seconds per step (0 with no run).
  double skew_s = 0.0;
};
clock_calibration calibrate_clock(const contract_spec& contract,
                                  const std::vector<trial_record>& baselines);

} // namespace infrarsi::tuning
