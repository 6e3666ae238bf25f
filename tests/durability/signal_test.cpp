// Ctrl-C and SIGTERM during a trial: `infrarsi tune --nodes 2` on a simulator task whose trials
// sleep (while a flag file exists) gets SIGINT or SIGTERM, sent to the tune process alone, right
// after the log acknowledged a TrialDispatched. It must exit 130 / 143 within kill_grace_s and a
// few seconds, leave no process of any trial behind (they run in their own process groups), log
// RunInterrupted naming the attempts in flight; a resume with --run finds those attempts lost,
// re-queues each once as the next attempt and finishes the run. A second SIGINT right after the
// first exits at once, again with no trial process left.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sim_task.hpp"
#include "test_util.hpp"
#include "tune_process.hpp"

namespace infrarsi {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

/// A task whose trials sleep 20 s (longer than any wait here, shorter than timeout_s) before the
/// simulator runs while `dir`/slow exists; with
/// `ignore_term` the trial's shell (and so its sleep) ignores SIGTERM, so only the SIGKILL after
/// kill_grace_s ends it.
std::string write_task(const test::temp_dir& dir, bool ignore_term, int kill_grace_s) {
  std::string script = std::string{ignore_term ? "trap \"\" TERM; " : ""} + "if [ -e "
                       + dir.sub("slow") + " ]; then sleep 20; fi; exec \"$0\" \"$@\"";
  std::string text = test::small_sim_task_text(
    dir, script,
    "\n[budget]\ntrials = 2\nbaseline_repeats = 2\nverify_top = 1\nverify_repeats = 2\n");
  test::replace_first(text, "kill_grace_s = 1", "kill_grace_s = " + std::to_string(kill_grace_s));
  auto path = dir.sub("sim-signal.toml");
  std::ofstream{path} << text;
  std::ofstream{dir.sub("slow")} << "1\n";
  return path;
}

using attempt = std::pair<std::uint64_t, std::uint32_t>;

/// Interrupts a run with `signals` (sent to the tune process only, `gap` apart) once a trial is
/// in flight; checks the exit status and time, that no trial process is left, and the
/// RunInterrupted event. Returns the store, run id and the attempts it names as in flight.
struct interrupted {
  std::string store;
  std::string run_id;
  std::set<attempt> in_flight;
};

interrupted interrupt_run(const test::temp_dir& dir, const std::string& task,
                          const std::vector<int>& signals, std::chrono::milliseconds gap,
                          std::chrono::milliseconds exit_within, int expected_exit) {
  interrupted r;
  r.store = dir.sub("store");
  const auto trace = dir.sub("trace");
  const auto output = dir.sub("output-interrupted");
  pid_t pid = test::start_cli({"tune", task, "--store", r.store, "--nodes", "2", "--seed", "3",
                               "--trace-appends", trace},
                              output);
  EXPECT_GT(pid, 0);
  if (!test::wait_dispatched(pid, trace)) {
    ADD_FAILURE() << "no trial was dispatched; output:\n" << test::file_text(output);
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return r;
  }
  // The trials' processes come up (and sleep 20 s): wait for them, up to 10 s on a loaded box.
  std::size_t trial_processes = 0;
  for (auto until = clock_type::now() + 10s; trial_processes == 0 && clock_type::now() < until;) {
    std::this_thread::sleep_for(20ms);
    for (const auto& p : test::processes_mentioning(dir.path() + "/"))
      trial_processes += p.rfind(std::to_string(pid) + " ", 0) == 0 ? 0 : 1;
  }
  EXPECT_GT(trial_processes, 0u) << "no trial process is running: the test would prove nothing";
  auto sent = clock_type::now();
  for (std::size_t i = 0; i < signals.size(); ++i) {
    if (i > 0)
      std::this_thread::sleep_for(gap);
    sent = clock_type::now();
    ::kill(pid, signals[i]);
  }
  // Waits longer than it must take, so that a late exit still shows its status and the rest.
  auto status = test::wait_exit(pid, exit_within + 15s);
  auto took = std::chrono::duration<double>(clock_type::now() - sent).count();
  EXPECT_LE(took, std::chrono::duration<double>(exit_within).count())
    << "seconds from the last signal to the exit; output:\n" << test::file_text(output);
  if (!status) {
    ADD_FAILURE() << "tune still runs " << took << " s after the last signal; output:\n"
                  << test::file_text(output) << "\nprocesses:\n"
                  << ::testing::PrintToString(test::processes_mentioning(dir.path() + "/"));
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  } else {
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == expected_exit)
      << "wait status " << *status << " (exit " << (WIFEXITED(*status) ? WEXITSTATUS(*status) : -1)
      << ", signal " << (WIFSIGNALED(*status) ? WTERMSIG(*status) : 0) << ") after " << took
      << " s; output:\n" << test::file_text(output);
  }
  std::cout << "exited " << took << " s after the last signal\n";
  // Nothing of any trial is left (a process group SIGKILLed a moment ago may take a moment).
  auto left = test::processes_left(dir.path() + "/", 2000ms);
  EXPECT_TRUE(left.empty()) << "left behind:\n" << ::testing::PrintToString(left)
                            << "\noutput:\n" << test::file_text(output);
  for (const auto& p : left) // do not leave them to the next test
    ::kill(std::stoi(p.substr(0, p.find(' '))), SIGKILL);

  auto run = test::read_logged_run(r.store);
  if (!run) {
    ADD_FAILURE() << "no run in the store; output:\n" << test::file_text(output);
    return r;
  }
  r.run_id = run->run_id;
  auto marks = run->of(wire::EventKind::RunInterrupted);
  EXPECT_EQ(marks.size(), 1u) << "RunInterrupted events; output:\n" << test::file_text(output);
  std::set<attempt> dispatched;
  std::set<attempt> ended;
  for (const auto* e : run->of(wire::EventKind::TrialDispatched))
    dispatched.insert({e->trial, e->attempt});
  for (const auto* e : run->of(wire::EventKind::TrialCompleted))
    ended.insert({e->trial, e->attempt});
  for (const auto* e : run->of(wire::EventKind::TrialLost))
    ended.insert({e->trial, e->attempt});
  std::set<attempt> unfinished;
  for (const auto& a : dispatched)
    if (ended.count(a) == 0)
      unfinished.insert(a);
  if (!marks.empty()) {
    const auto& doc = marks.front()->doc;
    EXPECT_EQ(doc.value("signal", 0), signals.front()) << doc.dump();
    for (const auto& a : doc.value("in_flight", nlohmann::json::array()))
      r.in_flight.insert({a.at(0).get<std::uint64_t>(), a.at(1).get<std::uint32_t>()});
    EXPECT_FALSE(r.in_flight.empty()) << doc.dump();
    EXPECT_EQ(r.in_flight, unfinished)
      << "RunInterrupted names other attempts than those dispatched and unfinished: "
      << doc.dump();
  }
  return r;
}

/// Resumes the interrupted run (trials no longer sleep) and checks that the attempts in flight
/// were lost and re-queued once each, and that the run finished.
void resume_and_finish(const test::temp_dir& dir, const std::string& task, const interrupted& r) {
  std::filesystem::remove(dir.sub("slow"));
  ASSERT_FALSE(r.run_id.empty());
  const auto output = dir.sub("output-resumed");
  ASSERT_EQ(test::run_cli({"tune", task, "--store", r.store, "--run", r.run_id, "--nodes", "2",
                           "--quiet"},
                          output),
            0)
    << test::file_text(output);
  auto run = test::read_logged_run(r.store, r.run_id);
  ASSERT_TRUE(run);
  std::map<attempt, int> lost;
  std::map<attempt, int> proposed;
  std::map<attempt, int> terminal;
  for (const auto* e : run->of(wire::EventKind::TrialLost)) {
    ++lost[{e->trial, e->attempt}];
    ++terminal[{e->trial, e->attempt}];
  }
  for (const auto* e : run->of(wire::EventKind::TrialCompleted))
    ++terminal[{e->trial, e->attempt}];
  for (const auto* e : run->of(wire::EventKind::TrialProposed))
    ++proposed[{e->trial, e->attempt}];
  for (const auto& a : r.in_flight) {
    EXPECT_EQ(lost[a], 1) << "trial " << a.first << " attempt " << a.second << " was in flight "
                          << "at the interruption; TrialLost events on resume: " << lost[a];
    const attempt next{a.first, a.second + 1};
    EXPECT_EQ(proposed[next], 1)
      << "trial " << a.first << " attempt " << a.second + 1 << " (the re-queue) proposed "
      << proposed[next] << " times";
    EXPECT_EQ(terminal[next], 1)
      << "the re-queued attempt of trial " << a.first << " did not end exactly once";
  }
  for (const auto& [a, n] : proposed)
    EXPECT_EQ(terminal[a], 1) << "trial " << a.first << " attempt " << a.second << " has "
                              << terminal[a] << " terminal events";
  EXPECT_EQ(lost.size(), r.in_flight.size()) << "other attempts were lost too";
  EXPECT_EQ(run->of(wire::EventKind::ChangesApplied).size(), 1u) << test::file_text(output);
  EXPECT_EQ(test::run_cli({"replay", r.run_id, "--store", r.store}, dir.sub("output-replay")), 0)
    << test::file_text(dir.sub("output-replay"));
}

TEST(Signals, SigintDuringATrialEndsItsProcessesExits130AndTheResumeRequeuesIt) {
  test::temp_dir dir;
  auto task = write_task(dir, /*ignore_term=*/false, /*kill_grace_s=*/1);
  auto r = interrupt_run(dir, task, {SIGINT}, 0ms, 1000ms + 4000ms, 130);
  resume_and_finish(dir, task, r);
}

TEST(Signals, SigtermDuringTrialsThatIgnoreItKillsThemAfterTheGraceExits143AndResumes) {
  test::temp_dir dir;
  // The trials ignore SIGTERM: only the SIGKILL after kill_grace_s (3 s) ends them. Both node
  // slots run one; their grace periods run together, so the exit comes within kill_grace_s and
  // a little (two grace periods one after the other would take more than 6 s).
  auto task = write_task(dir, /*ignore_term=*/true, /*kill_grace_s=*/3);
  auto r = interrupt_run(dir, task, {SIGTERM}, 0ms, 3000ms + 3000ms, 143);
  resume_and_finish(dir, task, r);
}

TEST(Signals, ASecondSigintExitsAtOnceWithNoTrialProcessLeft) {
  test::temp_dir dir;
  // kill_grace_s = 20 and trials that ignore SIGTERM: the graceful path would take 20 s, so an
  // exit within a second proves the second signal cut it short.
  auto task = write_task(dir, /*ignore_term=*/true, /*kill_grace_s=*/20);
  auto r = interrupt_run(dir, task, {SIGINT, SIGINT}, 50ms, 1000ms, 130);
  resume_and_finish(dir, task, r);
}

} // namespace
} // namespace infrarsi
