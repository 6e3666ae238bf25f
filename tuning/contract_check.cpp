#include "tuning/contract_check.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "tuning/stats.hpp"

namespace infrarsi::tuning {

namespace {

std::string num(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

/// Why the harness-clock check does not apply to `contract` (simulated time, or waived), if so.
std::optional<std::string> clock_not_checked(const contract_spec& contract) {
  if (contract.simulated_time)
    return std::string{"step times are simulated (contract.simulated_time)"};
  if (!contract.clock_check)
    return std::string{"waived by the task (contract.clock_check = false)"};
  return std::nullopt;
}

/// The step `step` of `steps` if the harness saw its line arrive (observed_at_s >= 0).
const step_point* observed_step(const std::vector<step_point>& steps, std::uint32_t step) {
  for (const auto& s : steps)
    if (s.step == step && s.observed_at_s >= 0)
      return &s;
  return nullptr;
}

/// Per step: the mean of `values` and the largest absolute deviation from it.
void mean_and_spread(const std::map<std::uint32_t, std::vector<double>>& per_step,
                     std::map<std::uint32_t, double>& mean_out,
                     std::map<std::uint32_t, double>& spread_out) {
  for (const auto& [step, values] : per_step) {
    double sum = 0;
    for (double v : values)
      sum += v;
    double mean = sum / static_cast<double>(values.size());
    double spread = 0;
    for (double v : values)
      spread = std::max(spread, std::abs(v - mean));
    mean_out[step] = mean;
    spread_out[step] = spread;
  }
}

/// max(atol, rtol x |reference|, 3 x spread) at `step` (0 for a step without reference).
double pointwise_tolerance(const contract_spec& contract, const std::map<std::uint32_t, double>& ref,
                           const std::map<std::uint32_t, double>& spreads, std::uint32_t step) {
  auto it = ref.find(step);
  double r = it == ref.end() ? 0.0 : std::abs(it->second);
  auto sp = spreads.find(step);
  double spread = sp == spreads.end() ? 0.0 : sp->second;
  return std::max({contract.loss_atol, contract.loss_rtol * r, 3.0 * spread});
}

/// "tokens: ..." when step `s` reported other than the contract's tokens per step.
std::optional<std::string> tokens_violation(const contract_spec& contract, const step_point& s) {
  if (contract.tokens_per_step == 0 || s.tokens == contract.tokens_per_step)
    return std::nullopt;
  return "tokens: step " + std::to_string(s.step) + " reported " + std::to_string(s.tokens)
         + " tokens, the contract says " + std::to_string(contract.tokens_per_step);
}

/// "loss_non_finite: ..." when step `s` reported a NaN or infinite training loss.
std::optional<std::string> non_finite_violation(const step_point& s) {
  if (std::isfinite(s.loss))
    return std::nullopt;
  return "loss_non_finite: step " + std::to_string(s.step) + " reported a loss of " + num(s.loss);
}

/// "loss_non_finite: ..." when step `s` reported an eval loss that is not finite.
std::optional<std::string> eval_non_finite_violation(const step_point& s) {
  if (!s.eval_loss || std::isfinite(*s.eval_loss))
    return std::nullopt;
  return "loss_non_finite: step " + std::to_string(s.step) + " reported an eval loss of "
         + num(*s.eval_loss);
}

/// loss_drift of `value` ("loss" or "eval loss", `what`) at `step` when it is farther than `tol`
/// from `reference` (a NaN is never within).
std::optional<std::string> band_drift(const char* what, std::uint32_t step, double value,
                                      double reference, double tol) {
  double diff = std::abs(value - reference);
  if (diff <= tol)
    return std::nullopt;
  return "loss_drift: step " + std::to_string(step) + " " + what + " " + num(value)
         + " differs from the reference " + num(reference) + " by " + num(diff) + " (tolerance "
         + num(tol) + ")";
}

/// Pointwise loss_drift at checkpoint `cp` (reference `reference`) of a finite `loss`.
std::optional<std::string> pointwise_drift(const contract_spec& contract, const loss_reference& ref,
                                           std::uint32_t cp, double reference, double loss) {
  return band_drift("loss", cp, loss, reference, loss_tolerance(contract, ref, cp));
}

std::string window_range(const loss_window_reference& w) {
  return std::to_string(w.first) + ".." + std::to_string(w.last);
}

/// Window loss_drift of window `w` when the trial reported all of its steps with a finite loss;
/// `incomplete` is set when it did not (the caller decides what that means).
std::optional<std::string> window_drift(const contract_spec& contract,
                                        const loss_window_reference& w,
                                        const std::vector<step_point>& steps, bool& incomplete) {
  auto t = window_of(steps, w.first, w.last);
  auto want = static_cast<std::size_t>(w.last - w.first) + 1;
  incomplete = t.n != want;
  if (incomplete)
    return "loss_drift: steps " + window_range(w) + ": " + std::to_string(t.n) + " of "
           + std::to_string(want) + " steps reported a finite loss";
  double tol = window_tolerance(contract, w, t.variance, t.n);
  double diff = std::abs(t.mean - w.mean);
  if (diff <= tol)
    return std::nullopt;
  return "loss_drift: steps " + window_range(w) + " mean loss " + num(t.mean)
         + " differs from the reference " + num(w.mean) + " by " + num(diff) + " (tolerance "
         + num(tol) + " = max(atol, rtol x |reference|, " + num(loss_window_k)
         + " x the standard error of the window means))";
}

/// Eval-mode loss_drift at eval step `e` (reference `reference`) of a finite eval loss `got`.
std::optional<std::string> eval_drift(const contract_spec& contract, const loss_reference& ref,
                                      std::uint32_t e, double reference, double got) {
  return band_drift("eval loss", e, got, reference, eval_loss_tolerance(contract, ref, e));
}

/// The checkpoints of pointwise mode: contract.loss_checkpoints, or every step of the reference.
std::vector<std::uint32_t> pointwise_checkpoints(const contract_spec& contract,
                                                 const loss_reference& ref) {
  std::vector<std::uint32_t> checkpoints = contract.loss_checkpoints;
  if (checkpoints.empty())
    for (const auto& [step, loss] : ref.loss)
      checkpoints.push_back(step);
  return checkpoints;
}

/// The eval steps of eval mode: contract.eval_steps, or every eval step of the reference.
std::vector<std::uint32_t> eval_checkpoints(const contract_spec& contract,
                                            const loss_reference& ref) {
  std::vector<std::uint32_t> eval_steps = contract.eval_steps;
  if (eval_steps.empty())
    for (const auto& [step, loss] : ref.eval_loss)
      eval_steps.push_back(step);
  return eval_steps;
}

/// loss_mode pointwise: loss_not_falling and loss_drift at the checkpoints (appended to `v`).
void pointwise_loss_checks(const contract_spec& contract, const loss_reference& ref,
                           const std::vector<step_point>& steps, std::vector<std::string>& v) {
  std::vector<std::uint32_t> checkpoints = pointwise_checkpoints(contract, ref);
  auto loss_at = [&steps](std::uint32_t step) -> const step_point* {
    for (const auto& s : steps)
      if (s.step == step)
        return &s;
    return nullptr;
  };
  // Numerics: the loss must fall where the reference falls. The reference falls when its drop
  // from the first to the last checkpoint exceeds twice the tolerance there; a trial whose own
  // drop is under half the reference's did not train (backward or optimizer step skipped).
  std::vector<std::uint32_t> with_ref;
  for (auto cp : checkpoints)
    if (ref.loss.count(cp) != 0)
      with_ref.push_back(cp);
  if (with_ref.size() >= 2) {
    auto first = with_ref.front();
    auto last = with_ref.back();
    double ref_drop = ref.loss.at(first) - ref.loss.at(last);
    const auto* f = loss_at(first);
    const auto* l = loss_at(last);
    if (ref_drop > 2.0 * loss_tolerance(contract, ref, last) && f != nullptr && l != nullptr
        && std::isfinite(f->loss) && std::isfinite(l->loss) && !(f->loss - l->loss > 0.5 * ref_drop))
      v.push_back("loss_not_falling: the loss went " + num(f->loss) + " -> " + num(l->loss)
                  + " from step " + std::to_string(first) + " to step " + std::to_string(last)
                  + " while the reference fell " + num(ref.loss.at(first)) + " -> "
                  + num(ref.loss.at(last)) + " (backward or optimizer step skipped?)");
  }
  // Numerics: within tolerance of the reference at every checkpoint (first failure reported).
  for (auto cp : checkpoints) {
    auto r = ref.loss.find(cp);
    if (r == ref.loss.end())
      continue; // no reference for this step (the baseline did not report it)
    const auto* s = loss_at(cp);
    if (s == nullptr) {
      v.push_back("loss_drift: checkpoint step " + std::to_string(cp) + " was not reported");
      break;
    }
    if (!std::isfinite(s->loss))
      break; // reported above
    if (auto drift = pointwise_drift(contract, ref, cp, r->second, s->loss)) {
      v.push_back(*drift);
      break;
    }
  }
}

/// loss_mode window: loss_not_falling between the first and last window, loss_drift of a
/// window's mean (appended to `v`).
void window_loss_checks(const contract_spec& contract, const loss_reference& ref,
                        const std::vector<step_point>& steps, std::vector<std::string>& v) {
  // The loss must fall where the reference falls (the pointwise rule on window means): the
  // reference's drop from the first to the last window exceeds twice the last window's
  // tolerance between two baseline-like runs, and the trial fell by less than half as much.
  if (ref.windows.size() >= 2) {
    const auto& first = ref.windows.front();
    const auto& last = ref.windows.back();
    auto f = window_of(steps, first.first, first.last);
    auto l = window_of(steps, last.first, last.last);
    double ref_drop = first.mean - last.mean;
    double tol = window_tolerance(contract, last, last.within_var,
                                  static_cast<std::size_t>(last.last - last.first) + 1);
    if (ref_drop > 2.0 * tol && f.n > 0 && l.n > 0 && !(f.mean - l.mean > 0.5 * ref_drop))
      v.push_back("loss_not_falling: the mean loss went " + num(f.mean) + " -> " + num(l.mean)
                  + " from steps " + window_range(first) + " to steps " + window_range(last)
                  + " while the reference fell " + num(first.mean) + " -> " + num(last.mean)
                  + " (backward or optimizer step skipped?)");
  }
  if (ref.windows.empty() && !ref.loss.empty())
    v.push_back("loss_drift: no baseline reported a whole window of contract.loss_window = "
                + std::to_string(contract.loss_window) + " steps");
  for (const auto& w : ref.windows) {
    bool incomplete = false;
    if (auto drift = window_drift(contract, w, steps, incomplete)) {
      v.push_back(*drift);
      break;
    }
  }
}

/// loss_mode eval: loss_non_finite of an eval loss (unless the training loss already was),
/// loss_not_falling between the first and last eval step, loss_drift of an eval loss (appended
/// to `v`).
void eval_loss_checks(const contract_spec& contract, const loss_reference& ref,
                      const std::vector<step_point>& steps, bool train_non_finite,
                      std::vector<std::string>& v) {
  if (!train_non_finite)
    for (const auto& s : steps)
      if (auto bad = eval_non_finite_violation(s)) {
        v.push_back(*bad);
        break;
      }
  if (ref.loss.empty())
    return; // not calibrated yet (the doctor's own baselines)
  std::vector<std::uint32_t> eval_steps = eval_checkpoints(contract, ref);
  if (eval_steps.empty()) {
    v.push_back("loss_drift: the baselines reported no eval loss (contract.loss_mode = \"eval\" "
                "compares the metrics field eval_loss)");
    return;
  }
  auto eval_at = [&steps](std::uint32_t step) -> std::optional<double> {
    for (const auto& s : steps)
      if (s.step == step)
        return s.eval_loss;
    return std::nullopt;
  };
  std::vector<std::uint32_t> with_ref;
  for (auto e : eval_steps)
    if (ref.eval_loss.count(e) != 0)
      with_ref.push_back(e);
  if (with_ref.size() >= 2) {
    auto first = with_ref.front();
    auto last = with_ref.back();
    double ref_drop = ref.eval_loss.at(first) - ref.eval_loss.at(last);
    auto f = eval_at(first);
    auto l = eval_at(last);
    if (ref_drop > 2.0 * eval_loss_tolerance(contract, ref, last) && f && l && std::isfinite(*f)
        && std::isfinite(*l) && !(*f - *l > 0.5 * ref_drop))
      v.push_back("loss_not_falling: the eval loss went " + num(*f) + " -> " + num(*l)
                  + " from step " + std::to_string(first) + " to step " + std::to_string(last)
                  + " while the reference fell " + num(ref.eval_loss.at(first)) + " -> "
                  + num(ref.eval_loss.at(last)) + " (backward or optimizer step skipped?)");
  }
  for (auto e : eval_steps) {
    auto r = ref.eval_loss.find(e);
    if (r == ref.eval_loss.end()) {
      v.push_back("loss_drift: eval step " + std::to_string(e)
                  + " has no reference (no baseline reported a finite eval loss there)");
      break;
    }
    auto got = eval_at(e);
    if (!got) {
      v.push_back("loss_drift: eval step " + std::to_string(e) + " reported no eval loss");
      break;
    }
    if (!std::isfinite(*got))
      break; // reported above
    if (auto drift = eval_drift(contract, ref, e, r->second, *got)) {
      v.push_back(*drift);
      break;
    }
  }
}

} // namespace

loss_reference make_loss_reference(const std::vector<trial_record>& baselines) {
  loss_reference ref;
  std::map<std::uint32_t, std::vector<double>> per_step;
  for (const auto& b : baselines)
    for (const auto& s : b.steps)
      if (std::isfinite(s.loss))
        per_step[s.step].push_back(s.loss);
  mean_and_spread(per_step, ref.loss, ref.spread);
  return ref;
}

loss_reference make_loss_reference(const contract_spec& contract,
                                   const std::vector<trial_record>& baselines) {
  loss_reference ref = make_loss_reference(baselines);
  if (contract.loss_mode == loss_mode::window && !ref.loss.empty()) {
    for (const auto& [first, last] : loss_windows(contract.loss_window, ref.loss.rbegin()->first)) {
      std::vector<double> means;
      double within = 0;
      for (const auto& b : baselines) {
        auto w = window_of(b.steps, first, last);
        if (w.n != static_cast<std::size_t>(last - first) + 1)
          continue; // this run did not report the whole window
        means.push_back(w.mean);
        within += w.variance;
      }
      if (means.empty())
        continue;
      loss_window_reference r;
      r.first = first;
      r.last = last;
      r.runs = static_cast<std::uint32_t>(means.size());
      double sum = 0;
      for (double m : means)
        sum += m;
      r.mean = sum / static_cast<double>(means.size());
      r.within_var = within / static_cast<double>(means.size());
      if (means.size() >= 2) {
        double ss = 0;
        for (double m : means)
          ss += (m - r.mean) * (m - r.mean);
        r.between_var = ss / static_cast<double>(means.size() - 1);
      }
      ref.windows.push_back(r);
    }
  }
  if (contract.loss_mode == loss_mode::eval) {
    std::map<std::uint32_t, std::vector<double>> per_step;
    for (const auto& b : baselines)
      for (const auto& s : b.steps)
        if (s.eval_loss && std::isfinite(*s.eval_loss)
            && (contract.eval_steps.empty()
                || std::find(contract.eval_steps.begin(), contract.eval_steps.end(), s.step)
                     != contract.eval_steps.end()))
          per_step[s.step].push_back(*s.eval_loss);
    mean_and_spread(per_step, ref.eval_loss, ref.eval_spread);
  }
  return ref;
}

double loss_tolerance(const contract_spec& contract, const loss_reference& ref,
                      std::uint32_t step) {
  return pointwise_tolerance(contract, ref.loss, ref.spread, step);
}

double eval_loss_tolerance(const contract_spec& contract, const loss_reference& ref,
                           std::uint32_t step) {
  return pointwise_tolerance(contract, ref.eval_loss, ref.eval_spread, step);
}

std::vector<std::pair<std::uint32_t, std::uint32_t>> loss_windows(std::uint32_t n,
                                                                  std::uint32_t last_step) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  if (n < 2)
    return out;
  std::uint64_t count = (static_cast<std::uint64_t>(last_step) + 1) / n;
  if (count == 0)
    return {{0, last_step}};
  for (std::uint64_t k = 0; k < count; ++k)
    out.emplace_back(static_cast<std::uint32_t>(k * n), static_cast<std::uint32_t>(k * n + n - 1));
  out.back().second = last_step; // the steps that do not fill a window join the last one
  return out;
}

window_stats window_of(const std::vector<step_point>& steps, std::uint32_t first,
                       std::uint32_t last) {
  std::map<std::uint32_t, double> in; // by step: the order of the steps, not of the lines
  for (const auto& s : steps)
    if (s.step >= first && s.step <= last && std::isfinite(s.loss))
      in.emplace(s.step, s.loss);
  window_stats w;
  w.n = in.size();
  if (w.n == 0)
    return w;
  double sum = 0;
  for (const auto& [step, loss] : in)
    sum += loss;
  w.mean = sum / static_cast<double>(w.n);
  if (w.n >= 2) {
    double ss = 0;
    double prev = in.begin()->second;
    for (auto it = std::next(in.begin()); it != in.end(); ++it) {
      ss += (it->second - prev) * (it->second - prev);
      prev = it->second;
    }
    w.variance = ss / (2.0 * static_cast<double>(w.n - 1));
  }
  return w;
}

double window_tolerance(const contract_spec& contract, const loss_window_reference& ref,
                        double trial_var, std::size_t n) {
  double runs = std::max<double>(1.0, ref.runs);
  double se2 = (std::max(0.0, trial_var) + ref.within_var) / std::max<double>(1.0, n)
               + ref.between_var * (1.0 + 1.0 / runs);
  return std::max({contract.loss_atol, contract.loss_rtol * std::abs(ref.mean),
                   loss_window_k * std::sqrt(se2)});
}

double timed_step_time(const contract_spec& contract, const std::vector<step_point>& steps) {
  std::vector<double> times;
  for (auto want = contract.timed_first; want <= contract.timed_last; ++want) {
    auto it = std::find_if(steps.begin(), steps.end(),
                           [want](const step_point& s) { return s.step == want; });
    if (it == steps.end())
      return 0.0;
    times.push_back(it->step_time_s);
  }
  return median(times);
}

std::string violation_code(const std::string& message) {
  auto colon = message.find(':');
  return colon == std::string::npos ? std::string{} : message.substr(0, colon);
}

clock_check_result clock_check(const contract_spec& contract, const std::vector<step_point>& steps) {
  clock_check_result r;
  if (auto why = clock_not_checked(contract)) {
    r.why = *why;
    return r;
  }
  auto observed = [&steps](std::uint32_t step) { return observed_step(steps, step); };
  const step_point* a = contract.timed_first > 0 ? observed(contract.timed_first - 1) : nullptr;
  std::uint32_t first = contract.timed_first;
  if (a == nullptr) { // no observed step before the window: start at its first step
    a = observed(first);
    ++first;
  }
  const step_point* b = observed(contract.timed_last);
  if (a == nullptr || b == nullptr || first > contract.timed_last) {
    r.why = "fewer than two steps of the timed window were observed by the harness";
    return r;
  }
  r.from_step = a->step;
  r.to_step = b->step;
  for (const auto& s : steps)
    if (s.step >= first && s.step <= contract.timed_last)
      r.reported_s += s.step_time_s;
  r.observed_s = b->observed_at_s - a->observed_at_s;
  // A short observed window is too short to time, unless the reported one is long: then the
  // lines arrived in a burst (buffered output), which cannot confirm the times either.
  if (r.observed_s < min_clock_window_s && r.reported_s < 4.0 * min_clock_window_s) {
    r.why = "the observed window (" + num(r.observed_s) + " s) is too short to time";
    return r;
  }
  r.made = true;
  return r;
}

const char* clock_rule_name(clock_rule r) {
  switch (r) {
    case clock_rule::window_sum: return "window_sum/0";
    case clock_rule::step_median: return "step_median/1";
  }
  return "?";
}

std::optional<clock_rule> parse_clock_rule(const std::string& name) {
  for (auto r : {clock_rule::window_sum, clock_rule::step_median})
    if (name == clock_rule_name(r))
      return r;
  return std::nullopt;
}

step_clock_result step_clock_check(const contract_spec& contract,
                                   const std::vector<step_point>& steps) {
  step_clock_result r;
  if (auto why = clock_not_checked(contract)) {
    r.why = *why;
    return r;
  }
  auto observed = [&steps](std::uint32_t step) { return observed_step(steps, step); };
  std::vector<double> differences;
  std::vector<double> intervals;
  double reported = 0;
  double first_at = 0;
  double last_at = 0;
  for (auto step = std::max<std::uint32_t>(contract.timed_first, 1); step <= contract.timed_last;
       ++step) {
    const auto* prev = observed(step - 1);
    const auto* cur = observed(step);
    if (prev == nullptr || cur == nullptr)
      continue;
    if (differences.empty()) {
      r.from_step = prev->step;
      first_at = prev->observed_at_s;
    }
    r.to_step = cur->step;
    last_at = cur->observed_at_s;
    double interval = cur->observed_at_s - prev->observed_at_s;
    differences.push_back(cur->step_time_s - interval);
    intervals.push_back(interval);
    reported += cur->step_time_s;
  }
  if (differences.empty()) {
    r.why = "fewer than two consecutive steps of the timed window were observed by the harness";
    return r;
  }
  // As window_sum: a short observed window is too short to time, unless the reported one is
  // long: then the lines arrived in a burst (buffered output), which cannot confirm the times.
  double window = last_at - first_at;
  if (window < min_clock_window_s && reported < 4.0 * min_clock_window_s) {
    r.why = "the observed window (" + num(window) + " s) is too short to time";
    return r;
  }
  r.compared = differences.size();
  r.median_difference_s = median(differences);
  r.median_interval_s = median(intervals);
  r.made = true;
  return r;
}

clock_band clock_band_for(const contract_spec& contract, const step_clock_result& check,
                          const clock_options& options) {
  clock_band b;
  double interval = std::max(0.0, check.median_interval_s);
  double relative = contract.clock_tolerance * interval;
  b.offset_s = std::max(std::min(options.offset_s, 0.0), -max_clock_offset_fraction * interval);
  b.skew_s = std::min(std::max(0.0, options.skew_s), relative);
  b.center_s = b.offset_s;
  b.half_width_s = relative + clock_slack_per_step_s + b.skew_s;
  return b;
}

clock_calibration calibrate_clock(const contract_spec& contract,
                                  const std::vector<trial_record>& baselines) {
  clock_calibration c;
  for (const auto& b : baselines) {
    auto r = step_clock_check(contract, b.steps);
    if (!r.made)
      continue;
    ++c.runs;
    c.differences_s.push_back(r.median_difference_s);
  }
  c.offset_s = median(c.differences_s);
  for (double d : c.differences_s)
    c.skew_s = std::max(c.skew_s, std::abs(d - c.offset_s));
  return c;
}

std::vector<std::string> check_contract(const contract_spec& contract, const loss_reference& ref,
                                        const trial_record& trial, const clock_options& clock) {
  std::vector<std::string> v;
  const auto& steps = trial.steps;
  const auto& declared = trial.declared;
  // Work: the number of steps, each reported once, in order.
  if (contract.steps > 0 && steps.size() != contract.steps) {
    v.push_back("steps: reported " + std::to_string(steps.size()) + " steps, the contract says "
                + std::to_string(contract.steps));
  } else {
    for (std::size_t i = 0; i < steps.size(); ++i)
      if (steps[i].step != i) {
        v.push_back("steps: position " + std::to_string(i) + " reports step "
                    + std::to_string(steps[i].step) + " (steps must be 0, 1, 2, ... once each)");
        break;
      }
  }
  // Work: tokens per step.
  for (const auto& s : steps)
    if (auto bad = tokens_violation(contract, s)) {
      v.push_back(*bad);
      break;
    }
  // Work the final line declares: where the workload prints a final line, it must declare the
  // contract's global batch, parameter and layer counts (a missing key is not a pass).
  auto declared_check = [&](const char* key, std::uint64_t want,
                            const std::optional<std::uint64_t>& got) {
    if (want == 0 || !declared.final_seen)
      return;
    if (!got)
      v.push_back(std::string{key} + ": the final line does not declare " + key
                  + "; the contract says " + std::to_string(want));
    else if (*got != want)
      v.push_back(std::string{key} + ": the final line declares " + key + " = "
                  + std::to_string(*got) + ", the contract says " + std::to_string(want));
  };
  declared_check("global_batch", contract.global_batch, declared.global_batch);
  declared_check("params", contract.params, declared.params);
  declared_check("layers", contract.layers, declared.layers);
  // Numerics: finite loss everywhere.
  for (const auto& s : steps)
    if (auto bad = non_finite_violation(s)) {
      v.push_back(*bad);
      break;
    }
  if (contract.loss_mode == loss_mode::eval) {
    bool train_non_finite = !v.empty() && violation_code(v.back()) == "loss_non_finite";
    eval_loss_checks(contract, ref, steps, train_non_finite, v);
  } else if (contract.loss_mode == loss_mode::window) {
    window_loss_checks(contract, ref, steps, v);
  } else {
    pointwise_loss_checks(contract, ref, steps, v);
  }
  // Timing: the contract's window, warm-up excluded, fully reported; the workload's own window
  // (declared in its final line, or by warm-up marks) must be the contract's.
  if (contract.steps > 0) {
    std::string window = "[" + std::to_string(contract.timed_first) + ", "
                         + std::to_string(contract.timed_last) + "]";
    if (declared.timed_steps
        && (declared.timed_steps->first != contract.timed_first
            || declared.timed_steps->second != contract.timed_last)) {
      v.push_back("timed_window: the workload timed steps ["
                  + std::to_string(declared.timed_steps->first) + ", "
                  + std::to_string(declared.timed_steps->second) + "], the contract's window is "
                  + window);
    } else if (timed_step_time(contract, steps) <= 0) {
      v.push_back("timed_window: the contract's window " + window + " is not fully reported");
    } else {
      for (const auto& s : steps)
        if (s.warmup && s.step >= contract.timed_first && s.step <= contract.timed_last) {
          v.push_back("timed_window: step " + std::to_string(s.step)
                      + " is marked warm-up but lies in the contract's timed window " + window);
          break;
        }
    }
  }
  // Timing: step times positive and finite.
  bool times_reported = false;
  for (const auto& s : steps)
    if (!(s.step_time_s > 0) || !std::isfinite(s.step_time_s)) {
      v.push_back("step_times: step " + std::to_string(s.step) + " reported a step time of "
                  + num(s.step_time_s) + " s");
      times_reported = true;
      break;
    }
  if (!times_reported && !contract.simulated_time) {
    // Timing: reported step times cannot add up to more than the wall time.
    double sum = 0;
    for (const auto& s : steps)
      sum += s.step_time_s;
    if (trial.wall_time_s > 0 && sum > trial.wall_time_s * (1.0 + contract.wall_tolerance)) {
      v.push_back("step_times: step times add up to " + num(sum) + " s but the trial took "
                  + num(trial.wall_time_s) + " s of wall time");
    } else if (clock.rule == clock_rule::step_median) {
      // Timing: the median step against the harness clock (fake or partial timers, unit slips,
      // buffered lines). Tokens / reported time against tokens / observed time is the same
      // ratio: this is also the throughput cross-check.
      auto c = step_clock_check(contract, steps);
      auto band = clock_band_for(contract, c, clock);
      if (c.made && !band.contains(c.median_difference_s))
        v.push_back("clock: steps " + std::to_string(c.from_step + 1) + ".."
                    + std::to_string(c.to_step) + ": the median step reports "
                    + num(c.median_difference_s) + " s against the harness clock's "
                    + num(c.median_interval_s) + " s between consecutive metrics lines ("
                    + num(100.0 * c.disagreement()) + "%, over " + std::to_string(c.compared)
                    + " steps; allowed " + num(band.center_s) + " +- " + num(band.half_width_s)
                    + " s = the doctor's offset " + num(1000.0 * band.offset_s)
                    + " ms, tolerance " + num(100.0 * contract.clock_tolerance) + "% + "
                    + num(1000.0 * clock_slack_per_step_s) + " ms + the doctor's skew "
                    + num(1000.0 * band.skew_s) + " ms)"
                    + (c.median_difference_s < band.center_s
                         ? ": a fake or partial step timer"
                         : ": lines arrived in bursts (buffered stdout?)"));
    } else {
      // Timing (window_sum/0, runs locked before step_median): the timed window against the
      // harness clock (fake timers, unit slips). The same
      // comparison is the throughput cross-check: tokens / reported time vs tokens / observed.
      auto c = clock_check(contract, steps);
      // Allowed: the tolerance, plus clock_slack_per_step_s per step for the work between two
      // steps that no step timer covers (printing the line, resetting the peak counter).
      double allowed = contract.clock_tolerance * c.observed_s
                       + clock_slack_per_step_s * static_cast<double>(c.to_step - c.from_step);
      if (c.made && std::abs(c.reported_s - c.observed_s) > allowed)
        v.push_back("step_times: steps " + std::to_string(c.from_step + 1) + ".."
                    + std::to_string(c.to_step) + " report " + num(c.reported_s)
                    + " s in total but the harness clock saw " + num(c.observed_s)
                    + " s between their metrics lines (" + num(100.0 * c.disagreement())
                    + "%, tolerance " + num(100.0 * contract.clock_tolerance) + "%)"
                    + (c.disagreement() < 0 ? ": a fake or partial step timer"
                                            : ": lines arrived late (buffered stdout?)"));
    }
  }
  return v;
}

namespace {
/// The first work or numerics violation of `run` against `reference` as the loss reference,
/// timing not judged (smoke_violation, smoke_own_violation).
std::optional<std::string> smoke_first_violation(const contract_spec& contract,
                                                 const trial_record& reference,
                                                 const trial_record& run) {
  auto judged = contract;
  judged.simulated_time = true; // no wall-time or harness-clock check
  auto ref = make_loss_reference(judged, {reference});
  for (auto& v : check_contract(judged, ref, run)) {
    auto code = violation_code(v);
    if (code != "timed_window" && code != "step_times")
      return std::move(v);
  }
  return std::nullopt;
}
} // namespace

std::optional<std::string> smoke_violation(const contract_spec& contract,
                                           const trial_record& unpatched,
                                           const trial_record& patched) {
  if (patched.outcome != trial_outcome::ok || smoke_reference_problem(contract, unpatched)
      || smoke_vacuous(contract, unpatched))
    return std::nullopt;
  return smoke_first_violation(contract, unpatched, patched);
}

std::optional<std::string> smoke_own_violation(const contract_spec& contract,
                                               const trial_record& run) {
  // Judged against itself: no loss can drift, so what is left are its own work checks.
  return smoke_first_violation(contract, run, run);
}

std::optional<std::string> smoke_reference_problem(const contract_spec& contract,
                                                   const trial_record& unpatched) {
  if (unpatched.outcome != trial_outcome::ok)
    return "the unpatched smoke run ended " + std::string{to_string(unpatched.outcome)}
           + (unpatched.detail.empty() ? std::string{} : " (" + unpatched.detail + ")");
  if (auto v = smoke_own_violation(contract, unpatched))
    return "the unpatched smoke run breaks [smoke]: " + *v;
  return std::nullopt;
}

double smoke_min_loss_fall(const contract_spec& contract, double first) {
  const double a = std::abs(first);
  return std::max({contract.loss_atol, contract.loss_rtol * a, smoke_min_loss_fall_rel * a});
}

std::optional<std::string> smoke_vacuous(const contract_spec& contract,
                                         const trial_record& unpatched) {
  if (unpatched.steps.size() < 2)
    return std::nullopt; // one step shows no fall nor its absence
  const auto by_step = [](const step_point& a, const step_point& b) { return a.step < b.step; };
  const auto first = *std::min_element(unpatched.steps.begin(), unpatched.steps.end(), by_step);
  const auto last = *std::max_element(unpatched.steps.begin(), unpatched.steps.end(), by_step);
  if (!std::isfinite(first.loss) || !std::isfinite(last.loss))
    return std::nullopt; // smoke_reference_problem's (loss_non_finite)
  const double fall = first.loss - last.loss;
  const double needed = smoke_min_loss_fall(contract, first.loss);
  if (fall > needed)
    return std::nullopt;
  const double a = std::abs(first.loss);
  return "the unpatched smoke loss went " + num(first.loss) + " -> " + num(last.loss) + " over "
         + std::to_string(unpatched.steps.size()) + " steps ("
         + (fall >= 0 ? "fell by " + num(fall) : "rose by " + num(-fall)) + ", not more than "
         + num(needed) + " = max(loss_atol " + num(contract.loss_atol) + ", loss_rtol "
         + num(contract.loss_rtol) + " x " + num(a) + ", " + num(smoke_min_loss_fall_rel) + " x "
         + num(a) + ")); a probe whose loss does not fall cannot tell a numerics change";
}

namespace {
/// What a smoke note (smoke_vacuous_detail, smoke_inconclusive_detail) ends with.
constexpr const char* smoke_fix_note = " (fix [smoke]: infrarsi check --smoke)";

/// REASON of "MARKER REASON (fix [smoke]: infrarsi check --smoke)" anywhere in `detail`.
std::optional<std::string> smoke_note_reason(const std::string& detail, const std::string& marker) {
  const std::string fix = smoke_fix_note;
  auto at = detail.find(marker);
  if (at == std::string::npos)
    return std::nullopt;
  auto reason = detail.substr(at + marker.size());
  return reason.substr(0, reason.rfind(fix));
}

constexpr const char* smoke_vacuous_marker = "smoke probe vacuous: ";
} // namespace

std::string smoke_vacuous_detail(const std::string& reason) {
  return smoke_vacuous_marker + reason + smoke_fix_note;
}

std::optional<std::string> smoke_vacuous_reason(const std::string& detail) {
  return smoke_note_reason(detail, smoke_vacuous_marker);
}

bool is_smoke_vacuous(const std::string& detail) {
  return smoke_vacuous_reason(detail).has_value();
}

namespace {
constexpr const char* smoke_inconclusive_marker = "smoke probe inconclusive: ";
} // namespace

std::string smoke_inconclusive_detail(const std::string& reason) {
  return smoke_inconclusive_marker + reason + smoke_fix_note;
}

std::optional<std::string> smoke_inconclusive_reason(const std::string& detail) {
  return smoke_note_reason(detail, smoke_inconclusive_marker);
}

bool is_smoke_inconclusive(const std::string& detail) {
  return smoke_inconclusive_reason(detail).has_value();
}

std::optional<std::string> early_violation(const contract_spec& contract,
                                           const loss_reference& ref,
                                           const std::vector<step_point>& steps,
                                           std::size_t from) {
  for (std::size_t i = from; i < steps.size(); ++i) {
    const auto& s = steps[i];
    if (auto bad = tokens_violation(contract, s))
      return bad;
    if (auto bad = non_finite_violation(s))
      return bad;
    if (ref.loss.empty())
      continue; // the doctor has not calibrated: nothing to compare the loss with
    if (contract.loss_mode == loss_mode::pointwise) {
      auto cps = pointwise_checkpoints(contract, ref);
      auto r = ref.loss.find(s.step);
      if (r != ref.loss.end() && std::find(cps.begin(), cps.end(), s.step) != cps.end())
        if (auto drift = pointwise_drift(contract, ref, s.step, r->second, s.loss))
          return drift;
    } else if (contract.loss_mode == loss_mode::window) {
      const std::vector<step_point> prefix(steps.begin(),
                                           steps.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      for (const auto& w : ref.windows)
        if (w.last == s.step) {
          bool incomplete = false;
          auto drift = window_drift(contract, w, prefix, incomplete);
          if (drift && !incomplete)
            return drift;
        }
    } else if (s.eval_loss) {
      if (auto bad = eval_non_finite_violation(s))
        return bad;
      auto evals = eval_checkpoints(contract, ref);
      auto r = ref.eval_loss.find(s.step);
      if (r != ref.eval_loss.end() && std::find(evals.begin(), evals.end(), s.step) != evals.end())
        if (auto drift = eval_drift(contract, ref, s.step, r->second, *s.eval_loss))
          return drift;
    }
  }
  return std::nullopt;
}

namespace {
constexpr const char* early_stop_marker = "; stopped early at step ";
} // namespace

std::string early_stop_detail(const std::string& violation, std::uint32_t step,
                              std::uint32_t contract_steps) {
  return violation + early_stop_marker + std::to_string(step)
         + (contract_steps > 0 ? " of " + std::to_string(contract_steps) : std::string{});
}

namespace {
constexpr const char* smoke_probe_marker = "; smoke probe of ";
} // namespace

std::string smoke_probe_detail(const std::string& violation,
                               const std::vector<std::string>& patches) {
  std::string names;
  for (const auto& p : patches)
    names += (names.empty() ? "" : ", ") + p;
  return violation + smoke_probe_marker + names + " (the full launch did not start)";
}

bool is_smoke_probe(const std::string& detail) {
  return detail.find(smoke_probe_marker) != std::string::npos;
}

bool is_early_stop(const std::string& detail) {
  return detail.find(early_stop_marker) != std::string::npos;
}

loss_reference early_stop_reference(const loss_reference& ref, std::size_t max_points) {
  loss_reference out;
  for (const auto& [step, loss] : ref.loss) {
    if (out.loss.size() >= max_points)
      break;
    out.loss[step] = loss;
    if (auto sp = ref.spread.find(step); sp != ref.spread.end())
      out.spread[step] = sp->second;
  }
  for (const auto& w : ref.windows) {
    if (out.windows.size() >= max_points)
      break;
    out.windows.push_back(w);
  }
  for (const auto& [step, loss] : ref.eval_loss) {
    if (out.eval_loss.size() >= max_points)
      break;
    out.eval_loss[step] = loss;
    if (auto sp = ref.eval_spread.find(step); sp != ref.eval_spread.end())
      out.eval_spread[step] = sp->second;
  }
  return out;
}

} // namespace infrarsi::tuning
