#pragma once
/// @file task_file.hpp
/// Reads a task file (TOML, toml++) into a tuning::task_spec. Reference: docs/task-contract.md.

#include <string>

#include <caf/expected.hpp>

#include "tuning/task.hpp"

namespace infrarsi::adapters {

/// Loads and validates the task file at `path`. Relative paths inside the file (workload.workdir,
/// patches[].file) are resolved against the file's directory.
/// Errors: errc::not_found (no such file), errc::invalid_argument for anything wrong in the file;
/// the message is "FILE:LINE:COLUMN: KEY: expected WHAT, got VALUE" (or the TOML syntax error with
/// its position). Unknown keys are errors (typos never pass silently).
[[nodiscard]] caf::expected<tuning::task_spec> load_task_file(const std::string& path);

/// Parses task-file text read back from an event log (ContractLocked "task_toml"), as if it were
/// the file at `source_path` (relative paths resolve against its directory), without requiring
/// the referenced files (patches) to exist any more: replay needs only the log. Errors as
/// load_task_file (errc::invalid_argument).
[[nodiscard]] caf::expected<tuning::task_spec> load_task_text(const std::string& text,
                                                             const std::string& source_path);

/// Parses a byte size: an integer, or a string with a unit: "512MiB", "3GiB", "2.5GB", "4096".
/// Returns false on anything else.
bool parse_byte_size(const std::string& text, std::uint64_t& out);

} // namespace infrarsi::adapters
