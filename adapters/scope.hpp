#pragma once
/// @file scope.hpp
/// init's scope lock (docs/task-contract.md "Scope"): a content hash of every editable and frozen
/// file of the workload, and for every candidate patch the paths it touches, its hash, whether it
/// stays in the editable scope, and which pairs of patches do not apply together.

#include <string>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "tuning/task.hpp"

namespace infrarsi::adapters {

/// The scope lock of `task`: {"editable": {path: sha256}, "frozen": {path: sha256},
/// "patches": {name: {"paths", "sha256", "in_scope", "violation", "applies_alone",
/// "apply_error"}}, "patch_conflicts": [[a, b], ...]} (paths relative to the workload
/// directory; SHA-256 in lower-case hex). "applies_alone" (in-scope patches only): whether the
/// patch applies to the unpatched workload; "apply_error": git's message when it does not.
/// Cost: reads every file in scope once; one copy of the workload and one `git apply` per
/// in-scope patch, one `git apply --check` per pair, under `scratch_dir`
/// (adapters::patch_conflicts).
/// Errors: those of patch_conflicts (errc::io_error when the copy fails).
[[nodiscard]] caf::expected<nlohmann::json> lock_scope(const tuning::task_spec& task,
                                                       const std::string& scratch_dir);

} // namespace infrarsi::adapters
