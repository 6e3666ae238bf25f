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

TEST(Classify, EarlyExitBeforeMetricsIsLaunchErrorLaterIsCrash) {
  auto o = base();
  o.causes = {{kind::exit_nonzero, 0.4, 0, 2, "exited with status 2"}};
  EXPECT_EQ(classify(o).outcome, wire::Outcome::LaunchError);
  o.causes[0].at_s = 3.5; // outside the launch window
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Crash);
  o.causes[0].at_s = 0.4;
  o.first_metrics_at_s = 0.2; // it had already trained
  EXPECT_EQ(classify(o).outcome, wire::Outcome::Crash);
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

} // namespace
} // namespace infrarsi::adapters
