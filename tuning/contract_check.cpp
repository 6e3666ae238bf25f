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

} // namespace

loss_reference make_loss_reference(const std::vector<trial_record>& baselines) {
  loss_reference ref;
  std::map<std::uint32_t, std::vector<double>> per_step;
  for (const auto& b : baselines)
    for (const auto& s : b.steps)
      if (std::isfinite(s.loss))
        per_step[s.step].push_back(s.loss);
  for (const auto& [step, values] : per_step) {
    double sum = 0;
    for (double v : values)
      sum += v;
    double mean = sum / static_cast<double>(values.size());
    double spread = 0;
    for (double v : values)
      spread = std::max(spread, std::abs(v - mean));
    ref.loss[step] = mean;
    ref.spread[step] = spread;
  }
  return ref;
}

double loss_tolerance(const contract_spec& contract, const loss_reference& ref,
                      std::uint32_t step) {
  auto it = ref.loss.find(step);
  double r = it == ref.loss.end() ? 0.0 : std::abs(it->second);
  auto sp = ref.spread.find(step);
  double spread = sp == ref.spread.end() ? 0.0 : sp->second;
  return std::max({contract.loss_atol, contract.loss_rtol * r, 3.0 * spread});
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
  if (contract.tokens_per_step > 0)
    for (const auto& s : steps)
      if (s.tokens != contract.tokens_per_step) {
        v.push_back("tokens: step " + std::to_string(s.step) + " reported "
                    + std::to_string(s.tokens) + " tokens, the contract says "
                    + std::to_string(contract.tokens_per_step));
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
    if (!std::isfinite(s.loss)) {
      v.push_back("loss_non_finite: step " + std::to_string(s.step) + " reported a loss of "
                  + num(s.loss));
      break;
    }
  std::vector<std::uint32_t> checkpoints = contract.loss_checkpoints;
  if (checkpoints.empty())
    for (const auto& [step, loss] : ref.loss)
      checkpoints.push_back(step);
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
    double tol = loss_tolerance(contract, ref, cp);
    double diff = std::abs(s->loss - r->second);
    if (!(diff <= tol)) {
      v.push_back("loss_drift: step " + std::to_string(cp) + " loss " + num(s->loss)
                  + " differs from the reference " + num(r->second) + " by " + num(diff)
                  + " (tolerance " + num(tol) + ")");
      break;
    }
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

} // namespace infrarsi::tuning
