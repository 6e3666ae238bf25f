#include "store/rocksdb_event_log.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include <flatbuffers/flatbuffers.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

namespace infrarsi::store {

namespace {

constexpr const char* events_cf_name = "events";
constexpr const char* streams_cf_name = "streams";
constexpr const char* runs_cf_name = "runs";
constexpr const char* snapshots_cf_name = "snapshots";
constexpr const char* format_key = "format";

// -- key encoding (FORMAT.md) ------------------------------------------------------------------

void put_be64(std::string& out, std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xFF));
}

std::uint64_t get_be64(std::string_view in) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i)
    v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

std::string position_key(std::uint64_t position) {
  std::string key;
  put_be64(key, position);
  return key;
}

std::string stream_prefix(std::string_view run_id) {
  std::string key{run_id};
  key.push_back('\0');
  return key;
}

std::string stream_key(std::string_view run_id, std::uint64_t sequence) {
  auto key = stream_prefix(run_id);
  put_be64(key, sequence);
  return key;
}

std::string run_meta_value(std::uint64_t count, std::uint64_t first, std::uint64_t last) {
  std::string v;
  put_be64(v, count);
  put_be64(v, first);
  put_be64(v, last);
  return v;
}

std::string_view as_view(const rocksdb::Slice& s) {
  return {s.data(), s.size()};
}

std::uint32_t get_be32(std::string_view in) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i)
    v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

void put_be32(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xFF));
}

// Snapshot value (FORMAT.md): covered u64 BE, CRC-32 u32 BE of the rest, format length u8,
// format bytes, snapshot bytes.
constexpr std::size_t snapshot_header_size = 8 + 4 + 1;

std::string snapshot_value(std::uint64_t covered, std::string_view format,
                           std::string_view bytes) {
  std::string rest;
  rest.reserve(1 + format.size() + bytes.size());
  rest.push_back(static_cast<char>(format.size()));
  rest.append(format);
  rest.append(bytes);
  std::string v;
  v.reserve(12 + rest.size());
  put_be64(v, covered);
  put_be32(v, messages::crc32_of(rest));
  v.append(rest);
  return v;
}

// -- write-ahead-log recovery messages ----------------------------------------------------------

/// A rocksdb::Logger that keeps only RocksDB's WAL recovery reports ("<file>: dropping N bytes;
/// <status>", logged by DBImpl::RecoverLogFiles' LogReporter) and writes nothing anywhere.
class recovery_capture_logger final : public rocksdb::Logger {
public:
  recovery_capture_logger() : rocksdb::Logger(rocksdb::InfoLogLevel::DEBUG_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel, const char* format, va_list ap) override {
    char buf[2048];
    va_list copy;
    va_copy(copy, ap);
    int n = std::vsnprintf(buf, sizeof buf, format, copy);
    va_end(copy);
    if (n < 0)
      return;
    std::string line{buf, std::min(static_cast<std::size_t>(n), sizeof buf - 1)};
    if (line.find(": dropping ") == std::string::npos)
      return;
    std::lock_guard<std::mutex> guard{mtx_};
    if (lines_.size() < 64) // a bound: strict recovery stops after the first bad record
      lines_.push_back(std::move(line));
  }

  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return lines_;
  }

private:
  mutable std::mutex mtx_;
  std::vector<std::string> lines_;
};

/// RocksDB's info log for a writable open: lines go to `<dir>/LOG` (the previous one renamed
/// `LOG.old`), at most info_log_max_bytes per open; a failed write (ENOSPC on a full disk, EIO)
/// is dropped, counted and never retried, so the log's own diagnostics can never abort or fail
/// the process (RocksDB's PosixLogger asserts when it cannot write). Swallowed on purpose: the
/// LOG is a diagnostic aid, every fact is in the events.
class tolerant_file_logger final : public rocksdb::Logger {
public:
  static constexpr std::size_t info_log_max_bytes = 4u << 20;

  explicit tolerant_file_logger(const std::string& dir)
    : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL) {
    auto path = dir + "/LOG";
    static_cast<void>(std::rename(path.c_str(), (path + ".old").c_str())); // may not exist
    file_ = std::fopen(path.c_str(), "w");
  }
  ~tolerant_file_logger() override {
    if (file_ != nullptr)
      static_cast<void>(std::fclose(file_)); // swallowed: see the class comment
  }
  tolerant_file_logger(const tolerant_file_logger&) = delete;
  tolerant_file_logger& operator=(const tolerant_file_logger&) = delete;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char buf[1024];
    va_list copy;
    va_copy(copy, ap);
    int n = std::vsnprintf(buf, sizeof buf - 1, format, copy);
    va_end(copy);
    if (n < 0)
      return;
    std::size_t len = std::min(static_cast<std::size_t>(n), sizeof buf - 2);
    if (len == 0 || buf[len - 1] != '\n')
      buf[len++] = '\n';
    std::lock_guard<std::mutex> guard{mtx_};
    if (file_ == nullptr || failed_ || written_ + len > info_log_max_bytes)
      return;
    if (std::fwrite(buf, 1, len, file_) != len || std::fflush(file_) != 0) {
      failed_ = true; // dropped: a full disk must not stop the log's writer
      return;
    }
    written_ += len;
  }

private:
  std::mutex mtx_;
  std::FILE* file_ = nullptr;
  std::size_t written_ = 0;
  bool failed_ = false;
};

/// Sum of N over "dropping N bytes" in RocksDB's recovery messages.
std::uint64_t dropped_bytes_of(const std::vector<std::string>& lines) {
  std::uint64_t total = 0;
  for (const auto& line : lines) {
    auto at = line.find(": dropping ");
    if (at == std::string::npos)
      continue;
    auto p = at + std::string_view{": dropping "}.size();
    std::uint64_t n = 0;
    bool digits = false;
    while (p < line.size() && line[p] >= '0' && line[p] <= '9') {
      n = n * 10 + static_cast<std::uint64_t>(line[p] - '0');
      digits = true;
      ++p;
    }
    if (digits && line.compare(p, 6, " bytes") == 0)
      total += n;
  }
  return total;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) {
    if (!out.empty())
      out.push_back('\n');
    out.append(l);
  }
  return out;
}

/// Result of replaying the write-ahead log read-only in kAbsoluteConsistency mode.
struct tail_probe {
  rocksdb::Status status;          // OK: every WAL record complete
  std::vector<std::string> lines;  // RocksDB's "dropping N bytes" reports
};

/// Replays the WAL of the database in `dir` without writing anything (a read-only open, which
/// takes no lock) in kAbsoluteConsistency mode, where RocksDB reports an incomplete tail that
/// the log's own mode (kTolerateCorruptedTailRecords) drops silently.
tail_probe probe_wal_tail(const std::string& dir, rocksdb::DBOptions opts,
                          const std::vector<std::string>& families) {
  auto logger = std::make_shared<recovery_capture_logger>();
  opts.info_log = logger;
  opts.create_if_missing = false;
  opts.create_missing_column_families = false;
  opts.wal_recovery_mode = rocksdb::WALRecoveryMode::kAbsoluteConsistency;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (const auto& name : families)
    cfs.emplace_back(name, rocksdb::ColumnFamilyOptions{});
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  tail_probe probe;
  probe.status = rocksdb::DB::OpenForReadOnly(opts, dir, cfs, &handles, &raw);
  if (raw != nullptr) {
    for (auto* h : handles)
      static_cast<void>(raw->DestroyColumnFamilyHandle(h)); // swallowed: read-only probe
    static_cast<void>(raw->Close());                        // swallowed: read-only probe
    delete raw;
  }
  probe.lines = logger->lines();
  return probe;
}

/// The position before `pos` as text ("(none)" when `pos` is 0).
std::string last_good(std::uint64_t pos) {
  return pos > 0 ? std::to_string(pos - 1) : std::string{"(none)"};
}

/// The context text of an infrarsi error (its message without the code's name).
std::string describe_context(const caf::error& err) {
  auto text = describe(err);
  auto colon = text.find(": ");
  return colon == std::string::npos ? text : text.substr(colon + 2);
}

/// Events that survive in the database in `dir` when its write-ahead log is replayed only up to
/// its first damaged record (a read-only open in kPointInTimeRecovery mode, which writes nothing
/// and takes no lock): the head of the intact prefix, or nothing when even that open fails.
std::optional<std::uint64_t> intact_prefix_head(const std::string& dir, rocksdb::DBOptions opts,
                                                const std::vector<std::string>& families) {
  opts.info_log = std::make_shared<recovery_capture_logger>(); // silent
  opts.create_if_missing = false;
  opts.create_missing_column_families = false;
  opts.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (const auto& name : families)
    cfs.emplace_back(name, rocksdb::ColumnFamilyOptions{});
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  auto st = rocksdb::DB::OpenForReadOnly(opts, dir, cfs, &handles, &raw);
  std::optional<std::uint64_t> head;
  if (st.ok() && raw != nullptr) {
    for (std::size_t i = 0; i < families.size(); ++i)
      if (families[i] == events_cf_name) {
        std::unique_ptr<rocksdb::Iterator> it{raw->NewIterator(rocksdb::ReadOptions{}, handles[i])};
        it->SeekToLast();
        if (it->Valid() && it->key().size() == 8)
          head = get_be64(as_view(it->key())) + 1;
        else if (!it->Valid() && it->status().ok())
          head = 0;
      }
  }
  if (raw != nullptr) {
    for (auto* h : handles)
      static_cast<void>(raw->DestroyColumnFamilyHandle(h)); // swallowed: read-only probe
    static_cast<void>(raw->Close());                        // swallowed: read-only probe
    delete raw;
  }
  return head;
}

/// The pid of another process holding the writer lock of the database in `dir` (RocksDB's
/// fcntl lock on `dir`/LOCK), or 0 when none does (a lock of this process reads as none).
pid_t lock_holder(const std::string& dir) {
  int fd = ::open((dir + "/LOCK").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  struct flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  pid_t holder = 0;
  if (::fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK)
    holder = fl.l_pid;
  ::close(fd);
  return holder;
}

/// Whether the default column family of the database in `dir` holds no key at all (a database
/// whose creation stopped before its column families were made), read-only; false if it cannot
/// be read.
bool default_family_empty(const std::string& dir) {
  rocksdb::Options opts;
  opts.info_log = std::make_shared<recovery_capture_logger>(); // silent
  rocksdb::DB* raw = nullptr;
  if (!rocksdb::DB::OpenForReadOnly(opts, dir, &raw).ok() || raw == nullptr)
    return false;
  bool empty = false;
  {
    std::unique_ptr<rocksdb::Iterator> it{raw->NewIterator(rocksdb::ReadOptions{})};
    it->SeekToFirst();
    empty = !it->Valid() && it->status().ok();
  }
  static_cast<void>(raw->Close()); // swallowed: read-only probe
  delete raw;
  return empty;
}

/// Whether `dir` holds only what RocksDB's creation of a database writes before its CURRENT file
/// (LOCK, our info log LOG, IDENTITY, the first MANIFEST and CURRENT's temporary file), and at
/// least one of them: a creation stopped (a process killed at start-up) before the database
/// existed. Anything else (a user's file, a write-ahead log, an SST, OPTIONS) is not.
bool only_files_before_current(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  bool any = false;
  for (const auto& e : fs::directory_iterator{dir, ec}) {
    const auto name = e.path().filename().string();
    const bool before_current = name == "LOCK" || name == "LOG" || name.rfind("LOG.old.", 0) == 0
                                || name == "IDENTITY" || name.rfind("MANIFEST-", 0) == 0
                                || (name.size() > 6 && name.substr(name.size() - 6) == ".dbtmp");
    if (!before_current || !e.is_regular_file(ec))
      return false;
    any = true;
  }
  return any && !ec;
}

/// errc::not_found for a log that is being created (or whose creation was interrupted): it is
/// not foreign, it has no event yet.
caf::error being_created(const std::string& dir, const std::string& what) {
  auto holder = lock_holder(dir);
  return make_error(errc::not_found,
                    "event log '" + dir + "': being created, no event yet (" + what + "; "
                      + (holder != 0 ? "process " + std::to_string(holder)
                                         + " holds its writer lock: retry in a moment"
                                     : std::string{"no process holds its writer lock: its "
                                                   "creation was interrupted, and the next "
                                                   "`infrarsi tune` on this store completes it"})
                      + ")");
}

// -- rocksdb::Status -> errc at the border ------------------------------------------------------

caf::error from_status(const rocksdb::Status& st, const std::string& dir, const char* op) {
  auto text = "event log '" + dir + "': " + op + ": " + st.ToString();
  if (st.IsCorruption())
    return make_error(errc::corrupt_data, std::move(text));
  if (st.IsNotSupported())
    return make_error(errc::unsupported_format, std::move(text));
  if (st.IsBusy() || st.IsTimedOut()
      || (st.IsIOError() && st.ToString().find("/LOCK") != std::string::npos))
    return make_error(errc::store_locked,
                      std::move(text) + " (another process has it open for writing)");
  if (st.IsInvalidArgument() && st.ToString().find("does not exist") != std::string::npos)
    return make_error(errc::not_found, std::move(text));
  if (st.IsPathNotFound() || st.IsNotFound())
    return make_error(errc::not_found, std::move(text));
  return make_error(errc::io_error, std::move(text));
}

} // namespace

rocksdb_event_log::rocksdb_event_log(std::string dir, rocksdb_event_log_options options)
  : dir_(std::move(dir)), options_(options) {
}

rocksdb_event_log::~rocksdb_event_log() {
  if (!db_)
    return;
  for (auto* cf : handles_)
    static_cast<void>(db_->DestroyColumnFamilyHandle(cf)); // swallowed: nothing to do on close
  static_cast<void>(db_->Close()); // swallowed: every acknowledged write is already in the WAL
}

caf::expected<std::unique_ptr<rocksdb_event_log>>
rocksdb_event_log::open(const std::string& dir, const rocksdb_event_log_options& options) {
  std::unique_ptr<rocksdb_event_log> log{new rocksdb_event_log(dir, options)};
  namespace fs = std::filesystem;

  rocksdb::Options db_opts;
  db_opts.create_if_missing = options.create_if_missing && !options.read_only;
  db_opts.paranoid_checks = true;
  db_opts.keep_log_file_num = 4;
  db_opts.max_file_opening_threads = 1;
  // A torn tail (an incomplete last record from a crash) is dropped; corruption anywhere else in
  // the write-ahead log fails the open instead of silently losing acknowledged events.
  db_opts.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  // Flush column families that pin old write-ahead logs (the metadata family is written once),
  // so log files do not accumulate.
  db_opts.max_total_wal_size = 64u << 20;

  // Does a database exist here? If so it must hold our column families ("snapshots" may be
  // missing in a log created before snapshots existed; families of newer builds are opened and
  // left alone).
  std::vector<std::string> existing;
  auto list = rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions{db_opts}, dir, &existing);
  bool exists = list.ok();
  if (!exists) {
    std::error_code ec;
    bool looks_like_db = fs::exists(fs::path{dir} / "CURRENT", ec)
                         || fs::exists(fs::path{dir} / "IDENTITY", ec);
    if (!looks_like_db && fs::is_directory(dir, ec))
      for (const auto& e : fs::directory_iterator{dir, ec})
        looks_like_db = looks_like_db || e.path().filename().string().rfind("MANIFEST-", 0) == 0;
    // Only RocksDB's first files, no CURRENT: a creation stopped before the database existed
    // (a `tune` killed at start-up, issue 20); the next writer creates it.
    const bool stopped_creation = only_files_before_current(dir);
    if ((looks_like_db || stopped_creation) && lock_holder(dir) != 0)
      return being_created(dir, "RocksDB has not yet written its CURRENT file");
    if (stopped_creation && (options.read_only || !options.create_if_missing))
      return being_created(dir, "RocksDB had not yet written its CURRENT file");
    if (looks_like_db && !stopped_creation)
      return make_error(errc::corrupt_data,
                        "event log '" + dir
                          + "': looks like a damaged RocksDB database (its CURRENT/MANIFEST "
                            "cannot be read): "
                          + list.ToString());
    if (options.read_only || !options.create_if_missing) {
      if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
        return make_error(errc::not_found, "event log '" + dir + "': not a directory");
      return make_error(errc::not_found, "event log '" + dir + "': no event log in this directory");
    }
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
      return make_error(errc::invalid_argument,
                        "event log '" + dir + "': exists and is not a directory");
    if (fs::exists(dir, ec) && !fs::is_empty(dir, ec) && !stopped_creation)
      return make_error(errc::unsupported_format,
                        "event log '" + dir
                          + "': directory is not empty and holds no RocksDB database; refusing "
                            "to create an event log there");
    db_opts.create_missing_column_families = true;
  } else {
    // Some of our column families missing, no family of anyone else's, and the default family
    // empty (no format tag): RocksDB has made the database and the creating open has not yet
    // added all our families (or was stopped before it did). RocksDB adds them one at a time,
    // one MANIFEST record each, so a kill can leave any prefix of them: "default" alone, or
    // "default" and "events" (a `tune` killed at start-up, issue 20).
    const auto is_ours = [](const std::string& name) {
      return name == rocksdb::kDefaultColumnFamilyName || name == events_cf_name
             || name == streams_cf_name || name == runs_cf_name || name == snapshots_cf_name;
    };
    const auto missing = [&existing](const char* name) {
      return std::find(existing.begin(), existing.end(), name) == existing.end();
    };
    if ((missing(events_cf_name) || missing(streams_cf_name) || missing(runs_cf_name))
        && std::all_of(existing.begin(), existing.end(), is_ours) && default_family_empty(dir)) {
      if (options.read_only || !options.create_if_missing)
        return being_created(dir, existing.size() == 1 ? "no column families yet"
                                                       : "not all its column families yet");
      db_opts.create_missing_column_families = true; // complete an interrupted creation
    }
    for (const char* name : {events_cf_name, streams_cf_name, runs_cf_name}) {
      if (!db_opts.create_missing_column_families
          && std::find(existing.begin(), existing.end(), name) == existing.end())
        return make_error(errc::unsupported_format,
                          "event log '" + dir
                            + "': a RocksDB database but not an infrarsi event log (no column "
                              "family '"
                            + name + "')");
    }
  }
  bool has_snapshots =
    !exists || std::find(existing.begin(), existing.end(), snapshots_cf_name) != existing.end();
  if (!has_snapshots && !options.read_only)
    db_opts.create_missing_column_families = true; // adds "snapshots" to an older log

  // The families to open: ours in a fixed order, then any others (a newer build's), untouched.
  std::vector<std::string> families{rocksdb::kDefaultColumnFamilyName, events_cf_name,
                                    streams_cf_name, runs_cf_name};
  if (has_snapshots || !options.read_only)
    families.emplace_back(snapshots_cf_name);
  for (const auto& name : existing)
    if (std::find(families.begin(), families.end(), name) == families.end())
      families.push_back(name);
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (const auto& name : families)
    cfs.emplace_back(name, rocksdb::ColumnFamilyOptions{});

  // RocksDB's own info log (PosixLogger) aborts the process when it cannot write its LOG file
  // (a full disk); ours drops what it cannot write. Read-only opens write no LOG; without
  // options.info_log, nothing is logged.
  if (options.read_only || !options.info_log) {
    db_opts.info_log = std::make_shared<recovery_capture_logger>(); // writes nothing
  } else {
    std::error_code ec;
    fs::create_directories(dir, ec); // RocksDB would create it; the LOG goes in first
    db_opts.info_log = std::make_shared<tolerant_file_logger>(dir);
  }

  // A torn tail is dropped silently by the open below; find out first whether there is one.
  tail_probe tail;
  if (exists)
    tail = probe_wal_tail(dir, rocksdb::DBOptions{db_opts}, existing);

  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status st;
  // The kernel releases a killed writer's lock a moment after it dies: retry briefly (2 s).
  for (int attempt = 0; attempt < 20; ++attempt) {
    handles.clear();
    if (options.read_only)
      st = rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions{db_opts}, dir, cfs, &handles, &raw);
    else
      st = rocksdb::DB::Open(rocksdb::DBOptions{db_opts}, dir, cfs, &handles, &raw);
    if (st.ok() || !(st.IsIOError() && st.ToString().find("LOCK") != std::string::npos))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!st.ok()) {
    if (st.IsCorruption() && exists) {
      // The last good global position: what a replay up to the first damaged WAL record keeps.
      auto head = intact_prefix_head(dir, rocksdb::DBOptions{db_opts}, existing);
      std::string good = !head ? std::string{"unknown (the intact prefix cannot be opened either)"}
                         : *head == 0 ? std::string{"(none): no event precedes the damage"}
                                      : std::to_string(*head - 1);
      return make_error(errc::corrupt_data,
                        "event log '" + dir + "': open: " + st.ToString()
                          + (tail.lines.empty()
                               ? std::string{}
                               : " (RocksDB's write-ahead-log recovery reported: "
                                   + join_lines(tail.lines) + ")")
                          + "; last good global position " + good);
    }
    return from_status(st, dir, "open");
  }
  log->db_.reset(raw);
  log->handles_ = handles;
  log->meta_cf_ = handles[0];
  log->events_cf_ = handles[1];
  log->streams_cf_ = handles[2];
  log->runs_cf_ = handles[3];
  if (families.size() > 4 && families[4] == snapshots_cf_name)
    log->snapshots_cf_ = handles[4];

  // What recovery dropped: the open above succeeded, so anything the strict replay reported was
  // a tail that the tolerant replay dropped (the two differ only in their WAL recovery mode).
  auto& rec = log->recovery_;
  if (!exists || tail.status.ok()) {
    rec.tail_checked = true;
  } else if (tail.status.IsCorruption()) {
    rec.tail_checked = true;
    rec.tail_dropped = true;
    rec.dropped_bytes = dropped_bytes_of(tail.lines);
    rec.message = tail.lines.empty() ? tail.status.ToString() : join_lines(tail.lines);
  } else {
    rec.message = "write-ahead-log tail not checked: read-only replay failed: "
                  + tail.status.ToString();
  }

  // Format tag: written on creation, checked on every open.
  std::string tag;
  st = log->db_->Get(rocksdb::ReadOptions{}, log->meta_cf_, format_key, &tag);
  if (st.IsNotFound()) {
    // Our column families but no tag: either a log whose creation was interrupted before the tag
    // was written (then it holds no event and is completed here), or a damaged one.
    std::unique_ptr<rocksdb::Iterator> probe{
      log->db_->NewIterator(rocksdb::ReadOptions{}, log->events_cf_)};
    probe->SeekToFirst();
    bool has_events = probe->Valid();
    if (exists && has_events)
      return make_error(errc::corrupt_data,
                        "event log '" + dir
                          + "': events but no format tag (a damaged event log whose "
                            "write-ahead log is missing)");
    if (exists && options.read_only)
      return being_created(dir, "its column families exist, its format tag not yet");
    rocksdb::WriteOptions wo;
    wo.sync = true;
    st = log->db_->Put(wo, log->meta_cf_, format_key, format_tag);
    if (!st.ok())
      return from_status(st, dir, "write format tag");

  } else if (!st.ok()) {
    return from_status(st, dir, "read format tag");
  } else if (tag != format_tag) {
    return make_error(errc::unsupported_format, "event log '" + dir + "': format '" + tag
                                                  + "', this build reads '" + format_tag + "'");
  }

  // Head: one past the last global position.
  std::unique_ptr<rocksdb::Iterator> it{log->db_->NewIterator(rocksdb::ReadOptions{},
                                                              log->events_cf_)};
  it->SeekToLast();
  if (it->Valid()) {
    if (it->key().size() != 8)
      return make_error(errc::corrupt_data, "event log '" + dir + "': malformed event key of "
                                              + std::to_string(it->key().size()) + " bytes");
    log->head_ = get_be64(as_view(it->key())) + 1;
  } else if (!it->status().ok()) {
    return from_status(it->status(), dir, "find head");
  }
  rec.head = log->head_;
  rec.last_sequence = log->db_->GetLatestSequenceNumber();
  return log;
}

caf::error rocksdb_event_log::read_run_meta(std::string_view run_id, run_info& out,
                                            bool& found) const {
  std::string value;
  auto st = db_->Get(rocksdb::ReadOptions{}, runs_cf_, rocksdb::Slice{run_id.data(), run_id.size()},
                     &value);
  if (st.IsNotFound()) {
    found = false;
    return caf::none;
  }
  if (!st.ok())
    return from_status(st, dir_, "read run");
  if (value.size() != 24)
    return make_error(errc::corrupt_data, "event log '" + dir_ + "': run '" + std::string{run_id}
                                            + "': metadata of " + std::to_string(value.size())
                                            + " bytes, expected 24");
  found = true;
  out.run_id = std::string{run_id};
  out.event_count = get_be64(std::string_view{value}.substr(0, 8));
  out.first_global_position = get_be64(std::string_view{value}.substr(8, 8));
  out.last_global_position = get_be64(std::string_view{value}.substr(16, 8));
  return caf::none;
}

caf::expected<append_result> rocksdb_event_log::append(std::string_view run_id,
                                                       std::uint64_t expected_version,
                                                       const std::vector<new_event>& events) {
  if (options_.read_only)
    return make_error(errc::not_permitted, "event log '" + dir_ + "' is open read-only");
  if (auto err = validate_batch(run_id, events))
    return err;
  auto now = wall_clock_ns();

  std::lock_guard<std::mutex> guard{append_mtx_};
  run_info meta;
  bool found = false;
  if (auto err = read_run_meta(run_id, meta, found))
    return err;
  std::uint64_t current = found ? meta.event_count : 0;
  if (auto err = check_expected_version(run_id, expected_version, current))
    return err;

  rocksdb::WriteBatch batch;
  flatbuffers::FlatBufferBuilder fbb(1024);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& ev = events[i];
    auto seq = current + i;
    auto pos = head_ + i;
    fbb.Clear();
    auto run = fbb.CreateString(run_id.data(), run_id.size());
    fbb.ForceVectorAlignment(ev.payload.size(), 1, 8);
    auto payload = fbb.CreateVector(ev.payload.data(), ev.payload.size());
    auto record = wire::CreateEventRecord(fbb, ev.kind, run, seq, pos, now, payload,
                                                    messages::crc32_of(ev.payload.view()));
    fbb.FinishSizePrefixed(record, messages::table_traits<wire::EventRecord>::identifier);
    auto key = position_key(pos);
    batch.Put(events_cf_, key,
              rocksdb::Slice{reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize()});
    batch.Put(streams_cf_, stream_key(run_id, seq), key);
  }
  auto first = found ? meta.first_global_position : head_;
  auto last = head_ + events.size() - 1;
  batch.Put(runs_cf_, rocksdb::Slice{run_id.data(), run_id.size()},
            run_meta_value(current + events.size(), first, last));

  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  auto st = db_->Write(wo, &batch);
  if (!st.ok())
    return from_status(st, dir_, "append");
  append_result result{current, head_, current + events.size()};
  head_ += events.size();
  return result;
}

caf::expected<std::uint64_t> rocksdb_event_log::version(std::string_view run_id) const {
  if (auto err = validate_run_id(run_id))
    return err;
  run_info meta;
  bool found = false;
  if (auto err = read_run_meta(run_id, meta, found))
    return err;
  return found ? meta.event_count : std::uint64_t{0};
}

caf::expected<recorded_event>
rocksdb_event_log::decode_record(std::uint64_t position, std::string_view key_note,
                                 std::string_view value) const {
  auto where = [&] {
    return "event log '" + dir_ + "': event at global position " + std::to_string(position)
           + std::string{key_note} + ": ";
  };
  auto msg = messages::event_record_msg::decode(value.data(), value.size());
  if (!msg)
    return make_error(errc::corrupt_data, where() + describe(msg.error()));
  const auto& rec = *msg->get();
  if (rec.global_position() != position)
    return make_error(errc::corrupt_data, where() + "record says global position "
                                            + std::to_string(rec.global_position()));
  recorded_event ev;
  ev.kind = rec.kind();
  ev.run_id = rec.run_id()->str();
  ev.sequence = rec.sequence();
  ev.global_position = position;
  ev.recorded_at_ns = rec.recorded_at_ns();
  if (const auto* p = rec.payload(); p != nullptr && p->size() > 0)
    ev.payload = messages::byte_buffer::copy_of(p->data(), p->size());
  return ev;
}

caf::error rocksdb_event_log::for_each(std::uint64_t from_position,
                                       const event_visitor& visit) const {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(ro, events_cf_)};
  auto expected_pos = from_position;
  for (it->Seek(position_key(from_position)); it->Valid(); it->Next()) {
    if (it->key().size() != 8)
      return make_error(errc::corrupt_data, "event log '" + dir_ + "': malformed event key after "
                                              "global position "
                                              + std::to_string(expected_pos));
    auto pos = get_be64(as_view(it->key()));
    if (pos != expected_pos)
      return make_error(errc::corrupt_data, "event log '" + dir_ + "': gap in the global order: "
                                              "expected position "
                                              + std::to_string(expected_pos) + ", found "
                                              + std::to_string(pos));
    auto ev = decode_record(pos, "", as_view(it->value()));
    if (!ev)
      return make_error(errc::corrupt_data, describe_context(ev.error())
                                              + "; last good global position "
                                              + last_good(pos));
    if (!visit(*ev))
      return caf::none;
    ++expected_pos;
  }
  if (!it->status().ok())
    return from_status(it->status(), dir_,
                       ("iterate (reading global position " + std::to_string(expected_pos)
                        + "; last good global position " + last_good(expected_pos) + ")")
                         .c_str());
  return caf::none;
}

caf::error rocksdb_event_log::for_each_in_stream(std::string_view run_id,
                                                 std::uint64_t from_sequence,
                                                 const event_visitor& visit) const {
  if (auto err = validate_run_id(run_id))
    return err;
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  // One snapshot for the index scan and the point reads, so a concurrent append is either
  // wholly visible or not at all.
  const rocksdb::Snapshot* snap = db_->GetSnapshot();
  ro.snapshot = snap;
  struct release {
    rocksdb::DB* db;
    const rocksdb::Snapshot* s;
    ~release() { db->ReleaseSnapshot(s); }
  } releaser{db_.get(), snap};

  auto prefix = stream_prefix(run_id);
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(ro, streams_cf_)};
  auto expected_seq = from_sequence;
  std::string value;
  std::optional<std::uint64_t> good_pos; // global position of the last event read intact
  auto last_good_note = [&] {
    return "; the run's last good event: "
           + (good_pos ? "sequence " + std::to_string(expected_seq - 1) + " at global position "
                           + std::to_string(*good_pos)
                       : "none read from sequence " + std::to_string(from_sequence) + " on");
  };
  for (it->Seek(stream_key(run_id, from_sequence)); it->Valid(); it->Next()) {
    auto key = as_view(it->key());
    if (key.size() != prefix.size() + 8 || key.substr(0, prefix.size()) != prefix)
      break;
    auto seq = get_be64(key.substr(prefix.size()));
    auto note = " (run '" + std::string{run_id} + "' sequence " + std::to_string(seq) + ")";
    if (seq != expected_seq || it->value().size() != 8)
      return make_error(errc::corrupt_data, "event log '" + dir_ + "': stream index broken at"
                                              + note + ", expected sequence "
                                              + std::to_string(expected_seq));
    auto pos = get_be64(as_view(it->value()));
    auto st = db_->Get(ro, events_cf_, position_key(pos), &value);
    if (!st.ok())
      return st.IsNotFound()
               ? make_error(errc::corrupt_data, "event log '" + dir_ + "': index points to missing"
                                                  " event at global position "
                                                  + std::to_string(pos) + note)
               : from_status(st, dir_, ("read event at global position " + std::to_string(pos)
                                        + note + last_good_note())
                                         .c_str());
    auto ev = decode_record(pos, note, value);
    if (!ev)
      return make_error(errc::corrupt_data, describe_context(ev.error()) + last_good_note());
    if (ev->run_id != run_id || ev->sequence != seq)
      return make_error(errc::corrupt_data, "event log '" + dir_ + "': index mismatch at" + note);
    if (!visit(*ev))
      return caf::none;
    good_pos = pos;
    ++expected_seq;
  }
  if (!it->status().ok())
    return from_status(it->status(), dir_,
                       ("iterate stream of run '" + std::string{run_id} + "' (reading sequence "
                        + std::to_string(expected_seq) + last_good_note() + ")")
                         .c_str());
  return caf::none;
}

caf::expected<std::vector<run_info>> rocksdb_event_log::list_runs() const {
  std::vector<run_info> result;
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(rocksdb::ReadOptions{}, runs_cf_)};
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto value = as_view(it->value());
    if (value.size() != 24)
      return make_error(errc::corrupt_data, "event log '" + dir_ + "': run '"
                                              + std::string{as_view(it->key())}
                                              + "': malformed metadata");
    result.push_back({std::string{as_view(it->key())}, get_be64(value.substr(0, 8)),
                      get_be64(value.substr(8, 8)), get_be64(value.substr(16, 8))});
  }
  if (!it->status().ok())
    return from_status(it->status(), dir_, "list runs");
  return result;
}

std::uint64_t rocksdb_event_log::head() const {
  std::lock_guard<std::mutex> guard{append_mtx_};
  return head_;
}

caf::error rocksdb_event_log::write_snapshot(std::string_view run_id, std::uint64_t covered,
                                             std::string_view format, std::string_view bytes) {
  if (options_.read_only)
    return make_error(errc::not_permitted, "event log '" + dir_ + "' is open read-only");
  if (auto err = validate_snapshot(run_id, format))
    return err;
  auto current = version(run_id); // versions only grow: the check stays true after it is made
  if (!current)
    return std::move(current.error());
  if (auto err = check_snapshot_covered(run_id, covered, *current))
    return err;
  rocksdb::WriteOptions wo;
  wo.sync = false; // derived data: a crash may lose it, and readers then fold the whole stream
  auto st = db_->Put(wo, snapshots_cf_, rocksdb::Slice{run_id.data(), run_id.size()},
                     snapshot_value(covered, format, bytes));
  if (!st.ok())
    return from_status(st, dir_,
                       ("write snapshot of run '" + std::string{run_id} + "'").c_str());
  return caf::none;
}

caf::expected<std::optional<snapshot_record>>
rocksdb_event_log::read_snapshot(std::string_view run_id) const {
  if (auto err = validate_run_id(run_id))
    return err;
  if (snapshots_cf_ == nullptr) // a log from before snapshots, opened read-only
    return std::optional<snapshot_record>{};
  std::string value;
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  auto st = db_->Get(ro, snapshots_cf_, rocksdb::Slice{run_id.data(), run_id.size()}, &value);
  if (st.IsNotFound())
    return std::optional<snapshot_record>{};
  if (!st.ok())
    return from_status(st, dir_, ("read snapshot of run '" + std::string{run_id} + "'").c_str());
  auto bad = [&](const std::string& why) {
    return make_error(errc::corrupt_data, "event log '" + dir_ + "': snapshot of run '"
                                            + std::string{run_id} + "': " + why);
  };
  std::string_view v{value};
  if (v.size() < snapshot_header_size)
    return bad("value of " + std::to_string(v.size()) + " bytes, shorter than its "
               + std::to_string(snapshot_header_size) + "-byte header");
  auto rest = v.substr(12);
  if (get_be32(v.substr(8, 4)) != messages::crc32_of(rest))
    return bad("checksum mismatch");
  auto format_len = static_cast<unsigned char>(rest[0]);
  if (format_len == 0 || 1u + format_len > rest.size())
    return bad("format tag of " + std::to_string(format_len) + " bytes does not fit a value of "
               + std::to_string(v.size()) + " bytes");
  snapshot_record rec;
  rec.covered = get_be64(v.substr(0, 8));
  rec.format = std::string{rest.substr(1, format_len)};
  rec.bytes = std::string{rest.substr(1 + format_len)};
  return std::optional<snapshot_record>{std::move(rec)};
}

} // namespace infrarsi::store
