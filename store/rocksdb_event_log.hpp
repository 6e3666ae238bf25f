#pragma once
/// @file rocksdb_event_log.hpp
/// The durable event_log: a RocksDB database in one directory, layout in store/FORMAT.md.
/// One process writes a log at a time (RocksDB's LOCK file; the OS releases it when the holder
/// dies, so a kill -9 never leaves a lock that blocks a restart). Any number of processes may
/// open it read-only at the same time, and see the log as of their open.

#include <memory>
#include <mutex>
#include <string>

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
};

/// event_log stored in RocksDB (column families "events", "streams", "runs"; FORMAT.md).
class rocksdb_event_log final : public event_log {
public:
  /// Opens (or creates) the log in directory `dir`.
  /// Errors: errc::store_locked (another process writes it), errc::not_found (no log and
  /// create_if_missing false, or read_only), errc::unsupported_format (a RocksDB database that
  /// is not an infrarsi event log, or another format version), errc::corrupt_data,
  /// errc::io_error. Every message names `dir`.
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
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;   // "default"
  rocksdb::ColumnFamilyHandle* events_cf_ = nullptr; // global position -> EventRecord
  rocksdb::ColumnFamilyHandle* streams_cf_ = nullptr; // run \0 sequence -> global position
  rocksdb::ColumnFamilyHandle* runs_cf_ = nullptr;   // run -> count, first, last position
  mutable std::mutex append_mtx_;                    // serializes appends (check + write)
  std::uint64_t head_ = 0;                           // guarded by append_mtx_
};

} // namespace infrarsi::store
