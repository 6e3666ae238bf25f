// Tests for the registry of live trial process groups (adapters/process.hpp) with real
// processes: spawn() registers what it is asked to, a group without processes leaves it, and,
// through the real launcher (adapters/trial_launcher.hpp) on a trial whose rank has a child and
// ignores SIGTERM, both a stop request and signal_all_groups(SIGKILL) end every process of the
// trial, after which the registry is empty.

#include "adapters/process.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "adapters/trial_launcher.hpp"
#include "messages/errc.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

double seconds_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// Whether `pid` is a live process (in /proc and not a zombie).
bool alive(pid_t pid) {
  std::ifstream stat{"/proc/" + std::to_string(pid) + "/stat"};
  std::string st;
  if (!std::getline(stat, st))
    return false;
  auto close = st.rfind(')');
  return close != std::string::npos && close + 2 < st.size() && st[close + 2] != 'Z';
}

/// A one-process trial ("command" launcher) running `/bin/sh -c SCRIPT` in `workdir`: no
/// metrics needed (so every death is in the start-up phase, a launch_error), a 60 s limit, 1 s
/// between SIGTERM and SIGKILL.
tuning::task_spec shell_task(const std::string& workdir, const std::string& script) {
  tuning::task_spec task;
  task.name = "shell";
  task.workload.workdir = workdir;
  task.workload.launcher = tuning::launcher_kind::command;
  task.workload.argv = {"/bin/sh", "-c", script};
  task.metrics.require_final_line = false;
  task.limits.timeout_s = 60.0;
  task.limits.kill_grace_s = 1.0;
  return task;
}

/// The rank (a shell) ignores SIGTERM, as does the child it leaves in its process group
/// (ignored signals stay ignored across exec); it writes "RANK_PID CHILD_PID" to `pids` and
/// then sleeps in the foreground: three processes in one group, none of which SIGTERM ends.
const std::string stubborn_rank_with_child =
    "trap '' TERM; sleep 100 & echo \"$$ $!\" > pids.tmp && mv pids.tmp pids; sleep 100";

/// The two pids the stubborn rank wrote, waiting up to 10 s for the file; {-1, -1} if it never
/// appeared.
std::pair<pid_t, pid_t> read_pids(const std::string& file) {
  auto deadline = steady::now() + 10s;
  while (steady::now() < deadline) {
    std::ifstream in{file};
    long rank = -1;
    long child = -1;
    if (in >> rank >> child)
      return {static_cast<pid_t>(rank), static_cast<pid_t>(child)};
    std::this_thread::sleep_for(10ms);
  }
  return {-1, -1};
}

/// What the helper thread saw of the running trial.
struct observed_trial {
  pid_t rank_pid = -1;
  pid_t child_pid = -1;
  std::vector<pid_t> members;  ///< group_members(rank_pid) while it ran
  std::size_t live_groups = 0; ///< live_group_count() while it ran
  steady::time_point acted_at; ///< when the thread stopped or signalled the trial
};

class ProcessRegistryTest : public ::testing::Test {
protected:
  test::temp_dir dir;

  /// Runs the stubborn trial; ~0.5 s after launch (once its pids are known) a second thread
  /// records what runs and calls `act` with it. Returns the launcher's report and what was
  /// observed.
  std::pair<trial_report, observed_trial>
  run_stubborn(const tuning::task_spec& task, const std::atomic<bool>* stop,
               const std::function<void(const observed_trial&)>& act) {
    trial_request req;
    req.task = &task;
    req.trial_dir = dir.sub("trial");
    req.trial_id = 11;
    req.stop = stop;
    observed_trial seen;
    auto start = steady::now();
    std::thread helper{[&] {
      auto [rank, child] = read_pids(dir.sub("pids"));
      seen.rank_pid = rank;
      seen.child_pid = child;
      std::this_thread::sleep_until(start + 500ms);
      if (rank > 0) {
        seen.members = group_members(rank);
        seen.live_groups = live_group_count();
      }
      seen.acted_at = steady::now();
      act(seen);
    }};
    auto rep = run_trial(req);
    helper.join();
    if (!rep)
      throw std::runtime_error(describe(rep.error()));
    return {std::move(*rep), seen};
  }

  /// Every process the trial had is gone and its group is empty and unregistered.
  static void expect_nothing_left(const observed_trial& seen) {
    for (auto pid : seen.members)
      EXPECT_FALSE(alive(pid)) << "process " << pid << " of the trial survived it";
    EXPECT_FALSE(alive(seen.rank_pid));
    EXPECT_FALSE(alive(seen.child_pid));
    EXPECT_TRUE(group_members(seen.rank_pid).empty());
    EXPECT_EQ(live_group_count(), 0u);
    EXPECT_EQ(signal_all_groups(0), 0u);
  }

  /// The trial really had its three processes in one registered group while it ran.
  static void expect_running_trial(const observed_trial& seen) {
    ASSERT_GT(seen.rank_pid, 1) << "the rank never wrote its pids";
    ASSERT_GT(seen.child_pid, 1);
    EXPECT_NE(seen.rank_pid, seen.child_pid);
    EXPECT_EQ(seen.members.size(), 3u); // the shell, its background child, its foreground sleep
    EXPECT_NE(std::find(seen.members.begin(), seen.members.end(), seen.rank_pid),
              seen.members.end());
    EXPECT_NE(std::find(seen.members.begin(), seen.members.end(), seen.child_pid),
              seen.members.end());
    EXPECT_EQ(seen.live_groups, 1u);
  }
};

TEST_F(ProcessRegistryTest, SpawnRegistersOnlyWhatItIsAskedToAndDeadGroupsLeave) {
  ASSERT_EQ(live_group_count(), 0u);
  spawn_request plain{{"/bin/sleep", "30"}, current_environment(), dir.path()};
  auto unregistered = spawn(plain);
  ASSERT_TRUE(unregistered) << describe(unregistered.error());
  EXPECT_EQ(live_group_count(), 0u);

  auto tracked_req = plain;
  tracked_req.register_group = true;
  auto tracked = spawn(tracked_req);
  ASSERT_TRUE(tracked) << describe(tracked.error());
  EXPECT_EQ(live_group_count(), 1u);
  // SIGKILL reaches the registered group only.
  EXPECT_EQ(signal_all_groups(SIGKILL), 1u);
  int status = 0;
  ASSERT_EQ(::waitpid(tracked->pid, &status, 0), tracked->pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_TRUE(alive(unregistered->pid));
  // Reaped and without members: dropped even before anyone unregisters it.
  EXPECT_EQ(live_group_count(), 0u);
  EXPECT_EQ(signal_all_groups(SIGKILL), 0u);
  unregister_group(tracked->pid); // no effect on an absent group
  EXPECT_EQ(live_group_count(), 0u);

  signal_group(unregistered->pid, SIGKILL);
  ASSERT_EQ(::waitpid(unregistered->pid, &status, 0), unregistered->pid);
  for (int fd :
       {unregistered->stdout_fd, unregistered->stderr_fd, tracked->stdout_fd, tracked->stderr_fd})
    ::close(fd);

  // A program that cannot be executed leaves nothing registered.
  tracked_req.argv = {dir.path()}; // a directory: execve fails with EACCES
  auto failed = spawn(tracked_req);
  ASSERT_FALSE(failed);
  EXPECT_EQ(code_of(failed.error()), errc::not_found) << describe(failed.error());
  EXPECT_EQ(live_group_count(), 0u);
}

TEST_F(ProcessRegistryTest, StopRequestEndsEveryProcessOfARankWithAChild) {
  auto task = shell_task(dir.path(), stubborn_rank_with_child);
  std::atomic<bool> stop{false};
  auto [report, seen] = run_stubborn(task, &stop, [&stop](const observed_trial&) { stop = true; });
  auto returned_at = steady::now();
  const auto* result = report.result.get();
  EXPECT_EQ(result->outcome(), wire::Outcome::Preempted) << result->detail()->str();
  EXPECT_EQ(result->detail()->str(), "stop requested (preempted)");
  expect_running_trial(seen);
  // SIGTERM is ignored, so only the SIGKILL kill_grace_s later ends it, and the launcher
  // returns soon after.
  double after_stop_s = seconds_between(seen.acted_at, returned_at);
  EXPECT_GE(after_stop_s, task.limits.kill_grace_s);
  EXPECT_LT(after_stop_s, task.limits.kill_grace_s + 3.0);
  expect_nothing_left(seen);
}

TEST_F(ProcessRegistryTest, SignalAllGroupsKillsEveryProcessOfARunningTrial) {
  auto task = shell_task(dir.path(), stubborn_rank_with_child);
  std::size_t signalled = 0;
  bool gone_at_once = false;
  auto [report, seen] = run_stubborn(task, nullptr, [&](const observed_trial& running) {
    signalled = signal_all_groups(SIGKILL);
    // Every process dies from that signal itself, well before the launcher would send its own
    // SIGKILL (kill_grace_s = 1 s after it notices the rank's death).
    auto deadline = steady::now() + 300ms;
    for (;;) {
      gone_at_once = std::none_of(running.members.begin(), running.members.end(), alive);
      if (gone_at_once || steady::now() >= deadline)
        break;
      std::this_thread::sleep_for(5ms);
    }
  });
  auto returned_at = steady::now();
  EXPECT_EQ(signalled, 1u); // the trial's one group
  EXPECT_TRUE(gone_at_once) << "signal_all_groups(SIGKILL) did not end every process at once";
  expect_running_trial(seen);
  const auto* result = report.result.get();
  // The rank died from SIGKILL 0.5 s after launch, before any metrics line (this task prints
  // none): the start-up phase, so launch_error, exit -9.
  EXPECT_EQ(result->outcome(), wire::Outcome::LaunchError) << result->detail()->str();
  EXPECT_EQ(result->exit_code(), -SIGKILL);
  EXPECT_NE(result->detail()->str().find("killed by signal 9"), std::string::npos)
      << result->detail()->str();
  EXPECT_GT(result->wall_time_s(), 0.45); // killed at 0.5 s after the test's start
  EXPECT_LT(seconds_between(seen.acted_at, returned_at), 3.0);
  expect_nothing_left(seen);
}

} // namespace
} // namespace infrarsi::adapters
