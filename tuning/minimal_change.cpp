#include "tuning/minimal_change.hpp"

#include <algorithm>
#include <cmath>

#include "tuning/planner.hpp"
#include "tuning/search_space.hpp"
#include "tuning/stats.hpp"
#include "tuning/time_model.hpp"

namespace infrarsi::tuning {

configuration undo_change(const configuration& c, const configuration& baseline,
                          const bundle_change& change) {
  configuration out = c;
  if (!change.knob.empty()) {
    auto it = baseline.knobs.find(change.knob);
    if (it != baseline.knobs.end())
      out.knobs[change.knob] = it->second;
    else
      out.knobs.erase(change.knob);
  }
  if (!change.patch.empty())
    out.patches.erase(std::remove(out.patches.begin(), out.patches.end(), change.patch),
                      out.patches.end());
  return out;
}

std::vector<bundle_change> credit_changes(const task_spec& task, const prior_set& priors,
                                          const std::vector<trial_record>& history,
                                          double noise_log_sd, const configuration& baseline,
                                          const configuration& bundle) {
  std::vector<bundle_change> changes;
  for (const auto& [knob, value] : bundle.knobs) {
    auto it = baseline.knobs.find(knob);
    if (it != baseline.knobs.end() && it->second == value)
      continue;
    bundle_change ch;
    ch.knob = knob;
    ch.name = knob + " " +
              (it != baseline.knobs.end() ? to_string(it->second) : std::string{"unset"}) + "->" +
              to_string(value);
    changes.push_back(std::move(ch));
  }
  for (const auto& p : bundle.patches)
    if (std::find(baseline.patches.begin(), baseline.patches.end(), p) == baseline.patches.end()) {
      bundle_change ch;
      ch.patch = p;
      ch.name = "+" + p;
      changes.push_back(std::move(ch));
    }

  feature_space fs{task, &priors};
  time_model model{fs};
  std::vector<double> base_times;
  for (const auto& t : history)
    if (t.usable() && t.config == baseline)
      base_times.push_back(t.timed_step_time_s);
  if (!base_times.empty()) {
    const double base_log = std::log(median(base_times));
    std::vector<std::pair<sparse_features, double>> data;
    for (const auto& t : history)
      if (t.usable())
        data.emplace_back(fs.point(task, t.config), std::log(t.timed_step_time_s) - base_log);
    model.fit(data, noise_log_sd);
  }
  const double with = model.predict(fs.point(task, bundle)).mean;
  for (auto& ch : changes)
    ch.credit_log = model.predict(fs.point(task, undo_change(bundle, baseline, ch))).mean - with;
  std::stable_sort(changes.begin(), changes.end(),
                   [](const bundle_change& a, const bundle_change& b) {
                     if (a.credit_log != b.credit_log)
                       return a.credit_log < b.credit_log;
                     return a.name < b.name;
                   });
  return changes;
}

} // namespace infrarsi::tuning
