// The real PyTorch workload (workloads/torch_gpt) run through the real launcher, with the smoke
// task config/tasks/torch_gpt_smoke.toml (2 layers x 64, global batch 4 x 32 tokens): 1 and 2
// ranks complete and their metrics are parsed; work-preserving configurations give the same
// losses; over the memory cap is oom; a killed rank ends the trial at once with nothing left.

#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "adapters/trial_launcher.hpp"
#include "adapters/task_file.hpp"
#include "proc_text.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

namespace fs = std::filesystem;

tuning::task_spec smoke_task() {
  auto task = adapters::load_task_file(std::string{INFRARSI_SOURCE_DIR}
                                      + "/config/tasks/torch_gpt_smoke.toml");
  if (!task)
    throw std::runtime_error(describe(task.error()));
  return std::move(*task);
}

struct outcome {
  trial_report report;
  const wire::TrialResult* result = nullptr;
};

outcome run(const tuning::task_spec& task, tuning::knob_assignment knobs, const std::string& dir,
            std::uint64_t cap = 0) {
  trial_request req;
  req.task = &task;
  req.knobs = std::move(knobs);
  req.trial_dir = dir;
  req.memory_cap_bytes = cap;
  auto rep = run_trial(req);
  if (!rep)
    throw std::runtime_error(describe(rep.error()));
  outcome o;
  o.report = std::move(*rep);
  o.result = o.report.result.get();
  return o;
}

std::vector<double> losses(const wire::TrialResult& r) {
  std::vector<double> out;
  for (const auto* s : *r.steps())
    out.push_back(s->loss());
  return out;
}

/// Pids whose environment holds `INFRARSI_TRIAL_DIR=dir` (and `RANK=rank` when rank >= 0).
std::vector<pid_t> trial_processes(const std::string& dir, int rank) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator{"/proc"}) {
    auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::string all = test::proc_text(e.path() / "environ");
    std::string st = test::proc_text(e.path() / "stat");
    auto close = st.rfind(')');
    if (close != std::string::npos && close + 2 < st.size() && st[close + 2] == 'Z')
      continue;
    auto has = [&all](const std::string& kv) {
      return all.find(std::string{"\0", 1} + kv + std::string{"\0", 1}) != std::string::npos
             || all.rfind(kv + std::string{"\0", 1}, 0) == 0;
    };
    if (has("INFRARSI_TRIAL_DIR=" + dir) && (rank < 0 || has("RANK=" + std::to_string(rank))))
      out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

class TorchGpt : public ::testing::Test {
protected:
  test::temp_dir dir;
  tuning::task_spec task = smoke_task();
};

TEST_F(TorchGpt, OneAndTwoRanksCompleteAndMetricsAreParsed) {
  for (std::int64_t ws : {1, 2}) {
    auto o = run(task, {{"world_size", ws}}, dir.sub("ws" + std::to_string(ws)));
    ASSERT_EQ(o.result->outcome(), wire::Outcome::Ok)
      << "world size " << ws << ": " << o.result->detail()->str();
    ASSERT_EQ(o.result->steps()->size(), 4u);
    for (const auto* s : *o.result->steps()) {
      EXPECT_EQ(s->tokens(), 128u); // global batch 4 x 32 tokens, whatever the world size
      EXPECT_GT(s->step_time_s(), 0.0);
      EXPECT_TRUE(std::isfinite(s->loss()));
      EXPECT_TRUE(s->peak_memory_bytes().has_value());
    }
    EXPECT_EQ(o.report.world_size, ws);
    EXPECT_GT(o.result->peak_memory_bytes(), 50u << 20); // a real Python + torch process
  }
}

// Tolerance for work-preserving configurations: the same tokens per step, only summation order
// changes (float32 reassociation). Stated in workloads/torch_gpt/README.md.
constexpr double loss_tolerance = 1e-5;

TEST_F(TorchGpt, WorkPreservingConfigurationsGiveTheSameLosses) {
  auto a = run(task, {{"micro_batch", std::int64_t{1}}, {"world_size", std::int64_t{1}}},
               dir.sub("a"));
  auto b = run(task, {{"micro_batch", std::int64_t{2}}, {"world_size", std::int64_t{2}}},
               dir.sub("b"));
  auto c = run(task, {{"micro_batch", std::int64_t{4}}, {"foreach", true},
                      {"attention", std::string{"baddbmm"}}},
               dir.sub("c"));
  for (const auto* o : {&a, &b, &c})
    ASSERT_EQ(o->result->outcome(), wire::Outcome::Ok) << o->result->detail()->str();
  auto la = losses(*a.result);
  auto lb = losses(*b.result);
  auto lc = losses(*c.result);
  ASSERT_EQ(la.size(), 4u);
  ASSERT_EQ(lb.size(), 4u);
  ASSERT_EQ(lc.size(), 4u);
  for (std::size_t i = 0; i < la.size(); ++i) {
    EXPECT_NEAR(la[i], lb[i], loss_tolerance) << "step " << i;
    EXPECT_NEAR(la[i], lc[i], loss_tolerance) << "step " << i;
  }
  // bf16 is a numerics knob: its drift is larger than the tolerance (the verifier's job).
  auto d = run(task, {{"dtype", std::string{"bf16"}}}, dir.sub("d"));
  ASSERT_EQ(d.result->outcome(), wire::Outcome::Ok) << d.result->detail()->str();
  double max_diff = 0;
  auto ld = losses(*d.result);
  for (std::size_t i = 0; i < la.size(); ++i)
    max_diff = std::max(max_diff, std::abs(la[i] - ld[i]));
  EXPECT_GT(max_diff, loss_tolerance);
}

TEST_F(TorchGpt, OverTheMemoryCapIsOom) {
  auto o = run(task, {}, dir.sub("oom"), 64ull << 20); // below what Python + torch need
  EXPECT_EQ(o.result->outcome(), wire::Outcome::Oom) << o.result->detail()->str();
  EXPECT_TRUE(trial_processes(dir.sub("oom"), -1).empty());
}

TEST_F(TorchGpt, KillingOneRankEndsTheTrialWithinTenSecondsWithNothingLeft) {
  auto long_task = task;
  long_task.constants["steps"] = std::int64_t{100000}; // would run for hours
  long_task.limits.timeout_s = 300;
  auto trial_dir = fs::absolute(dir.sub("kill")).lexically_normal().string();
  std::chrono::steady_clock::time_point killed_at;
  std::thread killer{[&] {
    for (int i = 0; i < 600; ++i) { // wait (up to 60 s) until rank 1 is training
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::ifstream out{trial_dir + "/rank-0.stdout"};
      std::string text{std::istreambuf_iterator<char>{out}, {}};
      if (text.find("\"step\": 2") == std::string::npos && text.find("\"step\":2") == std::string::npos)
        continue;
      auto pids = trial_processes(trial_dir, 1);
      if (pids.empty())
        continue;
      killed_at = std::chrono::steady_clock::now();
      for (auto pid : pids)
        ::kill(pid, SIGKILL);
      return;
    }
  }};
  auto o = run(long_task, {{"world_size", std::int64_t{2}}}, trial_dir);
  auto ended_at = std::chrono::steady_clock::now();
  killer.join();
  ASSERT_NE(killed_at.time_since_epoch().count(), 0) << "rank 1 never started training";
  EXPECT_EQ(o.result->outcome(), wire::Outcome::Crash) << o.result->detail()->str();
  EXPECT_NE(o.result->detail()->str().find("rank 1: killed by signal 9"), std::string::npos)
    << o.result->detail()->str();
  EXPECT_LT(std::chrono::duration<double>(ended_at - killed_at).count(), 10.0);
  EXPECT_TRUE(trial_processes(trial_dir, -1).empty());
}

/// The work the shipped tasks' contracts name is the work train.py declares: a task whose
/// `params`, `layers` or `global_batch` were wrong would reject every trial, the baseline included.
TEST_F(TorchGpt, ShippedTasksDeclareTheWorkTrainPyDoes) {
  for (const char* name : {"torch_gpt", "torch_gpt_contract"}) {
    SCOPED_TRACE(name);
    auto shipped = adapters::load_task_file(std::string{INFRARSI_SOURCE_DIR} + "/config/tasks/" + name
                                        + ".toml");
    ASSERT_TRUE(shipped) << describe(shipped.error());
    // One step is enough to print the final line (argparse: the last --steps wins).
    shipped->workload.argv.insert(shipped->workload.argv.end(), {"--steps", "1", "--warmup-steps", "0"});
    auto o = run(*shipped, {}, dir.sub(name));
    ASSERT_EQ(o.result->outcome(), wire::Outcome::Ok) << o.result->detail()->str();
    auto final_line = nlohmann::json::parse(o.result->final_report()->str());
    EXPECT_EQ(final_line["params"].get<std::uint64_t>(), shipped->contract.params);
    EXPECT_EQ(final_line["layers"].get<std::uint32_t>(), shipped->contract.layers);
    EXPECT_EQ(final_line["global_batch"].get<std::uint64_t>(), shipped->contract.global_batch);
    EXPECT_EQ(final_line["tokens_per_step"].get<std::uint64_t>(), shipped->contract.tokens_per_step);
  }
}

/// The variables of /proc/PID/environ (NAME -> value).
std::map<std::string, std::string> environ_of(pid_t pid) {
  std::string all = test::proc_text("/proc/" + std::to_string(pid) + "/environ");
  std::map<std::string, std::string> env;
  std::size_t begin = 0;
  for (auto end = all.find('\0'); end != std::string::npos; end = all.find('\0', begin)) {
    auto entry = all.substr(begin, end - begin);
    auto eq = entry.find('=');
    if (eq != std::string::npos)
      env[entry.substr(0, eq)] = entry.substr(eq + 1);
    begin = end + 1;
  }
  return env;
}

/// Runs the smoke task at world size 1 and reads the environment of every process of the trial
/// from /proc while its first step is reported (the rank is alive, training).
std::vector<std::map<std::string, std::string>> environments_at_first_step(
  const tuning::task_spec& task, const std::string& dir, wire::Outcome& outcome) {
  std::vector<std::map<std::string, std::string>> seen;
  trial_request req;
  req.task = &task;
  req.knobs = {{"world_size", std::int64_t{1}}};
  req.trial_dir = dir;
  req.on_step = [&](const step_sample& s) {
    if (s.step == 0)
      for (pid_t pid : trial_processes(dir, -1))
        seen.push_back(environ_of(pid));
  };
  auto rep = run_trial(req);
  if (!rep)
    throw std::runtime_error(describe(rep.error()));
  outcome = rep->result.get()->outcome();
  return seen;
}

// Issue 19: with workload.distributed_env = "multi_rank" the real workload at world size 1 runs
// as the plain process its baseline is: none of the torchrun variables in its environment.
TEST_F(TorchGpt, WorldSizeOneWithTheMultiRankOptionIsAPlainProcess) {
  auto outcome = wire::Outcome::Unset;
  auto always = environments_at_first_step(task, dir.sub("always"), outcome);
  ASSERT_EQ(outcome, wire::Outcome::Ok);
  ASSERT_GE(always.size(), 1u);
  EXPECT_EQ(always[0]["RANK"], "0");
  EXPECT_EQ(always[0]["WORLD_SIZE"], "1");
  EXPECT_EQ(always[0]["MASTER_ADDR"], "127.0.0.1");

  task.workload.distributed_env = tuning::distributed_env_kind::multi_rank;
  auto plain = environments_at_first_step(task, dir.sub("plain"), outcome);
  ASSERT_EQ(outcome, wire::Outcome::Ok);
  ASSERT_GE(plain.size(), 1u);
  for (const auto& env : plain) {
    EXPECT_EQ(env.at("INFRARSI_TRIAL_DIR"), dir.sub("plain")); // the trial's own process
    EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");                   // knob-rendered env still set
    for (const auto& name : torchrun_env_names())
      EXPECT_EQ(env.count(name), 0u) << name << " = " << env.at(name);
  }
}

} // namespace
} // namespace infrarsi::adapters
