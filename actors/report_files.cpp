#include "actors/report_files.hpp"

#include "decide/report.hpp"
#include "decide/report_html.hpp"
#include "messages/errc.hpp"

namespace infrarsi::actors {

caf::expected<nlohmann::json> write_run_report(const tuning::task_spec& task,
                                               const store::run_state& run,
                                               const std::string& run_dir,
                                               const adapters::report_files& which) {
  auto report = decide::make_report(task, run);
  auto files = which;
  std::string html;
  std::string html_error;
  if (files.html) {
    auto chart_js = adapters::load_chart_js();
    if (chart_js) {
      html = decide::render_html(report, *chart_js);
    } else {
      html_error = describe(chart_js.error());
      files.html = false;
    }
  }
  auto written = adapters::write_report_files(
    run_dir, files, report, files.md ? decide::render_markdown(report) : std::string{}, html);
  if (!written)
    return written;
  if (!html_error.empty())
    (*written)["report_html_error"] = html_error;
  return written;
}

} // namespace infrarsi::actors
