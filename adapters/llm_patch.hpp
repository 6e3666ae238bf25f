#pragma once
/// @file llm_patch.hpp
/// The llm-proposer's file side (issue 15): the editable files quoted in the patch prompt, and
/// `git apply --check` of a proposed diff on the locked tree. The textual checks come first
/// (decide::check_llm_diff); nothing here runs a shell or takes a path from the diff that those
/// checks did not pass.

#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <nlohmann/json.hpp>

#include "tuning/task.hpp"

namespace infrarsi::adapters {

/// The workload's editable, not frozen, regular files (no symbolic links; '.git' skipped) as
/// path (relative) -> text, in path order, cut so that all together hold at most
/// `task.llm.max_prompt_file_bytes` bytes (a cut file ends with "\n[... cut at N bytes]").
std::map<std::string, std::string> read_prompt_files(const tuning::task_spec& task);

/// "" when `diff` (already passed by decide::check_llm_diff, touching `paths`) applies cleanly
/// to the workload's current files, else why not (git's message, or a path that is now a
/// symbolic link or not a regular file). Works in a fresh `scratch_dir` (created; its content
/// replaced) holding copies of `paths` only; the workload is never written.
std::string check_llm_patch_applies(const tuning::task_spec& task, const std::string& diff,
                                    const std::vector<std::string>& paths,
                                    const std::string& scratch_dir);

/// Writes the diff of each accepted LLM-proposed patch (`accepted`: [{"name", "diff", ...}], as
/// decide::llm_accepted_patches gives them; names already checked safe) to `dir`/NAME.patch,
/// creating `dir`; a file whose content is already the diff is left alone. These are the files
/// the supervisor's own checks, the report and the apply stage read (decide::with_llm_patches).
/// Error: errc::io_error naming the file.
[[nodiscard]] caf::error write_llm_patch_files(const std::string& dir,
                                               const nlohmann::json& accepted);

} // namespace infrarsi::adapters
