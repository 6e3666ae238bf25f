#include "decide/minimal_change.hpp"

#include <algorithm>
#include <cmath>

#include "decide/decisions.hpp"
#include "decide/llm.hpp"
#include "decide/next_step.hpp"
#include "store/run_projection.hpp"
#include "tuning/planner.hpp"
#include "tuning/search_space.hpp"

namespace infrarsi::decide {

namespace {

using tuning::purpose_kind;
using tuning::trial_outcome;

/// The latest re-verification logged for `id` (nullptr: none).
const store::reverification* latest_reverification(const store::run_state& run, std::uint64_t id) {
  const store::reverification* out = nullptr;
  for (const auto& r : run.reverifications)
    if (r.candidate_trial == id)
      out = &r;
  return out;
}

std::string failure_words(const tuning::trial_record& t) {
  if (t.outcome == trial_outcome::ok && !t.violations.empty())
    return "broke the contract (" + t.violations.front() + ")";
  std::string words = std::string{"ended "} + tuning::to_string(t.outcome);
  if (!t.detail.empty())
    words += " (" + t.detail.substr(0, 160) + ")";
  return words;
}

/// One-sided 95 % normal quantile.
constexpr double z95_one_sided = 1.6448536269514722;

/// Standard error of a re-verification's log speedup: sqrt(var(log a) / n_a + var(log b) / n_b)
/// over its baseline (a) and candidate (b) step times (sample variances; 0 with fewer than two).
double log_speedup_se(const store::reverification& r) {
  auto var_over_n = [](const std::vector<double>& times) {
    if (times.size() < 2)
      return 0.0;
    double mean = 0;
    for (double t : times)
      mean += std::log(t);
    mean /= static_cast<double>(times.size());
    double ss = 0;
    for (double t : times)
      ss += (std::log(t) - mean) * (std::log(t) - mean);
    return ss / static_cast<double>(times.size() - 1) / static_cast<double>(times.size());
  };
  return std::sqrt(var_over_n(r.baseline_times_s) + var_over_n(r.candidate_times_s));
}

std::string fixed(double v, int digits = 3) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

} // namespace

bool minimal_change_rule(const store::run_state& run) {
  if (!run.contract_doc || !run.contract_doc->is_object())
    return false;
  auto it = run.contract_doc->find("promotion_rule");
  return it != run.contract_doc->end() && it->is_string() &&
         it->get<std::string>() == current_promotion_rule;
}

bool is_ablation_trial(const store::run_state& run, std::uint64_t id) {
  for (const auto& t : run.trials)
    if (t.trial_id == id)
      return t.kind == purpose_kind::ablation;
  return false;
}

ablation_plan plan_ablations(const tuning::task_spec& base_task, const store::run_state& run) {
  ablation_plan plan;
  // The task the search ran on (with the accepted LLM-proposed patches: the supervisor passes
  // it so, replay passes the task file's): the same features whoever calls.
  const auto task = with_llm_patches(base_task, run, "");
  for (const auto& r : run.reverifications)
    if (r.promotable && !is_ablation_trial(run, r.candidate_trial) &&
        (plan.bundle == nullptr || r.estimate.speedup > plan.bundle->estimate.speedup))
      plan.bundle = &r;
  if (plan.bundle == nullptr)
    return plan;
  plan.current = plan.bundle->config;
  plan.current_reverification = plan.bundle;
  const auto budget = budget_of(task, run);
  if (!minimal_change_rule(run) || budget.ablations == 0)
    return plan;
  const auto base = tuning::baseline_configuration(task);
  std::vector<tuning::trial_record> history;
  for (const auto& t : run.trials)
    if (t.kind == purpose_kind::baseline || t.kind == purpose_kind::explore)
      history.push_back(t);
  plan.order = tuning::credit_changes(
      task, run.priors, history, run.noise ? run.noise->log_sd : 0.02, base, plan.bundle->config);
  if (plan.order.size() < 2)
    return plan;
  plan.active = true;
  const auto latest = run.latest_attempts();
  std::uint32_t index = 0;
  for (const auto& change : plan.order) {
    if (index >= budget.ablations || tuning::hamming(plan.current, base) < 2)
      break;
    auto config = tuning::undo_change(plan.current, base, change);
    if (auto why = tuning::constraint_violation(task, config); !why.empty()) {
      plan.skipped.push_back(change.name + ": " + why);
      continue;
    }
    ablation a;
    a.index = ++index;
    a.removed = change;
    a.config = config;
    const tuning::trial_record* t = nullptr;
    for (const auto* l : latest)
      if (l->kind == purpose_kind::ablation && l->candidate_trial == plan.bundle->candidate_trial &&
          l->round == a.index)
        t = l;
    if (t == nullptr) {
      a.state = ablation_state::next;
      plan.steps.push_back(std::move(a));
      return plan;
    }
    a.trial_id = t->trial_id;
    const bool lost = t->finished && t->outcome == trial_outcome::lost;
    if (!t->finished || (lost && t->attempt + 1 < max_attempts) || (!lost && !t->verified) ||
        (t->verified && clock_remeasure_due(run, *t))) {
      a.state = ablation_state::running;
      plan.steps.push_back(std::move(a));
      return plan;
    }
    if (!t->usable()) {
      a.state = ablation_state::rejected;
      a.reason = "its trial " + failure_words(*t);
      plan.steps.push_back(std::move(a));
      continue;
    }
    const auto* r = latest_reverification(run, t->trial_id);
    if (r == nullptr || (r->remeasure && r->round == 1)) {
      a.state = ablation_state::reverifying;
      plan.steps.push_back(std::move(a));
      return plan;
    }
    a.reverification = r;
    // Within the bundle's interval, and not shown to lose more than the promotion margin (what
    // the doctor's noise lets a re-verification detect) against the bundle: one-sided 95 %.
    const double margin = promotion_margin(run);
    const double se = std::hypot(log_speedup_se(*plan.bundle), log_speedup_se(*r));
    const double floor =
        std::max(plan.bundle->estimate.ci_low,
                 plan.bundle->estimate.speedup / (1.0 + margin) * std::exp(-z95_one_sided * se));
    if (r->promotable && r->estimate.speedup >= floor) {
      a.state = ablation_state::accepted;
      a.reason = "speedup " + fixed(r->estimate.speedup) +
                 " without it is within the bundle's interval and margin (>= " + fixed(floor) + ")";
      plan.current = config;
      plan.current_reverification = r;
    } else {
      a.state = ablation_state::rejected;
      a.reason = !r->promotable ? "its re-verification is not promotable: " + r->reason
                                : "speedup " + fixed(r->estimate.speedup) +
                                      " without it is below the bundle's interval and margin (" +
                                      fixed(floor) + ")";
    }
    plan.steps.push_back(std::move(a));
  }
  return plan;
}

nlohmann::json ablation_doc(const tuning::task_spec& task, const ablation_plan& plan) {
  const auto base = tuning::baseline_configuration(task);
  nlohmann::json order = nlohmann::json::array();
  for (const auto& c : plan.order)
    order.push_back({{"change", c.name}, {"model_speedup", std::exp(c.credit_log)}});
  nlohmann::json steps = nlohmann::json::array();
  nlohmann::json removed = nlohmann::json::array();
  for (const auto& a : plan.steps) {
    nlohmann::json s = {{"index", a.index},       {"removed", a.removed.name},
                        {"trial_id", a.trial_id}, {"change", a.config.diff_from(base)},
                        {"speedup", nullptr},     {"ci_low", nullptr},
                        {"ci_high", nullptr},     {"accepted", a.state == ablation_state::accepted},
                        {"reason", a.reason}};
    if (a.reverification != nullptr) {
      s["speedup"] = a.reverification->estimate.speedup;
      s["ci_low"] = a.reverification->estimate.ci_low;
      s["ci_high"] = a.reverification->estimate.ci_high;
    }
    if (a.state == ablation_state::accepted)
      removed.push_back(a.removed.name);
    steps.push_back(std::move(s));
  }
  nlohmann::json doc = {{"rule", current_promotion_rule},
                        {"order", order},
                        {"ablations", steps},
                        {"removed", removed},
                        {"skipped", plan.skipped}};
  if (plan.bundle != nullptr) {
    doc["bundle_trial"] = plan.bundle->candidate_trial;
    doc["bundle_change"] = plan.bundle->config.diff_from(base);
    doc["bundle_speedup"] = plan.bundle->estimate.speedup;
    doc["bundle_ci_low"] = plan.bundle->estimate.ci_low;
    doc["bundle_ci_high"] = plan.bundle->estimate.ci_high;
  }
  return doc;
}

} // namespace infrarsi::decide
