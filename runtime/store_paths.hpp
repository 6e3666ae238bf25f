#pragma once
/// @file store_paths.hpp
/// Where a store's event log lives, and the one warning every reader prints about a damaged one.
/// A store directory (what `infrarsi tune --store` writes) holds events/, experience/ and runs/;
/// every command that reads a log accepts either the store directory or its events/ directory.

#include <filesystem>
#include <ostream>
#include <string>

#include "messages/errc.hpp"
#include "store/rocksdb_event_log.hpp"

namespace infrarsi::runtime {

/// The store every command uses without --store (tune, status, runs, log dump, replay, report):
/// .infrarsi in the current directory.
inline constexpr const char* default_store_dir = ".infrarsi";

/// Why `dir` holds no event log a reader can open ("" when it does): neither `dir` nor
/// `dir`/events is a RocksDB directory. The text names the directory and what to do.
inline std::string missing_store(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path{dir} / "CURRENT", ec) || fs::exists(fs::path{dir} / "events" / "CURRENT", ec))
    return {};
  std::string what = fs::exists(dir, ec) ? "'" + dir + "' holds no event log (no " + dir
                                               + "/events)"
                                         : "no store at '" + dir + "'";
  return what + "; `infrarsi tune TASK` writes its store in .infrarsi of the directory it runs "
                "in (or where --store says): give that directory with --store DIR";
}

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

/// Checks that the first `count` events of `run_id`'s stream are readable and intact: each is
/// read once through the stream index with RocksDB's block checksums verified
/// (ReadOptions::verify_checksums) and its record decoded (FlatBuffers verifier, payload CRC-32);
/// nothing is folded. This is how `status` checks the events a snapshot claims to cover and
/// `runs` the events a run's metadata counts, so a flipped byte in an SST file is seen even when
/// the answer comes from a snapshot. Cost: one point read and decode per event, about what a
/// fold costs (bench verify/stream: 100,000 events in 1.9 s on the loaded 2-core dev VM, a fold
/// 2.4 s; docs/event-log.md "Damaged stores"). Error: errc::corrupt_data or errc::io_error
/// naming the store, the first bad global position (with RocksDB's text: the file and byte
/// offset where it knows them) and the run's last good event, or "the stream ends after N of
/// the COUNT events".
[[nodiscard]] inline caf::error verify_events(const store::event_log& log,
                                              const std::string& run_id, std::uint64_t count) {
  if (count == 0)
    return caf::none;
  std::uint64_t read = 0;
  auto err = log.for_each_in_stream(run_id, 0, [&](const store::recorded_event&) {
    return ++read < count;
  });
  if (err)
    return err;
  if (read < count)
    return make_error(errc::corrupt_data, "run '" + run_id + "': the stream ends after "
                                            + std::to_string(read) + " of the "
                                            + std::to_string(count) + " events it should hold");
  return caf::none;
}

/// Prints the warning `status` and `runs` give for a run whose events do not verify
/// (verify_events): the store, the run and the error (which names the first bad position).
inline void warn_damaged_run(const std::string& dir, const std::string& run_id,
                             const char* claim, const caf::error& why, const char* command,
                             std::ostream& err) {
  err << command << ": warning: the event log '" << dir << "' is damaged: run '" << run_id
      << "': " << claim << " do not verify: " << describe(why)
      << ". What is shown for this run comes from data the log no longer backs; `infrarsi log "
         "dump "
      << run_id << " --store " << dir << "` prints the events that are still readable.\n";
}

} // namespace infrarsi::runtime
