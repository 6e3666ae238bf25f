// Tests for the memory a trial's result carries (adapters/trial_launcher.cpp, docs/node-runner.md
// "Device memory"), with real processes: a task that declares device memory never gets host
// resident memory as its peak (the trial's memory is then unobserved, and the memory model has
// no measured observation of it), the workload's own report comes first, and nvidia-smi's
// answer, sampled while the trial runs, is summed per rank over the trial's processes. This
// machine has no GPU: a fake nvidia-smi on PATH prints a captured answer of the real one
// (tests/data/nvidia_smi/header_units.csv) with two of its pids replaced by the trial's ranks.

#include "adapters/trial_launcher.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <gtest/gtest.h>

#include "adapters/task_file.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"
#include "tuning/bayes_policy.hpp"
#include "tuning/search_space.hpp"

namespace infrarsi::adapters {
namespace {

const std::string data_dir = INFRARSI_TEST_DATA_DIR;
constexpr std::uint64_t MiB = 1048576;

tuning::task_spec load(const std::string& name) {
  auto task = adapters::load_task_file(data_dir + "/tasks/" + name);
  if (!task)
    throw std::runtime_error(describe(task.error()));
  return std::move(*task);
}

/// Sets an environment variable of this process for the guard's lifetime.
class env_guard {
public:
  env_guard(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str()))
      old_ = old;
    ::setenv(name_.c_str(), value.c_str(), 1);
  }
  ~env_guard() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  env_guard(const env_guard&) = delete;
  env_guard& operator=(const env_guard&) = delete;

private:
  std::string name_;
  std::optional<std::string> old_;
};

class TrialMemoryTest : public ::testing::Test {
protected:
  test::temp_dir dir;

  /// Runs the trial and folds its result into a trial record, as the run projection does.
  tuning::trial_record run(const tuning::task_spec& task, tuning::knob_assignment knobs = {}) {
    trial_request req;
    req.task = &task;
    req.knobs = std::move(knobs);
    req.trial_dir = dir.sub("trial");
    req.trial_id = 3;
    auto rep = run_trial(req);
    if (!rep)
      throw std::runtime_error(describe(rep.error()));
    report_ = std::move(*rep);
    result_ = report_.result.get();
    tuning::trial_record t;
    t.trial_id = 3;
    t.config = tuning::baseline_configuration(task);
    store::apply_result(t, *result_);
    t.verified = true;
    return t;
  }

  /// The censored memory model the planner fits over `history`.
  static tuning::run_memory_model model_of(const tuning::task_spec& task,
                                           const std::vector<tuning::trial_record>& history,
                                           double capacity_bytes) {
    tuning::feature_space fs{task, nullptr};
    return tuning::fit_run_memory(task, fs, history, nullptr, capacity_bytes);
  }

  trial_report report_;
  const wire::TrialResult* result_ = nullptr;
};

TEST_F(TrialMemoryTest, DeviceTaskWithoutPeakMemoryIsUnobservedNeverHostRss) {
  auto task = load("device_memory.toml");
  ASSERT_EQ(task.limits.device_memory_bytes, 16ull << 30);
  auto t = run(task);
  ASSERT_EQ(result_->outcome(), wire::Outcome::Ok) << result_->detail()->str();
  ASSERT_EQ(result_->steps()->size(), 3u);
  EXPECT_EQ(result_->memory_source(), wire::MemorySource::Unobserved);
  EXPECT_EQ(result_->peak_memory_bytes(), 0u);
  EXPECT_EQ(result_->device_sampled_peak_bytes(), 0u); // no GPU here: nothing sampled
  EXPECT_GT(result_->host_peak_bytes(), 0u);           // the shell's resident memory, kept apart
  EXPECT_EQ(t.memory, tuning::memory_source::unobserved);
  EXPECT_EQ(t.peak_memory_bytes, 0u);
  EXPECT_EQ(t.host_peak_bytes, result_->host_peak_bytes());
  EXPECT_TRUE(t.finished);
  // The memory model gets no measured observation from it: nothing to fit.
  auto m = model_of(task, {t}, static_cast<double>(task.limits.device_memory_bytes));
  EXPECT_FALSE(m.fitted);
  EXPECT_NE(m.why.find("measured"), std::string::npos) << m.why;
}

TEST_F(TrialMemoryTest, CpuTaskStillRecordsHostRssAsItsPeak) {
  auto task = load("device_memory.toml");
  task.limits.device_memory_bytes = 0; // a CPU job: its memory is the host's
  task.limits.memory_cap_bytes = 1ull << 30;
  auto t = run(task);
  ASSERT_EQ(result_->outcome(), wire::Outcome::Ok) << result_->detail()->str();
  EXPECT_EQ(result_->memory_source(), wire::MemorySource::HostRss);
  EXPECT_GT(result_->peak_memory_bytes(), 0u);
  EXPECT_EQ(result_->peak_memory_bytes(), result_->host_peak_bytes());
  EXPECT_EQ(t.memory, tuning::memory_source::host_rss);
  EXPECT_EQ(t.peak_memory_bytes, result_->host_peak_bytes());
  auto m = model_of(task, {t}, static_cast<double>(task.limits.memory_cap_bytes));
  EXPECT_TRUE(m.fitted) << m.why; // one measured observation
}

TEST_F(TrialMemoryTest, TheWorkloadsOwnPeakComesFirst) {
  // fake_train.py reports peak_memory_bytes = its held bytes + 10,000,000 on every step.
  auto task = load("fake.toml");
  task.limits.device_memory_bytes = 16ull << 30;
  run(task);
  ASSERT_EQ(result_->outcome(), wire::Outcome::Ok) << result_->detail()->str();
  EXPECT_EQ(result_->memory_source(), wire::MemorySource::Workload);
  EXPECT_EQ(result_->peak_memory_bytes(), 10'000'000u);
  EXPECT_GT(result_->host_peak_bytes(), 0u);
}

TEST_F(TrialMemoryTest, NvidiaSmiIsSampledPerRankOverTheTrialsProcesses) {
  auto bin = dir.sub("bin");
  std::filesystem::create_directories(bin);
  {
    std::ofstream smi{bin + "/nvidia-smi"};
    smi << "#!/bin/sh\n"
           "# Stands in for the NVIDIA driver's tool on a GPU-less machine: a captured answer\n"
           "# with pids 11509 and 14466 replaced by the trial's ranks 0 and 1 (12201 stays a\n"
           "# process of someone else).\n"
           "[ \"$1\" = \"--query-compute-apps=pid,used_memory\" ] || exit 2\n"
           "[ \"$2\" = \"--format=csv,noheader,nounits\" ] || exit 2\n"
           "d=$INFRARSI_FAKE_SMI_TRIAL_DIR\n"
           "r0=$(cat \"$d/rank-0.pid\" 2>/dev/null || echo 11509)\n"
           "r1=$(cat \"$d/rank-1.pid\" 2>/dev/null || echo 14466)\n"
           "sed -e \"s/^11509,/$r0,/\" -e \"s/^14466,/$r1,/\" \"$INFRARSI_FAKE_SMI_CAPTURE\"\n";
  }
  ::chmod((bin + "/nvidia-smi").c_str(), 0755);
  const char* path = std::getenv("PATH");
  env_guard on_path{"PATH", bin + ":" + (path != nullptr ? path : "/usr/bin:/bin")};
  env_guard trial_dir{"INFRARSI_FAKE_SMI_TRIAL_DIR", dir.sub("trial")};
  env_guard capture{"INFRARSI_FAKE_SMI_CAPTURE", data_dir + "/nvidia_smi/header_units.csv"};

  auto task = load("device_memory.toml");
  auto t = run(task, {{"world_size", std::int64_t{2}}, {"step_time", 0.8}});
  ASSERT_EQ(result_->outcome(), wire::Outcome::Ok) << result_->detail()->str();
  // Rank 1 holds 3713 MiB, rank 0 2539 MiB: the most loaded rank's, never the sum, never the
  // other process's 25 MiB.
  EXPECT_EQ(result_->memory_source(), wire::MemorySource::DeviceSampled);
  EXPECT_EQ(result_->device_sampled_peak_bytes(), 3713 * MiB);
  EXPECT_EQ(result_->peak_memory_bytes(), 3713 * MiB);
  EXPECT_EQ(t.memory, tuning::memory_source::device_sampled);
  EXPECT_EQ(t.peak_memory_bytes, 3713 * MiB);
  auto m = model_of(task, {t}, static_cast<double>(task.limits.device_memory_bytes));
  EXPECT_TRUE(m.fitted) << m.why; // one measured observation, of device memory
}

} // namespace
} // namespace infrarsi::adapters
