// Tests for adapters/classify.cpp: every rule, without processes.

#include "adapters/classify.hpp"

#include <gtest/gtest.h>

namespace infrarsi::adapters {
namespace {

using kind = trial_cause::kind_t;

trial_observation base() {
  trial_observation o;
  o.launch_window_s = 3.0;
  o.oom_exit_codes = {86};
  return o;
}

TEST(Classify, AllZeroWithFinalLineIsOk) {
  auto o = base();
  o.all_exited_zero = true;
  o.final_line_required = true;
  o.final_line_seen = true;
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Ok);
  o.final_line_seen = false;
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::Crash);
  EXPECT_EQ(v.detail, "exited 0 without the final metrics line");
  o.final_line_seen = true;
  o.final_line_ok = false;
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Crash);
}

TEST(Classify, ExecFailureIsLaunchErrorWhateverElseHappened) {
  auto o = base();
  o.causes = {{kind::timeout, 0.5, -1, 0, "t"}, {kind::exec_failed, 1.0, 1, 127, "no binary"}};
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::LaunchError);
  EXPECT_EQ(v.detail, "rank 1: no binary");
}

TEST(Classify, TheFirstCauseInTimeWins) {
  auto o = base();
  o.first_metrics_at_s = 1.0;
  // rank 0 crashes at 10 s (connection reset) after rank 1 printed OOM at 9.5 s.
  o.causes = {{kind::exit_nonzero, 10.0, 0, 1, "exited with status 1"},
              {kind::oom_text, 9.5, 1, 0, "CUDA out of memory"}};
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Oom);
  // Reverse the times: the crash came first.
  o.causes[0].at_s = 9.0;
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::Crash);
  EXPECT_EQ(v.exit_code, 1);
}

TEST(Classify, AnEarlyStopForAContractViolationIsContractViolationWithItsDetail) {
  // The launcher stopped the trial when the metrics proved a loss drift; the ranks' SIGTERM
  // exits after that are consequences.
  auto o = base();
  o.first_metrics_at_s = 1.0;
  o.stop_began_at_s = 1.5;
  o.causes = {{kind::contract_violation, 1.5, -1, 0,
               "loss_drift: step 0 loss 5.5; stopped early at step 0 of 10"},
              {kind::killed_by_signal, 1.6, 0, 15, "killed by signal 15"}};
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::ContractViolation);
  EXPECT_EQ(v.detail, "loss_drift: step 0 loss 5.5; stopped early at step 0 of 10");
  // An OOM before it is still the cause.
  o.causes.insert(o.causes.begin(), {kind::oom_text, 1.2, 1, 0, "out of memory"});
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Oom);
}

TEST(Classify, EventsAfterTheLauncherBeganStoppingAreConsequences) {
  auto o = base();
  o.first_metrics_at_s = 0.5;
  o.stop_began_at_s = 5.0;
  o.causes = {{kind::timeout, 5.0, -1, 0, "limit"},
              {kind::killed_by_signal, 5.2, 0, 15, "SIGTERM"},
              {kind::oom_text, 5.1, 0, 0, "MemoryError while dying"}};
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Timeout);
  o.causes[0] = {kind::stop_requested, 5.0, -1, 0, "stop"};
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Preempted);
  o.causes[0] = {kind::memory_cap, 5.0, 1, 0, "RSS 3 GiB > cap"};
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::Oom);
  EXPECT_EQ(v.detail, "rank 1: RSS 3 GiB > cap");
}

TEST(Classify, ExitBeforeTheFirstMetricsLineIsLaunchErrorWhateverTheClockAfterItIsCrash) {
  auto o = base(); // launch window 3 s: no longer part of the rule
  o.causes = {{kind::exit_nonzero, 0.4, 0, 2, "exited with status 2"}};
  EXPECT_EQ(classify(o).outcome, wire::Outcome::LaunchError);
  // The same start-up failure on a loaded machine, later than the old window: the same class.
  o.causes[0].at_s = 3.5;
  EXPECT_EQ(classify(o).outcome, wire::Outcome::LaunchError);
  o.causes[0].at_s = 600.0;
  EXPECT_EQ(classify(o).outcome, wire::Outcome::LaunchError);
  o.causes[0].kind = kind::killed_by_signal;
  o.causes[0].code = 11;
  EXPECT_EQ(classify(o).outcome, wire::Outcome::LaunchError);
  o.causes[0] = {kind::exit_nonzero, 0.4, 0, 2, "exited with status 2"};
  o.first_metrics_at_s = 0.2; // it had already trained
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Crash);
  o.first_metrics_at_s = 0.4; // its first line and its exit read in the same instant: trained
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Crash);
}

TEST(Classify, AFailedRankQuotesTheTailOfItsOwnStderr) {
  auto o = base();
  o.stderr_tails = {"rank 0's last words", "Traceback (most recent call last): | RuntimeError: "
                                           "rendezvous failed"};
  o.causes = {{kind::exit_nonzero, 5.0, 1, 1, "exited with status 1"},
              {kind::killed_by_signal, 5.2, 0, 15, "killed by signal 15 (Terminated)"}};
  o.stop_began_at_s = 5.0;
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::LaunchError);
  EXPECT_EQ(v.detail, "rank 1: exited with status 1; stderr: Traceback (most recent call last): | "
                      "RuntimeError: rendezvous failed");
  o.first_metrics_at_s = 1.0;
  v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::Crash);
  EXPECT_EQ(v.detail, "rank 1: exited with status 1; stderr: Traceback (most recent call last): | "
                      "RuntimeError: rendezvous failed");
  // A rank with nothing on stderr quotes nothing; an OOM or a timeout quotes nothing.
  o.stderr_tails = {"x", ""};
  EXPECT_EQ(classify(o).detail, "rank 1: exited with status 1");
  o.stderr_tails = {"x", "MemoryError"};
  o.causes[0] = {kind::oom_text, 5.0, 1, 0, "out of memory ('MemoryError'): MemoryError"};
  EXPECT_EQ(classify(o).detail, "rank 1: out of memory ('MemoryError'): MemoryError");
  o.causes[0] = {kind::timeout, 5.0, -1, 0, "limit"};
  EXPECT_EQ(classify(o).detail, "limit");
}

TEST(StderrTail, KeepsTheLastEightLinesWithinAThousandCharactersEndingInTheException) {
  stderr_tail tail;
  EXPECT_EQ(tail.text(), "");
  tail.add("Traceback (most recent call last):");
  tail.add("  File \"train.py\", line 3, in <module>");
  tail.add("");
  tail.add("   \r");
  tail.add("    dist.init_process_group()\r");
  tail.add("RuntimeError: boom");
  EXPECT_EQ(tail.text(), "Traceback (most recent call last): | File \"train.py\", line 3, in "
                         "<module> | dist.init_process_group() | RuntimeError: boom");
  for (int i = 0; i < 20; ++i)
    tail.add("line " + std::to_string(i));
  tail.add("ValueError: last");
  EXPECT_EQ(tail.text(), "line 13 | line 14 | line 15 | line 16 | line 17 | line 18 | line 19 | "
                         "ValueError: last");
  // 1000 characters: the earliest lines go first; the exception line stays.
  tail.add(std::string(600, 'a'));
  tail.add(std::string(380, 'b'));
  tail.add("KeyError: 'x'"); // 600 + 380 + 13 = 993 fit; "ValueError: last" (16) would not
  EXPECT_EQ(tail.text(), std::string(600, 'a') + " | " + std::string(380, 'b') + " | KeyError: 'x'");
  tail.add(std::string(1500, 'c')); // longer than the limit: its first 1000 characters
  EXPECT_EQ(tail.text(), std::string(1000, 'c'));
}

TEST(Classify, OomExitStatusIsOom) {
  auto o = base();
  o.first_metrics_at_s = 0.1;
  o.causes = {{kind::exit_nonzero, 2.0, 0, 86, "exited with status 86"}};
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::Oom);
  EXPECT_EQ(v.exit_code, 86);
}

TEST(Classify, SignalDeathIsCrashWithNegativeExitCode) {
  auto o = base();
  o.first_metrics_at_s = 0.1;
  o.causes = {{kind::killed_by_signal, 4.0, 0, 11, "killed by signal 11"}};
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::Crash);
  EXPECT_EQ(v.exit_code, -11);
}

TEST(Classify, CollectiveFailureBeforeOomTextIsCrashNamingTheCollective) {
  auto o = base();
  o.first_metrics_at_s = 1.0;
  // Rank 0: NCCL watchdog at 20 s, CUDA OOM text at 20.3 s, exit 1 at 20.4 s.
  o.causes = {{kind::collective_text, 20.0, 0, 0, "NCCL watchdog: collective timed out: ..."},
              {kind::oom_text, 20.3, 0, 0, "out of memory ('CUDA out of memory'): ..."},
              {kind::exit_nonzero, 20.4, 0, 1, "exited with status 1"}};
  o.stop_began_at_s = 20.3;
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::Crash);
  EXPECT_EQ(v.detail, "collective communication failed: rank 0: NCCL watchdog: collective timed "
                      "out: ...");
  EXPECT_EQ(v.exit_code, 1); // the rank's exit is the evidence, although it came after the stop
  // The same text after the OOM: the OOM decides.
  o.causes[0].at_s = 20.35;
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Oom);
}

TEST(Classify, CollectiveTextAloneDecidesNothing) {
  auto o = base();
  o.first_metrics_at_s = 0.5;
  o.all_exited_zero = true;
  o.final_line_required = true;
  o.final_line_seen = true;
  o.causes = {{kind::collective_text, 4.0, 1, 0, "connection reset by peer: ..."}};
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::Ok);
  EXPECT_EQ(v.detail, "completed");
  // With a failure after it, it is the cause; with a timeout after it too (a hung collective).
  o.all_exited_zero = false;
  o.causes.push_back({kind::timeout, 60.0, -1, 0, "limit"});
  v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::Crash);
  EXPECT_EQ(v.detail.rfind("collective communication failed: rank 1: ", 0), 0u) << v.detail;
}

TEST(Classify, APeerKilledBySignalIsTheCauseOfTheOthersCollectiveErrors) {
  // Rank 1 is killed (SIGKILL) during training; rank 0's gloo read fails at once and is read
  // from its stderr before the launcher reaps rank 1, which starts the stop.
  auto o = base();
  o.first_metrics_at_s = 1.0;
  o.causes = {{kind::collective_text, 4.0, 0, 0, "connection reset by peer: Read error"},
              {kind::killed_by_signal, 4.2, 1, 9, "killed by signal 9 (Killed)"},
              {kind::exit_nonzero, 4.3, 0, 1, "exited with status 1"}};
  o.stop_began_at_s = 4.2;
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::Crash);
  EXPECT_EQ(v.detail.rfind("rank 1: killed by signal 9", 0), 0u) << v.detail;
  EXPECT_EQ(v.exit_code, -9);
  // A rank that printed the collective error itself and then exited is not a peer: the
  // collective error stays the cause.
  o.causes = {{kind::collective_text, 4.0, 0, 0, "connection reset by peer: Read error"},
              {kind::exit_nonzero, 4.2, 0, 1, "exited with status 1"}};
  v = classify(o);
  EXPECT_EQ(v.detail.rfind("collective communication failed: rank 0: ", 0), 0u) << v.detail;
  EXPECT_EQ(v.exit_code, 1);
  // A peer's death after the stop began is a consequence, not the cause.
  o.causes = {{kind::collective_text, 4.0, 0, 0, "connection reset by peer: Read error"},
              {kind::exit_nonzero, 4.1, 0, 1, "exited with status 1"},
              {kind::killed_by_signal, 4.5, 1, 15, "killed by signal 15 (Terminated)"}};
  o.stop_began_at_s = 4.1;
  v = classify(o);
  EXPECT_EQ(v.detail.rfind("collective communication failed: rank 0: ", 0), 0u) << v.detail;
}

TEST(Classify, CollectiveFailureAtStartIsLaunchError) {
  auto o = base();
  o.causes = {{kind::collective_text, 1.0, 0, 0, "distributed network error: ..."},
              {kind::exit_nonzero, 1.1, 0, 1, "exited with status 1"}};
  auto v = classify(o);
  EXPECT_EQ(v.outcome, wire::Outcome::LaunchError);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.detail.rfind("collective communication failed: ", 0), 0u) << v.detail;
  // A rendezvous that gives up after its own timeout (30 s) is still the start.
  o.causes = {{kind::collective_text, 30.0, 0, 0, "rendezvous store error: ..."},
              {kind::exit_nonzero, 30.1, 0, 1, "exited with status 1"}};
  EXPECT_EQ(classify(o).outcome, wire::Outcome::LaunchError);
  o.first_metrics_at_s = 2.0;
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Crash);
}

TEST(CollectivePatterns, EachMatchesItsOwnTextAndBenignWarningsMatchNone) {
  const auto& patterns = collective_failure_patterns();
  ASSERT_GE(patterns.size(), 10u);
  for (const auto& p : patterns) {
    auto line = std::string{"[rank3]: prefix "} + p.text + " suffix";
    const auto* found = find_collective_pattern(line);
    ASSERT_NE(found, nullptr) << p.text;
    EXPECT_STREQ(found->what, p.what) << p.text; // no earlier pattern shadows it
  }
  // Real messages of failed collectives.
  EXPECT_STREQ(find_collective_pattern("[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
                                       "collective operation timeout: WorkNCCL(SeqNum=5)")
                 ->what,
               "NCCL watchdog: collective timed out");
  EXPECT_STREQ(find_collective_pattern("RuntimeError: [../third_party/gloo/gloo/transport/tcp/"
                                       "pair.cc:534] Connection closed by peer [127.0.0.1]:1234")
                 ->what,
               "gloo: connection closed by peer");
  EXPECT_STREQ(find_collective_pattern("torch.distributed.DistBackendError: NCCL error in: "
                                       "ProcessGroupNCCL.cpp:1970, unhandled system error")
                 ->what,
               "NCCL error");
  // PyTorch's warnings on a clean exit name ProcessGroupNCCL but report no failure.
  EXPECT_EQ(find_collective_pattern("[W ProcessGroupNCCL.cpp:1250] Warning: WARNING: process "
                                    "group has NOT been destroyed before we destruct "
                                    "ProcessGroupNCCL."),
            nullptr);
  EXPECT_EQ(find_collective_pattern("NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>"), nullptr);
}

} // namespace
} // namespace infrarsi::adapters
