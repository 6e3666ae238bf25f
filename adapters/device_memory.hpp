#pragma once
/// @file device_memory.hpp
/// Device memory of a trial's processes, as the NVIDIA driver reports it: the text of
/// `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` parsed into
/// rows (a pure function, tested on captured output), the rows summed per rank over the trial's
/// process tree, and where nvidia-smi is on PATH (docs/node-runner.md "Device memory").

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

#include "adapters/process.hpp"

namespace infrarsi::adapters {

/// One process nvidia-smi lists on one GPU (a process on two GPUs is two rows).
struct compute_app {
  /// Process id as the driver sees it (the host's PID namespace).
  pid_t pid = 0;
  /// Device memory the process holds on that GPU, bytes; nullopt when the driver cannot say
  /// ("[N/A]" on WDDM and some containers, "[Not Supported]", "[Insufficient Permissions]"):
  /// unknown, never 0.
  std::optional<std::uint64_t> used_bytes;
};

/// The rows of nvidia-smi's compute-apps CSV. Accepts `--format=csv` with or without `noheader`
/// and `nounits`: a header line (`pid, used_gpu_memory [MiB]`, or any column order naming `pid`
/// and `used_memory`/`used_gpu_memory`) picks the columns, otherwise the columns are pid then
/// used memory; values are MiB, with or without the ` MiB` unit. Blank lines and "No running
/// processes found" are no rows. Errors: errc::invalid_argument naming the line (1-based) and
/// its text, for a row whose pid is not a number, whose memory has a unit other than MiB, or a
/// header without a pid or used-memory column.
[[nodiscard]] caf::expected<std::vector<compute_app>> parse_compute_apps(std::string_view csv);

/// Device memory of the most loaded rank, bytes: `apps` summed per rank over the processes of
/// `table` that belong to it, the largest sum. A process belongs to the first of `roots` that is
/// itself, one of its ancestors (by parent pid in `table`) or its process group. With
/// `ranks_are_children` (a single launched process that starts one child per rank: torchrun, a
/// user's launcher command) the rank is the root's child on that path, the root itself being a
/// rank of its own. Rows of other processes and rows whose memory is unknown count nothing.
/// 0 when no row belongs to the trial. Cost: O(rows x depth of the tree).
std::uint64_t most_loaded_rank_device_bytes(const std::vector<compute_app>& apps,
                                            const std::vector<process_entry>& table,
                                            const std::vector<pid_t>& roots,
                                            bool ranks_are_children);

/// The argv that asks the driver for every compute process's device memory: `program
/// --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`.
std::vector<std::string> compute_apps_query(const std::string& program);

/// The absolute path of the first executable `name` in the directories of `path_env` (a PATH
/// value, `:`-separated; empty entries are the current directory, as execvp reads them), or
/// nullopt when there is none. One stat per directory; nothing is run.
std::optional<std::string> find_on_path(const std::string& name, std::string_view path_env);

} // namespace infrarsi::adapters
