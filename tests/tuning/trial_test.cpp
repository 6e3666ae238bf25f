// Tests for tuning/trial.cpp: which peak memory a trial's result carries, and from where.

#include "tuning/trial.hpp"

#include <gtest/gtest.h>

namespace infrarsi::tuning {
namespace {

constexpr std::uint64_t MiB = 1048576;

TEST(ChoosePeakMemory, ADeviceTaskReadsDeviceRealSourcesOnly) {
  // The workload's own report first, then nvidia-smi's, never the host's resident memory.
  auto w = choose_peak_memory(true, 12000 * MiB, 14000 * MiB, 9 * MiB);
  EXPECT_EQ(w.source, memory_source::workload);
  EXPECT_EQ(w.peak_bytes, 12000 * MiB);
  auto d = choose_peak_memory(true, std::nullopt, 14000 * MiB, 9 * MiB);
  EXPECT_EQ(d.source, memory_source::device_sampled);
  EXPECT_EQ(d.peak_bytes, 14000 * MiB);
  auto u = choose_peak_memory(true, std::nullopt, 0, 9 * MiB);
  EXPECT_EQ(u.source, memory_source::unobserved);
  EXPECT_EQ(u.peak_bytes, 0u);
  EXPECT_EQ(choose_peak_memory(true, 0, 0, 9 * MiB).source, memory_source::unobserved);
}

TEST(ChoosePeakMemory, ACpuTaskKeepsTheLargerOfWorkloadAndHostRss) {
  auto w = choose_peak_memory(false, 700 * MiB, 0, 650 * MiB);
  EXPECT_EQ(w.source, memory_source::workload);
  EXPECT_EQ(w.peak_bytes, 700 * MiB);
  auto h = choose_peak_memory(false, 600 * MiB, 0, 650 * MiB);
  EXPECT_EQ(h.source, memory_source::host_rss);
  EXPECT_EQ(h.peak_bytes, 650 * MiB);
  auto r = choose_peak_memory(false, std::nullopt, 0, 9 * MiB);
  EXPECT_EQ(r.source, memory_source::host_rss);
  EXPECT_EQ(r.peak_bytes, 9 * MiB);
  EXPECT_EQ(choose_peak_memory(false, std::nullopt, 0, 0).source, memory_source::unobserved);
}

TEST(ChoosePeakMemory, DeviceMemoryIsDeclaredByLimitsOrHardware) {
  task_spec task;
  EXPECT_FALSE(declares_device_memory(task));
  task.limits.memory_cap_bytes = 3ull << 30; // a host cap is no device memory
  EXPECT_FALSE(declares_device_memory(task));
  task.limits.device_memory_bytes = 16ull << 30;
  EXPECT_TRUE(declares_device_memory(task));
  task.limits.device_memory_bytes = 0;
  task.hardware.gpu_memory_bytes = 80ull << 30;
  EXPECT_TRUE(declares_device_memory(task));
  EXPECT_STREQ(to_string(memory_source::device_sampled), "device_sampled");
  EXPECT_STREQ(to_string(memory_source::host_rss), "host_rss");
  EXPECT_STREQ(to_string(memory_source::unobserved), "unobserved");
}

} // namespace
} // namespace infrarsi::tuning
