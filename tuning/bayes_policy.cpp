#include "tuning/bayes_policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "tuning/expr.hpp"
#include "tuning/memory_model.hpp"
#include "tuning/policy_parts.hpp"
#include "tuning/search_space.hpp"
#include "tuning/stats.hpp"

namespace infrarsi::tuning {

double expected_improvement(double best, double mean, double sd) {
  if (!(sd > 0))
    return std::max(best - mean, 0.0);
  double z = (best - mean) / sd;
  double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * 3.14159265358979323846);
  return (best - mean) * (1.0 - normal_survival(z)) + sd * pdf;
}

namespace {

/// One scored candidate.
struct scored {
  configuration config;
  std::vector<int> active; // one-hot features
  sparse_features x;       // model features
  double ei = 0;     // expected improvement of log step time
  double p_fit = 1;  // 1 - P(OOM)
  double mean = 0;   // predicted log(t / t_baseline)
  double sd = 0;
  std::string paired; // "" or the pairing explanation
  [[nodiscard]] double acquisition() const { return ei * p_fit; }
  /// Strict order of preference: acquisition, then EI, then P(fits) (so that candidates whose
  /// acquisition underflows to 0 are still told apart).
  [[nodiscard]] bool better_than(const scored& o) const {
    if (acquisition() != o.acquisition())
      return acquisition() > o.acquisition();
    if (ei != o.ei)
      return ei > o.ei;
    return p_fit > o.p_fit;
  }
};

} // namespace

std::vector<configuration> single_changes(const task_spec& task, const configuration& c) {
  std::vector<configuration> out;
  for (const auto& k : task.knobs)
    for (const auto& v : search_values(k)) {
      auto cur = c.knobs.find(k.name);
      if (cur != c.knobs.end() && cur->second == v)
        continue;
      auto m = c;
      m.knobs[k.name] = v;
      out.push_back(std::move(m));
    }
  for (const auto& p : task.patches) {
    auto m = c;
    auto it = std::lower_bound(m.patches.begin(), m.patches.end(), p.name);
    if (it != m.patches.end() && *it == p.name)
      m.patches.erase(it);
    else
      m.patches.insert(it, p.name);
    out.push_back(std::move(m));
  }
  return out;
}

run_memory_options memory_options_for(const std::string& policy_name) {
  run_memory_options o;
  o.tag_priors = o.tight_sigma = o.monotone = o.ep = o.analytic_prior =
    policy_name == "bayes_ei/2" || policy_name == "bayes_ei/3" || policy_name == "bayes_ei/4"
    || policy_name == "bayes_ei/5" || policy_name == "bayes_ei/6" || policy_name == "bayes_ei/7";
  o.interactions = policy_name == "bayes_ei/4";
  return o;
}

run_memory_options memory_options_for(const std::string& policy_name, std::size_t search_spent,
                                      std::size_t search_budget) {
  auto o = memory_options_for(policy_name);
  if ((policy_name == "bayes_ei/6" || policy_name == "bayes_ei/7")
      && search_spent >= bayes_ei_cost::options{}.late_after(search_budget)) {
    o.interactions = true;
    o.interaction_sd = 0.05;
    if (policy_name == "bayes_ei/7")
      o.interaction_ep = ep_options{1e-4, 1e-6, true};
  }
  return o;
}

Eigen::VectorXd run_memory_model::features(const sparse_features& point,
                                           std::size_t model_size) const {
  const auto M = static_cast<Eigen::Index>(model_size);
  Eigen::VectorXd x = Eigen::VectorXd::Zero(1 + M + static_cast<Eigen::Index>(pairs.size()));
  x[0] = 1.0;
  for (const auto& [i, v] : point)
    x[1 + i] = v;
  for (std::size_t k = 0; k < pairs.size(); ++k)
    x[1 + M + static_cast<Eigen::Index>(k)] = x[1 + pairs[k].first] * x[1 + pairs[k].second];
  return x;
}

double run_memory_model::p_oom(const task_spec& task, const feature_space& fs,
                               const configuration& c) const {
  for (const auto& o : ooms)
    if (at_least_as_hungry(task, c, o))
      return 1.0;
  return p_oom_point(fs.point(task, c), fs.model_size(), log_offset(c));
}

run_memory_model fit_run_memory(const task_spec& task, const feature_space& fs,
                                const std::vector<trial_record>& history,
                                const prior_set* given, double capacity_bytes,
                                run_memory_options options) {
  std::vector<sparse_features> point;
  point.reserve(history.size());
  for (const auto& t : history)
    point.push_back(fs.point(task, t.config));
  return fit_run_memory(task, fs, history, point, given, capacity_bytes, options);
}

namespace {

/// run_memory_options::interactions: the pairs of features of two different knobs that both
/// carry a memory tag get a coefficient each (prior N(0, interaction_sd^2)), and the posterior
/// of all coefficients is the sparse EP posterior (tuning::ep_posterior_sparse) at the residual
/// sd of `out.fit`, the main-effects MAP fit of the same trials `obs` (obs[k] is the trial
/// with features point[obs_trial[k]]). On failure `out` keeps the main-effects MAP fit and no
/// pairs.
void fit_interactions(const task_spec& task, const feature_space& fs,
                      const std::vector<memory_observation>& obs,
                      const std::vector<std::size_t>& obs_trial,
                      const std::vector<char>& obs_fits,
                      const std::vector<sparse_features>& point,
                      std::vector<coefficient_prior> priors, const run_memory_options& options,
                      run_memory_model& out) {
  const auto M = fs.model_size();
  auto tagged = [&](std::size_t i) {
    int k = fs.model_knob(i);
    if (k < 0)
      return false;
    const auto& knob = task.knobs[static_cast<std::size_t>(k)];
    return has_tag(knob, "memory-hungry") || has_tag(knob, "memory-saver");
  };
  out.pairs.clear();
  out.pair_index.assign(M * M, -1);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = i + 1; j < M; ++j)
      if (tagged(i) && tagged(j) && fs.model_knob(i) != fs.model_knob(j)) {
        out.pair_index[i * M + j] = static_cast<int>(out.pairs.size());
        out.pairs.emplace_back(static_cast<int>(i), static_cast<int>(j));
      }
  for (std::size_t k = 0; k < out.pairs.size(); ++k)
    priors.push_back({0.0, options.interaction_sd});
  std::vector<sparse_memory_observation> sparse;
  sparse.reserve(obs.size());
  for (std::size_t k = 0; k < obs.size(); ++k) {
    auto x = out.expand(point[obs_trial[k]], M);
    if (obs_fits[k] != 0) // a "fits" trial: the censored site of the negated features
      for (auto& e : x)
        e.second = -e.second;
    sparse.push_back({std::move(x), obs[k].bytes, obs[k].oom});
  }
  auto fit = ep_posterior_sparse(sparse, priors, out.fit.sigma, options.interaction_ep);
  if (!fit.converged) {
    out.pairs.clear();
    out.pair_index.clear();
    return;
  }
  fit.iterations = out.fit.iterations;
  fit.log_posterior = out.fit.log_posterior;
  out.fit = std::move(fit);
}

} // namespace

std::vector<std::pair<int, double>> run_memory_model::expand(const sparse_features& point,
                                                            std::size_t model_size) const {
  std::vector<std::pair<int, double>> x;
  x.reserve(1 + point.size() * (point.size() + 1) / 2);
  x.emplace_back(0, 1.0);
  for (const auto& [i, v] : point)
    x.emplace_back(1 + i, v);
  if (pairs.empty())
    return x;
  for (std::size_t a = 0; a < point.size(); ++a)
    for (std::size_t b = a + 1; b < point.size(); ++b) {
      auto i = static_cast<std::size_t>(std::min(point[a].first, point[b].first));
      auto j = static_cast<std::size_t>(std::max(point[a].first, point[b].first));
      int k = pair_index[i * model_size + j];
      if (k >= 0)
        x.emplace_back(static_cast<int>(1 + model_size) + k, point[a].second * point[b].second);
    }
  return x;
}

double run_memory_model::p_oom_point(const sparse_features& point, std::size_t model_size,
                                     double log_offset) const {
  if (!fitted)
    return 0.0;
  const double limit = std::log(capacity_bytes) - log_offset;
  // The additive model keeps its dense evaluation (the numbers bayes_ei/2 and /3 logged).
  if (pairs.empty())
    return fit.p_oom(features(point, model_size), limit);
  return fit.p_oom(expand(point, model_size), limit);
}

run_memory_model fit_run_memory(const task_spec& task, const feature_space& fs,
                                const std::vector<trial_record>& history,
                                const std::vector<sparse_features>& point, const prior_set* given,
                                double capacity_bytes, run_memory_options options,
                                const std::vector<double>* log_offset) {
  run_memory_model out;
  std::vector<double> prior_offsets;
  if (log_offset == nullptr && options.analytic_prior) {
    std::string why_not;
    out.layout = layout_prior::from_task(task, why_not);
    if (out.layout) {
      out.layout_base = out.layout->estimate(baseline_configuration(task).knobs);
      if (!out.layout_base.valid)
        out.layout.reset();
    }
    if (out.layout) {
      prior_offsets.reserve(history.size());
      for (const auto& t : history)
        prior_offsets.push_back(out.log_offset(t.config));
      log_offset = &prior_offsets;
    }
  }
  out.offset = log_offset != nullptr;
  auto offset_of = [&](std::size_t ti) { return log_offset != nullptr ? (*log_offset)[ti] : 0.0; };
  const auto F = fs.names.size();
  const auto M = fs.model_size();
  const auto base_config = baseline_configuration(task);
  // Without a declared capacity, a trial that ran out of memory still says its peak exceeded
  // every peak that fitted: censor at the largest measured peak (a lower bound of the unknown
  // capacity, so P(OOM) errs on the side of caution).
  double capacity = capacity_bytes;
  bool capacity_inferred = false;
  if (!(capacity > 0)) {
    bool any_oom = false;
    double max_peak = 0.0;
    for (const auto& t : history) {
      any_oom = any_oom || (t.finished && t.outcome == trial_outcome::oom);
      if (t.finished && t.outcome == trial_outcome::ok)
        max_peak = std::max(max_peak, static_cast<double>(t.peak_memory_bytes));
    }
    if (any_oom && max_peak > 0) {
      capacity = max_peak;
      capacity_inferred = true;
    }
  }
  if (capacity > 0) {
    std::vector<memory_observation> obs;
    std::vector<std::size_t> obs_trial; // obs[k] is history[obs_trial[k]]
    // A trial that ran without reporting its peak (unobserved memory) still says its peak was
    // below the capacity: a left-censored observation, P(x'b + e < c), which is the
    // right-censored one of the negated features and bound, P(-x'b - e > -c) (e is symmetric),
    // so the censored fit and its EP take it as an OOM site of (-x, -c).
    std::vector<char> obs_fits;
    for (std::size_t ti = 0; ti < history.size(); ++ti) {
      const auto& t = history[ti];
      if (!t.finished)
        continue;
      bool measured = t.outcome == trial_outcome::ok && t.peak_memory_bytes > 0;
      bool oom = t.outcome == trial_outcome::oom;
      bool fits = t.outcome == trial_outcome::ok && t.peak_memory_bytes == 0;
      if (!measured && !oom && !fits)
        continue;
      obs_trial.push_back(ti);
      obs_fits.push_back(fits ? 1 : 0);
      memory_observation o;
      o.x = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(M + 1));
      o.x[0] = 1.0;
      for (const auto& [i, v] : point[ti])
        o.x[1 + i] = v;
      o.oom = oom || fits;
      o.bytes = (oom || fits ? std::log(capacity)
                             : std::log(static_cast<double>(t.peak_memory_bytes)))
                - offset_of(ti);
      if (fits) {
        o.x = -o.x;
        o.bytes = -o.bytes;
      }
      obs.push_back(std::move(o));
    }
    // Priors (log units): intercept vague; a setting changes memory by a factor e^+-1 at 1 sd,
    // an ordinal slope by up to a factor 2 per doubling at 1 sd.
    // A value of a knob with an ordinal feature deviates from the knob's trend by 30 % at 1 sd.
    std::vector<coefficient_prior> priors(M + 1, coefficient_prior{0.0, 1.0});
    for (std::size_t i = F; i < M; ++i) // a factor 2 per doubling at 1 sd, over the range R
      priors[1 + i] = {0.0, std::log(2.0) * fs.ordinal_range[i - F]};
    for (std::size_t i = 0; i < F; ++i)
      if (std::find(fs.ordinal_knob.begin(), fs.ordinal_knob.end(), fs.knob_of[i])
          != fs.ordinal_knob.end())
        priors[1 + i] = {0.0, 0.3};
    if (options.tag_priors) {
      // The task contract: knobs without a memory tag are memory-neutral. Their values change
      // log memory by N(0, 0.1^2) (10 % at 1 sd); a patch by N(0, 0.3^2); a tagged boolean's
      // non-default value by N(+-0.1, 0.5^2) in the tag's direction; a tagged choice by
      // N(0, 0.7^2) (its direction is not declared); a value of a tagged numeric knob deviates
      // from the knob's trend by N(0, 0.2^2).
      auto tag_sign = [](const knob_spec& k) {
        return has_tag(k, "memory-hungry") ? 1.0 : has_tag(k, "memory-saver") ? -1.0 : 0.0;
      };
      for (std::size_t i = F; i < M; ++i) {
        const auto& k = task.knobs[static_cast<std::size_t>(fs.ordinal_knob[i - F])];
        double sign = tag_sign(k);
        double range = std::log(2.0) * fs.ordinal_range[i - F];
        // A tagged trend: memory changes by a factor 2^(+-0.5) per doubling, between none and a
        // factor 2 (all of it proportional to the knob) at 1.4 sd.
        priors[1 + i] = sign != 0.0 ? coefficient_prior{sign * 0.5 * range, 0.35 * range}
                                    : coefficient_prior{0.0, 0.1};
      }
      for (std::size_t i = 0; i < F; ++i) {
        if (fs.knob_of[i] < 0) {
          priors[1 + i] = {0.0, 0.3};
          continue;
        }
        const auto& k = task.knobs[static_cast<std::size_t>(fs.knob_of[i])];
        double sign = tag_sign(k);
        bool ordinal = std::find(fs.ordinal_knob.begin(), fs.ordinal_knob.end(), fs.knob_of[i])
                       != fs.ordinal_knob.end();
        if (sign == 0.0) {
          priors[1 + i] = {0.0, 0.1};
        } else if (k.type == knob_type::boolean) {
          // The one-hot feature is the non-default value: true when the default is false.
          double dir = numeric(k.default_value) > 0 ? -1.0 : 1.0;
          priors[1 + i] = {0.1 * sign * dir, 0.5};
        } else if (ordinal) {
          priors[1 + i] = {0.0, 0.2};
        } else {
          priors[1 + i] = {0.0, 0.7};
        }
      }
    }
    // The priors' memory_bytes, relative to the baseline's measured peak: log(1 + bytes/peak).
    std::vector<double> base_peaks;
    // (A configuration with a feature is not the baseline: the cheap test first.)
    for (std::size_t ti = 0; ti < history.size(); ++ti) {
      const auto& t = history[ti];
      if (t.finished && t.outcome == trial_outcome::ok && point[ti].empty() &&
          t.config == base_config && t.peak_memory_bytes > 0)
        base_peaks.push_back(static_cast<double>(t.peak_memory_bytes));
    }
    if (!base_peaks.empty() && given != nullptr) {
      double peak = median(base_peaks);
      for (std::size_t i = 0; i < F; ++i) {
        double bytes = 0.0;
        const auto& name = fs.names[i];
        if (fs.knob_of[i] < 0) {
          if (const auto* pp = given->find_patch(name.substr(1)))
            bytes = pp->memory_bytes;
        } else {
          const auto& k = task.knobs[static_cast<std::size_t>(fs.knob_of[i])];
          for (const auto& v : search_values(k))
            if (name == k.name + "=" + to_string(v))
              if (const auto* sp = given->find(k.name, v))
                bytes = sp->memory_bytes;
        }
        if (bytes != 0.0 && peak + bytes > 0)
          priors[1 + i].mean = std::log1p(bytes / peak);
      }
    }
    priors[0] = {std::log(capacity), 10.0};
    if (log_offset != nullptr) {
      // A revision of the analytic prior: the intercept is its calibration, a layout knob's
      // value a correction of what the prior says of it.
      // Its errors are smooth along a numeric layout knob: the knob's trend (ordinal feature)
      // may deviate by 0.2 log units per doubling at 1 sd, each value from the trend by 0.1.
      priors[0] = {0.0, 0.5};
      for (std::size_t i = 0; i < M; ++i) {
        int k = fs.model_knob(i);
        if (k < 0 || task.knobs[static_cast<std::size_t>(k)].role.empty())
          continue;
        priors[1 + i] = i >= F ? coefficient_prior{0.0, 0.2 * fs.ordinal_range[i - F]}
                               : coefficient_prior{0.0, 0.1};
      }
    }
    bool any_measured = false;
    bool any_oom = false;
    for (std::size_t k = 0; k < obs.size(); ++k) {
      any_measured = any_measured || !obs[k].oom;
      any_oom = any_oom || (obs[k].oom && obs_fits[k] == 0);
    }
    if (!any_measured && (log_offset != nullptr || any_oom)) {
      // No measured peak (a GPU job whose workload prints none): the prior, conditioned on the
      // OOMs by expectation propagation. Without the analytic prior the baseline's peak is
      // only known to be below the capacity: the intercept's prior is centred at 60 % of it
      // (log capacity - 0.5), within a factor 1.65 at 1 sd.
      if (log_offset == nullptr)
        priors[0] = {std::log(capacity) - 0.5, 0.5};
      memory_fit prior_fit;
      prior_fit.coef = Eigen::VectorXd(static_cast<Eigen::Index>(M + 1));
      prior_fit.coef_cov = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(M + 1),
                                                 static_cast<Eigen::Index>(M + 1));
      for (std::size_t i = 0; i <= M; ++i) {
        prior_fit.coef[static_cast<Eigen::Index>(i)] = priors[i].mean;
        prior_fit.coef_cov(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(i)) =
          priors[i].sd * priors[i].sd;
      }
      prior_fit.sigma = 0.05;
      prior_fit.converged = true;
      out.fit = obs.empty() ? prior_fit : ep_posterior(obs, priors, prior_fit);
      out.fitted = out.fit.coef.size() == static_cast<Eigen::Index>(M + 1)
                   && out.fit.coef.allFinite() && out.fit.coef_cov.allFinite()
                   && (out.fit.coef_cov.diagonal().array() >= 0).all();
      obs.clear();
    }
    if (!obs.empty()) {
      // Floor: 2 % of peak memory (log units), the run-to-run spread of allocators.
      out.fit = options.tight_sigma
                    ? fit_censored_memory(obs, priors, out.why, 0.02, sigma_prior{0.03, 0.3})
                    : fit_censored_memory(obs, priors, out.why, 0.02);
      if (options.interactions && out.why.empty())
        fit_interactions(task, fs, obs, obs_trial, obs_fits, point, priors, options, out);
      else if (options.ep && out.why.empty())
        out.fit = ep_posterior(obs, priors, out.fit);
      // A fit with a non-finite coefficient or covariance, or a negative variance (a Hessian
      // that was not negative definite) is not used: P(fits) is then n/a, never NaN.
      out.fitted = out.why.empty()
                 && out.fit.coef.size() == static_cast<Eigen::Index>(M + 1 + out.pairs.size())
                 && out.fit.coef.allFinite() && out.fit.coef_cov.allFinite()
                 && (out.fit.coef_cov.diagonal().array() >= 0).all() && std::isfinite(out.fit.sigma);
    }
  }
  out.capacity_bytes = capacity;
  out.capacity_inferred = capacity_inferred;
  if (options.monotone)
    for (const auto& t : history)
      if (t.finished && t.outcome == trial_outcome::oom)
        out.ooms.push_back(t.config);
  if (!(capacity > 0))
    out.why = "no memory capacity: the task gives neither limits.device_memory_bytes nor "
              "limits.memory_cap_bytes, and no trial ran out of memory";
  else if (!out.fitted && out.why.empty())
    out.why = "no trial measured its peak memory";
  return out;
}

proposal_batch bayes_ei::plan(const planner_input& in, std::size_t n) const {
  proposal_batch out;
  if (n == 0)
    return out;
  // Settings-only baseline: the same policy on the task without its patches.
  task_spec stripped;
  const task_spec* task_ptr = in.task;
  if (!options_.use_patches) {
    stripped = *in.task;
    stripped.patches.clear();
    task_ptr = &stripped;
  }
  const task_spec& task = *task_ptr;
  feature_space fs{task, in.priors};
  history_facts facts{task, fs, in.history};
  constraint_set constraints{task};
  const auto F = fs.names.size();

  // Contract-risky features: patches (code can do less work or change the numerics) and values
  // of knobs tagged "numerics"; launch settings otherwise preserve the work by construction.
  std::vector<bool> risky(F, false);
  for (std::size_t i = 0; i < F; ++i)
    risky[i] = fs.knob_of[i] < 0
               || has_tag(task.knobs[static_cast<std::size_t>(fs.knob_of[i])], "numerics");
  // A contract violation, a crash, a timeout or a launch error is blamed on its only untested
  // risky feature (untested launch settings with it are not suspects); a crash, timeout or
  // launch error with no untested risky feature, on its only untested feature of any kind.
  // (history_facts blames a violation's only untested feature of any kind.)
  std::vector<bool> blamed(F, false);
  for (const auto& t : in.history) {
    bool violation = t.outcome == trial_outcome::contract_violation
                     || (t.verified && !t.violations.empty());
    bool failed = t.finished
                  && (t.outcome == trial_outcome::crash || t.outcome == trial_outcome::timeout
                      || t.outcome == trial_outcome::launch_error);
    if (!violation && !failed)
      continue;
    std::vector<int> suspects;
    std::vector<int> untested_any;
    for (int i : fs.active(task, t.config)) {
      if (facts.passed[static_cast<std::size_t>(i)] != 0)
        continue;
      untested_any.push_back(i);
      if (risky[static_cast<std::size_t>(i)])
        suspects.push_back(i);
    }
    if (suspects.empty() && failed)
      suspects = untested_any;
    if (suspects.size() == 1)
      blamed[static_cast<std::size_t>(suspects.front())] = true;
  }
  auto usable_config = [&](const configuration& c) {
    if (!options_.use_patches && !c.patches.empty())
      return false;
    if (!admissible(in, facts, c))
      return false;
    auto a = fs.active(task, c);
    for (int i : a)
      if (blamed[static_cast<std::size_t>(i)] && facts.passed[static_cast<std::size_t>(i)] == 0)
        return false;
    return !facts.banned(a) && !facts.dominated_by_oom(task, c);
  };

  // Candidates: the enumeration (a seeded sample of a large space) plus every single change
  // of the baseline and of each usable measured configuration, so that the neighbourhood of
  // what is known is always complete.
  auto raw = enumerate_candidates(task, in.seed);
  {
    std::set<std::string> keys;
    for (const auto& c : raw)
      keys.insert(c.key());
    std::vector<configuration> centres{baseline_configuration(task)};
    for (const auto& t : in.history)
      if (t.usable() && (options_.use_patches || t.config.patches.empty()))
        centres.push_back(t.config);
    for (const auto& centre : centres)
      for (auto& m : single_changes(task, centre))
        if (constraints.ok(m) && keys.insert(m.key()).second)
          raw.push_back(std::move(m));
  }
  auto untested_risky = [&](const configuration& c) {
    std::size_t n_untested = 0;
    for (int i : fs.active(task, c))
      n_untested += risky[static_cast<std::size_t>(i)] && facts.passed[static_cast<std::size_t>(i)] == 0;
    return n_untested;
  };
  std::vector<configuration> open;
  std::vector<configuration> bold; // more than one untested risky feature
  for (auto& c : raw) {
    if (!usable_config(c))
      continue;
    (untested_risky(c) <= 1 ? open : bold).push_back(std::move(c));
  }
  bool strict = !open.empty(); // "one new thing at a time" is in force
  if (open.empty())
    open = std::move(bold);
  if (open.empty()) {
    out.stop_reason = "the search space is exhausted";
    return out;
  }
  auto base_config = baseline_configuration(task);
  std::size_t explored = 0;
  for (const auto& t : in.history)
    if (t.purpose == "explore")
      ++explored;
  std::set<std::string> chosen;
  auto prior_gain = [&](const configuration& c) {
    return -fs.encode(task, c).dot(fs.prior_mean); // log speedup the priors predict
  };

  // -- initial design -----------------------------------------------------------------------
  while (explored + out.proposals.size() < in.initial_design && out.proposals.size() < n) {
    const configuration* pick = nullptr;
    std::string reason;
    for (const auto& s : in.experience_seeds) {
      auto it = std::find(open.begin(), open.end(), s);
      if (it != open.end() && chosen.count(s.key()) == 0) {
        pick = &*it;
        reason = "initial design: experience bank seed";
        break;
      }
    }
    if (pick == nullptr) {
      // Space-filling: the prior's predicted log gain + 0.05 x the Hamming distance (capped at
      // half the features) to every configuration tried or chosen; ties go to a seeded random
      // order of the candidates, so the design is a diverse random sample where the priors
      // are silent (each trial then informs many effects at once, unlike one-at-a-time).
      std::vector<const configuration*> others;
      for (const auto& t : in.history)
        others.push_back(&t.config);
      for (const auto& p : out.proposals)
        others.push_back(&p.config);
      const std::size_t cap = std::max<std::size_t>(1, F / 2);
      double best_score = -1e300;
      std::uint64_t best_tie = 0;
      splitmix64 order{in.seed ^ 0x1D5EEDull};
      for (const auto& c : open) {
        std::uint64_t tie = order.next();
        if (chosen.count(c.key()) != 0)
          continue;
        std::size_t min_dist = cap;
        for (const auto* o : others)
          min_dist = std::min(min_dist, hamming(c, *o));
        double score = prior_gain(c) + 0.05 * static_cast<double>(min_dist);
        if (score > best_score || (score == best_score && tie < best_tie)) {
          best_score = score;
          best_tie = tie;
          pick = &c;
        }
      }
      reason = "initial design: prior and diversity";
    }
    if (pick == nullptr)
      break;
    chosen.insert(pick->key());
    proposal p{*pick, std::exp(prior_gain(*pick)), reason, {}, {}};
    p.prior_speedup = p.predicted_speedup;
    out.proposals.push_back(std::move(p));
  }
  if (out.proposals.size() >= n)
    return out;

  // -- models -------------------------------------------------------------------------------
  std::vector<double> baseline_times;
  for (const auto& t : in.history)
    if (t.usable() && t.config == base_config)
      baseline_times.push_back(t.timed_step_time_s);
  std::vector<std::pair<sparse_features, double>> data;
  for (const auto& t : in.history)
    if (t.usable() && (options_.use_patches || t.config.patches.empty()))
      data.emplace_back(fs.point(task, t.config), std::log(t.timed_step_time_s));
  double baseline_log = !baseline_times.empty() ? std::log(median(baseline_times))
                        : data.empty()          ? 0.0
                                                : data.front().second;
  for (auto& d : data)
    d.second -= baseline_log;
  time_model model{fs, options_.time};
  model.fit(data, in.noise_log_sd);

  // Censored memory model on log bytes: features [1, one-hot and ordinal features].
  const auto M = fs.model_size();
  auto memory = fit_run_memory(task, fs, in.history, in.priors, in.memory_capacity_bytes);
  const memory_fit& mem = memory.fit;
  const bool have_mem = memory.fitted;
  const double capacity = memory.capacity_bytes;
  const bool capacity_inferred = memory.capacity_inferred;
  auto log_memory = [&](const sparse_features& x) {
    double m = mem.coef[0];
    for (const auto& [i, v] : x)
      m += v * mem.coef[1 + i];
    return m;
  };
  auto p_oom = [&](const sparse_features& sx) {
    if (!have_mem)
      return 0.0;
    Eigen::VectorXd x = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(M + 1));
    x[0] = 1.0;
    for (const auto& [i, v] : sx)
      x[1 + i] = v;
    return mem.p_oom(x, std::log(capacity));
  };

  // Incumbent: the best posterior mean among measured configurations.
  double best = 0.0;
  {
    bool any = false;
    for (const auto& [x, y] : data) {
      double m = model.predict(x).mean;
      if (!any || m < best)
        best = m;
      any = true;
    }
  }

  auto score = [&](const configuration& c) {
    scored s;
    s.config = c;
    s.active = fs.active(task, c);
    s.x = fs.point(task, c);
    auto pr = model.predict(s.x);
    s.mean = pr.mean;
    s.sd = pr.sd;
    s.ei = expected_improvement(best, pr.mean, pr.sd);
    s.p_fit = 1.0 - p_oom(s.x);
    if (!std::isfinite(s.ei))
      s.ei = 0.0;
    if (!std::isfinite(s.p_fit))
      s.p_fit = 0.5;
    return s;
  };

  // -- candidate pool: the enumeration, refined by coordinate ascent ---------------------------
  std::vector<scored> pool;
  std::map<std::string, std::size_t> in_pool; // key -> index in pool
  for (const auto& c : open)
    if (chosen.count(c.key()) == 0) {
      in_pool[c.key()] = pool.size();
      pool.push_back(score(c));
    }
  auto acceptable = [&](const configuration& c) {
    if (chosen.count(c.key()) != 0 || !constraints.ok(c) || !usable_config(c))
      return false;
    return !strict || untested_risky(c) <= 1;
  };
  auto neighbours = [&](const configuration& c) { return single_changes(task, c); };
  {
    std::vector<std::size_t> order(pool.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return pool[a].better_than(pool[b]); });
    std::vector<configuration> starts;
    for (std::size_t i = 0; i < order.size() && starts.size() < 8; ++i)
      starts.push_back(pool[order[i]].config);
    // The fastest measured configuration.
    const trial_record* fastest = nullptr;
    for (const auto& t : in.history)
      if (t.usable() && (options_.use_patches || t.config.patches.empty())
          && (fastest == nullptr || t.timed_step_time_s < fastest->timed_step_time_s))
        fastest = &t;
    if (fastest != nullptr)
      starts.push_back(fastest->config);
    for (const auto& start : starts) {
      auto current = score(start);
      for (int step = 0; step < 12; ++step) {
        std::optional<scored> better;
        for (const auto& m : neighbours(current.config)) {
          // A neighbour already in the pool is a step like any other; a new one joins it.
          auto it = in_pool.find(m.key());
          if (it == in_pool.end()) {
            if (!acceptable(m))
              continue;
            it = in_pool.emplace(m.key(), pool.size()).first;
            pool.push_back(score(m));
          }
          const auto& s = pool[it->second];
          if (s.better_than(better ? *better : current))
            better = s;
        }
        if (!better)
          break;
        current = *better;
      }
    }
  }

  // -- pairing --------------------------------------------------------------------------------
  // The configurations with the best EI that are predicted to run out of memory (up to 16),
  // each with every single memory-saving change (a knob tagged memory-saver, or a patch) that
  // lowers its fitted memory enough to be predicted to fit.
  if (have_mem && !pool.empty()) {
    std::vector<std::size_t> by_ei(pool.size());
    for (std::size_t i = 0; i < by_ei.size(); ++i)
      by_ei[i] = i;
    std::stable_sort(by_ei.begin(), by_ei.end(),
                     [&](std::size_t a, std::size_t b) { return pool[a].ei > pool[b].ei; });
    std::vector<scored> hungry_list;
    for (std::size_t i : by_ei) {
      if (hungry_list.size() >= 16)
        break;
      if (pool[i].p_fit < 0.5)
        hungry_list.push_back(pool[i]);
    }
    std::map<std::string, std::size_t> where;
    for (std::size_t i = 0; i < pool.size(); ++i)
      where[pool[i].config.key()] = i; // the pool grows below; `where` follows it
    for (const auto& hungry : hungry_list) {
      for (const auto& m : neighbours(hungry.config)) {
        bool saver_change = m.patches != hungry.config.patches;
        for (const auto& k : task.knobs)
          if (has_tag(k, "memory-saver") && m.knobs.at(k.name) != hungry.config.knobs.at(k.name))
            saver_change = true;
        if (!saver_change)
          continue;
        double delta = log_memory(fs.point(task, m)) - log_memory(hungry.x);
        if (!(delta < 0) || !acceptable(m))
          continue;
        auto s = score(m);
        if (s.p_fit < 0.5)
          continue; // the saver does not make it fit
        auto text = "paired " + hungry.config.diff_from(base_config) + " (P(OOM) "
                    + fmt("%.2f", 1.0 - hungry.p_fit) + " alone) with " + m.diff_from(hungry.config)
                    + " (fitted memory x" + fmt("%.2f", std::exp(delta)) + ", P(OOM) "
                    + fmt("%.2f", 1.0 - s.p_fit) + ")";
        auto it = where.find(m.key());
        if (it == where.end()) {
          s.paired = std::move(text);
          where[m.key()] = pool.size();
          pool.push_back(std::move(s));
        } else if (pool[it->second].paired.empty()) {
          pool[it->second].paired = std::move(text);
        }
      }
    }
  }

  // -- trials in flight -------------------------------------------------------------------------
  // With several node slots, search trials proposed earlier may still run: believed at their
  // predicted mean (kriging believer, as the batch's own picks below), so the next picks spread
  // around them instead of piling onto the same region before any of them has reported.
  bool believed = false;
  for (const auto& t : in.history)
    if (!t.finished && t.purpose == "explore") {
      auto x = fs.point(task, t.config);
      auto pr = model.predict(x);
      model.condition(x, pr.mean);
      best = std::min(best, pr.mean);
      believed = true;
    }
  if (believed)
    for (auto& s : pool) {
      auto pr = model.predict(s.x);
      s.mean = pr.mean;
      s.sd = pr.sd;
      s.ei = expected_improvement(best, pr.mean, pr.sd);
    }

  // -- batch ------------------------------------------------------------------------------------
  // The stopping rule needs evidence on every setting: until each one has run in some trial,
  // its EI rests on the prior alone (which says "no effect" when the priors are silent).
  // "Run" means measured in a usable trial (a crash, OOM or violation measures nothing), or
  // excluded for good (blamed for a failure).
  bool all_tried = true;
  for (std::size_t i = 0; i < F; ++i)
    if (facts.passed[i] == 0 && !facts.broke[i] && !blamed[i])
      all_tried = false;
  const double stop_below =
      options_.stop_rule && in.min_detectable_speedup > 1.0 ? std::log(in.min_detectable_speedup)
                                                            : -1.0;
  while (out.proposals.size() < n && !pool.empty()) {
    std::size_t bi = 0;
    for (std::size_t i = 1; i < pool.size(); ++i)
      if (pool[i].better_than(pool[bi]))
        bi = i;
    const auto& b = pool[bi];
    if (out.proposals.empty() && b.acquisition() < stop_below && all_tried) {
      out.stop_reason = "best expected improvement x P(fits) " + fmt("%.4f", b.acquisition())
                        + " (log units) is below log(min detectable speedup " +
                        fmt("%.4f", in.min_detectable_speedup) + ") = " + fmt("%.4f", stop_below)
                        + ", and every setting and patch has been tried";
      break;
    }
    proposal p;
    p.config = b.config;
    p.predicted_speedup = std::exp(-b.mean);
    p.prior_speedup = std::exp(-model.prior_mean(b.x));
    if (have_mem)
      p.p_oom = 1.0 - b.p_fit;
    std::string fits = !have_mem ? "P(fits) n/a (no memory model yet)"
                                 : "P(fits) " + fmt("%.2f", b.p_fit)
                                     + (capacity_inferred ? " (capacity unknown: the largest peak that fitted)" : "");
    p.reason = "EI " + fmt("%.4f", b.ei) + " x " + fits + ": predicted "
               + fmt("%.3f", std::exp(-b.mean)) + "x (log sd " + fmt("%.3f", b.sd) + ")"
               + (b.paired.empty() ? "" : "; " + b.paired);
    chosen.insert(b.config.key());
    auto fantasy = b.x;
    double fantasy_mean = b.mean;
    out.proposals.push_back(std::move(p));
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(bi));
    if (out.proposals.size() >= n)
      break;
    // Kriging believer: condition on the pick at its predicted mean, rescore.
    model.condition(fantasy, fantasy_mean);
    best = std::min(best, fantasy_mean);
    for (auto& s : pool) {
      auto pr = model.predict(s.x);
      s.mean = pr.mean;
      s.sd = pr.sd;
      s.ei = expected_improvement(best, pr.mean, pr.sd);
    }
  }
  if (out.proposals.empty() && out.stop_reason.empty())
    out.stop_reason = "the search space is exhausted";
  return out;
}

} // namespace infrarsi::tuning
