#include "tuning/planner.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <Eigen/Dense>

#include "tuning/baselines.hpp"
#include "tuning/bayes_policy.hpp"
#include "tuning/expr.hpp"
#include "tuning/search_space.hpp"
#include "tuning/stats.hpp"

namespace infrarsi::tuning {

namespace {

/// Posterior of the additive log-time model.
struct time_model {
  Eigen::VectorXd mean;
  Eigen::MatrixXd covariance;
};

time_model fit(const feature_space& fs, const task_spec& task,
               const std::vector<std::pair<configuration, double>>& data, double baseline_log,
               double noise_log_sd) {
  const double prior_var = 0.3 * 0.3;
  const double noise_var = std::max(noise_log_sd, 0.01) * std::max(noise_log_sd, 0.01);
  auto d = static_cast<Eigen::Index>(fs.names.size());
  Eigen::MatrixXd precision = Eigen::MatrixXd::Identity(d, d) / prior_var;
  Eigen::VectorXd rhs = fs.prior_mean / prior_var;
  for (const auto& [config, log_time] : data) {
    auto x = fs.encode(task, config);
    precision += x * x.transpose() / noise_var;
    rhs += x * (log_time - baseline_log) / noise_var;
  }
  time_model m;
  Eigen::LDLT<Eigen::MatrixXd> ldlt(precision);
  m.mean = ldlt.solve(rhs);
  m.covariance = ldlt.solve(Eigen::MatrixXd::Identity(d, d));
  return m;
}

} // namespace

configuration baseline_configuration(const task_spec& task) {
  configuration c;
  c.knobs = task.default_assignment();
  return c;
}

std::string constraint_violation(const task_spec& task, const configuration& config) {
  std::vector<constraint_expr> exprs;
  for (const auto& text : task.constraints) {
    std::string why;
    auto e = constraint_expr::parse(text, why);
    if (!e)
      return "constraint '" + text + "' does not parse: " + why;
    exprs.push_back(std::move(*e));
  }
  auto vars = task.constants;
  for (const auto& [k, v] : config.knobs)
    vars[k] = v;
  return first_violation(exprs, vars);
}

std::vector<configuration> enumerate_candidates(const task_spec& task, std::uint64_t seed,
                                                std::size_t limit) {
  std::vector<std::vector<knob_value>> domains;
  double total = 1;
  for (const auto& k : task.knobs) {
    domains.push_back(search_values(k));
    total *= static_cast<double>(domains.back().size());
  }
  auto patch_count = task.patches.size();
  total *= std::pow(2.0, static_cast<double>(patch_count));
  std::vector<std::string> patch_names;
  for (const auto& p : task.patches)
    patch_names.push_back(p.name);
  std::sort(patch_names.begin(), patch_names.end());

  std::vector<std::string> exprs_text = task.constraints;
  std::vector<constraint_expr> exprs;
  for (const auto& t : exprs_text) {
    std::string why;
    if (auto e = constraint_expr::parse(t, why))
      exprs.push_back(std::move(*e));
  }
  auto make = [&](const std::vector<std::size_t>& idx, std::uint64_t patch_mask) {
    configuration c;
    for (std::size_t i = 0; i < task.knobs.size(); ++i)
      c.knobs[task.knobs[i].name] = domains[i][idx[i]];
    for (std::size_t p = 0; p < patch_count; ++p)
      if ((patch_mask >> p) & 1u)
        c.patches.push_back(patch_names[p]);
    return c;
  };
  auto valid = [&](const configuration& c) {
    auto vars = task.constants;
    for (const auto& [k, v] : c.knobs)
      vars[k] = v;
    return first_violation(exprs, vars).empty();
  };

  std::vector<configuration> out;
  if (total <= static_cast<double>(limit)) {
    std::vector<std::size_t> idx(task.knobs.size(), 0);
    for (;;) {
      for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << patch_count); ++mask) {
        auto c = make(idx, mask);
        if (valid(c))
          out.push_back(std::move(c));
      }
      std::size_t i = 0;
      for (; i < idx.size(); ++i) {
        if (++idx[i] < domains[i].size())
          break;
        idx[i] = 0;
      }
      if (i == idx.size())
        break;
    }
    return out;
  }
  splitmix64 rng{seed ^ 0xC0FFEEull};
  std::set<std::string> seen;
  for (std::size_t attempt = 0; attempt < limit * 4 && out.size() < limit; ++attempt) {
    std::vector<std::size_t> idx(task.knobs.size());
    for (std::size_t i = 0; i < idx.size(); ++i)
      idx[i] = rng.below(domains[i].size());
    std::uint64_t mask = patch_count == 0 ? 0 : rng.below(std::uint64_t{1} << patch_count);
    auto c = make(idx, mask);
    if (valid(c) && seen.insert(c.key()).second)
      out.push_back(std::move(c));
  }
  return out;
}

std::vector<proposal> seeded_local_search::propose(const planner_input& in, std::size_t n) const {
  const auto& task = *in.task;
  std::vector<proposal> out;
  if (n == 0)
    return out;
  auto candidates = enumerate_candidates(task, in.seed);
  feature_space fs{task, in.priors};
  history_facts facts{task, fs, in.history};
  auto untested = [&](const configuration& c) { return facts.untested(fs.active(task, c)); };
  auto allowed = [&](const configuration& c) {
    return admissible(in, facts, c) && !facts.banned(fs.active(task, c))
           && !facts.dominated_by_oom(task, c);
  };
  std::vector<configuration> open;
  std::vector<configuration> bold; // allowed, but with more than one untested setting
  for (auto& c : candidates)
    if (allowed(c))
      (untested(c) <= 1 ? open : bold).push_back(std::move(c));
  if (open.empty())
    open = std::move(bold); // nothing left that is one step from the known: allow more
  if (open.empty())
    return out;

  auto prior_gain = [&](const configuration& c) { return -fs.encode(task, c).dot(fs.prior_mean); };
  std::set<std::string> chosen_keys;
  auto take = [&](const configuration& c, double predicted, std::string reason) {
    chosen_keys.insert(c.key());
    out.push_back({c, std::exp(predicted), std::move(reason), {}, {}});
  };

  std::size_t explored = 0;
  for (const auto& t : in.history)
    if (t.purpose == "explore")
      ++explored;

  // Initial design: experience seeds, then prior-ranked and diverse.
  while (explored + out.size() < in.initial_design && out.size() < n) {
    bool took = false;
    for (const auto& s : in.experience_seeds) {
      auto it = std::find(open.begin(), open.end(), s);
      if (it != open.end() && chosen_keys.count(s.key()) == 0) {
        take(s, prior_gain(s), "experience bank seed");
        took = true;
        break;
      }
    }
    if (took)
      continue;
    const configuration* best = nullptr;
    double best_score = -1e300;
    auto base_config = baseline_configuration(task);
    for (const auto& c : open) {
      if (chosen_keys.count(c.key()) != 0)
        continue;
      // Sparse designs: at most three changes from the baseline, so an OOM or a contract
      // violation can be attributed and the model learns per-setting effects.
      if (hamming(c, base_config) > 3)
        continue;
      std::size_t min_dist = 1000;
      for (const auto& p : out)
        min_dist = std::min(min_dist, hamming(c, p.config));
      if (out.empty())
        min_dist = 0;
      double score = prior_gain(c) + 0.05 * static_cast<double>(std::min<std::size_t>(min_dist, 6));
      if (score > best_score) { // strict: the first in enumeration order wins ties
        best_score = score;
        best = &c;
      }
    }
    if (best == nullptr)
      return out;
    take(*best, prior_gain(*best), "initial design: prior and diversity");
  }
  if (out.size() >= n)
    return out;

  // Model-based local search.
  std::vector<double> baseline_times;
  std::vector<std::pair<configuration, double>> data;
  auto base = baseline_configuration(task);
  for (const auto& t : in.history) {
    if (!t.usable())
      continue;
    if (t.config == base)
      baseline_times.push_back(t.timed_step_time_s);
    data.emplace_back(t.config, std::log(t.timed_step_time_s));
  }
  double baseline_log = baseline_times.empty()
                          ? (data.empty() ? 0.0 : data.front().second)
                          : std::log(median(baseline_times));
  auto model = fit(fs, task, data, baseline_log, in.noise_log_sd);
  auto score = [&](const configuration& c, double& predicted) {
    auto x = fs.encode(task, c);
    predicted = x.dot(model.mean); // log time relative to the baseline
    double sd = std::sqrt(std::max(0.0, x.dot(model.covariance * x)));
    return -(predicted - sd); // optimistic: lower time is better
  };

  // Neighbourhoods of the three fastest measured configurations.
  std::vector<std::pair<double, configuration>> measured;
  for (const auto& [c, lt] : data)
    measured.emplace_back(lt, c);
  std::stable_sort(measured.begin(), measured.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<configuration> centres;
  for (const auto& [lt, c] : measured) {
    if (std::find(centres.begin(), centres.end(), c) == centres.end())
      centres.push_back(c);
    if (centres.size() == 3)
      break;
  }
  while (out.size() < n) {
    const configuration* best = nullptr;
    double best_score = -1e300;
    double best_pred = 0;
    bool local = true;
    for (int pass = 0; pass < 2 && best == nullptr; ++pass) {
      local = pass == 0;
      for (const auto& c : open) {
        if (chosen_keys.count(c.key()) != 0)
          continue;
        if (local) {
          bool near = false;
          for (const auto& centre : centres)
            near = near || hamming(c, centre) <= 2;
          if (!near)
            continue;
        }
        double pred = 0;
        double s = score(c, pred);
        if (s > best_score) {
          best_score = s;
          best = &c;
          best_pred = pred;
        }
      }
    }
    if (best == nullptr)
      break;
    take(*best, -best_pred,
         local ? "local search: best optimistic prediction near the fastest verified points"
               : "global: best optimistic prediction (neighbourhoods exhausted)");
  }
  return out;
}

} // namespace infrarsi::tuning

namespace infrarsi::tuning {

std::vector<std::string> policy_names() {
  return {"bayes_ei/7", "bayes_ei/6",          "bayes_ei/5",          "bayes_ei/4",
          "bayes_ei/3", "bayes_ei/2",          "bayes_ei/1",          "seeded_local_search/1",
          "random/1",   "greedy_coordinate/1", "settings_only/1"};
}

std::size_t search_trials_spent(const planner_input& in) {
  std::size_t spent = 0;
  for (const auto& t : in.history)
    spent += t.purpose == "explore" ? 1 : 0;
  return std::max(spent, in.search_spent);
}

std::unique_ptr<planner_policy> make_policy(const std::string& name) {
  if (name == "bayes_ei/7" || name == "bayes_ei/6" || name == "bayes_ei/5"
      || name == "bayes_ei/4" || name == "bayes_ei/3") {
    bayes_ei_cost::options o;
    o.end_game = true;
    o.memory_interactions = name == "bayes_ei/4";
    const bool late = name == "bayes_ei/6" || name == "bayes_ei/7";
    o.late_interaction_sd = name == "bayes_ei/5" || late ? 0.02 : 0.0;
    o.late_memory_interactions = late;
    o.late_lean_ep = name == "bayes_ei/7";
    return std::make_unique<bayes_ei_cost>(o);
  }
  if (name == "bayes_ei/2")
    return std::make_unique<bayes_ei_cost>();
  if (name == "bayes_ei/1")
    return std::make_unique<bayes_ei>();
  if (name == "settings_only/1") {
    bayes_ei::options o;
    o.use_patches = false;
    return std::make_unique<bayes_ei>(o);
  }
  if (name == "seeded_local_search/1")
    return std::make_unique<seeded_local_search>();
  if (name == "random/1")
    return std::make_unique<random_search>();
  if (name == "greedy_coordinate/1")
    return std::make_unique<greedy_coordinate>();
  return nullptr;
}

} // namespace infrarsi::tuning
