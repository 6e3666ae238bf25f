#include "bench/run_driver.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <tuple>

#include "adapters/environment.hpp"
#include "adapters/trial_launcher.hpp"
#include "decide/decisions.hpp"
#include "decide/experience_serving.hpp"
#include "decide/next_step.hpp"
#include "messages/errc.hpp"
#include "store/memory_event_log.hpp"
#include "tuning/search_space.hpp"

namespace infrarsi::bench {

namespace {

using decide::step_kind;
using tuning::purpose_kind;

store::new_event event(wire::EventKind kind, const messages::byte_buffer& payload) {
  return store::new_event{static_cast<store::event_kind_t>(kind), payload};
}

store::new_event doc_event(wire::EventKind kind, const char* schema, const std::string& json) {
  return event(kind, messages::make_document(schema, json).bytes());
}

/// A trial in flight: launched, measured, its TrialCompleted not yet logged.
struct in_flight {
  double end_s = 0;
  std::uint64_t trial_id = 0;
  std::uint32_t attempt = 0;
  tuning::trial_record rec;
};

/// The run's log and fold, with the supervisor's append_all.
class run_log {
public:
  explicit run_log(std::string run_id) : run_id_(std::move(run_id)), fold_(run_id_) {}

  void append(std::vector<store::new_event> events) {
    if (events.empty())
      return;
    auto r = log_.append(run_id_, version_, std::move(events));
    if (!r)
      throw std::runtime_error("event log: " + describe(r.error()));
    version_ = r->version;
    if (auto err = store::fold_stream(log_, run_id_, fold_))
      throw std::runtime_error("event log: " + describe(err));
  }
  void append_doc(wire::EventKind kind, const char* schema, const std::string& json) {
    append({doc_event(kind, schema, json)});
  }
  [[nodiscard]] const store::run_state& state() const { return fold_.state(); }
  [[nodiscard]] std::uint64_t version() const { return version_; }

private:
  std::string run_id_;
  store::memory_event_log log_;
  store::run_projection fold_;
  std::uint64_t version_ = 0;
};

messages::trial_spec_msg spec_for(const tuning::task_spec& task, const store::run_state& run,
                                  const decide::launch& l) {
  adapters::trial_request req;
  req.knobs = l.config.knobs;
  req.patches = l.config.patches;
  req.trial_id = l.trial_id;
  req.attempt = l.attempt;
  req.timeout_s = task.limits.timeout_s;
  req.memory_cap_bytes = task.limits.memory_cap_bytes;
  req.loss_reference = decide::early_stop_reference(run); // as the supervisor's spec_for
  req.smoke_patches = decide::smoke_patches(task, run, l.config);
  return decide::trial_spec(req, l.kind, l.candidate_trial, l.round);
}

} // namespace

messages::trial_result_msg result_message(const tuning::trial_record& rec) {
  wire::TrialResultT r;
  r.trial_id = rec.trial_id;
  r.attempt = rec.attempt;
  auto outcome = rec.outcome;
  // A trial that ran its steps and failed only the contract check left the node-runner as ok;
  // one the node-runner stopped early left it as contract_violation with its detail.
  const bool early = tuning::is_early_stop(rec.detail);
  if (outcome == tuning::trial_outcome::contract_violation && !rec.steps.empty() && !early)
    outcome = tuning::trial_outcome::ok;
  r.outcome = static_cast<wire::Outcome>(static_cast<std::uint8_t>(outcome));
  auto phase = [&rec](const char* name) -> flatbuffers::Optional<double> {
    auto it = rec.phase_s.find(name);
    if (it == rec.phase_s.end())
      return flatbuffers::nullopt;
    return it->second;
  };
  for (const auto& s : rec.steps) {
    auto m = std::make_unique<wire::StepMetricsT>();
    m->step = s.step;
    m->loss = s.loss;
    m->tokens = s.tokens;
    m->step_time_s = s.step_time_s;
    m->warmup = s.warmup;
    if (s.observed_at_s >= 0)
      m->observed_at_s = s.observed_at_s;
    if (s.eval_loss)
      m->eval_loss = *s.eval_loss;
    m->data_s = phase("data");
    m->forward_s = phase("forward");
    m->backward_s = phase("backward");
    m->optimizer_s = phase("optimizer");
    m->communication_s = phase("communication");
    r.steps.push_back(std::move(m));
  }
  r.peak_memory_bytes = rec.peak_memory_bytes;
  r.wall_time_s = rec.wall_time_s;
  r.device_seconds = rec.device_seconds;
  r.detail = rec.detail;
  if (rec.outcome == tuning::trial_outcome::contract_violation && (rec.steps.empty() || early) &&
      !rec.violations.empty())
    r.detail = rec.violations.front(); // refused before launch: the verifier reads the detail
  if (rec.declared.final_seen) {
    nlohmann::json fin = {{"event", "final"}};
    if (rec.declared.global_batch)
      fin["global_batch"] = *rec.declared.global_batch;
    if (rec.declared.params)
      fin["params"] = *rec.declared.params;
    if (rec.declared.layers)
      fin["layers"] = *rec.declared.layers;
    if (rec.declared.timed_steps)
      fin["timed_steps"] = {rec.declared.timed_steps->first, rec.declared.timed_steps->second};
    r.final_report = fin.dump();
  }
  return messages::trial_result_msg::pack(r);
}

driven_run drive_run(evaluator& ev, const driver_options& o) {
  const auto& task = ev.task();
  driven_run out;
  const std::uint32_t nodes = std::max<std::uint32_t>(1, o.nodes);
  const std::string policy_name = o.policy_name;
  const bool built_policy = tuning::make_policy(policy_name) != nullptr;
  // The run's trial encodings from one proposal to the next, as the planner actor keeps them.
  tuning::encoding_cache encodings;
  run_log log{"bench-" + task.name + "-" + std::to_string(o.seed)};
  ev.begin_run(o.seed);

  std::vector<in_flight> flying;
  std::map<std::pair<std::uint64_t, std::uint32_t>, tuning::trial_record> measured;
  double now = 0;

  auto finish = [&]() {
    out.state = log.state();
    out.end_s = now;
    return out;
  };

  try {
    // RunCreated, as the supervisor's first life appends it.
    {
      wire::RunCreatedT rc;
      rc.task = task.source;
      rc.seed = o.seed;
      rc.tool_version = "bench";
      log.append({event(wire::EventKind::RunCreated, messages::run_created_msg::pack(rc).bytes())});
    }
    for (int guard = 0; guard < 1000000; ++guard) {
      const auto& run = log.state();
      decide::step_input in;
      in.free_slots = nodes - static_cast<std::uint32_t>(flying.size());
      for (const auto& f : flying)
        in.busy.running.insert({f.trial_id, f.attempt});
      auto s = decide::next_step(task, run, in);
      switch (s.kind) {
        case step_kind::wait: {
          if (flying.empty()) {
            out.error = "the run is stuck: next_step waits (" + s.reason +
                        ") with nothing in flight";
            return finish();
          }
          auto first = std::min_element(flying.begin(), flying.end(), [](const auto& a,
                                                                          const auto& b) {
            return std::tie(a.end_s, a.trial_id, a.attempt) <
                   std::tie(b.end_s, b.trial_id, b.attempt);
          });
          in_flight f = std::move(*first);
          flying.erase(first);
          now = std::max(now, f.end_s);
          out.times[{f.trial_id, f.attempt}].ended_s = now;
          log.append({event(wire::EventKind::TrialCompleted, result_message(f.rec).bytes())});
          if (f.rec.kind == purpose_kind::explore)
            out.search_end_s = std::max(out.search_end_s, now);
          break;
        }
        case step_kind::done: return finish();
        case step_kind::begin_stage:
        case step_kind::end_stage:
          log.append({event(s.kind == step_kind::begin_stage ? wire::EventKind::StageStarted
                                                             : wire::EventKind::StageCompleted,
                            decide::stage_payload(s.stage).bytes())});
          if (s.kind == step_kind::end_stage && s.stage == "run")
            return finish();
          break;
        case step_kind::init: {
          nlohmann::json patches = nlohmann::json::object();
          for (const auto& p : task.patches) {
            auto v = adapters::patch_scope_violation(task, p.name);
            patches[p.name] = v.empty() ? nlohmann::json{{"in_scope", true}}
                                        : nlohmann::json{{"in_scope", false}, {"violation", v}};
          }
          nlohmann::json conflicts = nlohmann::json::array();
          for (const auto& [a, b] : ev.incompatible_patches())
            conflicts.push_back({a, b});
          nlohmann::json lock = {{"patches", patches},
                                 {"patch_conflicts", conflicts},
                                 {"editable", nlohmann::json::object()},
                                 {"frozen", nlohmann::json::object()}};
          nlohmann::json hardware = {{"evaluator", "bench (in process)"}, {"nodes", nodes}};
          // A task that declares its (simulated) hardware files its findings under it, as in
          // the supervisor; otherwise the in-process evaluator has no hardware: "bench".
          auto fingerprint = task.hardware.declared
                               ? decide::run_hardware_fingerprint(task, hardware)
                               : std::string{"bench"};
          auto doc = decide::contract_locked_doc(task, lock, hardware, fingerprint, o.task_text,
                                                 o.seed, o.trials);
          doc["budget"]["baseline_repeats"] = o.baseline_repeats;
          doc["budget"]["verify_top"] = o.verify_top;
          doc["budget"]["verify_repeats"] = o.verify_repeats;
          doc["policy"] = policy_name;
          doc["memory_capacity_bytes"] =
            static_cast<std::uint64_t>(std::max(0.0, ev.memory_capacity_bytes()));
          // The curator's pack (decide::experience_pack) when the run is served experience;
          // else no seeds, as before serving existed.
          nlohmann::json pack{{"seeds", nlohmann::json::array()}};
          if (o.experience) {
            decide::serving_request req;
            req.hardware_identity = doc["hardware_identity"];
            req.workload_identity = doc["workload_identity"];
            req.hardware_fingerprint = fingerprint;
            req.workload_signature = doc.value("workload_signature", "");
            req.mode = *o.experience;
            pack = decide::experience_pack(o.experience_records, req);
          }
          std::vector<store::new_event> init{
            doc_event(wire::EventKind::ContractLocked, "contract/1", doc.dump()),
            doc_event(wire::EventKind::PriorsLoaded, "priors/1", store::to_json(o.priors).dump()),
            doc_event(wire::EventKind::ExperienceSeeded, "experience_pack/1", pack.dump())};
          // As the supervisor's init: the served finding's priors in the pack's batch.
          if (auto adjusted = o.experience_priors
                                ? decide::experience_priors(task, o.priors, pack)
                                : std::nullopt)
            init.push_back(doc_event(wire::EventKind::PriorsLoaded, "priors/1",
                                     store::to_json(*adjusted).dump()));
          log.append(init);
          break;
        }
        case step_kind::lose:
          out.error = "next_step reports lost attempts (nothing is ever lost here)";
          return finish();
        case step_kind::launch: {
          std::vector<store::new_event> events;
          std::vector<std::pair<decide::launch, messages::trial_spec_msg>> sends;
          for (const auto& l : s.launches) {
            auto spec = spec_for(task, run, l);
            if (!l.proposed)
              events.push_back(event(wire::EventKind::TrialProposed, spec.bytes()));
            std::string violation;
            for (const auto& p : l.config.patches)
              if (violation.empty())
                violation = adapters::patch_scope_violation(task, p);
            if (!violation.empty()) {
              events.push_back(event(
                wire::EventKind::TrialCompleted,
                decide::refused_result(l.trial_id, l.attempt, violation).bytes()));
              out.times[{l.trial_id, l.attempt}] = {now, now};
              continue;
            }
            if (flying.size() + sends.size() >= nodes)
              break; // next_step never asks for more launches than free slots
            events.push_back(event(wire::EventKind::TrialDispatched, spec.bytes()));
            sends.emplace_back(l, std::move(spec));
          }
          log.append(std::move(events));
          for (const auto& [l, spec] : sends) {
            tuning::trial_record shape; // for the purpose text: "baseline", "verify-baseline/12"
            shape.kind = l.kind;
            shape.purpose = tuning::label(l.kind);
            shape.candidate_trial = l.candidate_trial;
            shape.round = l.round;
            // What the node-runner would get: the reference the TrialSpec carries.
            auto early_stop = adapters::loss_reference_of(*spec);
            std::vector<std::string> smoke;
            if (spec->smoke_patches() != nullptr)
              for (const auto* p : *spec->smoke_patches())
                smoke.push_back(p->str());
            auto rec = ev.measure(l.config, l.trial_id, l.attempt, tuning::purpose_text(shape),
                                  early_stop ? &*early_stop : nullptr, smoke);
            rec.trial_id = l.trial_id;
            rec.attempt = l.attempt;
            rec.kind = l.kind;
            measured[{l.trial_id, l.attempt}] = rec;
            in_flight f;
            f.end_s = now + std::max(0.0, rec.wall_time_s);
            f.trial_id = l.trial_id;
            f.attempt = l.attempt;
            f.rec = std::move(rec);
            out.times[{l.trial_id, l.attempt}] = {now, f.end_s};
            flying.push_back(std::move(f));
          }
          out.max_in_flight =
            std::max(out.max_in_flight, static_cast<std::uint32_t>(flying.size()));
          break;
        }
        case step_kind::verify:
          for (const auto& [id, attempt] : s.attempts) {
            auto verdict = decide::check_doc(task, log.state(), id, attempt);
            if (!verdict) {
              out.error = "verify: " + describe(verdict.error());
              return finish();
            }
            log.append_doc(wire::EventKind::TrialVerified, "verdict/1", *verdict);
            auto m = measured.find({id, attempt});
            const auto* t = log.state().find(id, attempt);
            if (m != measured.end() && t != nullptr && m->second.usable() != t->usable())
              ++out.verdict_mismatches;
          }
          break;
        case step_kind::propose: {
          std::string reply;
          try {
            if (out.proposal_calls == 0)
              out.initial_design = decide::planner_input_for(task, run).initial_design;
            if (built_policy)
              reply = decide::proposal_doc(task, run, s.n, &encodings);
            else if (o.policy != nullptr)
              reply = decide::proposal_doc(task, run, s.n, *o.policy, &encodings);
            else
              reply = decide::proposal_doc(task, run, s.n); // names the unknown policy
          } catch (const std::exception& e) {
            out.error = "policy '" + policy_name + "' failed after " +
                        std::to_string(decide::search_trials(run)) + " search trials: " + e.what();
            return finish();
          }
          ++out.proposal_calls;
          auto b = decide::proposal_batch(task, run, s.n, log.version(), reply);
          if (!b) {
            out.error = "planner: " + describe(b.error());
            return finish();
          }
          std::vector<store::new_event> events;
          events.push_back(
            doc_event(wire::EventKind::ProposalsMade, "proposals/1", b->document.dump()));
          const auto& items = b->document["planner"]["proposals"];
          for (std::size_t i = 0; i < b->launches.size(); ++i) {
            const auto& l = b->launches[i];
            events.push_back(event(wire::EventKind::TrialProposed, spec_for(task, run, l).bytes()));
            if (i < items.size())
              out.proposals[l.trial_id] = items[i];
          }
          if (b->launches.empty())
            events.push_back(
              doc_event(wire::EventKind::SearchStopped, "search_stopped/1", b->stopped.dump()));
          log.append(std::move(events));
          break;
        }
        case step_kind::stop_search:
          log.append_doc(wire::EventKind::SearchStopped, "search_stopped/1", s.stop.dump());
          break;
        case step_kind::calibrate: {
          auto doc = decide::calibrate_doc(task, run);
          auto j = nlohmann::json::parse(doc);
          if (j.contains("error")) {
            out.error = "doctor: the baseline does not run: " + j["error"].get<std::string>();
            return finish();
          }
          log.append_doc(wire::EventKind::BaselineCalibrated, "doctor/1", doc);
          break;
        }
        case step_kind::reverify: {
          auto doc = decide::reverify_doc(run, s.candidate);
          if (!doc) {
            out.error = "verify: " + describe(doc.error());
            return finish();
          }
          log.append_doc(wire::EventKind::CandidateReverified, "reverification/1", *doc);
          break;
        }
        case step_kind::promote:
        {
          // As the supervisor's do_promote: the finding in the decision's batch.
          auto decision = decide::promotion_decision(task, run);
          std::vector<store::new_event> events{
            doc_event(wire::EventKind::CandidatePromoted, "promotion/1", decision.dump())};
          if (auto record = decide::experience_record_doc(task, run, decision, run.events)) {
            events.push_back(
              doc_event(wire::EventKind::ExperienceRecorded, "experience/1", record->dump()));
            out.experience_record = std::move(*record);
          }
          log.append(std::move(events));
        }
          break;
        case step_kind::report:
        case step_kind::apply:
          return finish(); // not reached: the run ends with its "run" stage
        case step_kind::llm_round:
          out.error = "next_step asks the LLM (the benchmark's tasks have no [llm])";
          return finish();
      }
    }
    out.error = "the run did not end within its step guard";
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return finish();
}

} // namespace infrarsi::bench
