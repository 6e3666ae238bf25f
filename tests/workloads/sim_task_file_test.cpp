// Tests for workloads/sim/task_file.cpp, the simulator's own reader of a task file (the
// simulator does not depend on the harness): on every shipped and test task it reads exactly
// what the harness's loader (adapters/task_file.hpp) reads of the parts --enumerate uses, so the
// enumeration is unchanged; a bad file gets an error naming the file, the position and the key,
// and `--enumerate` exits 1 with it.

#include "workloads/sim/task_file.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "adapters/task_file.hpp"
#include "test_util.hpp"
#include "workloads/sim/cli.hpp"

namespace infrarsi::sim {
namespace {

const std::string source_dir = INFRARSI_SOURCE_DIR;

/// Every task file shipped in config/tasks and tests/data/tasks.
std::vector<std::string> all_task_files() {
  std::vector<std::string> files;
  for (const auto* dir : {"/config/tasks", "/tests/data/tasks"})
    for (const auto& e : std::filesystem::directory_iterator{source_dir + dir})
      if (e.path().extension() == ".toml")
        files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(SimTaskFile, ReadsWhatTheHarnessReadsOfEveryShippedTask) {
  auto files = all_task_files();
  ASSERT_GE(files.size(), 10u); // 7 sim tasks, 3 torch_gpt tasks, 3 test tasks
  int sim_tasks = 0;
  for (const auto& file : files) {
    SCOPED_TRACE(file);
    auto harness = adapters::load_task_file(file);
    ASSERT_TRUE(harness) << describe(harness.error());
    std::string why;
    auto own = read_task_file(file, why);
    ASSERT_TRUE(own) << why;
    EXPECT_EQ(why, "");
    EXPECT_EQ(own->name, harness->name);
    EXPECT_EQ(own->source, harness->source);
    EXPECT_EQ(own->workload.workdir, harness->workload.workdir);
    EXPECT_EQ(own->workload.argv, harness->workload.argv);
    EXPECT_EQ(own->workload.world_size, harness->workload.world_size);
    EXPECT_EQ(own->constants, harness->constants);
    EXPECT_EQ(own->limits.memory_cap_bytes, harness->limits.memory_cap_bytes);
    ASSERT_EQ(own->knobs.size(), harness->knobs.size());
    for (std::size_t i = 0; i < own->knobs.size(); ++i) {
      const auto& a = own->knobs[i];
      const auto& b = harness->knobs[i];
      SCOPED_TRACE(b.name);
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.type, b.type);
      EXPECT_EQ(a.values, b.values);
      EXPECT_EQ(a.min, b.min);
      EXPECT_EQ(a.max, b.max);
      EXPECT_EQ(a.default_value, b.default_value);
      EXPECT_EQ(a.true_text, b.true_text);
      EXPECT_EQ(a.false_text, b.false_text);
    }
    EXPECT_EQ(own->default_assignment(), harness->default_assignment());
    ASSERT_EQ(own->patches.size(), harness->patches.size());
    for (std::size_t i = 0; i < own->patches.size(); ++i) {
      EXPECT_EQ(own->patches[i].name, harness->patches[i].name);
      EXPECT_EQ(own->patches[i].file, harness->patches[i].file);
    }
    if (own->name.rfind("sim-", 0) == 0) {
      ++sim_tasks;
      EXPECT_EQ(own->patches.size(), harness->name.find("moe") != std::string::npos ? 7u : 6u);
    }
  }
  EXPECT_EQ(sim_tasks, 8);
  // A byte size in the file is read as the harness reads it.
  std::string why;
  auto fake_tune = read_task_file(source_dir + "/tests/data/tasks/fake_tune.toml", why);
  ASSERT_TRUE(fake_tune) << why;
  EXPECT_GT(fake_tune->limits.memory_cap_bytes, 0u);
}

class SimTaskFileErrors : public ::testing::Test {
protected:
  test::temp_dir dir;

  /// Writes `text` as task.toml (with a kernels.conf and a patch next to it) and returns its
  /// path.
  std::string write(const std::string& text) {
    std::ofstream{dir.sub("p.patch")} << "--- a/kernels.conf\n+++ b/kernels.conf\n";
    auto path = dir.sub("task.toml");
    std::ofstream{path} << text;
    return path;
  }

  /// The reader's error for `text` (fails the test if the file reads).
  std::string error_of(const std::string& text) {
    std::string why;
    auto task = read_task_file(write(text), why);
    EXPECT_FALSE(task) << "read a bad task file";
    EXPECT_EQ(why.rfind(dir.sub("task.toml"), 0), 0u) << "the error names the file: " << why;
    return why;
  }
};

const std::string workload = "[workload]\nargv = [\"sim\", \"--tp\", \"{tp}\"]\n";

TEST_F(SimTaskFileErrors, AGoodMinimalFileReads) {
  std::string why;
  auto task = read_task_file(write("name = \"t\"\n" + workload +
                                   "[[knobs]]\nname = \"tp\"\ntype = \"int\"\n"
                                   "values = [1, 2]\ndefault = 2\n"
                                   "[limits]\nmemory_cap_bytes = \"2GiB\"\n"
                                   "[[patches]]\nname = \"p\"\nfile = \"p.patch\"\n"
                                   "[contract]\nsteps = 10\nunknown_to_the_simulator = 1\n"),
                             why);
  ASSERT_TRUE(task) << why;
  EXPECT_EQ(task->name, "t");
  EXPECT_EQ(task->workload.workdir, std::filesystem::weakly_canonical(dir.path()).string());
  EXPECT_EQ(task->workload.argv, (std::vector<std::string>{"sim", "--tp", "{tp}"}));
  EXPECT_EQ(task->workload.world_size, "1");
  ASSERT_EQ(task->knobs.size(), 1u);
  EXPECT_EQ(task->knobs[0].default_value, tuning::knob_value{std::int64_t{2}});
  EXPECT_EQ(task->limits.memory_cap_bytes, 2ull << 30);
  ASSERT_EQ(task->patches.size(), 1u);
  EXPECT_EQ(task->patches[0].file, std::filesystem::weakly_canonical(dir.sub("p.patch")).string());
  EXPECT_EQ(task->contract.steps, 0u); // not the simulator's business
}

TEST_F(SimTaskFileErrors, EveryMistakeNamesFilePositionAndKey) {
  auto file = dir.sub("task.toml");
  EXPECT_EQ(error_of("name = \"t\"\n"), file + ":1:1: workload: missing (a table is required)");
  EXPECT_EQ(error_of("[workload]\nargv = \"sim\"\n"),
            file + ":2:8: workload.argv: expected an array of strings, got string \"sim\"");
  EXPECT_EQ(error_of("[workload]\nargv = []\n"),
            file + ":2:8: workload.argv: expected at least the program to run, got []");
  EXPECT_EQ(error_of("[workload]\nargv = [\"sim\", 3]\n"),
            file + ":2:16: workload.argv[1]: expected a string, got integer 3");
  EXPECT_EQ(error_of("[workload]\nargv = [\"sim\"]\nworld_size = 0\n"),
            file + ":3:14: workload.world_size: expected a positive integer or a template such "
                   "as \"{world_size}\", got integer 0");
  EXPECT_EQ(error_of(workload + "[[knobs]]\nname = \"tp\"\ntype = \"int\"\nvalues = [1, 2]\n"
                                "default = 3\n"),
            file + ":7:11: knobs[0].default: expected one of 1, 2, got integer 3");
  EXPECT_EQ(error_of(workload + "[[knobs]]\nname = \"tp\"\ntype = \"integer\"\ndefault = 1\n"),
            file + ":5:8: knobs[0].type: expected one of \"int\", \"real\", \"bool\", \"choice\", "
                   "got string \"integer\"");
  EXPECT_EQ(error_of(workload + "[[knobs]]\nname = \"tp\"\ntype = \"int\"\nmin = 1\ndefault = 1\n"),
            file + ":3:1: knobs[0]: knob 'tp' needs either values = [...] or both min and max");
  EXPECT_EQ(error_of(workload + "[[knobs]]\nname = \"tp\"\ntype = \"choice\"\n"
                                "values = [\"a\", 2]\ndefault = \"a\"\n"),
            file + ":6:16: knobs[0].values[1]: expected a string, got integer 2");
  EXPECT_EQ(error_of(workload + "[[knobs]]\nname = \"tp\"\ntype = \"bool\"\n"),
            file + ":3:1: knobs[0].default: missing (the baseline value a user runs today)");
  EXPECT_EQ(error_of(workload + "[constants]\ntp = 1\n[[knobs]]\nname = \"tp\"\ntype = \"bool\"\n"
                                "default = true\n"),
            file + ":4:6: constants.tp: a knob has the same name");
  EXPECT_EQ(error_of(workload + "[limits]\nmemory_cap_bytes = \"lots\"\n"),
            file + ":4:20: limits.memory_cap_bytes: expected a byte count (non-negative integer, "
                   "or a string such as \"3GiB\" or \"512MB\"), got string \"lots\"");
  auto missing = error_of(workload + "[[patches]]\nname = \"q\"\nfile = \"no-such.patch\"\n");
  EXPECT_EQ(missing, file + ":5:8: patches[0].file: no such file: " +
                         std::filesystem::weakly_canonical(dir.sub("no-such.patch")).string());
  EXPECT_EQ(error_of(workload + "[[patches]]\nname = \"p\"\nfile = \"p.patch\"\n"
                                "[[patches]]\nname = \"p\"\nfile = \"p.patch\"\n"),
            file + ":6:1: patches[1].name: duplicate patch 'p'");
  auto syntax = error_of("[workload\nargv = 1\n");
  EXPECT_EQ(syntax.rfind(file + ":1:", 0), 0u) << syntax;
  EXPECT_NE(syntax.find(": TOML syntax error: "), std::string::npos) << syntax;
}

TEST_F(SimTaskFileErrors, MissingFileAndEnumerateOfABadFileExitOneWithTheError) {
  std::string why;
  EXPECT_FALSE(read_task_file(dir.sub("absent.toml"), why));
  EXPECT_EQ(why, "task file '" + dir.sub("absent.toml") + "': no such file");

  auto path = write(workload + "[[knobs]]\nname = \"tp\"\ntype = \"int\"\nvalues = [1, 2]\n"
                               "default = 3\n");
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(run_program({"--enumerate", "--task", path, "--summary-only"}, out, err), 1);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str(), "infrarsi-sim: " + path +
                           ":7:11: knobs[0].default: expected one of 1, 2, got integer 3\n");
}

TEST(SimTaskFile, ByteSizesReadAsTheHarnessReadsThem) {
  for (const auto* text : {"0", "4096", "512MiB", "3GiB", "2.5GB", "1 KiB", "7B", "1TiB", "0.5KB",
                           "", "-1", "1e9", "0x10", "3 GiBs", "inf", "0.0001B", "9.3e18"}) {
    SCOPED_TRACE(text);
    std::uint64_t harness = 0;
    bool harness_ok = adapters::parse_byte_size(text, harness);
    auto own = parse_byte_size(text);
    ASSERT_EQ(own.has_value(), harness_ok);
    if (own) {
      EXPECT_EQ(*own, harness);
    }
  }
  EXPECT_EQ(parse_byte_size("512MiB"), std::optional<std::uint64_t>{512ull << 20});
  EXPECT_EQ(parse_byte_size("2.5GB"), std::optional<std::uint64_t>{2'500'000'000ull});
  EXPECT_EQ(parse_byte_size("1e9"), std::nullopt);
}

} // namespace
} // namespace infrarsi::sim
