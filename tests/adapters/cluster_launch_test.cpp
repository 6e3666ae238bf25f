// adapters/cluster_launch.hpp: the srun and torchrun command lines of a trial, the reserved
// options, and the parsers of what srun and torchrun print (labels, task reports, failures),
// with the lines Slurm 22.05 and torch 1.13 really print. The launches themselves run in
// tests/adapters/slurm_launcher_test.cpp (a real Slurm cluster).

#include <signal.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "adapters/cluster_launch.hpp"
#include "adapters/launch_config.hpp"
#include "adapters/task_file.hpp"
#include "adapters/trial_launcher.hpp"
#include "messages/errc.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

using strings = std::vector<std::string>;

TEST(ClusterLaunch, SrunCommandIsOneStepOfWorldSizeTasks) {
  srun_plan plan;
  plan.world_size = 4;
  plan.workdir = "/work/job";
  plan.step_name = "infrarsi-trial-7-1";
  plan.extra_args = {"--nodes=2", "--cpus-per-task=8"};
  plan.argv = {"/usr/bin/python3", "train.py", "--steps", "10"};
  auto cmd = srun_command(plan);
  strings expected = {"srun",
                      "--ntasks=4",
                      "--kill-on-bad-exit=1",
                      "--label",
                      "--input=none",
                      "--export=ALL",
                      "--chdir=/work/job",
                      "--job-name=infrarsi-trial-7-1",
                      "--nodes=2",
                      "--cpus-per-task=8",
                      "/bin/sh",
                      "-c",
                      slurm_rank_script(),
                      "infrarsi-rank",
                      "/usr/bin/python3",
                      "train.py",
                      "--steps",
                      "10"};
  EXPECT_EQ(cmd, expected);
  // The script names each variable it derives from Slurm's.
  const auto& script = slurm_rank_script();
  for (const char* text :
       {"RANK=${SLURM_PROCID", "WORLD_SIZE=${SLURM_NTASKS", "LOCAL_RANK=${SLURM_LOCALID",
        "SLURM_STEP_TASKS_PER_NODE", "scontrol show hostnames \"$SLURM_STEP_NODELIST\" | head -n 1",
        "exec \"$@\""})
    EXPECT_NE(script.find(text), std::string::npos) << text;
}

TEST(ClusterLaunch, TorchrunCommandNamesEveryFlag) {
  torchrun_plan plan;
  plan.program = {"/usr/bin/python3", "-m", "torch.distributed.run"};
  plan.world_size = 2;
  plan.port = 29517;
  plan.rdzv_id = "infrarsi-3-0";
  plan.log_dir = "/tmp/trial/torchrun";
  plan.extra_args = {"--monitor_interval=1"};
  plan.argv = {"/usr/bin/python3", "train.py", "--micro-batch", "2"};
  strings expected = {"/usr/bin/python3",
                      "-m",
                      "torch.distributed.run",
                      "--nnodes=1",
                      "--nproc_per_node=2",
                      "--rdzv_backend=c10d",
                      "--rdzv_endpoint=127.0.0.1:29517",
                      "--rdzv_id=infrarsi-3-0",
                      "--max_restarts=0",
                      "--tee=3",
                      "--log_dir=/tmp/trial/torchrun",
                      "--monitor_interval=1",
                      "--no_python",
                      "/usr/bin/python3",
                      "train.py",
                      "--micro-batch",
                      "2"};
  EXPECT_EQ(torchrun_command(plan), expected);
  torchrun_plan plain;
  plain.world_size = 8;
  plain.port = 1234;
  plain.rdzv_id = "r";
  plain.log_dir = "d";
  plain.argv = {"./job"};
  EXPECT_EQ(torchrun_command(plain),
            (strings{"torchrun", "--nnodes=1", "--nproc_per_node=8", "--rdzv_backend=c10d",
                     "--rdzv_endpoint=127.0.0.1:1234", "--rdzv_id=r", "--max_restarts=0", "--tee=3",
                     "--log_dir=d", "--no_python", "./job"}));
}

TEST(ClusterLaunch, ReservedOptions) {
  EXPECT_EQ(reserved_srun_option("--ntasks=8"), "--ntasks");
  EXPECT_EQ(reserved_srun_option("-n8"), "--ntasks");
  EXPECT_EQ(reserved_srun_option("-l"), "--label");
  EXPECT_EQ(reserved_srun_option("--output=x.%t"), "--output");
  EXPECT_EQ(reserved_srun_option("-K0"), "--kill-on-bad-exit");
  EXPECT_EQ(reserved_srun_option("--jobid=5"), "--jobid");
  EXPECT_EQ(reserved_srun_option("--export=NONE"), "--export");
  EXPECT_EQ(reserved_srun_option("--nodes=2"), "");
  EXPECT_EQ(reserved_srun_option("-N2"), "");
  EXPECT_EQ(reserved_srun_option("--ntasks-per-node=4"), "");
  EXPECT_EQ(reserved_srun_option("gpu:2"), "");
  EXPECT_EQ(reserved_torchrun_option("--nproc-per-node=4"), "--nproc_per_node");
  EXPECT_EQ(reserved_torchrun_option("--rdzv_endpoint=h:1"), "--rdzv_endpoint");
  EXPECT_EQ(reserved_torchrun_option("-r"), "--redirects");
  EXPECT_EQ(reserved_torchrun_option("--no-python"), "--no_python");
  EXPECT_EQ(reserved_torchrun_option("--monitor_interval=1"), "");
  EXPECT_EQ(reserved_torchrun_option("--rdzv_conf=timeout=60"), "");
}

TEST(ClusterLaunch, Labels) {
  auto a = parse_srun_label("0: INFRARSI_METRICS {\"step\": 0}");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->rank, 0);
  EXPECT_EQ(a->text, "INFRARSI_METRICS {\"step\": 0}");
  auto b = parse_srun_label(" 12: x: y");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->rank, 12);
  EXPECT_EQ(b->text, "x: y");
  auto empty = parse_srun_label("1: ");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->text, "");
  EXPECT_FALSE(parse_srun_label("srun: error: vm: task 1: Exited with exit code 3"));
  EXPECT_FALSE(parse_srun_label("12:30 is the time"));
  EXPECT_FALSE(parse_srun_label(""));
  auto t = parse_torchrun_label("[default1]:Traceback (most recent call last):");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->rank, 1);
  EXPECT_EQ(t->text, "Traceback (most recent call last):");
  auto u = parse_torchrun_label("[trainer10]:[x]: y");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->rank, 10);
  EXPECT_EQ(u->text, "[x]: y");
  EXPECT_FALSE(parse_torchrun_label("[default]:x"));
  EXPECT_FALSE(parse_torchrun_label("WARNING:torch.distributed.run:"));
}

TEST(ClusterLaunch, SrunTaskReports) {
  auto exited = parse_srun_task_report("srun: error: vm: task 1: Exited with exit code 3");
  ASSERT_TRUE(exited);
  EXPECT_EQ(exited->ranks, (std::vector<int>{1}));
  EXPECT_EQ(exited->kind, srun_task_report::kind_t::exited);
  EXPECT_EQ(exited->code, 3);
  auto killed = parse_srun_task_report("srun: error: node-a.cluster: tasks 0-2,5: Killed");
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->ranks, (std::vector<int>{0, 1, 2, 5}));
  EXPECT_EQ(killed->kind, srun_task_report::kind_t::signalled);
  EXPECT_EQ(killed->code, SIGKILL);
  auto segv = parse_srun_task_report("srun: error: vm: task 0: Segmentation fault (core dumped)");
  ASSERT_TRUE(segv);
  EXPECT_EQ(segv->kind, srun_task_report::kind_t::signalled);
  EXPECT_EQ(segv->code, SIGSEGV);
  auto term = parse_srun_task_report("srun: error: vm: task 0: Terminated");
  ASSERT_TRUE(term);
  EXPECT_EQ(term->code, SIGTERM);
  auto oom = parse_srun_task_report("srun: error: n1: task 3: Out Of Memory");
  ASSERT_TRUE(oom);
  EXPECT_EQ(oom->kind, srun_task_report::kind_t::oom);
  EXPECT_EQ(oom->ranks, (std::vector<int>{3}));
  EXPECT_FALSE(parse_srun_task_report("srun: launch/slurm: _step_signal: Terminating StepId=2.0"));
  EXPECT_FALSE(parse_srun_task_report("srun: error: Unable to create step for job 5: busy"));
  EXPECT_FALSE(parse_srun_task_report("0: srun: error: vm: task 1: Killed"));
}

TEST(ClusterLaunch, TorchrunFailureLine) {
  auto f = parse_torchrun_failure(
      "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 3) local_rank: 1 "
      "(pid: 4711) of binary: /usr/bin/python3");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->exit_code, 3);
  auto k = parse_torchrun_failure("...:failed (exitcode: -9) local_rank: 0 (pid: 1) of binary: x");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->rank, 0);
  EXPECT_EQ(k->exit_code, -9);
  EXPECT_FALSE(parse_torchrun_failure("[default0]:the test failed (exitcode: x) local_rank: 0"));
}

/// Loads a task file with `workload` as its [workload] table; the error text or "".
std::string load_error(const test::temp_dir& dir, const std::string& workload) {
  auto path = dir.sub("task.toml");
  std::ofstream{path} << "name = \"t\"\n[workload]\n" << workload << "\n[contract]\nsteps = 1\n";
  auto task = load_task_file(path);
  return task ? std::string{} : describe(task.error());
}

TEST(ClusterLaunch, TaskFileKeys) {
  test::temp_dir dir;
  auto path = dir.sub("task.toml");
  std::ofstream{path} << "name = \"t\"\n[workload]\nlauncher = \"slurm\"\nworld_size = 4\n"
                      << "argv = [\"./job\"]\nsrun_args = [\"--nodes=2\", \"-c{threads}\"]\n"
                      << "[contract]\nsteps = 1\n";
  auto task = load_task_file(path);
  ASSERT_TRUE(task) << describe(task.error());
  EXPECT_EQ(task->workload.launcher, tuning::launcher_kind::slurm);
  EXPECT_EQ(task->workload.srun_args, (strings{"--nodes=2", "-c{threads}"}));
  EXPECT_EQ(task->workload.torchrun_program, (strings{"torchrun"}));

  std::ofstream{path, std::ios::trunc}
      << "name = \"t\"\n[workload]\nlauncher = \"torchrun\"\nargv = [\"./job\"]\n"
      << "torchrun_program = [\"/usr/bin/python3\", \"-m\", \"torch.distributed.run\"]\n"
      << "torchrun_args = [\"--monitor_interval=1\"]\n[contract]\nsteps = 1\n";
  task = load_task_file(path);
  ASSERT_TRUE(task) << describe(task.error());
  EXPECT_EQ(task->workload.launcher, tuning::launcher_kind::torchrun);
  EXPECT_EQ(task->workload.torchrun_program,
            (strings{"/usr/bin/python3", "-m", "torch.distributed.run"}));
  EXPECT_EQ(task->workload.torchrun_args, (strings{"--monitor_interval=1"}));
}

TEST(ClusterLaunch, TaskFileErrorsNameFileKeyAndValue) {
  test::temp_dir dir;
  auto file = dir.sub("task.toml");
  EXPECT_EQ(load_error(dir, "launcher = \"sbatch\"\nargv = [\"x\"]"),
            "invalid_argument: " + file +
                ":3:12: workload.launcher: expected \"ranks\", \"command\", \"slurm\" (one "
                "srun job step in the allocation infrarsi runs in) or \"torchrun\", got "
                "string \"sbatch\"");
  EXPECT_EQ(load_error(dir, "launcher = \"slurm\"\nargv = [\"x\"]\n"
                            "srun_args = [\"--nodes=2\", \"-n8\"]"),
            "invalid_argument: " + file +
                ":5:27: workload.srun_args[1]: infrarsi sets --ntasks itself "
                "(docs/node-runner.md \"Launching through Slurm and torchrun\"), got string "
                "\"-n8\"");
  EXPECT_EQ(load_error(dir, "argv = [\"x\"]\nsrun_args = [\"--nodes=2\"]"),
            "invalid_argument: " + file +
                ":4:13: workload.srun_args: only for workload.launcher = \"slurm\", got "
                "launcher \"ranks\"");
  EXPECT_EQ(load_error(dir, "launcher = \"torchrun\"\nargv = [\"x\"]\n"
                            "torchrun_args = [\"--nproc_per_node=2\"]"),
            "invalid_argument: " + file +
                ":5:18: workload.torchrun_args[0]: infrarsi sets --nproc_per_node itself "
                "(docs/node-runner.md \"Launching through Slurm and torchrun\"), got string "
                "\"--nproc_per_node=2\"");
  EXPECT_EQ(load_error(dir, "launcher = \"torchrun\"\nargv = [\"x\"]\ntorchrun_program = []"),
            "invalid_argument: " + file +
                ":5:20: workload.torchrun_program: expected the program that is torchrun, "
                "e.g. [\"torchrun\"], got []");
  EXPECT_EQ(load_error(dir, "launcher = \"slurm\"\nargv = [\"x\"]\nsrun_args = \"--nodes=2\""),
            "invalid_argument: " + file +
                ":5:13: workload.srun_args: expected an array of strings, got string "
                "\"--nodes=2\"");
}

TEST(ClusterLaunch, TorchrunTrialRunsTheBuiltCommand) {
  // The trial launcher runs exactly torchrun_command(): here a torchrun that does not exist,
  // so the trial is a launch_error naming it, and its argv is the command line.
  test::temp_dir dir;
  auto path = dir.sub("task.toml");
  std::ofstream{path} << "name = \"t\"\n[workload]\nlauncher = \"torchrun\"\nworld_size = 2\n"
                      << "argv = [\"/usr/bin/python3\", \"train.py\"]\n"
                      << "torchrun_program = [\"/nonexistent/torchrun\"]\n"
                      << "torchrun_args = [\"--monitor_interval=1\"]\n[contract]\nsteps = 1\n";
  auto task = load_task_file(path);
  ASSERT_TRUE(task) << describe(task.error());
  trial_request req;
  req.task = &*task;
  req.trial_id = 5;
  req.trial_dir = dir.sub("trial");
  auto rep = run_trial(req);
  ASSERT_TRUE(rep) << describe(rep.error());
  EXPECT_EQ(rep->result.get()->outcome(), wire::Outcome::LaunchError);
  EXPECT_NE(rep->result.get()->detail()->str().find("/nonexistent/torchrun"), std::string::npos)
      << rep->result.get()->detail()->str();
  ASSERT_GE(rep->argv.size(), 13u);
  auto endpoint = rep->argv[4]; // --rdzv_endpoint=127.0.0.1:PORT, a free port of this trial
  ASSERT_EQ(endpoint.rfind("--rdzv_endpoint=127.0.0.1:", 0), 0u) << endpoint;
  torchrun_plan plan;
  plan.program = {"/nonexistent/torchrun"};
  plan.world_size = 2;
  plan.port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  plan.rdzv_id = "infrarsi-5-0";
  plan.log_dir =
      std::filesystem::absolute(dir.sub("trial")).lexically_normal().string() + "/torchrun";
  plan.extra_args = {"--monitor_interval=1"};
  plan.argv = {"/usr/bin/python3", "train.py"};
  EXPECT_EQ(rep->argv, torchrun_command(plan));
  EXPECT_GT(plan.port, 0);
}

TEST(ClusterLaunch, LaunchJsonNamesTheLauncherAndItsRenderedOptions) {
  test::temp_dir dir;
  auto path = dir.sub("task.toml");
  std::ofstream{path} << "name = \"t\"\n[workload]\nlauncher = \"slurm\"\nworld_size = 4\n"
                      << "argv = [\"./job\", \"--threads\", \"{threads}\"]\n"
                      << "srun_args = [\"--nodes=2\", \"--cpus-per-task={threads}\"]\n"
                      << "[contract]\nsteps = 1\n[[knobs]]\nname = \"threads\"\ntype = \"int\"\n"
                      << "values = [1, 8]\ndefault = 1\n";
  auto task = load_task_file(path);
  ASSERT_TRUE(task) << describe(task.error());
  tuning::configuration config;
  config.knobs = {{"threads", std::int64_t{8}}};
  auto j = launch_config(*task, config, 1.5, 1.2);
  EXPECT_EQ(j["launcher"], "slurm");
  EXPECT_EQ(j["srun_args"], (nlohmann::json{"--nodes=2", "--cpus-per-task=8"}));
  EXPECT_EQ(j["argv"], (nlohmann::json{"./job", "--threads", "8"}));
  EXPECT_EQ(j["world_size"], "4");
  // The ranks launcher's document has none of these keys (as before the cluster launchers).
  task->workload.launcher = tuning::launcher_kind::ranks;
  auto plain = launch_config(*task, config, 1.5, 1.2);
  EXPECT_FALSE(plain.contains("launcher"));
  EXPECT_FALSE(plain.contains("srun_args"));
}

} // namespace
} // namespace infrarsi::adapters
