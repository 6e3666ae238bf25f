// Issue 20, items 4 and 6. A node-runner below its disk reserve answers "not prepared" (lost),
// and a bad --disk-reserve is a usage error naming the flag. A damaged store is never reported
// as healthy: a byte flipped in an SST file
// of a real store: `status` (which answers from the run's snapshot) and `runs` (which answers
// from the run's metadata) read the events back, warn naming the store and the first bad
// position and exit 1, and `log dump` names the file, its byte offset and the last good event.

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <zmq.hpp>

#include "adapters/node_bridge.hpp"
#include "adapters/task_file.hpp"
#include "runtime/cli.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"

namespace infrarsi::runtime {
namespace {

namespace fs = std::filesystem;
using store::new_event;

struct cli_result {
  int status = -1;
  std::string out;
  std::string err;
};

cli_result cli(std::vector<std::string> args) {
  args.insert(args.begin(), "infrarsi");
  std::vector<const char*> argv;
  for (const auto& a : args)
    argv.push_back(a.c_str());
  std::ostringstream out;
  std::ostringstream err;
  cli_result r;
  r.status = run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

/// The SST file of the events column family in `dir` ("" if there is none or more than one),
/// from RocksDB's own metadata (a read-only open).
std::string events_sst(const std::string& dir) {
  std::vector<std::string> names;
  if (!rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions{}, dir, &names).ok())
    return {};
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (const auto& n : names)
    cfs.emplace_back(n, rocksdb::ColumnFamilyOptions{});
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  if (!rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions{}, dir, cfs, &handles, &raw).ok())
    return {};
  std::vector<rocksdb::LiveFileMetaData> files;
  raw->GetLiveFilesMetaData(&files);
  for (auto* h : handles)
    static_cast<void>(raw->DestroyColumnFamilyHandle(h));
  delete raw;
  std::string found;
  int count = 0;
  for (const auto& f : files)
    if (f.column_family_name == "events") {
      found = dir + f.name; // name is "/000012.sst"
      ++count;
    }
  return count == 1 ? found : std::string{};
}

/// The number after "global position " in `text`, or -1.
long first_position(const std::string& text) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex{"global position ([0-9]+)"}))
    return std::stol(m[1].str());
  return -1;
}

TEST(DamagedStore, AFlippedSstByteMakesStatusAndRunsWarnNamingTheFirstBadPosition) {
  test::temp_dir dir;
  const std::string store = dir.sub("store");
  const std::string events = store + "/events";
  {
    auto log = store::rocksdb_event_log::open(events);
    ASSERT_TRUE(log) << describe(log.error());
    std::vector<new_event> batch;
    for (std::uint64_t i = 0; i < 60; ++i) {
      batch.push_back(new_event::of(wire::EventKind::TrialProposed, test::sample_spec(i)));
      batch.push_back(new_event::of(wire::EventKind::TrialCompleted, test::sample_result(i, 12)));
    }
    ASSERT_TRUE((*log)->append("run-a", 0, batch));
    auto covered = store::snapshot_run(**log, "run-a");
    ASSERT_TRUE(covered) << describe(covered.error());
    ASSERT_EQ(*covered, 120u);
  }
  { // A writable reopen flushes what the write-ahead log recovered into SST files.
    auto log = store::rocksdb_event_log::open(events);
    ASSERT_TRUE(log) << describe(log.error());
  }
  const auto sst = events_sst(events);
  ASSERT_FALSE(sst.empty()) << "not exactly one SST file of the events family in " << events;
  ASSERT_GT(fs::file_size(sst), 4096u);

  // Healthy: status answers from the snapshot, without a warning.
  auto healthy = cli({"status", "--store", store});
  ASSERT_EQ(healthy.status, 0) << healthy.err;
  EXPECT_EQ(healthy.out.rfind("run-a\n  state:    ", 0), 0u) << healthy.out;
  EXPECT_NE(healthy.out.find("\n  trials:   60 ("), std::string::npos) << healthy.out;
  EXPECT_NE(healthy.out.find("\n  events:   120\n"), std::string::npos) << healthy.out;
  EXPECT_EQ(healthy.err.find("warning"), std::string::npos) << healthy.err;
  EXPECT_EQ(cli({"runs", "--store", store}).status, 0);

  { // One bit flipped in the first data block.
    std::fstream f{sst, std::ios::in | std::ios::out | std::ios::binary};
    f.seekg(100);
    char c = 0;
    f.get(c);
    f.seekp(100);
    f.put(static_cast<char>(c ^ 0x01));
  }
  const std::string sst_name = fs::path{sst}.filename().string();

  auto status = cli({"status", "--store", store});
  EXPECT_EQ(status.status, 1) << status.out << status.err;
  EXPECT_NE(status.err.find("warning: the event log '" + events + "' is damaged: run 'run-a'"),
            std::string::npos)
    << status.err;
  EXPECT_NE(status.err.find("the 120 events its snapshot covers do not verify"), std::string::npos)
    << status.err;
  EXPECT_NE(status.err.find(sst_name), std::string::npos) << status.err;
  const long bad = first_position(status.err);
  EXPECT_GE(bad, 0) << status.err;
  EXPECT_LT(bad, 120) << status.err;

  auto runs = cli({"runs", "--store", store});
  EXPECT_EQ(runs.status, 1) << runs.err;
  EXPECT_NE(runs.err.find("is damaged: run 'run-a': its 120 events do not verify"),
            std::string::npos)
    << runs.err;
  EXPECT_EQ(first_position(runs.err), bad) << runs.err;

  // log dump stops at the same position and names the file, the offset and the last good event.
  auto dump = cli({"log", "dump", "run-a", "--store", store});
  EXPECT_EQ(dump.status, 1) << dump.err;
  EXPECT_EQ(first_position(dump.err.substr(dump.err.find("infrarsi log dump:"))), bad) << dump.err;
  EXPECT_NE(dump.err.find(sst_name + " offset "), std::string::npos) << dump.err;
  EXPECT_NE(dump.err.find("the run's last good event: "), std::string::npos) << dump.err;
}

TEST(DiskReserve, ANodeRunnerBelowItsReserveAnswersNotPreparedLostNeverALaunchError) {
  test::temp_dir dir;
  fs::copy(std::string{INFRARSI_TEST_DATA_DIR} + "/workloads", dir.sub("workloads"),
           fs::copy_options::recursive);
  fs::create_directories(dir.sub("tasks"));
  fs::copy(std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake.toml", dir.sub("tasks/fake.toml"));
  auto task = adapters::load_task_file(dir.sub("tasks/fake.toml"));
  ASSERT_TRUE(task) << describe(task.error());
  zmq::context_t ctx;
  const std::string trials = dir.sub("trials");
  // A reserve no disk has: every trial finds too little free space before it is prepared.
  const std::uint64_t reserve = std::uint64_t{1} << 60;
  adapters::node_server node{ctx, "tcp://127.0.0.1:*", *task, trials, "local-0", {}, {}, reserve};
  ASSERT_FALSE(node.start());
  adapters::node_client client{ctx, node.endpoint(), "run", "supervisor"};
  wire::TrialSpecT spec;
  spec.trial_id = 3;
  spec.attempt = 0;
  auto got = client.run(messages::trial_spec_msg::pack(spec), 30.0, {});
  node.stop();
  ASSERT_TRUE(got) << describe(got.error());
  EXPECT_EQ((*got)->trial_id(), 3u);
  EXPECT_EQ((*got)->outcome(), wire::Outcome::Lost);
  const std::string detail = (*got)->detail() != nullptr ? (*got)->detail()->str() : "";
  EXPECT_NE(detail.find("node-runner local-0: not prepared: io_error: no space: directory '"
                        + trials + "' has "),
            std::string::npos)
    << detail;
  EXPECT_NE(detail.find("below the reserve of " + std::to_string(reserve) + " bytes"),
            std::string::npos)
    << detail;
  EXPECT_FALSE(fs::exists(trials + "/trial-3-0")) << "prepared although below the reserve";
}

TEST(DiskReserve, ABadValueIsAUsageErrorNamingTheFlag) {
  test::temp_dir dir;
  auto r = cli({"tune", dir.sub("missing.toml"), "--disk-reserve", "lots"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--disk-reserve 'lots': expected a byte count"), std::string::npos)
    << r.err;
  auto help = cli({"tune", "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--disk-reserve"), std::string::npos) << help.out;
}

} // namespace
} // namespace infrarsi::runtime
