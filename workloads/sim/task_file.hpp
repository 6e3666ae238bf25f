#pragma once
/// @file task_file.hpp
/// The simulator's own reader of a task file (TOML, toml++) for `--enumerate --task FILE`. The
/// simulator stands in for a user's training job and does not depend on the harness: it reads
/// only what the enumeration needs — `workload.workdir`, `workload.argv`, `workload.world_size`,
/// the `[[knobs]]` (name, type, values, min, max, default, true_text, false_text), the
/// `[constants]`, the `[[patches]]` (name, file) and `limits.memory_cap_bytes` — with the same
/// meaning as the harness's loader (docs/task-contract.md). Every other key and section is
/// ignored here (the harness validates the whole file when it loads the task).

#include <cstdint>
#include <optional>
#include <string>

#include "tuning/task.hpp"

namespace infrarsi::sim {

/// Reads the task file at `path` into a task_spec holding the parts listed above (everything
/// else keeps its default). Relative paths in the file (workload.workdir, patches[].file) are
/// resolved against the file's directory; `source` is the file's absolute path. Returns nullopt
/// with `why` on an unreadable file ("task file 'PATH': no such file"), a TOML syntax error
/// ("FILE:LINE:COLUMN: TOML syntax error: ...") or a bad value of a key it reads
/// ("FILE:LINE:COLUMN: KEY: expected WHAT, got VALUE", e.g. "knobs[2].default").
std::optional<tuning::task_spec> read_task_file(const std::string& path, std::string& why);

/// Parses a byte size as the task file writes it: a decimal number with an optional unit (B,
/// KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. "512MiB", "2.5GB", "4096". Returns nullopt on
/// anything else (sign, exponent, hexadecimal, a non-zero size that rounds to 0 bytes, 2^63 bytes
/// or more).
std::optional<std::uint64_t> parse_byte_size(const std::string& text);

} // namespace infrarsi::sim
