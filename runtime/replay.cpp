#include "runtime/replay.hpp"

#include <algorithm>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "decide/decisions.hpp"
#include "decide/experience_serving.hpp"
#include "decide/llm.hpp"
#include "decide/minimal_change.hpp"
#include "adapters/environment.hpp"
#include "messages/codec.hpp"
#include "messages/errc.hpp"
#include "runtime/store_paths.hpp"
#include "adapters/task_file.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::runtime {

namespace {

/// The JSON text of a Document event, exactly as logged ("" if it is not one).
std::string document_text(const store::recorded_event& ev) {
  auto doc = messages::document_msg::decode(ev.payload);
  if (!doc || (*doc)->json() == nullptr)
    return {};
  return (*doc)->json()->str();
}

std::string kind_name(wire::EventKind k) {
  const char* name = wire::EnumNameEventKind(k);
  return name != nullptr && *name != '\0' ? name : "kind " + std::to_string(static_cast<int>(k));
}

class replayer {
public:
  replayer(const tuning::task_spec& task, std::string run_id)
    : task_(task), fold_(std::move(run_id)) {}

  /// Checks the decision `ev` records against the state before it; false at a divergence.
  bool check(const store::recorded_event& ev, replay_result& r) {
    const auto& state = fold_.state();
    auto kind = static_cast<wire::EventKind>(ev.kind);
    auto diverge = [&](const char* decision, std::string logged, std::string recomputed) {
      r.diverged = true;
      r.sequence = ev.sequence;
      r.decision = std::string{decision} + " (" + kind_name(kind) + ")";
      r.logged = std::move(logged);
      r.recomputed = std::move(recomputed);
      return false;
    };
    auto same = [&](const char* decision, const std::string& logged,
                    const std::string& recomputed) {
      if (logged != recomputed)
        return diverge(decision, logged, recomputed);
      ++r.reproduced;
      return true;
    };
    switch (kind) {
      case wire::EventKind::ContractLocked: {
        auto j = nlohmann::json::parse(document_text(ev), nullptr, false);
        std::string logged = j.is_object() && j.contains("contract") ? j["contract"].dump() : "";
        if (!same("contract", logged, decide::contract_json(task_).dump()) && j.is_object())
          r.decision += ": the task's " + decide::contract_changes(j.value("contract",
                                                                         nlohmann::json::object()),
                                                                 task_);
        return !r.diverged;
      }
      case wire::EventKind::ProposalsMade: {
        auto j = nlohmann::json::parse(document_text(ev), nullptr, false);
        if (!j.is_object() || !j.contains("planner"))
          return diverge("proposal batch", document_text(ev), "a proposals document");
        auto n = j.value("n", 1u);
        // The planner saw the run's first `at` events (results may have been logged while it
        // planned): recomputed from exactly those.
        const store::run_state* seen = &state;
        if (j.contains("at") && j["at"].is_number_unsigned() && events_ != nullptr) {
          auto at = std::min<std::uint64_t>(j["at"].get<std::uint64_t>(), ev.sequence);
          if (at < lag_next_)
            lag_.emplace(state.run_id), lag_next_ = 0;
          if (!lag_)
            lag_.emplace(state.run_id);
          for (; lag_next_ < at; ++lag_next_)
            lag_->apply((*events_)[lag_next_]);
          seen = &lag_->state();
        }
        auto recomputed = nlohmann::json::parse(decide::proposal_doc(task_, *seen, n));
        return same("proposal batch", j["planner"].dump(), recomputed.dump());
      }
      case wire::EventKind::SearchStopped: {
        auto j = nlohmann::json::parse(document_text(ev), nullptr, false);
        auto reason = j.is_object() ? j.value("reason", "") : "";
        auto budget = decide::budget_of(task_, state).trials;
        auto explored = decide::search_trials(state);
        if (reason == "budget")
          return explored >= budget
                   ? (++r.reproduced, true)
                   : diverge("search stop", document_text(ev),
                             std::to_string(explored) + " of " + std::to_string(budget)
                               + " search trials: the budget is not spent");
        if (reason == "policy") {
          bool empty = state.last_proposals && (*state.last_proposals)["planner"]["proposals"].empty();
          return empty ? (++r.reproduced, true)
                       : diverge("search stop", document_text(ev),
                                 "the last proposal batch was not empty");
        }
        return true; // wall clock: a fact from outside, not a decision
      }
      case wire::EventKind::TrialProposed: {
        auto spec = messages::trial_spec_msg::decode(ev.payload);
        if (!spec)
          return diverge("proposal", "an unreadable TrialSpec", "");
        auto id = (*spec)->trial_id();
        bool known = false;
        for (const auto& t : state.trials)
          known = known || t.trial_id == id;
        if ((*spec)->attempt() > 0 || known)
          return true; // a re-queue of an existing trial, not a new decision
        tuning::trial_record logged_trial; // its purpose, as the projection reads it
        {
          store::run_projection one{state.run_id};
          one.apply(ev);
          if (!one.state().trials.empty())
            logged_trial = one.state().trials.front();
        }
        auto config = store::configuration_of(**spec);
        const auto purpose = tuning::purpose_text(logged_trial);
        std::string logged = "trial " + std::to_string(id) + " " + purpose + " " + config.key();
        tuning::configuration want;
        switch (logged_trial.kind) {
          case tuning::purpose_kind::explore: {
            if (state.last_proposals) {
              const auto& list = (*state.last_proposals)["planner"]["proposals"];
              if (state.proposals_taken >= list.size())
                return diverge("proposal", logged,
                               "no proposal left in the last batch of "
                                 + std::to_string(list.size()));
              if (auto c = store::configuration_from_json(list[state.proposals_taken]["config"]))
                want = *c;
              break;
            }
            // Logs written before proposal batches: one proposal before each search trial.
            auto doc = nlohmann::json::parse(decide::proposal_doc(task_, state, 1));
            if (doc["proposals"].empty())
              return diverge("proposal", logged, "no proposal (search space exhausted)");
            if (auto c = store::configuration_from_json(doc["proposals"][0]["config"]))
              want = *c;
            break;
          }
          case tuning::purpose_kind::baseline:
          case tuning::purpose_kind::verify_baseline: want = tuning::baseline_configuration(task_); break;
          case tuning::purpose_kind::verify_candidate: {
            bool picked = false;
            for (const auto& [cid, c] : decide::reverify_candidates(task_, state))
              if (cid == logged_trial.candidate_trial) {
                want = c;
                picked = true;
              }
            if (!picked) { // an ablation's re-verification (decide/minimal_change.hpp)
              auto plan = decide::plan_ablations(task_, state);
              if (!plan.steps.empty() && plan.steps.back().state == decide::ablation_state::reverifying
                  && plan.steps.back().trial_id == logged_trial.candidate_trial) {
                want = plan.steps.back().config;
                picked = true;
              }
            }
            if (!picked)
              return diverge("proposal", logged,
                             "trial " + std::to_string(logged_trial.candidate_trial)
                               + " is not a candidate to verify");
            break;
          }
          case tuning::purpose_kind::ablation: {
            auto plan = decide::plan_ablations(task_, state);
            if (plan.steps.empty() || plan.steps.back().state != decide::ablation_state::next)
              return diverge("proposal", logged, "no ablation is due");
            const auto& a = plan.steps.back();
            if (logged_trial.candidate_trial != plan.bundle->candidate_trial
                || logged_trial.round != a.index)
              return diverge("proposal", logged,
                             "ablation/" + std::to_string(plan.bundle->candidate_trial) + "#"
                               + std::to_string(a.index));
            want = a.config;
            break;
          }
          case tuning::purpose_kind::unknown: break;
        }
        return same("proposal", logged,
                    "trial " + std::to_string(state.next_trial_id()) + " " + purpose + " "
                      + want.key());
      }
      case wire::EventKind::BaselineCalibrated:
        return same("calibration", document_text(ev), decide::calibrate_doc(task_, state));
      case wire::EventKind::TrialVerified: {
        auto j = nlohmann::json::parse(document_text(ev), nullptr, false);
        if (!j.is_object())
          return diverge("verdict", document_text(ev), "a verdict document");
        auto doc = decide::check_doc(task_, state, j.value("trial_id", std::uint64_t{0}),
                                     j.value("attempt", 0u));
        return same("verdict", document_text(ev), doc ? *doc : describe(doc.error()));
      }
      case wire::EventKind::CandidateReverified: {
        auto j = nlohmann::json::parse(document_text(ev), nullptr, false);
        if (!j.is_object())
          return diverge("reverification", document_text(ev), "a reverification document");
        auto doc = decide::reverify_doc(state, j.value("candidate_trial", std::uint64_t{0}));
        return same("reverification", document_text(ev), doc ? *doc : describe(doc.error()));
      }
      case wire::EventKind::LlmRequested: {
        // A priors question depends only on the task and the run so far: recomputed. (A
        // patches question also quotes the workload's files as they were: an input.)
        auto j = nlohmann::json::parse(document_text(ev), nullptr, false);
        if (!j.is_object())
          return diverge("llm request", document_text(ev), "an llm_request document");
        const auto round = decide::llm_round_of(j);
        if (round > 0 && round > decide::llm_current_round(state)) {
          // The first request of a round asked during the search: it was due.
          auto plan = decide::llm_round_due(task_, state);
          if (!same("llm round", "round " + std::to_string(round),
                    plan.ask ? "round " + std::to_string(plan.round) : std::string{"no round due"}))
            return false;
        }
        if (j.value("purpose", "") != decide::llm_priors)
          return true;
        return same("llm request", j.value("body", nlohmann::json{}).dump(),
                    decide::llm_request(task_, state, decide::llm_priors, {}, round).dump());
      }
      case wire::EventKind::LlmAnswerParsed: {
        // The logged answer (the LlmResponded before it) parsed again; no network call. The
        // `git apply --check` result of each patch is an input (the tree as it was), not
        // recomputed.
        auto j = nlohmann::json::parse(document_text(ev), nullptr, false);
        const nlohmann::json* response = nullptr;
        for (const auto& e : state.llm)
          if (e.value("event", "") == "response")
            response = &e;
        if (!j.is_object() || response == nullptr)
          return diverge("llm answer", document_text(ev), "an answer logged before it");
        auto logged = j;
        if (logged.contains("patches"))
          for (auto& p : logged["patches"])
            p.erase("apply_error");
        logged.erase("conflicts"); // which pairs apply together: the tree's answer, an input
        logged.erase("round");     // bookkeeping: the round the exchange belongs to
        auto doc = decide::llm_parsed_doc(task_, state, j.value("purpose", ""),
                                          j.value("attempt", 0u), *response);
        return same("llm answer", logged.dump(), doc.dump());
      }
      case wire::EventKind::PriorsLoaded: {
        // In the ExperienceSeeded batch: the served finding's priors, a decision.
        if (events_ != nullptr && ev.sequence > 0 && ev.sequence <= events_->size()
            && (*events_)[ev.sequence - 1].kind
                 == static_cast<store::event_kind_t>(wire::EventKind::ExperienceSeeded)) {
          auto adjusted = decide::experience_priors(decide::with_llm_patches(task_, state, ""),
                                                    state.priors, state.experience_pack);
          return same("experience priors",
                      nlohmann::json::parse(document_text(ev)).dump(),
                      adjusted ? store::to_json(*adjusted).dump()
                               : std::string{"(no prior adjustment in the pack)"});
        }
        if (!task_.llm.enabled)
          return true; // the offline knowledge base: an input
        auto step = decide::llm_next(task_, state, {}, decide::llm_current_round(state));
        if (step.k != decide::llm_step::kind::finish)
          return diverge("priors", document_text(ev),
                         "the LLM questions were not settled (" + step.purpose + ")");
        if (!step.priors)
          return true; // no valid LLM priors: the knowledge base's, an input
        return same("priors", nlohmann::json::parse(document_text(ev)).dump(), step.priors->dump());
      }
      case wire::EventKind::CandidatePromoted:
        return same("promotion", document_text(ev),
                    decide::promotion_decision(task_, state).dump());
      case wire::EventKind::ExperienceRecorded: {
        // Recomputed from the CandidatePromoted just before it (same batch).
        auto record = state.promotion && state.events > 0
                        ? decide::experience_record_doc(task_, state, *state.promotion, state.events - 1)
                        : std::nullopt;
        return same("experience record", document_text(ev),
                    record ? record->dump() : std::string{"(no promotion before it)"});
      }
      default: return true;
    }
  }

  void apply(const store::recorded_event& ev) { fold_.apply(ev); }

  /// The run's events in order (for decisions made on an earlier prefix, ProposalsMade "at").
  void set_events(const std::vector<store::recorded_event>* events) { events_ = events; }

private:
  const std::vector<store::recorded_event>* events_ = nullptr;
  std::optional<store::run_projection> lag_;
  std::uint64_t lag_next_ = 0;
  const tuning::task_spec& task_;
  store::run_projection fold_;
};

} // namespace

caf::expected<replay_result> replay_run(const store::event_log& log, const std::string& run_id,
                                        const tuning::task_spec& task) {
  replay_result r;
  replayer rp{task, run_id};
  std::vector<store::recorded_event> events;
  if (auto err = log.for_each_in_stream(run_id, 0, [&](const store::recorded_event& ev) {
        events.push_back(ev);
        return true;
      }))
    return err;
  rp.set_events(&events);
  for (const auto& ev : events) {
    ++r.events;
    if (!r.diverged && !rp.check(ev, r))
      break; // stop at the first divergence
    rp.apply(ev);
  }
  if (r.events == 0)
    return make_error(errc::not_found, "run '" + run_id + "' has no events");
  return r;
}

caf::expected<tuning::task_spec> task_of_run(const store::run_state& run,
                                             const std::string& task_path, const char* command,
                                             std::ostream& err) {
  // The task as logged at init (the log is self-contained); --task, or the recorded path, for
  // runs logged before the task text was.
  bool from_log = task_path.empty() && run.contract_doc && run.contract_doc->contains("task_toml")
                  && (*run.contract_doc)["task_toml"].is_string();
  if (from_log) {
    auto task = adapters::load_task_text((*run.contract_doc)["task_toml"].get<std::string>(),
                                         run.contract_doc->value("task_path", run.task_path));
    if (!task)
      return make_error(errc::corrupt_data,
                        "the task logged at init does not load: " + describe(task.error()));
    return task;
  }
  auto path = task_path.empty() ? run.task_path : task_path;
  auto task = adapters::load_task_file(path);
  if (!task)
    return make_error(errc::not_found,
                      describe(task.error())
                        + (task_path.empty() ? " (the task file the run recorded; this run's log "
                                               "predates logged tasks: give --task FILE)"
                                             : ""));
  if (run.contract_doc) {
    auto logged = run.contract_doc->value("task_sha256", std::string{});
    auto now = adapters::sha256_file(task->source);
    if (!logged.empty() && now && *now != logged)
      err << command << ": note: " << task->source
          << " differs from the file the run started with (sha256 " << logged.substr(0, 12)
          << "... then, " << now->substr(0, 12) << "... now); "
          << (std::string{command} == "infrarsi replay" ? "decisions are checked anyway"
                                                         : "it is used as it is now")
          << '\n';
  }
  return task;
}

int run_replay(const replay_options& o, std::ostream& out, std::ostream& err) {
  store::rocksdb_event_log_options opts;
  opts.read_only = true;
  auto events = events_dir_of(o.store_dir);
  auto log = store::rocksdb_event_log::open(events, opts);
  if (!log) {
    err << "infrarsi replay: " << describe(log.error()) << '\n';
    return 3;
  }
  // A torn or corrupted tail is not audited around: the log must be whole.
  if (const auto& rec = (*log)->recovery(); rec.tail_dropped) {
    err << "infrarsi replay: the event log '" << events << "' is damaged: its tail "
        << "after global position "
        << (rec.head > 0 ? std::to_string(rec.head - 1) : std::string{"(none)"})
        << " is torn (RocksDB: " << rec.message << "). Refusing to replay; `infrarsi tune TASK "
        << "--store STORE --run RUN` recovers the log to its last complete event.\n";
    return 3;
  }
  auto state = store::load_run(**log, o.run_id);
  if (!state) {
    err << "infrarsi replay: " << describe(state.error()) << '\n';
    return 3;
  }
  if (state->events == 0) {
    err << "infrarsi replay: run '" << o.run_id << "' not found in '" << events << "'\n";
    return 3;
  }
  auto task = task_of_run(*state, o.task_path, "infrarsi replay", err);
  if (!task) {
    err << "infrarsi replay: " << describe(task.error()) << '\n';
    return 3;
  }
  auto r = replay_run(**log, o.run_id, *task);
  if (!r) {
    err << "infrarsi replay: " << describe(r.error()) << '\n';
    return 3;
  }
  if (!r->diverged) {
    out << r->reproduced << " decisions reproduced (" << r->events << " events of run "
        << o.run_id << ")\n";
    return 0;
  }
  out << "divergence at event " << r->sequence << " of run " << o.run_id << ": " << r->decision
      << ", after " << r->reproduced << " decisions reproduced\n"
      << "  logged:     " << r->logged << "\n"
      << "  recomputed: " << r->recomputed << '\n';
  return 1;
}

} // namespace infrarsi::runtime
