#pragma once
// A simulator task for the durability tests: config/tasks/NAME.toml with its workdir and patch
// files pointing at a copy of workloads/sim in `dir`, outside any git repository (so tune's apply
// stage never commits a branch into the source tree).

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "test_util.hpp"

namespace infrarsi::test {

/// The text of the task, paths rewritten; the copy is made once per `dir`.
inline std::string sim_task_text(const temp_dir& dir, const std::string& name) {
  namespace fs = std::filesystem;
  std::ifstream in{std::string{INFRARSI_SOURCE_DIR} + "/config/tasks/" + name + ".toml"};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  const std::string copy = dir.sub("sim-workload");
  if (!fs::exists(copy))
    fs::copy(std::string{INFRARSI_SOURCE_DIR} + "/workloads/sim", copy,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  const std::string from = "../../workloads/sim"; // the workdir and every patch file
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at))
    text.replace(at, from.size(), copy);
  return text;
}

} // namespace infrarsi::test
