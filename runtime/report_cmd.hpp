#pragma once
/// @file report_cmd.hpp
/// `infrarsi report RUN --store DIR`: regenerates a run's report files from its event log alone,
/// with the function the supervisor's report stage uses (actors::write_run_report).

#include <ostream>
#include <string>

namespace infrarsi::runtime {

struct report_options {
  std::string run_id;
  /// Store directory (the one `infrarsi tune` used) or its events/ directory; opened read-only.
  std::string store_dir;
  /// "all" (default: report.json, report.md and report.html), "html", "md" or "json".
  std::string format = "all";
  /// Directory the files go to (default: STORE/runs/RUN, where the run wrote them).
  std::string out_dir;
  /// Task file, only for runs logged before the task text was (default: the task logged at
  /// init; for older runs the path the run recorded).
  std::string task_path;
};

/// Folds the run's events, rebuilds the report and writes the files asked for; prints one line
/// per file written. Exit status: 0 written, 1 it could not be (no such run, damaged log, task
/// not loadable, Chart.js missing for html, a file not writable; the message names which), 2 a
/// bad --format.
int run_report(const report_options& options, std::ostream& out, std::ostream& err);

} // namespace infrarsi::runtime
