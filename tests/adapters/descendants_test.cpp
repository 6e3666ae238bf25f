// Tests for adapters/descendants.cpp and the process-table pieces of adapters/process.cpp with
// real processes: the table describes this process, the adopted-zombie reaper never takes the
// exit status of a child spawn() started, and a descendant in its own session is found and
// ended by the /proc walk and by the cgroup v2 (where this machine lets the test create one).

#include "adapters/descendants.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "adapters/process.hpp"
#include "messages/errc.hpp"

namespace infrarsi::adapters {
namespace {

const process_entry* find(const std::vector<process_entry>& table, pid_t pid) {
  for (const auto& e : table)
    if (e.pid == pid)
      return &e;
  return nullptr;
}

/// Polls `done` every 20 ms for up to `seconds`; returns its last value.
template <class F>
bool eventually(F done, double seconds = 10.0) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// A rank running the Python `script`, carrying `tree`'s trial marker in its environment.
spawn_request marked_rank(const trial_descendants& tree, const std::string& script) {
  auto env = current_environment();
  env[trial_descendants::marker_name] = tree.marker_value();
  return {{"python3", "-c", script}, env, ""};
}

TEST(ProcessTable, DescribesThisProcess) {
  auto table = process_table();
  ASSERT_GT(table.size(), 1u);
  const auto* self = find(table, ::getpid());
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->ppid, ::getppid());
  EXPECT_EQ(self->pgrp, ::getpgrp());
  EXPECT_EQ(self->session, ::getsid(0));
  EXPECT_GT(self->start_ticks, 0u);
  EXPECT_NE(self->state, 'Z');
}

TEST(ProcessTable, AdoptedZombieReaperLeavesOwnChildrenAlone) {
  ASSERT_TRUE(become_subreaper());
  auto child = spawn({{"true"}, current_environment(), ""});
  ASSERT_TRUE(child) << describe(child.error());
  ::close(child->stdout_fd);
  ::close(child->stderr_fd);
  ASSERT_TRUE(eventually([&] {
    auto table = process_table();
    const auto* e = find(table, child->pid);
    return e != nullptr && e->state == 'Z';
  }));
  reap_adopted_zombies(process_table());
  int status = -1;
  EXPECT_EQ(reap_child(child->pid, status, 0), child->pid) << "the reaper took our child";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(ProcessTable, EnvironIsReadAsPresentAbsentOrUnreadable) {
  // (/proc/<pid>/environ is the environment a process was started with, so each case is a
  // child started with the environment under test.)
  auto with_marker = spawn({{"/bin/sleep", "300"}, {{"INFRARSI_ENVIRON_TEST", "yes"}}, ""});
  ASSERT_TRUE(with_marker) << describe(with_marker.error());
  // A process with an empty environment reads like one inside execve: undecided, not foreign.
  auto empty = spawn({{"/bin/sleep", "300"}, {}, ""});
  ASSERT_TRUE(empty) << describe(empty.error());
  EXPECT_EQ(environ_has(with_marker->pid, "INFRARSI_ENVIRON_TEST=yes"), std::optional<bool>{true});
  EXPECT_EQ(environ_has(with_marker->pid, "INFRARSI_ENVIRON_TEST=no"),
            std::optional<bool>{false});
  EXPECT_EQ(environ_has(empty->pid, "INFRARSI_ENVIRON_TEST=yes"), std::nullopt);
  for (const auto* c : {&*with_marker, &*empty}) {
    ::close(c->stdout_fd);
    ::close(c->stderr_fd);
    signal_group(c->pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(reap_child(c->pid, status, 0), c->pid);
    // Gone: nothing to read.
    EXPECT_EQ(environ_has(c->pid, "INFRARSI_ENVIRON_TEST=yes"), std::nullopt);
  }
}

TEST(Descendants, AnAdoptedProcessWhoseEnvironmentReadsEmptyIsUndecidedUntilItCanBeRead) {
  trial_descendants tree{false};
  ASSERT_TRUE(become_subreaper());
  // The rank's child leaves the rank's session with an empty environment and the rank exits:
  // the child is adopted, and its environment says nothing about which trial it belongs to.
  auto req = marked_rank(tree, "import os, sys\n"
                               "if os.fork() == 0:\n"
                               "    os.setsid()\n"
                               "    os.execve('/bin/sleep', ['sleep', '300'], {})\n"
                               "sys.exit(0)\n");
  auto rank = spawn(req);
  ASSERT_TRUE(rank) << describe(rank.error());
  ::close(rank->stdout_fd);
  ::close(rank->stderr_fd);
  tree.add_rank(rank->pid);
  int status = 0;
  ASSERT_EQ(reap_child(rank->pid, status, 0), rank->pid);
  pid_t orphan = -1;
  ASSERT_TRUE(eventually([&] {
    for (const auto& e : process_table())
      if (e.ppid == ::getpid() && e.state != 'Z' && e.pid != rank->pid
          && environ_has(e.pid, "PATH=/nonexistent") == std::nullopt) {
        // Only the orphan is adopted by this test with an empty environment.
        std::ifstream cmd{"/proc/" + std::to_string(e.pid) + "/cmdline"};
        std::string argv0;
        std::getline(cmd, argv0, '\0');
        if (argv0 == "sleep")
          orphan = e.pid;
      }
    return orphan > 0;
  })) << "the orphan was not adopted";
  auto table = process_table();
  tree.observe(table);
  EXPECT_TRUE(tree.has_undecided());
  EXPECT_TRUE(tree.live(table).empty());
  ::kill(orphan, SIGKILL);
  EXPECT_TRUE(eventually([&] {
    reap_adopted_zombies(process_table());
    return !std::filesystem::exists("/proc/" + std::to_string(orphan));
  }));
  tree.observe(process_table());
  EXPECT_FALSE(tree.has_undecided());
}

/// Starts a rank that puts a `sleep 300` in its own session and then sleeps itself; returns the
/// rank's pid and fills `sleeper` once the walk or the cgroup shows two live processes.
class DescendantsTest : public ::testing::TestWithParam<bool> {};

TEST_P(DescendantsTest, FindsASetsidDescendantAndEndsIt) {
  trial_descendants tree{GetParam()};
  // The cgroup case needs a writable cgroup v2 (root on Debian 12, where the suite runs).
  ASSERT_EQ(tree.uses_cgroup(), GetParam()) << tree.description();
  auto req = marked_rank(tree, "import os, time\n"
                               "if os.fork() == 0:\n"
                               "    os.setsid()\n"
                               "    os.execvp('sleep', ['sleep', '300'])\n"
                               "time.sleep(300)\n");
  req.cgroup_procs = tree.cgroup_procs_file();
  auto rank = spawn(req);
  ASSERT_TRUE(rank) << describe(rank.error());
  ::close(rank->stdout_fd);
  ::close(rank->stderr_fd);
  tree.add_rank(rank->pid);
  // The tree shows the rank and its child once the child has its own session.
  pid_t sleeper = -1;
  ASSERT_TRUE(eventually([&] {
    auto table = process_table();
    tree.observe(table);
    auto live = tree.live(table);
    if (live.size() != 2)
      return false;
    sleeper = live[0] == rank->pid ? live[1] : live[0];
    const auto* e = find(table, sleeper);
    return e != nullptr && e->session == sleeper && e->pgrp != rank->pid;
  })) << tree.description();
  // The rank ends first: its child is adopted by this process (a child subreaper).
  signal_group(rank->pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(reap_child(rank->pid, status, 0), rank->pid);
  ASSERT_TRUE(eventually([&] {
    auto t = process_table();
    const auto* s = find(t, sleeper);
    return s != nullptr && s->ppid == ::getpid();
  })) << "the orphan was not adopted by the subreaper";
  auto t = process_table();
  tree.observe(t);
  ASSERT_EQ(tree.live(t), std::vector<pid_t>{sleeper});
  EXPECT_EQ(tree.signal_all(SIGKILL), 1u);
  EXPECT_TRUE(eventually([&] {
    reap_adopted_zombies(process_table());
    return !std::filesystem::exists("/proc/" + std::to_string(sleeper));
  })) << "the adopted descendant was not killed and reaped";
}

INSTANTIATE_TEST_SUITE_P(CgroupOrProcWalk, DescendantsTest, ::testing::Bool(),
                         [](const auto& param_info) {
                           return param_info.param ? "Cgroup" : "ProcWalk";
                         });

TEST(Descendants, DescriptionNamesTheMechanismAndTheCgroupIsRemoved) {
  std::string dir;
  {
    trial_descendants walk{false};
    EXPECT_FALSE(walk.uses_cgroup());
    EXPECT_EQ(walk.description(), "/proc walk (cgroup v2 not used: disabled for this trial)");
    EXPECT_TRUE(walk.cgroup_procs_file().empty());
    trial_descendants tree{true};
    if (tree.uses_cgroup()) {
      EXPECT_EQ(tree.description().rfind("cgroup v2 /", 0), 0u) << tree.description();
      dir = tree.cgroup_procs_file();
      EXPECT_TRUE(std::filesystem::exists(dir));
      dir = std::filesystem::path{dir}.parent_path().string();
    } else {
      EXPECT_EQ(tree.description().rfind("/proc walk (cgroup v2 not used: ", 0), 0u)
        << tree.description();
    }
    EXPECT_NE(walk.marker_value(), tree.marker_value());
  }
  if (!dir.empty()) {
    EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  }
}

TEST(Descendants, ACgroupLeftByADeadLauncherIsEmptiedAndRemoved) {
  std::string own;
  {
    trial_descendants probe{true};
    ASSERT_TRUE(probe.uses_cgroup()) << "needs a writable cgroup v2: " << probe.description();
    own = std::filesystem::path{probe.cgroup_procs_file()}.parent_path().parent_path().string();
  }
  // A pid that is surely dead: a child that exited and was reaped.
  auto gone = spawn({{"true"}, current_environment(), ""});
  ASSERT_TRUE(gone) << describe(gone.error());
  ::close(gone->stdout_fd);
  ::close(gone->stderr_fd);
  int status = 0;
  ASSERT_EQ(reap_child(gone->pid, status, 0), gone->pid);
  auto stale = own + "/infrarsi-trial-" + std::to_string(gone->pid) + "-77";
  ASSERT_TRUE(std::filesystem::create_directory(stale)) << stale;
  spawn_request req{{"sleep", "300"}, current_environment(), ""};
  req.cgroup_procs = stale + "/cgroup.procs";
  auto left = spawn(req); // what the dead launcher's trial left running
  ASSERT_TRUE(left) << describe(left.error());
  ::close(left->stdout_fd);
  ::close(left->stderr_fd);
  ASSERT_EQ(cgroup_members(stale), std::vector<pid_t>{left->pid});
  EXPECT_GE(sweep_stale_trial_cgroups(), 1u);
  ASSERT_EQ(reap_child(left->pid, status, 0), left->pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_FALSE(std::filesystem::exists(stale));
  // A live launcher's cgroup (this process's own trial) is left alone.
  trial_descendants mine{true};
  ASSERT_TRUE(mine.uses_cgroup());
  sweep_stale_trial_cgroups();
  EXPECT_TRUE(std::filesystem::exists(mine.cgroup_procs_file()));
}

} // namespace
} // namespace infrarsi::adapters
