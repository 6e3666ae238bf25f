#include <algorithm>
#include <cassert>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "tuning/bayes_policy.hpp"
#include "tuning/failure_model.hpp"
#include "tuning/layout_prior.hpp"
#include "tuning/policy_parts.hpp"
#include "tuning/stats.hpp"

namespace infrarsi::tuning {

namespace {

/// A candidate configuration's identity in the proposal step's pool: its code (config_coder), or
/// for one without a code its key text with code history_encoding::no_code. Two configurations
/// have equal pool keys iff equal key() (a configuration without a code never prints like one
/// with a code: search_space.hpp, history_facts::was_tried).
struct pool_key {
  std::uint64_t code = history_encoding::no_code;
  std::string text;
  bool operator==(const pool_key& o) const { return code == o.code && text == o.text; }
};

struct pool_key_hash {
  std::size_t operator()(const pool_key& k) const {
    return k.code == history_encoding::no_code ? std::hash<std::string>{}(k.text)
                                               : std::hash<std::uint64_t>{}(k.code);
  }
};

/// The P(fits) a candidate needs to be "safe". 0.7 rather than an even bet: on the four sim
/// tasks (seeds 1-5 and, held out, 101-105; bench/README.md) it cut OOM trials by about half at
/// budgets 10 and 20 and raised the fraction of the optimum at every budget against 0.5.
constexpr double safe_p_fit = 0.7;

/// One scored candidate.
struct scored {
  configuration config;
  std::vector<int> active;
  sparse_features x;
  double ei = 0;     // expected improvement of log step time (in the end game: with sd scaled)
  double ei_full = 0; // the expected improvement with the whole posterior sd (the stopping rule's)
  double p_fit = 1;  // 1 - P(OOM)
  double p_ok = 1;   // 1 - P(fail) (crash, timeout, launch error, contract violation)
  double cost = 1;   // expected cost of the trial, in units of one baseline trial (see below)
  double mean = 0;   // predicted log(t / t_baseline)
  double sd = 0;
  double offset = 0; // the analytic layout prior's log(t / t_baseline) (0 without one)
  double memory_offset = 0; // the analytic layout prior's log peak bytes (0 without one)
  std::string paired; // "" or the pairing explanation
  /// Predicted to fit (P(fits) >= safe_p_fit) and unlikely to fail (P(fail) <= 0.25):
  /// preferred over every unsafe candidate.
  [[nodiscard]] bool safe() const { return p_fit >= safe_p_fit && p_ok >= 0.75; }
  /// `full`: with ei_full instead of ei (the same outside the end game).
  [[nodiscard]] double acquisition(bool full = false) const {
    return (full ? ei_full : ei) * p_fit * p_ok / cost;
  }
  [[nodiscard]] bool better_than(const scored& o, bool full = false) const {
    if (safe() != o.safe())
      return safe();
    if (acquisition(full) != o.acquisition(full))
      return acquisition(full) > o.acquisition(full);
    const double e = full ? ei_full : ei;
    const double oe = full ? o.ei_full : o.ei;
    if (e != oe)
      return e > oe;
    return p_fit * p_ok > o.p_fit * o.p_ok;
  }
};

/// A standard normal draw (Box-Muller on two SplitMix64 uniforms).
double normal_draw(splitmix64& rng) {
  double u1 = (static_cast<double>(rng.next() >> 11) + 0.5) * 0x1.0p-53;
  double u2 = static_cast<double>(rng.next() >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
}

} // namespace

proposal_batch bayes_ei_cost::plan(const planner_input& in, std::size_t n) const {
  proposal_batch out;
  if (n == 0)
    return out;
  // The task's patches in name order: the same patches reach the same proposals however they
  // were listed (task file or LLM answer, decide::with_llm_patches).
  // (Copied only when they are not in name order already.)
  auto by_name = [](const auto& a, const auto& b) { return a.name < b.name; };
  std::optional<task_spec> sorted;
  if (!std::is_sorted(in.task->patches.begin(), in.task->patches.end(), by_name)) {
    sorted = *in.task;
    std::stable_sort(sorted->patches.begin(), sorted->patches.end(), by_name);
  }
  const task_spec& task = sorted ? *sorted : *in.task;
  feature_space fs{task, in.priors};
  // Every trial's code and features, computed once (history_encoding), or only the new trials'
  // with the run's cache.
  std::optional<history_encoding> own;
  const history_encoding& enc = in.encodings != nullptr
                                  ? in.encodings->encode(task, fs, in.history)
                                  : own.emplace(task, fs, in.history);
  history_facts facts{task, fs, in.history, enc};
  constraint_set constraints{task};
  const auto F = fs.names.size();
  const auto base_config = baseline_configuration(task);

  // The analytic prior of the layout (tuning/layout_prior.hpp), for a task whose knobs declare
  // their layout roles: its log step time relative to the baseline's is the prior mean of the
  // time model (the model fits the measurements less it), its log peak memory the prior mean of
  // the memory model.
  std::optional<layout_prior> layout;
  if (options_.analytic_prior) {
    std::string why_not;
    layout = layout_prior::from_task(task, why_not);
  }
  layout_estimate layout_base;
  if (layout) {
    layout_base = layout->estimate(base_config.knobs);
    if (!layout_base.valid)
      layout.reset();
  }
  // (log step time relative to the baseline's, log peak bytes) of the prior; (0, 0) without one
  // or for a layout the prior calls invalid.
  auto layout_offsets = [&](const configuration& c) -> std::pair<double, double> {
    return layout ? tuning::layout_offsets(*layout, layout_base, c.knobs)
                  : std::pair<double, double>{0.0, 0.0};
  };

  // -- blame ------------------------------------------------------------------------------------
  // Contract-risky features: patches and values of knobs tagged "numerics".
  std::vector<bool> risky(F, false);
  for (std::size_t i = 0; i < F; ++i)
    risky[i] = fs.knob_of[i] < 0
               || has_tag(task.knobs[static_cast<std::size_t>(fs.knob_of[i])], "numerics");
  auto role_feature = [&](int i) {
    int k = fs.knob_of[static_cast<std::size_t>(i)];
    return k >= 0 && !task.knobs[static_cast<std::size_t>(k)].role.empty();
  };
  // Unambiguous blame: a contract violation on its only untested contract-risky feature
  // (launch settings keep the work by construction); a crash, timeout or launch error only on
  // its only untested feature of any kind. Ambiguous failures are the failure model's.
  std::vector<bool> blamed(F, false);
  for (std::size_t ti = 0; ti < in.history.size(); ++ti) {
    const auto& t = in.history[ti];
    bool violation = t.outcome == trial_outcome::contract_violation
                     || (t.verified && !t.violations.empty());
    bool failed = t.finished
                  && (t.outcome == trial_outcome::crash || t.outcome == trial_outcome::timeout
                      || t.outcome == trial_outcome::launch_error);
    if (!violation && !failed)
      continue;
    std::vector<int> untested_risky;
    std::vector<int> untested_any;
    for (int i : enc.active[ti]) {
      if (facts.passed[static_cast<std::size_t>(i)] != 0)
        continue;
      untested_any.push_back(i);
      if (risky[static_cast<std::size_t>(i)])
        untested_risky.push_back(i);
    }
    const auto& suspects = violation ? untested_risky : untested_any;
    // With the analytic prior, a failure of a layout knob's value alone is not blamed outright:
    // a layout fails as a combination (a framework's legality rule, a missing kernel for a
    // shape), so the failure model's P(fail) avoids it without excluding the value elsewhere.
    if (suspects.size() == 1 && !(layout && !violation && role_feature(suspects.front())))
      blamed[static_cast<std::size_t>(suspects.front())] = true;
  }
  failure_model failures{task, fs, in.history, enc.active, risky};
  auto trial_list = [](const blamed_setting& b) {
    std::string trials;
    for (auto id : b.trials)
      trials += (trials.empty() ? "" : ", ") + std::to_string(id);
    return trials;
  };
  for (const auto& b : failures.convicted())
    out.blamed.push_back(b.feature + ": excluded, failed in trials " + trial_list(b)
                         + ", never usable (P(fail) " + fmt("%.2f", b.p_fail) + ")");
  for (const auto& b : failures.suspects(0.25))
    out.blamed.push_back(b.feature + ": suspected, failed in trials " + trial_list(b)
                         + ", never usable (P(fail) " + fmt("%.2f", b.p_fail)
                         + "); avoided while a candidate predicted safer remains");
  for (std::size_t i = 0; i < F; ++i)
    if (blamed[i] && facts.passed[i] == 0)
      out.blamed.push_back(fs.names[i] + ": excluded, the only untested setting of a failed trial");

  // The failure model's convictions, but with the analytic prior never of a layout knob's value
  // (see the blame above): those only lower P(no failure).
  auto failure_excluded = [&](const std::vector<int>& a) {
    if (!layout)
      return failures.excluded(a);
    std::vector<int> others;
    for (int i : a)
      if (!role_feature(i))
        others.push_back(i);
    return failures.excluded(others);
  };
  auto usable_config = [&](const configuration& c, const std::vector<int>& a,
                           const std::string& key) {
    if (!admissible(in, facts, c, key))
      return false;
    for (int i : a)
      if (blamed[static_cast<std::size_t>(i)] && facts.passed[static_cast<std::size_t>(i)] == 0)
        return false;
    return !facts.banned(a) && !failure_excluded(a) && !facts.dominated_by_oom(task, c);
  };
  auto untested_risky = [&](const std::vector<int>& a) {
    std::size_t k = 0;
    for (int i : a)
      k += risky[static_cast<std::size_t>(i)] && facts.passed[static_cast<std::size_t>(i)] == 0;
    return k;
  };

  // -- models -----------------------------------------------------------------------------------
  std::vector<double> baseline_times;
  for (std::size_t ti = 0; ti < in.history.size(); ++ti) {
    const auto& t = in.history[ti];
    // (A configuration with a feature is not the baseline: the cheap test first.)
    if (t.usable() && enc.point[ti].empty() && t.config == base_config) {
      baseline_times.push_back(t.timed_step_time_s);
    }
  }
  // A layout the prior calls invalid (it does not divide: docs/planner.md "Analytic prior") is
  // never proposed.
  auto layout_valid = [&](const configuration& c) { return !layout || layout->estimate(c.knobs).valid; };
  std::vector<std::pair<sparse_features, double>> data;
  std::vector<double> data_offset;
  for (std::size_t ti = 0; ti < in.history.size(); ++ti) {
    const auto& t = in.history[ti];
    if (t.usable()) {
      double off = layout_offsets(t.config).first;
      data.emplace_back(enc.point[ti], std::log(t.timed_step_time_s) - off);
      data_offset.push_back(off);
    }
  }
  double baseline_log = !baseline_times.empty() ? std::log(median(baseline_times))
                        : data.empty()          ? 0.0
                                                : data.front().second;
  for (auto& d : data)
    d.second -= baseline_log;
  // Search trials spent: the explore trials, in flight included, or the count the supervisor
  // gives when larger (lost attempts not re-queued yet).
  const std::size_t spent = search_trials_spent(in);
  time_model_options time_options = options_.time;
  std::string narrowed;
  if (const auto after = options_.late_after(in.search_budget);
      options_.late_interaction_sd > 0 && spent >= after) {
    time_options.interaction_sd = options_.late_interaction_sd;
    narrowed = "; interaction prior sd " + fmt("%.2f", time_options.interaction_sd) + " after "
               + std::to_string(after) + " search trials";
  }
  time_model model{fs, time_options};
  model.fit(data, in.noise_log_sd);

  const auto M = fs.model_size();
  const auto memory_options = memory_options_for(name(), spent, in.search_budget);
  if (options_.late_memory_interactions && memory_options.interactions)
    narrowed += "; memory model with pairwise interactions (prior sd "
                + fmt("%.2f", memory_options.interaction_sd) + ")";
  // The monotone rule is applied from history_facts::dominated_by_oom (the minimal OOMs), so
  // the model need not copy every OOM configuration (run_memory_model::ooms; 1,600 knob maps at
  // 10,000 trials): the fit itself does not depend on `monotone`.
  auto fitted_options = memory_options;
  fitted_options.monotone = false;
  // (With the analytic prior the memory model revises the prior's peak memory:
  // run_memory_options::analytic_prior, run_memory_model::log_offset.)
  fitted_options.analytic_prior = fitted_options.analytic_prior && options_.analytic_prior;
  auto memory = fit_run_memory(task, fs, in.history, enc.point, in.priors, in.memory_capacity_bytes,
                               fitted_options);
  const memory_fit& mem = memory.fit;
  const bool have_mem = memory.fitted;
  auto p_oom = [&](const sparse_features& sx, double memory_offset) {
    return have_mem ? memory.p_oom_point(sx, M, memory_offset) : 0.0;
  };

  // Costs, relative to one baseline trial: a trial that runs costs its predicted step-time
  // ratio; an OOM a quarter and a failure half of a baseline trial (they end early). Fixed
  // fractions, not the device-seconds measured so far: a failed trial's device-seconds are wall
  // time, and proposals must not depend on how loaded the machine was (a resumed run proposes
  // what an uninterrupted one would). Every trial also spends one trial of the budget, charged
  // as one baseline trial, so a cheap failure is still not free.
  const double oom_cost = 0.25;
  const double fail_cost = 0.5;

  // Incumbent: the best posterior mean among measured configurations.
  double best = 0.0;
  {
    bool any = false;
    for (std::size_t di = 0; di < data.size(); ++di) {
      double m = model.predict_mean(data[di].first) + data_offset[di];
      if (!any || m < best)
        best = m;
      any = true;
    }
  }
  // The end game (options::end_game): the search trials left, the trials in flight counted as
  // spent.
  double sd_scale = 1.0;
  std::string end_game;
  if (options_.end_game && in.search_budget > 0) {
    std::size_t left = in.search_budget - std::min(in.search_budget, spent);
    if (static_cast<double>(left)
        <= options_.end_game_share * static_cast<double>(in.search_budget)) {
      sd_scale = options_.end_game_sd_scale;
      end_game = "; end game (" + std::to_string(left) + " of " + std::to_string(in.search_budget)
                 + " search trials left): EI with the posterior sd x" + fmt("%.2f", sd_scale);
    }
  }
  // While the neighbours of one configuration are scored (for_each_neighbour), that
  // configuration, and once a neighbour is scored its expansion and C z: each neighbour's sd
  // from the few features that differ (time_model::predict_near).
  const configuration* near = nullptr;
  bool centre_ready = false;
  time_model::centre centre;
  auto rescore = [&](scored& s) {
    if (near != nullptr && !centre_ready) {
      model.prepare_centre(fs.point(task, *near), centre);
      centre_ready = true;
    }
    auto pr = near != nullptr ? model.predict_near(centre, s.x) : model.predict(s.x);
    pr.mean += s.offset;
    s.mean = pr.mean;
    s.sd = pr.sd;
    auto ei_at = [&](double sd) {
      double ei = expected_improvement(best, pr.mean, sd);
      return std::isfinite(ei) ? ei : 0.0;
    };
    s.ei = ei_at(sd_scale * pr.sd);
    s.ei_full = sd_scale != 1.0 ? ei_at(pr.sd) : s.ei;
    s.cost = 0.5 * (1.0 + s.p_fit * s.p_ok * std::exp(s.mean) + (1.0 - s.p_fit) * oom_cost
                    + s.p_fit * (1.0 - s.p_ok) * fail_cost);
  };
  auto score = [&](configuration c, std::vector<int> a) {
    scored s;
    s.config = std::move(c);
    s.x = fs.point(task, s.config, a);
    s.active = std::move(a);
    s.offset = layout_offsets(s.config).first;
    s.memory_offset = memory.log_offset(s.config);
    s.p_fit = 1.0 - p_oom(s.x, s.memory_offset);
    if (!std::isfinite(s.p_fit))
      s.p_fit = 0.5;
    s.p_ok = 1.0 - failures.p_fail(s.active);
    rescore(s);
    return s;
  };

  // -- candidates -------------------------------------------------------------------------------
  // No enumeration of the space: the single changes of the baseline and of the six fastest
  // usable configurations, seeded random configurations, and configurations that are optimal
  // under a draw from the time model's posterior (Thompson sampling: Thompson 1933; Russo et al.
  // 2018, "A tutorial on Thompson sampling"), each the best choice of every knob and patch under
  // that draw, so that good changes found apart are tried together. Coordinate ascent refines
  // the best of them below.
  // A candidate is known by its configuration code (config_coder), or by its key text when it
  // has none (code no_code): equal iff the keys are equal, and a number is cheaper to make, hash
  // and compare than the text.
  std::unordered_set<pool_key, pool_key_hash> chosen;
  std::vector<scored> pool;
  std::unordered_map<pool_key, std::size_t, pool_key_hash> in_pool;
  // Keys refused by a constraint or usable_config: neither depends on what is chosen or on
  // `strict`, so a configuration met again (coordinate ascent meets the same neighbours many
  // times) is not checked again.
  std::unordered_set<pool_key, pool_key_hash> refused;
  auto key_of = [&](const configuration& c) -> pool_key {
    if (auto code = fs.coder.code(c))
      return {*code, {}};
    return {history_encoding::no_code, c.key()};
  };
  bool strict = true; // "one new risky feature at a time" (lifted below when nothing is left)
  auto acceptable = [&](const configuration& c, const std::vector<int>& a, const pool_key& key) {
    if (chosen.count(key) != 0 || refused.count(key) != 0)
      return false;
    // (A configuration with a code is compared with the history by its code; the key text is
    // needed only for one without.)
    if (!constraints.ok(c) || !usable_config(c, a, key.text) || !layout_valid(c)) {
      refused.insert(key);
      return false;
    }
    return !strict || untested_risky(a) <= 1;
  };
  // `make` builds the configuration of `key` (only when it is neither pooled nor refused).
  auto consider_key = [&](pool_key key, auto&& make) -> const scored* {
    if (auto it = in_pool.find(key); it != in_pool.end())
      return &pool[it->second];
    if (chosen.count(key) != 0 || refused.count(key) != 0)
      return nullptr;
    configuration c = make();
    assert(key == key_of(c));
    auto a = fs.active(task, c);
    if (!acceptable(c, a, key))
      return nullptr;
    in_pool.emplace(std::move(key), pool.size());
    pool.push_back(score(std::move(c), std::move(a)));
    return &pool.back();
  };
  auto consider = [&](const configuration& c) -> const scored* {
    return consider_key(key_of(c), [&] { return c; });
  };
  // As consider, taking `c` (a configuration made to be considered and not used after).
  auto consider_made = [&](configuration&& c) -> const scored* {
    return consider_key(key_of(c), [&] { return std::move(c); });
  };
  // The single changes of `c` (tuning::single_changes, in its order), each considered; f(s) for
  // each (nullptr: not acceptable). Their codes are c's code with one digit or one patch bit
  // changed (their keys c's key text with one part changed when c has no code), and a
  // configuration is built only for a key neither pooled nor refused: coordinate ascent meets
  // the same neighbours again and again.
  std::vector<std::vector<knob_value>> domains;
  for (const auto& k : task.knobs)
    domains.push_back(search_values(k));
  // Per knob (task order) and searched value: its digit in the code (config_coder::values).
  std::vector<std::vector<std::uint64_t>> digit_of(task.knobs.size());
  if (fs.coder.usable)
    for (std::size_t k = 0; k < task.knobs.size(); ++k)
      for (const auto& v : domains[k]) {
        const auto& cv = fs.coder.values[k];
        digit_of[k].push_back(
          static_cast<std::uint64_t>(std::find(cv.begin(), cv.end(), v) - cv.begin()));
      }
  std::vector<std::vector<std::string>> value_text(task.knobs.size());
  std::vector<std::size_t> name_pos(task.knobs.size());
  for (std::size_t k = 0; k < task.knobs.size(); ++k)
    for (const auto& v : domains[k])
      value_text[k].push_back(task.knobs[k].name + "=" + to_string(v));
  for (std::size_t i = 0; i < fs.knob_by_name.size(); ++i)
    name_pos[static_cast<std::size_t>(fs.knob_by_name[i])] = i;
  auto for_each_neighbour_of = [&](const configuration& c, auto&& f) {
    std::vector<std::uint64_t> digit;
    if (const auto code = fs.coder.code(c, digit)) {
      // c has a code: so has each neighbour, made from it (knobs in name order, each at a
      // searched value; patches of the task in name order).
      for (std::size_t k = 0; k < task.knobs.size(); ++k) {
        const auto& values = domains[k];
        for (std::size_t j = 0; j < values.size(); ++j) {
          if (digit_of[k][j] == digit[k])
            continue;
          const auto w = fs.coder.weight[k];
          f(consider_key(pool_key{*code - digit[k] * w + digit_of[k][j] * w, {}}, [&] {
            auto m = c;
            m.knobs[task.knobs[k].name] = values[j];
            return m;
          }));
        }
      }
      for (const auto& p : task.patches) {
        const std::uint64_t bit =
          (std::uint64_t{1} << fs.coder.patch_bit.at(p.name)) * fs.coder.patch_weight;
        auto at = std::lower_bound(c.patches.begin(), c.patches.end(), p.name);
        const bool has = at != c.patches.end() && *at == p.name;
        f(consider_key(pool_key{has ? *code - bit : *code + bit, {}}, [&] {
          auto m = c;
          auto pos = m.patches.begin() + (at - c.patches.begin());
          if (has)
            m.patches.erase(pos);
          else
            m.patches.insert(pos, p.name);
          return m;
        }));
      }
      return;
    }
    bool in_step = c.knobs.size() == task.knobs.size();
    std::vector<std::string> seg;
    std::vector<const knob_value*> value(task.knobs.size(), nullptr);
    if (in_step) {
      auto it = c.knobs.begin();
      for (int ki : fs.knob_by_name) {
        if (it->first != task.knobs[static_cast<std::size_t>(ki)].name) {
          in_step = false;
          break;
        }
        value[static_cast<std::size_t>(ki)] = &it->second;
        seg.push_back(it->first + "=" + to_string(it->second));
        ++it;
      }
    }
    if (!in_step) {
      for (const auto& m : single_changes(task, c))
        f(consider(m));
      return;
    }
    auto join = [&](std::size_t pos, const std::string& with, const std::string& patch_text) {
      std::string key;
      key.reserve(c.knobs.size() * 24 + patch_text.size());
      for (std::size_t i = 0; i < seg.size(); ++i) {
        if (i > 0)
          key += ',';
        key += i == pos ? with : seg[i];
      }
      key += '|';
      key += patch_text;
      return key;
    };
    auto patch_text = [](const std::vector<std::string>& patches) {
      std::string text;
      for (std::size_t i = 0; i < patches.size(); ++i) {
        if (i > 0)
          text += ',';
        text += patches[i];
      }
      return text;
    };
    const std::string own_patches = patch_text(c.patches);
    for (std::size_t k = 0; k < task.knobs.size(); ++k) {
      const auto& values = domains[k];
      for (std::size_t j = 0; j < values.size(); ++j) {
        if (*value[k] == values[j])
          continue;
        f(consider_key(pool_key{history_encoding::no_code, join(name_pos[k], value_text[k][j], own_patches)}, [&] {
          auto m = c;
          m.knobs[task.knobs[k].name] = values[j];
          return m;
        }));
      }
    }
    for (const auto& p : task.patches) {
      auto patches = c.patches;
      auto it = std::lower_bound(patches.begin(), patches.end(), p.name);
      if (it != patches.end() && *it == p.name)
        patches.erase(it);
      else
        patches.insert(it, p.name);
      f(consider_key(pool_key{history_encoding::no_code, join(seg.size(), "", patch_text(patches))}, [&] {
        auto m = c;
        m.patches = patches;
        return m;
      }));
    }
  };
  // The neighbours of c, scored around c (see `near`).
  auto for_each_neighbour = [&](const configuration& c, auto&& f) {
    near = &c;
    centre_ready = false;
    for_each_neighbour_of(c, f);
    near = nullptr;
  };
  std::vector<const trial_record*> measured;
  for (const auto& t : in.history)
    if (t.usable())
      measured.push_back(&t);
  std::stable_sort(measured.begin(), measured.end(), [](const auto* a, const auto* b) {
    return a->timed_step_time_s < b->timed_step_time_s;
  });
  // Seeded by the trials that count (a lost or preempted attempt re-queued by a resume adds a
  // record but must not change the draw).
  std::uint64_t counted = 0;
  for (const auto& t : in.history)
    counted += t.outcome != trial_outcome::lost && t.outcome != trial_outcome::preempted ? 1 : 0;
  splitmix64 rng{in.seed ^ (0x5EEDC057ull + 0x9E3779B97F4A7C15ull * counted)};
  auto generate = [&] {
    std::vector<configuration> centres{base_config};
    std::set<std::string> centre_keys{base_config.key()};
    for (const auto* t : measured) {
      if (centres.size() >= 7)
        break;
      if (centre_keys.insert(t->config.key()).second)
        centres.push_back(t->config);
    }
    for (const auto& c : centres)
      for_each_neighbour(c, [](const scored*) {});
    // With the analytic prior: the 32 layouts it predicts fastest among those it calls valid
    // (every combination of the layout knobs' searched values, at most 4,096 of them, the other
    // knobs and the patches as the baseline's).
    if (layout) {
      std::vector<std::size_t> role_knobs;
      std::size_t combos = 1;
      for (std::size_t k = 0; k < task.knobs.size(); ++k)
        if (!task.knobs[k].role.empty()) {
          role_knobs.push_back(k);
          combos *= domains[k].size();
        }
      if (combos <= 4096) {
        std::vector<std::pair<double, configuration>> ranked;
        for (std::size_t idx = 0; idx < combos; ++idx) {
          configuration c = base_config;
          std::size_t rest = idx;
          for (auto k : role_knobs) {
            c.knobs[task.knobs[k].name] = domains[k][rest % domains[k].size()];
            rest /= domains[k].size();
          }
          auto e = layout->estimate(c.knobs);
          if (e.valid)
            ranked.emplace_back(e.step_time_s, std::move(c));
        }
        std::stable_sort(ranked.begin(), ranked.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        for (std::size_t i = 0; i < ranked.size() && i < 32; ++i)
          consider(ranked[i].second);
      }
    }
    for (int i = 0; i < 400; ++i) {
      configuration c;
      for (std::size_t k = 0; k < task.knobs.size(); ++k)
        c.knobs[task.knobs[k].name] = domains[k][rng.below(domains[k].size())];
      for (const auto& p : task.patches)
        if (rng.below(2) == 1)
          c.patches.push_back(p.name);
      std::sort(c.patches.begin(), c.patches.end());
      consider_made(std::move(c));
    }
    // The features of the baseline with one knob at each of its values (the same for every
    // draw).
    std::vector<std::vector<sparse_features>> one_change(task.knobs.size());
    for (std::size_t k = 0; k < task.knobs.size(); ++k)
      for (const auto& v : domains[k]) {
        configuration one = base_config;
        one.knobs[task.knobs[k].name] = v;
        one_change[k].push_back(fs.point(task, one));
      }
    for (int draw = 0; draw < 16; ++draw) {
      std::vector<double> w(M);
      for (std::size_t i = 0; i < M; ++i)
        w[i] = model.effect_mean(static_cast<int>(i))
               + model.effect_sd(static_cast<int>(i)) * normal_draw(rng);
      configuration c;
      for (std::size_t k = 0; k < task.knobs.size(); ++k) {
        const auto& knob = task.knobs[k];
        const knob_value* bestv = &knob.default_value;
        double bests = 0.0;
        for (std::size_t j = 0; j < domains[k].size(); ++j) {
          const auto& v = domains[k][j];
          double s = 0.0;
          for (const auto& [i, xv] : one_change[k][j])
            s += w[static_cast<std::size_t>(i)] * xv;
          if (s < bests) {
            bests = s;
            bestv = &v;
          }
        }
        c.knobs[knob.name] = *bestv;
      }
      for (const auto& p : task.patches) {
        auto it = fs.index.find("+" + p.name);
        if (it != fs.index.end() && w[it->second] < 0)
          c.patches.push_back(p.name);
      }
      std::sort(c.patches.begin(), c.patches.end());
      consider_made(std::move(c));
    }
  };
  generate();
  if (pool.empty()) {
    strict = false; // nothing with at most one untested risky feature: any candidate may go
    generate();
  }
  if (pool.empty()) {
    out.stop_reason = "the search space is exhausted";
    return out;
  }

  // -- initial design ---------------------------------------------------------------------------
  std::size_t explored = 0;
  for (const auto& t : in.history)
    if (t.purpose == "explore")
      ++explored;
  auto erase_chosen = [&](std::size_t idx) {
    in_pool.erase(key_of(pool[idx].config));
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(idx));
    for (auto& [k, v] : in_pool)
      if (v > idx)
        --v;
  };
  while (explored + out.proposals.size() < in.initial_design && out.proposals.size() < n) {
    // Experience seeds first, then a spread: the priors' predicted log gain of the settings no
    // design trial or measured trial has covered yet (a covered setting counts a quarter, so
    // prior-favoured settings are spread over the design's trials and a wrong prior is
    // measured apart from the others) + 0.05 x the Hamming distance to everything tried or
    // chosen (capped at half the features); safe candidates (P(fits) >= 0.7, P(fail) <= 0.25)
    // first. Ties: a seeded random order.
    std::optional<std::size_t> pick;
    std::string reason;
    for (const auto& s : in.experience_seeds) {
      auto it = in_pool.find(key_of(s));
      if (it == in_pool.end()) {
        if (consider(s) == nullptr)
          continue;
        it = in_pool.find(key_of(s));
      }
      pick = it->second;
      reason = "initial design: experience bank seed";
      break;
    }
    if (!pick) {
      std::vector<int> covered(F, 0);
      std::vector<const configuration*> others;
      for (std::size_t ti = 0; ti < in.history.size(); ++ti) {
        const auto& t = in.history[ti];
        others.push_back(&t.config);
        if (t.purpose == "explore" || t.usable())
          for (int i : enc.active[ti])
            covered[static_cast<std::size_t>(i)] = 1;
      }
      for (const auto& p : out.proposals) {
        others.push_back(&p.config);
        for (int i : fs.active(task, p.config))
          covered[static_cast<std::size_t>(i)] = 1;
      }
      const std::size_t cap = std::max<std::size_t>(1, F / 2);
      double best_score = -1e300;
      bool best_safe = false;
      std::uint64_t best_tie = 0;
      splitmix64 order{in.seed ^ 0x1D5EEDull ^ out.proposals.size()};
      for (std::size_t j = 0; j < pool.size(); ++j) {
        const auto& c = pool[j];
        std::uint64_t tie = order.next();
        std::size_t min_dist = cap;
        for (const auto* o : others)
          min_dist = std::min(min_dist, hamming(c.config, *o));
        double gain = -c.offset;
        for (int i : c.active)
          gain += -fs.prior_mean[i] * (covered[static_cast<std::size_t>(i)] != 0 ? 0.25 : 1.0);
        double sc = gain + 0.05 * static_cast<double>(min_dist);
        bool sf = c.safe();
        if ((sf && !best_safe) || (sf == best_safe && (sc > best_score || (sc == best_score && tie < best_tie)))) {
          best_score = sc;
          best_safe = sf;
          best_tie = tie;
          pick = j;
        }
      }
      reason = "initial design: prior and diversity";
    }
    if (!pick)
      break;
    const auto& c = pool[*pick];
    chosen.insert(key_of(c.config));
    proposal p{c.config, std::exp(-fs.encode(task, c.config).dot(fs.prior_mean) - c.offset), reason,
               {}, {}};
    p.prior_speedup = p.predicted_speedup;
    if (have_mem)
      p.p_oom = 1.0 - c.p_fit;
    p.reason += " (P(fits) " + (have_mem ? fmt("%.2f", c.p_fit) : std::string{"n/a"})
                + ", P(fail) " + fmt("%.2f", 1.0 - c.p_ok) + ")";
    out.proposals.push_back(std::move(p));
    erase_chosen(*pick);
  }
  if (out.proposals.size() >= n || pool.empty()) {
    if (out.proposals.empty())
      out.stop_reason = "the search space is exhausted";
    return out;
  }

  // -- coordinate ascent from the best candidates and the fastest measured ----------------------
  {
    std::vector<std::size_t> order(pool.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return pool[a].better_than(pool[b]); });
    std::vector<configuration> starts;
    for (std::size_t i = 0; i < order.size() && starts.size() < 8; ++i)
      starts.push_back(pool[order[i]].config);
    if (!measured.empty())
      starts.push_back(measured.front()->config);
    for (const auto& start : starts) {
      auto current = score(start, fs.active(task, start));
      for (int step = 0; step < 12; ++step) {
        // The best neighbour so far, by its index in the pool (pool entries do not change here).
        std::optional<std::size_t> better;
        for_each_neighbour(current.config, [&](const scored* s) {
          if (s != nullptr && s->better_than(better ? pool[*better] : current))
            better = static_cast<std::size_t>(s - pool.data());
        });
        if (!better)
          break;
        current = pool[*better];
      }
    }
  }

  // -- pairing ------------------------------------------------------------------------------------
  // The configurations with the best EI not safe from running out of memory (P(fits) below
  // safe_p_fit; up to 16), each with every single change that lowers the fitted memory — its
  // posterior mean and its 95 % upper bound both below zero, so a change whose direction the
  // model does not know is never called a saver — and makes it safe (P(fits) >= safe_p_fit).
  if (have_mem) {
    std::vector<std::size_t> by_ei(pool.size());
    for (std::size_t i = 0; i < by_ei.size(); ++i)
      by_ei[i] = i;
    std::stable_sort(by_ei.begin(), by_ei.end(),
                     [&](std::size_t a, std::size_t b) { return pool[a].ei > pool[b].ei; });
    std::vector<scored> hungry_list;
    for (std::size_t i : by_ei) {
      if (hungry_list.size() >= 16)
        break;
      if (pool[i].p_fit < safe_p_fit)
        hungry_list.push_back(pool[i]);
    }
    for (const auto& hungry : hungry_list) {
      Eigen::VectorXd xh = memory.features(hungry.x, M);
      for (const auto& m : single_changes(task, hungry.config)) {
        Eigen::VectorXd d = memory.features(fs.point(task, m), M) - xh;
        double delta = d.dot(mem.coef) + (memory.log_offset(m) - hungry.memory_offset);
        double upper = delta + 1.645 * std::sqrt(std::max(0.0, d.dot(mem.coef_cov * d)));
        if (!(upper < 0))
          continue;
        const auto* s = consider(m);
        if (s == nullptr || s->p_fit < safe_p_fit || !s->paired.empty())
          continue;
        auto& target = pool[in_pool.at(key_of(m))];
        target.paired = "paired " + hungry.config.diff_from(base_config) + " (P(OOM) "
                        + fmt("%.2f", 1.0 - hungry.p_fit) + " alone) with the memory saver "
                        + m.diff_from(hungry.config) + " (fitted memory x"
                        + fmt("%.2f", std::exp(delta)) + ", at most x" + fmt("%.2f", std::exp(upper))
                        + " at 95 %; P(OOM) " + fmt("%.2f", 1.0 - target.p_fit) + ")";
      }
    }
  }

  // -- trials in flight (kriging believer) --------------------------------------------------------
  bool believed = false;
  for (const auto& t : in.history)
    if (!t.finished && t.purpose == "explore") {
      auto x = fs.point(task, t.config);
      auto pr = model.predict(x);
      model.condition(x, pr.mean);
      best = std::min(best, pr.mean + layout_offsets(t.config).first);
      believed = true;
    }
  if (believed)
    for (auto& s : pool)
      rescore(s);

  // -- batch --------------------------------------------------------------------------------------
  // With the analytic prior, a value of a layout knob has an informative prior (the model's
  // prediction, not a neutral one): its EI is evidence enough before it is tried.
  bool all_tried = true;
  for (std::size_t i = 0; i < F; ++i)
    if (facts.passed[i] == 0 && !facts.broke[i] && !blamed[i]
        && !(layout && role_feature(static_cast<int>(i)))
        && !failure_excluded(std::vector<int>{static_cast<int>(i)}))
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
    // The stopping rule reads the whole posterior sd, in the end game too: scaling the sd down
    // ranks the candidates; it must not make the run stop sooner.
    std::size_t bf = bi;
    if (sd_scale != 1.0)
      for (std::size_t i = 0; i < pool.size(); ++i)
        if (pool[i].better_than(pool[bf], true))
          bf = i;
    if (out.proposals.empty() && pool[bf].acquisition(true) < stop_below && all_tried) {
      out.stop_reason = "best expected improvement x P(fits) x P(no failure) / cost "
                        + fmt("%.4f", pool[bf].acquisition(true))
                        + " (log units) is below log(min detectable speedup "
                        + fmt("%.4f", in.min_detectable_speedup) + ") = " + fmt("%.4f", stop_below)
                        + ", and every setting and patch has been tried or excluded";
      break;
    }
    proposal p;
    p.config = b.config;
    p.predicted_speedup = std::exp(-b.mean);
    p.prior_speedup = std::exp(-model.prior_mean(b.x) - b.offset);
    if (have_mem)
      p.p_oom = 1.0 - b.p_fit;
    std::string fits = !have_mem ? "P(fits) n/a (no memory model yet)"
                                 : "P(fits) " + fmt("%.2f", b.p_fit)
                                     + (memory.capacity_inferred
                                          ? " (capacity unknown: the largest peak that fitted)"
                                          : "");
    p.reason = "EI " + fmt("%.4f", b.ei) + " x " + fits + " x P(no failure) " + fmt("%.2f", b.p_ok)
               + " / cost " + fmt("%.2f", b.cost) + ": predicted " + fmt("%.3f", std::exp(-b.mean))
               + "x (log sd " + fmt("%.3f", b.sd) + ")" + (b.paired.empty() ? "" : "; " + b.paired)
               + narrowed + end_game;
    chosen.insert(key_of(b.config));
    auto fantasy = b.x;
    double fantasy_mean = b.mean - b.offset; // the time model's own part
    out.proposals.push_back(std::move(p));
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(bi));
    if (out.proposals.size() >= n)
      break;
    model.condition(fantasy, fantasy_mean);
    best = std::min(best, fantasy_mean + b.offset);
    for (auto& s : pool)
      rescore(s);
  }
  if (out.proposals.empty() && out.stop_reason.empty())
    out.stop_reason = "the search space is exhausted";
  return out;
}

} // namespace infrarsi::tuning
