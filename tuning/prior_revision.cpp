#include "tuning/prior_revision.hpp"

#include <cmath>
#include <limits>

#include "tuning/layout_prior.hpp"
#include "tuning/planner.hpp"
#include "tuning/stats.hpp"

namespace infrarsi::tuning {

prior_revision revise_priors(const task_spec& task, const prior_set& priors,
                             const std::vector<trial_record>& history, double noise_log_sd,
                             time_model_options options) {
  prior_revision out;
  feature_space fs{task, &priors};
  auto base = baseline_configuration(task);
  std::vector<double> baseline_times;
  for (const auto& t : history)
    if (t.usable() && t.config == base)
      baseline_times.push_back(t.timed_step_time_s);
  if (baseline_times.empty()) {
    out.spearman_prior = out.spearman_posterior = std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  const double base_log = std::log(median(baseline_times));
  // The analytic layout prior (when the task has one): the time model's prior mean, as in the
  // policy (tuning/bayes_policy.hpp); predictions are its offset + the model's revision.
  std::string why_not;
  auto layout = layout_prior::from_task(task, why_not);
  layout_estimate layout_base;
  if (layout)
    layout_base = layout->estimate(base.knobs);
  auto offset = [&](const configuration& c) {
    return layout ? layout_offsets(*layout, layout_base, c.knobs).first : 0.0;
  };

  std::vector<std::pair<sparse_features, double>> data;
  std::vector<double> measured, prior_pred, posterior_pred;
  std::vector<std::size_t> count(fs.names.size(), 0);
  std::vector<std::vector<std::size_t>> seen_in(fs.names.size()); // usable trial indices
  for (const auto& t : history) {
    if (!t.usable())
      continue;
    auto active = fs.active(task, t.config);
    auto x = fs.point(task, t.config);
    const double off = offset(t.config);
    double y = std::log(t.timed_step_time_s) - base_log;
    if (t.purpose == "explore") {
      time_model before{fs, options};
      before.fit(data, noise_log_sd);
      measured.push_back(std::exp(-y));
      prior_pred.push_back(std::exp(-before.prior_mean(x) - off));
      posterior_pred.push_back(std::exp(-before.predict(x).mean - off));
      out.points.push_back(
        {t.trial_id, t.attempt, measured.back(), prior_pred.back(), posterior_pred.back()});
    }
    for (int i : active) {
      count[static_cast<std::size_t>(i)] += 1;
      seen_in[static_cast<std::size_t>(i)].push_back(data.size());
    }
    data.emplace_back(std::move(x), y - off);
  }
  out.trials = measured.size();
  out.spearman_prior = spearman(prior_pred, measured);
  out.spearman_posterior = spearman(posterior_pred, measured);
  time_model after{fs, options};
  after.fit(data, noise_log_sd);
  // Each setting alone: the baseline with only that change, as the fitted model predicts it
  // (its main effect plus the ordinal trend of its knob; no interaction is involved).
  auto intercept = after.predict({}).mean;
  for (const auto& c : single_changes(task, base)) {
    auto active = fs.active(task, c);
    if (active.size() != 1)
      continue;
    auto i = static_cast<std::size_t>(active.front());
    auto pr = after.predict(fs.point(task, c));
    revised_effect e;
    e.feature = fs.names[i];
    const double off = offset(c);
    e.has_prior = fs.has_prior[i] || off != 0.0;
    e.prior_speedup = std::exp(-fs.prior_mean[static_cast<Eigen::Index>(i)] - off);
    e.posterior_speedup = std::exp(-(pr.mean + off - intercept));
    e.posterior_log_sd = pr.sd;
    e.prior_log_sd = options.main_sd;
    e.trials = count[i];
    if (!seen_in[i].empty())
      for (std::size_t j = 0; j < fs.names.size(); ++j)
        if (j != i && seen_in[j] == seen_in[i])
          e.confounded_with.push_back(fs.names[j]);
    out.priors_given = out.priors_given || e.has_prior;
    out.effects.push_back(std::move(e));
  }
  return out;
}

} // namespace infrarsi::tuning
