#pragma once
/// @file experience_bank.hpp
/// The experience bank: verified findings (a configuration and its verified speedup), keyed by a
/// hardware fingerprint and a workload signature. It is a *projection* of the event log: each
/// finding is an ExperienceRecorded event (messages/event.fbs, appended in the same batch as the
/// CandidatePromoted that produced it), and the bank's RocksDB database (`experience/` in a
/// store) is a derived index that records the global log position it has read and catches up
/// from the log on open and on catch_up(). Deleting the index loses nothing: the next open
/// rebuilds it from the log, record for record (layout: store/FORMAT.md, "Experience bank").
/// One writer per index (RocksDB's LOCK); thread-safe: members may be called concurrently.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "store/event_log.hpp"

namespace rocksdb {
class DB;
}

namespace infrarsi::store {

/// Format tag of the index, stored under its meta key "m\0format". An index with another tag
/// (or none: banks written before issue 16 by direct puts) is discarded and rebuilt from the log.
inline constexpr const char* experience_index_format = "infrarsi-experience-index/1";

class experience_bank {
public:
  /// Opens (creating if missing) the index in `dir` over `log`, then catches up from the log.
  /// `log` must outlive the bank. Errors: errc::store_locked (another process holds the index),
  /// errc::io_error, and the log's errors (errc::corrupt_data naming the position).
  [[nodiscard]] static caf::expected<std::unique_ptr<experience_bank>> open(const std::string& dir,
                                                                            const event_log& log);
  ~experience_bank();

  /// Folds the log's events from position() on: every ExperienceRecorded becomes a record (its
  /// document plus "position": its global position and "sequence": its stream sequence), all
  /// written with the new position in one synced RocksDB batch. Idempotent.
  /// Errors: errc::io_error (the index), the log's errors; on error the index is unchanged.
  [[nodiscard]] caf::error catch_up();

  /// The next global log position the index needs (= the log's head after a catch_up).
  [[nodiscard]] std::uint64_t position() const;

  /// Findings for this hardware and workload, best verified speedup first (ties: log order).
  /// Errors: errc::io_error.
  [[nodiscard]] caf::expected<std::vector<nlohmann::json>> find(const std::string& hardware,
                                                                const std::string& workload) const;

  /// Every record in key order (hardware, workload, global position). Errors: errc::io_error.
  [[nodiscard]] caf::expected<std::vector<nlohmann::json>> records() const;

  /// The records as bytes, for a content hash: every record in key order, each as decimal key
  /// length, ':', key, decimal value length, ':', value, '\n' (meta keys excluded). Two indexes
  /// folded from the same log give the same bytes. Errors: errc::io_error.
  [[nodiscard]] caf::expected<std::string> content() const;

private:
  experience_bank(std::string dir, rocksdb::DB* db, const event_log& log);
  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  const event_log& log_;
  mutable std::mutex mutex_; // one catch_up at a time
};

/// Deletes the index in `dir` (if any) and rebuilds it from `log`; returns the rebuilt bank.
/// Errors as experience_bank::open.
[[nodiscard]] caf::expected<std::unique_ptr<experience_bank>>
rebuild_experience_bank(const std::string& dir, const event_log& log);

} // namespace infrarsi::store
