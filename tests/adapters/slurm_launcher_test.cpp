// workload.launcher = "slurm" on a real one-node Slurm cluster the test starts itself
// (tests/slurm_cluster.hpp; ctest label `slurm`, docs/testing.md): the real PyTorch workload
// with 2 ranks as one srun job step inside an allocation (`salloc -n 2 infrarsi trial run`),
// each rank's RANK from SLURM_PROCID; the wall-clock limit ends the step and every task (nothing
// left, no step in squeue), so does a stop request; a failing rank is named; a step Slurm cannot
// create is a launch_error in srun's words; a whole `infrarsi tune` runs each trial as its own
// step; the rank script derives the torchrun variables of a multi-node step; outside an
// allocation a trial is a launch_error.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "adapters/cluster_launch.hpp"
#include "adapters/task_file.hpp"
#include "adapters/trial_launcher.hpp"
#include "durability/sim_task.hpp"
#include "messages/errc.hpp"
#include "slurm_cluster.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream in{path};
  return {std::istreambuf_iterator<char>{in}, {}};
}

/// Single-quotes `s` for /bin/sh.
std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

std::string task_path(const std::string& name) {
  return std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/" + name;
}

/// `infrarsi trial run TASK --trial-dir DIR --quiet [ARGS]`, its JSON into DIR.json.
std::string trial_run(const std::string& task, const std::string& dir, const std::string& args) {
  return sh_quote(INFRARSI_CLI_PATH) + " trial run " + sh_quote(task) + " --trial-dir " +
         sh_quote(dir) + " --quiet " + args + " > " + sh_quote(dir + ".json");
}

nlohmann::json result_of(const std::string& dir) {
  auto text = read_file(dir + ".json");
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded())
    throw std::runtime_error("not JSON: " + text);
  return doc;
}

// scripts/setup installs slurm-wlm and munge and CI runs as root: a machine that cannot start the
// test's own cluster fails these tests, naming what is missing (as the cgroup and tmpfs tests do).
#define REQUIRE_SLURM()                                                                       \
  ASSERT_EQ(test::slurm_cluster::cannot_run(), "") << "run scripts/setup, as root"

TEST(SlurmLauncher, TorchGptTwoRanksAsOneJobStep) {
  REQUIRE_SLURM();
  test::slurm_cluster cluster;
  test::temp_dir tmp;
  auto dir = tmp.sub("trial");
  auto t0 = clock_type::now();
  // The allocation: 2 tasks; infrarsi runs in it (SLURM_JOB_ID set) and starts the job step.
  auto run = cluster.run("timeout -k 5 150 salloc --quiet -n 2 " +
                         trial_run(task_path("torch_gpt_slurm.toml"), dir, "") +
                         "; echo \"steps left: $(squeue -h -s -o %j)\"");
  double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  ASSERT_EQ(run.status, 0) << run.output << cluster.log_tail("slurmctld");
  auto doc = result_of(dir);
  const auto& result = doc["result"];
  ASSERT_EQ(result["outcome"], "ok") << doc.dump(2) << read_file(dir + "/rank-1.stderr");
  EXPECT_EQ(doc["world_size"], 2);
  EXPECT_EQ(doc["argv"][0], "srun");
  EXPECT_EQ(doc["argv"][1], "--ntasks=2");
  // The metrics of rank 0, read live through srun's labelled output.
  ASSERT_EQ(result["steps"].size(), 4u) << doc.dump(2);
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& s = result["steps"][i];
    EXPECT_EQ(s["step"], i);
    EXPECT_EQ(s["tokens"], 128);
    EXPECT_GT(s["loss"].get<double>(), 1.0);
    EXPECT_LT(s["loss"].get<double>(), 10.0);
    EXPECT_GT(s["step_time_s"].get<double>(), 0.0);
  }
  // Each rank's environment, as the rank printed it before the workload ran: RANK from
  // SLURM_PROCID, the one-node step's MASTER_ADDR, one MASTER_PORT for both.
  std::regex probe{"INFRARSI_PROBE RANK=(\\d+) SLURM_PROCID=(\\d+) WORLD_SIZE=(\\d+) "
                   "LOCAL_RANK=(\\d+) LOCAL_WORLD_SIZE=(\\d+) MASTER_ADDR=(\\S+) "
                   "MASTER_PORT=(\\d+) SLURM_STEP_ID=(\\d+)"};
  std::string port;
  for (int rank = 0; rank < 2; ++rank) {
    auto err = read_file(dir + "/rank-" + std::to_string(rank) + ".stderr");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(err, m, probe)) << "rank " << rank << ": " << err;
    EXPECT_EQ(m[1], std::to_string(rank));
    EXPECT_EQ(m[2], std::to_string(rank));
    EXPECT_EQ(m[3], "2");
    EXPECT_EQ(m[4], std::to_string(rank));
    EXPECT_EQ(m[5], "2");
    EXPECT_EQ(m[6], "127.0.0.1");
    if (rank == 0)
      port = m[7];
    EXPECT_EQ(m[7], port);
    EXPECT_GT(std::stoi(port), 0);
  }
  // Rank 0's stdout holds its metrics lines (without srun's label); srun's own log the step.
  auto out0 = read_file(dir + "/rank-0.stdout");
  EXPECT_EQ(out0.rfind("INFRARSI_METRICS {", 0), 0u) << out0;
  auto last = out0.rfind("INFRARSI_METRICS {\"event\": \"final\"");
  ASSERT_NE(last, std::string::npos) << out0;
  auto final_line = nlohmann::json::parse(out0.substr(out0.find('{', last)));
  EXPECT_EQ(final_line["world_size"], 2);
  EXPECT_EQ(final_line["status"], "ok");
  EXPECT_NE(read_file(dir + "/srun.stderr").find("infrarsi: job step "), std::string::npos);
  // The step ended with the trial: squeue lists no step of the allocation afterwards.
  EXPECT_NE(run.output.find("steps left: \n"), std::string::npos) << run.output;
  EXPECT_TRUE(test::processes_with_env("INFRARSI_TRIAL_DIR=" + fs::absolute(dir).string()).empty());
  EXPECT_LT(wall, 90.0);

  // The same trial with infrarsi's own ranks launcher computes the same losses: Slurm started
  // the same two-rank DDP job.
  auto task = load_task_file(task_path("torch_gpt_slurm.toml"));
  ASSERT_TRUE(task) << describe(task.error());
  task->workload.launcher = tuning::launcher_kind::ranks;
  task->workload.srun_args.clear();
  trial_request req;
  req.task = &*task;
  req.trial_dir = tmp.sub("ranks");
  auto local = run_trial(req);
  ASSERT_TRUE(local) << describe(local.error());
  const auto* r = local->result.get();
  ASSERT_EQ(r->outcome(), wire::Outcome::Ok) << r->detail()->str();
  ASSERT_EQ(r->steps()->size(), 4u);
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(r->steps()->Get(static_cast<flatbuffers::uoffset_t>(i))->loss(),
                result["steps"][i]["loss"].get<double>(), 1e-7)
        << "step " << i;
}

TEST(SlurmLauncher, WallClockLimitEndsTheStepAndEveryTask) {
  REQUIRE_SLURM();
  test::slurm_cluster cluster;
  test::temp_dir tmp;
  auto dir = tmp.sub("trial");
  // The tasks ignore SIGTERM, so the step ends only by Slurm's SIGKILL after kill_grace_s.
  // Inside the allocation, right after infrarsi returned: the step's name in squeue (none) and
  // the processes of the trial (none).
  auto t0 = clock_type::now();
  auto run = cluster.run("timeout -k 5 150 salloc --quiet -n 2 sh -c " +
                         sh_quote(trial_run(task_path("slurm_hang.toml"), dir, "") +
                                  "; echo \"steps left: $(squeue -h -s -o %j)\""));
  double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  ASSERT_EQ(run.status, 0) << run.output;
  auto doc = result_of(dir);
  const auto& result = doc["result"];
  EXPECT_EQ(result["outcome"], "timeout") << doc.dump(2);
  EXPECT_NE(result["detail"].get<std::string>().find("wall-clock limit of 6"), std::string::npos);
  ASSERT_EQ(result["steps"].size(), 1u);
  EXPECT_EQ(result["steps"][0]["tokens"], 64);
  // 6 s limit + 1 s grace + Slurm's kill, far from the 10 s srun gets after that.
  EXPECT_LT(result["wall_time_s"].get<double>(), 12.0) << doc.dump(2);
  EXPECT_GT(result["wall_time_s"].get<double>(), 6.0);
  EXPECT_NE(run.output.find("steps left: \n"), std::string::npos) << run.output;
  EXPECT_TRUE(test::processes_with_env("INFRARSI_TRIAL_DIR=" + fs::absolute(dir).string()).empty());
  auto left = cluster.run("squeue -h -o %i");
  EXPECT_EQ(left.output, "") << left.output;
  EXPECT_LT(wall, 40.0);
}

TEST(SlurmLauncher, StopRequestEndsTheStep) {
  REQUIRE_SLURM();
  test::slurm_cluster cluster;
  test::temp_dir tmp;
  auto dir = tmp.sub("trial");
  // SIGINT to infrarsi once the step is running (its marker in srun.stderr): preempted.
  auto script = trial_run(task_path("slurm_hang.toml"), dir, "--timeout 60") + " & p=$!; " +
                "for i in $(seq 100); do grep -q 'job step' " + sh_quote(dir + "/srun.stderr") +
                " 2>/dev/null && break; sleep 0.1; done; kill -INT $p; wait $p; " +
                "echo \"steps left: $(squeue -h -s -o %j)\"";
  auto run = cluster.run("timeout -k 5 150 salloc --quiet -n 2 sh -c " + sh_quote(script));
  ASSERT_EQ(run.status, 0) << run.output;
  auto doc = result_of(dir);
  EXPECT_EQ(doc["result"]["outcome"], "preempted") << doc.dump(2);
  EXPECT_LT(doc["result"]["wall_time_s"].get<double>(), 20.0);
  EXPECT_NE(run.output.find("steps left: \n"), std::string::npos) << run.output;
  EXPECT_TRUE(test::processes_with_env("INFRARSI_TRIAL_DIR=" + fs::absolute(dir).string()).empty());
}

TEST(SlurmLauncher, FailingRankIsNamedWithItsStatusAndStderr) {
  REQUIRE_SLURM();
  test::slurm_cluster cluster;
  test::temp_dir tmp;
  auto dir = tmp.sub("trial");
  auto run = cluster.run("timeout -k 5 150 salloc --quiet -n 2 " +
                         trial_run(task_path("slurm_hang.toml"), dir, "--set rank1_exit=3"));
  ASSERT_EQ(run.status, 0) << run.output;
  auto doc = result_of(dir);
  const auto& result = doc["result"];
  // After rank 0's first metrics line: a crash of rank 1, in srun's and the rank's own words.
  EXPECT_EQ(result["outcome"], "crash") << doc.dump(2);
  EXPECT_EQ(result["exit_code"], 3);
  EXPECT_EQ(result["detail"],
            "rank 1: exited with status 3 (srun); stderr: rank 1 failing with status 3")
      << doc.dump(2);
  EXPECT_LT(result["wall_time_s"].get<double>(), 5.0);
  EXPECT_EQ(read_file(dir + "/rank-1.stderr"), "rank 1 failing with status 3\n");
  EXPECT_NE(read_file(dir + "/srun.stderr").find("task 1: Exited with exit code 3"),
            std::string::npos);
}

TEST(SlurmLauncher, AStepSlurmCannotCreateIsALaunchErrorInSrunsWords) {
  REQUIRE_SLURM();
  test::slurm_cluster cluster;
  test::temp_dir tmp;
  auto dir = tmp.sub("trial");
  // srun_args = ["--nodes={nodes}"] with nodes = 2 in a one-node allocation: no task starts.
  auto run = cluster.run("timeout -k 5 150 salloc --quiet -n 2 " +
                         trial_run(task_path("slurm_hang.toml"), dir, "--set nodes=2"));
  ASSERT_EQ(run.status, 0) << run.output;
  auto doc = result_of(dir);
  const auto& result = doc["result"];
  EXPECT_EQ(result["outcome"], "launch_error") << doc.dump(2);
  EXPECT_EQ(result["detail"],
            "slurm launcher: srun exited with status 1: srun: error: Only allocated 1 nodes "
            "asked for 2");
  EXPECT_EQ(result["steps"].size(), 0u);
  EXPECT_EQ(doc["argv"][8], "--nodes=2");
  EXPECT_EQ(read_file(dir + "/rank-0.stdout"), "");
}

TEST(SlurmLauncher, TuneRunsEveryTrialAsAJobStepOfItsAllocation) {
  REQUIRE_SLURM();
  test::slurm_cluster cluster;
  test::temp_dir tmp;
  // The simulator's small task (tests/durability/sim_task.hpp), its one process per trial
  // started by srun: a whole `infrarsi tune` (doctor, search, re-verification, report) inside
  // one allocation.
  auto text = test::small_sim_task_text(
      tmp, "exec \"$0\" \"$@\"",
      "\n[budget]\ntrials = 3\nbaseline_repeats = 2\nmax_baseline_repeats = 2\nverify_top = 1\n"
      "verify_repeats = 2\nmax_verify_repeats = 2\n");
  test::replace_first(text, "launcher = \"command\"", "launcher = \"slurm\"");
  test::replace_first(text, "world_size = \"8\"", "world_size = \"1\"");
  auto task = tmp.sub("sim-slurm.toml");
  std::ofstream{task} << text;
  auto store = tmp.sub("store");
  auto run = cluster.run("timeout -k 5 150 salloc --quiet -n 1 sh -c " +
                         sh_quote(sh_quote(INFRARSI_CLI_PATH) + " tune " + sh_quote(task) +
                                  " --store " + sh_quote(store) + " --seed 3 --quiet; " +
                                  "echo \"tune: $?; steps left: $(squeue -h -s -o %j)\""));
  ASSERT_NE(run.output.find("tune: 0; steps left: \n"), std::string::npos) << run.output;
  // Every trial's directory: one job step of its own, named by task 0, its metrics on rank 0.
  std::set<std::string> steps;
  int trials = 0;
  for (const auto& runs : fs::directory_iterator{store + "/runs"})
    for (const auto& trial : fs::directory_iterator{runs.path() / "trials"}) {
      ++trials;
      auto srun_err = read_file((trial.path() / "srun.stderr").string());
      std::smatch m;
      ASSERT_TRUE(std::regex_search(srun_err, m, std::regex{"infrarsi: job step (\\d+\\.\\d+)"}))
          << trial.path() << ": " << srun_err;
      steps.insert(m[1]);
      EXPECT_NE(read_file((trial.path() / "rank-0.stdout").string()).find("INFRARSI_METRICS"),
                std::string::npos)
          << trial.path();
    }
  EXPECT_GE(trials, 7); // 2 baselines, 3 searched, 2 re-verification pairs at least
  EXPECT_EQ(steps.size(), static_cast<std::size_t>(trials)); // a step per trial
  EXPECT_NE(run.output.find(": " + std::to_string(trials) + " trials, "), std::string::npos)
      << run.output; // tune's summary counts the same trials
  for (const auto& runs : fs::directory_iterator{store + "/runs"})
    EXPECT_TRUE(fs::exists(runs.path() / "report.json")) << runs.path();
}

/// Runs slurm_rank_script() with `env` (nothing inherited but PATH and SLURM_CONF) and `env` as
/// the program: its stdout (the rank's environment) and stderr.
test::command_result rank_script(const std::string& env) {
  return test::run_shell(
      "env -i PATH=/usr/bin:/bin SLURM_CONF=" + sh_quote(std::getenv("SLURM_CONF")) + " " + env +
      " /bin/sh -c " + sh_quote(slurm_rank_script()) + " infrarsi-rank env 2>&1");
}

std::string env_value(const std::string& env_text, const std::string& name) {
  std::smatch m;
  std::regex re{"(^|\\n)" + name + "=([^\\n]*)"};
  return std::regex_search(env_text, m, re) ? m[2].str() : "(unset)";
}

TEST(SlurmRankScript, DerivesTheTorchrunVariablesOfAMultiNodeStep) {
  REQUIRE_SLURM();
  test::slurm_cluster cluster; // scontrol expands the node list with the cluster's SLURM_CONF
  // Task 4 of 5 on the second of two nodes (3 tasks on node07, 2 on node08).
  auto r = rank_script("SLURM_PROCID=4 SLURM_NTASKS=5 SLURM_LOCALID=1 SLURM_NODEID=1 "
                       "SLURM_STEP_TASKS_PER_NODE=3,2 SLURM_STEP_NUM_NODES=2 "
                       "SLURM_STEP_NODELIST='node[07-08]' MASTER_PORT=29511 SLURM_JOB_ID=9 "
                       "SLURM_STEP_ID=1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(env_value(r.output, "RANK"), "4");
  EXPECT_EQ(env_value(r.output, "WORLD_SIZE"), "5");
  EXPECT_EQ(env_value(r.output, "LOCAL_RANK"), "1");
  EXPECT_EQ(env_value(r.output, "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env_value(r.output, "MASTER_ADDR"), "node07");
  EXPECT_EQ(env_value(r.output, "MASTER_PORT"), "29511");
  EXPECT_EQ(r.output.find("INFRARSI_SLURM_STEP"), std::string::npos); // only task 0 says it
  // Task 0 of 7 over four nodes "2(x3),1": the third node (SLURM_NODEID=2) runs 2 tasks, the
  // fourth 1; task 0 names the step.
  auto third = rank_script("SLURM_PROCID=0 SLURM_NTASKS=7 SLURM_LOCALID=0 SLURM_NODEID=2 "
                           "SLURM_STEP_TASKS_PER_NODE='2(x3),1' SLURM_STEP_NUM_NODES=4 "
                           "SLURM_STEP_NODELIST='gpu[1-3],cpu7' SLURM_JOB_ID=9 SLURM_STEP_ID=1");
  ASSERT_EQ(third.status, 0) << third.output;
  EXPECT_EQ(env_value(third.output, "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env_value(third.output, "MASTER_ADDR"), "gpu1");
  EXPECT_NE(third.output.find("INFRARSI_SLURM_STEP 9.1\n"), std::string::npos) << third.output;
  auto fourth = rank_script("SLURM_PROCID=6 SLURM_NTASKS=7 SLURM_LOCALID=0 SLURM_NODEID=3 "
                            "SLURM_STEP_TASKS_PER_NODE='2(x3),1' SLURM_STEP_NUM_NODES=4 "
                            "SLURM_STEP_NODELIST='gpu[1-3],cpu7'");
  EXPECT_EQ(env_value(fourth.output, "LOCAL_WORLD_SIZE"), "1");
  EXPECT_EQ(env_value(fourth.output, "RANK"), "6");
  // A one-node step: the loopback address, whatever the node is called.
  auto one = rank_script("SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 SLURM_NODEID=0 "
                         "SLURM_STEP_TASKS_PER_NODE=2 SLURM_STEP_NUM_NODES=1 "
                         "SLURM_STEP_NODELIST=somewhere");
  EXPECT_EQ(env_value(one.output, "MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(env_value(one.output, "LOCAL_WORLD_SIZE"), "2");
  // Not a Slurm task: status 2 and why, the workload never runs.
  auto none = rank_script("");
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.output.find("not a Slurm task (no SLURM_PROCID)"), std::string::npos)
      << none.output;
  EXPECT_EQ(none.output.find("PATH="), std::string::npos);
}

TEST(SlurmLauncher, OutsideAnAllocationIsALaunchError) {
  // No cluster needed: without SLURM_JOB_ID nothing is started at all.
  std::optional<std::string> saved;
  if (const char* job = std::getenv("SLURM_JOB_ID"))
    saved = job;
  ::unsetenv("SLURM_JOB_ID");
  auto task = load_task_file(task_path("slurm_hang.toml"));
  ASSERT_TRUE(task) << describe(task.error());
  test::temp_dir tmp;
  trial_request req;
  req.task = &*task;
  req.trial_dir = tmp.sub("trial");
  auto rep = run_trial(req);
  if (saved)
    ::setenv("SLURM_JOB_ID", saved->c_str(), 1);
  ASSERT_TRUE(rep) << describe(rep.error());
  const auto* r = rep->result.get();
  EXPECT_EQ(r->outcome(), wire::Outcome::LaunchError);
  EXPECT_NE(r->detail()->str().find("SLURM_JOB_ID is not set"), std::string::npos)
      << r->detail()->str();
  EXPECT_LT(r->wall_time_s(), 1.0); // nothing ran
  EXPECT_FALSE(fs::exists(tmp.sub("trial/rank-0.stdout")));
}

} // namespace
} // namespace infrarsi::adapters
