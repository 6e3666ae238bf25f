// RocksDB-specific behaviour of store/rocksdb_event_log.cpp: durability across processes (a
// writer killed with SIGKILL loses no acknowledged event), the writer lock, read-only opens,
// format checks and detection of corrupted records on disk.

#include "store/rocksdb_event_log.hpp"

#include <csignal>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "test_util.hpp"

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

/// Runs `body` in a forked child process; returns the child's wait status.
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
  int status = in_child_process([&] {
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
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(RocksdbEventLog, ASecondWriterIsRefusedWithStoreLocked) {
  test::temp_dir dir;
  auto first = rocksdb_event_log::open(dir.sub("events"));
  ASSERT_TRUE(first);
  int status = in_child_process([&] {
    auto second = rocksdb_event_log::open(dir.sub("events"));
    if (second)
      return 30;
    return code_of(second.error()) == errc::store_locked ? 0 : 31;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
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

/// Opens the raw database with our column families for tampering.
struct raw_db {
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs;
  explicit raw_db(const std::string& path) {
    std::vector<rocksdb::ColumnFamilyDescriptor> desc{
      {rocksdb::kDefaultColumnFamilyName, {}}, {"events", {}}, {"streams", {}}, {"runs", {}}};
    auto st = rocksdb::DB::Open(rocksdb::DBOptions{}, path, desc, &cfs, &db);
    if (!st.ok())
      throw std::runtime_error(st.ToString());
  }
  ~raw_db() {
    for (auto* cf : cfs)
      static_cast<void>(db->DestroyColumnFamilyHandle(cf));
    delete db;
  }
};

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
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0})); // stops before the bad record
  auto stream = (*log)->read_stream("r");
  ASSERT_FALSE(stream);
  EXPECT_NE(describe(stream.error()).find("run 'r' sequence 1"), std::string::npos)
    << describe(stream.error());
}

} // namespace
} // namespace infrarsi::store
