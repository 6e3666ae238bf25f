// Issue 20, item 4: a disk that fills up. `infrarsi tune` with its store on a small tmpfs stops
// with status 1 and a message naming the directory, its free bytes and the reserve (never an
// abort, never a half-written trial charged to the budget): first below the reserve before a
// trial is dispatched, then with a trial whose workload copy does not fit (logged lost, not
// counted); once space is freed the resumed run finishes with every trial of its budget, and the
// replay reproduces every decision.

#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "sim_task.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"
#include "tune_process.hpp"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t mib = 1u << 20;

/// A tmpfs mounted on a directory for the life of the object (unmounted on destruction).
class tmpfs_mount {
public:
  tmpfs_mount(std::string path, std::uint64_t bytes) : path_(std::move(path)) {
    fs::create_directories(path_);
    auto opts = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", path_.c_str(), "tmpfs", 0, opts.c_str()) == 0)
      mounted_ = true;
    else
      error_ = std::strerror(errno);
  }
  ~tmpfs_mount() {
    if (mounted_)
      static_cast<void>(::umount2(path_.c_str(), MNT_DETACH));
  }
  tmpfs_mount(const tmpfs_mount&) = delete;
  tmpfs_mount& operator=(const tmpfs_mount&) = delete;
  [[nodiscard]] bool mounted() const { return mounted_; }
  [[nodiscard]] const std::string& error() const { return error_; }

private:
  std::string path_;
  bool mounted_ = false;
  std::string error_;
};

std::uint64_t free_bytes(const std::string& dir) {
  struct statvfs st{};
  if (::statvfs(dir.c_str(), &st) != 0)
    return 0;
  return static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
}

/// Makes `file` (on the tmpfs) as large as it must be for `dir` to have about `free` bytes left.
void leave_free(const std::string& dir, const std::string& file, std::uint64_t free) {
  std::uint64_t have = fs::exists(file) ? fs::file_size(file) : 0;
  std::uint64_t now = free_bytes(dir);
  std::uint64_t want = have + now > free ? have + now - free : 0;
  {
    std::ofstream f{file, std::ios::binary | std::ios::app};
  }
  if (want < have) {
    fs::resize_file(file, want);
    return;
  }
  std::ofstream f{file, std::ios::binary | std::ios::app};
  std::string block(64 * 1024, 'x'); // written, not sparse: tmpfs counts written pages
  for (std::uint64_t left = want - have; left > 0;) {
    auto n = std::min<std::uint64_t>(left, block.size());
    f.write(block.data(), static_cast<std::streamsize>(n));
    left -= n;
  }
}

TEST(DiskFull, ATuneRunStopsNamingFreeSpaceChargesNoTrialAndFinishesAfterSpaceIsFreed) {
  test::temp_dir dir; // declared first: destroyed after the tmpfs is unmounted
  const std::string fs_dir = dir.sub("small-fs");
  tmpfs_mount tmpfs{fs_dir, 48 * mib};
  if (!tmpfs.mounted())
    GTEST_SKIP() << "cannot mount a tmpfs on " << fs_dir << " (" << tmpfs.error()
                 << "): this test needs root or CAP_SYS_ADMIN";

  // The simulator task, its workload carrying 12 MiB of data: every trial's copy needs that much.
  auto text = test::small_sim_task_text(dir, R"(exec "$0" "$@")",
                                        "\n[budget]\ntrials = 2\nbaseline_repeats = 2\n"
                                        "verify_top = 1\nverify_repeats = 2\n");
  const std::string task = dir.sub("sim-disk.toml");
  std::ofstream{task} << text;
  {
    std::ofstream pad{dir.sub("sim-workload") + "/pad.bin", std::ios::binary};
    std::string block(mib, 'p');
    for (int i = 0; i < 12; ++i)
      pad.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
  const std::string store = fs_dir + "/store";
  const std::string filler = fs_dir + "/filler";
  const std::string reserve = "4MiB";
  const std::string out = dir.sub("tune.out");
  auto tune = [&](const std::string& run) {
    std::vector<std::string> args{"tune", task, "--store", store, "--disk-reserve", reserve};
    if (!run.empty())
      args.insert(args.end(), {"--run", run});
    else
      args.insert(args.end(), {"--until", "init"});
    fs::remove(out);
    int rc = test::run_cli(args, out);
    return std::pair{rc, test::file_text(out)};
  };

  // Init only: the store exists (with whatever RocksDB preallocates).
  auto [rc0, out0] = tune("");
  ASSERT_EQ(rc0, 0) << out0;
  auto first = test::read_logged_run(store);
  ASSERT_TRUE(first);
  const std::string run_id = first->run_id;

  // 1. Below the reserve: the run stops before dispatching anything, naming the directory.
  leave_free(fs_dir, filler, 2 * mib);
  auto [rc1, out1] = tune(run_id);
  EXPECT_EQ(rc1, 1) << out1; // not 134: no abort
  EXPECT_NE(out1.find("bytes free, below the reserve of 4194304 bytes"), std::string::npos)
    << out1;
  EXPECT_NE(out1.find("directory '" + store), std::string::npos) << out1;
  auto after1 = test::read_logged_run(store, run_id);
  ASSERT_TRUE(after1);
  EXPECT_TRUE(after1->of(wire::EventKind::TrialDispatched).empty())
    << "a trial was dispatched below the reserve";

  // 2. Above the reserve, but too little room for the trial's 12 MiB workload copy: the trial
  // cannot be prepared; it is logged lost (not counted) and the run stops naming the free space.
  leave_free(fs_dir, filler, 8 * mib);
  auto [rc2, out2] = tune(run_id);
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_NE(out2.find("could not be prepared"), std::string::npos) << out2;
  EXPECT_NE(out2.find("No space left on device"), std::string::npos) << out2;
  EXPECT_NE(out2.find("bytes free, reserve 4194304 bytes"), std::string::npos) << out2;
  {
    store::rocksdb_event_log_options ro;
    ro.read_only = true;
    auto log = store::rocksdb_event_log::open(store + "/events", ro);
    ASSERT_TRUE(log) << describe(log.error());
    auto state = store::load_run(**log, run_id);
    ASSERT_TRUE(state) << describe(state.error());
    ASSERT_EQ(state->trials.size(), 1u) << "exactly the one trial whose copy failed";
    const auto& t = state->trials.front();
    EXPECT_EQ(t.attempt, 0u);
    EXPECT_TRUE(t.finished);
    EXPECT_EQ(t.outcome, tuning::trial_outcome::lost) << tuning::to_string(t.outcome);
    EXPECT_NE(t.detail.find("not prepared"), std::string::npos) << t.detail;
  }
  EXPECT_TRUE(test::processes_left(fs_dir, std::chrono::seconds(5)).empty());

  // 3. Space freed: the resume re-queues that trial and the run finishes.
  fs::remove(filler);
  auto [rc3, out3] = tune(run_id);
  ASSERT_EQ(rc3, 0) << out3;
  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  auto log = store::rocksdb_event_log::open(store + "/events", ro);
  ASSERT_TRUE(log) << describe(log.error());
  auto state = store::load_run(**log, run_id);
  ASSERT_TRUE(state) << describe(state.error());
  EXPECT_TRUE(state->applied.has_value()) << out3;
  std::map<std::uint64_t, std::set<std::uint32_t>> attempts;
  std::set<std::uint64_t> baselines;
  std::set<std::uint64_t> explored;
  for (const auto& t : state->trials) {
    attempts[t.trial_id].insert(t.attempt);
    if (t.kind == tuning::purpose_kind::baseline)
      baselines.insert(t.trial_id);
    if (t.kind == tuning::purpose_kind::explore)
      explored.insert(t.trial_id);
  }
  ASSERT_FALSE(attempts.empty());
  // The trial that was not prepared ran again as attempt 1; no other trial needed a second.
  EXPECT_EQ(attempts.begin()->second, (std::set<std::uint32_t>{0, 1}));
  for (const auto& [id, a] : attempts)
    if (id != attempts.begin()->first)
      EXPECT_EQ(a.size(), 1u) << "trial " << id;
  // Nothing charged for the failed preparation: the budget's trials, all of them run.
  EXPECT_EQ(baselines.size(), 2u);
  EXPECT_EQ(explored.size(), 2u);
  const auto* retried = state->find(attempts.begin()->first, 1);
  ASSERT_NE(retried, nullptr);
  EXPECT_EQ(retried->outcome, tuning::trial_outcome::ok) << retried->detail;
  log->reset();

  // The replay agrees with every logged decision, the lost attempt included.
  auto [rc4, out4] = std::pair{test::run_cli({"replay", run_id, "--store", store}, out),
                               test::file_text(out)};
  EXPECT_EQ(rc4, 0) << out4;
}

} // namespace
} // namespace infrarsi
