#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

#include "actors/actors.hpp"
#include "actors/decisions.hpp"
#include "adapters/environment.hpp"
#include "adapters/trial_launcher.hpp"
#include "runtime/report.hpp"
#include "store/run_projection.hpp"
#include "tuning/planner.hpp"

namespace infrarsi::actors {

namespace {

namespace fs = std::filesystem;
using tuning::configuration;

/// One run's stage machine. Every method appends its events before acting on them.
class session {
public:
  session(caf::blocking_actor* self, supervisor_options opts)
    : self_(self), o_(std::move(opts)), task_(*o_.task), start_(std::chrono::steady_clock::now()) {}

  std::pair<std::string, int> run() {
    auto v = o_.log->version(o_.run_id);
    if (!v)
      return {describe(v.error()), 1};
    version_ = *v;
    spawn_all();
    auto state = load();
    if (!state)
      return {describe(state.error()), 1};
    next_trial_ = state->next_trial_id();
    if (auto err = resume_pending(*state))
      return {"resume: " + describe(err), 1};
    for (const char* stage : {"init", "doctor", "run", "report", "apply"}) {
      auto now = load();
      if (!now)
        return {describe(now.error()), 1};
      if (now->stage_done(stage)) {
        if (o_.until == stage)
          break;
        continue;
      }
      caf::error err;
      if (std::string{stage} == "init")
        err = stage_init();
      else if (std::string{stage} == "doctor")
        err = stage_doctor();
      else if (std::string{stage} == "run")
        err = stage_run();
      else if (std::string{stage} == "report")
        err = stage_report();
      else
        err = stage_apply();
      if (err)
        return {std::string{stage} + ": " + describe(err), 1};
      if (o_.until == stage)
        break;
    }
    shutdown();
    return {summary(), 0};
  }

private:
  // -- actors -----------------------------------------------------------------------------------

  void spawn_all() {
    planner_ = self_->spawn(planner, o_.log, o_.task);
    llm_ = self_->spawn(llm_proposer, o_.task, o_.knowledge_dir);
    verifier_ = self_->spawn(verifier, o_.log, o_.task);
    curator_ = self_->spawn(curator, o_.bank);
    node_ = self_->spawn<caf::detached>(node_runner, o_.zmq_context, o_.node_endpoint, o_.run_id,
                                              caf::actor{self_});
    for (const auto& a : {caf::actor_cast<caf::actor>(planner_), caf::actor_cast<caf::actor>(llm_),
                          caf::actor_cast<caf::actor>(verifier_),
                          caf::actor_cast<caf::actor>(curator_),
                          caf::actor_cast<caf::actor>(node_)})
      self_->monitor(a);
  }

  void shutdown() {
    for (const auto& a : {caf::actor_cast<caf::actor>(planner_), caf::actor_cast<caf::actor>(llm_),
                          caf::actor_cast<caf::actor>(verifier_),
                          caf::actor_cast<caf::actor>(curator_),
                          caf::actor_cast<caf::actor>(node_)})
      self_->send_exit(a, caf::exit_reason::user_shutdown);
  }

  /// Sends a request and waits; on failure, restarts `respawn` (the actor may have died) and
  /// retries once.
  template <class Result, class Handle, class Respawn, class... Ts>
  caf::expected<Result> ask(Handle& handle, Respawn respawn, const Ts&... xs) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::optional<Result> result;
      caf::error error;
      self_->request(handle, caf::infinite, xs...)
        .receive([&](Result& r) { result = std::move(r); }, [&](caf::error& e) { error = e; });
      if (result)
        return std::move(*result);
      if (attempt == 0 && code_of(error) == errc::none) { // a CAF error: the actor is gone
        respawn();
        continue;
      }
      return error;
    }
    return make_error(errc::io_error, "actor did not answer");
  }

  caf::expected<std::string> ask_planner(std::uint32_t n) {
    return ask<std::string>(planner_, [this] { planner_ = self_->spawn(planner, o_.log, o_.task); },
                            propose_atom_v, o_.run_id, n);
  }
  caf::expected<std::string> ask_verifier_check(const tuning::trial_record& t) {
    return ask<std::string>(verifier_,
                            [this] { verifier_ = self_->spawn(verifier, o_.log, o_.task); },
                            check_atom_v, o_.run_id, t.trial_id, t.attempt);
  }

  // -- events -----------------------------------------------------------------------------------

  caf::error append(wire::EventKind kind, const messages::byte_buffer& payload) {
    auto r = o_.log->append(o_.run_id, version_,
                            {store::new_event{static_cast<store::event_kind_t>(kind), payload}});
    if (!r)
      return std::move(r.error());
    version_ = r->version;
    if (o_.append_trace != nullptr)
      *o_.append_trace << version_ - 1 << ' ' << static_cast<unsigned>(kind) << std::endl;
    return caf::none;
  }

  caf::error append_doc(wire::EventKind kind, const char* schema, const std::string& json) {
    return append(kind, messages::make_document(schema, json).bytes());
  }

  caf::error stage_event(wire::EventKind kind, wire::Stage stage, std::string detail = {}) {
    wire::StageEventT e;
    e.stage = stage;
    e.detail = std::move(detail);
    if (auto err = append(kind, messages::stage_event_msg::pack(e).bytes()))
      return err;
    // A snapshot of the run at every completed stage, for readers (infrarsi status); never
    // trusted over the events (store/run_projection.hpp) and not needed for correctness.
    if (kind == wire::EventKind::StageCompleted)
      if (auto covered = store::snapshot_run(*o_.log, o_.run_id); !covered)
        progress() << "snapshot not written: " << describe(covered.error()) << '\n';
    return caf::none;
  }

  caf::expected<store::run_state> load() { return store::load_run(*o_.log, o_.run_id); }

  // -- trials -----------------------------------------------------------------------------------

  messages::trial_spec_msg spec_for(const configuration& c, std::uint64_t id,
                                    std::uint32_t attempt, const std::string& purpose) {
    adapters::trial_request req;
    req.knobs = c.knobs;
    req.patches = c.patches;
    req.trial_id = id;
    req.attempt = attempt;
    req.timeout_s = task_.limits.timeout_s;
    req.memory_cap_bytes = task_.limits.memory_cap_bytes;
    req.scope_lock = scope_lock();
    return adapters::make_trial_spec(req, purpose);
  }

  /// The scope lock of this run (init's hashes of every editable and frozen file), read back
  /// from the ContractLocked event after a restart.
  const std::map<std::string, std::string>& scope_lock() {
    if (!scope_lock_.empty())
      return scope_lock_;
    auto state = load();
    if (!state || !state->contract_doc)
      return scope_lock_;
    const auto scope = state->contract_doc->value("scope", nlohmann::json::object());
    for (const auto* part : {"editable", "frozen"}) {
      auto it = scope.find(part);
      if (it == scope.end() || !it->is_object())
        continue;
      for (auto f = it->begin(); f != it->end(); ++f)
        if (f.value().is_string())
          scope_lock_[f.key()] = f.value().get<std::string>();
    }
    return scope_lock_;
  }

  /// "" if every patch of `c` stays inside the editable scope and outside the frozen one, else
  /// the offending patch and path.
  std::string scope_violation(const configuration& c) const {
    for (const auto& p : c.patches)
      if (auto v = adapters::patch_scope_violation(task_, p); !v.empty())
        return v;
    return {};
  }

  /// Within one supervisor's life a trial is tried at most this many times (its node vanished:
  /// the attempt is lost and re-queued). A trial lost because the supervisor itself was killed
  /// is re-queued at every restart: its loss says nothing about the trial.
  static constexpr std::uint32_t max_attempts = 4;

  caf::expected<tuning::trial_record> run_trial(const configuration& c, const std::string& purpose,
                                                bool verify = true) {
    return run_attempts(next_trial_++, 0, c, purpose, verify, false);
  }

  /// Runs trial `id` from attempt `first` on until an attempt ends (a lost attempt is re-queued
  /// once, as the next attempt, up to max_attempts). `proposed`: the first attempt's
  /// TrialProposed is already logged (a queued trial found on restart).
  caf::expected<tuning::trial_record> run_attempts(std::uint64_t id, std::uint32_t first,
                                                   const configuration& c,
                                                   const std::string& purpose, bool verify,
                                                   bool proposed) {
    std::uint32_t attempt = first;
    for (; attempt < first + max_attempts; ++attempt) {
      auto spec = spec_for(c, id, attempt, purpose);
      if (!(proposed && attempt == first))
        if (auto err = append(wire::EventKind::TrialProposed, spec.bytes()))
          return err;
      // Scope is checked before launch: a patch outside the editable scope never runs.
      if (auto violation = scope_violation(c); !violation.empty()) {
        wire::TrialResultT r;
        r.trial_id = id;
        r.attempt = attempt;
        r.outcome = wire::Outcome::ContractViolation;
        r.detail = violation;
        if (auto err = append(wire::EventKind::TrialCompleted,
                              messages::trial_result_msg::pack(r).bytes()))
          return err;
        return finish_attempt(id, attempt, verify);
      }
      if (auto err = append(wire::EventKind::TrialDispatched, spec.bytes()))
        return err;
      auto result = ask<messages::trial_result_msg>(
        node_,
        [this] {
          node_ = self_->spawn<caf::detached>(node_runner, o_.zmq_context, o_.node_endpoint,
                                              o_.run_id, caf::actor{self_});
        },
        run_atom_v, spec);
      if (!result) {
        if (auto err = append(wire::EventKind::TrialLost, spec.bytes()))
          return err;
        progress() << "trial " << id << " attempt " << attempt << " lost: "
                   << describe(result.error())
                   << (attempt + 1 < first + max_attempts ? " (re-queued)" : "") << '\n';
        continue;
      }
      if (auto err = log_stale_results())
        return err;
      if (auto err = append(wire::EventKind::TrialCompleted, result->bytes()))
        return err;
      return finish_attempt(id, attempt, verify);
    }
    auto state = load();
    if (!state)
      return std::move(state.error());
    return *state->find(id, attempt - 1);
  }

  /// Results the node-runner received for attempts other than the one it awaited (given up as
  /// lost before): logged as TrialResultStale (fenced by their attempt number, never counted).
  caf::error log_stale_results() {
    caf::error failure;
    bool more = true;
    while (more && !failure)
      self_->receive(
        [&](stale_atom, const messages::trial_result_msg& stale) {
          progress() << "trial " << stale->trial_id() << " attempt " << stale->attempt()
                     << ": a late result for an attempt already given up; logged as stale\n";
          failure = append(wire::EventKind::TrialResultStale, stale.bytes());
        },
        caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
    return failure;
  }

  /// After an attempt's terminal event: the verifier's verdict (logged), then its record.
  caf::expected<tuning::trial_record> finish_attempt(std::uint64_t id, std::uint32_t attempt,
                                                     bool verify) {
    auto state = load();
    if (!state)
      return std::move(state.error());
    if (verify) {
      auto verdict = ask_verifier_check(*state->find(id, attempt));
      if (!verdict)
        return std::move(verdict.error());
      if (auto err = append_doc(wire::EventKind::TrialVerified, "verdict/1", *verdict))
        return err;
      state = load();
      if (!state)
        return std::move(state.error());
    }
    return *state->find(id, attempt);
  }

  /// The progress line of a trial finished on restart.
  void report_requeued(const tuning::trial_record& t) {
    progress() << "trial " << t.trial_id << " attempt " << t.attempt << " (" << t.purpose << "): "
               << tuning::to_string(t.outcome);
    if (t.usable())
      progress() << " " << std::setprecision(4) << t.timed_step_time_s << " s/step";
    else if (!t.violations.empty())
      progress() << " — " << t.violations.front();
    progress() << '\n';
  }

  /// On restart: nothing the log holds is forgotten. A trial dispatched and never finished is
  /// lost (logged) and re-queued once as its next attempt, with the same trial id, so the
  /// remaining decisions are those an uninterrupted run would make; a trial proposed but never
  /// dispatched is dispatched now; a trial that ended but was never verified is verified now
  /// (baselines are verified by the doctor once it has calibrated).
  caf::error resume_pending(const store::run_state& state) {
    struct pending {
      std::uint64_t id;
      std::uint32_t attempt;
      configuration config;
      std::string purpose;
      bool dispatched;
      bool lost = false;
    };
    // The latest attempt of every trial, in the order the trials were first proposed.
    std::vector<std::uint64_t> order;
    std::map<std::uint64_t, const tuning::trial_record*> latest;
    for (const auto& t : state.trials) {
      auto [it, fresh] = latest.emplace(t.trial_id, &t);
      if (fresh)
        order.push_back(t.trial_id);
      else if (t.attempt > it->second->attempt)
        it->second = &t;
    }
    std::vector<pending> todo;
    std::vector<std::pair<std::uint64_t, std::uint32_t>> unverified;
    for (auto id : order) {
      const auto& t = *latest[id];
      if (!t.finished)
        todo.push_back({t.trial_id, t.attempt, t.config, t.purpose, t.dispatched});
      else if (t.outcome == tuning::trial_outcome::lost) // lost, and killed before its re-queue
        todo.push_back({t.trial_id, t.attempt, t.config, t.purpose, false, true});
      else if (!t.verified && t.purpose != "baseline")
        unverified.emplace_back(t.trial_id, t.attempt);
    }
    for (const auto& [id, attempt] : unverified)
      if (auto r = finish_attempt(id, attempt, true); !r)
        return std::move(r.error());
    for (const auto& p : todo) {
      bool verify = p.purpose != "baseline";
      if (p.lost) {
        progress() << "trial " << p.id << " attempt " << p.attempt
                   << " was lost and not yet re-queued: re-queued as attempt " << p.attempt + 1
                   << '\n';
        auto r = run_attempts(p.id, p.attempt + 1, p.config, p.purpose, verify, false);
        if (!r)
          return std::move(r.error());
        report_requeued(*r);
      } else if (p.dispatched) {
        auto spec = spec_for(p.config, p.id, p.attempt, p.purpose);
        if (auto err = append(wire::EventKind::TrialLost, spec.bytes()))
          return err;
        progress() << "trial " << p.id << " attempt " << p.attempt
                   << " was dispatched before a restart and never finished: lost, re-queued as "
                      "attempt "
                   << p.attempt + 1 << '\n';
        auto r = run_attempts(p.id, p.attempt + 1, p.config, p.purpose, verify, false);
        if (!r)
          return std::move(r.error());
        report_requeued(*r);
      } else {
        progress() << "trial " << p.id << " attempt " << p.attempt
                   << " was queued before a restart: dispatched now\n";
        auto r = run_attempts(p.id, p.attempt, p.config, p.purpose, verify, true);
        if (!r)
          return std::move(r.error());
        report_requeued(*r);
      }
    }
    return caf::none;
  }

  std::ostream& progress() { return o_.progress != nullptr ? *o_.progress : null_; }

  double elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  // -- stages -----------------------------------------------------------------------------------

  caf::error stage_init() {
    if (version_ == 0) {
      wire::RunCreatedT rc;
      rc.task = task_.source;
      rc.seed = o_.seed;
      rc.tool_version = "0.1.0";
      if (auto err = append(wire::EventKind::RunCreated, messages::run_created_msg::pack(rc).bytes()))
        return err;
    }
    if (auto err = stage_event(wire::EventKind::StageStarted, wire::Stage::Init))
      return err;
    // Scope lock: a content hash of every editable and frozen file.
    nlohmann::json editable = nlohmann::json::object();
    nlohmann::json frozen = nlohmann::json::object();
    for (const auto& [globs, out] : {std::pair{&task_.scope.editable, &editable},
                                     std::pair{&task_.scope.frozen, &frozen}})
      for (const auto& rel : adapters::match_scope(task_.workload.workdir, *globs))
        if (auto h = adapters::sha256_file(task_.workload.workdir + "/" + rel))
          (*out)[rel] = *h;
    scope_lock_.clear();
    for (const auto* part : {&editable, &frozen})
      for (const auto& [rel, sha] : part->items())
        scope_lock_[rel] = sha.get<std::string>();
    auto contract = contract_json(task_);
    auto hardware = adapters::hardware_description();
    hardware_fp_ = adapters::hardware_fingerprint(hardware);
    nlohmann::json knobs = nlohmann::json::array();
    for (const auto& k : task_.knobs) {
      nlohmann::json values = nlohmann::json::array();
      for (const auto& v : k.values)
        values.push_back(store::to_tagged_json(v));
      knobs.push_back({{"name", k.name},
                       {"type", tuning::to_string(k.type)},
                       {"values", values},
                       {"default", store::to_tagged_json(k.default_value)}});
    }
    workload_sig_ = task_.name + ":" + adapters::sha256_hex(knobs.dump() + contract.dump()).substr(0, 12);
    std::string task_hash;
    if (auto h = adapters::sha256_file(task_.source))
      task_hash = *h;
    // Scope of every candidate patch, checked once before anything runs.
    nlohmann::json patches = nlohmann::json::object();
    for (const auto& p : task_.patches) {
      configuration only;
      only.patches = {p.name};
      auto violation = scope_violation(only);
      std::ifstream in{p.file};
      std::string text{std::istreambuf_iterator<char>{in}, {}};
      std::string sha = adapters::sha256_hex(text);
      patches[p.name] = {{"paths", adapters::patch_paths(text)},
                         {"sha256", sha},
                         {"in_scope", violation.empty()},
                         {"violation", violation}};
      if (!violation.empty())
        progress() << "init: patch '" << p.name << "' is excluded: " << violation << '\n';
    }
    // Patches that cannot be applied together, found once here: never proposed together.
    std::vector<std::string> in_scope;
    for (const auto& [name, p] : patches.items())
      if (p.value("in_scope", false))
        in_scope.push_back(name);
    nlohmann::json conflicts = nlohmann::json::array();
    if (in_scope.size() > 1) {
      auto pairs = adapters::patch_conflicts(task_, in_scope, o_.run_dir + "/patch-check");
      if (!pairs)
        return std::move(pairs.error());
      for (const auto& [a, b] : *pairs) {
        conflicts.push_back({a, b});
        progress() << "init: patches '" << a << "' and '" << b
                   << "' do not apply together: never proposed together\n";
      }
    }
    nlohmann::json doc = {{"task", task_.source},
                          {"task_sha256", task_hash},
                          {"contract", contract},
                          {"contract_hash", adapters::sha256_hex(contract.dump())},
                          {"knobs", knobs},
                          {"patches", patches},
                          {"patch_conflicts", conflicts},
                          {"budget", {{"trials", o_.trials.value_or(task_.budget.trials)},
                                      {"baseline_repeats", task_.budget.baseline_repeats},
                                      {"verify_top", task_.budget.verify_top},
                                      {"verify_repeats", task_.budget.verify_repeats}}},
                          {"scope", {{"editable", editable}, {"frozen", frozen}}},
                          {"hardware", hardware},
                          {"hardware_fingerprint", hardware_fp_},
                          {"workload_signature", workload_sig_},
                          {"seed", o_.seed},
                          {"policy", tuning::default_policy_name},
                          {"memory_capacity_bytes", memory_capacity_bytes(task_)}};
    if (auto err = append_doc(wire::EventKind::ContractLocked, "contract/1", doc.dump()))
      return err;
    auto priors = ask<std::string>(
      llm_, [this] { llm_ = self_->spawn(llm_proposer, o_.task, o_.knowledge_dir); },
      priors_atom_v, task_.name);
    if (!priors)
      return std::move(priors.error());
    if (auto err = append_doc(wire::EventKind::PriorsLoaded, "priors/1", *priors))
      return err;
    auto pack = ask<std::string>(curator_, [this] { curator_ = self_->spawn(curator, o_.bank); },
                                 seeds_atom_v, hardware_fp_, workload_sig_);
    if (!pack)
      return std::move(pack.error());
    if (auto err = append_doc(wire::EventKind::ExperienceSeeded, "experience_pack/1", *pack))
      return err;
    progress() << "init: scope locked (" << editable.size() << " editable, " << frozen.size()
               << " frozen files), hardware " << hardware_fp_ << ", seed " << o_.seed << '\n';
    return stage_event(wire::EventKind::StageCompleted, wire::Stage::Init);
  }

  caf::error stage_doctor() {
    if (auto err = stage_event(wire::EventKind::StageStarted, wire::Stage::Doctor))
      return err;
    auto base = tuning::baseline_configuration(task_);
    auto state = load();
    if (!state)
      return std::move(state.error());
    std::size_t done = 0;
    for (const auto& t : state->trials)
      done += t.purpose == "baseline" && t.finished && t.outcome != tuning::trial_outcome::lost
                ? 1
                : 0;
    for (auto i = done; i < task_.budget.baseline_repeats; ++i) {
      auto t = run_trial(base, "baseline", false);
      if (!t)
        return std::move(t.error());
      progress() << "doctor: baseline " << (i + 1) << "/" << task_.budget.baseline_repeats << ": "
                 << tuning::to_string(t->outcome) << " "
                 << tuning::timed_step_time(task_.contract, t->steps) << " s/step"
                 << (t->outcome == tuning::trial_outcome::ok ? "" : " — " + t->detail) << '\n';
    }
    auto doc = ask<std::string>(verifier_,
                                [this] { verifier_ = self_->spawn(verifier, o_.log, o_.task); },
                                calibrate_atom_v, o_.run_id);
    if (!doc)
      return std::move(doc.error());
    auto j = nlohmann::json::parse(*doc);
    if (j.contains("error"))
      return make_error(errc::invalid_argument,
                        "the baseline does not run: " + j["error"].get<std::string>()
                          + " (see the trial logs under " + o_.run_dir + "/trials)");
    if (auto err = append_doc(wire::EventKind::BaselineCalibrated, "doctor/1", *doc))
      return err;
    state = load();
    if (!state)
      return std::move(state.error());
    for (const auto& t : state->trials)
      if (t.purpose == "baseline" && t.finished && !t.verified
          && t.outcome != tuning::trial_outcome::lost) {
        auto verdict = ask_verifier_check(t);
        if (!verdict)
          return std::move(verdict.error());
        if (auto err = append_doc(wire::EventKind::TrialVerified, "verdict/1", *verdict))
          return err;
      }
    const auto& n = j["noise"];
    progress() << "doctor: baseline " << std::setprecision(4) << n.value("mean_step_time_s", 0.0)
               << " s/step, cv " << 100 * n.value("cv", 0.0) << "%, minimum detectable speedup "
               << 100 * n.value("min_detectable_speedup", 0.0) << "%\n";
    return stage_event(wire::EventKind::StageCompleted, wire::Stage::Doctor);
  }

  caf::error stage_run() {
    if (auto err = stage_event(wire::EventKind::StageStarted, wire::Stage::Run))
      return err;
    // The budget: --trials, else the one the run was started with (logged at init), else the
    // task's.
    std::uint32_t budget = task_.budget.trials;
    if (auto s = load(); s && s->contract_doc && s->contract_doc->contains("budget"))
      budget = (*s->contract_doc)["budget"].value("trials", budget);
    if (o_.trials)
      budget = *o_.trials;
    auto base = tuning::baseline_configuration(task_);
    auto state = load();
    if (!state)
      return std::move(state.error());
    double base_time = state->noise ? state->noise->mean_step_time_s : 0.0;
    std::size_t explored = 0;
    double best = 1.0;
    for (const auto& t : state->trials)
      if (t.purpose == "explore" && t.outcome != tuning::trial_outcome::lost) {
        ++explored;
        if (t.usable() && base_time > 0)
          best = std::max(best, base_time / t.timed_step_time_s);
      }
    while (explored < budget && elapsed_s() < task_.budget.wall_clock_s) {
      auto doc = ask_planner(1);
      if (!doc)
        return std::move(doc.error());
      auto j = nlohmann::json::parse(*doc);
      if (j["proposals"].empty()) {
        progress() << "run: search stopped: " << j.value("stop_reason", "the search space is exhausted")
                   << "\n";
        break;
      }
      const auto& p = j["proposals"][0];
      auto config = store::configuration_from_json(p["config"]);
      if (!config)
        return make_error(errc::corrupt_data, "planner returned an unreadable configuration");
      auto violation = tuning::constraint_violation(task_, *config);
      if (!violation.empty())
        return make_error(errc::invalid_argument, "planner proposed " + config->key() + ": "
                                                    + violation);
      auto t = run_trial(*config, "explore");
      if (!t)
        return std::move(t.error());
      ++explored;
      double speedup = t->usable() && base_time > 0 ? base_time / t->timed_step_time_s : 0.0;
      best = std::max(best, speedup);
      auto& out = progress();
      out << "[" << explored << "/" << budget << "] trial " << t->trial_id << " "
          << tuning::to_string(t->outcome);
      if (t->usable())
        out << " " << std::setprecision(4) << t->timed_step_time_s << " s/step ("
            << std::setprecision(3) << speedup << "x)";
      else if (!t->violations.empty())
        out << " — " << t->violations.front();
      else if (!t->detail.empty())
        out << " — " << t->detail.substr(0, 120);
      out << "  best " << std::setprecision(3) << best << "x  " << config->diff_from(base)
          << "  [predicted " << std::setprecision(3) << p.value("predicted_speedup", 1.0) << "x: "
          << p.value("reason", "") << "]\n";
    }
    if (auto err = reverify_and_promote())
      return err;
    return stage_event(wire::EventKind::StageCompleted, wire::Stage::Run);
  }

  caf::error reverify_and_promote() {
    auto state = load();
    if (!state)
      return std::move(state.error());
    auto base = tuning::baseline_configuration(task_);
    auto candidates = reverify_candidates(task_, *state);
    for (const auto& [id, config] : candidates)
      for (std::uint32_t round = 1; round <= 2; ++round) {
        // Round 1 always; round 2 only when round 1 asked for it. A round already logged (a
        // restart) is not run again.
        const store::reverification* logged = nullptr;
        for (const auto& r : state->reverifications)
          if (r.candidate_trial == id)
            logged = &r;
        bool run_it = logged == nullptr ? round == 1
                                        : logged->round + 1 == round && logged->remeasure;
        if (!run_it) {
          if (logged == nullptr || logged->round < round)
            break;
          continue;
        }
        if (auto err = reverify_round(base, id, config, round))
          return err;
        state = load();
        if (!state)
          return std::move(state.error());
      }
    return promote();
  }

  /// Runs one round of interleaved baseline/candidate pairs (ABAB...) and logs the verifier's
  /// estimate.
  caf::error reverify_round(const configuration& base, std::uint64_t id,
                            const configuration& config, std::uint32_t round) {
    {
      progress() << "verify: candidate trial " << id << " (" << config.diff_from(base) << "), "
                 << task_.budget.verify_repeats << " interleaved pairs"
                 << (round > 1 ? " (round " + std::to_string(round) + ")" : std::string{}) << "\n";
      auto tag = verify_tag(id, round);
      // Pairs already run before a restart count; only the missing runs are made, in ABAB order.
      std::uint32_t base_done = 0;
      std::uint32_t cand_done = 0;
      if (auto state = load())
        for (const auto& t : state->trials)
          if (t.finished && t.outcome != tuning::trial_outcome::lost) {
            base_done += t.purpose == "verify-baseline" + tag ? 1 : 0;
            cand_done += t.purpose == "verify-candidate" + tag ? 1 : 0;
          }
      for (std::uint32_t i = 0; i < task_.budget.verify_repeats; ++i) {
        if (i >= base_done)
          if (auto a = run_trial(base, "verify-baseline" + tag); !a)
            return std::move(a.error());
        if (i >= cand_done)
          if (auto b = run_trial(config, "verify-candidate" + tag); !b)
            return std::move(b.error());
      }
      auto doc = ask<std::string>(verifier_,
                                  [this] { verifier_ = self_->spawn(verifier, o_.log, o_.task); },
                                  reverify_atom_v, o_.run_id, id);
      if (!doc)
        return std::move(doc.error());
      if (auto err = append_doc(wire::EventKind::CandidateReverified, "reverification/1", *doc))
        return err;
      auto j = nlohmann::json::parse(*doc);
      progress() << "verify: trial " << id << " speedup " << std::setprecision(4)
                 << j.value("speedup", 1.0) << "x, 95% interval [" << j.value("ci_low", 0.0)
                 << ", " << (j["ci_high"].is_number() ? j["ci_high"].get<double>() : 0.0)
                 << "] — " << (j.value("promotable", false) ? "promotable" : "not promoted")
                 << ": " << j.value("reason", "") << '\n';
    }
    return caf::none;
  }

  /// Promotion: the promotable candidate with the highest verified speedup.
  caf::error promote() {
    auto state = load();
    if (!state)
      return std::move(state.error());
    auto decision = promotion_decision(task_, *state);
    const store::reverification* winner = nullptr;
    if (decision.value("promoted", false))
      for (const auto& r : state->reverifications)
        if (r.candidate_trial == decision.value("candidate_trial", std::uint64_t{0}))
          winner = &r;
    if (auto err = append_doc(wire::EventKind::CandidatePromoted, "promotion/1", decision.dump()))
      return err;
    if (winner != nullptr && o_.bank != nullptr) {
      nlohmann::json finding = {{"hardware", hardware_fp()},
                                {"workload", workload_sig()},
                                {"run", o_.run_id},
                                {"config", store::to_json(winner->config)},
                                {"speedup", winner->estimate.speedup},
                                {"ci_low", winner->estimate.ci_low}};
      auto stored = ask<bool>(curator_, [this] { curator_ = self_->spawn(curator, o_.bank); },
                              ingest_atom_v, finding.dump());
      if (!stored)
        progress() << "experience bank: finding not stored: " << describe(stored.error()) << '\n';
    }
    return caf::none;
  }

  std::string hardware_fp() {
    if (hardware_fp_.empty())
      if (auto s = load(); s && s->contract_doc)
        hardware_fp_ = s->contract_doc->value("hardware_fingerprint", "");
    return hardware_fp_;
  }

  std::string workload_sig() {
    if (workload_sig_.empty())
      if (auto s = load(); s && s->contract_doc)
        workload_sig_ = s->contract_doc->value("workload_signature", "");
    return workload_sig_;
  }

  caf::error stage_report() {
    if (auto err = stage_event(wire::EventKind::StageStarted, wire::Stage::Report))
      return err;
    auto state = load();
    if (!state)
      return std::move(state.error());
    auto report = runtime::make_report(task_, *state);
    std::error_code ec;
    fs::create_directories(o_.run_dir, ec);
    auto json_path = o_.run_dir + "/report.json";
    auto md_path = o_.run_dir + "/report.md";
    {
      std::ofstream j{json_path};
      j << report.dump(2) << '\n';
      std::ofstream m{md_path};
      m << runtime::render_markdown(report);
      if (!j || !m)
        return make_error(errc::io_error, "cannot write the report under '" + o_.run_dir + "'");
    }
    nlohmann::json doc = {{"report_json", json_path}, {"report_md", md_path}};
    if (auto err = append_doc(wire::EventKind::ReportWritten, "report/1", doc.dump()))
      return err;
    report_path_ = md_path;
    return stage_event(wire::EventKind::StageCompleted, wire::Stage::Report);
  }

  caf::error stage_apply() {
    if (auto err = stage_event(wire::EventKind::StageStarted, wire::Stage::Apply))
      return err;
    auto state = load();
    if (!state)
      return std::move(state.error());
    nlohmann::json doc = {{"applied", false}};
    if (state->promotion && state->promotion->value("promoted", false)) {
      auto config = store::configuration_from_json((*state->promotion)["config"]);
      auto out_dir = o_.run_dir + "/promoted";
      std::error_code ec;
      fs::create_directories(out_dir + "/patches", ec);
      // The launch command of the promoted configuration, rendered like a trial's rank 0.
      auto vars = tuning::template_vars(task_, config->knobs,
                                        {{"trial_id", "0"}, {"attempt", "0"},
                                         {"trial_dir", "."}, {"rank", "0"},
                                         {"memory_cap_bytes",
                                          std::to_string(task_.limits.memory_cap_bytes)}});
      std::string why;
      if (auto ws = tuning::render_template(task_.workload.world_size, vars, why))
        vars.emplace("world_size", *ws);
      nlohmann::json argv = nlohmann::json::array();
      for (const auto& a : task_.workload.argv)
        argv.push_back(tuning::render_template(a, vars, why).value_or(a));
      nlohmann::json env = nlohmann::json::object();
      for (const auto& [k, v] : task_.workload.env)
        env[k] = tuning::render_template(v, vars, why).value_or(v);
      nlohmann::json launch = {{"config", store::to_json(*config)},
                               {"workdir", task_.workload.workdir},
                               {"argv", argv},
                               {"env", env},
                               {"world_size", vars.count("world_size") ? vars["world_size"] : "1"},
                               {"speedup", state->promotion->value("speedup", 1.0)},
                               {"ci_low", state->promotion->value("ci_low", 0.0)}};
      std::ofstream{out_dir + "/launch.json"} << launch.dump(2) << '\n';
      nlohmann::json touched = nlohmann::json::array();
      std::vector<std::string> outside;
      for (const auto& p : config->patches) {
        const auto* spec = task_.find_patch(p);
        if (spec == nullptr)
          continue;
        fs::copy_file(spec->file, out_dir + "/patches/" + p + ".patch",
                      fs::copy_options::overwrite_existing, ec);
        std::ifstream in{spec->file};
        std::string text{std::istreambuf_iterator<char>{in}, {}};
        for (const auto& path : adapters::patch_paths(text)) {
          if (std::find(touched.begin(), touched.end(), path) == touched.end())
            touched.push_back(path);
          if (!adapters::path_in_scope(path, task_.scope.editable)
              || adapters::path_in_scope(path, task_.scope.frozen))
            outside.push_back(path);
        }
      }
      doc = {{"applied", true}, {"dir", out_dir}, {"touched", touched}, {"git", nullptr}};
      if (!outside.empty()) {
        doc["applied"] = false;
        doc["refused"] = "patches touch paths outside the editable scope: " + nlohmann::json(outside).dump();
      } else if (!config->patches.empty()) {
        doc["git"] = commit_on_branch(*config, *state);
      }
      progress() << "apply: promoted configuration written to " << out_dir << "/launch.json\n";
      if (doc["git"].is_object() && doc["git"].value("committed", false))
        progress() << "apply: the promoted patches are committed on branch "
                   << doc["git"].value("branch", "") << " (commit "
                   << doc["git"].value("commit", "").substr(0, 12)
                   << ") of the workload's git repository; your working tree is untouched\n";
    } else {
      progress() << "apply: nothing promoted, nothing applied\n";
    }
    if (auto err = append_doc(wire::EventKind::ChangesApplied, "apply/1", doc.dump()))
      return err;
    return stage_event(wire::EventKind::StageCompleted, wire::Stage::Apply);
  }

  /// When the workload lives in a git repository: applies the promoted patches in a temporary
  /// worktree on a new branch infrarsi/<run id> and commits them with the evidence.
  nlohmann::json commit_on_branch(const configuration& config, const store::run_state& state) {
    auto top = adapters::run_command({"git", "rev-parse", "--show-toplevel"},
                                     task_.workload.workdir);
    if (!top || top->exit_status != 0)
      return {{"committed", false}, {"reason", "the workload is not in a git repository"}};
    std::string root = top->out.substr(0, top->out.find('\n'));
    auto subdir = fs::relative(fs::canonical(task_.workload.workdir), fs::canonical(root)).string();
    auto branch = "infrarsi/" + o_.run_id;
    auto tree = fs::absolute(o_.run_dir + "/apply-worktree").string();
    auto fail = [&](const std::string& step, const caf::expected<adapters::command_result>& r) {
      // Swallowed: a worktree left behind is harmless and `git worktree prune` removes it.
      static_cast<void>(adapters::run_command({"git", "worktree", "remove", "--force", tree}, root));
      return nlohmann::json{{"committed", false},
                            {"reason", step + ": " + (r ? r->err : describe(r.error()))}};
    };
    auto r = adapters::run_command({"git", "worktree", "add", "-b", branch, tree, "HEAD"}, root);
    if (!r || r->exit_status != 0)
      return fail("git worktree add", r);
    for (const auto& p : config.patches) {
      std::vector<std::string> argv{"git", "apply"};
      if (subdir != ".")
        argv.push_back("--directory=" + subdir);
      argv.push_back(task_.find_patch(p)->file);
      r = adapters::run_command(argv, tree);
      if (!r || r->exit_status != 0)
        return fail("git apply " + p, r);
    }
    std::ostringstream msg;
    msg << "infrarsi: promote " << config.diff_from(tuning::baseline_configuration(task_))
        << "\n\nRun " << o_.run_id << ", task " << task_.name << ".\nVerified speedup "
        << state.promotion->value("speedup", 1.0) << "x, 95% interval ["
        << state.promotion->value("ci_low", 0.0) << ", " << state.promotion->value("ci_high", 0.0)
        << "].\nLaunch configuration: " << store::to_json(config).dump() << "\n";
    r = adapters::run_command({"git", "add", "-A", "--", subdir}, tree);
    if (!r || r->exit_status != 0)
      return fail("git add", r);
    r = adapters::run_command({"git", "-c", "user.name=infrarsi", "-c", "user.email=infrarsi@localhost",
                               "commit", "-q", "-m", msg.str()},
                              tree);
    if (!r || r->exit_status != 0)
      return fail("git commit", r);
    auto head = adapters::run_command({"git", "rev-parse", "HEAD"}, tree);
    static_cast<void>(adapters::run_command({"git", "worktree", "remove", "--force", tree}, root));
    return {{"committed", true},
            {"branch", branch},
            {"commit", head ? head->out.substr(0, head->out.find('\n')) : ""}};
  }

  std::string summary() {
    auto state = load();
    if (!state)
      return describe(state.error());
    std::ostringstream os;
    std::size_t trials = state->trials.size();
    double device_s = 0;
    for (const auto& t : state->trials)
      device_s += t.device_seconds;
    os << "run " << o_.run_id << ": " << trials << " trials, " << std::setprecision(4) << device_s
       << " device-seconds. ";
    if (state->promotion && state->promotion->value("promoted", false))
      os << "Promoted " << state->promotion->value("change", "") << ": verified speedup "
         << state->promotion->value("speedup", 1.0) << "x [" << state->promotion->value("ci_low", 0.0)
         << ", " << state->promotion->value("ci_high", 0.0) << "].";
    else if (state->promotion)
      os << "Nothing promoted: " << state->promotion->value("reason", "") << ".";
    if (state->report)
      os << " Report: " << state->report->value("report_md", "");
    return os.str();
  }

  caf::blocking_actor* self_;
  supervisor_options o_;
  const tuning::task_spec& task_;
  std::chrono::steady_clock::time_point start_;
  std::uint64_t version_ = 0;
  std::uint64_t next_trial_ = 0;
  std::string hardware_fp_;
  std::string workload_sig_;
  std::map<std::string, std::string> scope_lock_;
  std::string report_path_;
  std::ostringstream null_;
  planner_actor planner_;
  llm_proposer_actor llm_;
  verifier_actor verifier_;
  curator_actor curator_;
  node_runner_actor node_;
};

} // namespace

void supervisor(caf::blocking_actor* self, supervisor_options opts, caf::actor reply_to) {
  session s{self, std::move(opts)};
  auto [text, status] = s.run();
  self->send(reply_to, text, status);
}

} // namespace infrarsi::actors
