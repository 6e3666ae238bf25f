// Tests for adapters/trial_launcher.cpp under faults, with real processes: the first cause in
// time decides (a collective failure before OOM text is a crash, named), OOM text ends the trial
// when it appears, every descendant ends with the trial (also one in its own session, with the
// cgroup v2 and with the /proc walk), adopted zombies are reaped, and rank logs are written as
// they are read.

#include "adapters/trial_launcher.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "adapters/process.hpp"
#include "adapters/task_file.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

namespace fs = std::filesystem;
const std::string data_dir = INFRARSI_TEST_DATA_DIR;

/// The fake task (tests/data/tasks/fake.toml: launch window 2 s, kill grace 1 s) with its
/// program replaced by a Python script; `require_final_line` off unless the script prints one.
tuning::task_spec script_task(const std::string& script, double timeout_s = 60.0) {
  auto task = load_task_file(data_dir + "/tasks/fake.toml");
  if (!task)
    throw std::runtime_error(describe(task.error()));
  task->workload.argv = {"python3", "-c", script};
  task->metrics.require_final_line = false;
  task->limits.timeout_s = timeout_s;
  return std::move(*task);
}

/// Python prelude: one metrics line (so a later failure is past the launch window's rule).
/// (No braces: argv is a template, `{name}` a placeholder.)
const std::string prelude =
  "import json, os, sys, time\n"
  "print('INFRARSI_METRICS ' + json.dumps(dict(step=0, loss=5.0, tokens=8, step_time_s=0.01)),"
  " flush=True)\n";

struct outcome {
  trial_report report;
  const wire::TrialResult* result = nullptr;
  double wall_s = 0;
  std::string detail() const { return result->detail()->str(); }
};

outcome run(const tuning::task_spec& task, const std::string& trial_dir, bool allow_cgroup = true) {
  trial_request req;
  req.task = &task;
  req.trial_dir = trial_dir;
  req.trial_id = 3;
  req.allow_cgroup = allow_cgroup;
  auto t0 = std::chrono::steady_clock::now();
  auto rep = run_trial(req);
  outcome o;
  o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!rep)
    throw std::runtime_error(describe(rep.error()));
  o.report = std::move(*rep);
  o.result = o.report.result.get();
  return o;
}

std::string read(const std::string& file) {
  std::ifstream in{file};
  return {std::istreambuf_iterator<char>{in}, {}};
}

/// Zombies whose parent is this test process (adopted processes nobody reaped).
int own_zombies() {
  int n = 0;
  for (const auto& e : process_table())
    n += e.ppid == ::getpid() && e.state == 'Z' ? 1 : 0;
  return n;
}

class TrialFaultsTest : public ::testing::Test {
protected:
  test::temp_dir dir;
};

TEST_F(TrialFaultsTest, CollectiveFailureBeforeOomTextIsCrashNamingTheCollective) {
  auto task = script_task(
    prelude
    + "print('[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
      "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds "
      "before timing out.', file=sys.stderr, flush=True)\n"
      "time.sleep(0.4)\n"
      "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', "
      "file=sys.stderr, flush=True)\n"
      "sys.exit(1)\n");
  auto o = run(task, dir.sub("t"));
  EXPECT_EQ(o.result->outcome(), wire::Outcome::Crash) << o.detail();
  EXPECT_EQ(o.detail().rfind("collective communication failed: rank 0: NCCL watchdog", 0), 0u)
    << o.detail();
  // The exit that followed is the evidence: the rank exits by itself within the grace the OOM
  // text gives it.
  EXPECT_EQ(o.result->exit_code(), 1);
  // Both lines are in the rank's log.
  auto err = read(dir.sub("t/rank-0.stderr"));
  EXPECT_NE(err.find("Watchdog caught collective operation timeout"), std::string::npos) << err;
  EXPECT_NE(err.find("CUDA out of memory"), std::string::npos) << err;
}

TEST_F(TrialFaultsTest, OomTextFirstIsStillOom) {
  auto task = script_task(prelude
                          + "print('CUDA out of memory', file=sys.stderr, flush=True)\n"
                            "time.sleep(0.4)\n"
                            "print('NCCL error in: ProcessGroupNCCL.cpp:1970', file=sys.stderr,"
                            " flush=True)\n"
                            "sys.exit(1)\n");
  auto o = run(task, dir.sub("t"));
  EXPECT_EQ(o.result->outcome(), wire::Outcome::Oom) << o.detail();
  EXPECT_NE(o.detail().find("CUDA out of memory"), std::string::npos) << o.detail();
}

TEST_F(TrialFaultsTest, OomTextThenHangEndsWhenTheTextAppears) {
  const double timeout_s = 60.0;
  auto task = script_task(prelude
                          + "print('RuntimeError: CUDA out of memory. Tried to allocate 20.00 "
                            "MiB', file=sys.stderr, flush=True)\n"
                            "time.sleep(300)\n",
                          timeout_s);
  auto o = run(task, dir.sub("t"));
  EXPECT_EQ(o.result->outcome(), wire::Outcome::Oom) << o.detail();
  // Python needs ~0.1 s to start; the stop is SIGTERM 2 s after the text (the rank's grace to
  // exit by itself). Generous slack for a loaded box.
  EXPECT_LT(o.wall_s, 5.0);
  EXPECT_LT(o.wall_s, timeout_s / 2);
}

TEST_F(TrialFaultsTest, CollectiveTextAloneDoesNotFailAnHonestTrial) {
  auto task = script_task(prelude
                          + "print('Connection reset by peer (retrying)', file=sys.stderr, "
                            "flush=True)\n");
  auto o = run(task, dir.sub("t"));
  EXPECT_EQ(o.result->outcome(), wire::Outcome::Ok) << o.detail();
}

/// A rank whose child moves to its own session and keeps the rank's stdout open; the rank then
/// exits 0 at once. `double_fork`: the child forks again and exits, so the sleeper is adopted.
std::string escaping_rank(const std::string& pid_file, bool double_fork) {
  return prelude + "pid_file = '" + pid_file + "'\n"
         + (double_fork ? "double_fork = True\n" : "double_fork = False\n")
         + "pid = os.fork()\n"
           "if pid == 0:\n"
           "    os.setsid()\n"
           "    if double_fork and os.fork() != 0:\n"
           "        os._exit(0)\n"
           "    open(pid_file + '.tmp', 'w').write(str(os.getpid()))\n"
           "    os.rename(pid_file + '.tmp', pid_file)\n"
           "    os.execvp('sleep', ['sleep', '300'])\n"
           "while not os.path.exists(pid_file):\n"
           "    time.sleep(0.01)\n"
           "print('rank done', flush=True)\n";
}

class EscapedDescendantTest : public TrialFaultsTest,
                              public ::testing::WithParamInterface<std::tuple<bool, bool>> {};

TEST_P(EscapedDescendantTest, EndsWithTheTrialWhichIsOkAtOnce) {
  auto [allow_cgroup, double_fork] = GetParam();
  auto pid_file = dir.sub("sleeper.pid");
  auto task = script_task(escaping_rank(pid_file, double_fork));
  auto o = run(task, dir.sub("t"), allow_cgroup);
  EXPECT_EQ(o.result->outcome(), wire::Outcome::Ok) << o.detail();
  EXPECT_LT(o.wall_s, 10.0); // the sleeper holds stdout for 300 s
  auto text = read(pid_file);
  ASSERT_FALSE(text.empty());
  pid_t sleeper = std::stoi(text);
  ASSERT_GT(sleeper, 1);
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(sleeper)))
    << "the setsid child " << sleeper << " survived the trial (or is an unreaped zombie); "
    << o.report.descendants;
  EXPECT_EQ(own_zombies(), 0);
  EXPECT_NE(read(dir.sub("t/rank-0.stdout")).find("rank done"), std::string::npos);
  // Which mechanism was used is reported and kept in the trial directory.
  EXPECT_EQ(read(dir.sub("t/descendants.txt")), o.report.descendants + "\n");
  if (!allow_cgroup) {
    EXPECT_EQ(o.report.descendants.rfind("/proc walk (cgroup v2 not used: disabled", 0), 0u)
      << o.report.descendants;
  }
}

INSTANTIATE_TEST_SUITE_P(CgroupOrProcWalk, EscapedDescendantTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& param_info) {
                           const auto& p = param_info.param;
                           return std::string{std::get<0>(p) ? "Cgroup" : "ProcWalk"}
                                  + (std::get<1>(p) ? "DoubleFork" : "Setsid");
                         });

TEST_F(TrialFaultsTest, RankLogHasContentWhileTheRankRuns) {
  auto release = dir.sub("release");
  auto task = script_task(prelude
                          + "print('evidence line', flush=True)\n"
                            "print('evidence on stderr', file=sys.stderr, flush=True)\n"
                            "deadline = time.time() + 30\n"
                            "while not os.path.exists('"
                          + release
                          + "') and time.time() < deadline:\n"
                            "    time.sleep(0.02)\n");
  std::atomic<bool> done{false};
  outcome o;
  std::thread trial{[&] {
    o = run(task, dir.sub("t"));
    done = true;
  }};
  std::string out;
  std::string err;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline
         && (out.find("evidence line") == std::string::npos
             || err.find("evidence on stderr") == std::string::npos)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    out = read(dir.sub("t/rank-0.stdout"));
    err = read(dir.sub("t/rank-0.stderr"));
  }
  bool running_when_read = !done.load();
  std::ofstream{release} << "go";
  trial.join();
  EXPECT_TRUE(running_when_read) << "the rank had ended before its log was read";
  EXPECT_NE(out.find("evidence line"), std::string::npos) << out;
  EXPECT_NE(err.find("evidence on stderr"), std::string::npos) << err;
  EXPECT_EQ(o.result->outcome(), wire::Outcome::Ok) << o.detail();
  EXPECT_LT(o.wall_s, 25.0); // released, not the script's own 30 s deadline
}

} // namespace
} // namespace infrarsi::adapters
