#pragma once
/// @file store_paths.hpp
/// Where a store's event log lives, and the one warning every reader prints about a damaged one.
/// A store directory (what `infrarsi tune --store` writes) holds events/, experience/ and runs/;
/// every command that reads a log accepts either the store directory or its events/ directory.

#include <filesystem>
#include <ostream>
#include <string>

#include "store/rocksdb_event_log.hpp"

namespace infrarsi::runtime {

/// The event-log directory for `dir`: `dir` itself when it is a RocksDB directory (it holds a
/// CURRENT file), else `dir`/events.
inline std::string events_dir_of(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path{dir} / "CURRENT", ec))
    return dir;
  return (fs::path{dir} / "events").string();
}

/// Prints a warning when opening the log found a torn or corrupted tail (read-only opens report
/// it but cannot repair it; `infrarsi tune --run` on the store does). Returns whether it did.
inline bool warn_if_damaged(const store::rocksdb_event_log& log, const std::string& dir,
                            const char* command, std::ostream& err) {
  const auto& rec = log.recovery();
  if (!rec.tail_dropped)
    return false;
  err << command << ": warning: the event log '" << dir << "' has a torn tail after global position "
      << (rec.head > 0 ? std::to_string(rec.head - 1) : std::string{"(none)"})
      << " (RocksDB: " << rec.message
      << "); showing what survived. `infrarsi tune TASK --store STORE --run RUN` recovers it.\n";
  return true;
}

} // namespace infrarsi::runtime
