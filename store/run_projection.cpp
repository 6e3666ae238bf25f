#include "store/run_projection.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "tuning/planner.hpp"

namespace infrarsi::store {

using tuning::knob_value;

namespace {

/// The number under `key` of a document, or `fallback` when the key is missing or holds no
/// number: nlohmann::json writes a non-finite double as null, and json::value() would throw on
/// it (a fold must never fail), e.g. the +inf upper bound of a speedup interval from fewer than
/// two runs per side.
double number_or(const nlohmann::json& j, const char* key, double fallback) {
  if (!j.is_object())
    return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

/// The numbers of the array under `key` (a null element, a non-finite double as written by
/// nlohmann::json, becomes NaN so positions are kept); empty when the key holds no array.
std::vector<double> numbers_or_nan(const nlohmann::json& j, const char* key) {
  std::vector<double> out;
  if (!j.is_object())
    return out;
  auto it = j.find(key);
  if (it == j.end() || !it->is_array())
    return out;
  for (const auto& v : *it)
    out.push_back(v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN());
  return out;
}

} // namespace

tuning::configuration configuration_of(const wire::TrialSpec& spec) {
  tuning::configuration c;
  if (spec.knobs() != nullptr)
    for (const auto* k : *spec.knobs()) {
      auto name = k->name()->str();
      switch (k->value_type()) {
        case wire::KnobValue::IntKnob: c.knobs[name] = k->value_as_IntKnob()->value(); break;
        case wire::KnobValue::RealKnob: c.knobs[name] = k->value_as_RealKnob()->value(); break;
        case wire::KnobValue::BoolKnob: c.knobs[name] = k->value_as_BoolKnob()->value(); break;
        case wire::KnobValue::TextKnob:
          c.knobs[name] = k->value_as_TextKnob()->value() == nullptr
                            ? std::string{}
                            : k->value_as_TextKnob()->value()->str();
          break;
        default: break;
      }
    }
  if (spec.patches() != nullptr)
    for (const auto* p : *spec.patches())
      c.patches.push_back(p->str());
  std::sort(c.patches.begin(), c.patches.end());
  return c;
}

nlohmann::json to_tagged_json(const knob_value& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v))
    return {{"int", *i}};
  if (const auto* d = std::get_if<double>(&v))
    return {{"real", *d}};
  if (const auto* b = std::get_if<bool>(&v))
    return {{"bool", *b}};
  return {{"text", std::get<std::string>(v)}};
}

std::optional<knob_value> from_tagged_json(const nlohmann::json& j) {
  if (!j.is_object() || j.size() != 1)
    return std::nullopt;
  auto it = j.begin(); // (a structured binding of *j.items().begin() would dangle)
  const std::string tag = it.key();
  const auto& value = it.value();
  if (tag == "int" && value.is_number_integer())
    return knob_value{value.get<std::int64_t>()};
  if (tag == "real" && value.is_number())
    return knob_value{value.get<double>()};
  if (tag == "bool" && value.is_boolean())
    return knob_value{value.get<bool>()};
  if (tag == "text" && value.is_string())
    return knob_value{value.get<std::string>()};
  return std::nullopt;
}

nlohmann::json to_json(const tuning::configuration& c) {
  nlohmann::json knobs = nlohmann::json::object();
  for (const auto& [k, v] : c.knobs)
    knobs[k] = to_tagged_json(v);
  return {{"knobs", knobs}, {"patches", c.patches}};
}

std::optional<tuning::configuration> configuration_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("knobs") || !j["knobs"].is_object())
    return std::nullopt;
  tuning::configuration c;
  for (const auto& [k, v] : j["knobs"].items()) {
    auto value = from_tagged_json(v);
    if (!value)
      return std::nullopt;
    c.knobs[k] = *value;
  }
  if (j.contains("patches") && j["patches"].is_array())
    for (const auto& p : j["patches"])
      if (p.is_string())
        c.patches.push_back(p.get<std::string>());
  std::sort(c.patches.begin(), c.patches.end());
  return c;
}

nlohmann::json to_json(const tuning::prior_set& p) {
  nlohmann::json settings = nlohmann::json::array();
  for (const auto& s : p.settings)
    settings.push_back({{"knob", s.knob},
                        {"value", to_tagged_json(s.value)},
                        {"speedup", s.speedup},
                        {"memory_bytes", s.memory_bytes},
                        {"source", s.source}});
  nlohmann::json patches = nlohmann::json::array();
  for (const auto& x : p.patches)
    patches.push_back({{"patch", x.patch},
                       {"speedup", x.speedup},
                       {"memory_bytes", x.memory_bytes},
                       {"source", x.source}});
  return {{"settings", settings}, {"patches", patches}};
}

tuning::prior_set priors_from_json(const nlohmann::json& j) {
  tuning::prior_set p;
  if (j.contains("settings"))
    for (const auto& s : j["settings"]) {
      auto v = from_tagged_json(s.value("value", nlohmann::json{}));
      if (!v)
        continue;
      p.settings.push_back({s.value("knob", ""), *v, number_or(s, "speedup", 1.0),
                            number_or(s, "memory_bytes", 0.0), s.value("source", "")});
    }
  if (j.contains("patches"))
    for (const auto& x : j["patches"])
      p.patches.push_back({x.value("patch", ""), number_or(x, "speedup", 1.0),
                           number_or(x, "memory_bytes", 0.0), x.value("source", "")});
  return p;
}

const tuning::trial_record* run_state::find(std::uint64_t id, std::uint32_t attempt) const {
  for (const auto& t : trials)
    if (t.trial_id == id && t.attempt == attempt)
      return &t;
  return nullptr;
}

tuning::trial_record* run_state::find(std::uint64_t id, std::uint32_t attempt) {
  for (auto& t : trials)
    if (t.trial_id == id && t.attempt == attempt)
      return &t;
  return nullptr;
}

std::vector<const tuning::trial_record*> run_state::latest_attempts() const {
  std::vector<const tuning::trial_record*> out;
  // Trial ids are dense from 0 in every run the supervisor writes: index them directly (the
  // step function asks for this several times per trial); a map only for sparse ids.
  std::uint64_t max_id = 0;
  for (const auto& t : trials)
    max_id = std::max(max_id, t.trial_id);
  if (!trials.empty() && max_id < 4 * trials.size() + 64) {
    std::vector<std::size_t> at(max_id + 1, SIZE_MAX);
    for (const auto& t : trials) {
      auto& slot = at[t.trial_id];
      if (slot == SIZE_MAX) {
        slot = out.size();
        out.push_back(&t);
      } else if (t.attempt > out[slot]->attempt) {
        out[slot] = &t;
      }
    }
    return out;
  }
  std::map<std::uint64_t, std::size_t> at;
  for (const auto& t : trials) {
    auto [it, fresh] = at.emplace(t.trial_id, out.size());
    if (fresh)
      out.push_back(&t);
    else if (t.attempt > out[it->second]->attempt)
      out[it->second] = &t;
  }
  return out;
}

std::uint64_t run_state::next_trial_id() const {
  std::uint64_t next = 0;
  for (const auto& t : trials)
    next = std::max(next, t.trial_id + 1);
  return next;
}

bool run_state::stage_done(const std::string& stage) const {
  return std::find(stages_completed.begin(), stages_completed.end(), stage)
         != stages_completed.end();
}

namespace {

std::optional<nlohmann::json> document_json(const recorded_event& ev) {
  auto doc = messages::document_msg::decode(ev.payload);
  if (!doc || (*doc)->json() == nullptr)
    return std::nullopt;
  auto j = nlohmann::json::parse((*doc)->json()->str(), nullptr, false);
  if (j.is_discarded())
    return std::nullopt;
  return j;
}

tuning::trial_outcome outcome_of(wire::Outcome o) {
  return static_cast<tuning::trial_outcome>(static_cast<std::uint8_t>(o));
}

std::string stage_name(wire::Stage s) {
  switch (s) {
    case wire::Stage::Init: return "init";
    case wire::Stage::Doctor: return "doctor";
    case wire::Stage::Run: return "run";
    case wire::Stage::Report: return "report";
    case wire::Stage::Apply: return "apply";
    default: return "unknown";
  }
}

/// The purpose of a proposed trial: the structured fields (purpose_kind, candidate_trial, round)
/// when the spec has them, else the text of logs written before them ("baseline", "explore",
/// "verify-baseline/<id>", "verify-candidate/<id>#<round>"), read here and nowhere else.
void set_purpose(tuning::trial_record& t, const wire::TrialSpec& spec) {
  std::string text = spec.purpose() != nullptr ? spec.purpose()->str() : "";
  if (spec.purpose_kind() != wire::Purpose::Unknown) {
    t.kind = static_cast<tuning::purpose_kind>(static_cast<std::uint8_t>(spec.purpose_kind()));
    t.candidate_trial = spec.candidate_trial();
    t.round = spec.round();
    t.purpose = tuning::label(t.kind);
    return;
  }
  tuning::set_purpose_text(t, text);
}

/// What a workload's final line declares. Keys that are absent, or not non-negative integers,
/// stay unset (the verifier then reports them as not declared where the contract names them).
tuning::declared_work declared_work_of(const std::string& final_json) {
  tuning::declared_work d;
  auto j = nlohmann::json::parse(final_json, nullptr, false);
  if (!j.is_object())
    return d;
  d.final_seen = true;
  auto count = [&j](const char* key) -> std::optional<std::uint64_t> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0)
      return std::nullopt;
    return it->get<std::uint64_t>();
  };
  d.global_batch = count("global_batch");
  d.params = count("params");
  d.layers = count("layers");
  auto w = j.find("timed_steps");
  if (w != j.end() && w->is_array() && w->size() == 2 && (*w)[0].is_number_unsigned()
      && (*w)[1].is_number_unsigned())
    d.timed_steps = std::pair{(*w)[0].get<std::uint32_t>(), (*w)[1].get<std::uint32_t>()};
  return d;
}

/// The wall time a lost attempt is known to have held its node, seconds: from its TrialDispatched
/// to the RunInterrupted that listed it (that life stopped its processes then), else to the
/// TrialLost `lost` (a node-runner that failed: now; an earlier life found on resume: the
/// trial's processes outlive a harness killed with -9, so until the resume, an upper bound), at
/// most `timeout_s` (its wall-clock limit; 0: none). 0 when its dispatch was not seen. Only
/// recorded times enter, so replay and every reader compute the same.
double lost_wall_time_s(const run_state& s, const tuning::trial_record& t,
                        const recorded_event& lost, double timeout_s) {
  auto it = s.in_flight.find({t.trial_id, t.attempt});
  if (it == s.in_flight.end() || it->second.dispatched_at_ns <= 0)
    return 0.0;
  auto end = it->second.interrupted_at_ns > 0 ? it->second.interrupted_at_ns : lost.recorded_at_ns;
  double wall = std::max<double>(0.0, static_cast<double>(end - it->second.dispatched_at_ns) / 1e9);
  if (timeout_s > 0 && std::isfinite(timeout_s))
    wall = std::min(wall, timeout_s);
  return wall;
}

} // namespace

void apply_result(tuning::trial_record& t, const wire::TrialResult& m) {
  t.finished = true;
  t.outcome = outcome_of(m.outcome());
  if (m.steps() != nullptr) {
    std::map<std::string, std::pair<double, int>> phases;
    auto add = [&phases](const char* name, const flatbuffers::Optional<double>& v) {
      if (v.has_value()) {
        phases[name].first += *v;
        phases[name].second += 1;
      }
    };
    for (const auto* st : *m.steps()) {
      tuning::step_point p{st->step(), st->loss(), st->tokens(), st->step_time_s()};
      p.warmup = st->warmup();
      p.observed_at_s = st->observed_at_s().has_value() ? *st->observed_at_s() : -1.0;
      if (st->eval_loss().has_value())
        p.eval_loss = *st->eval_loss();
      t.steps.push_back(p);
      add("data", st->data_s());
      add("forward", st->forward_s());
      add("backward", st->backward_s());
      add("optimizer", st->optimizer_s());
      add("communication", st->communication_s());
    }
    for (const auto& [name, sum_count] : phases)
      t.phase_s[name] = sum_count.first / sum_count.second;
  }
  t.wall_time_s = m.wall_time_s();
  t.device_seconds = m.device_seconds();
  t.peak_memory_bytes = m.peak_memory_bytes();
  t.memory = static_cast<tuning::memory_source>(m.memory_source());
  t.host_peak_bytes = m.host_peak_bytes();
  t.detail = m.detail() != nullptr ? m.detail()->str() : "";
  if (m.final_report() != nullptr && m.final_report()->size() > 0)
    t.declared = declared_work_of(m.final_report()->str());
}

void run_projection::apply(const recorded_event& ev) {
  auto& s = state_;
  ++s.events;
  switch (static_cast<wire::EventKind>(ev.kind)) {
    case wire::EventKind::RunCreated: {
      if (auto m = messages::run_created_msg::decode(ev.payload)) {
        s.task_path = (*m)->task() != nullptr ? (*m)->task()->str() : "";
        s.seed = (*m)->seed();
      }
      break;
    }
    case wire::EventKind::StageStarted:
    case wire::EventKind::StageCompleted: {
      if (auto m = messages::stage_event_msg::decode(ev.payload)) {
        auto name = stage_name((*m)->stage());
        auto& list = ev.kind == static_cast<event_kind_t>(wire::EventKind::StageStarted)
                       ? s.stages_started
                       : s.stages_completed;
        if (std::find(list.begin(), list.end(), name) == list.end())
          list.push_back(name);
      }
      break;
    }
    case wire::EventKind::ContractLocked:
      s.contract_doc = document_json(ev);
      s.out_of_scope_patches.clear(); // an init repeated after a crash: the latest lock counts
      s.patch_conflicts.clear();
      if (s.contract_doc && s.contract_doc->contains("patches"))
        for (const auto& [name, p] : (*s.contract_doc)["patches"].items())
          if (!p.value("in_scope", true))
            s.out_of_scope_patches.push_back(name);
      if (s.contract_doc && s.contract_doc->contains("patch_conflicts"))
        for (const auto& pair : (*s.contract_doc)["patch_conflicts"])
          if (pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_string())
            s.patch_conflicts.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
      break;
    case wire::EventKind::LlmRequested:
    case wire::EventKind::LlmResponded:
    case wire::EventKind::LlmAnswerParsed:
      if (auto j = document_json(ev); j && j->is_object()) {
        auto kind = static_cast<wire::EventKind>(ev.kind);
        (*j)["event"] = kind == wire::EventKind::LlmRequested   ? "request"
                        : kind == wire::EventKind::LlmResponded ? "response"
                                                                : "parsed";
        s.llm.push_back(std::move(*j));
      }
      break;
    case wire::EventKind::PriorsLoaded:
      if (auto j = document_json(ev)) {
        s.priors = priors_from_json(*j);
        s.priors_loaded = true;
      }
      break;
    case wire::EventKind::ExperienceSeeded:
      if (auto j = document_json(ev)) {
        s.experience_seeded = true;
        s.experience_seeds.clear(); // an init repeated after a crash: the latest pack counts
        s.experience_seeds_explained = j->value("serving", "") == "propose-or-explain/1";
        s.experience_pack = nullptr;
        nlohmann::json origins = nlohmann::json::array();
        if (j->contains("seeds"))
          for (const auto& c : (*j)["seeds"])
            if (auto cfg = configuration_from_json(c.value("config", nlohmann::json{}))) {
              s.experience_seeds.push_back(*cfg);
              nlohmann::json o = nlohmann::json::object();
              for (const char* key : {"origin_hardware", "match", "same_workload", "speedup", "run",
                                       "peak_memory_bytes", "origin", "via", "pack_sha256"})
                if (c.contains(key))
                  o[key] = c[key];
              origins.push_back(std::move(o));
            }
        if (j->contains("mode"))
          s.experience_pack = {
            {"mode", (*j)["mode"]},
            {"not_served", j->value("not_served", nlohmann::json::object())},
            {"served_by_match", j->value("served_by_match", nlohmann::json::object())},
            {"seeds", origins}};
        // What the served finding's models learnt (decide::experience_priors reads it back).
        if (j->contains("mode") && j->contains("prior_adjustment"))
          s.experience_pack["prior_adjustment"] = (*j)["prior_adjustment"];
      }
      break;
    case wire::EventKind::BaselineCalibrated:
      if (auto j = document_json(ev)) {
        s.doctor_doc = j;
        tuning::noise_estimate n;
        const auto& nj = (*j)["noise"];
        n.runs = nj.is_object() ? nj.value("runs", std::size_t{0}) : 0;
        n.mean_step_time_s = number_or(nj, "mean_step_time_s", 0.0);
        n.log_sd = number_or(nj, "log_sd", 0.0);
        n.cv = number_or(nj, "cv", 0.0);
        n.min_detectable_speedup = number_or(nj, "min_detectable_speedup", 0.0);
        s.noise = n;
        for (const auto& r : (*j)["reference"]) {
          auto step = r.value("step", 0u);
          s.reference.loss[step] = number_or(r, "loss", 0.0);
          s.reference.spread[step] = number_or(r, "spread", 0.0);
        }
        // Contracts with loss_mode window / eval (absent in pointwise runs and older logs).
        if (auto w = j->find("loss_windows"); w != j->end() && w->is_array()) {
          s.reference.windows.clear();
          for (const auto& r : *w) {
            tuning::loss_window_reference x;
            x.first = r.value("first", 0u);
            x.last = r.value("last", 0u);
            x.mean = number_or(r, "mean", 0.0);
            x.within_var = number_or(r, "within_var", 0.0);
            x.between_var = number_or(r, "between_var", 0.0);
            x.runs = r.value("runs", 0u);
            s.reference.windows.push_back(x);
          }
        }
        if (auto e = j->find("eval_reference"); e != j->end() && e->is_array())
          for (const auto& r : *e) {
            auto step = r.value("step", 0u);
            s.reference.eval_loss[step] = number_or(r, "loss", 0.0);
            s.reference.eval_spread[step] = number_or(r, "spread", 0.0);
          }
      }
      break;
    case wire::EventKind::TrialProposed:
      if (auto m = messages::trial_spec_msg::decode(ev.payload)) {
        tuning::trial_record t;
        t.trial_id = (*m)->trial_id();
        t.attempt = (*m)->attempt();
        set_purpose(t, **m);
        t.config = configuration_of(**m);
        if (t.kind == tuning::purpose_kind::explore && t.attempt == 0 && s.last_proposals)
          ++s.proposals_taken;
        if (s.find(t.trial_id, t.attempt) == nullptr)
          s.trials.push_back(std::move(t));
      }
      break;
    case wire::EventKind::TrialCompleted:
      if (auto m = messages::trial_result_msg::decode(ev.payload)) {
        auto* t = s.find((*m)->trial_id(), (*m)->attempt());
        if (t == nullptr || t->finished)
          break; // a stale or duplicate result never counts twice
        apply_result(*t, **m);
        s.in_flight.erase({t->trial_id, t->attempt});
      }
      break;
    case wire::EventKind::TrialDispatched:
      if (auto m = messages::trial_spec_msg::decode(ev.payload))
        if (auto* t = s.find((*m)->trial_id(), (*m)->attempt())) {
          t->dispatched = true;
          if (!t->finished)
            s.in_flight.try_emplace({t->trial_id, t->attempt},
                                    attempt_clock{ev.recorded_at_ns, 0});
        }
      break;
    case wire::EventKind::TrialResultStale: ++s.stale_results; break;
    case wire::EventKind::TrialLost:
      if (auto m = messages::trial_spec_msg::decode(ev.payload)) {
        auto* t = s.find((*m)->trial_id(), (*m)->attempt());
        if (t != nullptr && !t->finished) {
          t->finished = true;
          t->outcome = tuning::trial_outcome::lost;
          t->wall_time_s = lost_wall_time_s(s, *t, ev, (*m)->timeout_s());
          s.in_flight.erase({t->trial_id, t->attempt});
        }
      }
      break;
    case wire::EventKind::TrialVerified:
      if (auto j = document_json(ev)) {
        auto* t = s.find(j->value("trial_id", std::uint64_t{0}), j->value("attempt", 0u));
        if (t == nullptr)
          break;
        t->verified = true;
        t->violations = j->value("violations", std::vector<std::string>{});
        t->timed_step_time_s = number_or(*j, "timed_step_time_s", 0.0);
        if (!t->violations.empty() && t->outcome == tuning::trial_outcome::ok)
          t->outcome = tuning::trial_outcome::contract_violation;
      }
      break;
    case wire::EventKind::CandidateReverified:
      if (auto j = document_json(ev)) {
        reverification r;
        r.candidate_trial = j->value("candidate_trial", std::uint64_t{0});
        if (auto c = configuration_from_json(j->value("config", nlohmann::json{})))
          r.config = *c;
        r.baseline_times_s = numbers_or_nan(*j, "baseline_times_s");
        r.candidate_times_s = numbers_or_nan(*j, "candidate_times_s");
        r.estimate.speedup = number_or(*j, "speedup", 1.0);
        r.estimate.ci_low = number_or(*j, "ci_low", 0.0);
        // null is the writer's +inf (an interval from fewer than two runs per side is
        // [0, inf)); a missing key stays 0 as before.
        r.estimate.ci_high =
          number_or(*j, "ci_high",
                    j->contains("ci_high") ? std::numeric_limits<double>::infinity() : 0.0);
        r.estimate.dof = number_or(*j, "dof", 0.0);
        r.promotable = j->value("promotable", false);
        r.reason = j->value("reason", "");
        r.round = j->value("round", 1u);
        r.remeasure = j->value("remeasure", false);
        // A later round of the same candidate supersedes the earlier one.
        auto same = std::find_if(s.reverifications.begin(), s.reverifications.end(),
                                 [&r](const reverification& x) {
                                   return x.candidate_trial == r.candidate_trial;
                                 });
        if (same != s.reverifications.end())
          *same = std::move(r);
        else
          s.reverifications.push_back(std::move(r));
      }
      break;
    case wire::EventKind::CandidatePromoted: s.promotion = document_json(ev); break;
    case wire::EventKind::ProposalsMade:
      s.last_proposals = document_json(ev);
      s.proposals_taken = 0;
      break;
    case wire::EventKind::SearchStopped:
      if (!s.search_stopped)
        s.search_stopped = document_json(ev);
      break;
    case wire::EventKind::RunInterrupted:
      ++s.interruptions;
      if (auto j = document_json(ev); j && j->contains("in_flight") && (*j)["in_flight"].is_array())
        for (const auto& a : (*j)["in_flight"])
          if (a.is_array() && a.size() == 2 && a[0].is_number_unsigned()
              && a[1].is_number_unsigned()) {
            auto it = s.in_flight.find({a[0].get<std::uint64_t>(), a[1].get<std::uint32_t>()});
            if (it != s.in_flight.end() && it->second.interrupted_at_ns == 0)
              it->second.interrupted_at_ns = ev.recorded_at_ns;
          }
      break;
    case wire::EventKind::ApplyStarted: s.apply_intent = document_json(ev); break;
    case wire::EventKind::ReportWritten: s.report = document_json(ev); break;
    case wire::EventKind::ChangesApplied: s.applied = document_json(ev); break;
    default: break;
  }
}

caf::expected<run_state> load_run(const event_log& log, const std::string& run_id) {
  run_projection p{run_id};
  if (auto err = fold_stream(log, run_id, p))
    return err;
  return p.state();
}

} // namespace infrarsi::store

namespace infrarsi::store {

std::string run_policy(const run_state& run) {
  if (run.contract_doc && run.contract_doc->is_object())
    return run.contract_doc->value("policy", std::string{"seeded_local_search/1"});
  return tuning::default_policy_name;
}

} // namespace infrarsi::store
