#pragma once
/// @file task_file.hpp
/// Reads a task file (TOML, toml++) into a tuning::task_spec. Reference: docs/task-contract.md.

#include <cstddef>
#include <cstdint>
#include <string>

#include <caf/expected.hpp>

#include "tuning/task.hpp"

namespace infrarsi::adapters {

/// Limits on task input (hostile or mistaken task files): a file beyond one is refused with an
/// error naming the file, the key, the value and the limit, before anything allocates in
/// proportion to it. The constraint expressions' own limits are tuning::max_expr_length and
/// tuning::max_expr_depth. Reference: docs/task-contract.md "Limits".
struct task_file_limits {
  /// Size of the task file (or of the text read back from an event log), bytes.
  static constexpr std::uintmax_t max_file_bytes = 1u << 20;
  /// Knobs ([[knobs]] tables).
  static constexpr std::size_t max_knobs = 64;
  /// Explicit values of one knob (knobs[].values).
  static constexpr std::size_t max_knob_values = 256;
  /// Search features: the searched values of every knob other than its default, plus one per
  /// patch (the one-hot features of tuning::feature_space; the planner's models are dense in
  /// them).
  static constexpr std::size_t max_search_features = 1024;
  /// Patches ([[patches]] tables): init checks every pair, and the candidate enumeration
  /// indexes patch subsets by a 64-bit mask.
  static constexpr std::size_t max_patches = 32;
  /// Constraint expressions (constraints = [...]).
  static constexpr std::size_t max_constraints = 256;
  /// Length of metrics.regex, characters (it is compiled when the file is read).
  static constexpr std::size_t max_regex_length = 1024;
  /// Length of a name (name, knowledge, knobs[].name, patches[].name), characters.
  static constexpr std::size_t max_name_length = 128;
  /// |min| and |max| of an integer knob's range (2^53: exact as a double).
  static constexpr double max_integer_magnitude = 9007199254740992.0;
  /// |min| and |max| of a real knob's range.
  static constexpr double max_real_magnitude = 1e300;
};

/// Whether `name` may name a task, a knowledge entry or a patch: 1..max_name_length characters
/// of letters, digits, '_', '.' and '-', beginning with a letter, a digit or '_', and without
/// "..". Such a name is one path component (no separator, never "." or ".."), a valid git ref
/// component and a safe file name: run ids, trial directories and branches are built from it.
[[nodiscard]] bool is_safe_name(const std::string& name);

/// Loads and validates the task file at `path`. Relative paths inside the file (workload.workdir,
/// patches[].file) are resolved against the file's directory.
/// Errors: errc::not_found (no such file), errc::invalid_argument for anything wrong in the file;
/// the message is "FILE:LINE:COLUMN: KEY: expected WHAT, got VALUE" (or the TOML syntax error with
/// its position). Unknown keys are errors (typos never pass silently). Every limit of
/// task_file_limits is checked ("knobs[0].values: 100000 values, more than the limit of 256").
/// Names must be is_safe_name; scope globs are relative to the workload directory, without a
/// ".." component.
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

/// The `[llm]` table of the TOML document `text` read from `file` (a task's, or the daemon
/// config's), checked as in a task file (docs/llm.md "Configure"); `llm.enabled` false when there
/// is none. Errors: errc::invalid_argument "FILE:LINE:COLUMN: llm.KEY: expected WHAT, got VALUE"
/// (or a TOML syntax error).
[[nodiscard]] caf::expected<tuning::llm_spec> load_llm_table(const std::string& text,
                                                             const std::string& file);

} // namespace infrarsi::adapters
