#include "adapters/run_files.hpp"

#include <filesystem>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "messages/errc.hpp"

namespace infrarsi::adapters {

namespace fs = std::filesystem;

caf::expected<nlohmann::json> write_report(const std::string& run_dir,
                                           const nlohmann::json& report,
                                           const std::string& markdown) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  auto json_path = run_dir + "/report.json";
  auto md_path = run_dir + "/report.md";
  std::ofstream j{json_path};
  j << report.dump(2) << '\n';
  std::ofstream m{md_path};
  m << markdown;
  j.close();
  m.close();
  if (!j || !m)
    return make_error(errc::io_error, "cannot write the report under '" + run_dir + "'");
  return nlohmann::json{{"report_json", json_path}, {"report_md", md_path}};
}

caf::expected<nlohmann::json> write_report_files(const std::string& run_dir,
                                                 const report_files& which,
                                                 const nlohmann::json& report,
                                                 const std::string& markdown,
                                                 const std::string& html) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  nlohmann::json written = nlohmann::json::object();
  auto put = [&](bool wanted, const char* key, const char* name,
                 const std::string& text) -> caf::error {
    if (!wanted)
      return {};
    auto path = run_dir + "/" + name;
    std::ofstream out{path, std::ios::binary | std::ios::trunc};
    out << text;
    out.close();
    if (!out)
      return make_error(errc::io_error, "cannot write '" + path + "'");
    written[key] = path;
    return {};
  };
  if (auto err = put(which.json, "report_json", "report.json", report.dump(2) + "\n"))
    return err;
  if (auto err = put(which.md, "report_md", "report.md", markdown))
    return err;
  if (auto err = put(which.html, "report_html", "report.html", html))
    return err;
  return written;
}

std::vector<std::string> chart_js_candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("INFRARSI_CHART_JS"); env != nullptr && *env != '\0')
    return {env}; // the user's choice, alone: a wrong path is an error, not a silent fallback
#ifdef INFRARSI_CHART_JS_PATH
  out.emplace_back(INFRARSI_CHART_JS_PATH);
#endif
  for (const char* p : {"/usr/share/javascript/chart.js/chart.min.js",
                        "/usr/share/javascript/chart.js/chart.js"})
    if (std::find(out.begin(), out.end(), p) == out.end())
      out.emplace_back(p);
  return out;
}

caf::expected<std::string> load_chart_js() {
  std::string tried;
  for (const auto& path : chart_js_candidates()) {
    std::ifstream in{path, std::ios::binary};
    if (in) {
      std::string text{std::istreambuf_iterator<char>{in}, {}};
      if (!text.empty())
        return text;
    }
    tried += (tried.empty() ? "" : ", ") + path;
  }
  return make_error(errc::not_found,
                    "Chart.js not found (tried " + tried
                      + "): install Debian's libjs-chart.js (scripts/setup lists it) or set "
                        "INFRARSI_CHART_JS to a Chart.js 3 UMD file; report.html needs it");
}

caf::expected<std::string> write_promoted(const std::string& out_dir,
                                          const tuning::task_spec& task,
                                          const tuning::configuration& config,
                                          const nlohmann::json& launch) {
  std::error_code ec;
  fs::create_directories(out_dir + "/patches", ec);
  auto path = out_dir + "/launch.json";
  std::ofstream out{path};
  out << launch.dump(2) << '\n';
  out.close();
  if (!out)
    return make_error(errc::io_error, "cannot write '" + path + "'");
  for (const auto& p : config.patches)
    if (const auto* spec = task.find_patch(p)) {
      auto to = out_dir + "/patches/" + p + ".patch";
      fs::copy_file(spec->file, to, fs::copy_options::overwrite_existing, ec);
      if (ec)
        return make_error(errc::io_error, "cannot copy patch '" + spec->file + "' to '" + to
                                            + "': " + ec.message());
    }
  return path;
}

} // namespace infrarsi::adapters
