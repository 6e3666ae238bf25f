#include "decide/decisions.hpp"
#include "decide/experience_serving.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <iomanip>
#include <sstream>

#include "adapters/environment.hpp"
#include "decide/llm.hpp"
#include "decide/minimal_change.hpp"
#include "decide/next_step.hpp"
#include "decide/patch_exclusion.hpp"
#include "decide/report.hpp"
#include "messages/errc.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/experience_seeds.hpp"
#include "tuning/stats.hpp"

namespace infrarsi::decide {

namespace {

/// The clock rule and the doctor's skew a run's trials are judged by: ContractLocked
/// "clock_rule" (tuning::clock_rule_name); a run locked before the rule was recorded was judged
/// by window_sum/0; a run not yet locked (or naming a rule this build does not know) gets the
/// current rule. Offset and skew are BaselineCalibrated "clock" "offset_s", "skew_s" (0 before
/// the doctor).
tuning::clock_options clock_options_of(const store::run_state& run) {
  tuning::clock_options o;
  if (run.contract_doc && run.contract_doc->is_object()) {
    auto it = run.contract_doc->find("clock_rule");
    o.rule = tuning::clock_rule::window_sum;
    if (it != run.contract_doc->end() && it->is_string())
      o.rule = tuning::parse_clock_rule(it->get<std::string>()).value_or(tuning::current_clock_rule);
  }
  if (run.doctor_doc && run.doctor_doc->is_object()) {
    auto c = run.doctor_doc->find("clock");
    if (c != run.doctor_doc->end() && c->is_object()) {
      auto number = [&c](const char* key) {
        auto v = c->find(key);
        return v != c->end() && v->is_number() ? v->get<double>() : 0.0;
      };
      o.offset_s = number("offset_s");
      o.skew_s = number("skew_s");
    }
  }
  return o;
}

/// An attempt that a later attempt of the same trial replaces (lost and re-queued, or
/// re-measured after failing only the clock check): its result is not a measurement.
bool superseded(const store::run_state& run, const tuning::trial_record& t) {
  for (const auto& other : run.trials)
    if (other.trial_id == t.trial_id && other.attempt > t.attempt)
      return true;
  return false;
}

} // namespace

run_budget budget_of(const tuning::task_spec& task, const store::run_state& run) {
  run_budget b;
  b.trials = task.budget.trials;
  b.baseline_repeats = task.budget.baseline_repeats;
  b.verify_top = task.budget.verify_top;
  b.verify_repeats = task.budget.verify_repeats;
  b.wall_clock_s = task.budget.wall_clock_s;
  if (run.contract_doc && run.contract_doc->is_object()) {
    auto it = run.contract_doc->find("budget");
    if (it != run.contract_doc->end() && it->is_object()) {
      auto u32 = [&it](const char* key, std::uint32_t fallback) {
        auto v = it->find(key);
        return v != it->end() && v->is_number_integer() && v->get<std::int64_t>() >= 0
                 ? v->get<std::uint32_t>()
                 : fallback;
      };
      b.trials = u32("trials", b.trials);
      b.baseline_repeats = u32("baseline_repeats", b.baseline_repeats);
      b.verify_top = u32("verify_top", b.verify_top);
      b.verify_repeats = u32("verify_repeats", b.verify_repeats);
      auto w = it->find("wall_clock_s");
      if (w != it->end() && w->is_number())
        b.wall_clock_s = w->get<double>();
      if (minimal_change_rule(run))
        b.ablations = u32("ablations", 0);
      if (adaptive_measurement(run)) {
        b.adaptive = true;
        auto t = it->find("target_mds");
        b.target_mds = t != it->end() && t->is_number() ? t->get<double>() : task.budget.target_mds;
        b.max_baseline_repeats =
          std::max(b.baseline_repeats, u32("max_baseline_repeats", task.budget.max_baseline_repeats));
        b.max_verify_repeats =
          std::max(b.verify_repeats, u32("max_verify_repeats", task.budget.max_verify_repeats));
      }
    }
  }
  if (!b.adaptive) { // fixed/0: exactly the repeats asked for
    b.max_baseline_repeats = b.baseline_repeats;
    b.max_verify_repeats = b.verify_repeats;
  }
  return b;
}

bool adaptive_measurement(const store::run_state& run) {
  if (!run.contract_doc || !run.contract_doc->is_object())
    return false;
  auto it = run.contract_doc->find("measurement_rule");
  return it != run.contract_doc->end() && it->is_string()
         && it->get<std::string>() == current_measurement_rule;
}

double promotion_margin(const store::run_state& run) {
  double mds = run.noise ? run.noise->min_detectable_speedup : 0.0;
  if (!adaptive_measurement(run))
    return mds;
  auto target = budget_of(tuning::task_spec{}, run).target_mds;
  return target > 0 ? std::min(mds, target) : mds;
}

namespace {

/// The step times of the contract's timed window, in step order (empty when a step is missing).
std::vector<double> timed_window(const tuning::contract_spec& c,
                                 const std::vector<tuning::step_point>& steps) {
  std::vector<double> out;
  for (auto want = c.timed_first; want <= c.timed_last; ++want) {
    auto it = std::find_if(steps.begin(), steps.end(),
                           [want](const tuning::step_point& s) { return s.step == want; });
    if (it == steps.end())
      return {};
    out.push_back(it->step_time_s);
  }
  return out;
}

/// A baseline attempt the doctor measures with: ended ok with its timed window.
bool doctor_usable(const tuning::task_spec& task, const tuning::trial_record& t) {
  return t.kind == tuning::purpose_kind::baseline && t.finished
         && t.outcome == tuning::trial_outcome::ok
         && tuning::timed_step_time(task.contract, t.steps) > 0;
}

std::string percent(double fraction, int digits = 1) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << 100.0 * fraction << " %";
  return os.str();
}

} // namespace

doctor_plan plan_doctor(const tuning::task_spec& task, const store::run_state& run) {
  doctor_plan plan;
  const auto budget = budget_of(task, run);
  const auto latest = run.latest_attempts();
  std::vector<const tuning::trial_record*> usable;
  std::uint32_t trials_run = 0;
  for (const auto* t : latest)
    if (t->kind == tuning::purpose_kind::baseline) {
      ++trials_run;
      if (doctor_usable(task, *t))
        usable.push_back(t);
    }
  // Disturbed repeats: re-measured once (as the trial's next attempt), then they stand. An
  // earlier attempt that ended with a result is such a repeat; a lost one measured nothing. In
  // trial order, as the latest attempts: the order of the log differs when an attempt was lost
  // and re-queued after later trials were proposed.
  nlohmann::json disturbed = nlohmann::json::array();
  for (const auto* latest_t : latest)
    if (latest_t->kind == tuning::purpose_kind::baseline)
      for (const auto& t : run.trials)
        if (t.trial_id == latest_t->trial_id && t.attempt < latest_t->attempt && t.finished
            && t.outcome != tuning::trial_outcome::lost)
          disturbed.push_back({{"trial_id", t.trial_id},
                               {"attempt", t.attempt},
                               {"step_time_s", tuning::timed_step_time(task.contract, t.steps)},
                               {"action", "re-measured"}});
  std::vector<tuning::repeat_steps> repeats;
  for (const auto* t : usable)
    repeats.push_back(tuning::summarize_repeat(timed_window(task.contract, t->steps)));
  std::vector<double> z;
  auto flags = tuning::disturbed_repeats(repeats, &z);
  for (std::size_t i = 0; i < usable.size(); ++i) {
    if (!flags[i])
      continue;
    const auto* t = usable[i];
    bool measured_before = false; // an earlier attempt that ended (not lost): this is the re-run
    for (const auto& o : run.trials)
      measured_before = measured_before
                        || (o.trial_id == t->trial_id && o.attempt < t->attempt && o.finished
                            && o.outcome != tuning::trial_outcome::lost);
    bool again = !measured_before && t->attempt + 1 < max_attempts;
    if (again)
      plan.remeasure.emplace_back(t->trial_id, t->attempt);
    disturbed.push_back({{"trial_id", t->trial_id},
                         {"attempt", t->attempt},
                         {"step_time_s", tuning::timed_step_time(task.contract, t->steps)},
                         {"z", z[i]},
                         {"action", again ? "re-measure" : "kept"}});
  }
  std::vector<double> times;
  for (const auto* t : usable)
    times.push_back(tuning::timed_step_time(task.contract, t->steps));
  auto noise = tuning::estimate_noise(times);
  const auto n = usable.size();
  // Reached when the minimum detectable speedup at the 80 % upper confidence limit of the
  // log-sd is at most the target: a lucky low spread of the first few repeats does not stop the
  // doctor (with 3 repeats the limit is 2.1x the estimate).
  // The floor (timer resolution, unseen drift) bounds the limit from below, not the spread.
  const double sd_upper =
    std::max(tuning::log_sd_upper_limit(tuning::estimate_noise(times, 0.0).log_sd, n),
             noise.log_sd > 0 ? 0.005 : 0.0);
  const double mds_upper = tuning::min_detectable_speedup(sd_upper, n);
  const bool reached = n >= 2 && mds_upper <= budget.target_mds;
  const auto needed = tuning::repeats_for_mds(sd_upper, budget.target_mds);
  if (plan.remeasure.empty() && n >= 2 && !reached && trials_run < budget.max_baseline_repeats) {
    auto want = std::max<std::size_t>(needed, n + 1) - n;
    plan.more = static_cast<std::uint32_t>(
      std::min<std::size_t>(want, budget.max_baseline_repeats - trials_run));
  }
  auto& m = plan.measurement;
  m = {{"rule", current_measurement_rule},
       {"target_mds", budget.target_mds},
       {"max_baseline_repeats", budget.max_baseline_repeats},
       {"runs", n},
       {"baseline_trials", trials_run},
       {"log_sd", noise.log_sd},
       {"cv", noise.cv},
       {"mds_reached", noise.min_detectable_speedup},
       {"log_sd_upper80", sd_upper},
       {"mds_upper80", mds_upper},
       {"reached", reached},
       {"runs_needed", needed},
       {"disturbed", disturbed}};
  m["verdict"] = reached ? "target_reached" : n < 2 ? "too_few_runs" : "max_repeats";
  const auto window = task.contract.timed_last >= task.contract.timed_first
                        ? task.contract.timed_last - task.contract.timed_first + 1
                        : 0u;
  if (reached) {
    m["message"] = "minimum detectable speedup " + percent(noise.min_detectable_speedup)
                   + " (" + percent(mds_upper) + " at the 80 % upper limit of the noise) reached "
                   + "the target " + percent(budget.target_mds) + " with " + std::to_string(n)
                   + " baseline runs (CV " + percent(noise.cv, 2) + ")";
  } else if (n >= 2) {
    // What would reach the target: more repeats; a quieter machine (the CV at which the most
    // repeats would do); more timed steps, when the runs' spread is their steps' noise (a
    // median's variance falls as 1 / steps), not a run-to-run variation that steps cannot
    // average away.
    const auto cap = std::max<std::size_t>(budget.max_baseline_repeats, 2);
    // The measured log-sd at which `cap` repeats would reach the target (its 80 % upper limit
    // at the target's).
    const double sd_at_cap =
      tuning::log_sd_for_mds(cap, budget.target_mds) / tuning::log_sd_upper_limit(1.0, cap);
    std::vector<double> se2;
    for (const auto& r : repeats) {
      double se = tuning::median_standard_error(r);
      se2.push_back(std::isfinite(se) ? se * se : 0.0);
    }
    const double within = tuning::median(se2);
    const double run_level = std::max(0.0, noise.log_sd * noise.log_sd - within);
    nlohmann::json steps = nullptr;
    if (window > 0 && within > 0 && run_level < sd_at_cap * sd_at_cap)
      steps = static_cast<std::uint64_t>(
        std::ceil(window * within / (sd_at_cap * sd_at_cap - run_level)));
    m["would_reach"] = {{"runs", needed},
                        {"cv_at_max_repeats", sd_at_cap},
                        {"timed_steps", steps},
                        {"timed_steps_now", window}};
    std::string msg = "the machine is too noisy to reach the target minimum detectable speedup "
                      + percent(budget.target_mds) + " within " + std::to_string(cap)
                      + " baseline runs: CV " + percent(noise.cv, 2) + ", minimum detectable "
                      + "speedup " + percent(noise.min_detectable_speedup) + " ("
                      + percent(mds_upper) + " at the 80 % upper limit of the noise) reached with "
                      + std::to_string(n) + " runs; the target needs "
                      + std::to_string(needed) + " runs at this noise (budget."
                      + "max_baseline_repeats), or a CV of at most " + percent(sd_at_cap, 2)
                      + " (a quieter machine)";
    if (steps.is_number())
      msg += ", or " + std::to_string(steps.get<std::uint64_t>()) + " timed steps per run (now "
             + std::to_string(window) + ")";
    else
      msg += "; more timed steps would not do: the runs differ by more than their steps' "
             "noise explains";
    if (plan.more > 0 || !plan.remeasure.empty())
      msg = "not yet: " + msg;
    m["message"] = msg;
  } else {
    m["message"] = "fewer than two baseline runs completed their timed window: no noise estimate";
  }
  return plan;
}

sequential_state reverification_looks(const store::run_state& run, std::uint64_t candidate,
                                      std::uint32_t round) {
  sequential_state st;
  const auto budget = budget_of(tuning::task_spec{}, run);
  st.pairs_per_look = std::max<std::uint32_t>(1, budget.verify_repeats);
  st.looks_max = std::max<std::uint32_t>(1, budget.max_verify_repeats / st.pairs_per_look);
  // The latest attempt of each interleaved run, in trial order: a lost attempt re-queued (or one
  // re-measured after the clock check) is replaced by its next attempt in its trial's place, so
  // a run that lost some pairs' runs and re-ran them looks at the same pairs as one that never
  // lost them (the log's order puts a re-queued attempt after the trials proposed before it).
  for (const auto* tp : run.latest_attempts()) {
    const auto& t = *tp;
    bool mine = t.candidate_trial == candidate && t.round == round;
    bool base = mine && t.kind == tuning::purpose_kind::verify_baseline;
    bool cand_run = mine && t.kind == tuning::purpose_kind::verify_candidate;
    if (!base && !cand_run)
      continue;
    if (!t.finished || t.outcome == tuning::trial_outcome::lost)
      continue;
    if (!t.usable()) {
      ++st.failed;
      continue;
    }
    (base ? st.baseline_times_s : st.candidate_times_s).push_back(t.timed_step_time_s);
  }
  const double margin = std::log1p(promotion_margin(run));
  const double base_sd = run.noise ? run.noise->log_sd : 0.0;
  const auto shape = tuning::sequential_boundary::obrien_fleming;
  for (std::uint32_t k = 1; k <= st.looks_max; ++k) {
    const std::size_t pairs = static_cast<std::size_t>(k) * st.pairs_per_look;
    if (st.baseline_times_s.size() < pairs || st.candidate_times_s.size() < pairs)
      break;
    if (pairs < 2)
      continue; // no spread from one pair: the first look with two (verify_repeats = 1)
    sequential_look look;
    look.look = k;
    look.pairs = static_cast<std::uint32_t>(pairs);
    look.critical_z = tuning::group_sequential_critical(shape, k, st.looks_max);
    look.nominal_alpha = tuning::group_sequential_nominal_alpha(shape, k, st.looks_max);
    std::vector<double> a(st.baseline_times_s.begin(), st.baseline_times_s.begin() + pairs);
    std::vector<double> b(st.candidate_times_s.begin(), st.candidate_times_s.begin() + pairs);
    look.estimate = tuning::estimate_speedup(a, b, look.nominal_alpha);
    if (base_sd > 0 && std::max(look.estimate.log_sd_a, look.estimate.log_sd_b) > 3.0 * base_sd)
      look.decision = "disturbed";
    else if (std::log(look.estimate.ci_low) > margin)
      look.decision = "promote";
    else if (std::log(look.estimate.ci_high) < margin)
      look.decision = "futile";
    else if (k == st.looks_max)
      look.decision = "max_pairs";
    else
      look.decision = "continue";
    st.decision = look.decision;
    st.looks.push_back(look);
    if (look.decision != "continue")
      break;
  }
  return st;
}

nlohmann::json contract_json(const tuning::task_spec& task) {
  const auto& c = task.contract;
  nlohmann::json j = {{"steps", c.steps},
          {"tokens_per_step", c.tokens_per_step},
          {"timed_steps", {c.timed_first, c.timed_last}},
          {"loss_checkpoints", c.loss_checkpoints},
          {"loss_rtol", c.loss_rtol},
          {"loss_atol", c.loss_atol},
          {"wall_tolerance", c.wall_tolerance},
          {"global_batch", c.global_batch},
          {"params", c.params},
          {"layers", c.layers},
          {"clock_tolerance", c.clock_tolerance},
          {"clock_check", c.clock_check},
          {"simulated_time", c.simulated_time},
          {"constraints", task.constraints}};
  // The loss invariant: only when not the default, so that the contract (and its hash) of a
  // pointwise task is the one it was before the key existed; an absent "loss_mode" is pointwise.
  if (c.loss_mode != tuning::loss_mode::pointwise)
    j["loss_mode"] = tuning::to_string(c.loss_mode);
  if (c.loss_mode == tuning::loss_mode::window)
    j["loss_window"] = c.loss_window;
  if (c.loss_mode == tuning::loss_mode::eval)
    j["eval_steps"] = c.eval_steps;
  return j;
}

std::string contract_changes(const nlohmann::json& locked, const tuning::task_spec& task) {
  const auto now = contract_json(task);
  std::string out;
  for (auto it = now.begin(); it != now.end(); ++it)
    if (!locked.contains(it.key()) || locked[it.key()] != it.value())
      out += (out.empty() ? "" : ", ") + ("contract." + it.key()) + " (locked "
             + (locked.contains(it.key()) ? locked[it.key()].dump() : std::string{"absent"})
             + ", now " + it.value().dump() + ")";
  for (auto it = locked.begin(); it != locked.end(); ++it)
    if (!now.contains(it.key()))
      out += (out.empty() ? "" : ", ") + ("contract." + it.key()) + " (locked "
             + it.value().dump() + ", now absent)";
  return out;
}

std::uint64_t memory_capacity_bytes(const tuning::task_spec& task) {
  return task.limits.device_memory_bytes > 0 ? task.limits.device_memory_bytes
                                             : task.limits.memory_cap_bytes;
}

tuning::planner_input planner_input_for(const tuning::task_spec& task,
                                        const store::run_state& run) {
  tuning::planner_input in;
  in.task = &task;
  in.priors = &run.priors;
  // Superseded attempts too (a re-measured one): in logs without re-measures these are exactly
  // the lost attempts that were re-queued.
  std::map<std::uint64_t, std::uint32_t> latest;
  for (const auto& t : run.trials)
    latest[t.trial_id] = std::max(latest[t.trial_id], t.attempt);
  for (const auto& t : run.trials)
    if (t.outcome != tuning::trial_outcome::lost && t.attempt == latest[t.trial_id])
      in.history.push_back(t);
  in.experience_seeds = run.experience_seeds;
  // Out of scope, or not applying alone (decide/patch_exclusion.hpp: the logged scope lock).
  for (const auto& x : excluded_patches(run))
    in.excluded_patches.push_back(x.patch);
  in.incompatible_patches = run.patch_conflicts;
  // Accepted LLM-proposed patches: the pairs their check found not to apply together.
  for (const auto& pair : llm_patch_conflicts(run))
    in.incompatible_patches.push_back(pair);
  in.noise_log_sd = run.noise ? run.noise->log_sd : 0.02;
  // The doctor gives the minimum detectable speedup as a fraction (0.05 = 5 %).
  // Adaptive runs: the promotion margin (at most budget.target_mds), the bar a finding must clear.
  in.min_detectable_speedup = run.noise ? 1.0 + promotion_margin(run) : 0.0;
  in.memory_capacity_bytes = static_cast<double>(memory_capacity_bytes(task));
  in.seed = run.seed;
  std::uint64_t budget = task.budget.trials;
  if (run.contract_doc && run.contract_doc->contains("policy")) {
    // Runs that record their policy also record what the planner was given at init: the
    // search budget (`tune --trials` included) and the memory capacity, which a resume keeps.
    budget = budget_of(task, run).trials;
    in.memory_capacity_bytes =
      run.contract_doc->value("memory_capacity_bytes", in.memory_capacity_bytes);
  }
  in.initial_design = std::min<std::size_t>(4, std::max<std::size_t>(1, budget / 3));
  in.search_budget = budget;
  in.search_spent = search_trials(run);
  return in;
}

std::string proposal_doc(const tuning::task_spec& task, const store::run_state& run,
                         std::uint32_t n, tuning::encoding_cache* encodings) {
  auto name = store::run_policy(run);
  auto policy = tuning::make_policy(name);
  if (!policy)
    return nlohmann::json{{"policy", name},
                          {"proposals", nlohmann::json::array()},
                          {"stop_reason", "unknown search policy '" + name + "'"}}
      .dump();
  return proposal_doc(task, run, n, *policy, encodings);
}

namespace {

/// Why served seed `i` cannot fit this run's GPUs, "" when it may: the peak memory its trials
/// reported where it was found (the pack's "peak_memory_bytes") exceeds this run's memory
/// capacity (ContractLocked memory_capacity_bytes; 0: unknown, no check).
std::string seed_memory_refusal(const store::run_state& run, std::size_t i, double capacity) {
  const auto& pack = run.experience_pack;
  if (capacity <= 0 || !pack.is_object() || !pack["seeds"].is_array() || i >= pack["seeds"].size())
    return {};
  const auto& seed = pack["seeds"][i];
  if (!seed.contains("peak_memory_bytes") || !seed["peak_memory_bytes"].is_number())
    return {};
  auto peak = seed["peak_memory_bytes"].get<double>();
  if (peak <= capacity)
    return {};
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << "its peak memory where it was found ("
     << seed.value("origin_hardware", std::string{"another GPU"}) << ": " << peak / (1ull << 30)
     << " GiB) exceeds this run's memory capacity (" << capacity / (1ull << 30) << " GiB)";
  return os.str();
}

} // namespace

std::vector<seed_disposition> experience_seed_plan(const tuning::task_spec& task,
                                                   const store::run_state& run,
                                                   const std::string& policy_name) {
  std::vector<seed_disposition> out;
  if (!run.experience_seeds_explained || run.experience_seeds.empty())
    return out;
  const auto search = with_llm_patches(task, run, "");
  auto in = planner_input_for(search, run);
  std::size_t explored = 0;
  for (const auto& t : in.history)
    if (t.purpose == "explore")
      ++explored;
  std::set<std::string> seen;
  std::size_t slots = in.initial_design > explored ? in.initial_design - explored : 0;
  for (std::size_t i = 0; i < run.experience_seeds.size(); ++i) {
    const auto& seed = run.experience_seeds[i];
    seed_disposition d;
    d.config = seed;
    if (!seen.insert(seed.key()).second)
      d.reason = "served twice: the same configuration as an earlier seed";
    for (const auto& t : run.trials)
      if (d.reason.empty() && t.purpose == "explore" && t.config == seed) {
        d.trial = t.trial_id;
        break;
      }
    if (d.reason.empty() && !d.trial) {
      d.reason = seed_memory_refusal(run, i, in.memory_capacity_bytes);
      if (d.reason.empty())
        d.reason = tuning::seed_refusal(in, seed, policy_name);
      if (d.reason.empty()) {
        if (slots > 0) {
          d.propose = true;
          --slots;
        } else {
          d.reason = "the initial design (" + std::to_string(in.initial_design)
                     + " trials) was taken by the seeds and trials before it";
        }
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::string proposal_doc(const tuning::task_spec& task, const store::run_state& run,
                         std::uint32_t n, const tuning::planner_policy& policy,
                         tuning::encoding_cache* encodings) {
  // The task's patches and the accepted LLM-proposed ones, from the log (decide/llm.hpp).
  const auto search = with_llm_patches(task, run, "");
  auto in = planner_input_for(search, run);
  in.encodings = encodings;
  nlohmann::json list = nlohmann::json::array();
  std::set<std::string> taken;
  nlohmann::json seed_docs = nlohmann::json::array();
  if (run.experience_seeds_explained && !in.experience_seeds.empty()) {
    // Every served seed is proposed in the initial design, first, or the document says why
    // not (issue 16); the policy then plans the rest of the batch without them.
    for (const auto& d : experience_seed_plan(task, run, policy.name())) {
      nlohmann::json sd{{"config", store::to_json(d.config)}};
      if (d.trial)
        continue; // settled in an earlier batch
      if (d.propose && list.size() < n && taken.insert(d.config.key()).second) {
        sd["proposed"] = true;
        list.push_back({{"config", store::to_json(d.config)},
                        {"predicted_speedup", 1.0},
                        {"reason", "initial design: experience bank seed"}});
      } else
        sd["reason"] = d.reason.empty() ? "no free node slot in this batch" : d.reason;
      seed_docs.push_back(std::move(sd));
    }
    in.experience_seeds.clear();
    std::size_t proposed = list.size();
    in.initial_design = in.initial_design > proposed ? in.initial_design - proposed : 0;
  }
  tuning::proposal_batch batch;
  if (list.size() < n)
    batch = policy.plan(in, n - static_cast<std::uint32_t>(list.size()));
  for (const auto& p : batch.proposals) {
    if (!taken.insert(p.config.key()).second)
      continue; // a seed proposed above
    nlohmann::json item = {{"config", store::to_json(p.config)},
                           {"predicted_speedup", p.predicted_speedup},
                           {"reason", p.reason}};
    if (p.prior_speedup)
      item["prior_speedup"] = *p.prior_speedup;
    if (p.p_oom)
      item["p_oom"] = *p.p_oom;
    list.push_back(std::move(item));
  }
  nlohmann::json doc{{"policy", policy.name()}, {"proposals", list}};
  if (!seed_docs.empty())
    doc["experience_seeds"] = seed_docs;
  if (!batch.stop_reason.empty())
    doc["stop_reason"] = batch.stop_reason;
  if (!batch.blamed.empty())
    doc["blamed"] = batch.blamed;
  return doc.dump();
}

std::map<std::string, std::string> scope_lock(const store::run_state& run) {
  std::map<std::string, std::string> out;
  if (!run.contract_doc)
    return out;
  const auto scope = run.contract_doc->value("scope", nlohmann::json::object());
  for (const auto* part : {"editable", "frozen"}) {
    auto it = scope.find(part);
    if (it == scope.end() || !it->is_object())
      continue;
    for (auto f = it->begin(); f != it->end(); ++f)
      if (f.value().is_string())
        out[f.key()] = f.value().get<std::string>();
  }
  return out;
}

namespace {

std::string without_digits(const std::string& text) {
  std::string out;
  for (char c : text)
    if (c < '0' || c > '9')
      out += c;
  return out;
}

} // namespace

std::string baseline_launch_failure(const store::run_state& run) {
  std::vector<const tuning::trial_record*> failed;
  for (const auto* t : run.latest_attempts()) {
    if (t->kind != tuning::purpose_kind::baseline || !t->finished)
      continue;
    if (t->outcome == tuning::trial_outcome::ok)
      return {};
    if (t->outcome == tuning::trial_outcome::launch_error)
      failed.push_back(t);
  }
  for (std::size_t i = 1; i < failed.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (without_digits(failed[i]->detail) == without_digits(failed[j]->detail))
        return "trial " + std::to_string(failed[i]->trial_id) + " attempt "
               + std::to_string(failed[i]->attempt) + " ended launch_error with the cause of trial "
               + std::to_string(failed[j]->trial_id) + " attempt "
               + std::to_string(failed[j]->attempt) + ": " + failed[i]->detail;
  return {};
}

std::string calibrate_doc(const tuning::task_spec& task, const store::run_state& run) {
  std::vector<tuning::trial_record> baselines;
  std::vector<double> times;
  nlohmann::json ids = nlohmann::json::array();
  std::map<std::string, double> phases;
  const bool adaptive = adaptive_measurement(run);
  // Adaptive runs: the latest attempt of each baseline trial, in trial order, exactly the runs
  // plan_doctor measured (a disturbed repeat re-measured is replaced by its next attempt; a lost
  // attempt re-queued by the one that ran, in its trial's place, whatever the log's order).
  // Runs locked before the rule: every attempt that ended ok, in log order, as they replay.
  std::vector<const tuning::trial_record*> attempts;
  if (adaptive) {
    attempts = run.latest_attempts();
  } else {
    for (const auto& t : run.trials)
      attempts.push_back(&t);
  }
  for (const auto* tp : attempts) {
    const auto& t = *tp;
    if (t.kind != tuning::purpose_kind::baseline || !t.finished
        || t.outcome != tuning::trial_outcome::ok)
      continue;
    auto timed = tuning::timed_step_time(task.contract, t.steps);
    if (timed <= 0)
      continue;
    baselines.push_back(t);
    times.push_back(timed);
    ids.push_back(t.trial_id);
    for (const auto& [name, s] : t.phase_s)
      phases[name] += s;
  }
  if (baselines.empty()) {
    std::string error = "no baseline run completed with its timed window";
    std::string sep = ": ";
    for (const auto* tp : run.latest_attempts()) {
      if (tp->kind != tuning::purpose_kind::baseline || !tp->finished)
        continue;
      auto detail = tp->detail.size() > 300 ? tp->detail.substr(0, 300) + " ..." : tp->detail;
      error += sep + "trial " + std::to_string(tp->trial_id) + " attempt "
               + std::to_string(tp->attempt) + " " + tuning::to_string(tp->outcome)
               + (detail.empty() ? std::string{} : ": " + detail);
      sep = "; ";
    }
    return nlohmann::json{{"error", error}}.dump();
  }
  for (auto& [name, s] : phases)
    s /= static_cast<double>(baselines.size());
  auto noise = tuning::estimate_noise(times);
  auto ref = tuning::make_loss_reference(task.contract, baselines);
  nlohmann::json reference = nlohmann::json::array();
  for (const auto& [step, loss] : ref.loss)
    reference.push_back({{"step", step}, {"loss", loss}, {"spread", ref.spread.at(step)}});
  nlohmann::json doc{{"noise",
                         {{"runs", noise.runs},
                          {"mean_step_time_s", noise.mean_step_time_s},
                          {"log_sd", noise.log_sd},
                          {"cv", noise.cv},
                          {"min_detectable_speedup", noise.min_detectable_speedup}}},
                        {"baseline_trials", ids},
                        {"baseline_step_times_s", times},
                        {"phases_s", phases},
                        {"reference", reference}};
  // What loss_mode window / eval compare (the keys do not exist in pointwise runs, so their
  // documents are byte for byte what they were).
  if (task.contract.loss_mode == tuning::loss_mode::window) {
    nlohmann::json windows = nlohmann::json::array();
    for (const auto& w : ref.windows)
      windows.push_back({{"first", w.first},
                         {"last", w.last},
                         {"mean", w.mean},
                         {"within_var", w.within_var},
                         {"between_var", w.between_var},
                         {"runs", w.runs}});
    doc["loss_windows"] = windows;
  }
  if (task.contract.loss_mode == tuning::loss_mode::eval) {
    nlohmann::json eval = nlohmann::json::array();
    for (const auto& [step, loss] : ref.eval_loss)
      eval.push_back({{"step", step}, {"loss", loss}, {"spread", ref.eval_spread.at(step)}});
    doc["eval_reference"] = eval;
  }
  if (adaptive)
    doc["measurement"] = plan_doctor(task, run).measurement;
  // The harness clock's offset and skew on honest baselines (step_median runs; the key did not
  // exist before).
  if (auto rule = clock_options_of(run).rule; rule == tuning::clock_rule::step_median) {
    auto clock = tuning::calibrate_clock(task.contract, baselines);
    doc["clock"] = {{"rule", tuning::clock_rule_name(rule)},
                    {"runs", clock.runs},
                    {"differences_s", clock.differences_s},
                    {"offset_s", clock.offset_s},
                    {"skew_s", clock.skew_s}};
  }
  return doc.dump();
}

caf::expected<std::string> check_doc(const tuning::task_spec& task, const store::run_state& run,
                                     std::uint64_t trial_id, std::uint32_t attempt) {
  const auto* t = run.find(trial_id, attempt);
  if (t == nullptr || !t->finished)
    return make_error(errc::not_found, "verifier: trial " + std::to_string(trial_id) + "/" +
                                           std::to_string(attempt) + " has not ended");
  std::vector<std::string> violations;
  double timed = 0;
  if (t->outcome == tuning::trial_outcome::ok) {
    violations = tuning::check_contract(task.contract, run.reference, *t, clock_options_of(run));
    timed = tuning::timed_step_time(task.contract, t->steps);
  } else if (t->outcome == tuning::trial_outcome::contract_violation && !t->detail.empty()) {
    violations.push_back(t->detail); // refused before launch (scope, constraint), with evidence
  }
  return nlohmann::json{{"trial_id", trial_id},
                        {"attempt", attempt},
                        {"outcome", tuning::to_string(t->outcome)},
                        {"violations", violations},
                        {"timed_step_time_s", timed}}
      .dump();
}

namespace {

/// reverify_doc of an adaptive run: the deciding look of the group-sequential test.
std::string sequential_reverify_doc(const store::run_state& run, const tuning::trial_record& cand,
                                    std::uint32_t round) {
  auto st = reverification_looks(run, cand.trial_id, round);
  const double margin = promotion_margin(run);
  const double mds = run.noise ? run.noise->min_detectable_speedup : 0.0;
  nlohmann::json looks = nlohmann::json::array();
  for (const auto& l : st.looks)
    looks.push_back({{"look", l.look},
                     {"pairs", l.pairs},
                     {"critical_z", l.critical_z},
                     {"nominal_alpha", l.nominal_alpha},
                     {"speedup", l.estimate.speedup},
                     {"ci_low", l.estimate.ci_low},
                     {"ci_high", l.estimate.ci_high},
                     {"dof", l.estimate.dof},
                     {"decision", l.decision}});
  // The deciding look's estimate and repeated confidence interval (the last look).
  tuning::speedup_estimate est = st.looks.empty()
                                   ? tuning::estimate_speedup(st.baseline_times_s,
                                                              st.candidate_times_s)
                                   : st.looks.back().estimate;
  bool promotable = false;
  bool remeasure = false;
  std::string reason;
  const auto bar = std::to_string(1.0 + margin);
  const auto at = st.looks.empty() ? std::string{}
                                   : " at look " + std::to_string(st.looks.back().look) + " of "
                                       + std::to_string(st.looks_max) + " ("
                                       + std::to_string(st.looks.back().pairs) + " pairs)";
  if (st.failed > 0) {
    reason = std::to_string(st.failed) + " interleaved run(s) failed or broke the contract";
  } else if (st.decision == "pending") {
    reason = "fewer interleaved pairs than the first look needs ("
             + std::to_string(st.pairs_per_look) + ")";
  } else if (st.decision == "disturbed") {
    remeasure = round == 1;
    reason = "measured under visibly higher variance than the doctor's baselines (log-sd "
             + std::to_string(std::max(est.log_sd_a, est.log_sd_b)) + " vs "
             + std::to_string(run.noise ? run.noise->log_sd : 0.0) + ")" + at
             + (remeasure ? ": re-measured" : " again in the second round");
  } else if (st.decision == "promote") {
    promotable = true;
    reason = "repeated 95% interval's lower bound " + std::to_string(est.ci_low)
             + " clears 1 + the margin (" + bar + ")" + at;
  } else if (st.decision == "futile") {
    reason = "repeated 95% interval's upper bound " + std::to_string(est.ci_high)
             + " is below 1 + the margin (" + bar + ")" + at;
  } else {
    reason = "undecided at the last look: the repeated 95% interval ["
             + std::to_string(est.ci_low) + ", " + std::to_string(est.ci_high)
             + "] still contains 1 + the margin (" + bar + ")" + at
             + " (budget.max_verify_repeats)";
  }
  return nlohmann::json{{"candidate_trial", cand.trial_id},
                        {"config", store::to_json(cand.config)},
                        {"baseline_times_s", st.baseline_times_s},
                        {"candidate_times_s", st.candidate_times_s},
                        {"speedup", est.speedup},
                        {"ci_low", est.ci_low},
                        {"ci_high", est.ci_high},
                        {"dof", est.dof},
                        {"min_detectable_speedup", mds},
                        {"promotion_margin", margin},
                        {"promotable", promotable},
                        {"round", round},
                        {"remeasure", remeasure},
                        {"reason", reason},
                        {"sequential",
                         {{"method", "group_sequential/obrien_fleming"},
                          {"alpha", 0.05},
                          {"looks_max", st.looks_max},
                          {"pairs_per_look", st.pairs_per_look},
                          {"decision", st.decision}}},
                        {"looks", looks}}
      .dump();
}

} // namespace

caf::expected<std::string> reverify_doc(const store::run_state& run, std::uint64_t candidate) {
  const tuning::trial_record* cand = nullptr;
  for (const auto& t : run.trials)
    if (t.trial_id == candidate)
      cand = &t;
  if (cand == nullptr)
    return make_error(errc::not_found, "verifier: no candidate trial " + std::to_string(candidate));
  std::vector<double> a;
  std::vector<double> b;
  std::size_t failed = 0;
  // Only the latest measurement round counts.
  std::uint32_t round = 1;
  for (const auto& t : run.trials)
    if (t.kind == tuning::purpose_kind::verify_baseline && t.candidate_trial == candidate)
      round = std::max(round, t.round);
  if (adaptive_measurement(run))
    return sequential_reverify_doc(run, *cand, round);
  for (const auto& t : run.trials) {
    bool mine = t.candidate_trial == candidate && t.round == round;
    bool base = mine && t.kind == tuning::purpose_kind::verify_baseline;
    bool cand_run = mine && t.kind == tuning::purpose_kind::verify_candidate;
    if (!base && !cand_run)
      continue;
    if (t.outcome == tuning::trial_outcome::lost || superseded(run, t))
      continue; // re-queued under a new attempt (lost, or re-measured): not a measurement
    if (!t.usable()) {
      ++failed;
      continue;
    }
    (base ? a : b).push_back(t.timed_step_time_s);
  }
  auto est = tuning::estimate_speedup(a, b);
  double mds = run.noise ? run.noise->min_detectable_speedup : 0.0;
  double base_sd = run.noise ? run.noise->log_sd : 0.0;
  bool promotable = true;
  bool remeasure = false;
  std::string reason;
  if (failed > 0) {
    promotable = false;
    reason = std::to_string(failed) + " interleaved run(s) failed or broke the contract";
  } else if (a.size() < 2 || b.size() < 2) {
    promotable = false;
    reason = "fewer than two interleaved runs of each";
  } else if (base_sd > 0 && std::max(est.log_sd_a, est.log_sd_b) > 3.0 * base_sd) {
    // Visibly noisier than the doctor's baselines (more than 3x their log-sd): the machine
    // was disturbed while this pair was measured. Re-measured once, then rejected.
    promotable = false;
    remeasure = round == 1;
    reason = "measured under visibly higher variance than the doctor's baselines (log-sd " +
             std::to_string(std::max(est.log_sd_a, est.log_sd_b)) + " vs " +
             std::to_string(base_sd) + ")" +
             (remeasure ? ": re-measured" : " again in the second round");
  } else if (!(est.ci_low > 1.0 + mds)) {
    promotable = false;
    reason = "the 95% interval's lower bound " + std::to_string(est.ci_low) +
             " does not clear 1 + the minimum detectable speedup (" + std::to_string(1.0 + mds) +
             ")";
  } else {
    reason = "lower bound " + std::to_string(est.ci_low) + " clears 1 + mds (" +
             std::to_string(1.0 + mds) + ")";
  }
  return nlohmann::json{{"candidate_trial", candidate},
                        {"config", store::to_json(cand->config)},
                        {"baseline_times_s", a},
                        {"candidate_times_s", b},
                        {"speedup", est.speedup},
                        {"ci_low", est.ci_low},
                        {"ci_high", est.ci_high},
                        {"dof", est.dof},
                        {"min_detectable_speedup", mds},
                        {"promotable", promotable},
                        {"round", round},
                        {"remeasure", remeasure},
                        {"reason", reason}}
      .dump();
}

std::vector<std::pair<std::uint64_t, tuning::configuration>>
reverify_candidates(const tuning::task_spec& task, const store::run_state& run) {
  auto base = tuning::baseline_configuration(task);
  double base_time = run.noise ? run.noise->mean_step_time_s : 0.0;
  std::vector<const tuning::trial_record*> ranked;
  for (const auto& t : run.trials)
    if (t.kind == tuning::purpose_kind::explore && t.usable() && !(t.config == base) &&
        t.timed_step_time_s < base_time) {
      bool dup = false;
      for (const auto* r : ranked)
        dup = dup || r->config == t.config;
      if (!dup)
        ranked.push_back(&t);
    }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto* a, const auto* b) {
    return a->timed_step_time_s < b->timed_step_time_s;
  });
  const auto top = budget_of(task, run).verify_top;
  if (ranked.size() > top)
    ranked.resize(top);
  std::vector<std::pair<std::uint64_t, tuning::configuration>> out;
  for (const auto* r : ranked)
    out.emplace_back(r->trial_id, r->config);
  return out;
}

nlohmann::json promotion_decision(const tuning::task_spec& task, const store::run_state& run) {
  auto base = tuning::baseline_configuration(task);
  auto plan = plan_ablations(task, run);
  const store::reverification* winner = plan.current_reverification;
  if (winner == nullptr)
    return {{"promoted", false},
            {"reason", run.reverifications.empty()
                           ? "no verified trial was faster than the baseline"
                           : "no candidate's speedup interval cleared the minimum detectable "
                             "speedup"}};
  nlohmann::json out = {{"promoted", true},
          {"candidate_trial", winner->candidate_trial},
          {"config", store::to_json(winner->config)},
          {"change", winner->config.diff_from(base)},
          {"speedup", winner->estimate.speedup},
          {"ci_low", winner->estimate.ci_low},
          {"ci_high", winner->estimate.ci_high},
          {"pairs", winner->candidate_times_s.size()},
          {"min_detectable_speedup", run.noise ? run.noise->min_detectable_speedup : 0.0},
          {"reason", winner->reason}};
  if (plan.active) {
    out["bundle_trial"] = plan.bundle->candidate_trial;
    out["minimal_change"] = ablation_doc(task, plan);
  }
  return out;
}

} // namespace infrarsi::decide

namespace infrarsi::decide {

namespace {

/// max_verify_repeats as locked: a multiple of verify_repeats, from 1 to 16 looks (a task built in
/// code may give any value; the task file refuses others).
std::uint32_t locked_max_verify_repeats(const tuning::budget_spec& b) {
  auto per_look = std::max<std::uint32_t>(1, b.verify_repeats);
  auto looks = std::clamp<std::uint32_t>(b.max_verify_repeats / per_look, 1, 16);
  return looks * per_look;
}

} // namespace

std::optional<nlohmann::json> experience_record_doc(const tuning::task_spec& task,
                                                    const store::run_state& run,
                                                    const nlohmann::json& promotion,
                                                    std::uint64_t promotion_sequence) {
  if (!promotion.is_object() || !promotion.value("promoted", false))
    return std::nullopt;
  nlohmann::json locked = run.contract_doc ? *run.contract_doc : nlohmann::json::object();
  auto field = [&](const char* key) {
    return promotion.contains(key) ? promotion[key] : nlohmann::json{};
  };
  nlohmann::json doc{{"hardware", locked.value("hardware_fingerprint", "")},
                     {"workload", locked.value("workload_signature", "")},
                     {"run", run.run_id},
                     {"config", field("config")},
                     {"change", field("change")},
                     {"speedup", field("speedup")},
                     {"ci_low", field("ci_low")},
                     {"ci_high", field("ci_high")},
                     {"pairs", field("pairs")},
                     {"promotion_sequence", promotion_sequence}};
  // Runs locked with the structured identities (issue 16, part 2) file them with the finding,
  // and the promoted configuration's peak memory (the most any of its trials reported, bytes):
  // what a run on a GPU with less memory checks a seed against (experience_seed_plan).
  if (locked.contains("hardware_identity")) {
    for (const char* key : {"hardware_identity", "workload_identity"})
      if (locked.contains(key))
        doc[key] = locked[key];
    std::uint64_t peak = 0;
    if (auto config = store::configuration_from_json(field("config")))
      for (const auto& t : run.trials)
        if (t.finished && t.config == *config)
          peak = std::max(peak, t.peak_memory_bytes);
    if (peak > 0)
      doc["peak_memory_bytes"] = peak;
    // The settings that failed in the search, with their failure class: what the next run on
    // this hardware need not try again (at most max_failed_settings, in trial order).
    constexpr std::size_t max_failed_settings = 64;
    nlohmann::json failed = nlohmann::json::array();
    for (const auto* t : run.latest_attempts()) {
      if (t->purpose != "explore" || !t->finished || failed.size() >= max_failed_settings)
        continue;
      using tuning::trial_outcome;
      switch (t->outcome) {
      case trial_outcome::oom:
      case trial_outcome::crash:
      case trial_outcome::timeout:
      case trial_outcome::launch_error:
      case trial_outcome::contract_violation:
        failed.push_back({{"trial", t->trial_id},
                          {"outcome", tuning::to_string(t->outcome)},
                          {"config", store::to_json(t->config)}});
        break;
      default:
        break;
      }
    }
    doc["failed_settings"] = failed;
  }
  // What the models learnt (format 2): the same whether the promotion is folded yet (replay)
  // or about to be appended (the supervisor).
  if (locked.value("experience_record", 1) >= 2) {
    store::run_state promoted = run;
    promoted.promotion = promotion;
    // The search's task (with the LLM's accepted patches), as the report sees it.
    const auto search = with_llm_patches(task, run, "");
    const auto revision = prior_revision_of(search, promoted);
    nlohmann::json effects = nlohmann::json::array();
    for (const auto& e : revision["effects"])
      if (e.value("trials", std::size_t{0}) > 0)
        effects.push_back(e);
    doc["effects"] = effects;
    auto memory = memory_model_of(search, promoted);
    memory.erase("trials"); // per-trial predictions: this run's, not the finding's
    doc["memory"] = memory;
  }
  return doc;
}

nlohmann::json contract_locked_doc(const tuning::task_spec& task, const nlohmann::json& lock,
                                   const nlohmann::json& hardware,
                                   const std::string& hardware_fingerprint,
                                   const std::string& task_text, std::uint64_t seed,
                                   std::uint32_t search_trials) {
  auto contract = contract_json(task);
  nlohmann::json knobs = nlohmann::json::array();
  for (const auto& k : task.knobs) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& v : k.values)
      values.push_back(store::to_tagged_json(v));
    knobs.push_back({{"name", k.name},
                     {"type", tuning::to_string(k.type)},
                     {"values", values},
                     {"default", store::to_tagged_json(k.default_value)}});
  }
  auto signature =
    task.name + ":" + adapters::sha256_hex(knobs.dump() + contract.dump()).substr(0, 12);
  return {{"task", task.source},
          {"experience_record", experience_record_version},
          {"task_path", task.source},
          {"task_toml", task_text},
          {"task_sha256", adapters::sha256_hex(task_text)},
          {"contract", contract},
          {"contract_hash", adapters::sha256_hex(contract.dump())},
          {"knobs", knobs},
          {"patches", lock.value("patches", nlohmann::json::object())},
          {"patch_conflicts", lock.value("patch_conflicts", nlohmann::json::array())},
          {"budget",
           {{"trials", search_trials},
            {"baseline_repeats", task.budget.baseline_repeats},
            {"verify_top", task.budget.verify_top},
            {"verify_repeats", task.budget.verify_repeats},
            {"wall_clock_s", task.budget.wall_clock_s},
            {"target_mds", task.budget.target_mds},
            {"max_baseline_repeats",
             std::max(task.budget.max_baseline_repeats, task.budget.baseline_repeats)},
            {"max_verify_repeats", locked_max_verify_repeats(task.budget)},
            {"ablations", task.budget.ablations}}},
          {"measurement_rule", current_measurement_rule},
          {"promotion_rule", current_promotion_rule},
          {"scope",
           {{"editable", lock.value("editable", nlohmann::json::object())},
            {"frozen", lock.value("frozen", nlohmann::json::object())}}},
          {"hardware", hardware},
          {"hardware_fingerprint", hardware_fingerprint},
          {"hardware_identity", hardware_identity(task, hardware)},
          {"workload_signature", signature},
          {"workload_identity", workload_identity(task)},
          {"seed", seed},
          {"policy", task.budget.policy.empty() ? std::string{tuning::default_policy_name}
                                                : task.budget.policy},
          {"clock_rule", tuning::clock_rule_name(tuning::current_clock_rule)},
          {"memory_capacity_bytes", memory_capacity_bytes(task)}};
}

std::optional<tuning::loss_reference> early_stop_reference(const store::run_state& run) {
  if (run.reference.loss.empty())
    return std::nullopt;
  return tuning::early_stop_reference(run.reference);
}

std::vector<std::string> smoke_patches(const tuning::task_spec& task, const store::run_state& run,
                                       const tuning::configuration& config) {
  std::vector<std::string> out;
  if (!task.smoke)
    return out;
  for (const auto& p : config.patches) {
    bool tested = false;
    for (const auto& t : run.trials)
      if (t.usable()
          && std::find(t.config.patches.begin(), t.config.patches.end(), p)
               != t.config.patches.end()) {
        tested = true;
        break;
      }
    if (!tested)
      out.push_back(p);
  }
  return out;
}

messages::trial_spec_msg trial_spec(const adapters::trial_request& req, tuning::purpose_kind kind,
                                    std::uint64_t candidate_trial, std::uint32_t round) {
  auto packed = adapters::make_trial_spec(req, tuning::label(kind));
  wire::TrialSpecT spec;
  packed->UnPackTo(&spec);
  spec.purpose_kind = static_cast<wire::Purpose>(static_cast<std::uint8_t>(kind));
  spec.candidate_trial = candidate_trial;
  spec.round = round;
  return messages::trial_spec_msg::pack(spec);
}

messages::trial_result_msg refused_result(std::uint64_t trial_id, std::uint32_t attempt,
                                          const std::string& why) {
  wire::TrialResultT r;
  r.trial_id = trial_id;
  r.attempt = attempt;
  r.outcome = wire::Outcome::ContractViolation;
  r.detail = why;
  return messages::trial_result_msg::pack(r);
}

messages::stage_event_msg stage_payload(const std::string& stage) {
  wire::StageEventT e;
  e.stage = stage == "init"     ? wire::Stage::Init
            : stage == "doctor" ? wire::Stage::Doctor
            : stage == "run"    ? wire::Stage::Run
            : stage == "report" ? wire::Stage::Report
            : stage == "apply"  ? wire::Stage::Apply
                                : wire::Stage::Unknown;
  return messages::stage_event_msg::pack(e);
}

caf::expected<batch> proposal_batch(const tuning::task_spec& task, const store::run_state& run,
                                    std::uint32_t n, std::uint64_t at,
                                    const std::string& planner_reply) {
  auto reply = nlohmann::json::parse(planner_reply, nullptr, false);
  if (!reply.is_object() || !reply.contains("proposals") || !reply["proposals"].is_array())
    return make_error(errc::corrupt_data, "the planner's reply is not a proposals document");
  batch b;
  b.document = {{"n", n}, {"at", at}, {"planner", reply}};
  auto next = run.next_trial_id();
  for (const auto& p : reply["proposals"]) {
    auto config = store::configuration_from_json(p.value("config", nlohmann::json{}));
    if (!config)
      return make_error(errc::corrupt_data, "the planner returned an unreadable configuration");
    auto violation = tuning::constraint_violation(task, *config);
    if (!violation.empty())
      return make_error(errc::invalid_argument,
                        "the planner proposed " + config->key() + ": " + violation);
    launch l;
    l.trial_id = next++;
    l.config = *config;
    l.kind = tuning::purpose_kind::explore;
    b.launches.push_back(std::move(l));
  }
  if (b.launches.empty())
    b.stopped = search_stopped_doc("policy",
                                   reply.value("stop_reason", "the search space is exhausted"),
                                   search_trials(run), budget_of(task, run).trials);
  return b;
}

std::string commit_message(const tuning::task_spec& task, const std::string& run_id,
                           const nlohmann::json& promotion) {
  std::ostringstream msg;
  msg << "infrarsi: promote " << promotion.value("change", "") << "\n\nRun " << run_id
      << ", task " << task.name << ".\nVerified speedup " << promotion.value("speedup", 1.0)
      << "x, 95% interval [" << promotion.value("ci_low", 0.0) << ", "
      << (promotion["ci_high"].is_number() ? promotion["ci_high"].get<double>() : 0.0)
      << "].\nLaunch configuration: " << promotion.value("config", nlohmann::json{}).dump()
      << " (promoted/launch.json).\n";
  return msg.str();
}

} // namespace infrarsi::decide
