#pragma once
/// @file report_html.hpp
/// report.html: a view of report.json (decide/report.hpp decides the content; this only draws
/// it). One self-contained file that opens offline: the report document and the charting library
/// (Chart.js, Debian's libjs-chart.js; adapters::load_chart_js reads it) are inlined, nothing is
/// fetched. Pure: no I/O.
///
/// The page records how its charts rendered, for people and for tests
/// (tests/decide/report_html_test.cpp loads it in headless Chromium):
///  - every chart is a `<canvas class="chart" id="chart-NAME">`; after drawing it gets
///    `data-render="ok"` when the library drew it and its pixels are not all transparent,
///    `data-render="blank"` or `data-render="error: ..."` otherwise;
///  - a section without data shows `<p class="empty" data-empty="NAME">why</p>` instead of a
///    chart (e.g. no priors, no memory measured);
///  - `<pre id="render-status">` ends up holding {"charts": {NAME: status}, "errors": [...],
///    "done": true}: every uncaught error and console.error of the page is in "errors".

#include <string>

#include <nlohmann/json.hpp>

namespace infrarsi::decide {

/// The chart names render_html draws when their data exist, in page order.
inline constexpr const char* report_chart_names[] = {"progress",  "effects",  "memory-prices",
                                                     "memory-boundary", "failed-cost",
                                                     "prior-vs-measured", "promoted"};

/// report.html of `report` (make_report's document). `chart_js` is the text of Chart.js 3.x
/// (UMD build; defines window.Chart); it is inlined as given. Never fails: a report without some
/// figure gets the empty-section note for it.
std::string render_html(const nlohmann::json& report, const std::string& chart_js);

} // namespace infrarsi::decide
