#pragma once
/// @file run_files.hpp
/// The files a run writes under its run directory for people: the report (report.json,
/// report.md) and the promoted configuration (promoted/launch.json, promoted/patches/*.patch).

#include <string>

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

/// Writes `out_dir`/launch.json (`launch`, adapters::launch_config) and copies every patch of
/// `config` to `out_dir`/patches/<name>.patch. Error: errc::io_error naming the file.
[[nodiscard]] caf::expected<std::string> write_promoted(const std::string& out_dir,
                                                        const tuning::task_spec& task,
                                                        const tuning::configuration& config,
                                                        const nlohmann::json& launch);

} // namespace infrarsi::adapters
