#include "runtime/replay.hpp"

#include <vector>

#include <nlohmann/json.hpp>

#include "actors/decisions.hpp"
#include "adapters/environment.hpp"
#include "messages/codec.hpp"
#include "messages/errc.hpp"
#include "runtime/store_paths.hpp"
#include "runtime/task_file.hpp"
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
        if (!same("contract", logged, actors::contract_json(task_).dump()) && j.is_object())
          r.decision += ": the task's " + actors::contract_changes(j.value("contract",
                                                                         nlohmann::json::object()),
                                                                 task_);
        return !r.diverged;
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
        auto config = store::configuration_of(**spec);
        std::string purpose = (*spec)->purpose() != nullptr ? (*spec)->purpose()->str() : "";
        std::string logged = "trial " + std::to_string(id) + " " + purpose + " " + config.key();
        std::string want_purpose = purpose;
        tuning::configuration want;
        if (purpose == "explore") {
          auto doc = nlohmann::json::parse(actors::proposal_doc(task_, state, 1));
          if (doc["proposals"].empty())
            return diverge("proposal", logged, "no proposal (search space exhausted)");
          if (auto c = store::configuration_from_json(doc["proposals"][0]["config"]))
            want = *c;
        } else if (purpose == "baseline" || purpose.rfind("verify-baseline/", 0) == 0) {
          want = tuning::baseline_configuration(task_);
        } else if (purpose.rfind("verify-candidate/", 0) == 0) {
          auto rest = purpose.substr(std::string{"verify-candidate/"}.size());
          auto candidate = std::stoull(rest.substr(0, rest.find('#')));
          want_purpose = purpose;
          bool picked = false;
          for (const auto& [cid, c] : actors::reverify_candidates(task_, state))
            if (cid == candidate) {
              want = c;
              picked = true;
            }
          if (!picked)
            return diverge("proposal", logged,
                           "trial " + std::to_string(candidate) + " is not a candidate to verify");
        }
        return same("proposal", logged,
                    "trial " + std::to_string(state.next_trial_id()) + " " + want_purpose + " "
                      + want.key());
      }
      case wire::EventKind::BaselineCalibrated:
        return same("calibration", document_text(ev), actors::calibrate_doc(task_, state));
      case wire::EventKind::TrialVerified: {
        auto j = nlohmann::json::parse(document_text(ev), nullptr, false);
        if (!j.is_object())
          return diverge("verdict", document_text(ev), "a verdict document");
        auto doc = actors::check_doc(task_, state, j.value("trial_id", std::uint64_t{0}),
                                     j.value("attempt", 0u));
        return same("verdict", document_text(ev), doc ? *doc : describe(doc.error()));
      }
      case wire::EventKind::CandidateReverified: {
        auto j = nlohmann::json::parse(document_text(ev), nullptr, false);
        if (!j.is_object())
          return diverge("reverification", document_text(ev), "a reverification document");
        auto doc = actors::reverify_doc(state, j.value("candidate_trial", std::uint64_t{0}));
        return same("reverification", document_text(ev), doc ? *doc : describe(doc.error()));
      }
      case wire::EventKind::CandidatePromoted:
        return same("promotion", document_text(ev),
                    actors::promotion_decision(task_, state).dump());
      default: return true;
    }
  }

  void apply(const store::recorded_event& ev) { fold_.apply(ev); }

private:
  const tuning::task_spec& task_;
  store::run_projection fold_;
};

} // namespace

caf::expected<replay_result> replay_run(const store::event_log& log, const std::string& run_id,
                                        const tuning::task_spec& task) {
  replay_result r;
  replayer rp{task, run_id};
  auto err = log.for_each_in_stream(run_id, 0, [&](const store::recorded_event& ev) {
    ++r.events;
    if (!r.diverged && !rp.check(ev, r))
      return false; // stop at the first divergence
    rp.apply(ev);
    return true;
  });
  if (err)
    return err;
  if (r.events == 0)
    return make_error(errc::not_found, "run '" + run_id + "' has no events");
  return r;
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
  auto task_path = o.task_path.empty() ? state->task_path : o.task_path;
  auto task = load_task_file(task_path);
  if (!task) {
    err << "infrarsi replay: " << describe(task.error())
        << (o.task_path.empty() ? " (the task file the run recorded; give --task FILE)" : "")
        << '\n';
    return 3;
  }
  if (state->contract_doc) {
    auto logged = state->contract_doc->value("task_sha256", std::string{});
    auto now = adapters::sha256_file(task->source);
    if (!logged.empty() && now && *now != logged)
      err << "infrarsi replay: note: " << task->source
          << " differs from the file the run started with (sha256 " << logged.substr(0, 12)
          << "... then, " << now->substr(0, 12) << "... now); decisions are checked anyway\n";
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
