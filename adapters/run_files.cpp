#include "adapters/run_files.hpp"

#include <filesystem>
#include <fstream>

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
