#include "adapters/scope.hpp"

#include <fstream>
#include <iterator>
#include <map>

#include "adapters/environment.hpp"
#include "adapters/trial_launcher.hpp"

namespace infrarsi::adapters {

caf::expected<nlohmann::json> lock_scope(const tuning::task_spec& task,
                                         const std::string& scratch_dir) {
  nlohmann::json editable = nlohmann::json::object();
  nlohmann::json frozen = nlohmann::json::object();
  for (const auto& [globs, out] :
       {std::pair{&task.scope.editable, &editable}, std::pair{&task.scope.frozen, &frozen}})
    for (const auto& rel : match_scope(task.workload.workdir, *globs))
      if (auto h = sha256_file(task.workload.workdir + "/" + rel))
        (*out)[rel] = *h;
  nlohmann::json patches = nlohmann::json::object();
  std::vector<std::string> in_scope;
  for (const auto& p : task.patches) {
    auto violation = patch_scope_violation(task, p.name);
    std::ifstream in{p.file};
    std::string text{std::istreambuf_iterator<char>{in}, {}};
    patches[p.name] = {{"paths", patch_paths(text)},
                       {"sha256", sha256_hex(text)},
                       {"in_scope", violation.empty()},
                       {"violation", violation}};
    if (violation.empty())
      in_scope.push_back(p.name);
  }
  nlohmann::json conflicts = nlohmann::json::array();
  if (!in_scope.empty()) {
    // Every in-scope patch alone, and every pair (a patch that does not apply alone is
    // excluded: decide::excluded_patches).
    std::map<std::string, std::string> not_alone;
    auto pairs = patch_conflicts(task, in_scope, scratch_dir, &not_alone);
    if (!pairs)
      return std::move(pairs.error());
    for (const auto& [a, b] : *pairs)
      conflicts.push_back({a, b});
    for (const auto& name : in_scope) {
      auto it = not_alone.find(name);
      auto why = it == not_alone.end() ? std::string{} : it->second;
      while (!why.empty() && (why.back() == '\n' || why.back() == ' '))
        why.pop_back();
      for (auto pos = why.find('\n'); pos != std::string::npos; pos = why.find('\n', pos))
        why.replace(pos, 1, "; ");
      patches[name]["applies_alone"] = it == not_alone.end();
      patches[name]["apply_error"] = why;
    }
  }
  return nlohmann::json{{"editable", editable},
                        {"frozen", frozen},
                        {"patches", patches},
                        {"patch_conflicts", conflicts}};
}

} // namespace infrarsi::adapters
