// Issue 20, item 4: a disk that fills up. `infrarsi tune` with its store on a small tmpfs stops
// with status 1 and a message naming the directory, its free bytes and the reserve (never an
// abort, never a half-written trial charged to the budget): first below the reserve before a
// trial is dispatched, then with the disk entirely full and the check off, then with a trial
// whose workload copy does not fit (logged lost, not counted); once space is freed the resumed run finishes with every trial of its budget, and the
// replay reproduces every decision.

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "decide/next_step.hpp"
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

TEST(DiskFull, ATuneRunStopsNamingFreeSpaceChargesNoTrialAndFinishesAfterSpaceIsFreed) {
  test::temp_dir dir; // declared first: destroyed after the tmpfs is unmounted
  const std::string fs_dir = dir.sub("small-fs");
  tmpfs_mount tmpfs{fs_dir, 60 * mib};
  ASSERT_TRUE(tmpfs.mounted()) << "cannot mount a tmpfs on " << fs_dir << " (" << tmpfs.error()
                               << "): this test needs root or CAP_SYS_ADMIN";

  // The disk fills up while the run is going, at a moment the test picks: a trial that finds the
  // file `fill` takes it and fills the tmpfs until only the number of bytes it names is left (the
  // free space measured then, with every preallocation RocksDB made already counted). Every
  // trial's workload copy carries 2 MiB of data.
  const std::string fill = dir.sub("fill");
  const std::string filler = fs_dir + "/filler";
  const std::string script = "if [ -e " + fill + " ]; then k=$(cat " + fill + "); rm -f " + fill
                             + "; a=$(df -B1 --output=avail " + fs_dir
                             + " | tail -n 1); head -c $((a - k)) /dev/zero > " + filler
                             + "; fi; exec \"$0\" \"$@\"";
  auto text = test::small_sim_task_text(dir, script,
                                        "\n[budget]\ntrials = 2\nbaseline_repeats = 2\n"
                                        "verify_top = 1\nverify_repeats = 2\n");
  const std::string task = dir.sub("sim-disk.toml");
  std::ofstream{task} << text;
  {
    std::ofstream pad{dir.sub("sim-workload") + "/pad.bin", std::ios::binary};
    std::string block(2 * mib, 'p');
    pad.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
  const std::string store = fs_dir + "/store";
  const std::string out = dir.sub("tune.out");
  auto tune = [&](const std::string& run, const std::string& reserve = "512KiB") {
    std::vector<std::string> args{"tune", task, "--store", store, "--disk-reserve", reserve};
    if (!run.empty())
      args.insert(args.end(), {"--run", run});
    fs::remove(out);
    int rc = test::run_cli(args, out);
    return std::pair{rc, test::file_text(out)};
  };

  // 1. Baseline trial 0 leaves 256 KiB free, below the 512 KiB reserve: the run stops before it
  // dispatches the next trial (status 1, not an abort), naming the directory and the figures.
  std::ofstream{fill} << 256 * 1024;
  auto [rc1, out1] = tune("");
  EXPECT_EQ(rc1, 1) << out1;
  EXPECT_NE(out1.find("before dispatching a trial: io_error: no space: directory '" + store),
            std::string::npos)
    << out1;
  EXPECT_NE(out1.find("bytes free, below the reserve of 524288 bytes"), std::string::npos)
    << out1;
  auto after1 = test::read_logged_run(store);
  ASSERT_TRUE(after1) << out1;
  const std::string run_id = after1->run_id;
  EXPECT_EQ(after1->of(wire::EventKind::TrialDispatched).size(), 1u)
    << "only trial 0 ran; nothing was dispatched below the reserve";

  // 1b. The disk entirely full and the check turned off: RocksDB's own writes (its info log,
  // the memtable it flushes on open) fail, and the run ends with status 1 naming the error,
  // never an abort (SIGABRT, status 134).
  {
    int fd = ::open(filler.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    ASSERT_GE(fd, 0) << filler << ": " << std::strerror(errno);
    std::string block(64 * 1024, 'x');
    for (std::size_t n : {block.size(), std::size_t{4096}, std::size_t{1}})
      while (::write(fd, block.data(), n) == static_cast<ssize_t>(n)) {
      }
    ::close(fd);
  }
  auto [rc1b, out1b] = tune(run_id, "0");
  EXPECT_EQ(rc1b, 1) << out1b;
  EXPECT_NE(out1b.find("io_error"), std::string::npos) << out1b;
  EXPECT_NE(out1b.find("No space left on device"), std::string::npos) << out1b;

  // 2. Space freed; baseline trial 1 leaves 1.5 MiB: above the reserve, too little for the next
  // trial's 2 MiB workload copy. That trial (the first search trial) cannot be prepared: it is
  // logged lost and the run stops naming the free space.
  fs::remove(filler);
  std::ofstream{fill} << 3 * mib / 2;
  auto [rc2, out2] = tune(run_id);
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_NE(out2.find("could not be prepared"), std::string::npos) << out2;
  // The copy's own error (ENOSPC, or EIO where libstdc++'s sendfile copy comes up short) and
  // the free space that explains it.
  EXPECT_NE(out2.find("not prepared: io_error: trial copy: cannot copy"), std::string::npos) << out2;
  EXPECT_NE(out2.find("bytes free, reserve 524288 bytes"), std::string::npos) << out2;
  EXPECT_NE(out2.find("it is not counted and is re-queued"), std::string::npos) << out2;
  std::uint64_t not_prepared = 0;
  {
    store::rocksdb_event_log_options ro;
    ro.read_only = true;
    auto log = store::rocksdb_event_log::open(store + "/events", ro);
    ASSERT_TRUE(log) << describe(log.error());
    auto state = store::load_run(**log, run_id);
    ASSERT_TRUE(state) << describe(state.error());
    ASSERT_EQ(state->trials.size(), 3u) << out2;
    const auto& t = state->trials.back();
    not_prepared = t.trial_id;
    EXPECT_EQ(t.kind, tuning::purpose_kind::explore);
    EXPECT_EQ(t.attempt, 0u);
    EXPECT_TRUE(t.finished);
    EXPECT_EQ(t.outcome, tuning::trial_outcome::lost) << tuning::to_string(t.outcome);
    EXPECT_NE(t.detail.find("not prepared"), std::string::npos) << t.detail;
    EXPECT_FALSE(fs::exists(store + "/runs/" + run_id + "/trials/trial-"
                            + std::to_string(not_prepared) + "-0/workdir"))
      << "the partial copy is left on the full disk";
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
  // The trial that was not prepared ran again as attempt 1; no other trial needed a second.
  ASSERT_EQ(attempts.count(not_prepared), 1u);
  EXPECT_EQ(attempts[not_prepared], (std::set<std::uint32_t>{0, 1}));
  for (const auto& [id, a] : attempts) {
    if (id != not_prepared) {
      EXPECT_EQ(a.size(), 1u) << "trial " << id;
    }
  }
  // Nothing charged for the failed preparation: the budget's two search trials both ran.
  EXPECT_EQ(baselines.size(), 2u);
  EXPECT_EQ(explored.size(), 2u);
  EXPECT_EQ(decide::search_trials(*state), 2u);
  const auto* retried = state->find(not_prepared, 1);
  ASSERT_NE(retried, nullptr);
  EXPECT_EQ(retried->outcome, tuning::trial_outcome::ok) << retried->detail;
  log->reset();

  // The replay agrees with every logged decision, the lost attempt included.
  int rc4 = test::run_cli({"replay", run_id, "--store", store}, out);
  EXPECT_EQ(rc4, 0) << test::file_text(out);
}

} // namespace
} // namespace infrarsi
