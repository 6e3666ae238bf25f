#include "decide/resources.hpp"

#include <set>
#include <string>

#include "decide/decisions.hpp"

namespace infrarsi::decide {

using tuning::purpose_kind;
using tuning::trial_outcome;

double charged_device_seconds(const tuning::task_spec& task, const tuning::trial_record& t) {
  if (!t.finished)
    return 0.0;
  if (t.outcome != trial_outcome::lost)
    return t.device_seconds;
  auto knobs = task.default_assignment();
  for (const auto& [name, value] : t.config.knobs)
    knobs[name] = value;
  std::string why;
  auto ws =
      tuning::world_size_of(task, knobs,
                            {{"trial_id", std::to_string(t.trial_id)},
                             {"attempt", std::to_string(t.attempt)},
                             {"trial_dir", "."},
                             {"memory_cap_bytes", std::to_string(task.limits.memory_cap_bytes)}},
                            why);
  return t.wall_time_s * ws.value_or(1);
}

device_spend device_seconds_spent(const tuning::task_spec& task, const store::run_state& run) {
  device_spend d;
  for (const auto& t : run.trials) {
    double s = charged_device_seconds(task, t);
    d.total_s += s;
    if (t.finished && t.outcome == trial_outcome::lost) {
      ++d.lost_attempts;
      d.lost_s += s;
    }
  }
  return d;
}

std::vector<attempt_id> removable_trial_copies(const tuning::task_spec& task,
                                               const store::run_state& run,
                                               std::uint32_t keep_last) {
  // Settled: ended, and nothing more will be asked of it (its verdict is logged, or it was lost).
  auto settled = [](const tuning::trial_record& t) {
    return t.finished && (t.verified || t.outcome == trial_outcome::lost);
  };
  std::set<std::uint64_t> kept_trials;
  for (const auto& t : run.trials)
    if (t.kind == purpose_kind::baseline) {
      kept_trials.insert(t.trial_id); // the first baseline trial
      break;
    }
  for (const auto& [id, config] : reverify_candidates(task, run))
    kept_trials.insert(id);
  for (const auto& r : run.reverifications)
    kept_trials.insert(r.candidate_trial);
  for (const auto& t : run.trials) // ablations: re-verified, or about to be
    if (t.kind == purpose_kind::ablation)
      kept_trials.insert(t.trial_id);
  if (run.promotion && run.promotion->is_object() && run.promotion->contains("candidate_trial") &&
      (*run.promotion)["candidate_trial"].is_number_unsigned())
    kept_trials.insert((*run.promotion)["candidate_trial"].get<std::uint64_t>());
  std::set<attempt_id> kept;
  for (const auto* t : run.latest_attempts())
    if (kept_trials.count(t->trial_id) != 0)
      kept.insert({t->trial_id, t->attempt});
  std::uint32_t recent = 0;
  for (auto it = run.trials.rbegin(); it != run.trials.rend() && recent < keep_last; ++it)
    if (it->finished) {
      kept.insert({it->trial_id, it->attempt});
      ++recent;
    }
  std::vector<attempt_id> out;
  for (const auto& t : run.trials)
    if (settled(t) && kept.count({t.trial_id, t.attempt}) == 0)
      out.emplace_back(t.trial_id, t.attempt);
  return out;
}

} // namespace infrarsi::decide
