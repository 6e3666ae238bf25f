// Google Benchmark of the event-driven supervisor's CPU per trial: it must not grow with the run
// (each event is folded once into an incremental store::run_projection, never the whole run
// again). One iteration is one more search trial of a run on config/tasks/sim-dense-1node.toml
// that already holds N verified search trials (N = 10, 100, 1,000), driven as actors/supervisor.cpp
// drives it with one node slot:
//
//   planner reply -> decide::proposal_batch, append ProposalsMade + TrialProposed, fold,
//                    next_step (launch) -> append TrialDispatched, fold, next_step (wait)
//   node result   -> append TrialCompleted, fold, next_step (verify), next_step (wait)
//   verifier      -> catch up its own fold, decide::check_doc; append TrialVerified, fold,
//                    next_step (propose: the next trial's request), next_step (wait)
//
// Every append goes to a store::memory_event_log at the projection's version and is folded with
// store::fold_stream from the projection's next_position (the supervisor's append_all); the
// planner and the verifier keep their own incremental folds, caught up on each request as
// actors::fold_state::catch_up does (re-implemented here without CAF: same three lines).
//
//   supervisor/N          (a) the supervisor and the verifier: appends, folds, next_step,
//                             proposal_batch, check_doc, the progress line; the proposal is a
//                             prepared random configuration (no planner)
//   supervisor+planner/N  (b) (a) with the planner: its fold caught up to the request's `at`
//                             and decide::proposal_doc(n = 1) with the run's policy, bayes_ei/1
//   supervisor+refold/N   (c) (a) plus one store::load_run of the whole stream per trial: what
//                             the old supervisor did ~20 times per trial
//
// The history: RunCreated, the init stage (ContractLocked from decide::contract_locked_doc with
// the scope lock of adapters::lock_scope, policy bayes_ei/1, a search budget of 100,000 trials
// so it never ends; PriorsLoaded with the neutral priors the knowledge base gives a sim task;
// ExperienceSeeded with no seeds), the doctor (3 baselines, BaselineCalibrated from
// decide::calibrate_doc, their verdicts) and the run stage, all made by the same driver; the
// search trials are random candidates (tuning::enumerate_candidates) measured by the in-process
// simulator evaluator (bench/sim_evaluator.hpp, as bench/planner_bench.cpp): about a third run
// out of memory, a few break the contract. Their TrialCompleted payloads are TrialResult
// messages built from the simulator's trials (every step, phases, final line).
//
// State growth: before every iteration the run is reset to exactly N trials with the timer
// paused (a fresh memory_event_log holding the prepared events, the three projections restored
// from copies of their states), so every timed iteration adds trial N + 1 to a run of N. The
// node-runner's work (the simulator's trial and packing its TrialResult) is not timed either: it
// is measured once per (configuration, trial id) with the timer paused and cached.
//
//   build-release/bin/infrarsi_supervisor_bench [--task=FILE] [Google Benchmark flags]
//
// Reported: CPU time per trial; counters per iteration: next_step calls, appends, events folded
// by the supervisor, planner_stopped (bayes_ei's stop rule fired and a prepared configuration
// was used instead); "trials" = N, "events" = the stream's events at N.

#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <malloc.h>
#include <unistd.h>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "adapters/environment.hpp"
#include "adapters/scope.hpp"
#include "adapters/task_file.hpp"
#include "adapters/trial_launcher.hpp"
#include "bench/sim_evaluator.hpp"
#include "decide/decisions.hpp"
#include "decide/next_step.hpp"
#include "messages/errc.hpp"
#include "store/memory_event_log.hpp"
#include "store/run_projection.hpp"
#include "tuning/planner.hpp"

namespace {

using namespace infrarsi;
using decide::step_kind;
using tuning::purpose_kind;

std::string g_task_path = std::string{INFRARSI_SOURCE_DIR} + "/config/tasks/sim-dense-1node.toml";
std::unique_ptr<bench::sim_evaluator> g_eval;
std::string g_task_text;
nlohmann::json g_lock;
nlohmann::json g_hardware;
std::string g_fingerprint;
constexpr std::uint64_t g_seed = 1;
constexpr std::uint32_t g_search_budget = 100000;
/// The prepared search configurations: random candidates, as bench/planner_bench.cpp.
std::vector<tuning::configuration> g_configs;

const tuning::task_spec& task() {
  return g_eval->task();
}

void check(const caf::error& err, const std::string& what) {
  if (err)
    throw std::runtime_error(what + ": " + describe(err));
}

template <class T>
const T& check(const caf::expected<T>& v, const std::string& what) {
  if (!v)
    throw std::runtime_error(what + ": " + describe(v.error()));
  return *v;
}

store::new_event event(wire::EventKind kind, const messages::byte_buffer& payload) {
  return store::new_event{static_cast<store::event_kind_t>(kind), payload};
}

store::new_event doc_event(wire::EventKind kind, const char* schema, const std::string& json) {
  return event(kind, messages::make_document(schema, json).bytes());
}

/// A simulator trial as the node-runner would report it (TrialResult): a run that produced
/// steps ended ok (the verifier finds its violations); one that did not carries its outcome.
messages::trial_result_msg result_of(const tuning::trial_record& rec) {
  wire::TrialResultT r;
  r.trial_id = rec.trial_id;
  r.attempt = rec.attempt;
  const bool ran = !rec.steps.empty();
  r.outcome = ran ? wire::Outcome::Ok
                  : static_cast<wire::Outcome>(static_cast<std::uint8_t>(rec.outcome));
  auto phase = [&rec](const char* name) -> std::optional<double> {
    auto it = rec.phase_s.find(name);
    return it == rec.phase_s.end() ? std::nullopt : std::optional<double>{it->second};
  };
  for (const auto& s : rec.steps) {
    auto m = std::make_unique<wire::StepMetricsT>();
    m->step = s.step;
    m->loss = s.loss;
    m->tokens = s.tokens;
    m->step_time_s = s.step_time_s;
    m->warmup = s.warmup;
    if (auto v = phase("data"))
      m->data_s = *v;
    if (auto v = phase("forward"))
      m->forward_s = *v;
    if (auto v = phase("backward"))
      m->backward_s = *v;
    if (auto v = phase("optimizer"))
      m->optimizer_s = *v;
    if (auto v = phase("communication"))
      m->communication_s = *v;
    if (rec.peak_memory_bytes > 0)
      m->peak_memory_bytes = rec.peak_memory_bytes;
    r.steps.push_back(std::move(m));
  }
  r.peak_memory_bytes = rec.peak_memory_bytes;
  r.wall_time_s = rec.wall_time_s;
  r.device_seconds = rec.device_seconds;
  r.exit_code = ran ? 0
                : rec.outcome == tuning::trial_outcome::oom          ? 86
                : rec.outcome == tuning::trial_outcome::launch_error ? 2
                                                                     : 1;
  r.detail = ran ? std::string{} : rec.detail;
  if (rec.declared.final_seen) {
    nlohmann::json fin = {{"event", "final"},
                          {"device_seconds", rec.device_seconds},
                          {"simulated_wall_s", rec.wall_time_s}};
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

/// actors::fold_state::catch_up without CAF: a projection folded incrementally on each request.
struct fold_state {
  std::optional<store::run_projection> fold;
  const store::run_state& catch_up(const store::event_log& log, const std::string& run_id,
                                   std::optional<std::uint64_t> upto = {}) {
    if (!fold || fold->state().run_id != run_id || (upto && fold->next_position() > *upto))
      fold.emplace(run_id);
    check(store::fold_stream(log, run_id, *fold, upto), "fold");
    return fold->state();
  }
};

/// A request in flight (an actor's reply to come).
struct message {
  enum kind_t { propose, verify, calibrate, result } kind = propose;
  std::uint32_t n = 0;
  std::uint64_t at = 0;
  decide::attempt_id attempt;
  decide::launch launch;
};

/// A projection's state and position, to restore it.
struct saved_fold {
  std::optional<store::run_state> state;
  std::uint64_t covered = 0;
  std::uint64_t skipped = 0;
};

saved_fold save(const std::optional<store::run_projection>& p) {
  saved_fold s;
  if (p) {
    s.state = p->state();
    s.covered = p->next_position();
    s.skipped = p->unknown_kinds_skipped();
  }
  return s;
}

void restore(std::optional<store::run_projection>& p, const saved_fold& s) {
  p.reset();
  if (s.state)
    p.emplace(*s.state, s.covered, s.skipped);
}

/// Everything needed to put a run back to N trials.
struct checkpoint {
  std::vector<store::new_event> events;
  saved_fold supervisor, planner, verifier;
  std::uint64_t version = 0;
  decide::outstanding busy;
  bool node_busy = false;
  std::deque<message> mailbox;
  std::size_t scripted_next = 0;
  std::uint64_t explore_verified = 0;
};

/// The supervisor actor's loop (actors/supervisor.cpp) made synchronous, with the planner, the
/// verifier and one node-runner answering from a mailbox in order.
class run_driver {
public:
  enum class planner_mode {
    /// Replies are prepared configurations (g_configs, in order); no planner work.
    scripted,
    /// Replies are decide::proposal_doc over the planner's own incremental fold.
    policy,
  };

  explicit run_driver(std::string run_id) : run_id_(std::move(run_id)) {}

  planner_mode mode = planner_mode::scripted;
  /// In scripted mode, still keep the planner's fold caught up (while preparing: so that the
  /// checkpoint holds the planner's state as a real run would have it).
  bool scripted_planner_fold = true;
  /// Paused around the node-runner's (untimed) work when set.
  benchmark::State* timer = nullptr;

  // per-iteration statistics
  std::uint64_t next_steps = 0;
  std::uint64_t appends = 0;
  std::uint64_t planner_stopped = 0;

  /// The supervisor's start: RunCreated, then advance.
  void start() {
    log_ = std::make_unique<store::memory_event_log>();
    supervisor_.emplace(run_id_);
    wire::RunCreatedT rc;
    rc.task = task().source;
    rc.seed = g_seed;
    rc.tool_version = "0.2.0";
    append_all({event(wire::EventKind::RunCreated, messages::run_created_msg::pack(rc).bytes())});
    advance();
  }

  /// Handles messages until `n` more search trials are verified (the advance after the last
  /// verdict has sent the next proposal request).
  void run_trials(std::uint64_t n) {
    const auto target = explore_verified_ + n;
    while (explore_verified_ < target) {
      if (mailbox_.empty())
        throw std::runtime_error("the run stopped: nothing in flight after " +
                                 std::to_string(explore_verified_) + " search trials");
      auto m = std::move(mailbox_.front());
      mailbox_.pop_front();
      handle(m);
    }
  }

  [[nodiscard]] const store::event_log& log() const { return *log_; }
  [[nodiscard]] const std::string& run_id() const { return run_id_; }
  [[nodiscard]] const store::run_state& state() const { return supervisor_->state(); }
  [[nodiscard]] std::uint64_t explore_verified() const { return explore_verified_; }

  [[nodiscard]] checkpoint save_checkpoint() const {
    checkpoint cp;
    auto events = log_->read_stream(run_id_);
    for (const auto& e : check(events, "read"))
      cp.events.push_back(store::new_event{e.kind, e.payload});
    cp.supervisor = save(supervisor_);
    cp.planner = save(planner_.fold);
    cp.verifier = save(verifier_.fold);
    cp.version = version_;
    cp.busy = busy_;
    cp.node_busy = node_busy_;
    cp.mailbox = mailbox_;
    cp.scripted_next = scripted_next_;
    cp.explore_verified = explore_verified_;
    return cp;
  }

  void restore_checkpoint(const checkpoint& cp) {
    // Free the previous iteration's run first and let glibc consolidate its free chunks here,
    // untimed: otherwise the timed trial's first large allocation pays for consolidating
    // thousands of chunks freed by the reset (malloc_consolidate), a cost that grows with N
    // and is the benchmark's, not the supervisor's.
    log_.reset();
    supervisor_.reset();
    planner_.fold.reset();
    verifier_.fold.reset();
    mailbox_.clear();
    ::malloc_trim(0);
    log_ = std::make_unique<store::memory_event_log>();
    auto r = log_->append(run_id_, 0, cp.events);
    check(r, "restore");
    restore(supervisor_, cp.supervisor);
    restore(planner_.fold, cp.planner);
    restore(verifier_.fold, cp.verifier);
    version_ = cp.version;
    busy_ = cp.busy;
    node_busy_ = cp.node_busy;
    mailbox_ = cp.mailbox;
    scripted_next_ = cp.scripted_next;
    explore_verified_ = cp.explore_verified;
    next_steps = appends = planner_stopped = 0;
  }

private:
  // -- the supervisor's helpers (actors/supervisor.cpp) -------------------------------------------

  void append_all(std::vector<store::new_event> events) {
    auto r = log_->append(run_id_, version_, std::move(events));
    check(r, "append");
    ++appends;
    version_ = r->version;
    check(store::fold_stream(*log_, run_id_, *supervisor_), "fold");
  }

  void append_doc(wire::EventKind kind, const char* schema, const std::string& json) {
    append_all({doc_event(kind, schema, json)});
  }

  messages::trial_spec_msg spec_for(const decide::launch& l) const {
    adapters::trial_request req;
    req.knobs = l.config.knobs;
    req.patches = l.config.patches;
    req.trial_id = l.trial_id;
    req.attempt = l.attempt;
    req.timeout_s = task().limits.timeout_s;
    req.memory_cap_bytes = task().limits.memory_cap_bytes;
    req.scope_lock = decide::scope_lock(state());
    return decide::trial_spec(req, l.kind, l.candidate_trial, l.round);
  }

  /// The supervisor's progress line of a verified trial (written to a discarded stream, as the
  /// supervisor does without --progress).
  void trial_line(const tuning::trial_record& t) {
    const auto& r = state();
    double base_time = r.noise ? r.noise->mean_step_time_s : 0.0;
    progress_.str({});
    auto& out = progress_;
    out << "trial " << t.trial_id;
    if (t.attempt > 0)
      out << " attempt " << t.attempt;
    out << " (" << tuning::purpose_text(t) << ") " << tuning::to_string(t.outcome);
    if (t.usable()) {
      out << " " << t.timed_step_time_s << " s/step";
      if (base_time > 0)
        out << " (" << base_time / t.timed_step_time_s << "x)";
    } else if (!t.violations.empty()) {
      out << " — " << t.violations.front();
    } else if (!t.detail.empty()) {
      out << " — " << t.detail.substr(0, 120);
    }
    if (t.kind == purpose_kind::explore)
      out << "  [" << decide::search_trials(r) << "/" << decide::budget_of(task(), r).trials
          << "] " << t.config.diff_from(tuning::baseline_configuration(task()));
  }

  // -- handlers -----------------------------------------------------------------------------------

  void do_init() {
    auto doc = decide::contract_locked_doc(task(), g_lock, g_hardware, g_fingerprint, g_task_text,
                                           g_seed, g_search_budget);
    append_doc(wire::EventKind::ContractLocked, "contract/1", doc.dump());
    // The llm-proposer's offline priors: a sim task has no knowledge entry, so neutral.
    append_doc(wire::EventKind::PriorsLoaded, "priors/1", store::to_json(tuning::prior_set{}).dump());
    const auto& locked = *state().contract_doc;
    nlohmann::json pack = {{"hardware", locked.value("hardware_fingerprint", "")},
                           {"workload", locked.value("workload_signature", "")},
                           {"seeds", nlohmann::json::array()}};
    append_doc(wire::EventKind::ExperienceSeeded, "experience_pack/1", pack.dump());
  }

  void do_launch(const std::vector<decide::launch>& launches) {
    std::vector<store::new_event> events;
    for (const auto& l : launches) {
      auto spec = spec_for(l);
      if (!l.proposed)
        events.push_back(event(wire::EventKind::TrialProposed, spec.bytes()));
      std::string violation;
      for (const auto& p : l.config.patches)
        if (violation.empty())
          violation = adapters::patch_scope_violation(task(), p);
      if (!violation.empty()) {
        events.push_back(event(wire::EventKind::TrialCompleted,
                               decide::refused_result(l.trial_id, l.attempt, violation).bytes()));
        continue;
      }
      if (node_busy_)
        break;
      events.push_back(event(wire::EventKind::TrialDispatched, spec.bytes()));
      node_busy_ = true;
      busy_.running.insert({l.trial_id, l.attempt});
      message m;
      m.kind = message::result;
      m.launch = l;
      mailbox_.push_back(std::move(m));
    }
    append_all(std::move(events));
  }

  void advance() {
    for (int guard = 0; guard < 100000; ++guard) {
      decide::step_input in;
      in.free_slots = node_busy_ ? 0 : 1;
      in.busy = busy_;
      auto s = decide::next_step(task(), state(), in);
      ++next_steps;
      switch (s.kind) {
        case step_kind::wait:
        case step_kind::done: return;
        case step_kind::begin_stage:
        case step_kind::end_stage:
          append_all({event(s.kind == step_kind::begin_stage ? wire::EventKind::StageStarted
                                                             : wire::EventKind::StageCompleted,
                            decide::stage_payload(s.stage).bytes())});
          if (s.kind == step_kind::end_stage)
            check(store::snapshot_run(*log_, run_id_), "snapshot");
          continue;
        case step_kind::init: do_init(); continue;
        case step_kind::launch: do_launch(s.launches); continue;
        case step_kind::verify:
          for (const auto& a : s.attempts) {
            busy_.verifying.insert(a);
            message m;
            m.kind = message::verify;
            m.attempt = a;
            mailbox_.push_back(std::move(m));
          }
          continue;
        case step_kind::propose: {
          busy_.proposing = true;
          message m;
          m.kind = message::propose;
          m.n = s.n;
          m.at = version_;
          mailbox_.push_back(std::move(m));
          continue;
        }
        case step_kind::stop_search:
          append_doc(wire::EventKind::SearchStopped, "search_stopped/1", s.stop.dump());
          continue;
        case step_kind::calibrate: {
          busy_.calibrating = true;
          message m;
          m.kind = message::calibrate;
          mailbox_.push_back(std::move(m));
          continue;
        }
        default:
          throw std::logic_error(std::string{"supervisor_bench: unexpected step "} +
                                 decide::to_string(s.kind) + " (" + s.reason + ")");
      }
    }
  }

  std::string scripted_reply(std::uint32_t n) {
    std::string key = std::to_string(scripted_next_) + "/" + std::to_string(n);
    auto it = replies_.find(key);
    if (it == replies_.end()) {
      untimed([&] {
        nlohmann::json list = nlohmann::json::array();
        for (std::uint32_t i = 0; i < n; ++i)
          list.push_back({{"config", store::to_json(g_configs.at((scripted_next_ + i) %
                                                                  g_configs.size()))},
                          {"predicted_speedup", 1.0},
                          {"reason", "prepared random candidate"}});
        it = replies_
               .emplace(key, nlohmann::json{{"policy", "bench/prepared"}, {"proposals", list}}.dump())
               .first;
      });
    }
    scripted_next_ += n;
    return it->second;
  }

  template <class F>
  void untimed(F&& f) {
    if (timer != nullptr)
      timer->PauseTiming();
    f();
    if (timer != nullptr)
      timer->ResumeTiming();
  }

  void on_planner_reply(const message& m) {
    std::string reply;
    if (mode == planner_mode::policy) {
      const auto& st = planner_.catch_up(*log_, run_id_, m.at);
      reply = decide::proposal_doc(task(), st, m.n);
      auto j = nlohmann::json::parse(reply);
      if (j["proposals"].empty()) {
        // bayes_ei's stop rule fired: keep the run going with a prepared configuration (counted).
        ++planner_stopped;
        reply = scripted_reply(m.n);
      }
    } else {
      if (scripted_planner_fold)
        planner_.catch_up(*log_, run_id_, m.at);
      reply = scripted_reply(m.n);
    }
    busy_.proposing = false;
    auto batch = decide::proposal_batch(task(), state(), m.n, m.at, reply);
    check(batch, "planner");
    std::vector<store::new_event> events;
    events.push_back(
      doc_event(wire::EventKind::ProposalsMade, "proposals/1", batch->document.dump()));
    for (const auto& l : batch->launches)
      events.push_back(event(wire::EventKind::TrialProposed, spec_for(l).bytes()));
    if (batch->launches.empty())
      events.push_back(
        doc_event(wire::EventKind::SearchStopped, "search_stopped/1", batch->stopped.dump()));
    for (const auto& p : batch->document["planner"]["proposals"]) {
      progress_.str({});
      progress_ << "run: proposed " << p.value("reason", "") << " [predicted "
                << p.value("predicted_speedup", 1.0) << "x]\n";
    }
    append_all(std::move(events));
    advance();
  }

  void on_result(const message& m) {
    const auto& l = m.launch;
    std::string key = l.config.key() + "#" + std::to_string(l.trial_id) + "/" +
                      std::to_string(l.attempt);
    auto it = results_.find(key);
    if (it == results_.end())
      untimed([&] {
        auto rec = g_eval->measure(l.config, l.trial_id, l.attempt, tuning::label(l.kind));
        it = results_.emplace(key, result_of(rec)).first;
      });
    node_busy_ = false;
    busy_.running.erase({l.trial_id, l.attempt});
    append_all({event(wire::EventKind::TrialCompleted, it->second.bytes())});
    advance();
  }

  void on_verify(const message& m) {
    const auto& v = verifier_.catch_up(*log_, run_id_);
    auto doc = decide::check_doc(task(), v, m.attempt.first, m.attempt.second);
    check(doc, "verify");
    busy_.verifying.erase(m.attempt);
    append_doc(wire::EventKind::TrialVerified, "verdict/1", *doc);
    if (const auto* t = state().find(m.attempt.first, m.attempt.second)) {
      trial_line(*t);
      if (t->kind == purpose_kind::explore)
        ++explore_verified_;
    }
    advance();
  }

  void on_calibrate() {
    const auto& v = verifier_.catch_up(*log_, run_id_);
    auto doc = decide::calibrate_doc(task(), v);
    busy_.calibrating = false;
    if (nlohmann::json::parse(doc).contains("error"))
      throw std::runtime_error("doctor: " + doc);
    append_doc(wire::EventKind::BaselineCalibrated, "doctor/1", doc);
    advance();
  }

  void handle(const message& m) {
    switch (m.kind) {
      case message::propose: return on_planner_reply(m);
      case message::result: return on_result(m);
      case message::verify: return on_verify(m);
      case message::calibrate: return on_calibrate();
    }
  }

  std::string run_id_;
  std::unique_ptr<store::memory_event_log> log_;
  std::optional<store::run_projection> supervisor_;
  std::uint64_t version_ = 0;
  fold_state planner_;
  fold_state verifier_;
  decide::outstanding busy_;
  bool node_busy_ = false;
  std::deque<message> mailbox_;
  std::size_t scripted_next_ = 0;
  std::uint64_t explore_verified_ = 0;
  std::ostringstream progress_;
  std::map<std::string, messages::trial_result_msg> results_;
  std::map<std::string, std::string> replies_;
};

/// The runs at N search trials: one run, checkpointed at each N (the smaller are prefixes).
std::map<std::size_t, checkpoint> g_checkpoints;

void prepare(const std::vector<std::size_t>& sizes) {
  run_driver d{"bench-run"};
  d.start();
  for (auto n : sizes) {
    d.run_trials(n - d.explore_verified());
    g_checkpoints.emplace(n, d.save_checkpoint());
  }
}

enum class variant { supervisor, planner, refold, grow };

void per_trial(benchmark::State& state, variant v) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto& cp = g_checkpoints.at(n);
  run_driver d{"bench-run"};
  d.mode = v == variant::planner ? run_driver::planner_mode::policy
                                 : run_driver::planner_mode::scripted;
  d.scripted_planner_fold = false;
  d.timer = &state;
  std::uint64_t steps = 0, appends = 0, stopped = 0, folded = 0, refold_events = 0;
  std::uint64_t before = 0;
  bool first = true;
  auto account = [&] {
    if (first)
      return;
    steps += d.next_steps;
    appends += d.appends;
    stopped += d.planner_stopped;
    folded += d.state().events - before;
  };
  if (v == variant::grow) {
    // Cross-check without the reset: the run grows from N by one trial per iteration.
    d.restore_checkpoint(cp);
    before = d.state().events;
    for (auto _ : state)
      d.run_trials(1);
    folded = d.state().events - before;
    steps = d.next_steps;
    appends = d.appends;
  } else {
    for (auto _ : state) {
      // The run back at N trials, untimed (one pause per iteration).
      state.PauseTiming();
      account();
      first = false;
      d.restore_checkpoint(cp);
      before = d.state().events;
      state.ResumeTiming();
      d.run_trials(1);
      if (v == variant::refold) {
        auto full = store::load_run(d.log(), d.run_id());
        refold_events += check(full, "load_run").events;
        benchmark::DoNotOptimize(full);
      }
    }
  }
  account();
  const auto it = static_cast<double>(state.iterations());
  state.counters["trials"] = static_cast<double>(n);
  state.counters["events"] = static_cast<double>(cp.events.size());
  state.counters["next_step"] = static_cast<double>(steps) / it;
  state.counters["appends"] = static_cast<double>(appends) / it;
  state.counters["folded"] = static_cast<double>(folded) / it;
  if (v == variant::planner)
    state.counters["planner_stopped"] = static_cast<double>(stopped) / it;
  if (v == variant::refold)
    state.counters["refolded"] = static_cast<double>(refold_events) / it;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--task=", 7) == 0)
      g_task_path = argv[i] + 7;
    else
      args.push_back(argv[i]);
  }
  auto loaded = adapters::load_task_file(g_task_path);
  if (!loaded) {
    std::cerr << "infrarsi_supervisor_bench: " << g_task_path << ": "
              << infrarsi::describe(loaded.error()) << "\n";
    return 2;
  }
  {
    std::ifstream in{g_task_path};
    std::ostringstream text;
    text << in.rdbuf();
    g_task_text = text.str();
  }
  std::string why;
  g_eval = bench::sim_evaluator::create(*loaded, why);
  if (!g_eval) {
    std::cerr << "infrarsi_supervisor_bench: " << g_task_path << ": " << why << "\n";
    return 2;
  }
  g_eval->begin_run(g_seed);
  namespace fs = std::filesystem;
  auto scratch = fs::temp_directory_path() / ("infrarsi-supervisor-bench-" + std::to_string(::getpid()));
  auto lock = adapters::lock_scope(task(), scratch.string());
  std::error_code ec;
  fs::remove_all(scratch, ec);
  if (!lock) {
    std::cerr << "infrarsi_supervisor_bench: scope lock of " << g_task_path << ": "
              << infrarsi::describe(lock.error()) << "\n";
    return 2;
  }
  g_lock = std::move(*lock);
  g_hardware = adapters::hardware_description();
  g_fingerprint = adapters::hardware_fingerprint(g_hardware);
  {
    auto candidates = tuning::enumerate_candidates(task(), 1);
    tuning::splitmix64 rng{42};
    for (int i = 0; i < 2000; ++i)
      g_configs.push_back(candidates[rng.below(candidates.size())]);
  }
  try {
    prepare({10, 100, 1000});
  } catch (const std::exception& e) {
    std::cerr << "infrarsi_supervisor_bench: preparing the runs: " << e.what() << "\n";
    return 1;
  }

  struct spec {
    const char* name;
    variant v;
    benchmark::TimeUnit unit;
    int iterations;
  };
  for (const auto& s : {spec{"supervisor", variant::supervisor, benchmark::kMicrosecond, 300},
                        spec{"supervisor+planner", variant::planner, benchmark::kMillisecond, 10},
                        spec{"supervisor+refold", variant::refold, benchmark::kMicrosecond, 100},
                        spec{"supervisor_growing", variant::grow, benchmark::kMicrosecond, 300}}) {
    auto v = s.v;
    benchmark::RegisterBenchmark((std::string{s.name} + "/trials").c_str(),
                                 [v](benchmark::State& st) { per_trial(st, v); })
      ->Arg(10)
      ->Arg(100)
      ->Arg(1000)
      ->Unit(s.unit)
      ->Iterations(s.iterations)
      ->Repetitions(3)
      ->DisplayAggregatesOnly(true);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  try {
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& e) {
    std::cerr << "infrarsi_supervisor_bench: " << e.what() << "\n";
    return 1;
  }
  benchmark::Shutdown();
  g_checkpoints.clear();
  g_eval.reset();
  return 0;
}
