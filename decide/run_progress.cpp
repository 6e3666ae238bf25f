#include "decide/run_progress.hpp"

#include <algorithm>

namespace infrarsi::decide {

run_progress progress_of(const store::run_state& run,
                         std::optional<std::uint32_t> budget_trials) {
  run_progress p;
  if (run.stages_started.size() > run.stages_completed.size())
    p.stage = run.stages_started.back();
  else if (!run.stages_completed.empty())
    p.stage = run.stages_completed.back();
  p.search_trials_budget = budget_trials;
  if (!p.search_trials_budget && run.contract_doc && run.contract_doc->is_object()) {
    auto b = run.contract_doc->find("budget");
    if (b != run.contract_doc->end() && b->is_object()) {
      auto t = b->find("trials");
      if (t != b->end() && t->is_number_integer() && t->get<std::int64_t>() >= 0)
        p.search_trials_budget = t->get<std::uint32_t>();
    }
  }
  const double base_time = run.noise ? run.noise->mean_step_time_s : 0.0;
  for (const auto* t : run.latest_attempts()) {
    if (t->dispatched && !t->finished)
      ++p.attempts_in_flight;
    if (t->kind != tuning::purpose_kind::explore || !t->finished)
      continue;
    ++p.search_trials_done;
    if (t->usable() && base_time > 0) {
      double s = base_time / t->timed_step_time_s;
      if (!p.best_measured_speedup || s > *p.best_measured_speedup)
        p.best_measured_speedup = s;
    }
  }
  for (const auto& r : run.reverifications)
    if (r.promotable
        && (!p.best_verified_speedup || r.estimate.speedup > *p.best_verified_speedup)) {
      p.best_verified_speedup = r.estimate.speedup;
      p.best_verified_ci_low = r.estimate.ci_low;
      p.best_verified_ci_high = r.estimate.ci_high;
      p.best_verified_trial = r.candidate_trial;
    }
  if (run.promotion && run.promotion->is_object())
    p.promoted = run.promotion->value("promoted", false);
  if (run.search_stopped && run.search_stopped->is_object())
    p.search_stopped = run.search_stopped->value("reason", std::string{"stopped"});
  return p;
}

nlohmann::json to_json(const run_progress& p) {
  nlohmann::json j = {
    {"stage", p.stage},
    {"search_trials_done", p.search_trials_done},
    {"search_trials_budget",
     p.search_trials_budget ? nlohmann::json(*p.search_trials_budget) : nlohmann::json(nullptr)},
    {"attempts_in_flight", p.attempts_in_flight},
    {"best_measured_speedup",
     p.best_measured_speedup ? nlohmann::json(*p.best_measured_speedup) : nlohmann::json(nullptr)},
    {"best_verified_speedup",
     p.best_verified_speedup ? nlohmann::json(*p.best_verified_speedup) : nlohmann::json(nullptr)},
    {"best_verified_trial", p.best_verified_trial},
    {"search_stopped", p.search_stopped}};
  if (p.best_verified_speedup)
    j["best_verified_ci"] = {p.best_verified_ci_low, p.best_verified_ci_high};
  if (p.promoted)
    j["promoted"] = *p.promoted;
  return j;
}

} // namespace infrarsi::decide
