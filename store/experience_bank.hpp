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
#include <optional>
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
/// (or none: banks written before issue 16 by direct puts; /1: keyed by local log position,
/// before federation) is discarded and rebuilt from the log.
inline constexpr const char* experience_index_format = "infrarsi-experience-index/2";

/// The stream (run id) of the event log that `infrarsi experience import` appends the
/// ExperienceImported events to. Not a tuning run: commands that resume or list runs skip it.
inline constexpr const char* imported_experience_stream = "experience-imported";

/// The provenance fields the bank adds to a finding's document (a finding must not use these
/// names): "origin" (cluster id), "origin_position" (the finding's global position in its
/// origin's log), "imported" (false: this store's own finding), and for the store's own
/// findings "position" (global log position, = origin_position) and "sequence" (stream
/// sequence). The finding itself is the record without them.
inline constexpr const char* experience_provenance_fields[] = {"origin", "origin_position",
                                                               "imported", "position",
                                                               "sequence"};

class experience_bank {
public:
  /// Opens (creating if missing) the index in `dir` over `log`, then catches up from the log.
  /// `cluster_id` is the store's own cluster id (adapters/cluster_identity.hpp): the origin of
  /// its ExperienceRecorded findings; an index folded under another id is rebuilt.
  /// `log` must outlive the bank. Errors: errc::invalid_argument (an empty cluster id, or one
  /// holding a NUL byte), errc::store_locked (another process holds the index),
  /// errc::io_error, and the log's errors (errc::corrupt_data naming the position).
  [[nodiscard]] static caf::expected<std::unique_ptr<experience_bank>>
  open(const std::string& dir, const event_log& log, const std::string& cluster_id);
  ~experience_bank();

  /// Folds the log's events from position() on, in log order, all written with the new
  /// position in one synced RocksDB batch. Idempotent.
  /// - ExperienceRecorded (this store's finding): record key (hardware, workload, own cluster
  ///   id, global position); value its document plus "origin" (own id), "origin_position" and
  ///   "position" (its global position), "sequence" (stream sequence), "imported": false.
  /// - ExperienceImported: key (hardware, workload, origin, origin_position); value the
  ///   finding plus "origin", "origin_position", "imported": true, and nothing local, so the
  ///   bytes do not depend on when it was imported. The first event of a key wins; one whose
  ///   origin is this store's own cluster is not folded (the store has the finding itself).
  /// Unreadable documents are counted (meta "skipped"), not folded.
  /// Errors: errc::io_error (the index), the log's errors; on error the index is unchanged.
  [[nodiscard]] caf::error catch_up();

  /// The store's own cluster id, as given to open().
  [[nodiscard]] const std::string& cluster_id() const noexcept { return cluster_id_; }

  /// The record of the finding (origin, origin_position), or nullopt when the bank has none.
  /// Errors: errc::io_error, errc::corrupt_data (a stored record that is not JSON).
  [[nodiscard]] caf::expected<std::optional<nlohmann::json>>
  lookup(const std::string& origin, std::uint64_t origin_position) const;

  /// The next global log position the index needs (= the log's head after a catch_up).
  [[nodiscard]] std::uint64_t position() const;

  /// Findings for this hardware and workload, best verified speedup first (ties: key order:
  /// origin cluster id, then origin position; among the store's own findings, log order).
  /// Errors: errc::io_error.
  [[nodiscard]] caf::expected<std::vector<nlohmann::json>> find(const std::string& hardware,
                                                                const std::string& workload) const;

  /// Every record in key order (hardware, workload, origin, origin position), each with its
  /// provenance fields. Errors: errc::io_error.
  [[nodiscard]] caf::expected<std::vector<nlohmann::json>> records() const;

  /// The records as bytes, for a content hash: every record in key order, each as decimal key
  /// length, ':', key, decimal value length, ':', value, '\n' (meta keys excluded). Two indexes
  /// folded from the same log give the same bytes, and so do two stores whose logs differ only
  /// in the order (or repetition) of imports of the same findings: imported records hold no
  /// local position. Errors: errc::io_error.
  [[nodiscard]] caf::expected<std::string> content() const;

private:
  experience_bank(std::string dir, rocksdb::DB* db, const event_log& log, std::string cluster_id);
  std::string dir_;
  std::string cluster_id_;
  std::unique_ptr<rocksdb::DB> db_;
  const event_log& log_;
  mutable std::mutex mutex_; // one catch_up at a time
};

/// Deletes the index in `dir` (if any) and rebuilds it from `log`; returns the rebuilt bank.
/// Errors as experience_bank::open.
[[nodiscard]] caf::expected<std::unique_ptr<experience_bank>>
rebuild_experience_bank(const std::string& dir, const event_log& log,
                        const std::string& cluster_id);

/// The finding of a bank record: `record` without its provenance fields
/// (experience_provenance_fields): what an experience pack carries.
[[nodiscard]] nlohmann::json experience_finding_of(const nlohmann::json& record);

} // namespace infrarsi::store
