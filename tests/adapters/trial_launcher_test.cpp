// Tests for adapters/trial_launcher.cpp with real processes: ranks with the torchrun environment
// contract, metrics parsing, and every outcome — ok, oom (cap and text), crash, timeout,
// launch_error, preempted — with no process left behind.

#include "adapters/trial_launcher.hpp"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <gtest/gtest.h>

#include "adapters/environment.hpp"
#include "adapters/process.hpp"
#include "adapters/task_file.hpp"
#include "proc_text.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

const std::string data_dir = INFRARSI_TEST_DATA_DIR;

tuning::task_spec fake_task(std::vector<std::string> extra_args = {}) {
  auto task = adapters::load_task_file(data_dir + "/tasks/fake.toml");
  if (!task)
    throw std::runtime_error(describe(task.error()));
  for (auto& a : extra_args)
    task->workload.argv.push_back(std::move(a));
  return std::move(*task);
}

struct run_result {
  trial_report report;
  const wire::TrialResult* result = nullptr;
  double wall_s = 0;
};

/// Live (not zombie) processes whose command line has `arg` as one of its arguments.
int live_processes_with_argument(const std::string& arg) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator{"/proc"}) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::string all = test::proc_text(entry.path() / "cmdline");
    std::string st = test::proc_text(entry.path() / "stat");
    auto close = st.rfind(')');
    bool zombie = close != std::string::npos && close + 2 < st.size() && st[close + 2] == 'Z';
    std::size_t begin = 0;
    for (auto end = all.find('\0'); end != std::string::npos; end = all.find('\0', begin)) {
      if (all.substr(begin, end - begin) == arg && !zombie)
        ++count;
      begin = end + 1;
    }
  }
  return count;
}

class TrialLauncherTest : public ::testing::Test {
protected:
  test::temp_dir dir;

  run_result run(const tuning::task_spec& task, tuning::knob_assignment knobs = {},
                 const std::atomic<bool>* stop = nullptr) {
    trial_request req;
    req.task = &task;
    req.knobs = std::move(knobs);
    req.trial_dir = dir.sub("trial");
    req.trial_id = 7;
    req.stop = stop;
    auto t0 = std::chrono::steady_clock::now();
    auto rep = run_trial(req);
    run_result r;
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!rep)
      throw std::runtime_error(describe(rep.error()));
    r.report = std::move(*rep);
    r.result = r.report.result.get();
    return r;
  }

  std::string read(const std::string& file) {
    std::ifstream in{file};
    return {std::istreambuf_iterator<char>{in}, {}};
  }
};

TEST_F(TrialLauncherTest, TwoRanksCompleteAndMetricsAreParsed) {
  auto task = fake_task();
  auto r = run(task, {{"world_size", std::int64_t{2}}, {"steps", std::int64_t{4}}});
  EXPECT_EQ(r.result->outcome(), wire::Outcome::Ok) << r.result->detail()->str();
  ASSERT_EQ(r.result->steps()->size(), 4u);
  EXPECT_EQ(r.result->steps()->Get(0)->step(), 0u);
  EXPECT_DOUBLE_EQ(r.result->steps()->Get(3)->loss(), 4.7);
  EXPECT_EQ(r.result->steps()->Get(1)->tokens(), 2048u); // 1024 per rank x 2 ranks
  ASSERT_TRUE(r.result->steps()->Get(1)->forward_s().has_value());
  EXPECT_FALSE(r.result->steps()->Get(1)->backward_s().has_value());
  EXPECT_EQ(r.report.world_size, 2);
  EXPECT_NEAR(r.result->device_seconds(), 2 * r.result->wall_time_s(), 1e-9);
  EXPECT_GT(r.result->peak_memory_bytes(), 1'000'000u);
  EXPECT_EQ(r.result->exit_code(), 0);
  EXPECT_EQ(r.report.log_files.size(), 4u);
  EXPECT_NE(read(dir.sub("trial") + "/rank-0.stdout").find("INFRARSI_METRICS"), std::string::npos);
  EXPECT_EQ(r.report.env.at("FAKE_MODE"), "plain");
}

TEST_F(TrialLauncherTest, RanksGetTheTorchrunEnvironmentContract) {
  auto task = fake_task();
  task.workload.argv = {"python3", "-c",
                        "import os; print(os.environ['RANK'], os.environ['LOCAL_RANK'], "
                        "os.environ['WORLD_SIZE'], os.environ['MASTER_ADDR'], "
                        "os.environ['MASTER_PORT'], os.environ['INFRARSI_TRIAL_ID'])"};
  task.metrics.require_final_line = false;
  auto r = run(task, {{"world_size", std::int64_t{3}}});
  EXPECT_EQ(r.result->outcome(), wire::Outcome::Ok) << r.result->detail()->str();
  auto rank2 = read(dir.sub("trial") + "/rank-2.stdout");
  EXPECT_EQ(rank2.rfind("2 2 3 127.0.0.1 ", 0), 0u) << rank2;
  EXPECT_NE(rank2.find(" 7\n"), std::string::npos) << rank2;
  auto port0 = read(dir.sub("trial") + "/rank-0.stdout").substr(16);
  EXPECT_EQ(rank2.substr(16), port0); // one rendezvous port per trial
}

TEST_F(TrialLauncherTest, MemoryCapExceededIsOom) {
  auto task = fake_task();
  task.limits.memory_cap_bytes = 150ull << 20;
  auto r = run(task, {{"alloc_mb", std::int64_t{400}}, {"steps", std::int64_t{100}}});
  EXPECT_EQ(r.result->outcome(), wire::Outcome::Oom) << r.result->detail()->str();
  EXPECT_NE(r.result->detail()->str().find("exceeded the per-rank cap"), std::string::npos)
    << r.result->detail()->str();
  EXPECT_GT(r.result->peak_memory_bytes(), 150ull << 20);
}

TEST_F(TrialLauncherTest, WorkloadOomTextIsOomAndTheFirstCauseWins) {
  // Rank 1 reports OOM at step 1; rank 0 is then stopped by the launcher (a consequence).
  auto task = fake_task({"--oom-rank", "1", "--fail-step", "1"});
  auto r = run(task, {{"world_size", std::int64_t{2}}, {"steps", std::int64_t{50}}});
  EXPECT_EQ(r.result->outcome(), wire::Outcome::Oom) << r.result->detail()->str();
  EXPECT_NE(r.result->detail()->str().find("rank 1"), std::string::npos);
  // The OOM text stops every rank at once; rank 1's own exit 86 or that SIGTERM, whichever
  // came first, is the evidence.
  EXPECT_TRUE(r.result->exit_code() == 86 || r.result->exit_code() == -SIGTERM)
    << r.result->exit_code();
}

TEST_F(TrialLauncherTest, OneRankDyingEndsTheTrialQuicklyWithNothingLeft) {
  // The ranks meet at the start of every step (--lockstep, as in a collective), so rank 0 has
  // printed steps 0-2 before rank 1 crashes at step 3 however slowly either started; rank 0
  // then waits forever (as in a collective whose peer is gone) and ignores SIGTERM.
  auto task = fake_task({"--lockstep", "--fail-rank", "1", "--fail-step", "3", "--hang-rank",
                         "0", "--hang-step", "3", "--ignore-term", "--child"});
  auto r = run(task, {{"world_size", std::int64_t{2}}, {"steps", std::int64_t{10}}});
  EXPECT_EQ(r.result->outcome(), wire::Outcome::Crash) << r.result->detail()->str();
  EXPECT_EQ(r.result->exit_code(), 3);
  EXPECT_NE(r.result->detail()->str().find("rank 1: exited with status 3"), std::string::npos);
  ASSERT_NE(r.result->steps(), nullptr);
  EXPECT_EQ(r.result->steps()->size(), 3u);
  EXPECT_LT(r.wall_s, 10.0);
  // fake_train --child left `sleep 611.5` behind in each rank's process group.
  EXPECT_EQ(live_processes_with_argument("611.5"), 0) << "a child of the trial survived it";
}

TEST_F(TrialLauncherTest, SleepPastTheTimeoutIsTimeout) {
  auto task = fake_task({"--hang-rank", "0"});
  task.limits.timeout_s = 1.0;
  auto r = run(task);
  EXPECT_EQ(r.result->outcome(), wire::Outcome::Timeout) << r.result->detail()->str();
  EXPECT_LT(r.wall_s, 1.0 + task.limits.kill_grace_s + 3.0);
}

TEST_F(TrialLauncherTest, MissingBinaryIsLaunchError) {
  auto task = fake_task();
  task.workload.argv = {"no-such-trainer-binary", "--x"};
  auto r = run(task);
  EXPECT_EQ(r.result->outcome(), wire::Outcome::LaunchError) << r.result->detail()->str();
  EXPECT_NE(r.result->detail()->str().find("no-such-trainer-binary"), std::string::npos);
  // The rank never started, and its logs say why (a failed launch keeps its evidence).
  EXPECT_NE(read(dir.sub("trial") + "/rank-0.stderr")
              .find("infrarsi: rank 0 was not started: not_found: spawn: program "
                    "'no-such-trainer-binary' not found on PATH="),
            std::string::npos)
    << read(dir.sub("trial") + "/rank-0.stderr");
  EXPECT_TRUE(std::filesystem::exists(dir.sub("trial") + "/rank-0.stdout"));
}

TEST_F(TrialLauncherTest, BadArgumentExitingAtOnceIsLaunchError) {
  auto task = fake_task({"--no-such-flag"});
  auto r = run(task);
  EXPECT_EQ(r.result->outcome(), wire::Outcome::LaunchError) << r.result->detail()->str();
  EXPECT_EQ(r.result->exit_code(), 2); // argparse's usage status
  EXPECT_NE(read(dir.sub("trial") + "/rank-0.stderr").find("unrecognized arguments"),
            std::string::npos);
}

TEST_F(TrialLauncherTest, CrashAfterMetricsIsCrash) {
  auto task = fake_task({"--fail-rank", "0", "--fail-step", "2"});
  auto r = run(task, {{"steps", std::int64_t{5}}});
  EXPECT_EQ(r.result->outcome(), wire::Outcome::Crash) << r.result->detail()->str();
  EXPECT_EQ(r.result->steps()->size(), 2u); // what it measured before dying is kept
}

/// The fake's own loss curve (5.0 - 0.1 x step, tests/data/workloads/fake_train.py) as the
/// doctor's reference over `steps` steps, with no spread between baselines.
tuning::loss_reference fake_reference(std::uint32_t steps) {
  tuning::loss_reference ref;
  for (std::uint32_t i = 0; i < steps; ++i) {
    ref.loss[i] = 5.0 - 0.1 * i;
    ref.spread[i] = 0.0;
  }
  return ref;
}

/// The fake task with `extra` arguments, a contract of `steps` steps of 1,024 tokens and a 1 %
/// loss tolerance, and a request for it that carries fake_reference(steps).
struct early_stop_case {
  tuning::task_spec task;
  trial_request req;
  early_stop_case(std::vector<std::string> extra, std::uint32_t steps, const std::string& dir)
    : task(fake_task(std::move(extra))) {
    task.contract.steps = steps;
    task.contract.tokens_per_step = 1024;
    task.contract.loss_rtol = 0.01;
    req.task = &task;
    req.trial_dir = dir;
    req.trial_id = 8;
    req.loss_reference = fake_reference(steps);
  }
  early_stop_case(const early_stop_case&) = delete; // req.task points into this object
  early_stop_case& operator=(const early_stop_case&) = delete;
};

TEST_F(TrialLauncherTest, ATrialWhoseLossLeavesTheReferenceIsStoppedAtThatStep) {
  // 40 steps of 0.1 s: 4 s to the end. --loss-scale 1.125 drifts by 12.5 % from step 0 on; no
  // other test passes that value, so it also finds this trial's processes under a parallel ctest.
  early_stop_case c({"--loss-scale", "1.125"}, 40, dir.sub("stopped"));
  auto& req = c.req;
  req.knobs = {{"steps", std::int64_t{40}}, {"step_time", 0.1}};
  auto t0 = std::chrono::steady_clock::now();
  auto rep = run_trial(req);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(rep) << describe(rep.error());
  const auto* r = rep->result.get();
  EXPECT_EQ(r->outcome(), wire::Outcome::ContractViolation) << r->detail()->str();
  auto detail = r->detail()->str();
  EXPECT_EQ(detail.rfind("loss_drift: step 0 loss 5.625 differs from the reference 5 by 0.625", 0), 0u)
    << detail;
  EXPECT_NE(detail.find("; stopped early at step 0 of 40"), std::string::npos) << detail;
  EXPECT_TRUE(tuning::is_early_stop(detail));
  ASSERT_NE(r->steps(), nullptr);
  EXPECT_GE(r->steps()->size(), 1u);
  EXPECT_LT(r->steps()->size(), 10u); // the rest never ran
  EXPECT_LT(wall, 4.0); // the 40 steps alone take 4 s (start-up, however slow, comes on top)
  EXPECT_EQ(live_processes_with_argument("1.125"), 0) << "a stopped rank outlived its trial";

  // Without a reference (a baseline, or before the doctor's calibration) it runs to its end.
  req.loss_reference.reset();
  req.knobs = {{"steps", std::int64_t{5}}, {"step_time", 0.01}};
  req.trial_dir = dir.sub("whole");
  rep = run_trial(req);
  ASSERT_TRUE(rep) << describe(rep.error());
  EXPECT_EQ(rep->result->outcome(), wire::Outcome::Ok) << rep->result->detail()->str();
  EXPECT_EQ(rep->result->steps()->size(), 5u);
}

TEST_F(TrialLauncherTest, AnHonestTrialWithAReferenceRunsToItsEndAndFewerTokensStopAtOnce) {
  early_stop_case honest({}, 5, dir.sub("honest"));
  auto& req = honest.req;
  req.knobs = {{"steps", std::int64_t{5}}, {"step_time", 0.01}};
  auto rep = run_trial(req);
  ASSERT_TRUE(rep) << describe(rep.error());
  EXPECT_EQ(rep->result->outcome(), wire::Outcome::Ok) << rep->result->detail()->str();
  EXPECT_EQ(rep->result->steps()->size(), 5u);
  // Half the tokens (a data loader that skips samples): stopped at the first step.
  early_stop_case cheat({"--tokens", "512"}, 5, dir.sub("tokens"));
  cheat.req.knobs = {{"steps", std::int64_t{40}}, {"step_time", 0.1}};
  rep = run_trial(cheat.req);
  ASSERT_TRUE(rep) << describe(rep.error());
  EXPECT_EQ(rep->result->outcome(), wire::Outcome::ContractViolation)
    << rep->result->detail()->str();
  EXPECT_EQ(rep->result->detail()->str(),
            "tokens: step 0 reported 512 tokens, the contract says 1024; stopped early at step 0 "
            "of 5");
}

TEST_F(TrialLauncherTest, TheLossReferenceTravelsInTheTrialSpec) {
  auto task = fake_task();
  trial_request req;
  req.task = &task;
  req.trial_id = 3;
  auto bare = make_trial_spec(req, "baseline");
  EXPECT_FALSE(loss_reference_of(*bare).has_value());
  tuning::loss_reference ref = fake_reference(3);
  ref.spread[1] = 0.25;
  ref.windows.push_back({0, 2, 4.9, 0.01, 0.002, 3});
  ref.eval_loss[2] = 4.5;
  ref.eval_spread[2] = 0.125;
  req.loss_reference = ref;
  auto spec = make_trial_spec(req, "explore");
  auto back = loss_reference_of(*spec);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->loss, ref.loss);
  EXPECT_EQ(back->spread, ref.spread);
  ASSERT_EQ(back->windows.size(), 1u);
  EXPECT_EQ(back->windows[0].last, 2u);
  EXPECT_DOUBLE_EQ(back->windows[0].mean, 4.9);
  EXPECT_DOUBLE_EQ(back->windows[0].between_var, 0.002);
  EXPECT_EQ(back->windows[0].runs, 3u);
  EXPECT_EQ(back->eval_loss, ref.eval_loss);
  EXPECT_EQ(back->eval_spread, ref.eval_spread);
}

TEST_F(TrialLauncherTest, ExitZeroWithoutFinalLineIsCrash) {
  auto task = fake_task({"--no-final"});
  auto r = run(task);
  EXPECT_EQ(r.result->outcome(), wire::Outcome::Crash);
  EXPECT_NE(r.result->detail()->str().find("without the final metrics line"), std::string::npos);
}

TEST_F(TrialLauncherTest, StopRequestIsPreempted) {
  auto task = fake_task({"--hang-rank", "0"});
  std::atomic<bool> stop{false};
  std::thread stopper{[&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    stop = true;
  }};
  auto r = run(task, {}, &stop);
  stopper.join();
  EXPECT_EQ(r.result->outcome(), wire::Outcome::Preempted) << r.result->detail()->str();
}

TEST_F(TrialLauncherTest, RegexMetricsOfAnUnmodifiedScript) {
  auto task = adapters::load_task_file(data_dir + "/tasks/regex.toml");
  ASSERT_TRUE(task) << describe(task.error());
  auto r = run(*task, {{"steps", std::int64_t{8}}});
  EXPECT_EQ(r.result->outcome(), wire::Outcome::Ok) << r.result->detail()->str();
  ASSERT_EQ(r.result->steps()->size(), 8u);
  EXPECT_DOUBLE_EQ(r.result->steps()->Get(2)->loss(), 2.5);
  EXPECT_DOUBLE_EQ(r.result->steps()->Get(2)->step_time_s(), 0.022);
  EXPECT_EQ(r.result->steps()->Get(2)->tokens(), 4096u);
  EXPECT_EQ(r.report.world_size, 1);
}

TEST_F(TrialLauncherTest, UnknownKnobOrOutOfDomainValueIsAToolError) {
  auto task = fake_task();
  trial_request req;
  req.task = &task;
  req.trial_dir = dir.sub("t");
  req.knobs = {{"world_size", std::int64_t{5}}};
  auto r = run_trial(req);
  ASSERT_FALSE(r);
  EXPECT_NE(describe(r.error()).find("knob 'world_size': expected one of 1, 2, 3, got 5"),
            std::string::npos)
    << describe(r.error());
  req.knobs = {{"wrold_size", std::int64_t{1}}};
  r = run_trial(req);
  ASSERT_FALSE(r);
  EXPECT_NE(describe(r.error()).find("no knob 'wrold_size'"), std::string::npos);
}

TEST_F(TrialLauncherTest, ConstraintViolationIsNeverLaunched) {
  auto task = fake_task();
  task.constants["global_batch"] = std::int64_t{8};
  task.constraints = {"global_batch % world_size == 0"};
  auto r = run(task, {{"world_size", std::int64_t{3}}});
  EXPECT_EQ(r.result->outcome(), wire::Outcome::ContractViolation);
  EXPECT_EQ(r.result->detail()->str(),
            "constraint: 'global_batch % world_size == 0' is false for global_batch=8, world_size=3");
  EXPECT_TRUE(r.result->steps() == nullptr || r.result->steps()->size() == 0);
  EXPECT_TRUE(r.report.log_files.empty()); // no rank was started
}

/// Every trial with a scope lock runs in a fresh copy that must match the lock; a patch naming
/// a frozen path is refused before it is applied.
TEST_F(TrialLauncherTest, ScopeLockRunsInACopyAndRefusesFrozenEdits) {
  auto task = adapters::load_task_file(data_dir + "/tasks/fake_tune.toml");
  ASSERT_TRUE(task) << describe(task.error());
  trial_request req;
  req.task = &*task;
  req.trial_dir = dir.sub("locked"); // every knob at its default
  for (const auto& rel : match_scope(task->workload.workdir, {"fake_train.py", "regex_train.py"}))
    req.scope_lock[rel] = *sha256_file(task->workload.workdir + "/" + rel);
  ASSERT_EQ(req.scope_lock.size(), 2u);
  auto ok = run_trial(req);
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_EQ(ok->result->outcome(), wire::Outcome::Ok) << ok->result->detail()->str();
  EXPECT_EQ(ok->workdir, dir.sub("locked/workdir")); // a copy, not the workload itself
  // A lock that does not match the workload (edited since init) refuses to launch.
  req.scope_lock["regex_train.py"] = std::string(64, '0');
  auto refused = run_trial(req);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->result->outcome(), wire::Outcome::ContractViolation);
  EXPECT_EQ(refused->result->detail()->str().rfind(
              "scope: 'regex_train.py' changed since the scope was locked at init", 0),
            0u)
    << refused->result->detail()->str();
  EXPECT_TRUE(refused->log_files.empty());
  // The trial directory still says why nothing ran.
  std::ifstream why{dir.sub("locked/launch.stderr")};
  std::string text{std::istreambuf_iterator<char>{why}, {}};
  EXPECT_EQ(text.rfind("infrarsi: the trial was not launched: scope: 'regex_train.py' changed", 0),
            0u)
    << text;
}


/// A workload whose step times are simulated, as workloads/sim reports them: `cat` of five steps
/// of 10 simulated seconds (loss 5.0 - 0.1 x step, 1,024 tokens) and a final line that prices the
/// run at `final_tail` (e.g. 30 s of start-up plus the 50 s of steps, on 8 devices: 640), in
/// well under a second of host time.
struct simulated_case {
  tuning::task_spec task;
  trial_request req;
  simulated_case(const test::temp_dir& dir, const std::string& name, const std::string& final_tail) {
    const auto lines = dir.sub(name + ".txt");
    {
      std::ofstream out{lines};
      for (int i = 0; i < 5; ++i)
        out << "INFRARSI_METRICS {\"step\": " << i << ", \"loss\": " << 5.0 - 0.1 * i
            << ", \"tokens\": 1024, \"step_time_s\": 10.0, \"warmup\": false}\n";
      out << "INFRARSI_METRICS {\"event\": \"final\", \"status\": \"ok\", \"simulated\": true, "
             "\"steps\": 5" << final_tail << "}\n";
    }
    std::ofstream{dir.sub(name + ".toml")}
      << "name = \"simulated\"\n[workload]\nlauncher = \"command\"\nworld_size = \"8\"\n"
         "argv = [\"cat\", \"" << lines << "\"]\n[metrics]\nformat = \"json_lines\"\n"
         "[contract]\nsteps = 5\ntokens_per_step = 1024\ntimed_steps = [1, 4]\n"
         "loss_rtol = 0.01\nsimulated_time = true\n"
         "[[knobs]]\nname = \"unused\"\ntype = \"int\"\nvalues = [1]\ndefault = 1\n";
    auto t = load_task_file(dir.sub(name + ".toml"));
    if (!t)
      throw std::runtime_error(describe(t.error()));
    task = std::move(*t);
    req.task = &task;
    req.trial_dir = dir.sub(name);
    req.trial_id = 9;
  }
  simulated_case(const simulated_case&) = delete; // req.task points into this object
  simulated_case& operator=(const simulated_case&) = delete;

  const wire::TrialResult* run(trial_report& keep) {
    auto rep = run_trial(req);
    if (!rep)
      throw std::runtime_error(describe(rep.error()));
    keep = std::move(*rep);
    return keep.result.get();
  }
};

TEST_F(TrialLauncherTest, ASimulatedTrialIsChargedTheDeviceSecondsItsFinalLineReports) {
  const std::string priced = ", \"simulated_wall_s\": 80.0, \"device_seconds\": 640.0";
  trial_report keep;
  simulated_case c(dir, "priced", priced);
  const auto* r = c.run(keep);
  ASSERT_EQ(r->outcome(), wire::Outcome::Ok) << r->detail()->str();
  EXPECT_EQ(r->steps()->size(), 5u);
  EXPECT_DOUBLE_EQ(r->device_seconds(), 640.0); // not the host's wall time x 8
  EXPECT_LT(r->wall_time_s(), 60.0);            // the host's (the task's timeout)

  // Step times that are not simulated: wall time x world size, whatever the final line says.
  simulated_case wall(dir, "wall", priced);
  wall.task.contract.simulated_time = false;
  wall.task.contract.clock_check = false;
  r = wall.run(keep);
  ASSERT_EQ(r->outcome(), wire::Outcome::Ok) << r->detail()->str();
  EXPECT_DOUBLE_EQ(r->device_seconds(), 8 * r->wall_time_s());

  // A final line without the figure: wall time x world size too.
  simulated_case unpriced(dir, "unpriced", "");
  r = unpriced.run(keep);
  ASSERT_EQ(r->outcome(), wire::Outcome::Ok) << r->detail()->str();
  EXPECT_DOUBLE_EQ(r->device_seconds(), 8 * r->wall_time_s());

  // Stopped early at step 2 (its loss 5 % off the reference): steps 3 and 4 (20 of the 80
  // simulated seconds) did not run, so it is charged 640 x 60 / 80 = 480.
  simulated_case stopped(dir, "stopped", priced);
  tuning::loss_reference ref = fake_reference(5);
  ref.loss[2] *= 1.05;
  stopped.req.loss_reference = ref;
  r = stopped.run(keep);
  ASSERT_EQ(r->outcome(), wire::Outcome::ContractViolation) << r->detail()->str();
  EXPECT_NE(r->detail()->str().find("; stopped early at step 2 of 5"), std::string::npos)
    << r->detail()->str();
  EXPECT_DOUBLE_EQ(r->device_seconds(), 480.0);
}

} // namespace
} // namespace infrarsi::adapters
