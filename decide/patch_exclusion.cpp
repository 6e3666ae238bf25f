#include "decide/patch_exclusion.hpp"

namespace infrarsi::decide {

std::vector<patch_exclusion> excluded_patches(const nlohmann::json& patches) {
  std::vector<patch_exclusion> out;
  if (!patches.is_object())
    return out;
  auto text = [](const nlohmann::json& p, const char* key) {
    auto it = p.find(key);
    return it != p.end() && it->is_string() ? it->get<std::string>() : std::string{};
  };
  auto flag = [](const nlohmann::json& p, const char* key) {
    auto it = p.find(key);
    return it == p.end() || !it->is_boolean() || it->get<bool>(); // absent: true
  };
  for (auto it = patches.begin(); it != patches.end(); ++it) {
    const auto& p = it.value();
    if (!p.is_object())
      continue;
    if (!flag(p, "in_scope"))
      out.push_back({it.key(), "scope", text(p, "violation")});
    else if (!flag(p, "applies_alone"))
      out.push_back({it.key(), "does-not-apply", text(p, "apply_error")});
  }
  return out;
}

std::vector<patch_exclusion> excluded_patches(const store::run_state& run) {
  if (!run.contract_doc || !run.contract_doc->contains("patches"))
    return {};
  return excluded_patches((*run.contract_doc)["patches"]);
}

} // namespace infrarsi::decide
