#include "decide/next_step.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "decide/decisions.hpp"
#include "decide/llm.hpp"
#include "decide/minimal_change.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/planner.hpp"

namespace infrarsi::decide {

namespace {

using tuning::purpose_kind;
using tuning::trial_outcome;
using tuning::trial_record;

bool lost(const trial_record& t) {
  return t.finished && t.outcome == trial_outcome::lost;
}

/// A latest attempt that still has to produce something: not finished, or lost and to be
/// re-queued, or finished and not yet verified (baselines: verified once calibrated).
bool pending(const store::run_state& run, const trial_record& t, bool calibrated) {
  if (!t.finished)
    return true;
  if (lost(t))
    return t.attempt + 1 < max_attempts;
  if (t.verified && clock_remeasure_due(run, t))
    return true; // to be re-measured: its verdict does not count yet
  if (t.kind == purpose_kind::baseline)
    return calibrated && !t.verified;
  return !t.verified;
}

step make(step_kind k, std::string reason) {
  step s;
  s.kind = k;
  s.reason = std::move(reason);
  return s;
}

step stage_step(step_kind k, const std::string& stage) {
  step s = make(k, (k == step_kind::begin_stage ? "stage " : "end of stage ") + stage);
  s.stage = stage;
  return s;
}

bool started(const store::run_state& run, const std::string& stage) {
  return std::find(run.stages_started.begin(), run.stages_started.end(), stage)
         != run.stages_started.end();
}

} // namespace

const char* to_string(step_kind k) {
  switch (k) {
    case step_kind::wait: return "wait";
    case step_kind::done: return "done";
    case step_kind::begin_stage: return "begin_stage";
    case step_kind::end_stage: return "end_stage";
    case step_kind::init: return "init";
    case step_kind::lose: return "lose";
    case step_kind::launch: return "launch";
    case step_kind::verify: return "verify";
    case step_kind::propose: return "propose";
    case step_kind::stop_search: return "stop_search";
    case step_kind::calibrate: return "calibrate";
    case step_kind::reverify: return "reverify";
    case step_kind::promote: return "promote";
    case step_kind::report: return "report";
    case step_kind::apply: return "apply";
    case step_kind::llm_round: return "llm_round";
  }
  return "?";
}

namespace {

/// Every violation of `t` is the harness-clock check's (and there is one).
bool clock_only(const trial_record& t) {
  if (t.violations.empty())
    return false;
  for (const auto& v : t.violations)
    if (tuning::violation_code(v) != "clock")
      return false;
  return true;
}

} // namespace

bool clock_remeasure_due(const store::run_state& run, const trial_record& t) {
  if (!t.finished || !t.verified || t.kind == purpose_kind::baseline || !clock_only(t)
      || t.attempt + 1 >= max_attempts)
    return false;
  for (const auto& other : run.trials)
    if (other.trial_id == t.trial_id
        && (other.attempt > t.attempt || (other.attempt < t.attempt && clock_only(other))))
      return false; // superseded already, or this is the re-measurement
  return true;
}

std::uint32_t search_trials(const store::run_state& run) {
  std::set<std::uint64_t> ids;
  for (const auto& t : run.trials)
    if (t.kind == purpose_kind::explore)
      ids.insert(t.trial_id);
  return static_cast<std::uint32_t>(ids.size());
}

nlohmann::json search_stopped_doc(const std::string& reason, const std::string& detail,
                                  std::uint32_t trials, std::uint32_t budget) {
  return {{"reason", reason}, {"detail", detail}, {"search_trials", trials}, {"budget", budget}};
}

step next_step(const tuning::task_spec& task, const store::run_state& run, const step_input& in) {
  const auto& busy = in.busy;
  if (busy.exclusive)
    return make(step_kind::wait, "a stage action is in progress");
  if (!run.stage_done("init")) {
    if (!started(run, "init"))
      return stage_step(step_kind::begin_stage, "init");
    if (!run.contract_doc || !run.priors_loaded || !run.experience_seeded)
      return make(step_kind::init, "lock the scope and the contract");
    return stage_step(step_kind::end_stage, "init");
  }

  const auto latest = run.latest_attempts();
  const bool calibrated = run.doctor_doc.has_value();

  // 1. Attempts an earlier life dispatched and never saw finish: lost.
  step lose = make(step_kind::lose, "dispatched before a restart and never finished");
  for (const auto* t : latest)
    if (t->dispatched && !t->finished && busy.running.count({t->trial_id, t->attempt}) == 0)
      lose.attempts.emplace_back(t->trial_id, t->attempt);
  if (!lose.attempts.empty())
    return lose;

  // 2. Re-queues of lost attempts and of attempts that failed only the harness-clock check
  // (re-measured once), and trials proposed but never dispatched, while slots are free.
  step queued = make(step_kind::launch, "re-queued or queued before a restart");
  for (const auto* t : latest) {
    if (queued.launches.size() >= in.free_slots)
      break;
    bool remeasure = t->finished && !lost(*t) && clock_remeasure_due(run, *t);
    if (remeasure)
      queued.reason = "re-measured: the harness-clock check failed once (a loaded machine?)";
    bool requeue = (lost(*t) && t->attempt + 1 < max_attempts) || remeasure;
    bool undispatched = !t->dispatched && !t->finished
                        && busy.running.count({t->trial_id, t->attempt}) == 0;
    if (!requeue && !undispatched)
      continue;
    launch l;
    l.trial_id = t->trial_id;
    l.attempt = requeue ? t->attempt + 1 : t->attempt;
    l.config = t->config;
    l.kind = t->kind;
    l.candidate_trial = t->candidate_trial;
    l.round = t->round;
    l.proposed = !requeue;
    queued.launches.push_back(std::move(l));
  }
  if (!queued.launches.empty())
    return queued;

  // 3. Verdicts of every ended attempt (baselines once the doctor has calibrated).
  step verify = make(step_kind::verify, "check ended trials against the contract");
  for (const auto* t : latest)
    if (t->finished && !lost(*t) && !t->verified
        && (t->kind != purpose_kind::baseline || calibrated)
        && busy.verifying.count({t->trial_id, t->attempt}) == 0)
      verify.attempts.emplace_back(t->trial_id, t->attempt);
  if (!verify.attempts.empty())
    return verify;

  const auto budget = budget_of(task, run);
  auto new_launch = [&run](std::uint64_t offset, const tuning::configuration& c,
                           purpose_kind kind) {
    launch l;
    l.trial_id = run.next_trial_id() + offset;
    l.config = c;
    l.kind = kind;
    return l;
  };
  const auto base = tuning::baseline_configuration(task);

  // 4. The doctor.
  if (!run.stage_done("doctor")) {
    if (!started(run, "doctor"))
      return stage_step(step_kind::begin_stage, "doctor");
    std::uint32_t baselines = 0;
    bool waiting = false;
    for (const auto* t : latest)
      if (t->kind == purpose_kind::baseline) {
        ++baselines;
        waiting = waiting || pending(run, *t, calibrated);
      }
    // A launch error of the baseline configuration that repeats: no more repeats of it.
    if (!calibrated) {
      if (auto failure = baseline_launch_failure(run); !failure.empty()) {
        if (waiting)
          return make(step_kind::wait, "baseline runs in flight");
        return busy.calibrating ? make(step_kind::wait, "calibrating")
                                : make(step_kind::calibrate, "the baseline does not launch: "
                                                               + failure);
      }
    }
    if (baselines < budget.baseline_repeats) {
      step s = make(step_kind::launch, "baseline runs for the noise calibration");
      for (std::uint32_t i = 0; baselines + i < budget.baseline_repeats && i < in.free_slots; ++i)
        s.launches.push_back(new_launch(i, base, purpose_kind::baseline));
      if (!s.launches.empty())
        return s;
      return make(step_kind::wait, "no free node slot for a baseline run");
    }
    if (waiting)
      return make(step_kind::wait, "baseline runs in flight");
    if (!calibrated && budget.adaptive && !busy.calibrating) {
      // The adaptive doctor: re-measure a disturbed repeat, add repeats until the minimum
      // detectable speedup reaches the target or the cap (decide::plan_doctor).
      auto plan = plan_doctor(task, run);
      if (!plan.remeasure.empty()) {
        step s = make(step_kind::launch, "re-measured: a disturbed baseline run");
        for (const auto& [id, attempt] : plan.remeasure) {
          if (s.launches.size() >= in.free_slots)
            break;
          const auto* t = run.find(id, attempt);
          launch l;
          l.trial_id = id;
          l.attempt = attempt + 1;
          l.config = t->config;
          l.kind = purpose_kind::baseline;
          s.launches.push_back(std::move(l));
        }
        if (!s.launches.empty())
          return s;
        return make(step_kind::wait, "no free node slot for a baseline run");
      }
      if (plan.more > 0) {
        step s = make(step_kind::launch,
                      "more baseline runs: the minimum detectable speedup "
                        + std::to_string(plan.measurement.value("mds_reached", 0.0))
                        + " is above the target "
                        + std::to_string(plan.measurement.value("target_mds", 0.0)));
        for (std::uint32_t i = 0; i < plan.more && i < in.free_slots; ++i)
          s.launches.push_back(new_launch(i, base, purpose_kind::baseline));
        if (!s.launches.empty())
          return s;
        return make(step_kind::wait, "no free node slot for a baseline run");
      }
    }
    if (!calibrated)
      return busy.calibrating ? make(step_kind::wait, "calibrating")
                              : make(step_kind::calibrate, "every baseline run has ended");
    return stage_step(step_kind::end_stage, "doctor");
  }

  // 5. The search, re-verification and promotion.
  if (!run.stage_done("run")) {
    if (!started(run, "run"))
      return stage_step(step_kind::begin_stage, "run");
    std::uint32_t explored = 0; // search_trials(run), from the latest attempts at hand
    for (const auto* t : latest)
      explored += t->kind == purpose_kind::explore ? 1 : 0;
    bool explore_pending = false;
    for (const auto* t : latest)
      explore_pending =
        explore_pending || (t->kind == purpose_kind::explore && pending(run, *t, true));
    if (!run.search_stopped) {
      if (explored >= budget.trials) {
        step s = make(step_kind::stop_search, "the search budget is spent");
        s.stop = search_stopped_doc("budget", std::to_string(budget.trials) + " search trials",
                                    explored, budget.trials);
        return s;
      }
      if (in.wall_clock_expired) {
        step s = make(step_kind::stop_search, "the wall-clock limit has passed");
        s.stop = search_stopped_doc("wall_clock",
                                    "budget.wall_clock_s = " + std::to_string(budget.wall_clock_s)
                                      + " s",
                                    explored, budget.trials);
        return s;
      }
      if (busy.proposing)
        return make(step_kind::wait, "the planner is proposing");
      if (!busy.verifying.empty())
        return make(step_kind::wait, "a verdict is pending");
      // The LLM asked again with what was measured (decide/llm.hpp), before the next proposal.
      if (auto round = llm_round_due(task, run); round.ask) {
        step s = make(step_kind::llm_round, round.why);
        s.n = round.round;
        return s;
      }
      if (in.free_slots == 0)
        return make(step_kind::wait, "every node slot is busy");
      step s = make(step_kind::propose, "free node slots");
      s.n = std::min(in.free_slots, budget.trials - explored);
      return s;
    }
    if (explore_pending)
      return make(step_kind::wait, "search trials in flight");
    // Re-verification: each candidate in its own sequence of interleaved runs, ABAB...
    step launches = make(step_kind::launch, "interleaved re-verification runs");
    bool waiting = false;
    std::uint64_t offset = 0;
    std::optional<step> decided;
    auto reverify_each =
      [&](const std::vector<std::pair<std::uint64_t, tuning::configuration>>& targets) {
      for (const auto& [id, config] : targets) {
        const store::reverification* logged = nullptr;
        for (const auto& r : run.reverifications)
          if (r.candidate_trial == id)
            logged = &r;
        std::uint32_t round = 1;
        if (logged != nullptr) {
          if (!(logged->remeasure && logged->round == 1))
            continue; // done with this candidate
          round = 2;
        }
        if (busy.reverifying.count(id) != 0) {
          waiting = true;
          continue;
        }
        std::uint32_t base_runs = 0;
        std::uint32_t cand_runs = 0;
        bool in_flight = false;
        for (const auto* t : latest) {
          if (t->candidate_trial != id || t->round != round)
            continue;
          bool b = t->kind == purpose_kind::verify_baseline;
          if (!b && t->kind != purpose_kind::verify_candidate)
            continue;
          (b ? base_runs : cand_runs) += 1;
          in_flight = in_flight || pending(run, *t, true);
        }
        if (in_flight) {
          waiting = true;
          continue;
        }
        if (budget.adaptive) {
          // The group-sequential test: at every look (verify_repeats more pairs) decide, or go on.
          if (base_runs == cand_runs && base_runs >= budget.verify_repeats) {
            auto st = reverification_looks(run, id, round);
            if (st.failed > 0 || (st.decision != "continue" && st.decision != "pending")
                || base_runs >= budget.max_verify_repeats) {
              step s = make(step_kind::reverify, "the sequential test decided (" + st.decision
                                                   + ", look "
                                                   + std::to_string(st.looks.size()) + ")");
              s.candidate = id;
              decided = std::move(s);
              return;
            }
          }
        } else if (base_runs >= budget.verify_repeats && cand_runs >= budget.verify_repeats) {
          step s = make(step_kind::reverify, "every interleaved run of the round has ended");
          s.candidate = id;
          decided = std::move(s);
          return;
        }
        waiting = true;
        if (launches.launches.size() >= in.free_slots)
          continue;
        bool baseline_next = base_runs <= cand_runs
                             && (budget.adaptive || base_runs < budget.verify_repeats);
        auto l = new_launch(offset++, baseline_next ? base : config,
                            baseline_next ? purpose_kind::verify_baseline
                                          : purpose_kind::verify_candidate);
        l.candidate_trial = id;
        l.round = round;
        launches.launches.push_back(std::move(l));
      }
    };
    reverify_each(reverify_candidates(task, run));
    if (decided)
      return *decided;
    if (!launches.launches.empty())
      return launches;
    if (waiting)
      return make(step_kind::wait, "re-verification in flight");
    // The minimal promoted change (decide/minimal_change.hpp): the bundle with its least
    // credited changes undone, one ablation at a time, before the promotion.
    if (!run.promotion) {
      auto plan = plan_ablations(task, run);
      if (plan.active && !plan.steps.empty()) {
        const auto& a = plan.steps.back();
        const auto index = std::to_string(a.index);
        if (a.state == ablation_state::next) {
          if (in.free_slots == 0)
            return make(step_kind::wait, "no free node slot for an ablation");
          step s = make(step_kind::launch,
                        "ablation " + index + ": the bundle without " + a.removed.name);
          auto l = new_launch(0, a.config, purpose_kind::ablation);
          l.candidate_trial = plan.bundle->candidate_trial;
          l.round = a.index;
          s.launches.push_back(std::move(l));
          return s;
        }
        if (a.state == ablation_state::running)
          return make(step_kind::wait, "ablation " + index + " in flight");
        if (a.state == ablation_state::reverifying) {
          launches.reason = "interleaved re-verification runs of ablation " + index;
          reverify_each({{a.trial_id, a.config}});
          if (decided)
            return *decided;
          if (!launches.launches.empty())
            return launches;
          return make(step_kind::wait, "re-verification of ablation " + index + " in flight");
        }
      }
    }
    if (!run.promotion)
      return make(step_kind::promote, "every candidate is re-verified");
    return stage_step(step_kind::end_stage, "run");
  }

  // 6. Report and apply.
  if (!run.stage_done("report")) {
    if (!started(run, "report"))
      return stage_step(step_kind::begin_stage, "report");
    if (!run.report)
      return make(step_kind::report, "write the report");
    return stage_step(step_kind::end_stage, "report");
  }
  if (!run.stage_done("apply")) {
    if (!started(run, "apply"))
      return stage_step(step_kind::begin_stage, "apply");
    if (!run.applied)
      return make(step_kind::apply, "apply the promotion");
    return stage_step(step_kind::end_stage, "apply");
  }
  return make(step_kind::done, "every stage is complete");
}

} // namespace infrarsi::decide
