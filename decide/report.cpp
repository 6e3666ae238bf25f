#include "decide/report.hpp"
#include "decide/experience_serving.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

#include "adapters/environment.hpp"
#include "decide/decisions.hpp"
#include "decide/llm.hpp"
#include "decide/minimal_change.hpp"
#include "decide/patch_exclusion.hpp"
#include "decide/resources.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/bayes_policy.hpp"
#include "tuning/contract_coverage.hpp"
#include "tuning/planner.hpp"
#include "tuning/prior_revision.hpp"

namespace infrarsi::decide {

namespace {

double constant_number(const tuning::task_spec& task, const char* name) {
  auto it = task.constants.find(name);
  if (it == task.constants.end())
    return 0.0;
  if (const auto* i = std::get_if<std::int64_t>(&it->second))
    return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&it->second))
    return *d;
  return 0.0;
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

/// A knob value of the report document as text: a string as it is, null as "-", else JSON.
std::string json_scalar_text(const nlohmann::json& v) {
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_null())
    return "-";
  return v.dump();
}

/// One line on how step times were checked against the harness clock, for the report.
std::string clock_note(const tuning::task_spec& task, const store::run_state& run) {
  const auto& c = task.contract;
  if (c.simulated_time)
    return "step times are simulated (contract.simulated_time): not checked against the harness "
           "clock or wall time";
  if (!c.clock_check)
    return "the harness-clock cross-check of step times was WAIVED by the task "
           "(contract.clock_check = false); step times were only checked against wall time";
  std::ostringstream os;
  // The doctor's calibration names the step_median rule (runs locked before it used window_sum).
  const nlohmann::json* clock = nullptr;
  if (run.doctor_doc && run.doctor_doc->is_object() && run.doctor_doc->contains("clock"))
    clock = &(*run.doctor_doc)["clock"];
  if (clock != nullptr && clock->is_object()) {
    os << "the median step of the timed window checked against the harness clock ("
       << clock->value("rule", std::string{}) << ": tolerance " << 100.0 * c.clock_tolerance
       << "% + " << 1000.0 * tuning::clock_slack_per_step_s << " ms around the doctor's offset "
       << fixed(1000.0 * clock->value("offset_s", 0.0), 2) << " ms, + its skew "
       << fixed(1000.0 * clock->value("skew_s", 0.0), 2)
       << " ms; a trial failing only this check is re-measured once) and against wall time";
    return os.str();
  }
  os << "step times of the timed window checked against the harness clock (tolerance "
     << 100.0 * c.clock_tolerance << "%) and against wall time";
  return os.str();
}

/// The contract checks a trial's output cannot fail (or cannot pass) and what enforces the work
/// instead (tuning/contract_coverage.hpp).
nlohmann::json coverage_of(const tuning::task_spec& task) {
  nlohmann::json vacuous = nlohmann::json::array();
  for (const auto& c : tuning::vacuous_checks(task))
    vacuous.push_back(
      {{"code", c.code}, {"status", tuning::to_string(c.status)}, {"evidence", c.evidence}});
  return {{"vacuous", vacuous}, {"work_enforced_by", tuning::work_enforced_by(task)}};
}


/// Tokens one step of trial `t` processed: the contract's tokens per step, else the metrics
/// section's, else the largest count a step reported (0: unknown).
double tokens_per_step(const tuning::task_spec& task, const tuning::trial_record& t) {
  if (task.contract.tokens_per_step > 0)
    return static_cast<double>(task.contract.tokens_per_step);
  if (task.metrics.tokens_per_step > 0)
    return static_cast<double>(task.metrics.tokens_per_step);
  std::uint64_t most = 0;
  for (const auto& s : t.steps)
    most = std::max(most, s.tokens);
  return static_cast<double>(most);
}

/// What a trial came to for people: "ok" (usable), "contract_violation" (ran, broke the
/// contract), else its outcome ("oom", "crash", ..., "unset" while in flight).
std::string verdict_of(const tuning::trial_record& t) {
  if (t.usable())
    return "ok";
  if (t.outcome == tuning::trial_outcome::ok && !t.violations.empty())
    return "contract_violation";
  if (t.outcome == tuning::trial_outcome::ok && !t.verified)
    return "unverified";
  return tuning::to_string(t.outcome);
}

constexpr double z95 = 1.959963984540054; // two-sided 95 % normal quantile

/// What the run's loss invariant compared each trial with, and how far a trial could be from it
/// (contract.loss_mode; tuning/contract_check.hpp): the baseline reference of the doctor and the
/// tolerance of each compared quantity. window: per window, the reference mean and the
/// tolerance window_tolerance gives a trial whose own within-window variance equals the
/// baseline's (a noisier trial gets a wider one); eval: per eval step, the reference and
/// eval_loss_tolerance; pointwise: per compared step, the reference and loss_tolerance. Loss
/// units. Empty lists before the doctor.
nlohmann::json loss_invariant_of(const tuning::task_spec& task, const store::run_state& run) {
  const auto& c = task.contract;
  const auto& ref = run.reference;
  nlohmann::json out{{"mode", tuning::to_string(c.loss_mode)},
                     {"loss_rtol", c.loss_rtol},
                     {"loss_atol", c.loss_atol}};
  if (c.loss_mode == tuning::loss_mode::window) {
    nlohmann::json windows = nlohmann::json::array();
    for (const auto& w : ref.windows) {
      const auto n = static_cast<std::size_t>(w.last - w.first + 1);
      windows.push_back({{"first", w.first},
                         {"last", w.last},
                         {"reference", w.mean},
                         {"runs", w.runs},
                         {"tolerance", tuning::window_tolerance(c, w, w.within_var, n)}});
    }
    out["loss_window"] = c.loss_window;
    out["windows"] = windows;
  } else if (c.loss_mode == tuning::loss_mode::eval) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& [step, loss] : ref.eval_loss)
      steps.push_back({{"step", step},
                       {"reference", loss},
                       {"tolerance", tuning::eval_loss_tolerance(c, ref, step)}});
    out["eval_steps"] = steps;
  } else {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& [step, loss] : ref.loss) {
      if (!c.loss_checkpoints.empty()
          && std::find(c.loss_checkpoints.begin(), c.loss_checkpoints.end(), step)
               == c.loss_checkpoints.end())
        continue;
      steps.push_back({{"step", step},
                       {"reference", loss},
                       {"tolerance", tuning::loss_tolerance(c, ref, step)}});
    }
    out["steps"] = steps;
  }
  return out;
}

} // namespace

/// "prior_revision": the priors revised from the run's measurements (tuning::revise_priors over
/// every trial not lost, with the doctor's noise): per feature the prior and the revised
/// ("posterior") speedup with 95 % intervals (exp(+-1.96 sd)), its usable trials and the features
/// confounded with it; per usable search trial the measured, prior and sequential posterior
/// speedups; both rank correlations.
nlohmann::json prior_revision_of(const tuning::task_spec& task, const store::run_state& run) {
  std::vector<tuning::trial_record> measured;
  for (const auto& t : run.trials)
    if (t.outcome != tuning::trial_outcome::lost)
      measured.push_back(t);
  auto revision = tuning::revise_priors(task, run.priors, measured,
                                        run.noise ? run.noise->log_sd : 0.02);
  auto number_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json effects = nlohmann::json::array();
  for (const auto& e : revision.effects)
    effects.push_back({{"feature", e.feature},
                       {"prior_speedup", e.has_prior ? nlohmann::json(e.prior_speedup) : nlohmann::json(nullptr)},
                       {"posterior_speedup", e.posterior_speedup},
                       {"posterior_log_sd", e.posterior_log_sd},
                       {"posterior_low", e.posterior_speedup * std::exp(-z95 * e.posterior_log_sd)},
                       {"posterior_high", e.posterior_speedup * std::exp(z95 * e.posterior_log_sd)},
                       {"prior_low", e.has_prior ? nlohmann::json(e.prior_speedup * std::exp(-z95 * e.prior_log_sd)) : nlohmann::json(nullptr)},
                       {"prior_high", e.has_prior ? nlohmann::json(e.prior_speedup * std::exp(z95 * e.prior_log_sd)) : nlohmann::json(nullptr)},
                       {"trials", e.trials},
                       {"confounded_with", e.confounded_with}});
  nlohmann::json points = nlohmann::json::array();
  for (const auto& q : revision.points)
    points.push_back({{"trial_id", q.trial_id},
                      {"attempt", q.attempt},
                      {"measured_speedup", q.measured},
                      {"prior_speedup", q.prior},
                      {"posterior_speedup", q.posterior}});
  return {{"policy", store::run_policy(run)},
                                   {"search_trials", revision.trials},
                                   {"priors_given", revision.priors_given},
                                   {"spearman_prior", number_or_null(revision.spearman_prior)},
                                   {"spearman_posterior", number_or_null(revision.spearman_posterior)},
                                   {"effects", effects},
                                   {"points", points}};
}

/// "memory_model": the censored peak-memory model the planner fits (tuning::fit_run_memory over
/// the planner's own history, decide::planner_input_for), its price of each single change from
/// the baseline (a factor on peak memory with its 95 % interval, and bytes over the baseline's
/// predicted peak), each trial's predicted peak against the capacity, and the OOM boundary the
/// model believes in (`boundary`): for every knob with numeric values, around the baseline and
/// around the promoted configuration, P(OOM) = 1 - Phi((log capacity - mean) / sd) of each of
/// its values with the other knobs and patches as they are there (tuning::memory_fit::p_oom),
/// and `fits_up_to`, the largest value whose P(OOM) < 0.5 (null when none is).
nlohmann::json memory_model_of(const tuning::task_spec& task, const store::run_state& run) {
  auto in = planner_input_for(task, run);
  tuning::feature_space fs{task, in.priors};
  auto m = tuning::fit_run_memory(task, fs, in.history, in.priors, in.memory_capacity_bytes,
                                  tuning::memory_options_for(store::run_policy(run),
                                                             tuning::search_trials_spent(in),
                                                             in.search_budget));
  nlohmann::json doc = {{"fitted", m.fitted},
                        {"capacity_bytes", m.capacity_bytes},
                        {"capacity_inferred", m.capacity_inferred},
                        {"device_memory_bytes", task.limits.device_memory_bytes},
                        {"memory_cap_bytes", task.limits.memory_cap_bytes},
                        {"prices", nlohmann::json::array()},
                        {"trials", nlohmann::json::array()}};
  if (!m.fitted) {
    doc["why"] = m.why.empty() ? std::string{"the fit did not converge"} : m.why;
    return doc;
  }
  auto x_of = [&](const tuning::configuration& c) {
    return m.features(fs.point(task, c), fs.model_size());
  };
  const auto base = tuning::baseline_configuration(task);
  const Eigen::VectorXd xb = x_of(base);
  // With the analytic layout prior the fit is the revision of its log peak (log_offset).
  const double base_offset = m.log_offset(base);
  const double base_peak = std::exp(m.fit.mean(xb) + base_offset);
  doc["baseline_predicted_bytes"] = base_peak;
  for (const auto& c : tuning::single_changes(task, base)) {
    auto active = fs.active(task, c);
    if (active.size() != 1)
      continue;
    Eigen::VectorXd d = x_of(c) - xb;
    const double log_factor = d.dot(m.fit.coef) + m.log_offset(c) - base_offset;
    const double sd = std::sqrt(std::max(0.0, d.dot(m.fit.coef_cov * d)));
    doc["prices"].push_back({{"feature", fs.names[static_cast<std::size_t>(active.front())]},
                             {"factor", std::exp(log_factor)},
                             {"factor_low", std::exp(log_factor - z95 * sd)},
                             {"factor_high", std::exp(log_factor + z95 * sd)},
                             {"bytes", base_peak * (std::exp(log_factor) - 1.0)}});
  }
  for (const auto& t : in.history) {
    const bool measured = t.finished && t.outcome == tuning::trial_outcome::ok
                          && t.peak_memory_bytes > 0;
    const bool oom = t.finished && t.outcome == tuning::trial_outcome::oom;
    if (!measured && !oom)
      continue;
    auto x = x_of(t.config);
    const double offset = m.log_offset(t.config);
    const double mean = m.fit.mean(x) + offset;
    const double sd = m.fit.sd(x);
    doc["trials"].push_back(
      {{"trial_id", t.trial_id},
       {"attempt", t.attempt},
       {"change", t.config.diff_from(base)},
       {"oom", oom},
       {"measured_bytes", measured ? nlohmann::json(t.peak_memory_bytes) : nlohmann::json(nullptr)},
       {"predicted_bytes", std::exp(mean)},
       {"predicted_low", std::exp(mean - z95 * sd)},
       {"predicted_high", std::exp(mean + z95 * sd)},
       {"p_oom", m.fit.p_oom(x, std::log(m.capacity_bytes) - offset)}});
  }
  // The OOM boundary: each numeric knob's values, around the baseline and the promotion.
  std::vector<std::pair<std::string, tuning::configuration>> around{{"baseline", base}};
  if (run.promotion && run.promotion->value("promoted", false)
      && run.promotion->contains("config"))
    if (auto promoted = store::configuration_from_json((*run.promotion)["config"]))
      around.emplace_back("promoted", *promoted);
  auto numeric = [](const tuning::knob_value& v) -> std::optional<double> {
    if (const auto* i = std::get_if<std::int64_t>(&v))
      return static_cast<double>(*i);
    if (const auto* d = std::get_if<double>(&v))
      return *d;
    return std::nullopt;
  };
  auto plain = [](const tuning::knob_value& v) {
    return std::visit([](const auto& x) { return nlohmann::json(x); }, v);
  };
  nlohmann::json boundary = nlohmann::json::array();
  const double log_capacity = std::log(m.capacity_bytes);
  for (const auto& [where, centre] : around)
    for (const auto& knob : task.knobs) {
      auto values = tuning::search_values(knob);
      std::vector<std::pair<double, tuning::knob_value>> ordered;
      for (const auto& v : values)
        if (auto d = numeric(v))
          ordered.emplace_back(*d, v);
      if (ordered.size() < 2 || ordered.size() != values.size())
        continue;
      std::stable_sort(ordered.begin(), ordered.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      nlohmann::json points = nlohmann::json::array();
      nlohmann::json fits_up_to = nullptr;
      for (const auto& [d, v] : ordered) {
        auto c = centre;
        c.knobs[knob.name] = v;
        const double p = m.fit.p_oom(x_of(c), log_capacity - m.log_offset(c));
        points.push_back({{"value", plain(v)}, {"p_oom", p}});
        if (p < 0.5)
          fits_up_to = plain(v);
      }
      auto at = centre.knobs.find(knob.name);
      boundary.push_back(
        {{"around", where},
         {"knob", knob.name},
         {"current", at != centre.knobs.end() ? plain(at->second) : nlohmann::json()},
         {"fits_up_to", fits_up_to},
         {"values", points}});
    }
  doc["boundary"] = boundary;
  return doc;
}


namespace {

/// The report's "llm" block: usage from the run's LLM exchanges and what became of each
/// proposed patch (decide/llm.hpp).
nlohmann::json llm_report(const tuning::task_spec& task, const store::run_state& run) {
  auto usage = llm_usage_of(run);
  nlohmann::json patches = nlohmann::json::array();
  for (const auto& e : run.llm) {
    if (e.value("event", "") != "parsed" || e.value("purpose", "") != llm_patches)
      continue;
    for (const auto& p : e.value("patches", nlohmann::json::array())) {
      auto why = p.value("apply_error", "");
      auto name = p.value("name", "");
      std::string status = "rejected: " + why;
      if (why.empty()) { // a search candidate: what its trials measured
        std::size_t tried = 0;
        std::size_t usable = 0;
        for (const auto& t : run.trials)
          if (t.kind == tuning::purpose_kind::explore && t.finished &&
              std::find(t.config.patches.begin(), t.config.patches.end(), name) !=
                t.config.patches.end()) {
            ++tried;
            usable += t.usable() ? 1 : 0;
          }
        status = "passed every check; a search candidate in " + std::to_string(tried) +
                 " search trial(s), " + std::to_string(usable) + " of them usable";
      }
      patches.push_back({{"name", name}, {"status", status}});
    }
    for (const auto& r : e.value("rejected", nlohmann::json::array()))
      patches.push_back({{"name", r.value("name", "")}, {"status", "rejected: " + r.value("why", "")}});
  }
  std::string source = "none";
  if (!run.priors.settings.empty())
    source = run.priors.settings.front().source;
  else if (!run.priors.patches.empty())
    source = run.priors.patches.front().source;
  // Per round: how well the priors in use ranked the search trials measured under them, before
  // and after the planner's revision (decide::llm_rounds).
  nlohmann::json rounds = nlohmann::json::array();
  auto rho_json = [](double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  for (const auto& r : llm_rounds(task, run))
    rounds.push_back({{"round", r.round},
                      {"after_search_trials", r.explored},
                      {"why", r.why},
                      {"priors_valid", r.priors_valid},
                      {"trials", r.trials},
                      {"spearman_prior", rho_json(r.spearman_prior)},
                      {"spearman_revised", rho_json(r.spearman_revised)}});
  return {{"model", task.llm.model},
          {"rounds", rounds},
          {"url", task.llm.base_url},
          {"requests", usage.requests},
          {"calls", usage.calls},
          {"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"invalid_answers", usage.invalid_answers},
          {"priors_source", source},
          {"patches", patches}};
}

} // namespace

namespace {

/// What became of each served experience seed: proposed as an explore trial (its outcome and
/// speedup over the baseline's mean), or why not (decide::experience_seed_plan). Runs whose pack
/// predates "propose-or-explain/1" left their seeds to the policy: a seed it did not propose says
/// so.
nlohmann::json experience_seeds_report(const tuning::task_spec& task, const store::run_state& run,
                                       const tuning::configuration& base, double base_time) {
  auto plan = experience_seed_plan(task, run, store::run_policy(run));
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < run.experience_seeds.size(); ++i) {
    const auto& seed = run.experience_seeds[i];
    nlohmann::json s{{"config", store::to_json(seed)}, {"change", seed.diff_from(base)}};
    // Where it was found (packs logged with a serving mode): its GPU, rank and speedup there.
    if (run.experience_pack.is_object() && run.experience_pack["seeds"].is_array()
        && i < run.experience_pack["seeds"].size())
      for (const auto& [k, v] : run.experience_pack["seeds"][i].items())
        s[k == "speedup" ? "speedup_there" : k] = v;
    const tuning::trial_record* tried = nullptr;
    for (const auto& t : run.trials)
      if (t.purpose == "explore" && t.config == seed) {
        tried = &t;
        break;
      }
    if (tried != nullptr) {
      s["trial"] = tried->trial_id;
      s["outcome"] = tuning::to_string(tried->outcome);
      s["speedup"] = tried->usable() && base_time > 0
                       ? nlohmann::json(base_time / tried->timed_step_time_s)
                       : nlohmann::json{};
    } else if (i < plan.size() && !plan[i].reason.empty()) {
      s["reason"] = plan[i].reason;
    } else if (i < plan.size()) {
      s["reason"] = "the search ended before the initial design reached it";
    } else {
      s["reason"] = "the policy did not propose it (a run from before every served seed was "
                    "proposed or explained)";
    }
    out.push_back(std::move(s));
  }
  return out;
}

/// The experience pack in brief: mode, seeds served and proposed, what the filter left out, and
/// where the search found its best configuration: the search trial (1-based, in proposal order)
/// of the fastest usable explore trial, the trials the budget had, and whether it was a seed.
nlohmann::json experience_summary(const store::run_state& run, double base_time) {
  const auto& pack = run.experience_pack;
  std::size_t index = 0, best_index = 0, proposed = 0;
  double best = 0;
  bool best_is_seed = false;
  for (const auto* t : run.latest_attempts()) {
    if (t->purpose != "explore")
      continue;
    ++index;
    bool seed = std::find(run.experience_seeds.begin(), run.experience_seeds.end(), t->config)
                != run.experience_seeds.end();
    proposed += seed ? 1 : 0;
    if (t->usable() && base_time > 0 && t->timed_step_time_s > 0
        && base_time / t->timed_step_time_s > best) {
      best = base_time / t->timed_step_time_s;
      best_index = index;
      best_is_seed = seed;
    }
  }
  nlohmann::json out{{"mode", pack.value("mode", "")},
                     {"served", run.experience_seeds.size()},
                     {"proposed", proposed},
                     {"served_by_match", pack.value("served_by_match", nlohmann::json::object())},
                     {"not_served", pack.value("not_served", nlohmann::json::object())},
                     {"search_trials", index}};
  if (best_index > 0)
    out["best_search_trial"] = {{"index", best_index}, {"speedup", best}, {"seed", best_is_seed}};
  // The priors the served finding's models adjusted (decide::experience_priors).
  if (pack.contains("prior_adjustment") && pack["prior_adjustment"].is_object()) {
    const auto& adj = pack["prior_adjustment"];
    out["prior_adjustment"] = {
      {"run", adj.value("run", "")},
      {"origin_hardware", adj.value("origin_hardware", "")},
      {"match", adj.value("match", "")},
      {"effects", adj.contains("effects") ? adj["effects"].size() : std::size_t{0}},
      {"memory_prices", adj.contains("memory") ? adj["memory"].size() : std::size_t{0}}};
  }
  return out;
}

} // namespace

nlohmann::json make_report(const tuning::task_spec& task_in, const store::run_state& run) {
  // The searched patches: the task's and the accepted LLM-proposed ones, from the log (the same
  // report whether written by the run or regenerated by `infrarsi report`).
  const auto task = with_llm_patches(task_in, run, "");
  auto base = tuning::baseline_configuration(task);
  double base_time = run.noise ? run.noise->mean_step_time_s : 0.0;
  nlohmann::json trials = nlohmann::json::array();
  std::map<std::string, double> failed_cost;
  std::map<std::string, int> failed_count;
  const auto spend = device_seconds_spent(task, run);
  const double mfu_flops = constant_number(task, "flops_per_step");
  const double mfu_peak = constant_number(task, "peak_flops");
  for (const auto& t : run.trials) {
    const double charged = charged_device_seconds(task, t); // lost attempts included
    if (t.finished && !t.usable()) {
      auto o = tuning::to_string(t.outcome);
      failed_cost[o] += charged;
      failed_count[o] += 1;
    }
    trials.push_back(
      {{"trial_id", t.trial_id},
       {"attempt", t.attempt},
       {"purpose", t.purpose},
       {"config", store::to_json(t.config)},
       {"change", t.config.diff_from(base)},
       {"outcome", tuning::to_string(t.outcome)},
       {"timed_step_time_s", t.timed_step_time_s},
       {"speedup_vs_baseline",
        t.usable() && base_time > 0 ? nlohmann::json(base_time / t.timed_step_time_s) : nullptr},
       {"violations", t.violations},
       {"detail", t.detail},
       {"wall_time_s", t.wall_time_s},
       {"device_seconds", charged},
       {"peak_memory_bytes", t.peak_memory_bytes},
       {"memory_source", tuning::to_string(t.memory)},
       {"verdict", verdict_of(t)},
       {"tokens_per_s", t.timed_step_time_s > 0 && tokens_per_step(task, t) > 0
                          ? nlohmann::json(tokens_per_step(task, t) / t.timed_step_time_s)
                          : nlohmann::json(nullptr)},
       {"mfu", t.timed_step_time_s > 0 && mfu_flops > 0 && mfu_peak > 0
                 ? nlohmann::json(mfu_flops / t.timed_step_time_s / mfu_peak)
                 : nlohmann::json(nullptr)}});
  }
  nlohmann::json failed = nlohmann::json::object();
  for (const auto& [o, s] : failed_cost)
    failed[o] = {{"trials", failed_count[o]}, {"device_seconds", s}};

  nlohmann::json reverifications = nlohmann::json::array();
  const bool adaptive = adaptive_measurement(run);
  for (const auto& r : run.reverifications) {
    nlohmann::json entry{{"candidate_trial", r.candidate_trial},
                         {"change", r.config.diff_from(base)},
                         {"baseline_times_s", r.baseline_times_s},
                         {"candidate_times_s", r.candidate_times_s},
                         {"speedup", r.estimate.speedup},
                         {"ci_low", r.estimate.ci_low},
                         {"ci_high", r.estimate.ci_high},
                         {"promotable", r.promotable},
                         {"round", r.round},
                         {"reason", r.reason}};
    if (adaptive) {
      // Every look of the sequential test, recomputed by the function that decided them (the
      // same as the CandidateReverified document's "looks").
      auto st = reverification_looks(run, r.candidate_trial, r.round);
      nlohmann::json looks = nlohmann::json::array();
      for (const auto& l : st.looks)
        looks.push_back({{"look", l.look},
                         {"pairs", l.pairs},
                         {"critical_z", l.critical_z},
                         {"speedup", l.estimate.speedup},
                         {"ci_low", l.estimate.ci_low},
                         {"ci_high", l.estimate.ci_high},
                         {"decision", l.decision}});
      entry["looks"] = looks;
      entry["looks_max"] = st.looks_max;
      entry["promotion_margin"] = promotion_margin(run);
    }
    reverifications.push_back(std::move(entry));
  }

  // Everything rejected, with its evidence: trials that broke the contract or failed, then
  // candidates whose re-verification did not clear the bar.
  nlohmann::json rejected = nlohmann::json::array();
  std::map<std::uint64_t, std::uint32_t> latest_attempt;
  for (const auto& t : run.trials)
    latest_attempt[t.trial_id] = std::max(latest_attempt[t.trial_id], t.attempt);
  for (const auto& t : run.trials) {
    if (!t.finished || (t.outcome == tuning::trial_outcome::ok && t.violations.empty())
        || t.outcome == tuning::trial_outcome::lost) // lost: re-queued, not judged
      continue;
    nlohmann::json reasons = nlohmann::json::array();
    for (const auto& v : t.violations)
      reasons.push_back(tuning::violation_code(v));
    if (t.violations.empty())
      reasons.push_back(tuning::to_string(t.outcome));
    nlohmann::json entry{{"trial_id", t.trial_id},
                         {"attempt", t.attempt},
                         {"purpose", t.purpose},
                         {"change", t.config.diff_from(base)},
                         {"outcome", tuning::to_string(t.outcome)},
                         {"reasons", reasons},
                         {"evidence", t.violations.empty() ? std::vector<std::string>{t.detail}
                                                           : t.violations}};
    // An attempt a later one replaced (re-measured after failing only the harness-clock check):
    // listed with its evidence and marked; the trial is judged by its latest attempt.
    if (t.attempt < latest_attempt[t.trial_id]) {
      entry["outcome"] = "re-measured as attempt " + std::to_string(t.attempt + 1);
      entry["remeasured"] = true;
    }
    rejected.push_back(std::move(entry));
  }
  for (const auto& x : excluded_patches(run))
    rejected.push_back({{"patch", x.patch},
                        {"change", "+" + x.patch},
                        {"outcome", "excluded at init, never run"},
                        {"reasons", {x.reason}},
                        {"evidence", {x.evidence}}});
  for (const auto& r : run.reverifications)
    if (!r.promotable)
      rejected.push_back({{"candidate_trial", r.candidate_trial},
                          {"change", r.config.diff_from(base)},
                          {"outcome", is_ablation_trial(run, r.candidate_trial)
                                        ? "ablation not kept"
                                        : "not promoted"},
                          {"reasons", {"reverification"}},
                          {"evidence", {r.reason}}});

  nlohmann::json promoted = nullptr;
  if (run.promotion && run.promotion->value("promoted", false)) {
    promoted = *run.promotion;
    nlohmann::json touched = nlohmann::json::object();
    if (auto c = store::configuration_from_json(run.promotion->value("config", nlohmann::json{}))) {
      for (const auto& p : c->patches) {
        if (const auto* spec = task.find_patch(p); spec != nullptr && !spec->file.empty()) {
          std::ifstream in{spec->file};
          std::string text{std::istreambuf_iterator<char>{in}, {}};
          touched[p] = adapters::patch_paths(text);
        } else {
          for (const auto& a : llm_accepted_patches(run)) // an LLM-proposed patch: as logged
            if (a.value("name", "") == p)
              touched[p] = a["paths"];
        }
      }
    }
    promoted["patch_paths"] = touched;
    // What the apply stage found the patches to touch (logged in ChangesApplied): the audit's
    // answer when the patch files are no longer where the task names them.
    if (run.applied && run.applied->contains("touched"))
      promoted["touched_at_apply"] = (*run.applied)["touched"];
  }

  nlohmann::json mfu = {{"value", nullptr},
                        {"reason", "the task does not give flops_per_step and peak_flops"}};
  double flops = constant_number(task, "flops_per_step");
  double peak = constant_number(task, "peak_flops");
  if (flops > 0 && peak > 0 && base_time > 0) {
    mfu = {{"baseline", flops / base_time / peak}, {"reason", "flops_per_step / step time / peak"}};
    if (promoted.is_object() && promoted.value("speedup", 0.0) > 0)
      mfu["promoted"] = flops / (base_time / promoted.value("speedup", 1.0)) / peak;
  }

  auto prior_revision = prior_revision_of(task, run);

  // Best speedup so far over the trials in log order, each with its verdict (report.html's first
  // chart), and the band a single measurement of the baseline falls in (+-1.96 log sd of the
  // doctor's noise): a speedup inside it is indistinguishable from the baseline.
  nlohmann::json progress = nlohmann::json::array();
  double best_so_far = 0.0;
  for (const auto& t : run.trials) {
    if (!t.finished)
      continue;
    nlohmann::json speedup = nullptr;
    if (t.usable() && base_time > 0) {
      speedup = base_time / t.timed_step_time_s;
      best_so_far = std::max(best_so_far, base_time / t.timed_step_time_s);
    }
    progress.push_back({{"trial_id", t.trial_id},
                        {"attempt", t.attempt},
                        {"purpose", t.purpose},
                        {"change", t.config.diff_from(base)},
                        {"verdict", verdict_of(t)},
                        {"speedup", speedup},
                        {"best_so_far", best_so_far > 0 ? nlohmann::json(best_so_far)
                                                        : nlohmann::json(nullptr)}});
  }
  nlohmann::json noise_band = nullptr;
  if (run.noise && run.noise->log_sd > 0)
    noise_band = {{"low", std::exp(-z95 * run.noise->log_sd)},
                  {"high", std::exp(z95 * run.noise->log_sd)},
                  {"log_sd", run.noise->log_sd},
                  {"promotion_bar", 1.0 + promotion_margin(run)}};

  // The N fastest usable configurations (one row per configuration, its fastest trial), then
  // failed ones by trial id, as NeMo AutoTuner ranks its results.
  constexpr std::size_t top_n = 10;
  nlohmann::json top = nlohmann::json::array();
  {
    std::vector<const nlohmann::json*> ok;
    std::vector<const nlohmann::json*> failed_rows;
    std::map<std::string, const nlohmann::json*> best_of;
    for (const auto& t : trials) {
      if (t.value("verdict", "") == "ok") {
        auto key = t["config"].dump();
        auto it = best_of.find(key);
        if (it == best_of.end()
            || t.value("timed_step_time_s", 0.0) < it->second->value("timed_step_time_s", 0.0))
          best_of[key] = &t;
      } else if (t.value("verdict", "") != "lost" && t.value("verdict", "") != "unset") {
        failed_rows.push_back(&t);
      }
    }
    for (const auto& [k, t] : best_of)
      ok.push_back(t);
    std::stable_sort(ok.begin(), ok.end(), [](const nlohmann::json* a, const nlohmann::json* b) {
      return a->value("timed_step_time_s", 0.0) < b->value("timed_step_time_s", 0.0);
    });
    for (const auto* rows : {&ok, &failed_rows})
      for (const auto* t : *rows) {
        if (top.size() >= top_n)
          break;
        top.push_back({{"rank", top.size() + 1},
                       {"trial_id", (*t)["trial_id"]},
                       {"attempt", (*t)["attempt"]},
                       {"change", (*t)["change"]},
                       {"config", (*t)["config"]},
                       {"step_time_s", (*t)["timed_step_time_s"]},
                       {"speedup", (*t)["speedup_vs_baseline"]},
                       {"tokens_per_s", (*t)["tokens_per_s"]},
                       {"mfu", (*t)["mfu"]},
                       {"peak_memory_bytes", (*t)["peak_memory_bytes"]},
                       {"verdict", (*t)["verdict"]}});
      }
  }

  // The promoted change split into its settings: each one's effect alone as the revised time
  // model predicts it (with its interval) and as measured by a usable trial that changed only
  // it; "rest" is the verified speedup over the product of the model's single effects
  // (interactions and what the model misses).
  if (promoted.is_object()) {
    nlohmann::json parts = nlohmann::json::array();
    double product = 1.0;
    if (auto c = store::configuration_from_json(promoted.value("config", nlohmann::json{}))) {
      tuning::feature_space fs{task, &run.priors};
      for (int i : fs.active(task, *c)) {
        const auto& name = fs.names[static_cast<std::size_t>(i)];
        nlohmann::json part = {{"feature", name}, {"model_speedup", nullptr},
                               {"model_low", nullptr}, {"model_high", nullptr},
                               {"measured_alone", nullptr}, {"measured_trial", nullptr}};
        for (const auto& e : prior_revision["effects"])
          if (e.value("feature", "") == name) {
            part["model_speedup"] = e["posterior_speedup"];
            part["model_low"] = e["posterior_low"];
            part["model_high"] = e["posterior_high"];
            product *= e.value("posterior_speedup", 1.0);
          }
        for (const auto& t : run.trials) {
          auto a = fs.active(task, t.config);
          if (t.usable() && base_time > 0 && a.size() == 1 && a.front() == i) {
            part["measured_alone"] = base_time / t.timed_step_time_s;
            part["measured_trial"] = t.trial_id;
          }
        }
        // The ablation that undid this setting before the promotion (decide/minimal_change.hpp):
        // rejected, it confirms the setting matters (the speedup without it is below the
        // bundle's interval).
        part["ablation"] = nullptr;
        const auto k = fs.knob_of[static_cast<std::size_t>(i)];
        const std::string undone =
          k >= 0 ? task.knobs[static_cast<std::size_t>(k)].name + " " : name;
        if (promoted.contains("minimal_change"))
          for (const auto& a : promoted["minimal_change"].value("ablations", nlohmann::json::array()))
            if (a.value("removed", "").rfind(undone, 0) == 0)
              part["ablation"] = {{"index", a["index"]},
                                  {"trial_id", a["trial_id"]},
                                  {"speedup_without", a["speedup"]},
                                  {"ci_low", a["ci_low"]},
                                  {"ci_high", a["ci_high"]},
                                  {"accepted", a["accepted"]}};
        parts.push_back(std::move(part));
      }
    }
    promoted["attribution"] = {{"parts", parts},
                               {"model_product", product},
                               {"rest", promoted.value("speedup", 1.0) / product}};
  }

  auto report = nlohmann::json{{"run", run.run_id},
          {"task", task.name},
          {"task_file", task.source},
          {"seed", run.seed},
          {"hardware", run.contract_doc ? run.contract_doc->value("hardware", nlohmann::json{})
                                        : nlohmann::json{}},
          {"contract_hash",
           run.contract_doc ? run.contract_doc->value("contract_hash", "") : std::string{}},
          {"baseline",
           {{"config", store::to_json(base)},
            {"step_time_s", base_time},
            {"noise", run.doctor_doc ? run.doctor_doc->value("noise", nlohmann::json{})
                                     : nlohmann::json{}},
            {"phases_s", run.doctor_doc ? run.doctor_doc->value("phases_s", nlohmann::json{})
                                        : nlohmann::json{}},
            {"measurement", run.doctor_doc
                              ? run.doctor_doc->value("measurement", nlohmann::json{})
                              : nlohmann::json{}}}},
          {"trials", trials},
          {"reverifications", reverifications},
          {"rejected", rejected},
          {"clock_check", clock_note(task, run)},
          {"contract_coverage", coverage_of(task)},
          {"promoted", promoted},
          {"promotion_decision", run.promotion ? *run.promotion : nlohmann::json{}},
          {"failed_trials_cost", failed},
          {"device_seconds_total", spend.total_s},
          {"device_seconds_lost",
           {{"attempts", spend.lost_attempts}, {"device_seconds", spend.lost_s}}},
          {"mfu", mfu},
          {"prior_revision", prior_revision},
          {"search_progress", progress},
          {"noise_band", noise_band},
          {"top_configurations", top},
          {"memory_model", memory_model_of(task, run)},
          {"loss_invariant", loss_invariant_of(task, run)}};
  // Settings the planner excludes or avoids for the failures they caused, with the trials that
  // convict them (tuning::proposal_batch::blamed, as the last ProposalsMade logged it).
  report["blamed"] = run.last_proposals && run.last_proposals->contains("blamed")
                       ? (*run.last_proposals)["blamed"]
                       : nlohmann::json::array();
  if (task.llm.enabled || !run.llm.empty())
    report["llm"] = llm_report(task, run);
  if (!run.experience_seeds.empty())
    report["experience_seeds"] = experience_seeds_report(task, run, base, base_time);
  if (run.experience_pack.is_object())
    report["experience"] = experience_summary(run, base_time);
  return report;
}

std::string render_markdown(const nlohmann::json& r) {
  std::ostringstream md;
  md << "# InfraRSI report: " << r.value("task", "") << " (run " << r.value("run", "") << ")\n\n";
  const auto& b = r["baseline"];
  // Before the doctor's calibration (a run stopped at init or in the doctor) there is no noise.
  const auto noise = b["noise"].is_object() ? b["noise"] : nlohmann::json::object();
  md << "## Baseline\n\n"
     << "- step time: " << fixed(b.value("step_time_s", 0.0), 4) << " s (mean of "
     << noise.value("runs", 0) << " runs)\n"
     << "- noise: cv " << fixed(100 * noise.value("cv", 0.0), 2) << "%, minimum detectable speedup "
     << fixed(100 * noise.value("min_detectable_speedup", 0.0), 2) << "% (alpha 0.05, power 0.8)\n";
  if (b.contains("measurement") && b["measurement"].is_object()) {
    // The adaptive doctor's verdict, and every disturbed repeat.
    const auto& m = b["measurement"];
    md << "- measurement (" << m.value("rule", std::string{}) << "): "
       << (m.value("reached", false) ? "" : "**WARNING** ") << m.value("message", std::string{})
       << "\n";
    for (const auto& d : m.value("disturbed", nlohmann::json::array()))
      md << "- **disturbed baseline** trial " << d.value("trial_id", 0) << "."
         << d.value("attempt", 0) << ": " << fixed(d.value("step_time_s", 0.0), 4)
         << " s disagrees with the other repeats beyond the noise model"
         << (d.contains("z") ? " (z " + fixed(d.value("z", 0.0), 1) + ")" : std::string{}) << "; "
         << (d.value("action", std::string{}) == "kept"
               ? "it was measured again and kept: the machine itself is this noisy"
               : std::string{"re-measured"})
         << "\n";
  }
  if (b.contains("phases_s") && b["phases_s"].is_object() && !b["phases_s"].empty()) {
    md << "- phases per step:";
    for (const auto& [name, s] : b["phases_s"].items())
      md << " " << name << " " << fixed(s.get<double>(), 4) << " s;";
    md << "\n";
  }
  if (r.contains("loss_invariant") && r["loss_invariant"].is_object()) {
    // What each trial's loss was compared with, and the tolerance (loss units).
    const auto& li = r["loss_invariant"];
    const auto mode = li.value("mode", std::string{"pointwise"});
    const char* key = mode == "window" ? "windows" : mode == "eval" ? "eval_steps" : "steps";
    const auto rows = li.value(key, nlohmann::json::array());
    md << "- loss invariant: " << mode;
    if (mode == "window")
      md << " (mean training loss over windows of " << li.value("loss_window", 0)
         << " steps; tolerance for a trial as noisy as the baseline, 4 standard errors)";
    else if (mode == "eval")
      md << " (eval loss on fixed data at the baseline's eval steps)";
    else
      md << " (loss at each compared step; rtol " << li.value("loss_rtol", 0.0) << ", atol "
         << li.value("loss_atol", 0.0) << ", or 3x the baselines' spread)";
    md << ":";
    if (rows.empty())
      md << " no reference (the doctor did not calibrate)";
    std::size_t shown = 0;
    for (const auto& w : rows) {
      if (++shown > 12) {
        md << " ... (" << rows.size() << " in all, report.json `loss_invariant`)";
        break;
      }
      if (mode == "window")
        md << " steps " << w.value("first", 0) << "-" << w.value("last", 0);
      else
        md << " step " << w.value("step", 0);
      md << " " << fixed(w.value("reference", 0.0), 4) << " +/- "
         << fixed(w.value("tolerance", 0.0), 4) << ";";
    }
    md << "\n";
  }
  md << "\n## Result\n\n";
  const auto& p = r["promoted"];
  if (p.is_object()) {
    md << "**Promoted: " << p.value("change", "") << "** — verified speedup "
       << fixed(p.value("speedup", 1.0), 3) << "x, 95% interval ["
       << fixed(p.value("ci_low", 0.0), 3) << ", " << fixed(p.value("ci_high", 0.0), 3)
       << "] from " << p.value("pairs", 0) << " interleaved pairs.\n\n";
    if (p.contains("patch_paths") && !p["patch_paths"].empty()) {
      md << "Source paths touched by the promoted patches:\n\n";
      for (const auto& [patch, paths] : p["patch_paths"].items())
        for (const auto& path : paths)
          md << "- `" << path.get<std::string>() << "` (" << patch << ")\n";
      md << "\n";
    }
  } else {
    md << "Nothing promoted: "
       << (r["promotion_decision"].is_object()
             ? r["promotion_decision"].value("reason", std::string{"no candidate"})
             : std::string{"no candidate"})
       << "\n\n";
  }
  if (p.is_object() && p.contains("minimal_change")) {
    const auto& m = p["minimal_change"];
    md << "## Minimal promoted change\n\nThe re-verified bundle (trial " << m.value("bundle_trial", 0)
       << ": " << m.value("bundle_change", "") << ", " << fixed(m.value("bundle_speedup", 1.0), 3)
       << "x [" << fixed(m.value("bundle_ci_low", 0.0), 3) << ", "
       << fixed(m.value("bundle_ci_high", 0.0), 3)
       << "]) with its changes the time model credits least undone, one at a time; an ablation "
          "is kept when its own re-verification is promotable and its speedup is at least the "
          "bundle's lower bound and it is not shown (one-sided 95 %) to lose more than the "
          "promotion margin against the bundle "
          "(docs/planner.md \"Minimal promoted change\").\n\n"
       << "| ablation | change undone | model's speedup for it | trial | speedup without it | "
          "95% interval | kept | why |\n|---|---|---|---|---|---|---|---|\n";
    for (const auto& a : m.value("ablations", nlohmann::json::array())) {
      double credit = 1.0;
      for (const auto& o : m.value("order", nlohmann::json::array()))
        if (o.value("change", "") == a.value("removed", ""))
          credit = o.value("model_speedup", 1.0);
      auto why = a.value("reason", "");
      for (auto& c : why)
        if (c == '|' || c == '\n')
          c = ' ';
      md << "| " << a.value("index", 0) << " | " << a.value("removed", "") << " | "
         << fixed(credit, 3) << "x | " << a.value("trial_id", 0) << " | "
         << (a["speedup"].is_number() ? fixed(a["speedup"].get<double>(), 3) + "x" : std::string{"-"})
         << " | "
         << (a["ci_low"].is_number() && a["ci_high"].is_number()
               ? "[" + fixed(a["ci_low"].get<double>(), 3) + ", "
                   + fixed(a["ci_high"].get<double>(), 3) + "]"
               : std::string{"-"})
         << " | " << (a.value("accepted", false) ? "yes: undone" : "no") << " | " << why
         << " |\n";
    }
    if (!m.value("skipped", nlohmann::json::array()).empty()) {
      md << "\nNot tried (undoing it breaks a constraint):";
      for (const auto& s : m["skipped"])
        md << " " << s.get<std::string>() << ";";
      md << "\n";
    }
    md << "\n";
  }
  md << "## Re-verification\n\n";
  if (r["reverifications"].empty())
    md << "No candidate was re-verified.\n\n";
  else {
    md << "| candidate trial | change | round | speedup | 95% interval | promotable | why |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (const auto& v : r["reverifications"]) {
      auto why = v.value("reason", "");
      for (auto& c : why)
        if (c == '|' || c == '\n')
          c = ' ';
      md << "| " << v.value("candidate_trial", 0) << " | " << v.value("change", "") << " | "
         << v.value("round", 1) << " | " << fixed(v.value("speedup", 0.0), 3) << "x | ["
         << fixed(v.value("ci_low", 0.0), 3) << ", "
         << (v["ci_high"].is_number() ? fixed(v["ci_high"].get<double>(), 3) : std::string{"inf"})
         << "] | " << (v.value("promotable", false) ? "yes" : "no") << " | " << why << " |\n";
    }
    md << "\n";
    for (const auto& v : r["reverifications"]) {
      if (!v.contains("looks"))
        continue;
      md << "Sequential looks of candidate " << v.value("candidate_trial", 0) << " (round "
         << v.value("round", 1) << "; O'Brien-Fleming group-sequential test, at most "
         << v.value("looks_max", 0) << " looks, overall alpha 0.05; margin "
         << fixed(100 * v.value("promotion_margin", 0.0), 2) << "%):\n\n"
         << "| look | pairs | critical z | speedup | repeated 95% interval | decision |\n"
         << "|---|---|---|---|---|---|\n";
      for (const auto& l : v["looks"])
        md << "| " << l.value("look", 0) << " | " << l.value("pairs", 0) << " | "
           << fixed(l.value("critical_z", 0.0), 3) << " | " << fixed(l.value("speedup", 0.0), 3)
           << "x | [" << fixed(l.value("ci_low", 0.0), 3) << ", "
           << (l["ci_high"].is_number() ? fixed(l["ci_high"].get<double>(), 3)
                                        : std::string{"inf"})
           << "] | " << l.value("decision", std::string{}) << " |\n";
      md << "\n";
    }
  }
  if (r.contains("blamed") && r["blamed"].is_array() && !r["blamed"].empty()) {
    md << "## Settings blamed for failures\n\nThe planner's failure model (docs/planner.md): an "
          "excluded setting is never proposed again; a suspected one only when no candidate "
          "predicted safer remains.\n\n";
    for (const auto& entry : r["blamed"])
      if (entry.is_string())
        md << "- " << entry.get<std::string>() << "\n";
    md << "\n";
  }
  if (r.contains("memory_model") && r["memory_model"].value("fitted", false)
      && r["memory_model"].contains("boundary") && !r["memory_model"]["boundary"].empty()) {
    md << "## OOM boundary (memory model)\n\nP(OOM) of each value of a numeric knob, the other "
          "settings as they are around the baseline or the promoted configuration, from the "
          "planner's censored peak-memory model against a capacity of "
       << fixed(r["memory_model"].value("capacity_bytes", 0.0) / 1048576.0, 0)
       << " MiB. *fits up to*: the largest value with P(OOM) < 0.5.\n\n"
       << "| around | knob | now | fits up to | P(OOM) by value |\n|---|---|---|---|---|\n";
    for (const auto& row : r["memory_model"]["boundary"]) {
      std::string by_value;
      for (const auto& v : row["values"])
        by_value += (by_value.empty() ? "" : ", ") + json_scalar_text(v["value"]) + ": "
                    + fixed(v.value("p_oom", 0.0), 2);
      md << "| " << row.value("around", "") << " | " << row.value("knob", "") << " | "
         << json_scalar_text(row["current"]) << " | "
         << (row["fits_up_to"].is_null() ? std::string{"none"}
                                         : json_scalar_text(row["fits_up_to"]))
         << " | " << by_value << " |\n";
    }
    md << "\n";
  }
  md << "## Trials\n\nTrial numbers read ID.ATTEMPT: a trial lost in flight (its node vanished or "
        "the run was killed) is re-run under the same id as the next attempt.\n\n"
     << "| trial | purpose | change | outcome | step time (s) | speedup | notes |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (const auto& t : r["trials"]) {
    std::string notes;
    for (const auto& v : t["violations"])
      notes += (notes.empty() ? "" : "; ") + v.get<std::string>();
    if (t.value("outcome", "") != "ok" && t.value("outcome", "") != "contract_violation")
      notes += (notes.empty() ? "" : "; ") + t.value("detail", "");
    for (auto& c : notes)
      if (c == '|' || c == '\n')
        c = ' ';
    md << "| " << t.value("trial_id", 0) << "." << t.value("attempt", 0) << " | "
       << t.value("purpose", "") << " | " << t.value("change", "") << " | "
       << t.value("outcome", "") << " | "
       << (t.value("timed_step_time_s", 0.0) > 0 ? fixed(t.value("timed_step_time_s", 0.0), 4)
                                                 : std::string{"-"})
       << " | "
       << (t["speedup_vs_baseline"].is_number()
             ? fixed(t["speedup_vs_baseline"].get<double>(), 3) + "x"
             : std::string{"-"})
       << " | " << notes << " |\n";
  }
  md << "\n## Rejected, and why\n\n";
  md << "Contract: " << r.value("clock_check", "") << "\n\n";
  if (r.contains("contract_coverage") && !r["contract_coverage"]["vacuous"].empty()) {
    const auto& cov = r["contract_coverage"];
    md << "Checks this task's output cannot decide (`infrarsi check TASK`):\n\n";
    for (const auto& c : cov["vacuous"])
      md << "- " << c.value("code", "") << " (" << c.value("status", "") << "): "
         << c.value("evidence", "") << "\n";
    md << "\nThe work is enforced instead by ";
    if (cov["work_enforced_by"].empty())
      md << "nothing: the task has no constraints and no constants.\n\n";
    else {
      md << "the task:\n\n";
      for (const auto& e : cov["work_enforced_by"])
        md << "- " << e.get<std::string>() << "\n";
      md << "\n";
    }
  }
  for (const auto& x : r["rejected"]) {
    if (x.contains("patch"))
      md << "- patch " << x.value("patch", "") << ": ";
    else if (x.contains("trial_id"))
      md << "- trial " << x.value("trial_id", 0) << "." << x.value("attempt", 0) << " ("
         << x.value("purpose", "") << ", " << x.value("change", "") << "): ";
    else
      md << "- candidate trial " << x.value("candidate_trial", 0) << " ("
         << x.value("change", "") << "): ";
    md << x.value("outcome", "") << " [";
    for (std::size_t i = 0; i < x["reasons"].size(); ++i)
      md << (i > 0 ? ", " : "") << x["reasons"][i].get<std::string>();
    md << "]";
    for (const auto& e : x["evidence"]) {
      auto text = e.get<std::string>();
      for (auto& c : text)
        if (c == '\n')
          c = ' ';
      if (!text.empty())
        md << " — " << text;
    }
    md << "\n";
  }
  if (r["rejected"].empty())
    md << "Nothing was rejected.\n";
  md << "\n## Cost of failed trials\n\n";
  if (r["failed_trials_cost"].empty())
    md << "No failed trials.\n";
  for (const auto& [o, c] : r["failed_trials_cost"].items())
    md << "- " << o << ": " << c.value("trials", 0) << " trial(s), "
       << fixed(c.value("device_seconds", 0.0), 1) << " device-seconds\n";
  md << "\nTotal: " << fixed(r.value("device_seconds_total", 0.0), 1) << " device-seconds";
  if (r.contains("device_seconds_lost") && r["device_seconds_lost"].value("attempts", 0) > 0)
    md << ", of which " << fixed(r["device_seconds_lost"].value("device_seconds", 0.0), 1)
       << " on " << r["device_seconds_lost"].value("attempts", 0)
       << " lost attempt(s) (charged from dispatch to the loss or interruption, at most the "
          "trial timeout)";
  md << ".\n";
  if (r.contains("prior_revision") && r["prior_revision"].is_object()) {
    const auto& pr = r["prior_revision"];
    auto rho = [](const nlohmann::json& v) {
      return v.is_number() ? fixed(v.get<double>(), 2) : std::string{"n/a (fewer than 3 trials or no spread)"};
    };
    md << "\n## Priors revised by this run\n\n"
       << "Search policy " << pr.value("policy", "") << ". Rank correlation (Spearman) of predicted "
       << "and measured speedups over the " << pr.value("search_trials", 0)
       << " usable search trials: priors alone "
       << (pr.value("priors_given", false) ? rho(pr["spearman_prior"])
                                           : std::string{"n/a (the priors said nothing: no knowledge-base entry for this task)"})
       << "; time model fitted on the trials before each one " << rho(pr["spearman_posterior"])
       << ".\n\n"
       << "Posterior speedup: the revised model's prediction for the baseline with only that "
          "setting changed. Settings that ran in exactly the same trials cannot be told apart "
          "by the data (their split follows the priors); they are named in the last column.\n\n"
       << "| setting | prior speedup | posterior speedup | posterior log sd | usable trials (incl. re-verification) | not separable from |\n"
       << "|---|---|---|---|---|---|\n";
    for (const auto& e : pr["effects"]) {
      if (e["prior_speedup"].is_null() && e.value("trials", 0) == 0)
        continue;
      md << "| " << e.value("feature", "") << " | "
         << (e["prior_speedup"].is_number() ? fixed(e["prior_speedup"].get<double>(), 3) + "x" : std::string{"none"})
         << " | " << fixed(e.value("posterior_speedup", 1.0), 3) << "x | "
         << fixed(e.value("posterior_log_sd", 0.0), 3) << " | " << e.value("trials", 0) << " | ";
      std::string sep;
      for (const auto& c : e.value("confounded_with", nlohmann::json::array()))
        md << sep << c.get<std::string>(), sep = ", ";
      md << " |\n";
    }
  }
  if (r.contains("experience") && r["experience"].is_object()) {
    const auto& e = r["experience"];
    md << "\n## Experience\n\nServed `" << e.value("mode", "") << "` (docs/experience.md): "
       << experience_pack_text(e) << "; " << e.value("proposed", 0)
       << " proposed in the initial design";
    md << ".";
    if (e.contains("best_search_trial")) {
      const auto& best = e["best_search_trial"];
      md << " The search's fastest trial was search trial " << best.value("index", 0) << " of "
         << e.value("search_trials", 0) << " (" << fixed(best.value("speedup", 1.0), 3) << "x"
         << (best.value("seed", false) ? ", an experience seed" : "") << ").";
    }
    if (e.contains("prior_adjustment")) {
      const auto& adj = e["prior_adjustment"];
      md << " Priors of " << adj.value("effects", 0) << " setting(s) and patch(es) ("
         << adj.value("memory_prices", 0) << " with a memory price) came from run "
         << adj.value("run", "") << " on " << adj.value("origin_hardware", "") << " ("
         << adj.value("match", "") << "): what its models learnt.";
    }
    md << "\n";
  }
  if (r.contains("experience_seeds") && r["experience_seeds"].is_array()) {
    md << "\n## Experience seeds\n\nConfigurations promoted in earlier runs of the same workload "
          "(the experience bank), each proposed in the initial design or with the reason it was "
          "not:\n\n";
    for (const auto& s : r["experience_seeds"]) {
      md << "- " << s.value("change", std::string{});
      if (s.contains("origin_hardware"))
        md << " (from " << s.value("origin_hardware", std::string{}) << ", "
           << s.value("match", std::string{})
           << (s.contains("speedup_there") && s["speedup_there"].is_number()
                 ? ", " + fixed(s["speedup_there"].get<double>(), 3) + "x there"
                 : std::string{})
           << ")";
      if (s.contains("pack_sha256") && s["pack_sha256"].is_string())
        md << " imported from cluster " << s.value("origin", std::string{}).substr(0, 12)
           << " through pack " << s["pack_sha256"].get<std::string>().substr(0, 12)
           << " signed by cluster " << s.value("via", std::string{}).substr(0, 12);
      md << ": ";
      if (s.contains("trial"))
        md << "proposed as trial " << s.value("trial", 0) << ", "
           << s.value("outcome", std::string{})
           << (s["speedup"].is_number() ? " " + fixed(s["speedup"].get<double>(), 3) + "x"
                                        : std::string{});
      else
        md << "not proposed: " << s.value("reason", std::string{});
      md << "\n";
    }
  }
  if (r.contains("llm") && r["llm"].is_object()) {
    const auto& l = r["llm"];
    md << "\n## LLM proposer\n\n"
       << "Model " << l.value("model", "") << " at " << l.value("url", "") << ": "
       << l.value("requests", 0) << " requests, " << l.value("calls", 0) << " HTTP calls, "
       << l.value("prompt_tokens", 0) << " prompt + " << l.value("completion_tokens", 0)
       << " completion tokens, " << l.value("invalid_answers", 0)
       << " invalid answers. Priors used: " << l.value("priors_source", "") << ".\n";
    for (const auto& patch : l["patches"])
      md << "- patch `" << patch.value("name", "") << "`: " << patch.value("status", "") << "\n";
    if (l.contains("rounds") && l["rounds"].size() > 1) {
      auto rho_text = [](const nlohmann::json& v) {
        return v.is_number() ? fixed(v.get<double>(), 2) : std::string{"n/a"};
      };
      md << "\nRounds: the model asked again during the search. Spearman's rho of the priors "
            "in use vs the measured speedups of the search trials run under them, before and "
            "after the planner's revision (the time model fitted on the trials before each):\n\n"
         << "| round | after search trials | why | priors | trials | rho before | rho after |\n"
         << "|---|---|---|---|---|---|---|\n";
      for (const auto& x : l["rounds"])
        md << "| " << x.value("round", 0) << " | " << x.value("after_search_trials", 0) << " | "
           << x.value("why", "") << " | "
           << (x.value("priors_valid", false) ? "new" : "kept") << " | " << x.value("trials", 0)
           << " | " << rho_text(x["spearman_prior"]) << " | " << rho_text(x["spearman_revised"])
           << " |\n";
    }
  }
  md << "\nMFU: ";
  if (r["mfu"].contains("baseline"))
    md << "baseline " << fixed(100 * r["mfu"].value("baseline", 0.0), 2) << "%";
  else
    md << "not computed (" << r["mfu"].value("reason", "") << ")";
  md << "\n";
  return md.str();
}

} // namespace infrarsi::decide
