#include "adapters/llm_patch.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "adapters/environment.hpp"
#include "adapters/trial_launcher.hpp"
#include "messages/errc.hpp"

namespace infrarsi::adapters {

namespace fs = std::filesystem;

std::map<std::string, std::string> read_prompt_files(const tuning::task_spec& task) {
  std::map<std::string, std::string> out;
  std::uint64_t left = task.llm.max_prompt_file_bytes;
  for (const auto& rel : match_scope(task.workload.workdir, task.scope.editable)) {
    if (path_in_scope(rel, task.scope.frozen))
      continue;
    fs::path p = fs::path{task.workload.workdir} / rel;
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(p, ec)) || !fs::is_regular_file(p, ec))
      continue;
    std::ifstream in{p, std::ios::binary};
    std::string text;
    text.resize(static_cast<std::size_t>(std::min<std::uint64_t>(left, 1u << 26)));
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    auto size = fs::file_size(p, ec);
    if (!ec && size > text.size())
      text += "\n[... cut at " + std::to_string(text.size()) + " bytes]";
    left -= std::min<std::uint64_t>(left, text.size());
    out[rel] = std::move(text);
    if (left == 0)
      break;
  }
  return out;
}

std::string check_llm_patch_applies(const tuning::task_spec& task, const std::string& diff,
                                    const std::vector<std::string>& paths,
                                    const std::string& scratch_dir) {
  std::error_code ec;
  fs::remove_all(scratch_dir, ec);
  fs::path tree = fs::path{scratch_dir} / "tree";
  fs::create_directories(tree, ec);
  if (ec)
    return "cannot create " + tree.string() + ": " + ec.message();
  for (const auto& rel : paths) {
    fs::path src = fs::path{task.workload.workdir} / rel;
    if (fs::is_symlink(fs::symlink_status(src, ec)))
      return "'" + rel + "' is a symbolic link in the workload";
    if (!fs::is_regular_file(src, ec))
      return "'" + rel + "' is not a regular file of the workload";
    fs::create_directories((tree / rel).parent_path(), ec);
    fs::copy_file(src, tree / rel, ec);
    if (ec)
      return "cannot copy '" + rel + "': " + ec.message();
  }
  auto patch = (fs::path{scratch_dir} / "proposed.diff").string();
  {
    std::ofstream out{patch, std::ios::binary};
    out << diff;
    if (!out)
      return "cannot write " + patch;
  }
  std::string err;
  if (git_apply(patch, tree.string(), true, err))
    return {};
  while (!err.empty() && (err.back() == '\n' || err.back() == ' '))
    err.pop_back();
  return err.empty() ? "git apply --check failed" : "does not apply: " + err.substr(0, 1000);
}

caf::error write_llm_patch_files(const std::string& dir, const nlohmann::json& accepted) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return make_error(errc::io_error, "cannot create " + dir + ": " + ec.message());
  for (const auto& p : accepted) {
    auto file = dir + "/" + p["name"].get<std::string>() + ".patch";
    const auto& diff = p["diff"].get_ref<const std::string&>();
    if (fs::is_regular_file(file, ec)) {
      std::ifstream in{file, std::ios::binary};
      std::string now{std::istreambuf_iterator<char>{in}, {}};
      if (now == diff)
        continue;
    }
    std::ofstream out{file, std::ios::binary | std::ios::trunc};
    out << diff;
    out.close();
    if (!out)
      return make_error(errc::io_error, "cannot write " + file);
  }
  return caf::none;
}

} // namespace infrarsi::adapters
