#include "runtime/cli.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "adapters/environment.hpp"
#include "adapters/preflight.hpp"
#include "adapters/trial_launcher.hpp"
#include "messages/json.hpp"
#include "adapters/task_file.hpp"
#include "runtime/daemon.hpp"
#include "runtime/keys.hpp"
#include "runtime/replay.hpp"
#include "runtime/experience_cmd.hpp"
#include "runtime/report_cmd.hpp"
#include "runtime/store_paths.hpp"
#include "runtime/tune.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/contract_coverage.hpp"

namespace infrarsi::runtime {

using adapters::load_task_file;
using adapters::parse_byte_size;

namespace {

constexpr const char* default_store = default_store_dir;

std::string iso_time(std::int64_t ns) {
  std::time_t secs = static_cast<std::time_t>(ns / 1'000'000'000);
  auto ms = (ns / 1'000'000) % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  std::ostringstream os;
  os << std::put_time(&tm, "%Y-%m-%dT%H:%M:%S") << '.' << std::setw(3) << std::setfill('0') << ms
     << 'Z';
  return os.str();
}

/// Opens DIR (a store directory or its events/ directory) read-only; warns about a torn tail.
caf::expected<std::unique_ptr<store::rocksdb_event_log>>
open_for_reading(const std::string& dir, const char* command, std::ostream& err) {
  if (auto missing = missing_store(dir); !missing.empty())
    return make_error(errc::not_found, missing);
  store::rocksdb_event_log_options opts;
  opts.read_only = true;
  auto events = events_dir_of(dir);
  auto log = store::rocksdb_event_log::open(events, opts);
  if (log)
    warn_if_damaged(**log, events, command, err);
  return log;
}

// -- infrarsi runs ------------------------------------------------------------------------------

int cmd_runs(const std::string& dir, bool json, std::ostream& out, std::ostream& err) {
  auto log = open_for_reading(dir, "infrarsi runs", err);
  if (!log) {
    err << "infrarsi runs: " << describe(log.error()) << '\n';
    return exit_failure;
  }
  auto runs = (*log)->list_runs();
  if (!runs) {
    err << "infrarsi runs: " << describe(runs.error()) << '\n';
    return exit_failure;
  }
  // The counts below are the runs' metadata: each run's events are read back once to show
  // that they are still there and intact.
  int status = exit_ok;
  for (const auto& r : *runs)
    if (auto bad = verify_events(**log, r.run_id, r.event_count)) {
      warn_damaged_run(events_dir_of(dir), r.run_id,
                       ("its " + std::to_string(r.event_count) + " events").c_str(), bad,
                       "infrarsi runs", err);
      status = exit_failure;
    }
  if (json) {
    for (const auto& r : *runs)
      out << nlohmann::json{{"run", r.run_id},
                            {"events", r.event_count},
                            {"first_global_position", r.first_global_position},
                            {"last_global_position", r.last_global_position}}
               .dump()
          << '\n';
    return status;
  }
  if (runs->empty()) {
    err << "infrarsi runs: no runs in event log '" << dir << "'\n";
    return exit_ok;
  }
  std::size_t width = 3;
  for (const auto& r : *runs)
    width = std::max(width, r.run_id.size());
  out << std::left << std::setw(static_cast<int>(width)) << "RUN" << "  " << std::right
      << std::setw(10) << "EVENTS" << "  " << std::setw(12) << "FIRST_POS" << "  "
      << std::setw(12) << "LAST_POS" << '\n';
  for (const auto& r : *runs)
    out << std::left << std::setw(static_cast<int>(width)) << r.run_id << "  " << std::right
        << std::setw(10) << r.event_count << "  " << std::setw(12) << r.first_global_position
        << "  " << std::setw(12) << r.last_global_position << '\n';
  return status;
}

// -- infrarsi log dump --------------------------------------------------------------------------

struct dump_options {
  std::string run;
  std::string store = default_store;
  bool json = false;
  std::uint64_t from = 0;
  std::uint64_t limit = 0; // 0: no limit
};

int cmd_log_dump(const dump_options& o, std::ostream& out, std::ostream& err) {
  if (auto bad = store::validate_run_id(o.run)) {
    err << "infrarsi log dump: " << describe(bad) << '\n';
    return exit_usage;
  }
  auto log = open_for_reading(o.store, "infrarsi log dump", err);
  if (!log) {
    err << "infrarsi log dump: " << describe(log.error()) << '\n';
    return exit_failure;
  }
  auto version = (*log)->version(o.run);
  if (!version) {
    err << "infrarsi log dump: " << describe(version.error()) << '\n';
    return exit_failure;
  }
  if (*version == 0) {
    err << "infrarsi log dump: run '" << o.run << "' not found in event log '" << o.store << "'";
    if (auto runs = (*log)->list_runs(); runs && !runs->empty()) {
      err << " (runs:";
      std::size_t shown = 0;
      for (const auto& r : *runs) {
        if (++shown > 10) {
          err << " ...";
          break;
        }
        err << ' ' << r.run_id;
      }
      err << ')';
    }
    err << '\n';
    return exit_failure;
  }
  std::uint64_t printed = 0;
  std::uint64_t unknown = 0;
  std::uint64_t bad_payloads = 0;
  auto status = (*log)->for_each_in_stream(o.run, o.from, [&](const store::recorded_event& ev) {
    auto payload = messages::event_payload_json(ev.kind, ev.payload);
    if (!ev.known_kind())
      ++unknown;
    if (payload.contains("error"))
      ++bad_payloads;
    if (o.json) {
      out << nlohmann::json{{"run", ev.run_id},
                            {"sequence", ev.sequence},
                            {"global_position", ev.global_position},
                            {"recorded_at", iso_time(ev.recorded_at_ns)},
                            {"kind", messages::event_kind_name(ev.kind)},
                            {"kind_id", ev.kind},
                            {"payload", std::move(payload)}}
               .dump()
          << '\n';
    } else {
      auto kind = ev.known_kind() ? messages::event_kind_name(ev.kind)
                                  : "unknown(" + std::to_string(ev.kind) + ")";
      out << '#' << std::left << std::setw(6) << ev.sequence << " pos " << std::setw(8)
          << ev.global_position << ' ' << iso_time(ev.recorded_at_ns) << "  " << std::setw(17)
          << kind << ' ' << payload.dump() << std::right << '\n';
    }
    ++printed;
    return o.limit == 0 || printed < o.limit;
  });
  err << printed << " event(s) of run '" << o.run << "' (stream version " << *version << ")";
  if (printed == 0 && o.from >= *version)
    err << "; --from " << o.from << " is past the last event (sequence " << *version - 1 << ")";
  if (unknown > 0)
    err << ", " << unknown << " of kinds unknown to this build";
  err << '\n';
  if (status) {
    err << "infrarsi log dump: " << describe(status) << '\n';
    return exit_failure;
  }
  if (bad_payloads > 0) {
    err << "infrarsi log dump: " << bad_payloads << " event payload(s) failed verification\n";
    return exit_failure;
  }
  return exit_ok;
}

// -- infrarsi trial run -------------------------------------------------------------------------

struct trial_run_options {
  std::string task;
  std::vector<std::string> sets;
  std::vector<std::string> patches;
  std::string trial_dir;
  std::uint64_t trial_id = 0;
  double timeout_s = 0;
  std::string memory_cap;
  bool quiet = false;
};

std::atomic<bool> g_stop_requested{false};

extern "C" void on_stop_signal(int) {
  g_stop_requested.store(true);
}

std::string default_trial_dir(const std::string& task_name) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return ".infrarsi/trials/" + task_name + "/" + stamp + "-" + std::to_string(::getpid());
}

int cmd_trial_run(const trial_run_options& o, std::ostream& out, std::ostream& err) {
  auto task = load_task_file(o.task);
  if (!task) {
    err << "infrarsi trial run: " << describe(task.error()) << '\n';
    return exit_failure;
  }
  adapters::trial_request req;
  req.task = &*task;
  for (const auto& set : o.sets) {
    auto eq = set.find('=');
    if (eq == std::string::npos || eq == 0) {
      err << "infrarsi trial run: --set '" << set << "': expected KNOB=VALUE\n";
      return exit_usage;
    }
    auto name = set.substr(0, eq);
    const auto* knob = task->find_knob(name);
    if (knob == nullptr) {
      std::string names;
      for (const auto& k : task->knobs)
        names += (names.empty() ? "" : ", ") + k.name;
      err << "infrarsi trial run: --set " << set << ": task '" << task->name
          << "' has no knob '" << name << "' (knobs: " << names << ")\n";
      return exit_failure;
    }
    std::string why;
    auto value = tuning::parse_knob_text(*knob, set.substr(eq + 1), why);
    if (!value) {
      err << "infrarsi trial run: --set " << set << ": expected " << why << '\n';
      return exit_failure;
    }
    req.knobs[name] = *value;
  }
  req.patches = o.patches;
  req.trial_id = o.trial_id;
  req.timeout_s = o.timeout_s;
  if (!o.memory_cap.empty() && !parse_byte_size(o.memory_cap, req.memory_cap_bytes)) {
    err << "infrarsi trial run: --memory-cap '" << o.memory_cap
        << "': expected a byte count such as 3GiB or 3000000000\n";
    return exit_usage;
  }
  req.trial_dir = o.trial_dir.empty() ? default_trial_dir(task->name) : o.trial_dir;
  req.stop = &g_stop_requested;
  if (!o.quiet)
    req.on_step = [&err](const adapters::step_sample& s) {
      err << "step " << s.step << ": loss " << s.loss << ", " << s.step_time_s << " s";
      if (s.tokens > 0)
        err << ", " << s.tokens << " tokens";
      if (s.warmup)
        err << " (warm-up)";
      err << '\n';
    };
  auto old_int = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  auto report = adapters::run_trial(req);
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  if (!report) {
    err << "infrarsi trial run: " << describe(report.error()) << '\n';
    return exit_failure;
  }
  auto result = messages::to_json(*report->result.get());
  nlohmann::json knobs = nlohmann::json::object();
  if (auto complete = adapters::complete_assignment(*task, req.knobs))
    for (const auto& [k, v] : *complete)
      knobs[k] = tuning::to_string(v);
  nlohmann::json doc = {{"task", task->source},
                        {"trial_dir", std::filesystem::absolute(req.trial_dir).string()},
                        {"workdir", report->workdir},
                        {"world_size", report->world_size},
                        {"argv", report->argv},
                        {"env", report->env},
                        {"env_unset", report->env_unset},
                        {"knobs", knobs},
                        {"patches", req.patches},
                        {"logs", report->log_files},
                        {"descendants", report->descendants},
                        {"result", result}};
  std::ofstream{std::filesystem::path{req.trial_dir} / "result.json"} << doc.dump(2) << '\n';
  out << doc.dump(2) << '\n';
  if (!o.quiet)
    err << "outcome " << result["outcome"].get<std::string>() << ": "
        << result["detail"].get<std::string>() << " (" << result["wall_time_s"].get<double>()
        << " s wall)\n";
  return exit_ok;
}

// -- infrarsi check ------------------------------------------------------------------------------

struct check_options {
  std::string task;
  bool smoke = false;
  double smoke_timeout_s = 60;
  std::uint32_t smoke_lines = 5;
  std::string smoke_dir;
};

/// --smoke, when the task has [smoke]: the smoke launch once, unpatched, to its end (it is what
/// the smoke probe runs twice before an untested patch's trial: docs/node-runner.md "Smoke
/// probe"). 0 when it ends ok and keeps its own work checks (tuning::smoke_own_violation: steps,
/// tokens, declared work, a finite loss), 1 otherwise. A launch whose loss does not fall
/// (tuning::smoke_vacuous) is a warning, not an error: "smoke: vacuous: REASON" instead of the
/// ok line, still 0 (every probe would be vacuous and the full launches judge the patches; the
/// task runs).
int check_smoke_launch(const tuning::task_spec& task, const std::string& dir, std::ostream& out,
                       std::ostream& err) {
  const auto small = tuning::smoke_task(task);
  adapters::trial_request req;
  req.task = &small;
  req.trial_dir = dir;
  req.timeout_s = task.smoke->timeout_s > 0 ? task.smoke->timeout_s : task.limits.timeout_s;
  out << "smoke: the [smoke] launch once, unpatched (" << small.contract.steps
      << " steps, timeout " << req.timeout_s << " s), logs in " << dir << '\n';
  out.flush();
  auto report = adapters::run_trial(req);
  if (!report) {
    err << "infrarsi check --smoke: [smoke]: " << describe(report.error()) << '\n';
    return exit_failure;
  }
  tuning::trial_record run;
  store::apply_result(run, *report->result);
  if (run.outcome != tuning::trial_outcome::ok) {
    err << "infrarsi check --smoke: " << task.source << ": [smoke]: the smoke launch ended "
        << tuning::to_string(run.outcome) << ": " << run.detail << " (logs: " << dir
        << "); every smoke probe would be inconclusive\n";
    return exit_failure;
  }
  if (auto v = tuning::smoke_own_violation(small.contract, run)) {
    err << "infrarsi check --smoke: " << task.source << ": [smoke]: the smoke launch breaks its "
        << "own contract: " << *v << " (logs: " << dir << ")\n";
    return exit_failure;
  }
  if (auto why = tuning::smoke_vacuous(small.contract, run)) {
    out << "smoke: vacuous: " << *why << " (logs: " << dir << "); every smoke probe would be "
        << "vacuous: one launch each that judges no patch's numerics, the full launches judge "
        << "them; fix [smoke] so that its loss falls over its steps\n";
    return exit_ok;
  }
  out << "smoke: the [smoke] launch ran " << run.steps.size() << " step(s) and keeps its work "
      << "checks (" << tuning::to_string(run.outcome) << ")\n";
  return exit_ok;
}

/// --smoke: the baseline configuration once, as a trial runs it, stopped after the first
/// `smoke_lines` metric lines or `smoke_timeout_s`. 0 when a metric line was parsed (or it ended
/// ok), 1 otherwise (the outcome and its cause, with the stderr tail, on `err`).
int check_smoke(const tuning::task_spec& task, const check_options& o, std::ostream& out,
                std::ostream& err) {
  std::string dir = o.smoke_dir;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string{tmp != nullptr && *tmp != '\0' ? tmp : "/tmp"}
                          + "/infrarsi-smoke-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) {
      err << "infrarsi check --smoke: cannot create a directory from '" << pattern
          << "': " << std::strerror(errno) << '\n';
      return exit_failure;
    }
    dir = buf.data();
  }
  std::atomic<bool> stop{false};
  std::uint32_t shown = 0;
  adapters::trial_request req;
  req.task = &task;
  req.trial_dir = dir;
  req.timeout_s = task.limits.timeout_s > 0 ? std::min(task.limits.timeout_s, o.smoke_timeout_s)
                                            : o.smoke_timeout_s;
  req.stop = &stop;
  out << "\nsmoke: the baseline configuration once (timeout " << req.timeout_s
      << " s, stopped after " << o.smoke_lines << " metric lines), logs in " << dir << '\n';
  out.flush();
  req.on_step = [&](const adapters::step_sample& s) {
    if (shown >= o.smoke_lines)
      return;
    ++shown;
    out << "  step " << s.step << ": loss " << s.loss << ", " << s.step_time_s << " s";
    if (s.tokens > 0)
      out << ", " << s.tokens << " tokens";
    if (s.warmup)
      out << " (warm-up)";
    out << '\n';
    out.flush();
    if (shown >= o.smoke_lines)
      stop = true;
  };
  auto report = adapters::run_trial(req);
  if (!report) {
    err << "infrarsi check --smoke: " << describe(report.error()) << '\n';
    return exit_failure;
  }
  const auto& r = *report->result.get();
  auto outcome = messages::to_json(r).value("outcome", std::string{"?"});
  std::string detail = r.detail() != nullptr ? r.detail()->str() : std::string{};
  if (shown > 0 || r.outcome() == wire::Outcome::Ok) {
    out << "smoke: " << shown << " metric line(s) parsed"
        << (stop.load() ? " (stopped there)" : ", outcome " + outcome) << '\n';
    return task.smoke ? check_smoke_launch(task, dir + "/smoke-launch", out, err) : exit_ok;
  }
  err << "infrarsi check --smoke: the baseline printed no metric line the task's metrics "
         "spec parses; outcome "
      << outcome << ": " << detail << " (logs: " << dir << ")\n";
  return exit_failure;
}

int cmd_check(const check_options& o, std::ostream& out, std::ostream& err) {
  const auto& path = o.task;
  auto task = load_task_file(path);
  if (!task) {
    err << "infrarsi check: " << describe(task.error()) << '\n';
    return exit_failure;
  }
  out << "task '" << task->name << "' (" << task->source << ") loads: " << task->knobs.size()
      << " knob(s), " << task->patches.size() << " patch(es), metrics format "
      << (task->metrics.format == tuning::metrics_spec::format_kind::regex ? "regex"
                                                                          : "json_lines")
      << "\n";
  auto coverage = tuning::contract_coverage(*task);
  auto section = [&](const char* title, auto keep) {
    bool any = false;
    for (const auto& c : coverage)
      if (keep(c.status)) {
        if (!any)
          out << '\n' << title << '\n';
        any = true;
        out << "  " << c.code;
        if (c.status != tuning::check_status::observed && c.status != tuning::check_status::off)
          out << " [" << tuning::to_string(c.status) << "]";
        out << ": " << c.evidence << '\n';
      }
    return any;
  };
  using tuning::check_status;
  section("observed (a trial's output can fail them):",
          [](check_status st) { return st == check_status::observed; });
  bool vacuous = section("cannot be decided by the output (vacuous: cannot fail; partial: only "
                         "part observed; fails_always: cannot pass):",
                         [](check_status st) {
                           return st == check_status::vacuous || st == check_status::partial
                                  || st == check_status::fails_always;
                         });
  section("not checked (the contract does not ask, or the task waives it):",
          [](check_status st) { return st == check_status::off; });
  auto enforced = tuning::work_enforced_by(*task);
  out << "\nthe contracted work is enforced by the task's constraints and constants"
      << (vacuous ? " (where the output cannot show it):" : ":") << '\n';
  if (enforced.empty())
    out << "  nothing: the task has no constraints and no constants\n";
  for (const auto& e : enforced)
    out << "  " << e << '\n';
  auto problems = adapters::preflight(*task);
  if (!problems.empty()) {
    for (const auto& p : problems)
      err << "infrarsi check: " << adapters::to_string(p) << '\n';
    err << "infrarsi check: " << problems.size()
        << " pre-flight problem(s): every trial of this task would fail before it starts; "
           "`infrarsi tune` refuses it\n";
    return exit_failure;
  }
  out << "\npre-flight: no problem found (every placeholder names a knob, constant or built-in; "
         "the program resolves and is executable; "
      << (task->patches.empty() ? std::string{"no patches"}
                                : std::to_string(task->patches.size())
                                    + " patch(es) apply alone to the workload")
      << ")\n";
  // A patch outside the editable scope is not an error (a task may list one on purpose, as the
  // planted-cheat tasks do): init excludes it from the search (decide::excluded_patches). Say so
  // here, before any run.
  for (const auto& p : task->patches)
    if (auto violation = adapters::patch_scope_violation(*task, p.name); !violation.empty())
      out << "warning: " << task->source << ": patches '" << p.name
          << "' will be excluded at init and never run: " << violation << '\n';
  if (o.smoke)
    return check_smoke(*task, o, out, err);
  return exit_ok;
}

} // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"infrarsi — verified tuning of distributed LLM training jobs.\n"
               "Searches launch settings and code patches, rejects every speedup that did less "
               "work or drifted numerically, and records every step in an event log.",
               "infrarsi"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string{"infrarsi "} + "0.1.0");
  app.footer("Exit status: 0 success, 1 the command failed, 2 bad command line.\n"
             "Run 'infrarsi SUBCOMMAND --help' for the options of each subcommand.");

  std::string runs_store = default_store;
  bool runs_json = false;
  auto* runs = app.add_subcommand(
    "runs", "List the runs in an event log with their event counts. Every counted event is read "
            "back with its checksums verified: a run whose events do not verify gets a warning "
            "naming the store and the first bad position, and the exit status is 1");
  runs->add_option("--store", runs_store,
                   "Store directory (what `infrarsi tune` writes; its events/ directory works "
                   "too)")
    ->capture_default_str();
  runs->add_flag("--json", runs_json,
                 "One JSON object per line: run, events, first_global_position, "
                 "last_global_position");

  auto* log = app.add_subcommand("log", "Inspect an event log");
  log->require_subcommand(1);
  dump_options dump;
  auto* dump_cmd = log->add_subcommand(
    "dump", "Print every event of one run, one line each, in stream order.\n"
            "Readable: #SEQUENCE pos GLOBAL_POSITION TIME KIND PAYLOAD-JSON.\n"
            "A summary line goes to stderr.");
  dump_cmd->add_option("RUN", dump.run, "Run id (see 'infrarsi runs')")->required();
  dump_cmd->add_option("--store", dump.store,
                       "Store directory (what `infrarsi tune` writes; its events/ directory "
                       "works too)")
    ->capture_default_str();
  dump_cmd->add_flag("--json", dump.json,
                     "JSON lines: run, sequence, global_position, recorded_at, kind, kind_id, "
                     "payload");
  dump_cmd->add_option("--from", dump.from, "First stream sequence to print")
    ->capture_default_str()
    ->check(CLI::Range(std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max() / 2));
  dump_cmd->add_option("--limit", dump.limit, "Print at most N events (0: all)")
    ->capture_default_str()
    ->check(CLI::Range(std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max() / 2));

  auto* trial = app.add_subcommand("trial", "Run single trials of a task");
  trial->require_subcommand(1);
  trial_run_options tr;
  auto* trial_run = trial->add_subcommand(
    "run", "Run one trial of TASK and print its result as JSON (stdout).\n"
           "Progress (one line per step) and the outcome go to stderr. Rank logs (written "
           "as read), result.json and descendants.txt (how the trial's descendants were "
           "tracked: cgroup v2 or /proc walk) are kept in the trial directory.\n"
           "Exit status 0 whatever the trial's outcome (ok, oom, crash, timeout, launch_error, "
           "preempted, contract_violation: a constraint broken or a scope breach, never "
           "launched); non-zero only when infrarsi itself could not run it.");
  trial_run->add_option("TASK", tr.task, "Task file (TOML; docs/task-contract.md)")->required();
  trial_run->add_option("--set", tr.sets, "Knob value KNOB=VALUE (repeatable); others default")
    ->type_name("KNOB=VALUE");
  trial_run->add_option("--patch", tr.patches,
                        "Apply the task's patch NAME (repeatable, in order) in a copy of the "
                        "workload")
    ->type_name("NAME");
  trial_run->add_option("--trial-dir", tr.trial_dir,
                        "Directory for logs and result.json (default "
                        ".infrarsi/trials/TASK/TIME-PID)");
  trial_run->add_option("--trial-id", tr.trial_id, "Trial id recorded in the result")
    ->capture_default_str();
  trial_run->add_option("--timeout", tr.timeout_s,
                        "Wall-clock limit in seconds (default: the task's limits.timeout_s)")
    ->check(CLI::NonNegativeNumber);
  trial_run->add_option("--memory-cap", tr.memory_cap,
                        "Per-rank memory cap, e.g. 3GiB (default: limits.memory_cap_bytes)");
  trial_run->add_flag("--quiet", tr.quiet, "No progress lines on stderr");

  tune_options tune;
  std::uint64_t tune_seed = 0;
  auto* tune_cmd = app.add_subcommand(
    "tune", "Run all five stages on TASK: init (lock scope and contract), doctor (baseline "
            "and noise), run (search, verify, re-verify, promote), report, apply.\n"
            "Before anything is created, the pre-flight checks of `infrarsi check` run (and "
            "the store must be writable): a problem exits 1 naming FILE:LINE:COLUMN, key and "
            "value, with no run in the store.\n"
            "Progress on stderr: a header per stage with its counts, one short line per trial "
            "(id, purpose, outcome, s/step, speedup over the baseline, best so far, elapsed, "
            "ETA from the budget, search progress, change; at most ~120 characters, the long "
            "reason with --verbose) and, on a terminal, a live status line. The summary on "
            "stdout. The event log, experience bank, trial logs and report live under the "
            "store directory.\n"
            "A task with an [llm] table asks that OpenAI-compatible endpoint for priors and "
            "code patches at init (and again during the search with llm.rounds_every / "
            "llm.rounds_on_stall); proposed diffs that pass every check are searched and "
            "verified like the task's [[patches]]; an llm.api_key_env naming an unset variable "
            "is a pre-flight problem (docs/llm.md).\n"
            "--nodes N runs N node-runners (each behind its own ZeroMQ endpoint) and keeps N "
            "trials in flight; give each slot its share of the machine with --slot-env and "
            "--slot-cpus (docs/tune.md \"Node slots\").\n"
            "Ctrl-C or SIGTERM stops dispatching, ends every running trial's processes, logs the "
            "interruption and exits 130 / 143; resume with --run. A second signal exits at once.\n"
            "Exit status: 0 the run finished (whatever it promoted), 1 it could not run, 2 bad "
            "command line, 130 / 143 interrupted.");
  tune_cmd->add_option("TASK", tune.task_path, "Task file (TOML; docs/task-contract.md)")
    ->required();
  tune.store_dir = default_store_dir;
  tune_cmd->add_option("--store", tune.store_dir,
                       "Store directory: event log, experience bank, runs/RUN/ (report, trial "
                       "logs); the default of status, runs and log dump too")
    ->capture_default_str();
  auto* seed_opt = tune_cmd->add_option("--seed", tune_seed, "Seed (default: the task's budget.seed)");
  std::uint32_t tune_trials = 0;
  auto* trials_opt = tune_cmd->add_option(
    "--trials", tune_trials,
    "Search trials (default: the task's budget.trials; on --run, the budget the run started with)");
  tune_cmd
    ->add_option("--experience", tune.experience,
                 "What the store's experience bank serves a new run as seeds: filtered (findings "
                 "for the same model and parallel layout, the same GPU model first, then the same "
                 "GPU family and memory class, then other hardware), all (every finding, by "
                 "verified speedup; those that do not fit the task are listed as refused) or none "
                 "(a cold start). Decided at init: a resumed run keeps its seeds. Default "
                 "filtered (docs/experience.md)")
    ->check(CLI::IsMember({"filtered", "all", "none"}))
    ->capture_default_str();
  tune_cmd->add_option("--run", tune.run_id, "Continue this run id instead of starting a new one");
  tune_cmd->add_option("--nodes", tune.nodes,
                       "Node slots: trials in flight at a time, one node-runner each (default 1)")
    ->check(CLI::Range(1, 256));
  tune_cmd->add_option("--slot-env", tune.slot_env,
                       "Environment of one node slot, K=V with ';' between variables (repeat "
                       "once per slot, in slot order), e.g. --slot-env 'CUDA_VISIBLE_DEVICES=0,1' "
                       "--slot-env 'CUDA_VISIBLE_DEVICES=2,3'");
  tune_cmd->add_option("--slot-cpus", tune.slot_cpus,
                       "CPU cores of one node slot for taskset -c, e.g. 0-1 (repeat once per slot)");
  std::string tune_reserve;
  tune_cmd->add_option("--disk-reserve", tune_reserve,
                       "Bytes that must stay free in the store and trial directories, e.g. "
                       "256MiB (default 64MiB; 0: no check). Checked before the store is opened, "
                       "before every stage and every trial: below it the run stops with status 1 "
                       "naming the directory, the free bytes and the reserve; free space and "
                       "resume with --run. A trial whose directory could not be written for lack "
                       "of space is logged lost, not counted, and re-queued on resume");
  tune_cmd->add_option("--until", tune.until, "Stop after this stage")
    ->check(CLI::IsMember({"init", "doctor", "run", "report", "apply"}))
    ->capture_default_str();
  tune_cmd->add_option("--knowledge", tune.knowledge_dir,
                       "Offline priors directory (default: config/knowledge beside the task's "
                       "directory); a directory that does not exist or a file in it that does "
                       "not parse is an error");
  auto* quiet_flag = tune_cmd->add_flag(
    "--quiet", tune.quiet, "No progress lines: only errors and their causes (and the summary)");
  tune_cmd
    ->add_flag("--verbose", tune.verbose,
               "The long reasons too: each trial's violations or failure detail (its stderr "
               "tail), the planner's reason for each proposal; lines are not shortened")
    ->excludes(quiet_flag);
  tune_cmd->add_option("--keep-trial-copies", tune.keep_trial_copies,
                       "Ended trials that keep their copy of the workload besides the first "
                       "baseline, the candidates and the promoted trial; older copies are removed "
                       "after every verdict, their logs kept (docs/tune.md \"Trial directories\")")
    ->check(CLI::Range(0, 1000000))
    ->capture_default_str();
  tune_cmd->add_option("--trace-appends", tune.trace_appends,
                       "Append 'SEQUENCE KIND' to this file after every event the log acknowledged "
                       "(an audit aid: the crash test checks that each survives a kill -9)");

  replay_options replay;
  auto* replay_cmd = app.add_subcommand(
    "replay", "Audit a run: fold its events and recompute every decision (proposals, verdicts, "
              "calibration, re-verifications, promotion) from the events before it, byte-compared "
              "with what was logged. Launches nothing, calls no LLM, contacts no peer. Exit status: "
              "0 every decision reproduced, 1 a divergence (printed with both versions), 3 the "
              "replay could not be made (no such run, damaged log, task file missing; 2 stays a "
              "bad command line)");
  replay_cmd->add_option("RUN", replay.run_id, "Run id (infrarsi status / infrarsi runs)")->required();
  replay.store_dir = default_store_dir;
  replay_cmd->add_option("--store", replay.store_dir,
                         "Store directory (the one infrarsi tune used, or its events/ directory)")
    ->capture_default_str();
  replay_cmd->add_option("--task", replay.task_path,
                         "Task file, only for runs logged before the task text was (default: the "
                         "task logged at init; for older runs the path the run recorded)");

  report_options report;
  auto* report_cmd = app.add_subcommand(
    "report", "Regenerate a run's report from its event log alone (no task file: the task is "
              "read from the log) with the same function as tune's report stage: report.json "
              "(every figure), report.md and report.html (one self-contained page with charts: "
              "speedup by trial with the noise band, per-setting effects prior vs revised, "
              "memory prices and the OOM boundary, failed device-seconds, predicted vs measured "
              "speedups, the promoted change and its parts, the top configurations; Chart.js from "
              "libjs-chart.js is inlined, the page opens offline). Prints each path written.\n"
              "Exit status: 0 written, 1 it could not be (no such run, damaged log, Chart.js "
              "missing for html, a file not writable), 2 bad command line.");
  report_cmd->add_option("RUN", report.run_id, "Run id (infrarsi status / infrarsi runs)")
    ->required();
  report.store_dir = default_store_dir;
  report_cmd->add_option("--store", report.store_dir,
                         "Store directory (the one infrarsi tune used, or its events/ directory)")
    ->capture_default_str();
  report_cmd->add_option("--format", report.format,
                         "Which file to write: html, md, json, or all of them")
    ->check(CLI::IsMember({"all", "html", "md", "json"}))
    ->capture_default_str();
  report_cmd->add_option("--out", report.out_dir,
                         "Directory for the files (default: STORE/runs/RUN, beside the run's "
                         "trials)");
  report_cmd->add_option("--task", report.task_path,
                         "Task file, only for runs logged before the task text was (default: the "
                         "task logged at init; for older runs the path the run recorded)");

  // -- the daemon across machines (docs/daemon.md) ----------------------------------------------
  std::string daemon_config_path;
  auto* daemon_cmd = app.add_subcommand(
    "daemon", "The long-running tuning service: one store it alone writes, node-runners on other "
              "machines (infrarsi node --connect), tasks from `infrarsi submit` and a watched "
              "directory, several runs at once over the shared node pool; every unfinished run "
              "is resumed at start. SIGTERM or Ctrl-C drains: nothing new is dispatched, trials "
              "in flight finish within daemon.drain_grace_s, then it exits 0 (docs/daemon.md).\n"
              "With [dashboard] enabled = true it also serves a read-only live dashboard over "
              "HTTP (runs, stages, search trials done/budget, best speedups, nodes with their last "
              "heartbeat and current trials, each run's report) on 127.0.0.1:5580 by default; "
              "bound to any other address it requires a token (dashboard.token_file or "
              "dashboard.token_env) and refuses to start without one. It prints "
              "`dashboard http://...` on stdout.\n"
              "An [llm] table is the llm-proposer of every submitted task without one "
              "(docs/llm.md); its api_key_env must name a variable set in the daemon's "
              "environment, else the daemon does not start.\n"
              "Exit status: 0 drained, 1 it could not start (the message names the config file, "
              "key and value, or the endpoint), 2 bad command line.");
  daemon_cmd->add_option("--config", daemon_config_path,
                         "Daemon config (TOML; config/daemon.toml is a commented example)");
  client_options daemon_client;
  bool daemon_status_json = false;
  auto* daemon_status_cmd = daemon_cmd->add_subcommand(
    "status", "Ask a running daemon for its runs, nodes (slots busy, trials assigned) and trials "
              "in flight. Exit status: 0 answered, 1 no answer within --timeout.");
  daemon_status_cmd->add_option("--daemon", daemon_client.endpoint,
                                "The daemon's client endpoint, e.g. tcp://head:5556")
    ->required();
  daemon_status_cmd->add_option("--server-key", daemon_client.server_key,
                                "The daemon's public key file (NAME.pub), for CURVE");
  daemon_status_cmd->add_option("--key", daemon_client.key,
                                "This client's key file (NAME.key), for CURVE");
  daemon_status_cmd->add_option("--timeout", daemon_client.timeout_s, "Seconds to wait")
    ->capture_default_str();
  daemon_status_cmd->add_flag("--json", daemon_status_json, "Print the status document as JSON");

  client_options submit_client;
  std::string submit_task;
  std::uint64_t submit_seed = 0;
  std::uint32_t submit_trials = 0;
  std::uint32_t submit_max_slots = 0;
  std::string submit_experience = "filtered";
  auto* submit_cmd = app.add_subcommand(
    "submit", "Send TASK to a running daemon, which starts a run of it over its node pool. The "
              "task is loaded here first (errors name FILE:LINE:COLUMN before anything is sent) "
              "and travels with the SHA-256 of every editable and frozen file: the daemon refuses "
              "it when its own view of those files differs. Prints the run id.\n"
              "Exit status: 0 accepted, 1 refused or no answer, 2 bad command line.");
  submit_cmd->add_option("TASK", submit_task, "Task file (TOML; docs/task-contract.md)")
    ->required();
  submit_cmd->add_option("--daemon", submit_client.endpoint,
                         "The daemon's client endpoint, e.g. tcp://head:5556")
    ->required();
  auto* submit_seed_opt =
    submit_cmd->add_option("--seed", submit_seed, "Seed (default: the task's budget.seed)");
  auto* submit_trials_opt =
    submit_cmd->add_option("--trials", submit_trials, "Search trials (default: budget.trials)");
  submit_cmd->add_option("--max-slots", submit_max_slots,
                         "Most trials of this run in flight (default 0: its fair share)");
  submit_cmd
    ->add_option("--experience", submit_experience,
                 "What the daemon's experience bank serves the run as seeds, as `tune "
                 "--experience`: filtered (same model and parallel layout, similar hardware "
                 "first), all or none (docs/experience.md)")
    ->check(CLI::IsMember({"filtered", "all", "none"}))
    ->capture_default_str();
  submit_cmd->add_option("--server-key", submit_client.server_key,
                         "The daemon's public key file (NAME.pub), for CURVE");
  submit_cmd->add_option("--key", submit_client.key, "This client's key file (NAME.key), for CURVE");
  submit_cmd->add_option("--timeout", submit_client.timeout_s, "Seconds to wait")
    ->capture_default_str();

  node_options node;
  std::string node_reserve;
  auto* node_cmd = app.add_subcommand(
    "node", "A node-runner on this machine: connects to the daemon's node endpoint, says hello "
            "with its hardware and slots, heartbeats every second (a daemon silent for 3 is "
            "gone: reconnect with back-off 1 s doubling to 32 s) and runs the trials the daemon "
            "assigns with the same launcher, caps, timeouts and classification as `infrarsi "
            "tune`. A trial whose locked files differ here is refused, never run. SIGTERM or "
            "Ctrl-C stops the running trials and exits 0 (docs/daemon.md).\n"
            "Exit status: 0 stopped by a signal, 1 refused by the daemon or bad keys, 2 bad "
            "command line.");
  node_cmd->add_option("--connect", node.connect, "The daemon's node endpoint, e.g. tcp://head:5555")
    ->required();
  node_cmd->add_option("--workdir", node.workdir, "Trial directories go under DIR/runs/<run>/trials")
    ->required();
  node_cmd->add_option("--name", node.name, "Node name in the pool (default: the host name)");
  node_cmd->add_option("--slots", node.slots, "Trials this node runs at once")
    ->capture_default_str()
    ->check(CLI::Range(1u, 4096u));
  node_cmd->add_option("--slot-env", node.slot_env,
                       "Per slot: environment entries 'K=V;K2=V2' (e.g. "
                       "'CUDA_VISIBLE_DEVICES=0,1'); repeat once per slot");
  node_cmd->add_option("--slot-cpus", node.slot_cpus,
                       "Per slot: CPU list its ranks run under (taskset -c); repeat once per slot");
  node_cmd->add_option("--server-key", node.server_key,
                       "The daemon's public key file (NAME.pub), for CURVE");
  node_cmd->add_option("--key", node.key, "This node's key file (NAME.key), for CURVE");
  node_cmd->add_option("--heartbeat-ms", node.heartbeat_ms, "Heartbeat interval")
    ->capture_default_str()
    ->check(CLI::Range(10, 60000));
  node_cmd->add_option("--disk-reserve", node_reserve,
                       "Bytes that must stay free under --workdir before a trial (e.g. 1GiB)");

  check_options check;
  auto* check_cmd = app.add_subcommand(
    "check", "Load TASK, run the pre-flight checks, and say which contract checks its output "
             "can decide. Creates no run and writes nothing (--smoke: only its trial "
             "directory).\n"
             "Pre-flight (the same checks `infrarsi tune` runs before it creates a run): every "
             "{placeholder} of workload.argv, env, world_size, srun_args, torchrun_args names a "
             "knob, a constant or a built-in; the program (argv[0]) resolves (relative to "
             "workload.workdir, or on PATH) and is executable; every patch applies alone to the "
             "workload (git apply --check); and, when the file loads, its constraints parse, "
             "name knobs and constants and hold for the defaults, and the metrics regex "
             "compiles and has a step field. Each problem is printed as FILE:LINE:COLUMN: KEY: "
             "what is wrong, naming the value.\n"
             "Then each check of the verifier (steps, tokens, global_batch, params, layers, "
             "loss, timed_window, step_times, clock) as observed (a trial's output can fail "
             "it), vacuous (the contract names it but the output cannot fail it, e.g. tokens "
             "from a regex without a tokens field: the task's tokens_per_step compared with "
             "itself), partial, fails_always (no trial can pass it) or not checked, and what "
             "enforces the work instead: the task's constraints and constants "
             "(docs/task-contract.md \"What a task's output can show\").\n"
             "Exit status: 0 the task loads and passes the pre-flight (and --smoke parsed a "
             "metric line), 1 it does not (every problem named), 2 bad command line.");
  check_cmd->add_option("TASK", check.task, "Task file (TOML; docs/task-contract.md)")->required();
  check_cmd->add_flag("--smoke", check.smoke,
                      "Also run the baseline configuration once, as a trial (no patches), and "
                      "print the first metric lines it parsed; it is stopped after "
                      "--smoke-lines lines or --smoke-timeout seconds. A task with a [smoke] "
                      "launch (the probe of untested patches, docs/node-runner.md) then runs "
                      "that launch once to its end and checks its work");
  check_cmd->add_option("--smoke-timeout", check.smoke_timeout_s,
                        "Seconds the smoke run may take (at most the task's limits.timeout_s)")
    ->check(CLI::Range(0.1, 86400.0))
    ->capture_default_str();
  check_cmd->add_option("--smoke-lines", check.smoke_lines,
                        "Metric lines the smoke run shows before it is stopped")
    ->check(CLI::Range(1u, 1000000u))
    ->capture_default_str();
  check_cmd->add_option("--smoke-dir", check.smoke_dir,
                        "Trial directory of the smoke run, kept with its logs (default: a new "
                        "$TMPDIR/infrarsi-smoke-XXXXXX)");

  std::string status_store = default_store_dir;
  auto* status_cmd = app.add_subcommand(
    "status", "Show every run of a store as a block of lines (from the run's snapshot and the "
              "events after it): its state (finished; running, with the pid holding the store; "
              "failed in stage doctor, with the cause; interrupted; stopped in a stage; stopped "
              "after --until), task, stages, trials by outcome, baseline, promotion, report, "
              "events, and the command that resumes a run that did not finish "
              "(docs/tune.md \"Status\"). The events a snapshot covers are read back with their "
              "checksums verified: a run whose events do not verify gets a warning naming the "
              "store and the first bad position, and the exit status is 1 (also when there is "
              "no store)");
  status_cmd->add_option("--store", status_store,
                         "Store directory (what `infrarsi tune` writes; its events/ directory "
                         "works too)")
    ->capture_default_str();
  client_options status_client;
  status_cmd->add_option("--daemon", status_client.endpoint,
                         "Ask the daemon at this client endpoint instead (as `daemon status`)");
  status_cmd->add_option("--server-key", status_client.server_key,
                         "With --daemon: the daemon's public key file, for CURVE");
  status_cmd->add_option("--key", status_client.key,
                         "With --daemon: this client's key file, for CURVE");

  auto* keys_cmd = app.add_subcommand(
    "keys", "CURVE key pairs of the daemon, its node-runners and clients (ZeroMQ CURVE: the "
            "traffic is encrypted, the server proves its key, and the daemon admits only the "
            "public keys on its allow-list; docs/security.md)");
  keys_cmd->require_subcommand(1);
  keys_generate_options keys_gen;
  auto* keys_gen_cmd = keys_cmd->add_subcommand(
    "generate", "Generate a key pair and write DIR/NAME.key (public and secret key, mode 0600) "
                "and DIR/NAME.pub (the public key only, to copy into the allow-list directory "
                "of the daemon that should admit this peer).\n"
                "Prints the public key and both paths on stdout; the secret key is never "
                "printed. Existing files are not replaced without --force.\n"
                "Exit status: 0 written, 1 not written (the files exist, the directory cannot "
                "be written), 2 bad command line (e.g. a --name with other characters than "
                "letters, digits, '.', '_', '-').");
  keys_gen_cmd->add_option("--out", keys_gen.out_dir,
                           "Directory for the files (created with mode 0700 when missing)")
    ->required();
  keys_gen_cmd->add_option("--name", keys_gen.name,
                           "Base name of the files (default: this host's name, currently '"
                             + default_key_name() + "')");
  keys_gen_cmd->add_flag("--force", keys_gen.force,
                         "Replace an existing key pair of that name (peers holding the old "
                         "public key are refused until they get the new one)");
  std::string keys_show_path;
  auto* keys_show_cmd = keys_cmd->add_subcommand(
    "show-public", "Print the public key of FILE: a NAME.key file (refused when group or "
                   "others can read it; its key pair is checked) or a NAME.pub file.\n"
                   "Exit status: 0 printed, 1 the file is missing or invalid (the message names "
                   "it and what was expected), 2 bad command line.");
  keys_show_cmd->add_option("FILE", keys_show_path, "A NAME.key or NAME.pub file")->required();

  // -- the experience bank (docs/experience.md) ----------------------------------------------
  auto* experience_cmd = app.add_subcommand(
    "experience",
    "The store's experience bank: verified findings (the promoted configuration, its verified "
    "speedup and 95% interval, hardware fingerprint, workload signature, and provenance: the "
    "origin cluster and its log position). Each finding is an ExperienceRecorded event of the "
    "event log, or an ExperienceImported event of a signed pack from another cluster; the bank "
    "(STORE/experience) is an index derived from the log that catches up on every open, so "
    "deleting it loses nothing. The store's cluster identity (Ed25519 key STORE/cluster.key, "
    "mode 0600) is created on first use (docs/experience.md)");
  experience_cmd->require_subcommand(1);
  experience_options experience;
  experience.store_dir = default_store_dir;
  std::vector<CLI::App*> experience_cmds;
  const std::string experience_exit =
    ".\nExit status: 0 done, 1 it could not be (no event log; the bank held by a running tune "
    "or daemon; an I/O error), 2 bad command line.";
  for (const auto& [name, what] : std::vector<std::pair<std::string, std::string>>{
         {"list", "Print every record: hardware, workload, speedup and its 95% interval, "
                  "provenance (local: run and global log position; imported: origin cluster "
                  "and its log position) and the change from the baseline; then the record "
                  "count per hardware and workload (local, imported), this store's cluster id, "
                  "the record count, the log position read and the bank's hash"},
         {"rebuild", "Delete the bank's index and fold it again from the event log; print the "
                     "record count, the log position read and the hash (identical to the "
                     "hash before when the log is the same)"},
         {"hash", "Print the bank's content hash: SHA-256 (hex) of its records in key order "
                  "(hardware, workload, origin cluster, origin position). Imported records hold "
                  "no local position, so the order and repetition of imports do not change it"},
         {"identity", "Print this store's cluster id, Ed25519 public key (hex) and key files "
                      "(STORE/cluster.key, mode 0600, and STORE/cluster.pub; created when "
                      "missing), and the trust entry other stores add to accept its packs. The "
                      "secret is never printed"},
         {"export", "Write a signed experience pack (FlatBuffers, file identifier IRXP, "
                    "store/FORMAT.md): the bank's findings, this store's own from --since on and "
                    "every imported one, each with its origin cluster and origin log position, "
                    "signed with this store's Ed25519 key (STORE/cluster.key)"},
         {"import", "Verify the signed experience pack PACK (file identifier, FlatBuffers "
                    "verifier, Ed25519 signature, signer in the trust list or this store's own "
                    "cluster) and append the findings this store lacks (by origin cluster and "
                    "origin position) to the event log's stream experience-imported, in one "
                    "atomic batch; then the bank folds them. Idempotent and commutative: the "
                    "bank hash after importing A and B is the same in any order and with "
                    "repeats. A refused pack (not a pack, truncated, unsigned, signature does "
                    "not verify, signer not trusted) appends nothing and exits 1 naming the "
                    "file and the reason. Needs the store's writer lock (not beside a running "
                    "tune or daemon)"},
         {"sync", "Pull the findings this side lacks from a peer daemon over ZeroMQ (its client "
                  "socket; CURVE with --server-key and --key): the peer answers a pack signed "
                  "by its cluster key of every finding (its own and those it imported) whose "
                  "origin and position were not listed; it is verified and imported as by "
                  "`import` (the signer must be in the trust list). Two forms: --daemon EP "
                  "asks a running daemon to pull now from its configured [[experience.peers]] "
                  "(all, or the one --peer names); --store DIR --peer EP pulls into a store no "
                  "daemon or tune holds. Prints per peer what was pulled, offered and already "
                  "present, and the bank's record count and hash; a repeated sync pulls 0"}}) {
    auto* sub = experience_cmd->add_subcommand(
      name, what
              + (name == "sync"
                   ? ".\nExit status: 0 synced (or nothing new), 1 a peer could not be reached "
                     "or its pack was refused (the message names the peer and why), 2 bad "
                     "command line."
                 : name == "import"
                   ? ".\nExit status: 0 imported (or nothing new), 1 the pack was refused (the "
                     "message names the file and why) or it could not be (the store held by a "
                     "running tune or daemon; a bad trust list; an I/O error), 2 bad command "
                     "line."
                   : experience_exit));
    sub->add_option("--store", experience.store_dir,
                    "Store directory (the one infrarsi tune used: events/, experience/, "
                    "cluster.key)")
      ->capture_default_str();
    if (name == "list")
      sub->add_flag("--json", experience.json, "One JSON object per record instead of the table");
    if (name == "export") {
      sub->add_option("--since", experience.since,
                      "Lowest global log position of this store's own findings to include "
                      "(default 0: all); imported findings are always included");
      sub->add_option("--out", experience.out_file,
                      "Pack file to write (mode 0644, replaced whole); default: standard "
                      "output (the summary then goes to standard error)");
    }
    if (name == "sync") {
      sub->add_option("--daemon", experience.daemon.endpoint,
                      "A running daemon's client endpoint: it pulls from its configured peers "
                      "(docs/experience.md, \"Sync between daemons\")");
      sub->add_option("--peer", experience.peer,
                      "With --daemon: the name (or endpoint) of one configured peer (default: "
                      "every peer). With --store: the peer daemon's client endpoint, e.g. "
                      "tcp://lab-b:5556");
      sub->add_option("--server-key", experience.daemon.server_key,
                      "The public key file (NAME.pub) of the daemon this command connects to, "
                      "for CURVE");
      sub->add_option("--key", experience.daemon.key,
                      "This side's key file (NAME.key), for CURVE");
      sub->add_option("--timeout", experience.daemon.timeout_s,
                      "Seconds to wait for each answer")
        ->capture_default_str();
      sub->add_flag("--json", experience.json, "Print the sync's result document as JSON");
    }
    if (name == "sync" || name == "import")
      sub->add_option("--trust", experience.trust_file,
                      "Trust list (TOML: [[trusted]] tables of name and public_key, 64 hex "
                      "digits); default STORE/trust.toml when it exists, else only this "
                      "store's own cluster is trusted" + std::string{name == "sync" ? " (--store form only; a daemon uses its own)" : ""});
    if (name == "import") {
      sub->add_option("PACK", experience.pack_file, "The experience pack file to import")
        ->required();
    }
    experience_cmds.push_back(sub);
  }

  // An unknown subcommand is named as such, with the valid ones (CLI11 alone would say "A
  // subcommand is required" or "The following arguments were not expected").
  {
    const CLI::App* at = &app;
    std::string path = "infrarsi";
    for (int i = 1; i < argc && at->get_require_subcommand_min() > 0; ++i) {
      std::string word = argv[i];
      if (word.empty() || word.front() == '-')
        break;
      const CLI::App* next = nullptr;
      std::string names;
      for (const auto* sub : at->get_subcommands({})) {
        names += (names.empty() ? "" : ", ") + sub->get_name();
        if (sub->get_name() == word)
          next = sub;
      }
      if (next == nullptr) {
        err << path << ": unknown subcommand '" << word << "'; valid: " << names << " (run '"
            << path << " --help')\n";
        return exit_usage;
      }
      at = next;
      path += " " + word;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) { // --help, --help-all, --version
    app.exit(e, out, err);
    return exit_ok;
  } catch (const CLI::ParseError& e) {
    app.exit(e, out, err);
    return exit_usage;
  }

  try {
    if (daemon_status_cmd->parsed())
      return run_daemon_status(daemon_client, daemon_status_json, out, err);
    if (daemon_cmd->parsed()) {
      if (daemon_config_path.empty()) {
        err << "infrarsi daemon: --config FILE is required (config/daemon.toml is an example)\n";
        return exit_usage;
      }
      auto config = load_daemon_config(daemon_config_path);
      if (!config) {
        err << "infrarsi daemon: " << describe(config.error()) << '\n';
        return exit_failure;
      }
      return run_daemon(*config, out, err);
    }
    if (submit_cmd->parsed()) {
      std::optional<std::uint64_t> seed;
      if (submit_seed_opt->count() > 0)
        seed = submit_seed;
      std::optional<std::uint32_t> trials;
      if (submit_trials_opt->count() > 0)
        trials = submit_trials;
      return run_submit(submit_client, submit_task, seed, trials, submit_max_slots,
                        submit_experience, out, err);
    }
    if (node_cmd->parsed()) {
      if (!node_reserve.empty() && !parse_byte_size(node_reserve, node.disk_reserve_bytes)) {
        err << "infrarsi node: --disk-reserve '" << node_reserve
            << "': expected a byte count such as 64MiB or 0\n";
        return exit_usage;
      }
      return run_node(node, out, err);
    }
    if (status_cmd->parsed() && !status_client.endpoint.empty())
      return run_daemon_status(status_client, false, out, err);
    if (runs->parsed())
      return cmd_runs(runs_store, runs_json, out, err);
    if (dump_cmd->parsed())
      return cmd_log_dump(dump, out, err);
    if (trial_run->parsed())
      return cmd_trial_run(tr, out, err);
    if (tune_cmd->parsed()) {
      if (seed_opt->count() > 0)
        tune.seed = tune_seed;
      if (trials_opt->count() > 0)
        tune.trials = tune_trials;
      if (!tune_reserve.empty()
          && !parse_byte_size(tune_reserve, tune.disk_reserve_bytes)) {
        err << "infrarsi tune: --disk-reserve '" << tune_reserve
            << "': expected a byte count such as 64MiB or 0\n";
        return exit_usage;
      }
      return run_tune(tune, out, err);
    }
    if (status_cmd->parsed())
      return run_status(status_store, out, err);
    if (check_cmd->parsed())
      return cmd_check(check, out, err);
    if (replay_cmd->parsed())
      return run_replay(replay, out, err);
    if (report_cmd->parsed())
      return run_report(report, out, err);
    for (auto* sub : experience_cmds)
      if (sub->parsed()) {
        experience.action = sub->get_name();
        return run_experience(experience, out, err);
      }
    if (keys_gen_cmd->parsed())
      return run_keys_generate(keys_gen, out, err);
    if (keys_show_cmd->parsed())
      return run_keys_show_public(keys_show_path, out, err);
  } catch (const std::exception& e) {
    err << "infrarsi: internal error: " << e.what() << '\n';
    return exit_failure;
  }
  err << app.help();
  return exit_usage;
}

} // namespace infrarsi::runtime
