#include "runtime/tune.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/actors.hpp"
#include "decide/decisions.hpp"
#include "decide/experience_serving.hpp"
#include "adapters/cluster_identity.hpp"
#include "adapters/environment.hpp"
#include "adapters/node_bridge.hpp"
#include "adapters/preflight.hpp"
#include "adapters/process.hpp"
#include "runtime/signals.hpp"
#include "runtime/store_paths.hpp"
#include "adapters/task_file.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::runtime {

namespace fs = std::filesystem;
using adapters::load_task_file;
using adapters::load_task_text;
using adapters::node_server;

namespace {

std::string utc_stamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

} // namespace

std::string default_knowledge_dir(const std::string& task_source) {
  auto beside = fs::path{task_source}.parent_path().parent_path() / "knowledge";
  if (fs::is_directory(beside))
    return beside.string();
  return "config/knowledge";
}

namespace {

/// Why run `state` cannot be resumed with `task` (the file given now) and `trials` (--trials),
/// or "" if it can: the run's task, contract, memory capacity, knobs, patches and budget were
/// locked at init and cannot change.
std::string resume_refusal(const store::run_state& state, const tuning::task_spec& task,
                           const std::optional<std::uint32_t>& trials) {
  const auto& locked = *state.contract_doc;
  const auto& run_id = state.run_id;
  auto sig = locked.value("workload_signature", std::string{});
  auto locked_task = sig.substr(0, sig.find(':'));
  if (!locked_task.empty() && locked_task != task.name)
    return "run '" + run_id + "' belongs to task '" + locked_task + "', not '" + task.name + "' ("
           + task.source + "); resume it with its own task file (" + state.task_path + ")";
  auto now = decide::contract_json(task);
  if (adapters::sha256_hex(now.dump()) != locked.value("contract_hash", std::string{})) {
    auto keys = decide::contract_changes(locked.value("contract", nlohmann::json::object()), task);
    return task.source + ": the contract differs from the one run '" + run_id
           + "' locked at init: " + (keys.empty() ? "its hash differs" : keys)
           + "; a locked contract cannot change (start a new run)";
  }
  if (locked.contains("memory_capacity_bytes")
      && locked.value("memory_capacity_bytes", std::uint64_t{0})
           != decide::memory_capacity_bytes(task))
    return task.source + ": the memory capacity (limits."
           + (task.limits.device_memory_bytes > 0 ? "device_memory_bytes" : "memory_cap_bytes")
           + " = " + std::to_string(decide::memory_capacity_bytes(task)) + " bytes) differs from the "
           + std::to_string(locked.value("memory_capacity_bytes", std::uint64_t{0})) + " bytes run '"
           + run_id + "' locked at init; the planner's memory model depends on it (start a new run)";
  std::vector<std::string> knobs_then;
  for (const auto& k : locked.value("knobs", nlohmann::json::array()))
    knobs_then.push_back(k.value("name", ""));
  std::vector<std::string> knobs_now;
  for (const auto& k : task.knobs)
    knobs_now.push_back(k.name);
  std::vector<std::string> patches_then;
  const auto patches_doc = locked.value("patches", nlohmann::json::object());
  for (auto it = patches_doc.begin(); it != patches_doc.end(); ++it)
    patches_then.push_back(it.key());
  std::vector<std::string> patches_now;
  for (const auto& p : task.patches)
    patches_now.push_back(p.name);
  std::sort(patches_then.begin(), patches_then.end());
  std::sort(patches_now.begin(), patches_now.end());
  if (knobs_then != knobs_now || patches_then != patches_now)
    return task.source + ": its knobs or patches differ from those run '" + run_id
           + "' locked at init (knobs then: " + nlohmann::json(knobs_then).dump()
           + ", now: " + nlohmann::json(knobs_now).dump() + "; patches then: "
           + nlohmann::json(patches_then).dump() + ", now: " + nlohmann::json(patches_now).dump()
           + "); start a new run";
  auto logged = decide::budget_of(task, state).trials;
  if (trials && *trials != logged)
    return "--trials " + std::to_string(*trials) + ": run '" + run_id + "' was started with a "
           "budget of " + std::to_string(logged) + " search trials, logged at init; a resume "
           "keeps it (omit --trials, or start a new run)";
  return {};
}

} // namespace

caf::expected<std::string> new_run_id(const store::event_log& log, const std::string& task_name) {
  std::random_device rd;
  for (int tries = 0; tries < 64; ++tries) {
    char suffix[8];
    std::snprintf(suffix, sizeof suffix, "%04x", static_cast<unsigned>(rd() & 0xffffu));
    auto id = task_name + "-" + utc_stamp() + "-" + suffix;
    auto v = log.version(id);
    if (!v)
      return std::move(v.error());
    if (*v == 0)
      return id;
  }
  return make_error(errc::io_error, "could not pick an unused run id");
}

caf::expected<std::map<std::string, std::string>> parse_slot_env(const std::string& text) {
  std::map<std::string, std::string> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    auto end = text.find(';', at);
    auto item = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (!item.empty()) {
      auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0)
        return make_error(errc::invalid_argument,
                          "--slot-env '" + text + "': expected K=V entries separated by ';', got '"
                            + item + "'");
      out[item.substr(0, eq)] = item.substr(eq + 1);
    }
    if (end == std::string::npos)
      break;
    at = end + 1;
  }
  return out;
}

std::string cpu_list_error(const std::string& text) {
  if (text.empty())
    return "empty";
  const auto cores = std::thread::hardware_concurrency();
  std::size_t at = 0;
  while (at <= text.size()) {
    auto end = text.find(',', at);
    auto item = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    auto dash = item.find('-');
    auto number = [](const std::string& s, unsigned& v) {
      if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos)
        return false;
      v = static_cast<unsigned>(std::stoul(s));
      return true;
    };
    unsigned a = 0;
    unsigned b = 0;
    if (!number(item.substr(0, dash), a)
        || (dash != std::string::npos && !number(item.substr(dash + 1), b)))
      return "'" + item + "' is not a core number or range";
    if (dash == std::string::npos)
      b = a;
    if (b < a)
      return "range '" + item + "' is descending";
    if (cores > 0 && b >= cores)
      return "core " + std::to_string(b) + " does not exist (this machine has "
             + std::to_string(cores) + ")";
    if (end == std::string::npos)
      break;
    at = end + 1;
  }
  return {};
}

int run_tune(const tune_options& o, std::ostream& out, std::ostream& err) {
  // Before any thread starts (RocksDB starts its own): every thread inherits the blocked mask,
  // so SIGINT and SIGTERM reach only the signal thread.
  signal_guard signals;
  auto file_task = load_task_file(o.task_path);
  if (!file_task) {
    err << "infrarsi tune: " << describe(file_task.error()) << '\n';
    return 1;
  }
  auto store_dir = o.store_dir.empty() ? std::string{default_store_dir} : o.store_dir;
  // Pre-flight, before the store is created or opened: a task whose every trial would fail
  // before it starts creates no run (a resume keeps the task it locked, and is not refused here).
  if (o.run_id.empty()) {
    adapters::preflight_options pre;
    pre.store_dir = store_dir;
    if (auto problems = adapters::preflight(*file_task, pre); !problems.empty()) {
      for (const auto& p : problems)
        err << "infrarsi tune: " << adapters::to_string(p) << '\n';
      err << "infrarsi tune: " << problems.size()
          << " pre-flight problem(s); nothing was run and no run was created (`infrarsi check "
          << o.task_path << "` lists them)\n";
      return 1;
    }
  }
  std::error_code ec;
  fs::create_directories(store_dir, ec);
  if (ec) {
    err << "infrarsi tune: cannot create store '" << store_dir << "': " << ec.message() << '\n';
    return 1;
  }
  for (const auto& [flag, list] : {std::pair{"--slot-env", &o.slot_env},
                                    std::pair{"--slot-cpus", &o.slot_cpus}})
    if (list->size() > o.nodes) {
      err << "infrarsi tune: " << list->size() << " " << flag << " entries for --nodes "
          << o.nodes << "; give at most one per node slot\n";
      return 2;
    }
  for (const auto& cpus : o.slot_cpus)
    if (auto why = cpu_list_error(cpus); !why.empty()) {
      err << "infrarsi tune: --slot-cpus '" << cpus << "': " << why
          << " (expected a taskset CPU list such as 0-3 or 0,2,4-5)\n";
      return 2;
    }
  std::vector<std::map<std::string, std::string>> slot_env(o.nodes);
  for (std::size_t i = 0; i < o.slot_env.size(); ++i) {
    auto env = parse_slot_env(o.slot_env[i]);
    if (!env) {
      err << "infrarsi tune: " << describe(env.error()) << '\n';
      return 2;
    }
    slot_env[i] = std::move(*env);
  }
  if (auto full = adapters::check_free_space({store_dir}, o.disk_reserve_bytes)) {
    err << "infrarsi tune: " << describe(full) << '\n';
    return 1;
  }
  store::rocksdb_event_log_options log_opts;
  log_opts.sync_writes = true;
  auto log = store::rocksdb_event_log::open(store_dir + "/events", log_opts);
  if (!log) {
    err << "infrarsi tune: " << describe(log.error()) << '\n';
    return 1;
  }
  if (const auto& rec = (*log)->recovery(); rec.tail_dropped)
    err << "infrarsi tune: recovered the event log: a torn tail was dropped (" << rec.dropped_bytes
        << " bytes; RocksDB: " << rec.message << "); " << rec.head
        << " events survived, the last at global position "
        << (rec.head > 0 ? std::to_string(rec.head - 1) : std::string{"(none)"}) << '\n';
  // The store's cluster identity (created on first use): the origin of its findings.
  auto identity = adapters::load_cluster_identity(adapters::cluster_key_path(store_dir), true);
  if (!identity) {
    err << "infrarsi tune: " << describe(identity.error()) << '\n';
    return 1;
  }
  auto bank = store::experience_bank::open(store_dir + "/experience", **log, identity->cluster_id);
  if (!bank) {
    err << "infrarsi tune: " << describe(bank.error()) << '\n';
    return 1;
  }
  std::string run_id = o.run_id;
  if (run_id.empty()) {
    auto fresh = new_run_id(**log, file_task->name);
    if (!fresh) {
      err << "infrarsi tune: " << describe(fresh.error()) << '\n';
      return 1;
    }
    run_id = *fresh;
  }
  if (auto bad = store::validate_run_id(run_id)) {
    err << "infrarsi tune: " << describe(bad) << '\n';
    return 1;
  }
  std::uint64_t seed = o.seed.value_or(file_task->budget.seed);
  // The task decisions use: the file's for a new run; for a resumed one, the text logged at
  // init (the log is self-contained; the file must still carry the same contract).
  std::optional<tuning::task_spec> task;
  std::string task_text;
  if (!o.run_id.empty()) {
    auto state = store::load_run(**log, run_id);
    if (!state) {
      err << "infrarsi tune: " << describe(state.error()) << '\n';
      return 1;
    }
    if (state->events == 0) {
      err << "infrarsi tune: run '" << run_id << "' not found in '" << store_dir
          << "/events'; omit --run to start a new run\n";
      return 1;
    }
    seed = state->seed;
    if (state->contract_doc) {
      if (auto refusal = resume_refusal(*state, *file_task, o.trials); !refusal.empty()) {
        err << "infrarsi tune: " << refusal << '\n';
        return 1;
      }
      const auto& locked = *state->contract_doc;
      if (locked.contains("task_toml") && locked["task_toml"].is_string()) {
        task_text = locked["task_toml"].get<std::string>();
        auto logged = load_task_text(task_text, locked.value("task_path", file_task->source));
        if (!logged) {
          err << "infrarsi tune: the task logged by run '" << run_id
              << "' does not load: " << describe(logged.error()) << '\n';
          return 1;
        }
        task = std::move(*logged);
      }
    }
    err << "infrarsi tune: continuing run " << run_id << " (" << state->events << " events)\n";
  }
  if (!task) {
    task = *file_task;
    std::ifstream in{file_task->source};
    task_text.assign(std::istreambuf_iterator<char>{in}, {});
  }
  // An explicit --knowledge naming no directory is an error, never silent neutral priors (a
  // broken file in it fails init: actors::load_knowledge).
  if (!o.knowledge_dir.empty() && !fs::is_directory(o.knowledge_dir, ec)) {
    err << "infrarsi tune: --knowledge '" << o.knowledge_dir << "': no such directory\n";
    return 2;
  }
  auto run_dir = store_dir + "/runs/" + run_id;
  fs::create_directories(run_dir, ec);

  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::infrarsi>();
  caf::actor_system sys{cfg};
  zmq::context_t zctx;
  std::vector<std::unique_ptr<node_server>> nodes;
  std::vector<std::string> endpoints;
  for (std::uint32_t i = 0; i < o.nodes; ++i) {
    nodes.push_back(std::make_unique<node_server>(
      zctx, "tcp://127.0.0.1:*", *task, run_dir + "/trials", "local-" + std::to_string(i),
      slot_env[i], i < o.slot_cpus.size() ? o.slot_cpus[i] : std::string{},
      o.disk_reserve_bytes));
    if (auto e = nodes.back()->start()) {
      err << "infrarsi tune: " << describe(e) << '\n';
      return 1;
    }
    endpoints.push_back(nodes.back()->endpoint());
  }
  std::atomic<bool> cancel{false};
  std::ofstream trace;
  if (!o.trace_appends.empty()) {
    trace.open(o.trace_appends, std::ios::app);
    if (!trace) {
      err << "infrarsi tune: cannot open --trace-appends file '" << o.trace_appends << "'\n";
      return 1;
    }
  }
  if (!o.quiet)
    err << "infrarsi tune: run " << run_id << ", task " << task->name << ", store " << store_dir
        << ", " << o.nodes << " node slot" << (o.nodes == 1 ? "" : "s") << '\n';
  int status = 1;
  {
    caf::scoped_actor self{sys};
    actors::supervisor_options so;
    so.task = &*task;
    so.log = log->get();
    so.bank = bank->get();
    so.zmq_context = &zctx;
    so.node_endpoints = endpoints;
    so.run_id = run_id;
    so.run_dir = run_dir;
    so.trials_dir = run_dir + "/trials"; // the local node slots' trial directories (above)
    so.keep_trial_copies = o.keep_trial_copies;
    so.knowledge_dir = o.knowledge_dir.empty() ? default_knowledge_dir(task->source)
                                               : o.knowledge_dir;
    so.seed = seed;
    so.trials = o.trials;
    so.experience =
      decide::parse_experience_mode(o.experience).value_or(decide::experience_mode::filtered);
    so.task_text = task_text;
    so.until = o.until;
    so.progress = &err;
    so.quiet = o.quiet;
    so.verbose = o.verbose;
    // A live status line only on a terminal (never into a pipe or a file).
    so.live_status = !o.quiet && &err == &std::cerr && ::isatty(STDERR_FILENO) == 1;
    so.append_trace = trace.is_open() ? &trace : nullptr;
    so.cancel = &cancel;
    so.space_dirs = {store_dir + "/events", run_dir + "/trials"};
    so.disk_reserve_bytes = o.disk_reserve_bytes;
    so.reply_to = caf::actor{self};
    auto sup = sys.spawn(actors::supervisor, std::move(so));
    signals.start("infrarsi tune", [sup](int sig) { caf::anon_send(sup, actors::interrupt_atom_v, sig); }, err);
    self->receive([&](std::string& summary, int code) {
      (code == 0 ? out : err) << (code == 0 ? "" : "infrarsi tune: ") << summary << '\n';
      status = code;
    });
  }
  cancel = true;
  // Every slot's running trial is stopped at once (SIGTERM, kill_grace_s, SIGKILL), then joined.
  for (auto& n : nodes)
    n->request_stop();
  for (auto& n : nodes)
    n->stop();
  if (status > 128) {
    err << "infrarsi tune: interrupted; every trial process has ended. Resume with:\n  infrarsi "
           "tune "
        << o.task_path << " --store " << store_dir << " --run " << run_id
        << (o.nodes > 1 ? " --nodes " + std::to_string(o.nodes) : std::string{}) << '\n';
  }
  return status;
}

namespace {

/// The pid of the process that holds the store's RocksDB lock (LOCK, an fcntl lock), or 0.
pid_t store_holder(const std::string& events_dir) {
  auto path = events_dir + "/LOCK";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;
  pid_t holder = 0;
  if (::fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK)
    holder = fl.l_pid;
  ::close(fd);
  return holder;
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

} // namespace

std::string run_state_text(const store::run_state& state, bool last_event_interrupt,
                           int holder) {
  const auto& done = state.stages_completed;
  const bool in_stage = state.stages_started.size() > done.size();
  const std::string stage = in_stage ? state.stages_started.back() : std::string{};
  if (!done.empty() && done.back() == "apply" && !in_stage)
    return "finished";
  if (in_stage && stage == "doctor" && !state.doctor_doc && holder == 0) {
    const auto failure = decide::baseline_launch_failure(state);
    // Every baseline attempt ended, none ok: the doctor could not calibrate.
    bool pending = false;
    bool any_ok = false;
    std::size_t ended = 0;
    for (const auto* t : state.latest_attempts())
      if (t->kind == tuning::purpose_kind::baseline) {
        pending = pending || !t->finished;
        any_ok = any_ok || (t->finished && t->outcome == tuning::trial_outcome::ok);
        ended += t->finished ? 1 : 0;
      }
    if (!failure.empty() || (!pending && !any_ok && ended > 0)) {
      std::string first;
      for (const auto* t : state.latest_attempts())
        if (t->kind == tuning::purpose_kind::baseline && t->finished) {
          first = "trial " + std::to_string(t->trial_id) + " " + tuning::to_string(t->outcome)
                  + (t->detail.empty() ? "" : ": " + t->detail);
          break;
        }
      if (first.size() > 300)
        first = first.substr(0, 300) + " ...";
      return "failed in stage doctor: the baseline does not run (" + first + ")";
    }
  }
  if (last_event_interrupt)
    return "interrupted" + (in_stage ? " in stage " + stage : std::string{}) + " (by a signal)";
  if (holder != 0)
    return "running" + (in_stage ? " stage " + stage : std::string{}) + " (process "
           + std::to_string(holder) + " holds the store)";
  if (in_stage)
    return "stopped in stage " + stage + ": its process ended before the stage did (it failed, "
           "or was killed)";
  if (!done.empty())
    return "stopped after stage " + done.back() + " (--until " + done.back() + ")";
  return "created";
}

int run_status(const std::string& store_dir, std::ostream& out, std::ostream& err) {
  if (auto missing = missing_store(store_dir); !missing.empty()) {
    err << "infrarsi status: " << missing << '\n';
    return 1;
  }
  store::rocksdb_event_log_options opts;
  opts.read_only = true;
  const auto events_dir = events_dir_of(store_dir);
  auto log = store::rocksdb_event_log::open(events_dir, opts);
  if (!log) {
    err << "infrarsi status: " << describe(log.error()) << '\n';
    return 1;
  }
  warn_if_damaged(**log, events_dir, "infrarsi status", err);
  auto runs = (*log)->list_runs();
  if (!runs) {
    err << "infrarsi status: " << describe(runs.error()) << '\n';
    return 1;
  }
  const pid_t holder = store_holder(events_dir);
  int status = 0;
  bool first = true;
  for (const auto& r : *runs) {
    if (!first)
      out << '\n';
    first = false;
    out << r.run_id << '\n';
    if (r.run_id == store::imported_experience_stream) { // not a run
      out << "  imported experience findings: " << r.event_count
          << " events (infrarsi experience list)\n";
      continue;
    }
    auto loaded = store::load_run_with_snapshot(**log, r.run_id); // snapshot + tail
    if (!loaded) {
      out << "  state:    unreadable: " << describe(loaded.error()) << '\n';
      warn_damaged_run(events_dir, r.run_id, "its events", loaded.error(), "infrarsi status",
                       err);
      status = 1;
      continue;
    }
    // The snapshot is trusted only as far as the events it covers are still readable.
    if (loaded->used_snapshot)
      if (auto bad = verify_events(**log, r.run_id, loaded->snapshot_covered)) {
        warn_damaged_run(events_dir, r.run_id,
                         ("the " + std::to_string(loaded->snapshot_covered)
                          + " events its snapshot covers")
                           .c_str(),
                         bad, "infrarsi status", err);
        status = 1;
      }
    const auto& state = loaded->state;
    bool last_interrupt = false;
    if (r.event_count > 0)
      (void)(*log)->for_each_in_stream(r.run_id, r.event_count - 1,
                                       [&](const store::recorded_event& ev) {
                                         last_interrupt =
                                           ev.kind
                                           == static_cast<store::event_kind_t>(
                                             wire::EventKind::RunInterrupted);
                                         return false;
                                       });
    auto text = run_state_text(state, last_interrupt, holder);
    out << "  state:    " << text << '\n';
    out << "  task:     " << (state.task_path.empty() ? "?" : state.task_path) << '\n';
    std::string stages;
    for (const auto& st : state.stages_completed)
      stages += (stages.empty() ? "" : ", ") + st;
    if (state.stages_started.size() > state.stages_completed.size())
      stages += (stages.empty() ? "" : ", ") + state.stages_started.back() + " (not completed)";
    out << "  stages:   " << (stages.empty() ? "none" : stages) << '\n';
    std::map<std::string, std::size_t> outcomes;
    std::size_t ended = 0;
    for (const auto* t : state.latest_attempts())
      if (t->finished) {
        ++ended;
        ++outcomes[tuning::to_string(t->outcome)];
      }
    out << "  trials:   " << state.latest_attempts().size() << " (" << ended << " ended";
    for (const auto& [name, n] : outcomes)
      out << ", " << n << " " << name;
    out << ")\n";
    if (state.noise)
      out << "  baseline: " << fixed(state.noise->mean_step_time_s, 4) << " s/step, cv "
          << fixed(100 * state.noise->cv, 2) << " %\n";
    if (state.promotion) {
      if (state.promotion->value("promoted", false))
        out << "  promoted: " << state.promotion->value("change", "") << ", "
            << fixed(state.promotion->value("speedup", 1.0), 3) << "x ["
            << fixed(state.promotion->value("ci_low", 0.0), 3) << ", "
            << fixed(state.promotion->value("ci_high", 0.0), 3) << "]\n";
      else
        out << "  promoted: nothing (" << state.promotion->value("reason", "") << ")\n";
    }
    if (state.report)
      out << "  report:   " << state.report->value("report_md", "") << '\n';
    out << "  events:   " << r.event_count << '\n';
    if (text.rfind("finished", 0) != 0 && text.rfind("running", 0) != 0)
      out << "  resume:   infrarsi tune " << (state.task_path.empty() ? "TASK" : state.task_path)
          << " --store " << store_dir << " --run " << r.run_id << '\n';
  }
  if (runs->empty())
    err << "infrarsi status: no runs in '" << store_dir << "'\n";
  return status;
}

} // namespace infrarsi::runtime
