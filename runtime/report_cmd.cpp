#include "runtime/report_cmd.hpp"

#include <filesystem>

#include "actors/report_files.hpp"
#include "messages/errc.hpp"
#include "runtime/replay.hpp"
#include "runtime/store_paths.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::runtime {

int run_report(const report_options& o, std::ostream& out, std::ostream& err) {
  adapters::report_files which;
  if (o.format == "html")
    which = {false, false, true};
  else if (o.format == "md")
    which = {false, true, false};
  else if (o.format == "json")
    which = {true, false, false};
  else if (o.format != "all") {
    err << "infrarsi report: --format '" << o.format << "': expected html, md, json or all\n";
    return 2;
  }
  store::rocksdb_event_log_options opts;
  opts.read_only = true;
  auto events = events_dir_of(o.store_dir);
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path{events} / "CURRENT", ec)) {
    err << "infrarsi report: no event log at '" << events
        << "' (give the store directory infrarsi tune used, or its events/ directory)\n";
    return 1;
  }
  auto log = store::rocksdb_event_log::open(events, opts);
  if (!log) {
    err << "infrarsi report: " << describe(log.error()) << '\n';
    return 1;
  }
  warn_if_damaged(**log, events, "infrarsi report", err);
  auto state = store::load_run(**log, o.run_id);
  if (!state) {
    err << "infrarsi report: " << describe(state.error()) << '\n';
    return 1;
  }
  if (state->events == 0) {
    err << "infrarsi report: run '" << o.run_id << "' not found in '" << events
        << "' (infrarsi runs --store " << o.store_dir << " lists them)\n";
    return 1;
  }
  auto task = task_of_run(*state, o.task_path, "infrarsi report", err);
  if (!task) {
    err << "infrarsi report: " << describe(task.error()) << '\n';
    return 1;
  }
  namespace fs = std::filesystem;
  auto out_dir = o.out_dir;
  if (out_dir.empty()) {
    // The store directory, whichever of the two forms was given.
    fs::path store = o.store_dir;
    if (fs::path{events} == store)
      store = store.parent_path();
    out_dir = (store / "runs" / o.run_id).string();
  }
  auto written = actors::write_run_report(*task, *state, out_dir, which);
  if (!written) {
    err << "infrarsi report: " << describe(written.error()) << '\n';
    return 1;
  }
  for (const char* key : {"report_json", "report_md", "report_html"})
    if (written->contains(key))
      out << (*written)[key].get<std::string>() << '\n';
  if (written->contains("report_html_error")) {
    err << "infrarsi report: report.html not written: "
        << (*written)["report_html_error"].get<std::string>() << '\n';
    return 1;
  }
  return 0;
}

} // namespace infrarsi::runtime
