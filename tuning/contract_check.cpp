#include "tuning/contract_check.hpp"

#include <algorithm>
#include <cmath>
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

std::vector<std::string> check_contract(const contract_spec& contract, const loss_reference& ref,
                                        const trial_record& trial) {
  std::vector<std::string> v;
  const auto& steps = trial.steps;
  // Work: the number of steps.
  if (contract.steps > 0 && steps.size() != contract.steps)
    v.push_back("steps: reported " + std::to_string(steps.size()) + " steps, the contract says "
                + std::to_string(contract.steps));
  // Work: every step reported once, in order.
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (steps[i].step != i) {
      v.push_back("steps: position " + std::to_string(i) + " reports step "
                  + std::to_string(steps[i].step) + " (steps must be 0, 1, 2, ... once each)");
      break;
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
  // Numerics: finite loss everywhere; within tolerance at the checkpoints.
  for (const auto& s : steps)
    if (!std::isfinite(s.loss)) {
      v.push_back("loss: step " + std::to_string(s.step) + " reported a non-finite loss ("
                  + num(s.loss) + ")");
      break;
    }
  std::vector<std::uint32_t> checkpoints = contract.loss_checkpoints;
  if (checkpoints.empty())
    for (const auto& [step, loss] : ref.loss)
      checkpoints.push_back(step);
  for (auto cp : checkpoints) {
    auto r = ref.loss.find(cp);
    if (r == ref.loss.end())
      continue; // no reference for this step (the baseline did not report it)
    auto it = std::find_if(steps.begin(), steps.end(),
                           [cp](const step_point& s) { return s.step == cp; });
    if (it == steps.end()) {
      v.push_back("loss: checkpoint step " + std::to_string(cp) + " was not reported");
      break;
    }
    double tol = loss_tolerance(contract, ref, cp);
    double diff = std::abs(it->loss - r->second);
    if (!(diff <= tol)) {
      v.push_back("loss: step " + std::to_string(cp) + " loss " + num(it->loss)
                  + " differs from the reference " + num(r->second) + " by " + num(diff)
                  + " (tolerance " + num(tol) + ")");
      break;
    }
  }
  // Timing: the contracted window must be reported.
  if (contract.steps > 0 && timed_step_time(contract, steps) <= 0)
    v.push_back("timing: the timed window [" + std::to_string(contract.timed_first) + ", "
                + std::to_string(contract.timed_last) + "] is not fully reported");
  // Timing: reported step times cannot add up to more than the wall time.
  double sum = 0;
  for (const auto& s : steps)
    sum += s.step_time_s;
  if (trial.wall_time_s > 0 && sum > trial.wall_time_s * (1.0 + contract.wall_tolerance))
    v.push_back("timing: step times add up to " + num(sum) + " s but the trial took "
                + num(trial.wall_time_s) + " s of wall time");
  for (const auto& s : steps)
    if (!(s.step_time_s > 0) || !std::isfinite(s.step_time_s)) {
      v.push_back("timing: step " + std::to_string(s.step) + " reported step time "
                  + num(s.step_time_s));
      break;
    }
  return v;
}

} // namespace infrarsi::tuning
