// Tests for adapters/trial_launcher.cpp with real processes: launching as the script expects
// (workload.distributed_env: a plain process at world size 1 has no torchrun variables; an env
// knob set to "unset" removes its variable, also one inherited from the harness), and one
// start-up failure is one outcome class, whatever its timing, quoting the failing rank's
// traceback.

#include "adapters/trial_launcher.hpp"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "adapters/task_file.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

const std::string data_dir = INFRARSI_TEST_DATA_DIR;

/// Sets an environment variable of this (the harness's) process for the scope, as a user's
/// shell (or an outer torchrun) would have; restores the previous state.
class scoped_env {
public:
  scoped_env(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str()))
      old_ = old;
    ::setenv(name_.c_str(), value.c_str(), 1);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

private:
  std::string name_;
  std::optional<std::string> old_;
};

/// Variables the script reports (its own environment as the kernel gave it).
const char* const env_script =
  "import os\n"
  "names = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', "
  "'MASTER_PORT', 'NCCL_ALGO')\n"
  "for k in names:\n"
  "    if k in os.environ:\n"
  "        print('ENV ' + k + '=' + os.environ[k])\n"
  "print('ENV end')\n";

/// The fake task (tests/data/tasks/fake.toml) running `script`, with a choice knob nccl_algo
/// ("unset", "Ring", "Tree") rendered into NCCL_ALGO, and a real knob delay (seconds) rendered
/// into START_DELAY.
tuning::task_spec script_task(const std::string& script) {
  auto task = load_task_file(data_dir + "/tasks/fake.toml");
  if (!task)
    throw std::runtime_error(describe(task.error()));
  task->workload.argv = {"python3", "-c", script};
  task->metrics.require_final_line = false;
  tuning::knob_spec algo;
  algo.name = "nccl_algo";
  algo.type = tuning::knob_type::choice;
  algo.values = {std::string{"unset"}, std::string{"Ring"}, std::string{"Tree"}};
  algo.default_value = std::string{"unset"};
  task->knobs.push_back(algo);
  task->workload.env["NCCL_ALGO"] = "{nccl_algo}";
  tuning::knob_spec delay;
  delay.name = "delay";
  delay.type = tuning::knob_type::real;
  delay.min = 0.0;
  delay.max = 10.0;
  delay.default_value = 0.0;
  task->knobs.push_back(delay);
  task->workload.env["START_DELAY"] = "{delay}";
  return std::move(*task);
}

std::string read(const std::string& file) {
  std::ifstream in{file};
  return {std::istreambuf_iterator<char>{in}, {}};
}

/// NAME -> value of the "ENV NAME=value" lines of one rank's stdout; "end" -> "" when the
/// script got to its end (so an empty map is never mistaken for an empty environment).
std::map<std::string, std::string> reported_env(const std::string& stdout_file) {
  std::map<std::string, std::string> env;
  std::istringstream in{read(stdout_file)};
  for (std::string line; std::getline(in, line);) {
    if (line == "ENV end") {
      env["end"] = "";
      continue;
    }
    if (line.rfind("ENV ", 0) != 0)
      continue;
    auto eq = line.find('=');
    env[line.substr(4, eq - 4)] = line.substr(eq + 1);
  }
  return env;
}

class TrialLauncherEnvTest : public ::testing::Test {
protected:
  test::temp_dir dir;

  trial_report run(const tuning::task_spec& task, tuning::knob_assignment knobs,
                   const std::string& name) {
    trial_request req;
    req.task = &task;
    req.knobs = std::move(knobs);
    req.trial_dir = dir.sub(name);
    auto rep = run_trial(req);
    if (!rep)
      throw std::runtime_error(describe(rep.error()));
    return std::move(*rep);
  }
};

TEST_F(TrialLauncherEnvTest, MultiRankOptionRunsWorldSizeOneAsAPlainProcess) {
  // The harness itself runs with torchrun variables (an outer launcher, a user's shell).
  scoped_env rank{"RANK", "5"};
  scoped_env port{"MASTER_PORT", "29999"};
  auto task = script_task(env_script);
  ASSERT_EQ(task.workload.distributed_env, tuning::distributed_env_kind::always); // the default

  // Default: every rank, also the only one, gets the contract (as before the option).
  auto def = run(task, {{"world_size", std::int64_t{1}}}, "always");
  ASSERT_EQ(def.result.get()->outcome(), wire::Outcome::Ok) << def.result.get()->detail()->str();
  auto env = reported_env(dir.sub("always") + "/rank-0.stdout");
  ASSERT_EQ(env.count("end"), 1u);
  EXPECT_EQ(env["RANK"], "0");
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["WORLD_SIZE"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "1");
  EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
  EXPECT_NE(env["MASTER_PORT"], "29999"); // the trial's own free port
  EXPECT_GT(std::stoi(env["MASTER_PORT"]), 0);
  EXPECT_EQ(def.env_unset, std::vector<std::string>{"NCCL_ALGO"}); // the knob's default "unset"

  // multi_rank at world size 1: none of them, the inherited RANK and MASTER_PORT included.
  task.workload.distributed_env = tuning::distributed_env_kind::multi_rank;
  auto plain = run(task, {{"world_size", std::int64_t{1}}}, "plain");
  ASSERT_EQ(plain.result.get()->outcome(), wire::Outcome::Ok)
    << plain.result.get()->detail()->str();
  env = reported_env(dir.sub("plain") + "/rank-0.stdout");
  ASSERT_EQ(env.count("end"), 1u);
  for (const auto& name : torchrun_env_names())
    EXPECT_EQ(env.count(name), 0u) << name << "=" << env[name];
  EXPECT_EQ(plain.env_unset, (std::vector<std::string>{"LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                       "MASTER_ADDR", "MASTER_PORT", "NCCL_ALGO",
                                                       "RANK", "WORLD_SIZE"}));

  // multi_rank at world size 2: every rank gets the contract, as with "always".
  auto two = run(task, {{"world_size", std::int64_t{2}}}, "two");
  ASSERT_EQ(two.result.get()->outcome(), wire::Outcome::Ok) << two.result.get()->detail()->str();
  for (int r = 0; r < 2; ++r) {
    env = reported_env(dir.sub("two") + "/rank-" + std::to_string(r) + ".stdout");
    EXPECT_EQ(env["RANK"], std::to_string(r));
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_NE(env["MASTER_PORT"], "29999");
  }
}

TEST_F(TrialLauncherEnvTest, EnvKnobSetToUnsetRemovesTheVariableAlsoAnInheritedOne) {
  scoped_env inherited{"NCCL_ALGO", "Tree"}; // in the harness's own environment
  auto task = script_task(env_script);
  auto unset = run(task, {{"nccl_algo", std::string{"unset"}}}, "unset");
  ASSERT_EQ(unset.result.get()->outcome(), wire::Outcome::Ok)
    << unset.result.get()->detail()->str();
  auto env = reported_env(dir.sub("unset") + "/rank-0.stdout");
  ASSERT_EQ(env.count("end"), 1u);
  EXPECT_EQ(env.count("NCCL_ALGO"), 0u) << "NCCL_ALGO=" << env["NCCL_ALGO"];
  EXPECT_EQ(env["RANK"], "0"); // the default distributed_env: unchanged
  EXPECT_EQ(unset.env.count("NCCL_ALGO"), 0u);
  EXPECT_EQ(unset.env_unset, std::vector<std::string>{"NCCL_ALGO"});

  auto ring = run(task, {{"nccl_algo", std::string{"Ring"}}}, "ring");
  ASSERT_EQ(ring.result.get()->outcome(), wire::Outcome::Ok);
  env = reported_env(dir.sub("ring") + "/rank-0.stdout");
  EXPECT_EQ(env["NCCL_ALGO"], "Ring");
  EXPECT_EQ(ring.env.at("NCCL_ALGO"), "Ring");
  EXPECT_TRUE(ring.env_unset.empty());
}

// The script's multi-rank path fails at start-up after a delay that varies from run to run (a
// slow import, a rendezvous that takes its time on a loaded machine): rank 1 raises, rank 0
// waits for it as in a rendezvous. With the old wall-clock rule (launch_window_s = 1 here),
// runs 5..9 (delays 1.25..2.25 s) would have been `crash` and runs 0..4 `launch_error`.
TEST_F(TrialLauncherEnvTest, StartUpFailureOfTheMultiRankPathIsOneClassInTenOfTenRuns) {
  auto task = script_task(
    "import os, sys, time\n"
    "rank = int(os.environ['RANK'])\n"
    "if int(os.environ.get('WORLD_SIZE', '1')) > 1:\n"
    "    if rank == 1:\n"
    "        time.sleep(float(os.environ['START_DELAY']))\n"
    "        def init_process_group():\n"
    "            raise RuntimeError('rendezvous failed: rank 1 could not reach 127.0.0.1:' + "
    "os.environ['MASTER_PORT'])\n"
    "        init_process_group()\n"
    "    time.sleep(60)\n");
  task.limits.launch_window_s = 1.0;
  int launch_errors = 0;
  for (int i = 0; i < 10; ++i) {
    auto name = "run" + std::to_string(i);
    auto rep = run(task, {{"world_size", std::int64_t{2}}, {"delay", 0.25 * i}}, name);
    const auto* result = rep.result.get();
    auto detail = result->detail()->str();
    EXPECT_EQ(result->outcome(), wire::Outcome::LaunchError) << "run " << i << ": " << detail;
    launch_errors += result->outcome() == wire::Outcome::LaunchError ? 1 : 0;
    EXPECT_EQ(result->exit_code(), 1) << detail;
    EXPECT_GE(result->wall_time_s(), 0.25 * i) << detail;
    // The failing rank (1, not rank 0 that was stopped) and its traceback, ending in the
    // exception line with the port the run used.
    EXPECT_EQ(detail.rfind("rank 1: exited with status 1; stderr: Traceback (most recent call "
                           "last): | ",
                           0),
              0u)
      << detail;
    auto last = detail.substr(detail.rfind(" | ") + 3);
    EXPECT_EQ(last.rfind("RuntimeError: rendezvous failed: rank 1 could not reach 127.0.0.1:", 0),
              0u)
      << detail;
    auto stderr_text = read(dir.sub(name) + "/rank-1.stderr");
    EXPECT_NE(stderr_text.find(last), std::string::npos) << stderr_text;
    EXPECT_NE(detail.find("in init_process_group"), std::string::npos) << detail;
  }
  EXPECT_EQ(launch_errors, 10);
}

} // namespace
} // namespace infrarsi::adapters
