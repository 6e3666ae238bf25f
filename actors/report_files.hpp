#pragma once
/// @file report_files.hpp
/// The report stage's files, as the supervisor writes them and `infrarsi report` regenerates
/// them from the log: one function, so both produce the same bytes.

#include <string>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "adapters/run_files.hpp"
#include "store/run_projection.hpp"
#include "tuning/task.hpp"

namespace infrarsi::actors {

/// Builds the report (decide::make_report over `run`, folded from the log, and `task`, the task
/// logged at init) and writes the selected files under `run_dir`: report.json, report.md
/// (decide::render_markdown) and report.html (decide::render_html with Chart.js from
/// adapters::load_chart_js). Returns the ReportWritten document: the paths written
/// {"report_json"?, "report_md"?, "report_html"?}, plus "report_html_error" (why report.html was
/// not written: Chart.js missing) when html was asked for and could not be rendered; the other
/// files are written regardless. Error: errc::io_error naming the file that could not be written.
[[nodiscard]] caf::expected<nlohmann::json>
write_run_report(const tuning::task_spec& task, const store::run_state& run,
                 const std::string& run_dir, const adapters::report_files& which = {});

} // namespace infrarsi::actors
