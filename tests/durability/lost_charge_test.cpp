// kill -9 during a trial, then resume: the lost attempt is charged the device-seconds it ran.
// `infrarsi tune` on a simulator task whose trials sleep while a flag file exists is SIGKILLed
// (its whole process group) a few seconds after the log acknowledged a TrialDispatched; the
// resume finds the attempt lost, re-queues it and finishes. The lost attempt's wall time must
// cover the time from its dispatch to the kill (and end no later than the resume), and the
// report must charge it wall time x world size (8 devices), in its trial entry, under the cost
// of lost trials and in the total.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim_task.hpp"
#include "test_util.hpp"
#include "tune_process.hpp"

namespace infrarsi {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

TEST(LostCharge, AnAttemptKilledWithTheHarnessIsChargedTheTimeItRan) {
  test::temp_dir dir;
  // The first trial sleeps 6 s while the flag exists (the kill comes 3 s in); later ones do not.
  std::string script = "if [ -e " + dir.sub("slow") + " ]; then rm -f " + dir.sub("slow") +
                       "; sleep 6; fi; "
                       "exec \"$0\" \"$@\"";
  auto text = test::small_sim_task_text(
      dir, script,
      "\n[budget]\ntrials = 1\nbaseline_repeats = 1\nverify_top = 1\nverify_repeats = 1\n");
  const auto task = dir.sub("sim-lost.toml");
  std::ofstream{task} << text;
  std::ofstream{dir.sub("slow")} << "1\n";
  const auto store = dir.sub("store");
  const auto trace = dir.sub("trace");
  const auto output = dir.sub("output");

  pid_t pid = test::start_cli({"tune", task, "--store", store, "--trace-appends", trace}, output);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(test::wait_dispatched(pid, trace)) << test::file_text(output);
  const auto seen = clock_type::now();
  std::this_thread::sleep_for(3s);
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  const double ran_at_least = std::chrono::duration<double>(clock_type::now() - seen).count();

  auto before = test::read_logged_run(store);
  ASSERT_TRUE(before) << test::file_text(output);
  EXPECT_EQ(test::run_cli({"tune", task, "--store", store, "--run", before->run_id}, output), 0)
      << test::file_text(output);
  const double until_resume_ended = std::chrono::duration<double>(clock_type::now() - seen).count();

  auto after = test::read_logged_run(store, before->run_id);
  ASSERT_TRUE(after);
  auto lost = after->of(wire::EventKind::TrialLost);
  ASSERT_EQ(lost.size(), 1u) << test::file_text(output);

  std::ifstream in{store + "/runs/" + before->run_id + "/report.json"};
  ASSERT_TRUE(in.good()) << test::file_text(output);
  auto report = nlohmann::json::parse(in);
  const nlohmann::json* entry = nullptr;
  for (const auto& t : report["trials"])
    if (t["trial_id"] == lost[0]->trial && t["attempt"] == lost[0]->attempt)
      entry = &t;
  ASSERT_NE(entry, nullptr) << report["trials"].dump();
  EXPECT_EQ((*entry)["outcome"], "lost");
  const double wall = (*entry)["wall_time_s"].get<double>();
  // From its dispatch (logged before the trace line was seen) to the loss logged on resume.
  EXPECT_GE(wall, ran_at_least - 0.05) << "the attempt ran at least until the kill";
  EXPECT_LE(wall, until_resume_ended + 0.05);
  EXPECT_LE(wall, 30.0); // the task's timeout_s
  const double charged = (*entry)["device_seconds"].get<double>();
  std::cout << "lost attempt: killed " << ran_at_least << " s after its dispatch was seen; wall "
            << wall << " s, charged " << charged << " device-seconds\n";
  EXPECT_DOUBLE_EQ(charged, wall * 8); // world_size = "8"
  EXPECT_DOUBLE_EQ(report["failed_trials_cost"]["lost"]["device_seconds"].get<double>(), charged);
  EXPECT_EQ(report["device_seconds_lost"]["attempts"], 1);
  EXPECT_DOUBLE_EQ(report["device_seconds_lost"]["device_seconds"].get<double>(), charged);
  double sum = 0;
  for (const auto& t : report["trials"])
    sum += t["device_seconds"].get<double>();
  EXPECT_NEAR(report["device_seconds_total"].get<double>(), sum, 1e-9 * sum);
  EXPECT_GT(report["device_seconds_total"].get<double>(), charged); // the other trials too
  std::ifstream md{store + "/runs/" + before->run_id + "/report.md"};
  std::string md_text{std::istreambuf_iterator<char>{md}, {}};
  EXPECT_NE(md_text.find("on 1 lost attempt(s)"), std::string::npos) << md_text;
  // The killed harness's trial (its own process group) ends by itself; none is left to others.
  for (const auto& p : test::processes_left(dir.path() + "/", 10000ms))
    ::kill(std::stoi(p.substr(0, p.find(' '))), SIGKILL);
}

} // namespace
} // namespace infrarsi
