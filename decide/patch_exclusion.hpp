#pragma once
/// @file patch_exclusion.hpp
/// Which of a task's patches init excludes from the search, and why: the one home of that
/// decision. It reads only the facts init logged in ContractLocked "patches" (the scope lock,
/// adapters/scope.hpp), so the planner, the report, the supervisor's progress lines and
/// `infrarsi replay` all derive the same exclusions from the log.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/run_projection.hpp"

namespace infrarsi::decide {

/// One patch excluded at init: never proposed, alone or with others.
struct patch_exclusion {
  /// The patch's name (task patches[].name).
  std::string patch;
  /// "scope": it touches a path outside the editable scope (or a frozen one); "does-not-apply":
  /// `git apply` refuses it on the unpatched workload.
  std::string reason;
  /// The evidence: the scope violation, or git's message.
  std::string evidence;
};

/// The exclusions recorded in a ContractLocked "patches" object ({name: {"in_scope",
/// "violation", "applies_alone", "apply_error"}}), in name order. A patch outside the scope is
/// excluded for "scope" (its application is never tried); an in-scope patch with
/// "applies_alone": false for "does-not-apply". Entries without the keys (logs written before
/// they were recorded) exclude nothing for that reason. A value that is not an object: none.
[[nodiscard]] std::vector<patch_exclusion> excluded_patches(const nlohmann::json& patches);

/// The exclusions of a run: excluded_patches of its latest ContractLocked (none before init).
[[nodiscard]] std::vector<patch_exclusion> excluded_patches(const store::run_state& run);

} // namespace infrarsi::decide
