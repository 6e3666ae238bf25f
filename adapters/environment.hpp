#pragma once
/// @file environment.hpp
/// Facts about files and this machine: SHA-256 content hashes (OpenSSL), the files a scope glob
/// matches, the hardware fingerprint, and running a short helper command (git) to completion.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "tuning/task.hpp"

namespace infrarsi::adapters {

/// Lower-case hex SHA-256 of `bytes`.
std::string sha256_hex(std::string_view bytes);

/// SHA-256 of a file's content. Error: errc::not_found / errc::io_error naming the file.
[[nodiscard]] caf::expected<std::string> sha256_file(const std::string& path);

/// Files under `root` (recursively, regular files, '.git' skipped) whose path relative to `root`
/// matches one of `globs` (fnmatch with FNM_PATHNAME: '*' stays within a directory; a glob
/// without '/' also matches the file name in any directory). Sorted, relative paths.
std::vector<std::string> match_scope(const std::string& root, const std::vector<std::string>& globs);

/// Whether relative path `path` matches one of `globs` (same rules as match_scope).
bool path_in_scope(const std::string& path, const std::vector<std::string>& globs);

/// The machine: {"cpu": model, "cores": n, "memory_bytes": n, "gpus": [...], "os": ...} and a
/// short fingerprint (16 hex digits of SHA-256 over cpu, cores, memory and gpus).
nlohmann::json hardware_description();
std::string hardware_fingerprint(const nlohmann::json& description);

/// Result of a helper command.
struct command_result {
  int exit_status = -1;
  std::string out;
  std::string err;
};

/// Runs `argv` in `cwd` to completion (no shell), capturing stdout and stderr.
/// Error: errc::not_found when the program cannot be executed.
[[nodiscard]] caf::expected<command_result> run_command(const std::vector<std::string>& argv,
                                                        const std::string& cwd);

/// Paths a unified diff touches (from its "+++ b/..." and "--- a/..." lines), sorted, unique.
std::vector<std::string> patch_paths(const std::string& diff_text);

/// "" when every path task patch `patch_name` names is editable and not frozen; otherwise the
/// violation, e.g. "scope: patch 'x' edits frozen path 'train.py'" ("unknown patch 'x'" when the
/// task has none of that name). Reads the patch file.
std::string patch_scope_violation(const tuning::task_spec& task, const std::string& patch_name);

} // namespace infrarsi::adapters
