// RocksDB-specific behaviour of store/rocksdb_event_log.cpp: durability across processes (a
// writer killed with SIGKILL loses no acknowledged event), torn write-ahead-log tails (dropped
// back to the last complete event and reported), the writer lock, read-only opens, format
// checks, column families old and new, snapshots on disk and detection of corrupted records.

#include "store/rocksdb_event_log.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <random>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "store/run_projection.hpp"
#include "test_util.hpp"

extern char** environ;

namespace infrarsi::store {
namespace {

using test::sample_result;
using test::sample_spec;

new_event proposed(std::uint64_t trial) {
  return new_event::of(wire::EventKind::TrialProposed, sample_spec(trial));
}

new_event completed(std::uint64_t trial) {
  return new_event::of(wire::EventKind::TrialCompleted, sample_result(trial));
}

/// Runs `body` in a forked child process; returns the child's wait status. Only for a parent that
/// has not opened RocksDB yet (see run_self for the others).
template <class F>
int in_child_process(F body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int code = body();
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

int run_self(const std::string& env, const std::string& out);

/// What a child process started by run_self wrote to its stdout and stderr.
std::string child_output(const std::string& out) {
  std::ifstream in{out};
  return std::string{std::istreambuf_iterator<char>{in}, {}};
}

// Children that open a log while the parent holds RocksDB threads are started as new processes
// (run_self: posix_spawn of this test binary), never forked: a fork copies no thread, so a lock
// one of RocksDB's threads (or the sanitizer allocator) held at the fork stays held in the child
// for ever; under AddressSanitizer the store-lock test hung so.
constexpr const char* store_child_env = "INFRARSI_STORE_CHILD"; // "<role> <log path>"

/// The child's work: "reader" reads the three events the parent wrote and closed (exit 0, or
/// 20-22: what differed); "second-writer" opens the log the parent holds open for writing (exit
/// 0 if refused with store_locked, 30 if it opened, 31 for another error).
int run_store_child(const std::string& role, const std::string& path) {
  if (role == "reader") {
    rocksdb_event_log_options ro;
    ro.read_only = true;
    auto log = rocksdb_event_log::open(path, ro);
    if (!log)
      return 20;
    auto events = (*log)->read_stream("r");
    if (!events || events->size() != 3)
      return 21;
    if ((*events)[1].payload != sample_result(1).bytes())
      return 22;
    return 0;
  }
  if (role == "second-writer") {
    auto second = rocksdb_event_log::open(path);
    if (second)
      return 30;
    std::fprintf(stderr, "second writer: %s\n", describe(second.error()).c_str());
    return code_of(second.error()) == errc::store_locked ? 0 : 31;
  }
  return 99;
}

/// In the child (the environment variable set), does its work before any test and exits.
class store_child_environment : public ::testing::Environment {
public:
  void SetUp() override {
    const char* spec = std::getenv(store_child_env);
    if (spec == nullptr)
      return;
    std::string s{spec};
    auto space = s.find(' ');
    ::_exit(space == std::string::npos ? 98 : run_store_child(s.substr(0, space),
                                                              s.substr(space + 1)));
  }
};
[[maybe_unused]] ::testing::Environment* const store_child =
  ::testing::AddGlobalTestEnvironment(new store_child_environment);

TEST(RocksdbEventLog, AcknowledgedEventsSurviveAWriterKilledWithSigkill) {
  test::temp_dir dir;
  auto path = dir.sub("events");
  // The child appends 60 events with sync on, then dies by SIGKILL without closing the log.
  int status = in_child_process([&] {
    auto log = rocksdb_event_log::open(path);
    if (!log)
      return 10;
    for (std::uint64_t i = 0; i < 30; ++i) {
      if (!(*log)->append("run-a", i, {proposed(i)}))
        return 11;
      if (!(*log)->append("run-b", any_version, {completed(i)}))
        return 12;
    }
    ::raise(SIGKILL);
    return 13;
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  ASSERT_EQ(WTERMSIG(status), SIGKILL);

  auto log = rocksdb_event_log::open(path);
  ASSERT_TRUE(log) << describe(log.error());
  EXPECT_EQ((*log)->head(), 60u);
  EXPECT_EQ(*(*log)->version("run-a"), 30u);
  EXPECT_EQ(*(*log)->version("run-b"), 30u);
  auto a = (*log)->read_stream("run-a");
  ASSERT_TRUE(a) << describe(a.error());
  ASSERT_EQ(a->size(), 30u);
  for (std::uint64_t i = 0; i < 30; ++i) {
    EXPECT_EQ((*a)[i].payload, sample_spec(i).bytes());
    EXPECT_EQ((*a)[i].global_position, 2 * i);
  }
  // Appending continues at the recovered head and version.
  auto r = (*log)->append("run-a", 30, {proposed(30)});
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->first_global_position, 60u);
}

TEST(RocksdbEventLog, ANewProcessReadsWhatAnotherWroteAndClosed) {
  test::temp_dir dir;
  auto path = dir.sub("events");
  {
    auto log = rocksdb_event_log::open(path);
    ASSERT_TRUE(log) << describe(log.error());
    ASSERT_TRUE((*log)->append("r", 0, {proposed(1), completed(1), proposed(2)}));
  }
  int status = run_self(std::string{store_child_env} + "=reader " + path, dir.sub("child.out"));
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << child_output(dir.sub("child.out"));
}

TEST(RocksdbEventLog, ASecondWriterIsRefusedWithStoreLocked) {
  test::temp_dir dir;
  auto first = rocksdb_event_log::open(dir.sub("events"));
  ASSERT_TRUE(first);
  int status = run_self(std::string{store_child_env} + "=second-writer " + dir.sub("events"),
                        dir.sub("child.out"));
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << child_output(dir.sub("child.out"));
}

TEST(RocksdbEventLog, ReadOnlyOpenWorksBesideTheWriterAndCannotAppend) {
  test::temp_dir dir;
  auto writer = rocksdb_event_log::open(dir.sub("events"));
  ASSERT_TRUE(writer);
  ASSERT_TRUE((*writer)->append("r", 0, {proposed(1)}));
  rocksdb_event_log_options ro;
  ro.read_only = true;
  auto reader = rocksdb_event_log::open(dir.sub("events"), ro);
  ASSERT_TRUE(reader) << describe(reader.error());
  EXPECT_EQ(*(*reader)->version("r"), 1u);
  auto r = (*reader)->append("r", 1, {proposed(2)});
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::not_permitted);
}

TEST(RocksdbEventLog, MissingLogIsNotFoundWhenNotCreating) {
  test::temp_dir dir;
  rocksdb_event_log_options ro;
  ro.read_only = true;
  auto r = rocksdb_event_log::open(dir.sub("nope"), ro);
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::not_found);
  EXPECT_NE(describe(r.error()).find(dir.sub("nope")), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.sub("nope")));
}

TEST(RocksdbEventLog, RefusesADirectoryThatHoldsSomethingElse) {
  test::temp_dir dir;
  std::filesystem::create_directory(dir.sub("project"));
  std::ofstream{dir.sub("project") + "/train.py"} << "print('hi')\n";
  auto r = rocksdb_event_log::open(dir.sub("project"));
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::unsupported_format);
  EXPECT_TRUE(std::filesystem::exists(dir.sub("project") + "/train.py"));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("project") + "/CURRENT"));
}

TEST(RocksdbEventLog, RefusesAForeignRocksdbDatabase) {
  test::temp_dir dir;
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir.sub("other"), &raw).ok());
    ASSERT_TRUE(raw->Put(rocksdb::WriteOptions{}, "k", "v").ok());
    delete raw;
  }
  auto r = rocksdb_event_log::open(dir.sub("other"));
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::unsupported_format);
  EXPECT_NE(describe(r.error()).find("not an infrarsi event log"), std::string::npos)
    << describe(r.error());
}

/// Opens the raw database with all its column families for tampering. cfs[0..3] are "default",
/// "events", "streams", "runs" (listed first); cf(name) finds any.
struct raw_db {
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs;
  std::vector<std::string> names;
  explicit raw_db(const std::string& path) {
    names = {rocksdb::kDefaultColumnFamilyName, "events", "streams", "runs"};
    std::vector<std::string> existing;
    auto st = rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions{}, path, &existing);
    if (!st.ok())
      throw std::runtime_error(st.ToString());
    for (const auto& n : existing)
      if (std::find(names.begin(), names.end(), n) == names.end())
        names.push_back(n);
    std::vector<rocksdb::ColumnFamilyDescriptor> desc;
    for (const auto& n : names)
      desc.emplace_back(n, rocksdb::ColumnFamilyOptions{});
    st = rocksdb::DB::Open(rocksdb::DBOptions{}, path, desc, &cfs, &db);
    if (!st.ok())
      throw std::runtime_error(st.ToString());
  }
  rocksdb::ColumnFamilyHandle* cf(const std::string& name) const {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == name)
        return cfs[i];
    throw std::runtime_error("no column family " + name);
  }
  ~raw_db() {
    for (auto* cf : cfs)
      static_cast<void>(db->DestroyColumnFamilyHandle(cf));
    delete db;
  }
};

std::vector<std::string> column_families(const std::string& path) {
  std::vector<std::string> names;
  EXPECT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions{}, path, &names).ok());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(RocksdbEventLog, AnotherFormatVersionIsRefused) {
  test::temp_dir dir;
  ASSERT_TRUE(rocksdb_event_log::open(dir.sub("events")));
  {
    raw_db raw{dir.sub("events")};
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions{}, raw.cfs[0], "format",
                            "infrarsi-event-log/99")
                  .ok());
  }
  auto r = rocksdb_event_log::open(dir.sub("events"));
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::unsupported_format);
  EXPECT_NE(describe(r.error()).find("infrarsi-event-log/99"), std::string::npos);
}

TEST(RocksdbEventLog, ACorruptedRecordIsReportedWithItsPositionNotRead) {
  test::temp_dir dir;
  {
    auto log = rocksdb_event_log::open(dir.sub("events"));
    ASSERT_TRUE(log);
    ASSERT_TRUE((*log)->append("r", 0, {proposed(0), completed(0), proposed(1)}));
  }
  {
    raw_db raw{dir.sub("events")};
    std::string key(8, '\0');
    key[7] = 1; // global position 1
    std::string value;
    ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions{}, raw.cfs[1], key, &value).ok());
    value[value.size() - 10] ^= 0x20; // a bit flip inside the stored payload
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions{}, raw.cfs[1], key, value).ok());
  }
  auto log = rocksdb_event_log::open(dir.sub("events"));
  ASSERT_TRUE(log);
  std::vector<std::uint64_t> seen;
  auto err = (*log)->for_each(0, [&](const recorded_event& ev) {
    seen.push_back(ev.global_position);
    return true;
  });
  ASSERT_TRUE(err);
  EXPECT_EQ(code_of(err), errc::corrupt_data);
  EXPECT_NE(describe(err).find("global position 1"), std::string::npos) << describe(err);
  EXPECT_NE(describe(err).find("; last good global position 0"), std::string::npos)
    << describe(err);
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0})); // stops before the bad record
  auto stream = (*log)->read_stream("r");
  ASSERT_FALSE(stream);
  EXPECT_NE(describe(stream.error()).find("run 'r' sequence 1"), std::string::npos)
    << describe(stream.error());
  EXPECT_NE(describe(stream.error()).find("the run's last good event: sequence 0 at global "
                                          "position 0"),
            std::string::npos)
    << describe(stream.error());
}

// -- recovery report ------------------------------------------------------------------------------

TEST(RocksdbEventLog, ACleanOpenReportsThatNothingWasDropped) {
  test::temp_dir dir;
  {
    auto log = rocksdb_event_log::open(dir.sub("events"));
    ASSERT_TRUE(log) << describe(log.error());
    const auto& rec = (*log)->recovery();
    EXPECT_TRUE(rec.tail_checked);
    EXPECT_FALSE(rec.tail_dropped);
    EXPECT_EQ(rec.head, 0u);
    ASSERT_TRUE((*log)->append("r", 0, {proposed(0), completed(0)}));
  }
  for (bool read_only : {true, false}) {
    rocksdb_event_log_options opts;
    opts.read_only = read_only;
    auto log = rocksdb_event_log::open(dir.sub("events"), opts);
    ASSERT_TRUE(log) << describe(log.error());
    const auto& rec = (*log)->recovery();
    EXPECT_TRUE(rec.tail_checked);
    EXPECT_FALSE(rec.tail_dropped);
    EXPECT_EQ(rec.dropped_bytes, 0u);
    EXPECT_EQ(rec.message, "");
    EXPECT_EQ(rec.head, 2u);
    EXPECT_GT(rec.last_sequence, 0u);
  }
}

// -- torn write-ahead-log tails ------------------------------------------------------------------
//
// A child process (this test binary, started again with posix_spawn so that no RocksDB thread is
// ever forked) appends events with sync on, recording the write-ahead log's size after each, and
// dies by SIGKILL: the events live only in the WAL. The test then cuts the WAL at many offsets,
// in copies of the directory, and reopens each.

constexpr const char* torn_tail_dir_env = "INFRARSI_TORN_TAIL_WRITER_DIR";
constexpr std::uint64_t torn_tail_events = 40;
constexpr std::uint64_t wal_block_bytes = 32768; // RocksDB log::kBlockSize
constexpr std::uint64_t wal_header_bytes = 7;    // RocksDB log::kHeaderSize

/// Event i of the writer: proposals (~0.3 KB) and results of 4, 120 and 600 steps (the last
/// ~45 KB, more than a WAL block), so cuts land in headers, in whole records and in fragments.
new_event torn_tail_event(std::uint64_t i) {
  switch (i % 4) {
    case 0: return proposed(i);
    case 1: return completed(i);
    case 2: return new_event::of(wire::EventKind::TrialCompleted, sample_result(i, 600));
    default: return new_event::of(wire::EventKind::TrialCompleted, sample_result(i, 120));
  }
}

/// The one write-ahead log file of `dir` ("" if there is not exactly one).
std::string only_wal_file(const std::string& dir) {
  std::string wal;
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator{dir})
    if (e.path().extension() == ".log") {
      wal = e.path().filename().string();
      ++count;
    }
  return count == 1 ? wal : std::string{};
}

/// The writer child: appends torn_tail_events events with sync on, writing "<wal file> <size
/// after open>" and then one "<size after event i>" line per event to `dir`.sizes, then
/// SIGKILLs itself. Exit codes > 0 name what failed first.
int run_torn_tail_writer(const std::string& dir) {
  auto log = rocksdb_event_log::open(dir); // sync_writes: true
  if (!log)
    return 10;
  auto wal = only_wal_file(dir);
  if (wal.empty())
    return 11;
  std::ofstream sizes{dir + ".sizes"};
  sizes << wal << ' ' << std::filesystem::file_size(dir + "/" + wal) << '\n';
  for (std::uint64_t i = 0; i < torn_tail_events; ++i) {
    if (!(*log)->append("torn", i, {torn_tail_event(i)}))
      return 12;
    if (only_wal_file(dir) != wal)
      return 13; // the WAL switched files: the test assumes one
    sizes << std::filesystem::file_size(dir + "/" + wal) << '\n' << std::flush;
  }
  ::raise(SIGKILL);
  return 14;
}

/// In the child (the environment variable set), runs the writer before any test.
class torn_tail_writer_environment : public ::testing::Environment {
public:
  void SetUp() override {
    if (const char* dir = std::getenv(torn_tail_dir_env))
      ::_exit(run_torn_tail_writer(dir));
  }
};
[[maybe_unused]] ::testing::Environment* const torn_tail_writer =
  ::testing::AddGlobalTestEnvironment(new torn_tail_writer_environment);

/// Starts this test binary again with `env` added, output to `out`; returns its wait status.
int run_self(const std::string& env, const std::string& out) {
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=" + std::string{
    ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name()} + "." +
    ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::vector<char*> argv{exe.data(), filter.data(), nullptr};
  std::vector<std::string> env_strings{env};
  for (char** e = environ; *e != nullptr; ++e)
    env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

/// What the writer child left behind.
struct torn_tail_fixture {
  test::temp_dir dir;
  std::string path = dir.sub("events");
  std::string wal;                // file name of the write-ahead log
  std::uint64_t after_open = 0;   // WAL size after open (the format tag record)
  std::vector<std::uint64_t> end; // WAL size after event i: where its record ends

  /// Runs the child; false (with a gtest failure) if it did not leave a killed writer's log.
  bool write() {
    int status = run_self(std::string{torn_tail_dir_env} + "=" + path, dir.sub("child.out"));
    std::ifstream out{dir.sub("child.out")};
    std::string child_output{std::istreambuf_iterator<char>{out}, {}};
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "writer child: status " << status << " (exit " << WEXITSTATUS(status) << ")\n"
      << child_output;
    std::ifstream sizes{path + ".sizes"};
    sizes >> wal >> after_open;
    for (std::uint64_t v; sizes >> v;)
      end.push_back(v);
    EXPECT_EQ(end.size(), torn_tail_events);
    return !::testing::Test::HasFailure();
  }

  /// A copy of the killed writer's directory with its WAL cut to `bytes`.
  std::string truncated_copy(std::uint64_t bytes, const std::string& name) const {
    auto copy = dir.sub(name);
    std::filesystem::copy(path, copy, std::filesystem::copy_options::recursive);
    std::filesystem::resize_file(copy + "/" + wal, bytes);
    return copy;
  }
};

/// Checks that `log` holds exactly events 0..k-1 of the writer, intact.
void expect_prefix(event_log& log, std::uint64_t k, const std::string& note) {
  EXPECT_EQ(log.head(), k) << note;
  EXPECT_EQ(*log.version("torn"), k) << note;
  std::uint64_t next = 0;
  auto err = log.for_each(0, [&](const recorded_event& ev) {
    EXPECT_EQ(ev.global_position, next) << note;
    EXPECT_EQ(ev.sequence, next) << note;
    EXPECT_EQ(ev.run_id, "torn") << note;
    auto want = torn_tail_event(next);
    EXPECT_EQ(ev.kind, want.kind) << note << " at " << next;
    EXPECT_TRUE(ev.payload == want.payload) << note << ": payload of event " << next;
    ++next;
    return true;
  });
  EXPECT_FALSE(err) << note << ": " << describe(err);
  EXPECT_EQ(next, k) << note;
}

TEST(RocksdbEventLog, ATornWalTailIsDroppedBackToTheLastCompleteEventAndReported) {
  ASSERT_EQ(std::getenv(torn_tail_dir_env), nullptr); // (the child never gets this far)
  torn_tail_fixture fx;
  ASSERT_TRUE(fx.write());
  const auto size = fx.end.back();
  ASSERT_EQ(std::filesystem::file_size(fx.path + "/" + fx.wal), size);
  ASSERT_GT(size, 8 * wal_block_bytes); // several blocks: fragmented records exist

  // Cut points: every kind of place a crash can leave the end of the log, then random ones.
  std::vector<std::uint64_t> cuts{fx.after_open, size};
  for (std::uint64_t i : {0u, 1u, 2u, 5u, 6u, 17u, 30u, 38u}) {
    auto from = fx.end[i];
    auto to = fx.end[i + 1];
    cuts.push_back(from); // exactly after a complete record: nothing to drop
    for (std::uint64_t c : {from + 1, from + 3, from + wal_header_bytes, from + 8, (from + to) / 2,
                            to - 1})
      if (c > from && c < to)
        cuts.push_back(c);
    // A block boundary inside a record: the cut leaves only complete fragments of it.
    auto boundary = (from / wal_block_bytes + 1) * wal_block_bytes;
    if (boundary < to)
      cuts.push_back(boundary);
    if (boundary + 3 < to)
      cuts.push_back(boundary + 3);
  }
  std::mt19937_64 rng{20261130};
  for (int n = 0; n < 16; ++n)
    cuts.push_back(fx.after_open + rng() % (size - fx.after_open + 1));

  int dropped = 0;
  std::map<std::string, std::pair<int, std::string>> reasons; // reason -> count, an example
  for (std::size_t c = 0; c < cuts.size(); ++c) {
    auto cut = cuts[c];
    std::uint64_t k = 0;
    while (k < fx.end.size() && fx.end[k] <= cut)
      ++k;
    auto last_end = k == 0 ? fx.after_open : fx.end[k - 1];
    auto block_left = wal_block_bytes - last_end % wal_block_bytes;
    bool only_padding = block_left < wal_header_bytes && cut - last_end <= block_left;
    bool cut_into_record = cut > last_end && !only_padding;
    auto note = "cut at byte " + std::to_string(cut) + " of " + std::to_string(size) + " (" +
                std::to_string(k) + " complete events, then " + std::to_string(cut - last_end) +
                " bytes)";
    auto copy = fx.truncated_copy(cut, "cut" + std::to_string(c));

    // Read-only first (an audit tool): it changes nothing and reports the same.
    wal_recovery_report ro_report;
    {
      rocksdb_event_log_options ro;
      ro.read_only = true;
      auto log = rocksdb_event_log::open(copy, ro);
      ASSERT_TRUE(log) << note << ": " << describe(log.error());
      expect_prefix(**log, k, note + ", read-only");
      ro_report = (*log)->recovery();
    }
    auto log = rocksdb_event_log::open(copy);
    ASSERT_TRUE(log) << note << ": " << describe(log.error());
    expect_prefix(**log, k, note);
    const auto& rec = (*log)->recovery();
    EXPECT_TRUE(rec.tail_checked) << note << ": " << rec.message;
    EXPECT_EQ(rec.head, k) << note;
    if (cut == last_end) {
      EXPECT_FALSE(rec.tail_dropped) << note << ": " << rec.message;
      EXPECT_EQ(rec.dropped_bytes, 0u) << note;
      EXPECT_EQ(rec.message, "") << note;
    }
    if (cut_into_record) {
      EXPECT_TRUE(rec.tail_dropped) << note;
      EXPECT_LE(rec.dropped_bytes, cut - last_end) << note << ": " << rec.message;
      EXPECT_NE(rec.message.find(fx.wal + ": dropping "), std::string::npos)
        << note << ": " << rec.message;
      EXPECT_NE(rec.message.find("Corruption: "), std::string::npos) << note;
    }
    EXPECT_EQ(ro_report.tail_dropped, rec.tail_dropped) << note;
    EXPECT_EQ(ro_report.dropped_bytes, rec.dropped_bytes) << note;
    EXPECT_EQ(ro_report.head, rec.head) << note;
    if (rec.tail_dropped) {
      ++dropped;
      for (std::size_t at = rec.message.find("Corruption: "); at != std::string::npos;
           at = rec.message.find("Corruption: ", at + 1)) {
        auto& [count, example] =
          reasons[rec.message.substr(at + 12, rec.message.find('\n', at) - at - 12)];
        if (count++ == 0)
          example = note + ": " + rec.message + " (dropped_bytes " +
                    std::to_string(rec.dropped_bytes) + ")";
      }
    }

    // The log goes on from the last complete event, and the next open is clean.
    auto r = (*log)->append("torn", k, {proposed(1000)});
    ASSERT_TRUE(r) << note << ": " << describe(r.error());
    EXPECT_EQ(r->first_global_position, k) << note;
    log->reset();
    auto again = rocksdb_event_log::open(copy);
    ASSERT_TRUE(again) << note << ": " << describe(again.error());
    EXPECT_FALSE((*again)->recovery().tail_dropped) << note << ": " << (*again)->recovery().message;
    EXPECT_EQ((*again)->head(), k + 1) << note;
    again->reset();
    std::filesystem::remove_all(copy);
    if (::testing::Test::HasFailure())
      return;
  }
  EXPECT_GT(dropped, 10);
  std::string seen;
  for (const auto& [reason, count_example] : reasons)
    seen += "\n  " + std::to_string(count_example.first) + " x " + reason + ", e.g. " +
            count_example.second;
  std::cout << "[ torn-tail ] " << cuts.size() << " cuts, " << dropped
            << " with a dropped tail; RocksDB's reasons:" << seen << '\n';
}

TEST(RocksdbEventLog, CorruptionInsideTheWalFailsTheOpenWithRocksdbsReport) {
  ASSERT_EQ(std::getenv(torn_tail_dir_env), nullptr);
  torn_tail_fixture fx;
  ASSERT_TRUE(fx.write());
  // A bit flip in the payload of a small record in the middle (not the tail), in one block.
  std::uint64_t at = 0;
  std::uint64_t damaged = 0; // the event whose record holds the flip (global position = index)
  for (std::uint64_t i = 8; i < torn_tail_events && at == 0; i += 4)
    if (fx.end[i - 1] / wal_block_bytes == (fx.end[i - 1] + 64) / wal_block_bytes) {
      at = fx.end[i - 1] + wal_header_bytes + 40;
      damaged = i;
    }
  ASSERT_NE(at, 0u);
  auto copy = fx.truncated_copy(fx.end.back(), "flipped");
  {
    std::fstream f{copy + "/" + fx.wal, std::ios::in | std::ios::out | std::ios::binary};
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(c ^ 0x10));
  }
  for (bool read_only : {true, false}) {
    rocksdb_event_log_options opts;
    opts.read_only = read_only;
    auto log = rocksdb_event_log::open(copy, opts);
    ASSERT_FALSE(log) << "opened a log whose WAL is corrupt in the middle";
    EXPECT_EQ(code_of(log.error()), errc::corrupt_data);
    auto text = describe(log.error());
    EXPECT_NE(text.find("event log '" + copy + "'"), std::string::npos) << text;
    EXPECT_NE(text.find(fx.wal + ": dropping "), std::string::npos) << text;
    EXPECT_NE(text.find("checksum mismatch"), std::string::npos) << text;
    // Every event before the damaged record is intact: the message names the last of them.
    EXPECT_NE(text.find("; last good global position " + std::to_string(damaged - 1)),
              std::string::npos)
      << text;
  }
}

// -- a log being created ------------------------------------------------------------------------
//
// RocksDB makes a new database (CURRENT, MANIFEST, only the default column family) before the
// creating open adds the log's column families and its format tag. A reader in between must not
// call the store foreign. A child process (posix_spawn of this binary) holds such a database open
// with its writer lock, as a creating `infrarsi tune` would.

constexpr const char* creating_dir_env = "INFRARSI_CREATING_STORE_DIR";

class creating_store_environment : public ::testing::Environment {
public:
  void SetUp() override {
    const char* dir = std::getenv(creating_dir_env);
    if (dir == nullptr)
      return;
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    if (!rocksdb::DB::Open(o, dir, &raw).ok())
      ::_exit(20);
    std::ofstream{std::string{dir} + ".ready"} << "ready\n";
    for (int i = 0; i < 600 && !std::filesystem::exists(std::string{dir} + ".stop"); ++i)
      ::usleep(50'000); // at most 30 s
    delete raw;
    ::_exit(0);
  }
};
[[maybe_unused]] ::testing::Environment* const creating_store =
  ::testing::AddGlobalTestEnvironment(new creating_store_environment);

TEST(RocksdbEventLog, ALogBeingCreatedIsNotCalledForeign) {
  ASSERT_EQ(std::getenv(creating_dir_env), nullptr);
  test::temp_dir dir;
  auto path = dir.sub("events");
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=RocksdbEventLog.ALogBeingCreatedIsNotCalledForeign";
  std::vector<char*> argv{exe.data(), filter.data(), nullptr};
  std::vector<std::string> env_strings{std::string{creating_dir_env} + "=" + path};
  for (char** e = environ; *e != nullptr; ++e)
    env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
  struct stop_child {
    std::string stop;
    pid_t pid;
    ~stop_child() {
      std::ofstream{stop} << "stop\n";
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  } stopper{path + ".stop", pid};
  for (int i = 0; i < 400 && !std::filesystem::exists(path + ".ready"); ++i)
    ::usleep(25'000);
  ASSERT_TRUE(std::filesystem::exists(path + ".ready")) << "the creating child did not start";

  rocksdb_event_log_options ro;
  ro.read_only = true;
  auto r = rocksdb_event_log::open(path, ro);
  ASSERT_FALSE(r);
  auto text = describe(r.error());
  EXPECT_EQ(code_of(r.error()), errc::not_found) << text;
  EXPECT_EQ(text.find("not an infrarsi event log"), std::string::npos) << text;
  EXPECT_NE(text.find("event log '" + path + "': being created"), std::string::npos) << text;
  EXPECT_NE(text.find("process " + std::to_string(pid) + " holds its writer lock"),
            std::string::npos)
    << text;
}

TEST(RocksdbEventLog, AnInterruptedCreationIsReportedAsSuchAndCompletedByTheNextWriter) {
  // RocksDB adds the missing column families one at a time (one MANIFEST record each), in the
  // order the open lists them: a creating `infrarsi tune` killed at start-up leaves any prefix.
  // A tune resumed after such a kill once failed with "not an infrarsi event log (no column
  // family 'streams')" on "default" + "events" (CrashResume, issue 20).
  const std::vector<std::vector<std::string>> made_before_the_kill{
    {}, {"events"}, {"events", "streams"}, {"events", "streams", "runs"}};
  for (const auto& made : made_before_the_kill) {
    SCOPED_TRACE("column families made before the kill: default + "
                 + ::testing::PrintToString(made));
    test::temp_dir dir;
    auto path = dir.sub("events");
    { // RocksDB's part of the creation, and `made` of ours: no key anywhere, no format tag.
      rocksdb::Options o;
      o.create_if_missing = true;
      o.create_missing_column_families = true;
      std::vector<rocksdb::ColumnFamilyDescriptor> cfs{{rocksdb::kDefaultColumnFamilyName, {}}};
      for (const auto& name : made)
        cfs.emplace_back(name, rocksdb::ColumnFamilyOptions{});
      std::vector<rocksdb::ColumnFamilyHandle*> handles;
      rocksdb::DB* raw = nullptr;
      ASSERT_TRUE(rocksdb::DB::Open(o, path, cfs, &handles, &raw).ok());
      for (auto* h : handles)
        ASSERT_TRUE(raw->DestroyColumnFamilyHandle(h).ok());
      delete raw;
    }
    rocksdb_event_log_options ro;
    ro.read_only = true;
    auto r = rocksdb_event_log::open(path, ro);
    ASSERT_FALSE(r);
    auto text = describe(r.error());
    EXPECT_EQ(code_of(r.error()), errc::not_found) << text;
    EXPECT_NE(text.find("being created"), std::string::npos) << text;
    EXPECT_NE(text.find("its creation was interrupted"), std::string::npos) << text;
    EXPECT_EQ(text.find("not an infrarsi event log"), std::string::npos) << text;
    { // The next writer completes the creation.
      auto log = rocksdb_event_log::open(path);
      ASSERT_TRUE(log) << describe(log.error());
      ASSERT_TRUE((*log)->append("r", 0, {proposed(1)}));
    }
    auto reopened = rocksdb_event_log::open(path, ro);
    ASSERT_TRUE(reopened) << describe(reopened.error());
    EXPECT_EQ((*reopened)->head(), 1u);
    EXPECT_EQ(column_families(path),
              (std::vector<std::string>{"default", "events", "runs", "snapshots", "streams"}));
  }
}

TEST(RocksdbEventLog, ACreationStoppedBeforeRocksdbsCurrentFileIsCompletedByTheNextWriter) {
  // Earlier still: the directory holds only what is written before CURRENT (our info log LOG,
  // RocksDB's LOCK, IDENTITY, the first MANIFEST). A tune resumed after a kill there once failed
  // with "directory is not empty and holds no RocksDB database" (CrashResume, issue 20).
  const std::vector<std::vector<std::string>> written_before_the_kill{
    {"LOG"}, {"LOG", "LOCK"}, {"LOG", "LOCK", "IDENTITY"},
    {"LOG", "LOCK", "IDENTITY", "MANIFEST-000001"}};
  for (const auto& files : written_before_the_kill) {
    SCOPED_TRACE("files written before the kill: " + ::testing::PrintToString(files));
    test::temp_dir dir;
    auto path = dir.sub("events");
    std::filesystem::create_directories(path);
    for (const auto& f : files)
      std::ofstream{path + "/" + f} << (f == "LOCK" ? "" : "partial " + f + "\n");
    rocksdb_event_log_options ro;
    ro.read_only = true;
    auto r = rocksdb_event_log::open(path, ro);
    ASSERT_FALSE(r);
    auto text = describe(r.error());
    EXPECT_EQ(code_of(r.error()), errc::not_found) << text;
    EXPECT_NE(text.find("being created"), std::string::npos) << text;
    EXPECT_NE(text.find("its creation was interrupted"), std::string::npos) << text;
    {
      auto log = rocksdb_event_log::open(path);
      ASSERT_TRUE(log) << describe(log.error());
      ASSERT_TRUE((*log)->append("r", 0, {proposed(1)}));
    }
    auto reopened = rocksdb_event_log::open(path, ro);
    ASSERT_TRUE(reopened) << describe(reopened.error());
    EXPECT_EQ((*reopened)->head(), 1u);
  }
  { // A file of anyone else's beside them: still refused, untouched.
    test::temp_dir dir;
    auto path = dir.sub("events");
    std::filesystem::create_directories(path);
    std::ofstream{path + "/LOG"} << "x\n";
    std::ofstream{path + "/notes.txt"} << "mine\n";
    auto r = rocksdb_event_log::open(path);
    ASSERT_FALSE(r);
    EXPECT_EQ(code_of(r.error()), errc::unsupported_format) << describe(r.error());
    EXPECT_FALSE(std::filesystem::exists(path + "/CURRENT"));
  }
}

TEST(RocksdbEventLog, ADatabaseWithSomeOfOurFamiliesAndAForeignOneIsStillForeign) {
  // Only a prefix of our families, no key, but a family of someone else's: not a log of ours
  // being created; refused, and nothing is added to it.
  test::temp_dir dir;
  auto path = dir.sub("other");
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs{{rocksdb::kDefaultColumnFamilyName, {}},
                                                     {"events", {}},
                                                     {"their_index", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, path, cfs, &handles, &raw).ok());
    for (auto* h : handles)
      ASSERT_TRUE(raw->DestroyColumnFamilyHandle(h).ok());
    delete raw;
  }
  auto r = rocksdb_event_log::open(path);
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::unsupported_format) << describe(r.error());
  EXPECT_NE(describe(r.error()).find("not an infrarsi event log (no column family 'streams')"),
            std::string::npos)
    << describe(r.error());
  EXPECT_EQ(column_families(path),
            (std::vector<std::string>{"default", "events", "their_index"}));
}

// -- column families --------------------------------------------------------------------------

TEST(RocksdbEventLog, ALogFromBeforeSnapshotsOpensAndGainsTheSnapshotsFamily) {
  test::temp_dir dir;
  auto path = dir.sub("events");
  {
    auto log = rocksdb_event_log::open(path);
    ASSERT_TRUE(log);
    ASSERT_TRUE((*log)->append("r", 0, {proposed(0), completed(0), proposed(1)}));
  }
  { // Make it what a build before snapshots left: no "snapshots" column family.
    raw_db raw{path};
    ASSERT_TRUE(raw.db->DropColumnFamily(raw.cf("snapshots")).ok());
  }
  using names = std::vector<std::string>;
  ASSERT_EQ(column_families(path), (names{"default", "events", "runs", "streams"}));
  {
    rocksdb_event_log_options ro;
    ro.read_only = true;
    auto log = rocksdb_event_log::open(path, ro);
    ASSERT_TRUE(log) << describe(log.error());
    EXPECT_EQ(*(*log)->version("r"), 3u);
    auto snap = (*log)->read_snapshot("r");
    ASSERT_TRUE(snap) << describe(snap.error());
    EXPECT_FALSE(*snap);
    auto loaded = load_run_with_snapshot(**log, "r");
    ASSERT_TRUE(loaded);
    EXPECT_EQ(loaded->reason, "no snapshot");
  }
  EXPECT_EQ(column_families(path), (names{"default", "events", "runs", "streams"}));
  {
    auto log = rocksdb_event_log::open(path);
    ASSERT_TRUE(log) << describe(log.error());
    EXPECT_EQ((*log)->read_stream("r")->size(), 3u);
    auto covered = snapshot_run(**log, "r");
    ASSERT_TRUE(covered) << describe(covered.error());
    EXPECT_EQ(*covered, 3u);
  }
  EXPECT_EQ(column_families(path), (names{"default", "events", "runs", "snapshots", "streams"}));
  auto log = rocksdb_event_log::open(path);
  ASSERT_TRUE(log);
  auto loaded = load_run_with_snapshot(**log, "r");
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(loaded->used_snapshot) << loaded->reason;
}

TEST(RocksdbEventLog, ColumnFamiliesOfANewerBuildAreOpenedAndLeftAlone) {
  test::temp_dir dir;
  auto path = dir.sub("events");
  ASSERT_TRUE(rocksdb_event_log::open(path));
  {
    raw_db raw{path};
    rocksdb::ColumnFamilyHandle* h = nullptr;
    ASSERT_TRUE(raw.db->CreateColumnFamily(rocksdb::ColumnFamilyOptions{}, "future", &h).ok());
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions{}, h, "k", "v").ok());
    ASSERT_TRUE(raw.db->DestroyColumnFamilyHandle(h).ok());
  }
  for (bool read_only : {true, false}) {
    rocksdb_event_log_options opts;
    opts.read_only = read_only;
    auto log = rocksdb_event_log::open(path, opts);
    ASSERT_TRUE(log) << describe(log.error());
    if (!read_only) {
      ASSERT_TRUE((*log)->append("r", 0, {proposed(0)}));
    }
  }
  raw_db raw{path};
  std::string v;
  ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions{}, raw.cf("future"), "k", &v).ok());
  EXPECT_EQ(v, "v");
}

// -- snapshots on disk -------------------------------------------------------------------------

/// A snapshots value as FORMAT.md lays it out.
std::string snapshot_value(std::uint64_t covered, const std::string& format,
                           const std::string& bytes) {
  std::string rest(1, static_cast<char>(format.size()));
  rest += format + bytes;
  std::string v;
  for (int shift = 56; shift >= 0; shift -= 8)
    v.push_back(static_cast<char>((covered >> shift) & 0xFF));
  auto crc = messages::crc32_of(rest);
  for (int shift = 24; shift >= 0; shift -= 8)
    v.push_back(static_cast<char>((crc >> shift) & 0xFF));
  return v + rest;
}

TEST(RocksdbEventLog, SnapshotsSurviveAReopenAndADamagedOneIsNotTrusted) {
  test::temp_dir dir;
  auto path = dir.sub("events");
  std::string full;
  {
    auto log = rocksdb_event_log::open(path);
    ASSERT_TRUE(log);
    ASSERT_TRUE((*log)->append("r", 0, {proposed(0), completed(0), proposed(1)}));
    ASSERT_TRUE(snapshot_run(**log, "r"));
    ASSERT_TRUE((*log)->append("r", 3, {completed(1)}));
    full = serialize_run_state(*load_run(**log, "r"));
  }
  std::string stored;
  {
    rocksdb_event_log_options ro;
    ro.read_only = true;
    auto log = rocksdb_event_log::open(path, ro);
    ASSERT_TRUE(log);
    auto loaded = load_run_with_snapshot(**log, "r");
    ASSERT_TRUE(loaded);
    EXPECT_TRUE(loaded->used_snapshot) << loaded->reason;
    EXPECT_EQ(loaded->snapshot_covered, 3u);
    EXPECT_EQ(loaded->events_folded, 1u);
    EXPECT_EQ(serialize_run_state(loaded->state), full);
    stored = (*(*log)->read_snapshot("r"))->bytes;
    auto denied = (*log)->write_snapshot("r", 4, run_state_format, stored);
    EXPECT_EQ(code_of(denied), errc::not_permitted);
  }
  auto reload = [&](const std::string& why) {
    auto log = rocksdb_event_log::open(path);
    ASSERT_TRUE(log);
    auto loaded = load_run_with_snapshot(**log, "r");
    ASSERT_TRUE(loaded) << describe(loaded.error());
    EXPECT_FALSE(loaded->used_snapshot);
    EXPECT_NE(loaded->reason.find(why), std::string::npos) << loaded->reason;
    EXPECT_EQ(serialize_run_state(loaded->state), full);
  };
  { // A bit flip in the stored value: its checksum catches it.
    raw_db raw{path};
    std::string v;
    ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions{}, raw.cf("snapshots"), "r", &v).ok());
    v[v.size() / 2] ^= 0x04;
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions{}, raw.cf("snapshots"), "r", v).ok());
  }
  {
    auto log = rocksdb_event_log::open(path);
    ASSERT_TRUE(log);
    auto snap = (*log)->read_snapshot("r");
    ASSERT_FALSE(snap);
    EXPECT_EQ(code_of(snap.error()), errc::corrupt_data);
    EXPECT_NE(describe(snap.error()).find("event log '" + path + "': snapshot of run 'r': "
                                          "checksum mismatch"),
              std::string::npos)
      << describe(snap.error());
  }
  reload("snapshot unreadable: corrupt_data: event log '" + path + "': snapshot of run 'r'");
  { // A well-formed value that claims more events than the stream holds.
    raw_db raw{path};
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions{}, raw.cf("snapshots"), "r",
                            snapshot_value(9, run_state_format, stored))
                  .ok());
  }
  reload("snapshot covers 9 events but the stream holds 4");
  { // Too short to hold its header.
    raw_db raw{path};
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions{}, raw.cf("snapshots"), "r", "short").ok());
  }
  reload("shorter than its 13-byte header");
}

} // namespace
} // namespace infrarsi::store
