#pragma once
/// @file run_files.hpp
/// The files a run writes under its run directory for people: the report (report.json,
/// report.md, report.html) and the promoted configuration (promoted/launch.json,
/// promoted/patches/*.patch), and the charting library report.html inlines.

#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "tuning/task.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::adapters {

/// Writes `run_dir`/report.json (the report, indented) and `run_dir`/report.md (`markdown`),
/// creating the directory. Returns the ReportWritten document {"report_json", "report_md"} with
/// both paths. Error: errc::io_error naming the directory.
[[nodiscard]] caf::expected<nlohmann::json> write_report(const std::string& run_dir,
                                                         const nlohmann::json& report,
                                                         const std::string& markdown);

/// Which of the report's files to write (all by default).
struct report_files {
  bool json = true;
  bool md = true;
  bool html = true;
};

/// Writes the selected files under `run_dir` (created): report.json (`report`, indented),
/// report.md (`markdown`), report.html (`html`). Returns {"report_json"?, "report_md"?,
/// "report_html"?} with the paths written. Error: errc::io_error naming the file.
[[nodiscard]] caf::expected<nlohmann::json> write_report_files(const std::string& run_dir,
                                                               const report_files& which,
                                                               const nlohmann::json& report,
                                                               const std::string& markdown,
                                                               const std::string& html);

/// Where Chart.js (3.x UMD build, defines window.Chart) is looked for: the INFRARSI_CHART_JS
/// environment variable alone when it is set; else, in order, the file CMake found at configure
/// time (INFRARSI_CHART_JS_PATH) and Debian's libjs-chart.js paths
/// /usr/share/javascript/chart.js/chart.min.js and .../chart.js.
std::vector<std::string> chart_js_candidates();

/// The text of the first readable candidate of chart_js_candidates(). Error: errc::not_found
/// naming every path tried and the package to install (libjs-chart.js, scripts/setup).
[[nodiscard]] caf::expected<std::string> load_chart_js();

/// Writes `out_dir`/launch.json (`launch`, adapters::launch_config) and copies every patch of
/// `config` to `out_dir`/patches/<name>.patch. Error: errc::io_error naming the file.
[[nodiscard]] caf::expected<std::string> write_promoted(const std::string& out_dir,
                                                        const tuning::task_spec& task,
                                                        const tuning::configuration& config,
                                                        const nlohmann::json& launch);

} // namespace infrarsi::adapters
