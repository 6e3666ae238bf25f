#pragma once
/// @file rocksdb_event_log.hpp
/// The durable event_log: a RocksDB database in one directory, layout in store/FORMAT.md.
/// One process writes a log at a time (RocksDB's LOCK file; the OS releases it when the holder
/// dies, so a kill -9 never leaves a lock that blocks a restart). Any number of processes may
/// open it read-only at the same time, and see the log as of their open.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/event_log.hpp"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
} // namespace rocksdb

namespace infrarsi::store {

/// Options of a rocksdb_event_log. Every field states its default.
struct rocksdb_event_log_options {
  /// fsync the write-ahead log before append() returns, so an acknowledged event survives a
  /// power loss, not only a process crash. Default true (what the daemon and `tune` use);
  /// false trades that for ~100x append throughput (see bench/).
  bool sync_writes = true;
  /// Create the directory and an empty log when none exists. Default true; ignored when
  /// read_only.
  bool create_if_missing = true;
  /// Open without taking the writer lock; append() fails with errc::not_permitted.
  /// Default false.
  bool read_only = false;
  /// RocksDB's info log (its diagnostics, rocksdb::DBOptions::info_log). true (default): a
  /// writable open writes `<dir>/LOG` (the previous one kept as `LOG.old`), at most 4 MiB per
  /// open, through a logger of this log's own that drops a line it cannot write (ENOSPC, EIO)
  /// and writes nothing more after the first failure — RocksDB's own PosixLogger asserts and
  /// aborts the process when its LOG write fails on a full disk. false: no info log at all.
  /// Read-only opens never write one. Cost: one buffered write and fflush per line (RocksDB
  /// logs a few lines per flush or compaction).
  bool info_log = true;
};

/// What RocksDB's write-ahead-log (WAL) recovery did when a rocksdb_event_log was opened.
/// An append is one WAL record; a writer that dies while writing one leaves a *torn tail*: an
/// incomplete last record of an append that was never acknowledged. Opening drops it and the log
/// recovers to the last complete append; corruption anywhere else fails the open (corrupt_data).
///
/// RocksDB 7.x drops a torn tail silently in the recovery mode the log runs with
/// (kTolerateCorruptedTailRecords), so open() first replays the WAL read-only in
/// kAbsoluteConsistency mode, in which RocksDB reports every incomplete record through its info
/// log ("<wal file>: dropping <N> bytes; Corruption: truncated header"); those messages are
/// captured here verbatim. See docs/event-log.md ("Torn tails").
struct wal_recovery_report {
  /// The tail was checked (false only when the read-only check could not run; `message` then
  /// says why and `tail_dropped` is unknown).
  bool tail_checked = false;
  /// RocksDB dropped an incomplete or corrupted record at the end of the write-ahead log.
  bool tail_dropped = false;
  /// Bytes RocksDB said it dropped: the sum of N over its "dropping N bytes" messages (0 when
  /// nothing was dropped or RocksDB gave no count). RocksDB counts the partial record's
  /// fragments, which may be fewer than the file bytes after the last complete record (the
  /// 7-byte headers of complete fragments are not counted).
  std::uint64_t dropped_bytes = 0;
  /// RocksDB's messages about what it dropped, verbatim, one per line ("" when nothing was).
  std::string message;
  /// RocksDB's last sequence number after recovery (DB::GetLatestSequenceNumber): the newest
  /// write that survived. Internal to RocksDB; useful to correlate with its LOG file.
  std::uint64_t last_sequence = 0;
  /// Events in the log after recovery (= head() at open): global positions 0..head-1 survived,
  /// so the last good global position is head - 1 (none when head is 0).
  std::uint64_t head = 0;
};

/// event_log stored in RocksDB (column families "events", "streams", "runs", "snapshots";
/// FORMAT.md).
class rocksdb_event_log final : public event_log {
public:
  /// Opens (or creates) the log in directory `dir`, recovering a torn write-ahead-log tail (see
  /// wal_recovery_report and recovery()). A log created before snapshots existed gains the
  /// "snapshots" column family on its first writable open; read-only it has no snapshots.
  /// Errors: errc::store_locked (another process writes it), errc::not_found (no log and
  /// create_if_missing false, or read_only; also a log *being created*: RocksDB has made the
  /// database but the creating open has not yet added the column families or the format tag —
  /// the message says "being created" and names the process holding its writer lock, or says
  /// the creation was interrupted, which the next writable open completes),
  /// errc::unsupported_format (a RocksDB database that is not an infrarsi event log, or another
  /// format version), errc::corrupt_data (a damaged write-ahead log: RocksDB's report naming the
  /// WAL file, and the last good global position, found by replaying the WAL up to its first
  /// damaged record), errc::io_error. Every message names `dir`.
  [[nodiscard]] static caf::expected<std::unique_ptr<rocksdb_event_log>>
  open(const std::string& dir, const rocksdb_event_log_options& options = {});

  ~rocksdb_event_log() override;
  rocksdb_event_log(const rocksdb_event_log&) = delete;
  rocksdb_event_log& operator=(const rocksdb_event_log&) = delete;

  [[nodiscard]] caf::expected<append_result> append(std::string_view run_id,
                                                    std::uint64_t expected_version,
                                                    const std::vector<new_event>& events) override;
  [[nodiscard]] caf::expected<std::uint64_t> version(std::string_view run_id) const override;
  [[nodiscard]] caf::error for_each_in_stream(std::string_view run_id, std::uint64_t from_sequence,
                                              const event_visitor& visit) const override;
  [[nodiscard]] caf::error for_each(std::uint64_t from_position,
                                    const event_visitor& visit) const override;
  [[nodiscard]] caf::expected<std::vector<run_info>> list_runs() const override;
  [[nodiscard]] std::uint64_t head() const override;
  [[nodiscard]] caf::error write_snapshot(std::string_view run_id, std::uint64_t covered,
                                          std::string_view format,
                                          std::string_view bytes) override;
  [[nodiscard]] caf::expected<std::optional<snapshot_record>>
  read_snapshot(std::string_view run_id) const override;

  /// What write-ahead-log recovery did when this log was opened (read-only opens too). An audit
  /// or replay tool refuses a damaged log with `tail_dropped` and names `head - 1` as the last
  /// good global position. Beside a live writer (read-only open), an append still being written
  /// can look like a torn tail; reopen to tell the two apart.
  [[nodiscard]] const wal_recovery_report& recovery() const noexcept { return recovery_; }

  /// The directory this log lives in.
  [[nodiscard]] const std::string& path() const noexcept { return dir_; }

  /// Format tag stored under key "format" of the default column family.
  static constexpr const char* format_tag = "infrarsi-event-log/1";

private:
  rocksdb_event_log(std::string dir, rocksdb_event_log_options options);
  caf::error read_run_meta(std::string_view run_id, run_info& out, bool& found) const;
  caf::expected<recorded_event> decode_record(std::uint64_t position, std::string_view key_note,
                                              std::string_view value) const;

  std::string dir_;
  rocksdb_event_log_options options_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_; // every open family, closed with the log
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;   // "default"
  rocksdb::ColumnFamilyHandle* events_cf_ = nullptr; // global position -> EventRecord
  rocksdb::ColumnFamilyHandle* streams_cf_ = nullptr; // run \0 sequence -> global position
  rocksdb::ColumnFamilyHandle* runs_cf_ = nullptr;   // run -> count, first, last position
  rocksdb::ColumnFamilyHandle* snapshots_cf_ = nullptr; // run -> snapshot; null: none (old, RO)
  wal_recovery_report recovery_;
  mutable std::mutex append_mtx_;                    // serializes appends (check + write)
  std::uint64_t head_ = 0;                           // guarded by append_mtx_
};

} // namespace infrarsi::store
