// Tests for adapters/device_memory.cpp: nvidia-smi's compute-apps CSV as drivers printed it
// (tests/data/nvidia_smi/, sources in its README.md), the sum per rank over a process tree, and
// the PATH lookup that turns sampling off where nvidia-smi is absent.

#include "adapters/device_memory.hpp"

#include <sys/stat.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "messages/errc.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

constexpr std::uint64_t MiB = 1048576;

std::string capture(const std::string& name) {
  std::ifstream in{std::string{INFRARSI_TEST_DATA_DIR} + "/nvidia_smi/" + name,
                   std::ios::binary};
  EXPECT_TRUE(in.good()) << name;
  return {std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
}

std::vector<compute_app> parsed(const std::string& text) {
  auto rows = parse_compute_apps(text);
  EXPECT_TRUE(rows) << (rows ? "" : describe(rows.error()));
  return rows ? *rows : std::vector<compute_app>{};
}

TEST(ComputeApps, TheNodeRunnersOwnQueryNoHeaderNoUnits) {
  auto rows = parsed(capture("noheader_nounits.csv"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].pid, 80613);
  EXPECT_EQ(rows[0].used_bytes, std::optional<std::uint64_t>{92908 * MiB});
  EXPECT_EQ(rows[1].pid, 80614);
  EXPECT_EQ(rows[1].used_bytes, std::optional<std::uint64_t>{92908 * MiB});
}

TEST(ComputeApps, HeaderWithUnits) {
  auto rows = parsed(capture("header_units.csv"));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].pid, 12201);
  EXPECT_EQ(rows[0].used_bytes, std::optional<std::uint64_t>{25 * MiB});
  EXPECT_EQ(rows[2].pid, 14466);
  EXPECT_EQ(rows[2].used_bytes, std::optional<std::uint64_t>{3713 * MiB});
}

TEST(ComputeApps, TheHeaderPicksTheColumns) {
  auto named = parsed(capture("three_columns.csv"));
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].pid, 40170);
  EXPECT_EQ(named[0].used_bytes, std::optional<std::uint64_t>{185 * MiB});

  auto by_gpu = parsed(capture("two_gpus_one_pid.csv")); // gpu_uuid first, one row per GPU
  ASSERT_EQ(by_gpu.size(), 3u);
  EXPECT_EQ(by_gpu[0].pid, 1912379);
  EXPECT_EQ(by_gpu[0].used_bytes, std::optional<std::uint64_t>{518 * MiB});
  EXPECT_EQ(by_gpu[1].pid, 3891903);
  EXPECT_EQ(by_gpu[1].used_bytes, std::optional<std::uint64_t>{74698 * MiB});
  EXPECT_EQ(by_gpu[2].pid, 1912379);
}

TEST(ComputeApps, WhatTheDriverCannotSayIsUnknownNeverZero) {
  auto wddm = parsed(capture("wddm_not_available.csv"));
  ASSERT_EQ(wddm.size(), 2u);
  EXPECT_EQ(wddm[0].pid, 1584);
  EXPECT_FALSE(wddm[0].used_bytes.has_value());
  EXPECT_EQ(wddm[1].pid, 7500);
  EXPECT_FALSE(wddm[1].used_bytes.has_value());

  auto unsupported = parsed("pid, used_gpu_memory [MiB]\n4242, [Not Supported]\n17, 100 MiB\n");
  ASSERT_EQ(unsupported.size(), 2u);
  EXPECT_FALSE(unsupported[0].used_bytes.has_value());
  EXPECT_EQ(unsupported[1].used_bytes, std::optional<std::uint64_t>{100 * MiB});
  auto no_units = parsed("4242, [N/A]\n");
  ASSERT_EQ(no_units.size(), 1u);
  EXPECT_FALSE(no_units[0].used_bytes.has_value());
}

TEST(ComputeApps, NoProcessesIsNoRows) {
  EXPECT_TRUE(parsed(capture("no_processes.csv")).empty());
  EXPECT_TRUE(parsed("").empty());
  EXPECT_TRUE(parsed("\n\n").empty());
  EXPECT_TRUE(parsed("No running processes found\n").empty());
  EXPECT_TRUE(parsed("\r\n").empty());
}

TEST(ComputeApps, MalformedRowsNameTheLine) {
  auto bad_pid = parse_compute_apps("80613, 92908\nabc1, 5\n");
  ASSERT_FALSE(bad_pid);
  EXPECT_EQ(code_of(bad_pid.error()), errc::invalid_argument);
  EXPECT_NE(describe(bad_pid.error()).find("line 2 'abc1, 5'"), std::string::npos)
    << describe(bad_pid.error());
  // A unit other than MiB is refused, never read 1024 times too small or 4.9 % off.
  auto gib = parse_compute_apps("3, 2 GiB\n");
  ASSERT_FALSE(gib);
  EXPECT_NE(describe(gib.error()).find("is not in MiB"), std::string::npos);
  EXPECT_FALSE(parse_compute_apps("3, 512 MB\n"));
  auto header = parse_compute_apps("pid, process_name\n1, x\n");
  ASSERT_FALSE(header);
  EXPECT_NE(describe(header.error()).find("without a pid and a used_memory column"),
            std::string::npos);
  EXPECT_FALSE(parse_compute_apps("42\n")); // one column
  EXPECT_FALSE(parse_compute_apps("index, name\n0, x\n")); // a row whose pid is text
}

/// A process table: pid, parent, process group.
std::vector<process_entry> table_of(std::vector<std::array<pid_t, 3>> rows) {
  std::vector<process_entry> t;
  for (const auto& [pid, ppid, pgrp] : rows) {
    process_entry e;
    e.pid = pid;
    e.ppid = ppid;
    e.pgrp = pgrp;
    e.session = pgrp;
    e.state = 'S';
    t.push_back(e);
  }
  return t;
}

TEST(DeviceBytesPerRank, SumsEachRanksTreeAndTakesTheMostLoaded) {
  // The harness (100) started ranks 200 and 300; rank 200 has a worker 201, and 250 is a child
  // of 201 that left for its own group; 400 is someone else's process on the same GPUs.
  auto table = table_of({{100, 1, 100}, {200, 100, 200}, {201, 200, 200}, {250, 201, 250},
                         {300, 100, 300}, {400, 1, 400}});
  std::vector<compute_app> apps = {{200, 1000 * MiB}, {201, 24 * MiB}, {250, 8 * MiB},
                                   {300, 900 * MiB}, {400, 70000 * MiB}, {300, std::nullopt}};
  EXPECT_EQ(most_loaded_rank_device_bytes(apps, table, {200, 300}, false), 1032 * MiB);
  // A rank on two GPUs: both rows are its memory.
  apps.push_back({300, 500 * MiB});
  EXPECT_EQ(most_loaded_rank_device_bytes(apps, table, {200, 300}, false), 1400 * MiB);
  // Nothing of the trial on the GPUs.
  EXPECT_EQ(most_loaded_rank_device_bytes({{400, 70000 * MiB}}, table, {200, 300}, false), 0u);
  EXPECT_EQ(most_loaded_rank_device_bytes({}, table, {200, 300}, false), 0u);
}

TEST(DeviceBytesPerRank, AProcessAdoptedByTheHarnessCountsByItsGroup) {
  // 260 was started by rank 200, whose child it stays by group after its parent exited.
  auto table = table_of({{100, 1, 100}, {200, 100, 200}, {260, 100, 200}});
  EXPECT_EQ(most_loaded_rank_device_bytes({{200, 10 * MiB}, {260, 5 * MiB}}, table, {200}, false),
            15 * MiB);
}

TEST(DeviceBytesPerRank, ALauncherProcessWhoseChildrenAreTheRanks) {
  // torchrun (500) started ranks 501 and 502; 503 is a worker of 502.
  auto table = table_of({{100, 1, 100}, {500, 100, 500}, {501, 500, 500}, {502, 500, 500},
                         {503, 502, 500}});
  std::vector<compute_app> apps = {{501, 3000 * MiB}, {502, 2000 * MiB}, {503, 1500 * MiB}};
  EXPECT_EQ(most_loaded_rank_device_bytes(apps, table, {500}, true), 3500 * MiB);
  // Counted as one rank, the launcher's tree would sum every rank's memory.
  EXPECT_EQ(most_loaded_rank_device_bytes(apps, table, {500}, false), 6500 * MiB);
}

TEST(FindOnPath, FirstExecutableOrNothing) {
  test::temp_dir dir;
  auto a = dir.sub("a");
  auto b = dir.sub("b");
  std::filesystem::create_directories(a);
  std::filesystem::create_directories(b);
  std::ofstream{a + "/nvidia-smi"} << "not executable\n";
  std::ofstream{b + "/nvidia-smi"} << "#!/bin/sh\n";
  ::chmod((b + "/nvidia-smi").c_str(), 0755);
  EXPECT_EQ(find_on_path("nvidia-smi", a + ":" + b), std::optional<std::string>{b + "/nvidia-smi"});
  EXPECT_EQ(find_on_path("nvidia-smi", a), std::nullopt);
  EXPECT_EQ(find_on_path("nvidia-smi", ""), std::nullopt);
  EXPECT_EQ(find_on_path("sh", "/nonexistent:/bin"), std::optional<std::string>{"/bin/sh"});
  EXPECT_EQ(compute_apps_query("/x/nvidia-smi"),
            (std::vector<std::string>{"/x/nvidia-smi", "--query-compute-apps=pid,used_memory",
                                      "--format=csv,noheader,nounits"}));
}

} // namespace
} // namespace infrarsi::adapters
