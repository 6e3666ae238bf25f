#include "runtime/cli.hpp"

#include <ctime>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "messages/json.hpp"
#include "store/rocksdb_event_log.hpp"

namespace infrarsi::runtime {

namespace {

constexpr const char* default_store = ".infrarsi/events";

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

caf::expected<std::unique_ptr<store::rocksdb_event_log>> open_for_reading(const std::string& dir) {
  store::rocksdb_event_log_options opts;
  opts.read_only = true;
  return store::rocksdb_event_log::open(dir, opts);
}

// -- infrarsi runs ------------------------------------------------------------------------------

int cmd_runs(const std::string& dir, bool json, std::ostream& out, std::ostream& err) {
  auto log = open_for_reading(dir);
  if (!log) {
    err << "infrarsi runs: " << describe(log.error()) << '\n';
    return exit_failure;
  }
  auto runs = (*log)->list_runs();
  if (!runs) {
    err << "infrarsi runs: " << describe(runs.error()) << '\n';
    return exit_failure;
  }
  if (json) {
    for (const auto& r : *runs)
      out << nlohmann::json{{"run", r.run_id},
                            {"events", r.event_count},
                            {"first_global_position", r.first_global_position},
                            {"last_global_position", r.last_global_position}}
               .dump()
          << '\n';
    return exit_ok;
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
  return exit_ok;
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
  auto log = open_for_reading(o.store);
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
  auto* runs = app.add_subcommand("runs", "List the runs in an event log with their event counts");
  runs->add_option("--store", runs_store, "Event log directory (RocksDB)")
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
  dump_cmd->add_option("--store", dump.store, "Event log directory (RocksDB)")
    ->capture_default_str();
  dump_cmd->add_flag("--json", dump.json,
                     "JSON lines: run, sequence, global_position, recorded_at, kind, kind_id, "
                     "payload");
  dump_cmd->add_option("--from", dump.from, "First stream sequence to print")
    ->capture_default_str();
  dump_cmd->add_option("--limit", dump.limit, "Print at most N events (0: all)")
    ->capture_default_str();

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
    if (runs->parsed())
      return cmd_runs(runs_store, runs_json, out, err);
    if (dump_cmd->parsed())
      return cmd_log_dump(dump, out, err);
  } catch (const std::exception& e) {
    err << "infrarsi: internal error: " << e.what() << '\n';
    return exit_failure;
  }
  err << app.help();
  return exit_usage;
}

} // namespace infrarsi::runtime
