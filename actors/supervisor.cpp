// The supervisor: one run's stage machine as an event-based actor over N node-runners. Every
// handler appends the events it must (before acting on them), folds them into the projection,
// asks decide::next_step what to do and does it with request(...).then(...). The decisions are in
// decide/; git, report files, scope hashing and launch-config writing in adapters/.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <set>
#include <sstream>

#include "actors/actors.hpp"
#include "actors/report_files.hpp"
#include "adapters/disk_space.hpp"
#include "adapters/environment.hpp"
#include "adapters/git.hpp"
#include "adapters/launch_config.hpp"
#include "adapters/llm_patch.hpp"
#include "adapters/run_files.hpp"
#include "adapters/scope.hpp"
#include "adapters/trial_copy.hpp"
#include "adapters/trial_launcher.hpp"
#include "decide/decisions.hpp"
#include "decide/llm.hpp"
#include "decide/minimal_change.hpp"
#include "decide/next_step.hpp"
#include "decide/patch_exclusion.hpp"
#include "decide/report.hpp"
#include "decide/resources.hpp"
#include "store/experience_provenance.hpp"
#include "store/run_projection.hpp"
#include "tuning/contract_check.hpp"

namespace infrarsi::actors {

namespace {

using self_ptr = supervisor_actor::stateful_pointer<supervisor_state>;
using decide::step_kind;
using tuning::purpose_kind;

const store::run_state& run(self_ptr self) {
  return self->state.fold->state();
}

/// "1:05", "1:02:03": seconds for people.
std::string clock_text(double s) {
  auto total = static_cast<long>(s + 0.5);
  char buf[32];
  if (total >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", total / 60, total % 60);
  return buf;
}

double elapsed_s(self_ptr self) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - self->state.started)
    .count();
}

/// The live status line (a TTY only): stage, trials, best speedup, elapsed, ETA.
std::string status_text(self_ptr self);

/// Writes one progress line (without its newline) to the progress stream: a TTY's live status
/// line is cleared first and redrawn after. Lines longer than supervisor_options::line_width are
/// shortened (unless verbose) at a word boundary before it, and before any JSON ('{') they hold,
/// so a line is never cut inside a JSON document; a line whose last word before the limit starts
/// in its first half (a long path) is kept whole. Errors (`error`) are written also when quiet.
void emit(self_ptr self, std::string line, bool error) {
  const auto& o = self->state.o;
  if (o.progress == nullptr || (o.quiet && !error))
    return;
  while (!line.empty() && line.back() == '\n')
    line.pop_back();
  if (!o.verbose && o.line_width > 8 && line.size() > o.line_width) {
    auto limit = o.line_width - 4;
    if (auto brace = line.find('{'); brace != std::string::npos && brace < limit)
      limit = brace;
    auto cut = line.rfind(' ', limit);
    // Never inside a word (a path stays whole: a longer line beats a useless one).
    if (cut != std::string::npos && cut >= limit / 2) {
      while (cut > 0 && (line[cut - 1] == ' ' || line[cut - 1] == ':' || line[cut - 1] == ','))
        --cut;
      line = line.substr(0, cut) + " ...";
    }
  }
  auto& out = *o.progress;
  if (o.live_status)
    out << "\r\033[K";
  out << line << '\n';
  if (o.live_status && !self->state.ended)
    out << status_text(self);
  out.flush();
}

/// Collects one progress line and writes it (emit) when it goes out of scope:
/// `progress(self) << "text" << 4 << '\n';`.
class progress_line {
public:
  progress_line(self_ptr self, bool error) : self_(self), error_(error) {}
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;
  ~progress_line() { emit(self_, os_.str(), error_); }
  template <class T>
  progress_line& operator<<(const T& value) {
    os_ << value;
    return *this;
  }

private:
  self_ptr self_;
  bool error_;
  std::ostringstream os_;
};

/// A progress line (not shown with --quiet).
progress_line progress(self_ptr self) {
  return progress_line{self, false};
}

/// An error line with its cause: shown also with --quiet.
progress_line progress_error(self_ptr self) {
  return progress_line{self, true};
}

/// Redraws the live status line (a TTY only).
void refresh_status(self_ptr self) {
  const auto& o = self->state.o;
  if (o.progress == nullptr || o.quiet || !o.live_status || self->state.ended)
    return;
  *o.progress << "\r\033[K" << status_text(self);
  o.progress->flush();
}

/// Removes the workload copies the retention rule no longer keeps (decide::removable_trial_copies;
/// their logs stay) from the local node slots' trials directory.
void prune_copies(self_ptr self) {
  const auto& o = self->state.o;
  if (o.trials_dir.empty())
    return;
  auto removed = adapters::remove_trial_copies(
    o.trials_dir, decide::removable_trial_copies(*o.task, run(self), o.keep_trial_copies));
  if (!removed.error.empty())
    progress_error(self) << "trial copies: not removed: " << removed.error << '\n';
}

/// Ends the run: sends (summary, status) to reply_to once and quits.
void end_run(self_ptr self, std::string summary, int status) {
  auto& st = self->state;
  if (st.ended)
    return;
  st.ended = true;
  if (st.o.live_status && st.o.progress != nullptr && !st.o.quiet) {
    *st.o.progress << "\r\033[K";
    st.o.progress->flush();
  }
  prune_copies(self);
  if (st.o.reply_to)
    caf::anon_send(st.o.reply_to, std::move(summary), status);
  for (const auto& n : st.nodes)
    self->send_exit(n.handle, caf::exit_reason::user_shutdown);
  self->send_exit(st.planner, caf::exit_reason::user_shutdown);
  self->send_exit(st.verifier, caf::exit_reason::user_shutdown);
  self->send_exit(st.llm, caf::exit_reason::user_shutdown);
  self->send_exit(st.curator, caf::exit_reason::user_shutdown);
  self->quit();
}

void fail(self_ptr self, const std::string& what, const caf::error& err) {
  end_run(self, what + ": " + describe(err), 1);
}

/// Appends `events` atomically at the projection's version and folds them (each once).
caf::error append_all(self_ptr self, std::vector<store::new_event> events) {
  auto& st = self->state;
  std::vector<store::event_kind_t> kinds;
  for (const auto& e : events)
    kinds.push_back(e.kind);
  auto r = st.o.log->append(st.o.run_id, st.version, std::move(events));
  if (!r)
    return std::move(r.error());
  if (st.o.append_trace != nullptr)
    for (std::size_t i = 0; i < kinds.size(); ++i)
      *st.o.append_trace << r->first_sequence + i << ' ' << kinds[i] << std::endl;
  st.version = r->version;
  return store::fold_stream(*st.o.log, st.o.run_id, *st.fold);
}

store::new_event event(wire::EventKind kind, const messages::byte_buffer& payload) {
  return store::new_event{static_cast<store::event_kind_t>(kind), payload};
}

store::new_event doc_event(wire::EventKind kind, const char* schema, const std::string& json) {
  return event(kind, messages::make_document(schema, json).bytes());
}

caf::error append_doc(self_ptr self, wire::EventKind kind, const char* schema,
                      const std::string& json) {
  return append_all(self, {doc_event(kind, schema, json)});
}

/// The task the run searches: the task's patches and the accepted LLM-proposed ones
/// (decide::with_llm_patches), their logged diffs written to RUN_DIR/llm-patches for the
/// supervisor's own checks, the report and the apply stage. Recomputed when an LLM event was
/// folded since; without [llm] the task itself.
const tuning::task_spec& task_now(self_ptr self) {
  auto& st = self->state;
  const auto& r = run(self);
  if (!st.o.task->llm.enabled)
    return *st.o.task;
  if (st.search_task_at != r.llm.size()) {
    auto dir = st.o.run_dir + "/llm-patches";
    auto accepted = decide::llm_accepted_patches(r);
    if (!accepted.empty())
      if (auto err = adapters::write_llm_patch_files(dir, accepted))
        progress_error(self) << "llm patches: " << describe(err) << '\n';
    st.search_task = decide::with_llm_patches(*st.o.task, r, dir);
    st.search_task_at = r.llm.size();
  }
  return st.search_task;
}

messages::trial_spec_msg spec_for(self_ptr self, const decide::launch& l) {
  const auto& task = task_now(self);
  adapters::trial_request req;
  req.knobs = l.config.knobs;
  req.patches = l.config.patches;
  // An accepted LLM-proposed patch travels as text: a node needs no file for it.
  req.patch_texts = decide::llm_patch_texts(run(self), l.config.patches);
  req.trial_id = l.trial_id;
  req.attempt = l.attempt;
  req.timeout_s = task.limits.timeout_s;
  req.memory_cap_bytes = task.limits.memory_cap_bytes;
  req.scope_lock = decide::scope_lock(run(self));
  req.loss_reference = decide::early_stop_reference(run(self));
  req.smoke_patches = decide::smoke_patches(task, run(self), l.config);
  return decide::trial_spec(req, l.kind, l.candidate_trial, l.round);
}

/// The best verified speedup so far over the baseline's mean step time (0: none yet).
double best_speedup(const store::run_state& r) {
  double base = r.noise ? r.noise->mean_step_time_s : 0.0;
  double best = 0;
  if (base > 0)
    for (const auto& t : r.trials)
      if (t.kind == purpose_kind::explore && t.usable())
        best = std::max(best, base / t.timed_step_time_s);
  return best;
}

/// Seconds until the budget is spent, from the mean wall time of the attempts that ended: the
/// baseline runs still due, the search trials left and the re-verification runs not yet made
/// (2 x verify_top x verify_repeats, the least it takes) and, once the minimal-change step has its
/// bundle, the ablations still possible (1 + 2 x verify_repeats each), over the node slots (the
/// search part at most its wall-clock budget). Negative: not known yet.
double eta_s(self_ptr self) {
  const auto& st = self->state;
  const auto& r = run(self);
  const auto budget = decide::budget_of(task_now(self), r);
  double wall = 0;
  std::size_t ended = 0;
  std::uint32_t baselines = 0;
  for (const auto* t : r.latest_attempts()) {
    if (t->kind == purpose_kind::baseline)
      ++baselines;
    if (t->finished && t->wall_time_s > 0) {
      wall += t->wall_time_s;
      ++ended;
    }
  }
  if (ended == 0)
    return -1;
  double left = 0;
  if (!r.stage_done("doctor") && baselines < budget.baseline_repeats)
    left += budget.baseline_repeats - baselines;
  if (!r.search_stopped) {
    auto done = decide::search_trials(r);
    left += budget.trials > done ? budget.trials - done : 0;
  }
  if (!r.promotion) { // the re-verification's interleaved pairs, at their minimum
    std::uint32_t verify_runs = 0;
    for (const auto* t : r.latest_attempts())
      verify_runs += t->kind == purpose_kind::verify_baseline
                         || t->kind == purpose_kind::verify_candidate
                       ? 1
                       : 0;
    auto planned = 2 * budget.verify_top * budget.verify_repeats;
    left += planned > verify_runs ? planned - verify_runs : 0;
  }
  // The minimal-change step (decide/minimal_change.hpp), once its bundle is known: each
  // ablation still possible is one trial and its re-verification's pairs, at their minimum.
  if (!r.promotion && r.search_stopped && budget.ablations > 0) {
    auto plan = decide::plan_ablations(task_now(self), r);
    if (plan.active) {
      std::size_t finished = 0;
      for (const auto& a : plan.steps)
        finished += a.state == decide::ablation_state::accepted
                        || a.state == decide::ablation_state::rejected
                      ? 1
                      : 0;
      auto tries = std::min<std::size_t>(budget.ablations,
                                         plan.order.size() > plan.skipped.size()
                                           ? plan.order.size() - plan.skipped.size()
                                           : 0);
      if (tries > finished)
        left += static_cast<double>((tries - finished) * (1 + 2 * budget.verify_repeats));
    }
  }
  auto slots = std::max<std::size_t>(1, st.nodes.size());
  double eta = wall / static_cast<double>(ended) * left / static_cast<double>(slots);
  if (budget.wall_clock_s > 0 && budget.wall_clock_s < 1e9 && !r.search_stopped)
    eta = std::min(eta, std::max(0.0, budget.wall_clock_s - elapsed_s(self)));
  return eta;
}

std::string time_text(self_ptr self) {
  auto eta = eta_s(self);
  return clock_text(elapsed_s(self)) + " ETA " + (eta < 0 ? std::string{"?"} : clock_text(eta));
}

std::string status_text(self_ptr self) {
  const auto& st = self->state;
  const auto& r = run(self);
  std::ostringstream os;
  std::string stage = r.stages_started.empty() ? "start" : r.stages_started.back();
  os << "[" << stage;
  if (stage == "run")
    os << " " << decide::search_trials(r) << "/" << decide::budget_of(*st.o.task, r).trials;
  os << " | " << st.busy.running.size() << " running";
  if (auto best = best_speedup(r); best > 0)
    os << " | best " << std::fixed << std::setprecision(2) << best << "x";
  os << " | " << time_text(self) << "]";
  return os.str();
}

/// One short line per ended trial: id, purpose, outcome (and the violated check), s/step,
/// speedup over the baseline, best so far, elapsed and ETA, search progress and the change;
/// with --verbose, the reason on a second line.
std::string trial_line(self_ptr self, const tuning::trial_record& t) {
  const auto& task = task_now(self);
  const auto& r = run(self);
  double base_time = r.noise ? r.noise->mean_step_time_s : 0.0;
  std::ostringstream out;
  out << "trial " << t.trial_id;
  if (t.attempt > 0)
    out << "#" << t.attempt;
  out << " " << tuning::purpose_text(t) << " " << tuning::to_string(t.outcome);
  if (t.outcome == tuning::trial_outcome::ok && !t.violations.empty()) {
    const auto& v = t.violations.front();
    out << " violation " << v.substr(0, v.find(':'));
  }
  out << std::fixed;
  if (t.kind == purpose_kind::baseline && t.outcome == tuning::trial_outcome::ok && !t.verified) {
    out << " " << std::setprecision(4) << tuning::timed_step_time(task.contract, t.steps)
        << " s/step";
  } else if (t.usable()) {
    out << " " << std::setprecision(4) << t.timed_step_time_s << " s/step";
    if (base_time > 0)
      out << " " << std::setprecision(2) << base_time / t.timed_step_time_s << "x";
  }
  if (auto best = best_speedup(r); best > 0)
    out << " | best " << std::setprecision(2) << best << "x";
  out << " | " << time_text(self);
  if (t.kind == purpose_kind::explore) {
    auto change = t.config.diff_from(tuning::baseline_configuration(task));
    out << " | " << decide::search_trials(r) << "/" << decide::budget_of(task, r).trials << " "
        << change;
  }
  if (self->state.o.verbose) {
    std::string why;
    for (const auto& v : t.violations)
      why += (why.empty() ? "" : "; ") + v;
    if (why.empty() && t.outcome != tuning::trial_outcome::ok)
      why = t.detail;
    if (!why.empty())
      out << "\n    why: " << why;
  }
  return out.str();
}

/// The header of a stage, with what it will do.
std::string stage_header(self_ptr self, const std::string& stage) {
  const auto& st = self->state;
  const auto& task = *st.o.task;
  const auto& r = run(self);
  std::ostringstream os;
  os << "== " << stage;
  if (stage == "init") {
    os << ": lock the scope and the contract (" << task.knobs.size() << " knobs, "
       << task.patches.size() << " patches)";
  } else if (stage == "doctor" || stage == "run") {
    auto budget = decide::budget_of(task, r);
    if (stage == "doctor")
      os << ": " << budget.baseline_repeats << " baseline runs"
         << (budget.adaptive ? " (up to " + std::to_string(budget.max_baseline_repeats) + ")"
                             : std::string{});
    else
      os << ": " << budget.trials << " search trials, then up to " << budget.verify_top
         << " candidates re-verified";
    os << " on " << st.nodes.size() << " slot" << (st.nodes.size() == 1 ? "" : "s");
  } else if (stage == "report") {
    os << ": " << r.trials.size() << " trial attempts";
  }
  os << " (" << clock_text(elapsed_s(self)) << ") ==";
  return os.str();
}

void advance(self_ptr self);

void post_advance(self_ptr self) {
  self->send(self, advance_atom_v);
}

// -- init -----------------------------------------------------------------------------------------

void seed_experience(self_ptr self);
void llm_step(self_ptr self, std::uint32_t round, std::string why);

/// Init's priors from the offline knowledge base (the llm-proposer actor's priors handler),
/// logged as PriorsLoaded before the experience is seeded: without `[llm]`, and as the LLM's
/// fallback.
void load_offline_priors(self_ptr self) {
  self->request(self->state.llm, caf::infinite, priors_atom_v, self->state.o.task->name)
    .then(
      [self](std::string& priors) {
        if (auto err = append_doc(self, wire::EventKind::PriorsLoaded, "priors/1", priors))
          return fail(self, "init", err);
        seed_experience(self);
      },
      [self](caf::error& err) { fail(self, "init: priors", err); });
}

void do_init(self_ptr self) {
  auto& st = self->state;
  const auto& task = *st.o.task;
  st.busy.exclusive = true;
  auto lock = adapters::lock_scope(task, st.o.run_dir + "/patch-check");
  if (!lock)
    return fail(self, "init", lock.error());
  std::set<std::string> excluded;
  for (const auto& x : decide::excluded_patches((*lock)["patches"])) {
    excluded.insert(x.patch);
    progress(self) << "init: patch '" << x.patch << "' is excluded ("
                   << (x.reason == "scope" ? "outside the scope" : "does not apply alone")
                   << "): " << x.evidence << '\n';
  }
  for (const auto& pair : (*lock)["patch_conflicts"])
    if (excluded.count(pair[0].get<std::string>()) == 0
        && excluded.count(pair[1].get<std::string>()) == 0)
      progress(self) << "init: patches '" << pair[0].get<std::string>() << "' and '"
                   << pair[1].get<std::string>()
                   << "' do not apply together: never proposed together\n";
  auto hardware = adapters::hardware_description();
  auto doc = decide::contract_locked_doc(task, *lock, hardware,
                                         decide::run_hardware_fingerprint(task, hardware),
                                         st.o.task_text,
                                         st.o.seed, st.o.trials.value_or(task.budget.trials));
  if (auto err = append_doc(self, wire::EventKind::ContractLocked, "contract/1", doc.dump()))
    return fail(self, "init", err);
  if (task.llm.enabled)
    return llm_step(self, 0, "init");
  load_offline_priors(self);
}

/// init after the priors: the experience pack, then the end of init.
void seed_experience(self_ptr self) {
  auto& s = self->state;
        const auto& locked = *run(self).contract_doc;
        nlohmann::json request{
          {"hardware", locked.value("hardware_fingerprint", "")},
          {"workload", locked.value("workload_signature", "")},
          {"hardware_identity", locked.value("hardware_identity", nlohmann::json::object())},
          {"workload_identity", locked.value("workload_identity", nlohmann::json::object())},
          {"mode", decide::to_string(s.o.experience)}};
        self->request(s.curator, caf::infinite, seeds_atom_v, request.dump())
          .then(
            [self](std::string& pack) {
              // The pack, and the priors it adjusts (decide::experience_priors), in one batch:
              // the planner never sees the one without the other.
              auto served = nlohmann::json::parse(pack, nullptr, false);
              // Which pack or sync each imported seed came through (not in the bank's records).
              if (auto provenance = store::import_provenance(*self->state.o.log)) {
                store::add_import_provenance(served, *provenance);
                if (served.is_object())
                  pack = served.dump();
              }
              std::vector<store::new_event> events{
                doc_event(wire::EventKind::ExperienceSeeded, "experience_pack/1", pack)};
              auto adjusted = decide::experience_priors(
                decide::with_llm_patches(*self->state.o.task, run(self), ""), run(self).priors,
                served);
              if (adjusted)
                events.push_back(doc_event(wire::EventKind::PriorsLoaded, "priors/1",
                                           store::to_json(*adjusted).dump()));
              if (auto err = append_all(self, std::move(events)))
                return fail(self, "init", err);
              const auto& locked2 = *run(self).contract_doc;
              auto gpu = locked2.contains("hardware_identity")
                           ? locked2["hardware_identity"].value("gpu", "") + " "
                           : std::string{};
              progress(self) << "init: scope locked ("
                             << locked2["scope"]["editable"].size() << " editable, "
                             << locked2["scope"]["frozen"].size() << " frozen files), hardware "
                             << gpu << locked2.value("hardware_fingerprint", "") << ", seed "
                             << self->state.o.seed << '\n';
              if (served.is_object() && served.contains("seeds"))
                progress(self) << "init: experience (" << served.value("mode", "") << "): "
                               << decide::experience_pack_text(served) << '\n';
              if (adjusted)
                progress(self) << "init: experience: priors of "
                               << served["prior_adjustment"]["effects"].size()
                               << " setting(s) and patch(es) from run "
                               << served["prior_adjustment"].value("run", "") << " ("
                               << served["prior_adjustment"].value("origin_hardware", "")
                               << ")\n";
              self->state.busy.exclusive = false;
              advance(self);
            },
            [self](caf::error& err) { fail(self, "init: experience bank", err); });
}

/// The pairs of patches that do not apply together, for the patches of the parsed answer `doc`
/// that passed every check (apply_error ""): each of them against the task's searchable patches,
/// the LLM patches accepted before and each other (adapters::patch_conflicts on copies of the
/// locked workload); logged as the answer's "conflicts" (decide::llm_patch_conflicts), so the
/// planner never proposes such a pair. An input for replay, like apply_error.
caf::error check_llm_patch_pairs(self_ptr self, nlohmann::json& doc) {
  auto& st = self->state;
  if (!doc.value("valid", false) || !doc.contains("patches"))
    return caf::none;
  nlohmann::json fresh = nlohmann::json::array();
  std::set<std::string> fresh_names;
  for (const auto& p : doc["patches"])
    if (p.value("apply_error", std::string{"not checked"}).empty()) {
      fresh.push_back(p);
      fresh_names.insert(p["name"].get<std::string>());
    }
  doc["conflicts"] = nlohmann::json::array();
  if (fresh.empty())
    return caf::none;
  auto dir = st.o.run_dir + "/llm-patches";
  auto accepted = decide::llm_accepted_patches(run(self));
  for (const auto& p : fresh)
    accepted.push_back(p);
  if (auto err = adapters::write_llm_patch_files(dir, accepted))
    return err;
  auto task = decide::with_llm_patches(*st.o.task, run(self), dir);
  for (const auto& p : fresh)
    task.patches.push_back({p["name"].get<std::string>(),
                            dir + "/" + p["name"].get<std::string>() + ".patch",
                            p["rationale"].get<std::string>()});
  std::set<std::string> excluded;
  for (const auto& x : decide::excluded_patches(run(self)))
    excluded.insert(x.patch);
  std::vector<std::string> names;
  for (const auto& p : task.patches)
    if (excluded.count(p.name) == 0)
      names.push_back(p.name);
  auto pairs = adapters::patch_conflicts(task, names, st.o.run_dir + "/llm-patch-check");
  if (!pairs)
    return std::move(pairs.error());
  for (const auto& [a, b] : *pairs)
    if (fresh_names.count(a) != 0 || fresh_names.count(b) != 0) {
      doc["conflicts"].push_back({a, b});
      progress(self) << "llm: patches '" << a << "' and '" << b
                     << "' do not apply together: never proposed together\n";
    }
  return caf::none;
}

/// One step of decide::llm_next for round `round` (0: init; > 0: asked again during the search,
/// decide::llm_round_due, `why`): ask, re-send after a crash, parse, or settle; each logged
/// before it is acted on. Round 0 then loads the priors and seeds the experience; a later round's
/// valid priors answer is logged together with the PriorsLoaded it gives, and the run goes on.
void llm_step(self_ptr self, std::uint32_t round, std::string why) {
  auto& st = self->state;
  const auto& task = *st.o.task;
  const std::string stage = round == 0 ? "init" : "run";
  const std::string what = round == 0 ? "init: llm" : "run: llm round " + std::to_string(round);
  auto step = decide::llm_next(task, run(self),
                               task.llm.patches ? adapters::read_prompt_files(task)
                                                : std::map<std::string, std::string>{},
                               round);
  using kind = decide::llm_step::kind;
  switch (step.k) {
    case kind::request: {
      nlohmann::json req = {{"purpose", step.purpose},
                            {"attempt", step.attempt},
                            {"url", task.llm.base_url + "/chat/completions"},
                            {"model", task.llm.model},
                            {"body", step.body}};
      if (round > 0) {
        req["round"] = round;
        req["explored"] = decide::ended_search_trials(run(self));
        req["why"] = why;
      }
      if (auto err = append_doc(self, wire::EventKind::LlmRequested, "llm_request/1", req.dump()))
        return fail(self, what, err);
      [[fallthrough]];
    }
    case kind::resend: {
      auto usage = decide::llm_usage_of(run(self));
      auto left = task.llm.max_calls > usage.calls ? task.llm.max_calls - usage.calls : 1;
      progress(self) << stage << ": asking " << task.llm.model << " for " << step.purpose
                     << (round > 0 ? " (round " + std::to_string(round) + ": " + why + ")"
                                   : std::string{})
                     << (step.k == kind::resend ? " (re-sending the logged request)" : "")
                     << " (answer attempt " << step.attempt + 1 << ")\n";
      self->request(st.llm, caf::infinite, chat_atom_v, step.body.dump(), left,
                    st.o.seed + usage.requests)
        .then(
          [self, round, why, what, purpose = step.purpose,
           attempt = step.attempt](std::string& exchange) {
            auto doc = nlohmann::json::parse(exchange, nullptr, false);
            if (!doc.is_object())
              doc = {{"ok", false}, {"error", "the llm-proposer's reply is not JSON"}};
            doc["purpose"] = purpose;
            doc["attempt"] = attempt;
            if (round > 0)
              doc["round"] = round;
            if (auto err =
                  append_doc(self, wire::EventKind::LlmResponded, "llm_response/1", doc.dump()))
              return fail(self, what, err);
            llm_step(self, round, why);
          },
          [self, what](caf::error& err) { fail(self, what, err); });
      return;
    }
    case kind::parse: {
      auto doc = decide::llm_parsed_doc(task, run(self), step.purpose, step.attempt, step.response);
      if (doc.contains("patches"))
        for (auto& p : doc["patches"])
          p["apply_error"] = adapters::check_llm_patch_applies(
            task, p["diff"].get<std::string>(), p["paths"].get<std::vector<std::string>>(),
            st.o.run_dir + "/llm-patch-check");
      if (auto err = check_llm_patch_pairs(self, doc))
        return fail(self, what, err);
      std::vector<store::new_event> events;
      if (round > 0)
        doc["round"] = round;
      events.push_back(doc_event(wire::EventKind::LlmAnswerParsed, "llm_parsed/1", doc.dump()));
      // A later round's valid priors replace those in use, in the same atomic append.
      if (round > 0 && doc.value("valid", false) && doc.contains("priors"))
        events.push_back(
          doc_event(wire::EventKind::PriorsLoaded, "priors/1", doc["priors"].dump()));
      if (auto err = append_all(self, std::move(events)))
        return fail(self, what, err);
      if (!doc.value("valid", false)) {
        progress(self) << what << " " << step.purpose << " answer not valid: "
                       << doc.value("error", "") << '\n';
      } else {
        std::size_t kept = doc.contains("priors") ? doc["priors"]["settings"].size()
                                                      + doc["priors"]["patches"].size()
                                                  : 0;
        if (doc.contains("patches"))
          for (const auto& p : doc["patches"]) {
            auto reason = p.value("apply_error", "");
            kept += reason.empty() ? 1 : 0;
            if (!reason.empty())
              progress(self) << what << " patch '" << p.value("name", "")
                             << "' rejected: " << reason << '\n';
          }
        for (const auto& r : doc["rejected"])
          progress(self) << what << " " << step.purpose << " entry rejected ("
                         << r.value("name", r.contains("entry") ? r["entry"].dump() : "")
                         << "): " << r.value("why", "") << '\n';
        progress(self) << what << " " << step.purpose << ": " << kept << " kept, "
                       << doc["rejected"].size() << " rejected\n";
      }
      return llm_step(self, round, why);
    }
    case kind::finish: break;
  }
  if (!step.detail.empty())
    progress(self) << what << ": " << step.detail << '\n';
  if (round > 0) {
    progress(self) << what << ": done ("
                   << (step.priors ? "its priors are in use" : "the earlier priors stay in use")
                   << ")\n";
    st.busy.exclusive = false;
    return advance(self);
  }
  if (step.priors) {
    if (auto err =
          append_doc(self, wire::EventKind::PriorsLoaded, "priors/1", step.priors->dump()))
      return fail(self, "init", err);
    return seed_experience(self);
  }
  progress(self) << "init: no valid priors from the LLM: the offline knowledge base's instead\n";
  load_offline_priors(self);
}

// -- trials ---------------------------------------------------------------------------------------

void on_result(self_ptr self, std::size_t slot, const messages::trial_result_msg& result) {
  auto& st = self->state;
  if (st.ended)
    return;
  auto id = st.nodes[slot].running;
  st.nodes[slot].busy = false;
  st.busy.running.erase(id);
  if (auto err = append_all(self, {event(wire::EventKind::TrialCompleted, result.bytes())}))
    return fail(self, "trial " + std::to_string(id.first), err);
  if (result->outcome() == wire::Outcome::Lost) {
    // The node could not prepare the attempt (no space, an I/O failure): logged as lost, so it
    // is not counted and a resume re-queues it; the run stops here instead of re-queueing it
    // into the same failure.
    return end_run(self,
                   "trial " + std::to_string(id.first) + " attempt " + std::to_string(id.second)
                     + " could not be prepared: "
                     + (result->detail() != nullptr ? result->detail()->str() : std::string{})
                     + "; it is not counted and is re-queued when the run is resumed (--run "
                     + st.o.run_id + ")",
                   1);
  }
  if (auto reason = !st.smoke_warned && result->detail() != nullptr
                       ? tuning::smoke_inconclusive_reason(result->detail()->str())
                       : std::nullopt) {
    // Every probe would pay for a smoke launch that judges nothing: say so once.
    st.smoke_warned = true;
    progress_error(self) << "warning: the [smoke] launch cannot judge any patch (trial " << id.first
                         << "'s probe was inconclusive; full launches judge the patches instead):";
    progress_error(self) << "  " << *reason;
    progress_error(self) << "  fix [smoke] (infrarsi check " << st.o.task->source << " --smoke)";
  }
  if (auto reason = !st.smoke_vacuous_warned && result->detail() != nullptr
                       ? tuning::smoke_vacuous_reason(result->detail()->str())
                       : std::nullopt) {
    // Every probe would pay for a smoke launch whose loss shows nothing: say so once.
    st.smoke_vacuous_warned = true;
    progress_error(self) << "warning: the [smoke] launch cannot judge any patch's numerics (trial "
                         << id.first << "'s probe was vacuous):";
    progress_error(self) << "  " << *reason;
    progress_error(self) << "  full launches judge the patches instead; fix [smoke] so that its "
                         << "loss falls (a loss at its ceiling ln(vocabulary) never does):";
    progress_error(self) << "  infrarsi check " << st.o.task->source << " --smoke";
  }
  // Baselines get their verdicts only after the calibration: their line is printed now.
  if (const auto* t = run(self).find(id.first, id.second);
      t != nullptr && t->kind == purpose_kind::baseline)
    progress(self) << trial_line(self, *t) << '\n';
  advance(self);
}

void on_lost(self_ptr self, std::size_t slot, const messages::trial_spec_msg& spec,
             const caf::error& why) {
  auto& st = self->state;
  if (st.ended)
    return;
  auto id = st.nodes[slot].running;
  st.nodes[slot].busy = false;
  st.busy.running.erase(id);
  if (auto err = append_all(self, {event(wire::EventKind::TrialLost, spec.bytes())}))
    return fail(self, "trial " + std::to_string(id.first), err);
  progress_error(self) << "trial " << id.first << " attempt " << id.second << " lost: " << describe(why)
                 << " (re-queued)\n";
  // A node-runner that failed is replaced (the actor may be gone); the pool needs nothing.
  if (!st.o.pool)
    st.nodes[slot].handle =
      self->spawn<caf::detached>(node_runner, st.o.zmq_context, st.nodes[slot].endpoint,
                                 st.o.run_id, caf::actor_cast<caf::actor>(self), st.o.cancel);
  advance(self);
}

void do_launch(self_ptr self, const std::vector<decide::launch>& launches) {
  auto& st = self->state;
  const auto& task = task_now(self);
  std::vector<store::new_event> events;
  std::vector<std::pair<std::size_t, messages::trial_spec_msg>> sends;
  std::size_t slot = 0;
  for (const auto& l : launches) {
    auto spec = spec_for(self, l);
    if (!l.proposed)
      events.push_back(event(wire::EventKind::TrialProposed, spec.bytes()));
    // Scope is checked before launch: a patch outside the editable scope never runs.
    std::string violation;
    for (const auto& p : l.config.patches)
      if (violation.empty())
        violation = adapters::patch_scope_violation(task, p);
    if (!violation.empty()) {
      events.push_back(event(wire::EventKind::TrialCompleted,
                             decide::refused_result(l.trial_id, l.attempt, violation).bytes()));
      continue;
    }
    while (slot < st.nodes.size() && st.nodes[slot].busy)
      ++slot;
    if (slot == st.nodes.size())
      break; // next_step never asks for more launches than free slots
    events.push_back(event(wire::EventKind::TrialDispatched, spec.bytes()));
    st.nodes[slot].busy = true;
    st.nodes[slot].running = {l.trial_id, l.attempt};
    st.busy.running.insert({l.trial_id, l.attempt});
    sends.emplace_back(slot, std::move(spec));
    ++slot;
  }
  if (auto err = append_all(self, std::move(events)))
    return fail(self, "dispatch", err);
  refresh_status(self);
  for (auto& [s, spec] : sends) {
    auto i = s;
    auto done = [self, i](messages::trial_result_msg& r) { on_result(self, i, r); };
    auto lost = [self, i, spec = spec](caf::error& err) { on_lost(self, i, spec, err); };
    if (st.o.pool) // daemon mode: the node pool picks a live node-runner
      self->request(st.o.pool, caf::infinite, run_atom_v, st.o.run_id, spec).then(done, lost);
    else
      self->request(st.nodes[i].handle, caf::infinite, run_atom_v, spec).then(done, lost);
  }
}

void do_verify(self_ptr self, const std::vector<decide::attempt_id>& attempts) {
  auto& st = self->state;
  for (const auto& a : attempts) {
    st.busy.verifying.insert(a);
    self->request(st.verifier, caf::infinite, check_atom_v, st.o.run_id, a.first, a.second)
      .then(
        [self, a](std::string& verdict) {
          self->state.busy.verifying.erase(a);
          if (self->state.ended)
            return;
          if (auto err = append_doc(self, wire::EventKind::TrialVerified, "verdict/1", verdict))
            return fail(self, "verify", err);
          prune_copies(self);
          if (const auto* t = run(self).find(a.first, a.second);
              t != nullptr && t->kind != purpose_kind::baseline)
            progress(self) << trial_line(self, *t) << '\n';
          advance(self);
        },
        [self](caf::error& err) { fail(self, "verify", err); });
  }
}

void do_propose(self_ptr self, std::uint32_t n) {
  auto& st = self->state;
  st.busy.proposing = true;
  auto at = st.version;
  self->request(st.planner, caf::infinite, propose_atom_v, st.o.run_id, n, at)
    .then(
      [self, n, at](std::string& doc) {
        auto& s = self->state;
        s.busy.proposing = false;
        if (s.ended)
          return;
        auto batch = decide::proposal_batch(task_now(self), run(self), n, at, doc);
        if (!batch)
          return fail(self, "planner", batch.error());
        std::vector<store::new_event> events;
        events.push_back(doc_event(wire::EventKind::ProposalsMade, "proposals/1",
                                   batch->document.dump()));
        for (const auto& l : batch->launches)
          events.push_back(event(wire::EventKind::TrialProposed, spec_for(self, l).bytes()));
        if (batch->launches.empty()) {
          events.push_back(doc_event(wire::EventKind::SearchStopped, "search_stopped/1",
                                     batch->stopped.dump()));
          progress(self) << "run: search stopped: " << batch->stopped.value("detail", "") << '\n';
        }
        if (s.o.verbose)
          for (const auto& p : batch->document["planner"]["proposals"])
            progress(self) << "run: proposed " << p.value("reason", "") << " [predicted "
                           << std::setprecision(3) << p.value("predicted_speedup", 1.0) << "x]\n";
        if (auto err = append_all(self, std::move(events)))
          return fail(self, "planner", err);
        advance(self);
      },
      [self](caf::error& err) { fail(self, "planner", err); });
}

void do_calibrate(self_ptr self) {
  auto& st = self->state;
  st.busy.calibrating = true;
  self->request(st.verifier, caf::infinite, calibrate_atom_v, st.o.run_id)
    .then(
      [self](std::string& doc) {
        auto& s = self->state;
        s.busy.calibrating = false;
        if (s.ended)
          return;
        auto j = nlohmann::json::parse(doc);
        if (j.contains("error"))
          return end_run(self,
                         "doctor: the baseline does not run: " + j["error"].get<std::string>()
                           + " (see the trial logs under " + s.o.run_dir + "/trials)",
                         1);
        if (auto err = append_doc(self, wire::EventKind::BaselineCalibrated, "doctor/1", doc))
          return fail(self, "doctor", err);
        const auto& n = j["noise"];
        progress(self) << "doctor: baseline " << std::setprecision(4)
                       << n.value("mean_step_time_s", 0.0) << " s/step, cv "
                       << 100 * n.value("cv", 0.0) << "%, minimum detectable speedup "
                       << 100 * n.value("min_detectable_speedup", 0.0) << "%\n";
        advance(self);
      },
      [self](caf::error& err) { fail(self, "doctor", err); });
}

void do_reverify(self_ptr self, std::uint64_t candidate) {
  auto& st = self->state;
  st.busy.reverifying.insert(candidate);
  self->request(st.verifier, caf::infinite, reverify_atom_v, st.o.run_id, candidate)
    .then(
      [self, candidate](std::string& doc) {
        self->state.busy.reverifying.erase(candidate);
        if (self->state.ended)
          return;
        if (auto err = append_doc(self, wire::EventKind::CandidateReverified, "reverification/1",
                                  doc))
          return fail(self, "verify", err);
        auto j = nlohmann::json::parse(doc);
        progress(self) << "verify: trial " << candidate << " speedup " << std::setprecision(4)
                       << j.value("speedup", 1.0) << "x, 95% interval ["
                       << j.value("ci_low", 0.0) << ", "
                       << (j["ci_high"].is_number() ? j["ci_high"].get<double>() : 0.0) << "] — "
                       << (j.value("promotable", false) ? "promotable" : "not promoted")
                       << (self->state.o.verbose ? ": " + j.value("reason", std::string{})
                                                 : std::string{})
                       << '\n';
        advance(self);
      },
      [self](caf::error& err) { fail(self, "verify", err); });
}

// -- promote, report, apply -----------------------------------------------------------------------

void do_promote(self_ptr self) {
  auto& st = self->state;
  const auto& r = run(self);
  auto decision = decide::promotion_decision(task_now(self), r);
  // The finding goes into the log in the same atomic batch as the decision that produced it
  // (no crash can separate them); the bank is a projection of the log and catches up from it.
  std::vector<store::new_event> events{
    doc_event(wire::EventKind::CandidatePromoted, "promotion/1", decision.dump())};
  if (auto record = decide::experience_record_doc(task_now(self), r, decision, r.events))
    events.push_back(doc_event(wire::EventKind::ExperienceRecorded, "experience/1", record->dump()));
  bool recorded = events.size() > 1;
  if (auto err = append_all(self, std::move(events)))
    return fail(self, "promote", err);
  if (!recorded || st.o.bank == nullptr)
    return post_advance(self);
  st.busy.exclusive = true;
  self->request(st.curator, caf::infinite, ingest_atom_v, st.o.run_id)
    .then(
      [self](bool) {
        self->state.busy.exclusive = false;
        advance(self);
      },
      [self](caf::error& err) {
        // The finding is in the log: the bank's index catches up at its next open
        // (or `infrarsi experience rebuild`).
        progress_error(self) << "experience bank: index not updated (the finding is in the "
                                "event log; the index catches up when the bank is next opened): "
                             << describe(err) << '\n';
        self->state.busy.exclusive = false;
        advance(self);
      });
}

void do_report(self_ptr self) {
  auto& st = self->state;
  auto written = write_run_report(task_now(self), run(self), st.o.run_dir);
  if (!written)
    return fail(self, "report", written.error());
  if (written->contains("report_html_error"))
    progress(self) << "report: report.html not written: "
                   << (*written)["report_html_error"].get<std::string>() << '\n';
  if (auto err = append_doc(self, wire::EventKind::ReportWritten, "report/1", written->dump()))
    return fail(self, "report", err);
  post_advance(self);
}

void do_apply(self_ptr self) {
  auto& st = self->state;
  const auto& task = task_now(self);
  const auto& r = run(self);
  if (!r.promotion || !r.promotion->value("promoted", false)) {
    progress(self) << "apply: nothing promoted, nothing applied\n";
    if (auto err = append_doc(self, wire::EventKind::ChangesApplied, "apply/1",
                              nlohmann::json{{"applied", false}}.dump()))
      return fail(self, "apply", err);
    return post_advance(self);
  }
  auto config = store::configuration_from_json((*r.promotion)["config"]);
  if (!config)
    return fail(self, "apply", make_error(errc::corrupt_data, "unreadable promoted config"));
  auto out_dir = st.o.run_dir + "/promoted";
  auto branch = "infrarsi/" + st.o.run_id;
  // The intent first: a crash from here on repeats the (idempotent) commit on resume.
  if (!r.apply_intent)
    if (auto err = append_doc(self, wire::EventKind::ApplyStarted, "apply_intent/1",
                              nlohmann::json{{"branch", branch},
                                             {"dir", out_dir},
                                             {"config", (*r.promotion)["config"]}}
                                .dump()))
      return fail(self, "apply", err);
  auto launch = adapters::launch_config(task, *config, r.promotion->value("speedup", 1.0),
                                        r.promotion->value("ci_low", 0.0));
  auto paths = adapters::promoted_patch_paths(task, *config);
  auto written = adapters::write_promoted(out_dir, task, *config, launch);
  if (!written)
    return fail(self, "apply", written.error());
  nlohmann::json doc = {
    {"applied", true}, {"dir", out_dir}, {"touched", paths.touched}, {"git", nullptr}};
  if (!paths.outside.empty()) {
    doc["applied"] = false;
    doc["refused"] = "patches touch paths outside the editable scope: "
                     + nlohmann::json(paths.outside).dump();
  } else {
    adapters::promotion_commit c;
    c.workdir = task.workload.workdir;
    c.branch = branch;
    for (const auto& p : config->patches)
      if (const auto* spec = task.find_patch(p))
        c.patch_files.push_back(spec->file);
    c.launch_json = launch.dump(2) + "\n";
    c.message = decide::commit_message(task, st.o.run_id, *r.promotion);
    c.scratch_dir = st.o.run_dir;
    doc["git"] = adapters::commit_promotion(c);
  }
  progress(self) << "apply: promoted configuration written to " << out_dir << "/launch.json\n";
  if (doc["git"].is_object()) {
    if (doc["git"].value("committed", false)) {
      // The branch first, on a line of its own, so that no shortening can cut it off.
      progress(self) << "apply: committed on branch " << doc["git"].value("branch", "")
                     << " (commit " << doc["git"].value("commit", "").substr(0, 12) << ")\n";
      progress(self) << "apply: the commit holds promoted/launch.json"
                     << (config->patches.empty() ? "" : " and the patches")
                     << "; your working tree is untouched\n";
    } else
      progress_error(self) << "apply: not committed: " << doc["git"].value("reason", "") << '\n';
  }
  if (auto err = append_doc(self, wire::EventKind::ChangesApplied, "apply/1", doc.dump()))
    return fail(self, "apply", err);
  post_advance(self);
}

// -- the loop -------------------------------------------------------------------------------------

std::string summary(self_ptr self) {
  const auto& r = run(self);
  std::ostringstream os;
  const auto spend = decide::device_seconds_spent(task_now(self), r);
  os << "run " << self->state.o.run_id << ": " << r.trials.size() << " trials, "
     << std::setprecision(4) << spend.total_s << " device-seconds";
  if (spend.lost_attempts > 0)
    os << " (" << spend.lost_s << " on " << spend.lost_attempts << " lost attempt(s))";
  os << ". ";
  if (r.promotion && r.promotion->value("promoted", false))
    os << "Promoted " << r.promotion->value("change", "") << ": verified speedup "
       << r.promotion->value("speedup", 1.0) << "x [" << r.promotion->value("ci_low", 0.0)
       << ", " << r.promotion->value("ci_high", 0.0) << "].";
  else if (r.promotion)
    os << "Nothing promoted: " << r.promotion->value("reason", "") << ".";
  if (r.applied && r.applied->contains("git") && (*r.applied)["git"].is_object()
      && !(*r.applied)["git"].value("committed", false))
    os << " Not committed: " << (*r.applied)["git"].value("reason", "") << ".";
  if (r.applied && r.applied->contains("refused"))
    os << " Not applied: " << r.applied->value("refused", "") << ".";
  if (r.report)
    os << " Report: " << r.report->value("report_md", "");
  return os.str();
}

void advance(self_ptr self) {
  auto& st = self->state;
  // Bounded: each iteration appends or sends something; a run never needs this many in a row.
  for (int guard = 0; guard < 100000 && !st.ended; ++guard) {
    if (run(self).stage_done(st.o.until) && st.busy.running.empty()) {
      // --until: stop after that stage (nothing of a later one has started).
      return end_run(self, summary(self), 0);
    }
    decide::step_input in;
    std::uint32_t busy_slots = 0;
    for (const auto& n : st.nodes)
      busy_slots += n.busy ? 1 : 0;
    // Local slots: every idle one; daemon mode: the pool's share less what is in flight.
    auto slots = st.o.pool ? std::min<std::uint32_t>(st.pool_share,
                                                     static_cast<std::uint32_t>(st.nodes.size()))
                           : static_cast<std::uint32_t>(st.nodes.size());
    in.free_slots = slots > busy_slots ? slots - busy_slots : 0;
    if (st.draining) {
      if (st.busy.running.empty())
        return end_run(self,
                       "run " + st.o.run_id + " drained: nothing in flight; it resumes where it "
                         "stopped",
                       0);
      in.free_slots = 0;
    }
    in.busy = st.busy;
    in.wall_clock_expired = st.wall_clock_expired;
    auto s = decide::next_step(task_now(self), run(self), in);
    if (s.kind == step_kind::begin_stage || s.kind == step_kind::launch)
      if (auto full = adapters::check_free_space(st.o.space_dirs, st.o.disk_reserve_bytes))
        return end_run(self,
                       (s.kind == step_kind::launch ? "before dispatching a trial: "
                                                    : "before stage " + s.stage + ": ")
                         + describe(full) + "; free space and resume the run (--run "
                         + st.o.run_id + ")",
                       1);
    switch (s.kind) {
      case step_kind::wait: return;
      case step_kind::done: return end_run(self, summary(self), 0);
      case step_kind::begin_stage:
      case step_kind::end_stage: {
        if (s.kind == step_kind::begin_stage)
          progress(self) << stage_header(self, s.stage);
        if (auto err = append_all(self, {event(s.kind == step_kind::begin_stage
                                                 ? wire::EventKind::StageStarted
                                                 : wire::EventKind::StageCompleted,
                                               decide::stage_payload(s.stage).bytes())}))
          return fail(self, s.stage, err);
        if (s.kind == step_kind::end_stage)
          // A snapshot for readers (infrarsi status); never trusted over the events.
          if (auto covered = store::snapshot_run(*st.o.log, st.o.run_id); !covered)
            progress_error(self) << "snapshot not written: " << describe(covered.error()) << '\n';
        continue;
      }
      case step_kind::init: return do_init(self);
      case step_kind::lose: {
        std::vector<store::new_event> events;
        for (const auto& a : s.attempts) {
          const auto* t = run(self).find(a.first, a.second);
          decide::launch l;
          l.trial_id = a.first;
          l.attempt = a.second;
          l.config = t->config;
          l.kind = t->kind;
          l.candidate_trial = t->candidate_trial;
          l.round = t->round;
          events.push_back(event(wire::EventKind::TrialLost, spec_for(self, l).bytes()));
          progress(self) << "trial " << a.first << " attempt " << a.second
                         << " was dispatched before a restart and never finished: lost, "
                            "re-queued as attempt "
                         << a.second + 1 << '\n';
        }
        if (auto err = append_all(self, std::move(events)))
          return fail(self, "resume", err);
        continue;
      }
      case step_kind::launch: do_launch(self, s.launches); continue;
      case step_kind::verify: do_verify(self, s.attempts); continue;
      case step_kind::propose: do_propose(self, s.n); continue;
      case step_kind::stop_search: {
        if (auto err = append_doc(self, wire::EventKind::SearchStopped, "search_stopped/1",
                                  s.stop.dump()))
          return fail(self, "run", err);
        progress(self) << "run: search stopped: " << s.stop.value("reason", "") << " ("
                       << s.stop.value("detail", "") << ")\n";
        continue;
      }
      case step_kind::calibrate: do_calibrate(self); continue;
      case step_kind::reverify: do_reverify(self, s.candidate); continue;
      case step_kind::promote: return do_promote(self);
      case step_kind::report: return do_report(self);
      case step_kind::apply: return do_apply(self);
      case step_kind::llm_round:
        st.busy.exclusive = true; // nothing is proposed until the round is settled
        return llm_step(self, s.n, s.reason);
    }
  }
}

} // namespace

supervisor_actor::behavior_type supervisor(supervisor_actor::stateful_pointer<supervisor_state> self,
                                           supervisor_options opts) {
  auto& st = self->state;
  st.o = std::move(opts);
  st.fold.emplace(st.o.run_id);
  st.planner = self->spawn(planner, st.o.log, st.o.task);
  st.verifier = self->spawn(verifier, st.o.log, st.o.task);
  st.llm = self->spawn<caf::detached>(llm_proposer, st.o.task, st.o.knowledge_dir);
  st.curator = self->spawn(curator, st.o.bank);
  if (st.o.pool) // daemon mode: virtual slots, as many as the run may have in flight
    st.nodes.resize(std::max<std::uint32_t>(1, st.o.pool_slots));
  for (const auto& ep : st.o.node_endpoints) {
    node_slot n;
    n.endpoint = ep;
    n.handle = self->spawn<caf::detached>(node_runner, st.o.zmq_context, ep, st.o.run_id,
                                          caf::actor_cast<caf::actor>(self), st.o.cancel);
    st.nodes.push_back(std::move(n));
  }
  if (auto err = store::fold_stream(*st.o.log, st.o.run_id, *st.fold)) {
    fail(self, "load", err);
    return {[](advance_atom) {}, [](interrupt_atom, int) {}, [](deadline_atom) {},
            [](stale_atom, const messages::trial_result_msg&) {}, [](slots_atom, std::uint32_t) {},
            [](drain_atom) {}};
  }
  st.version = run(self).events;
  if (st.version == 0) {
    wire::RunCreatedT rc;
    rc.task = st.o.task->source;
    rc.seed = st.o.seed;
    rc.tool_version = "0.2.0";
    if (auto err = append_all(self, {event(wire::EventKind::RunCreated,
                                           messages::run_created_msg::pack(rc).bytes())}))
      fail(self, "init", err);
  }
  // The search stage's wall-clock limit, from this supervisor's start (logged when it passes).
  auto wall = decide::budget_of(*st.o.task, run(self)).wall_clock_s;
  if (wall > 0 && wall < 1e9)
    self->delayed_send(self, std::chrono::milliseconds(static_cast<long>(wall * 1000)),
                       deadline_atom_v);
  post_advance(self);
  return {
    [self](advance_atom) { advance(self); },
    [self](interrupt_atom, int signal) {
      auto& s = self->state;
      if (s.ended)
        return;
      nlohmann::json in_flight = nlohmann::json::array();
      for (const auto& a : s.busy.running)
        in_flight.push_back({a.first, a.second});
      nlohmann::json doc = {{"signal", signal}, {"in_flight", in_flight}};
      if (auto err = append_doc(self, wire::EventKind::RunInterrupted, "interrupted/1", doc.dump()))
        progress_error(self) << "interrupt: not logged: " << describe(err) << '\n';
      // Trials as ID.ATTEMPT, as the trials table of the report names them.
      std::string which;
      for (const auto& a : s.busy.running)
        which += (which.empty() ? "" : ", ") + std::to_string(a.first) + "."
                 + std::to_string(a.second);
      end_run(self,
              "interrupted by signal " + std::to_string(signal) + " in stage "
                + (run(self).stages_started.empty() ? std::string{"init"}
                                                    : run(self).stages_started.back())
                + "; "
                + (which.empty() ? std::string{"no trial in flight"}
                                 : "trial(s) " + which
                                     + " in flight will be re-queued on resume"),
              128 + signal);
    },
    [self](deadline_atom) {
      self->state.wall_clock_expired = true;
      advance(self);
    },
    [self](stale_atom, const messages::trial_result_msg& stale) {
      if (self->state.ended)
        return;
      progress(self) << "trial " << stale->trial_id() << " attempt " << stale->attempt()
                     << ": a late result for an attempt already given up; logged as stale\n";
      if (auto err = append_all(self, {event(wire::EventKind::TrialResultStale, stale.bytes())}))
        fail(self, "stale result", err);
    },
    [self](slots_atom, std::uint32_t share) {
      self->state.pool_share = share;
      advance(self);
    },
    [self](drain_atom) {
      if (self->state.ended)
        return;
      progress(self) << "drain: nothing more is dispatched; " << self->state.busy.running.size()
                     << " trial(s) in flight finish first\n";
      self->state.draining = true;
      advance(self);
    }};
}

} // namespace infrarsi::actors
