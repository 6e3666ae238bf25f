#pragma once
/// @file disk_space.hpp
/// Free space of the directories a run writes (the store, the trial directories), checked
/// against a reserve before a stage and before each trial (docs/tune.md "Disk space"): a run
/// that would fill its disk stops cleanly with errc::io_error naming the directory, the free
/// bytes and the reserve, instead of failing half-way through a write.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace infrarsi::adapters {

/// Default reserve of `infrarsi tune --disk-reserve`: 64 MiB, room for the event log's
/// write-ahead log and a flush of its memtable (RocksDB's default write buffer is 64 MiB).
inline constexpr std::uint64_t default_disk_reserve_bytes = 64ull << 20;

/// Bytes an unprivileged writer may still use on the file system holding `dir`
/// (statvfs(3): f_bavail * f_frsize). When `dir` does not exist yet, its nearest existing
/// ancestor is asked (the directory will be created on that file system).
/// Error: errc::io_error naming `dir` and the system's reason.
[[nodiscard]] caf::expected<std::uint64_t> free_bytes(const std::string& dir);

/// caf::none when every directory of `dirs` has at least `reserve_bytes` free (reserve 0: no
/// check); else errc::io_error for the first that has less: "no space: directory 'D' has N
/// bytes free, below the reserve of R bytes (infrarsi tune --disk-reserve)". An error of
/// free_bytes passes through.
[[nodiscard]] caf::error check_free_space(const std::vector<std::string>& dirs,
                                          std::uint64_t reserve_bytes);

/// "directory 'D': N bytes free, reserve R bytes" (or the free_bytes error's text), for messages
/// about a write that failed.
[[nodiscard]] std::string free_space_note(const std::string& dir, std::uint64_t reserve_bytes);

} // namespace infrarsi::adapters
