#pragma once
/// @file trial_copy.hpp
/// A trial's copy of the workload directory, and removing old copies (docs/node-runner.md "The
/// trial's copy of the workload"). A copy holds the trial's own bytes only where the trial may
/// write: every other file is a copy-on-write clone (reflink) where the filesystem has them, else
/// a hard link to the original. The rule that keeps the original safe:
///   - own bytes (a reflink, else a real copy) for every file in the editable scope, every file
///     the trial's patches name, and every file matching `workload.writable` (what the workload
///     writes in place at run time); a patched file is therefore never a link when the patch is
///     applied;
///   - everything else is a reflink or, on filesystems without them, a hard link when it has at
///     least copy_rules::link_min_bytes (1 MiB), else a plain copy (also when linking fails:
///     another filesystem, a link limit, a protected link);
///   - `.git` (directory or gitlink file) is left out, and so is the directory under the
///     workload that holds the copy itself (a store inside the workload);
///   - after the trial, every hard-linked file must still have the size and modification time it
///     had when linked (written_through); a file the workload wrote through its link changed the
///     original, and the trial ends as contract_violation naming it.

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

namespace infrarsi::adapters {

/// How copy_workload made a trial's copy.
struct workload_copy {
  /// Regular files cloned copy-on-write (FICLONE), hard-linked, and copied byte for byte.
  std::uint64_t files_reflinked = 0;
  std::uint64_t files_linked = 0;
  std::uint64_t files_copied = 0;
  /// Symbolic links recreated as links (their target text kept).
  std::uint64_t symlinks = 0;
  /// Bytes written by the byte-for-byte copies.
  std::uint64_t bytes_copied = 0;
  /// One hard-linked file: its path relative to the copy, its size in bytes and its modification
  /// time (ns since the Unix epoch) when it was linked.
  struct linked_file {
    std::string path;
    std::uint64_t size = 0;
    std::int64_t mtime_ns = 0;
  };
  /// Every hard-linked file, in the order linked (what written_through checks).
  std::vector<linked_file> linked;
};

/// What a copy must give its own bytes, and how it may share the rest.
struct copy_rules {
  /// Globs (match_scope rules, adapters/environment.hpp) of files that get their own bytes:
  /// the task's scope.editable and workload.writable.
  std::vector<std::string> own_globs;
  /// Relative paths that get their own bytes (the paths the trial's patches name).
  std::set<std::string> own_paths;
  /// Try copy-on-write clones first (the default); false: hard links and copies only (tests).
  bool reflink = true;
  /// Hard-link only files of at least this many bytes (default 1 MiB); smaller ones are copied.
  /// Small files are the scripts, configs and logs a workload is likeliest to rewrite in place,
  /// and they cost little to copy; the bytes worth sharing are in large files (data, weights).
  std::uint64_t link_min_bytes = std::uint64_t{1} << 20;
};

/// Makes `dest` (removed first if present, then created) a copy of the workload directory `src`
/// by `rules` (the file comment above). Directories keep their permission bits; symlinks are
/// recreated with the same target; other special files (sockets, FIFOs) are left out.
/// Errors: errc::io_error naming the file and the reason (`src` unreadable, `dest` not
/// writable, a copy that failed).
[[nodiscard]] caf::expected<workload_copy>
copy_workload(const std::string& src, const std::string& dest, const copy_rules& rules);

/// The paths every named patch file touches (adapters::patch_paths over each file's diff).
/// Unreadable files add nothing (applying them fails later with its own message).
std::set<std::string> paths_of_patch_files(const std::vector<std::string>& patch_files);

/// "" when every hard-linked file of `copy` under `dest` still has the size and modification
/// time it had when linked; else the first that differs, e.g. "workload file 'data/x.bin' changed
/// while the trial ran (size 10 -> 14 bytes); it is a hard link to the original, so the original
/// changed too: list it under workload.writable". A linked file the trial removed or replaced
/// (a new inode: rename over it) left the original alone and passes.
std::string written_through(const workload_copy& copy, const std::string& dest);

/// The directory name of one attempt under a node's trials directory: "trial-<id>-<attempt>".
std::string trial_dir_name(std::uint64_t trial_id, std::uint32_t attempt);

/// What remove_trial_copies did.
struct removed_copies {
  /// Copies removed (a `workdir` that existed), and the bytes their own files held (hard links
  /// to the workload free nothing and are not counted).
  std::uint64_t copies = 0;
  std::uint64_t bytes = 0;
  /// The first failure, e.g. "trial-3-0/workdir: Permission denied" ("" when none).
  std::string error;
};

/// Removes the copies of the workload of each attempt (`trials_dir`/trial-<id>-<attempt>/workdir,
/// and the smoke probe's smoke-unpatched/workdir and smoke-patched/workdir, left there when the
/// attempt was interrupted during its probe); the attempt's logs and result beside them stay. An
/// absent copy is skipped. Never throws; a failure is reported in `error` and the rest are still
/// tried.
removed_copies
remove_trial_copies(const std::string& trials_dir,
                    const std::vector<std::pair<std::uint64_t, std::uint32_t>>& attempts);

} // namespace infrarsi::adapters
