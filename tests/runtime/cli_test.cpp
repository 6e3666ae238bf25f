// Tests for runtime/cli.cpp: `infrarsi runs` and `infrarsi log dump` on logs written by the test,
// driven in-process and through the real binary.

#include "runtime/cli.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"

namespace infrarsi::runtime {
namespace {

using store::new_event;

struct cli_result {
  int status = -1;
  std::string out;
  std::string err;
};

cli_result run(std::vector<std::string> args) {
  args.insert(args.begin(), "infrarsi");
  std::vector<const char*> argv;
  for (const auto& a : args)
    argv.push_back(a.c_str());
  std::ostringstream out;
  std::ostringstream err;
  cli_result r;
  r.status = run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> result;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    result.push_back(line);
  return result;
}

class CliTest : public ::testing::Test {
protected:
  test::temp_dir dir;
  std::string store = dir.sub("events");

  void SetUp() override {
    auto log = store::rocksdb_event_log::open(store);
    ASSERT_TRUE(log) << describe(log.error());
    wire::RunCreatedT rc;
    rc.task = "config/tasks/smoke.toml";
    rc.seed = 42;
    rc.tool_version = "0.1.0";
    wire::StageEventT st;
    st.stage = wire::Stage::Doctor;
    st.detail = "baseline x3";
    std::vector<new_event> batch{
      new_event::of(wire::EventKind::RunCreated, messages::run_created_msg::pack(rc)),
      new_event::of(wire::EventKind::StageStarted, messages::stage_event_msg::pack(st)),
      new_event::of(wire::EventKind::TrialProposed, test::sample_spec(0)),
      new_event::of(wire::EventKind::TrialDispatched, test::sample_spec(0)),
      new_event::of(wire::EventKind::TrialCompleted, test::sample_result(0, 3)),
      new_event{4242, messages::byte_buffer::copy_of("future")},
      new_event::of(wire::EventKind::TrialLost, test::sample_spec(1)),
    };
    ASSERT_TRUE((*log)->append("run-1", 0, batch));
    ASSERT_TRUE((*log)->append("run-2", 0, {batch[0]}));
  }
};

TEST_F(CliTest, RunsListsEveryRunWithItsEventCount) {
  auto r = run({"runs", "--store", store});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 3u) << r.out;
  EXPECT_EQ(out[0].rfind("RUN", 0), 0u);
  EXPECT_NE(out[1].find("run-1"), std::string::npos);
  EXPECT_NE(out[1].find(" 7 "), std::string::npos) << out[1];
  EXPECT_NE(out[2].find("run-2"), std::string::npos);

  auto j = run({"runs", "--store", store, "--json"});
  ASSERT_EQ(j.status, exit_ok);
  auto jl = lines(j.out);
  ASSERT_EQ(jl.size(), 2u);
  auto first = nlohmann::json::parse(jl[0]);
  EXPECT_EQ(first["run"], "run-1");
  EXPECT_EQ(first["events"], 7);
  EXPECT_EQ(nlohmann::json::parse(jl[1])["first_global_position"], 7);
}

TEST_F(CliTest, DumpPrintsEveryEventReadable) {
  auto r = run({"log", "dump", "run-1", "--store", store});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 7u) << r.out;
  EXPECT_EQ(out[0].rfind("#0 ", 0), 0u);
  EXPECT_NE(out[0].find("run_created"), std::string::npos);
  EXPECT_NE(out[0].find("\"seed\":42"), std::string::npos) << out[0];
  EXPECT_NE(out[1].find("\"stage\":\"doctor\""), std::string::npos) << out[1];
  EXPECT_NE(out[2].find("\"micro_batch\":4"), std::string::npos) << out[2];
  EXPECT_NE(out[4].find("\"outcome\":\"ok\""), std::string::npos) << out[4];
  EXPECT_NE(out[5].find("unknown(4242)"), std::string::npos) << out[5];
  EXPECT_NE(out[6].find("trial_lost"), std::string::npos);
  EXPECT_NE(r.err.find("7 event(s) of run 'run-1'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 of kinds unknown to this build"), std::string::npos) << r.err;
}

TEST_F(CliTest, DumpJsonGivesOneObjectPerEvent) {
  auto r = run({"log", "dump", "run-1", "--store", store, "--json"});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 7u);
  std::vector<std::string> kinds;
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto j = nlohmann::json::parse(out[i]);
    EXPECT_EQ(j["run"], "run-1");
    EXPECT_EQ(j["sequence"], i);
    EXPECT_EQ(j["global_position"], i);
    EXPECT_EQ(j["recorded_at"].get<std::string>().size(), 24u); // 2026-11-30T01:02:03.456Z
    kinds.push_back(j["kind"]);
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"run_created", "stage_started", "trial_proposed",
                                             "trial_dispatched", "trial_completed", "unknown",
                                             "trial_lost"}));
  auto completed = nlohmann::json::parse(out[4]);
  EXPECT_EQ(completed["payload"]["steps"].size(), 3u);
  EXPECT_EQ(completed["payload"]["steps"][2]["tokens"], 16384);
  EXPECT_EQ(nlohmann::json::parse(out[5])["kind_id"], 4242);
}

TEST_F(CliTest, DumpFromAndLimitSelectARange) {
  auto r = run({"log", "dump", "run-1", "--store", store, "--from", "2", "--limit", "3"});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].rfind("#2 ", 0), 0u);
  EXPECT_EQ(out[2].rfind("#4 ", 0), 0u);
}

TEST_F(CliTest, ErrorsNameWhatIsWrong) {
  auto missing_run = run({"log", "dump", "run-9", "--store", store});
  EXPECT_EQ(missing_run.status, exit_failure);
  EXPECT_NE(missing_run.err.find("run 'run-9' not found"), std::string::npos) << missing_run.err;
  EXPECT_NE(missing_run.err.find("(runs: run-1 run-2)"), std::string::npos) << missing_run.err;

  auto missing_store = run({"runs", "--store", dir.sub("absent")});
  EXPECT_EQ(missing_store.status, exit_failure);
  EXPECT_NE(missing_store.err.find(dir.sub("absent")), std::string::npos) << missing_store.err;
  EXPECT_FALSE(std::filesystem::exists(dir.sub("absent"))); // reading never creates a store

  auto bad_option = run({"log", "dump", "run-1", "--stor", store});
  EXPECT_EQ(bad_option.status, exit_usage);
  auto bad_number = run({"log", "dump", "run-1", "--store", store, "--limit", "many"});
  EXPECT_EQ(bad_number.status, exit_usage);
  EXPECT_NE(bad_number.err.find("many"), std::string::npos) << bad_number.err;
  auto no_command = run({});
  EXPECT_EQ(no_command.status, exit_usage);
}

TEST_F(CliTest, HelpOnEverySubcommand) {
  for (auto args : std::vector<std::vector<std::string>>{
         {"--help"}, {"runs", "--help"}, {"log", "--help"}, {"log", "dump", "--help"}}) {
    auto r = run(args);
    EXPECT_EQ(r.status, exit_ok);
    EXPECT_NE(r.out.find("Usage: infrarsi"), std::string::npos) << r.out;
  }
  EXPECT_NE(run({"log", "dump", "--help"}).out.find("--store"), std::string::npos);
}

// The real binary, as a user runs it, prints every event the test wrote.
TEST_F(CliTest, BinaryDumpsEveryEvent) {
  std::string cmd = std::string{INFRARSI_CLI_PATH} + " log dump run-1 --json --store '" + store
                    + "' 2>/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;)
    out.append(buf.data(), n);
  int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  auto out_lines = lines(out);
  ASSERT_EQ(out_lines.size(), 7u) << out;
  for (std::size_t i = 0; i < out_lines.size(); ++i)
    EXPECT_EQ(nlohmann::json::parse(out_lines[i])["sequence"], i);
}


namespace infrarsi::runtime {
namespace {

TEST(TrialRunCli, PrintsTheResultAsJsonAndKeepsLogs) {
  test::temp_dir dir;
  auto r = run({"trial", "run", std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake.toml", "--set",
                "world_size=2", "--set", "steps=3", "--trial-dir", dir.sub("t"), "--trial-id",
                "12"});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["result"]["outcome"], "ok");
  EXPECT_EQ(doc["result"]["trial_id"], 12);
  EXPECT_EQ(doc["result"]["steps"].size(), 3u);
  EXPECT_EQ(doc["world_size"], 2);
  EXPECT_EQ(doc["knobs"]["world_size"], "2");
  EXPECT_EQ(doc["argv"][3], "3"); // python3 fake_train.py --steps {steps}
  EXPECT_EQ(doc["logs"].size(), 4u);
  EXPECT_TRUE(std::filesystem::exists(dir.sub("t") + "/result.json"));
  EXPECT_NE(r.err.find("step 2: loss 4.8"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("outcome ok"), std::string::npos) << r.err;
}

TEST(TrialRunCli, AFailedTrialStillExitsZeroAToolFailureDoesNot) {
  test::temp_dir dir;
  auto task = std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake.toml";
  auto oom = run({"trial", "run", task, "--set", "alloc_mb=300", "--set", "steps=200",
                  "--memory-cap", "100MiB", "--trial-dir", dir.sub("oom"), "--quiet"});
  ASSERT_EQ(oom.status, exit_ok) << oom.err;
  EXPECT_EQ(nlohmann::json::parse(oom.out)["result"]["outcome"], "oom");

  auto bad_knob = run({"trial", "run", task, "--set", "world_size=9"});
  EXPECT_EQ(bad_knob.status, exit_failure);
  EXPECT_NE(bad_knob.err.find("knob 'world_size': expected one of 1, 2, 3, got 9"),
            std::string::npos)
    << bad_knob.err;
  auto bad_type = run({"trial", "run", task, "--set", "steps=many"});
  EXPECT_EQ(bad_type.status, exit_failure);
  EXPECT_NE(bad_type.err.find("--set steps=many: expected an integer"), std::string::npos)
    << bad_type.err;
  auto bad_set = run({"trial", "run", task, "--set", "steps"});
  EXPECT_EQ(bad_set.status, exit_usage);
  auto no_task = run({"trial", "run", dir.sub("missing.toml")});
  EXPECT_EQ(no_task.status, exit_failure);
  EXPECT_NE(no_task.err.find("missing.toml': no such file"), std::string::npos) << no_task.err;
  auto no_patch = run({"trial", "run", task, "--patch", "fused_qkv", "--trial-dir",
                       dir.sub("p")});
  EXPECT_EQ(no_patch.status, exit_failure);
  EXPECT_NE(no_patch.err.find("has no patch 'fused_qkv' (patches: none)"), std::string::npos)
    << no_patch.err;
}

// Issue 20: `trial run` without --trial-dir builds its directory from the task's name; a name
// that is not one path component is refused before anything is written.
TEST(TrialRunCli, ATaskNameThatLeavesItsDirectoryIsRefused) {
  test::temp_dir dir;
  std::ifstream in{std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake.toml"};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  auto at = text.find("name = \"fake\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 13, "name = \"../../../x\"");
  text.replace(text.find("workdir = \"../workloads\""), 24,
               "workdir = \"" + std::string{INFRARSI_TEST_DATA_DIR} + "/workloads\"");
  std::ofstream{dir.sub("task.toml")} << text;
  auto before = std::filesystem::exists(".infrarsi/trials/../../../x");
  auto r = run({"trial", "run", dir.sub("task.toml"), "--quiet"});
  EXPECT_EQ(r.status, exit_failure);
  EXPECT_NE(r.err.find(dir.sub("task.toml") + ":2:8: name: expected a name of at most 128 "
                       "letters, digits, '_', '.' or '-'"),
            std::string::npos)
    << r.err;
  EXPECT_NE(r.err.find("got \"../../../x\""), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(std::filesystem::exists(".infrarsi/trials/../../../x"), before);
}

} // namespace
} // namespace infrarsi::runtime

// Issue 19: `infrarsi check TASK` says which contract checks a task's output can decide.
namespace infrarsi::runtime {
namespace {

/// A regex-metrics task: its script prints step, loss and time, no tokens.
const char* regex_task = R"(name = "regex_check"
constraints = ["global_batch % micro_batch == 0"]
[constants]
global_batch = 16
[workload]
workdir = "."
argv = ["python3", "train.py", "--mb", "{micro_batch}", "--gb", "{global_batch}"]
[metrics]
format = "regex"
regex = 'iter (\d+): loss ([0-9.]+), time ([0-9.]+)ms'
regex_fields = ["step", "loss", "step_time_ms"]
tokens_per_step = 4096
[contract]
steps = 4
tokens_per_step = 4096
params = 1000
timed_steps = [1, 3]
[[knobs]]
name = "micro_batch"
type = "int"
values = [1, 2, 4]
default = 1
)";

/// The lines of `text` from the line starting with `title` to the next blank line.
std::string section(const std::string& text, const std::string& title) {
  auto at = text.find("\n" + title);
  if (at == std::string::npos)
    return {};
  auto end = text.find("\n\n", at + 1);
  return text.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
}

TEST(CheckCli, ARegexTaskShowsTheTokensCheckIsVacuousAndWhatEnforcesTheWork) {
  test::temp_dir dir;
  auto path = dir.sub("regex.toml");
  std::ofstream{path} << regex_task;
  auto r = run({"check", path});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  EXPECT_EQ(r.out.rfind("task 'regex_check' (" + path + ") loads: 1 knob(s), 0 patch(es), "
                        "metrics format regex\n",
                        0),
            0u)
    << r.out;
  auto cannot = section(r.out, "cannot be decided by the output");
  EXPECT_NE(cannot.find("  tokens [vacuous]: metrics.regex has no tokens field: every step is "
                        "credited metrics.tokens_per_step = 4096, the task's own constant, so the "
                        "check compares contract.tokens_per_step with itself and cannot fail\n"),
            std::string::npos)
    << r.out;
  EXPECT_NE(cannot.find("  params [vacuous]: metrics.format = \"regex\" has no final line"),
            std::string::npos)
    << r.out;
  EXPECT_NE(cannot.find("  timed_window [partial]: "), std::string::npos) << r.out;
  auto observed = section(r.out, "observed");
  EXPECT_NE(observed.find("  steps: the steps of the metrics lines against contract.steps = 4"),
            std::string::npos)
    << r.out;
  EXPECT_NE(observed.find("  loss_drift: "), std::string::npos) << r.out;
  EXPECT_EQ(observed.find("tokens"), std::string::npos) << r.out;
  auto enforced = section(r.out, "the contracted work is enforced by");
  EXPECT_NE(enforced.find("  constraint 'global_batch % micro_batch == 0' (checked before every "
                          "launch"),
            std::string::npos)
    << r.out;
  EXPECT_NE(enforced.find("  constant global_batch = 16 (fixed"), std::string::npos) << r.out;

  // The same task with a tokens field: the tokens check is observed.
  std::string with_tokens = regex_task;
  auto rx = with_tokens.find("regex = '");
  with_tokens.replace(rx, with_tokens.find('\n', rx) - rx,
                      "regex = 'iter (\\d+): loss ([0-9.]+), time ([0-9.]+)ms, tokens (\\d+)'");
  auto fields = with_tokens.find("regex_fields");
  with_tokens.replace(fields, with_tokens.find('\n', fields) - fields,
                      "regex_fields = [\"step\", \"loss\", \"step_time_ms\", \"tokens\"]");
  std::ofstream{path} << with_tokens;
  r = run({"check", path});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  EXPECT_NE(section(r.out, "observed")
              .find("  tokens: the regex's tokens field against contract.tokens_per_step = 4096"),
            std::string::npos)
    << r.out;
  EXPECT_EQ(r.out.find("tokens [vacuous]"), std::string::npos) << r.out;
}

TEST(CheckCli, AJsonLinesTaskObservesTokensAndTheFinalLine) {
  auto r = run({"check", std::string{INFRARSI_TEST_DATA_DIR} + "/../../config/tasks/"
                                                               "torch_gpt_smoke.toml"});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  auto observed = section(r.out, "observed");
  EXPECT_NE(observed.find("  tokens: each metrics line's \"tokens\" against "
                          "contract.tokens_per_step = 128"),
            std::string::npos)
    << r.out;
  EXPECT_EQ(r.out.find("[vacuous]"), std::string::npos) << r.out;
}

// The worked example of docs/plain-script.md loads, and check says what its page says.
TEST(CheckCli, ThePlainScriptExampleComparesWindowsAndItsWorkIsEnforcedByItsConstraint) {
  auto r = run({"check", std::string{INFRARSI_TEST_DATA_DIR} + "/../../examples/plain-script/"
                                                               "task.toml"});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  auto observed = section(r.out, "observed");
  EXPECT_NE(observed.find("  loss_drift: the mean loss over each window of contract.loss_window "
                          "= 10 steps against the baselines' (contract.loss_mode = \"window\")"),
            std::string::npos)
    << r.out;
  auto cannot = section(r.out, "cannot be decided by the output");
  EXPECT_NE(cannot.find("  tokens [vacuous]: metrics.regex has no tokens field: every step is "
                        "credited metrics.tokens_per_step = 2048"),
            std::string::npos)
    << r.out;
  EXPECT_NE(r.out.find("  constraint 'batch_size * grad_accum == global_batch' (checked before "
                       "every launch"),
            std::string::npos)
    << r.out;
}

// Through the real binary, as a user runs it: a broken task exits 1 naming file:line:column.
TEST(CheckCli, ABrokenTaskExitsOneNamingFileLineAndKey) {
  test::temp_dir dir;
  auto path = dir.sub("broken.toml");
  std::string text = regex_task;
  text += "[limits]\ntimeout_s = \"soon\"\n";
  std::ofstream{path} << text;
  std::string cmd = std::string{INFRARSI_CLI_PATH} + " check '" + path + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;)
    out.append(buf.data(), n);
  int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_EQ(out, "infrarsi check: invalid_argument: " + path
                   + ":24:13: limits.timeout_s: expected a number, got string \"soon\"\n");
  auto help = run({"check", "--help"});
  EXPECT_EQ(help.status, exit_ok);
  EXPECT_NE(help.out.find("Usage: infrarsi check"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("vacuous"), std::string::npos) << help.out;
  EXPECT_EQ(run({"check"}).status, exit_usage);
}

} // namespace
} // namespace infrarsi::runtime

// -- pre-flight (issue 17) ----------------------------------------------------------------------

struct binary_result {
  int status = -1;
  std::string output; // stdout and stderr
};

/// Runs the real binary with `args` (each quoted), stdout and stderr together.
binary_result run_binary(const std::vector<std::string>& args) {
  std::string cmd = INFRARSI_CLI_PATH;
  for (const auto& a : args)
    cmd += " '" + a + "'";
  cmd += " 2>&1";
  binary_result r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr)
    return r;
  std::array<char, 4096> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;)
    r.output.append(buf.data(), n);
  int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const char* const preflight_task = R"(name = "preflight"
constraints = ["global_batch % micro_batch == 0"]

[constants]
global_batch = 16

[workload]
workdir = "work"
argv = ["./train.sh", "--mb", "{micro_batch}", "--gb", "{global_batch}"]

[workload.env]
FUSED = "{fused}"

[metrics]
format = "regex"
regex = 'iter (\d+): loss ([0-9.]+), time ([0-9.]+)ms'
regex_fields = ["step", "loss", "step_time_ms"]
tokens_per_step = 4096

[contract]
steps = 4
tokens_per_step = 4096

[scope]
editable = ["model.txt"]

[[knobs]]
name = "micro_batch"
type = "int"
values = [1, 2, 4]
default = 1

[[knobs]]
name = "fused"
type = "bool"
default = false

[[patches]]
name = "speed"
file = "speed.patch"
)";

/// A task directory: the task above, work/train.sh (executable), work/notexec.sh (mode 0644),
/// work/model.txt, a patch that applies (speed.patch) and one that does not (stale.patch).
struct preflight_dir {
  test::temp_dir dir;
  preflight_dir() {
    namespace fs = std::filesystem;
    fs::create_directories(dir.sub("work"));
    std::ofstream{dir.sub("work/train.sh")}
      << "#!/bin/sh\nfor i in 0 1 2 3; do echo \"iter $i: loss 2.$i, time 10ms\"; done\n";
    fs::permissions(dir.sub("work/train.sh"), fs::perms::owner_all | fs::perms::group_read);
    std::ofstream{dir.sub("work/notexec.sh")} << "#!/bin/sh\necho hi\n";
    fs::permissions(dir.sub("work/notexec.sh"), fs::perms::owner_read | fs::perms::owner_write
                                                  | fs::perms::group_read);
    std::ofstream{dir.sub("work/model.txt")} << "layers 2\nkernel slow\n";
    std::ofstream{dir.sub("speed.patch")} << "--- a/model.txt\n+++ b/model.txt\n@@ -1,2 +1,2 @@\n"
                                             " layers 2\n-kernel slow\n+kernel fast\n";
    std::ofstream{dir.sub("stale.patch")} << "--- a/model.txt\n+++ b/model.txt\n@@ -1,2 +1,2 @@\n"
                                             " layers 4\n-kernel eager\n+kernel fast\n";
  }
  /// Writes the task with `from` replaced by `to` to NAME.toml; returns its path and sets
  /// `line` to the line (1-based) where `to` stands.
  std::string variant(const std::string& name, const std::string& from, const std::string& to,
                      int& line) {
    std::string text = preflight_task;
    auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
    auto path = dir.sub(name + ".toml");
    std::ofstream{path} << text;
    return path;
  }
};

/// `output` names the problem as "FILE:LINE:COLUMN: KEY: message" (`where` = "FILE:LINE:") and the
/// message contains `message`.
void expect_problem_at(const std::string& output, const std::string& where, const std::string& key,
                       const std::string& message) {
  auto at = output.find(where);
  ASSERT_NE(at, std::string::npos) << "expected " << where << " in:\n" << output;
  auto rest = output.substr(at);
  auto colon = rest.find(": ", where.size());
  ASSERT_NE(colon, std::string::npos) << rest;
  EXPECT_EQ(rest.substr(colon + 2, key.size() + 2), key + ": ") << rest;
  EXPECT_NE(rest.find(message), std::string::npos) << "expected '" << message << "' in:\n"
                                                   << output;
}

TEST(Preflight, AGoodTaskPassesAndEveryBrokenOneIsNamedWithFileLineAndKeyAndCreatesNoRun) {
  preflight_dir d;
  int line = 0;
  auto good = d.variant("good", "name = \"preflight\"", "name = \"preflight\"", line);
  auto ok = run_binary({"check", good});
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("pre-flight: no problem found"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("1 patch(es) apply alone"), std::string::npos) << ok.output;

  struct broken {
    std::string name, from, to, key, message;
  };
  const std::vector<broken> cases = {
    {"placeholder_typo", "\"{micro_batch}\"", "\"{micro_bach}\"", "workload.argv[2]",
     "placeholder {micro_bach} in \"{micro_bach}\" names no knob, constant or built-in; did you "
     "mean {micro_batch}?"},
    {"env_placeholder_typo", "FUSED = \"{fused}\"", "FUSED = \"{fusd}\"", "workload.env.FUSED",
     "placeholder {fusd} in \"{fusd}\" names no knob, constant or built-in; did you mean "
     "{fused}?"},
    {"unclosed_brace", "\"{global_batch}\"", "\"{global_batch\"", "workload.argv[4]",
     "unclosed '{' at offset 0 in \"{global_batch\""},
    {"argv0_missing", "\"./train.sh\"", "\"./trian.sh\"", "workload.argv[0]",
     "program \"./trian.sh\" does not exist: no file \"" + d.dir.sub("work/trian.sh") + "\""},
    {"argv0_not_executable", "\"./train.sh\"", "\"./notexec.sh\"", "workload.argv[0]",
     "program \"./notexec.sh\" is not executable: \"" + d.dir.sub("work/notexec.sh")
       + "\" has mode 0640"},
    {"program_not_on_path", "\"./train.sh\"", "\"infrarsi-no-such-program\"", "workload.argv[0]",
     "program \"infrarsi-no-such-program\" is not found on PATH"},
    {"patch_does_not_apply", "file = \"speed.patch\"", "file = \"stale.patch\"",
     "patches[0].file", "patch 'speed' (\"" + d.dir.sub("stale.patch")
                          + "\") does not apply to the unpatched workload"},
    {"patch_missing", "file = \"speed.patch\"", "file = \"gone.patch\"", "patches[0].file",
     "no such file: " + d.dir.sub("gone.patch")},
    {"regex_without_step",
     "regex_fields = [\"step\", \"loss\", \"step_time_ms\"]",
     "regex_fields = [\"loss\", \"loss\", \"step_time_ms\"]", "metrics.regex_fields",
     "must include \"step\""},
    {"regex_does_not_compile", "regex = 'iter (\\d+): loss", "regex = 'iter (\\d+: loss",
     "metrics.regex", "expected an ECMAScript regular expression"},
    {"constraint_defaults_violate", "constraints = [\"global_batch % micro_batch == 0\"]",
     "constraints = [\"micro_batch > 1\"]", "constraints[0]",
     "the knobs' defaults violate it: constraint 'micro_batch > 1' is false for micro_batch=1"},
    {"constraint_unknown_knob", "constraints = [\"global_batch % micro_batch == 0\"]",
     "constraints = [\"global_batch % micro_bach == 0\"]", "constraints[0]",
     "'micro_bach' is neither a knob nor a constant"},
    {"workdir_missing", "workdir = \"work\"", "workdir = \"wrok\"", "workload.workdir",
     "no such directory: \"" + d.dir.sub("wrok") + "\""},
  };
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto path = d.variant(c.name, c.from, c.to, line);
    auto r = run_binary({"check", path});
    EXPECT_EQ(r.status, 1) << r.output;
    auto where = path + ":" + std::to_string(line) + ":";
    expect_problem_at(r.output, where, c.key, c.message);
    // tune refuses it before the store exists: no run, no store directory.
    auto store = d.dir.sub("store-" + c.name);
    auto t = run_binary({"tune", path, "--store", store});
    EXPECT_EQ(t.status, 1) << t.output;
    EXPECT_NE(t.output.find(where), std::string::npos) << t.output;
    EXPECT_FALSE(std::filesystem::exists(store)) << t.output;
    // submit refuses it before it sends anything (port 1: nobody listens, so a send would fail
    // naming the daemon instead), with the same FILE:LINE.
    auto sub = run_binary({"submit", path, "--daemon", "tcp://127.0.0.1:1"});
    EXPECT_EQ(sub.status, 1) << sub.output;
    EXPECT_NE(sub.output.find(where), std::string::npos) << sub.output;
    EXPECT_EQ(sub.output.find("daemon"), std::string::npos) << sub.output;
  }
  // A store that cannot be created: refused before anything runs, naming the path.
  auto blocked = d.dir.sub("work/model.txt/store");
  auto t = run_binary({"tune", good, "--store", blocked});
  EXPECT_EQ(t.status, 1) << t.output;
  EXPECT_NE(t.output.find("infrarsi tune: --store: store: \"" + blocked + "\": \""
                          + d.dir.sub("work/model.txt") + "\" is not a directory"),
            std::string::npos)
    << t.output;
  EXPECT_NE(t.output.find("no run was created"), std::string::npos) << t.output;
}

// A baseline that fails the same way twice stops the doctor: two attempts, not three; the
// message quotes the stderr tail; every trial directory holds its logs; `status` says failed.
TEST(Preflight, ABaselineThatFailsTheSameWayTwiceEndsTheRunQuotingItsStderr) {
  preflight_dir d;
  std::ofstream{d.dir.sub("work/train.sh")}
    << "#!/bin/sh\necho \"fatal: cannot open dataset /data/shard-$$\" >&2\nexit 3\n";
  int line = 0;
  auto task = d.variant("fails", "[[knobs]]", "[budget]\nbaseline_repeats = 3\ntrials = 2\n\n[[knobs]]",
                        line);
  auto store = d.dir.sub("store");
  auto t = run_binary({"tune", task, "--store", store});
  EXPECT_EQ(t.status, 1) << t.output;
  EXPECT_NE(t.output.find("infrarsi tune: doctor: the baseline does not run: no baseline run "
                          "completed with its timed window: trial 0 attempt 0 launch_error: "),
            std::string::npos)
    << t.output;
  EXPECT_NE(t.output.find("stderr: fatal: cannot open dataset /data/shard-"), std::string::npos)
    << t.output;
  EXPECT_EQ(t.output.find('\r'), std::string::npos) << "a live status line went into a pipe";
  // Two attempts, the second with the first one's cause: no third.
  {
    store::rocksdb_event_log_options ro;
    ro.read_only = true;
    auto log = store::rocksdb_event_log::open(store + "/events", ro);
    ASSERT_TRUE(log) << describe(log.error());
    auto runs = (*log)->list_runs();
    ASSERT_TRUE(runs);
    ASSERT_EQ(runs->size(), 1u);
    auto state = store::load_run(**log, runs->front().run_id);
    ASSERT_TRUE(state) << describe(state.error());
    ASSERT_EQ(state->trials.size(), 2u);
    for (const auto& tr : state->trials) {
      EXPECT_EQ(tr.outcome, tuning::trial_outcome::launch_error);
      auto dir = store + "/runs/" + runs->front().run_id + "/trials/trial-"
                 + std::to_string(tr.trial_id) + "-0";
      std::ifstream err_log{dir + "/rank-0.stderr"};
      std::string text{std::istreambuf_iterator<char>{err_log}, {}};
      EXPECT_EQ(text.rfind("fatal: cannot open dataset /data/shard-", 0), 0u) << dir << ": " << text;
      EXPECT_TRUE(std::filesystem::exists(dir + "/rank-0.stdout")) << dir;
    }
  }
  // status: a block per run, the run shown as failed with its cause and the resume command.
  auto st = run({"status", "--store", store});
  EXPECT_EQ(st.status, 0) << st.err;
  EXPECT_NE(st.out.find("\n  state:    failed in stage doctor: the baseline does not run (trial 0 "
                        "launch_error: "),
            std::string::npos)
    << st.out;
  EXPECT_EQ(st.out.find("in progress"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("\n  stages:   init, doctor (not completed)\n"), std::string::npos)
    << st.out;
  EXPECT_NE(st.out.find("\n  trials:   2 (2 ended, 2 launch_error)\n"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("\n  resume:   infrarsi tune " + task + " --store " + store + " --run "),
            std::string::npos)
    << st.out;
}

TEST(CliErrors, ExperienceWithoutAStoreSaysWhereToLook) {
  test::temp_dir dir;
  auto r = run({"experience", "list", "--store", dir.sub("nowhere")});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("infrarsi experience list: no store at '" + dir.sub("nowhere") + "'", 0),
            0u)
    << r.err;
  auto sub = run({"experience", "merge"});
  EXPECT_EQ(sub.status, exit_usage);
  EXPECT_NE(sub.err.find("valid: list, rebuild, hash, identity, export, import, sync"),
            std::string::npos)
    << sub.err;
  // sync needs a daemon to ask, or a peer to pull from (an endpoint without --daemon).
  auto sync = run({"experience", "sync"});
  EXPECT_EQ(sync.status, exit_usage);
  EXPECT_NE(sync.err.find("give --daemon EP"), std::string::npos) << sync.err;
  auto name = run({"experience", "sync", "--peer", "lab-b"});
  EXPECT_EQ(name.status, exit_usage);
  EXPECT_NE(name.err.find("--peer 'lab-b': without --daemon, expected the peer daemon's client "
                          "endpoint"),
            std::string::npos)
    << name.err;
  // Nobody listening: the endpoint is named, exit 1.
  auto away = run({"experience", "sync", "--daemon", "tcp://127.0.0.1:9", "--timeout", "1"});
  EXPECT_EQ(away.status, 1);
  EXPECT_NE(away.err.find("no answer from the daemon at 'tcp://127.0.0.1:9' within 1 s"),
            std::string::npos)
    << away.err;
}

TEST(CliErrors, AnUnknownSubcommandIsNamedWithTheValidOnes) {
  auto r = run({"frobnicate"});
  EXPECT_EQ(r.status, exit_usage);
  EXPECT_EQ(r.err, "infrarsi: unknown subcommand 'frobnicate'; valid: runs, log, trial, tune, "
                   "replay, report, daemon, submit, node, check, status, keys, experience "
                   "(run 'infrarsi --help')\n");
  r = run({"log", "dumb", "RUN"});
  EXPECT_EQ(r.status, exit_usage);
  EXPECT_EQ(r.err, "infrarsi log: unknown subcommand 'dumb'; valid: dump (run 'infrarsi log "
                   "--help')\n");
  // Options and known subcommands still parse as before.
  EXPECT_EQ(run({"--version"}).status, exit_ok);
  EXPECT_EQ(run({"keys"}).status, exit_usage);
}

TEST(CliErrors, ReadersWithoutAStoreSaySoAndEveryDefaultIsTheSame) {
  test::temp_dir dir;
  auto missing = dir.sub("nowhere");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"runs", "--store", missing},
        std::vector<std::string>{"status", "--store", missing},
        std::vector<std::string>{"log", "dump", "RUN", "--store", missing}}) {
    auto r = run(args);
    EXPECT_EQ(r.status, exit_failure) << args[0];
    EXPECT_NE(r.err.find("no store at '" + missing + "'; `infrarsi tune TASK` writes its store in "
                         ".infrarsi of the directory it runs in"),
              std::string::npos)
      << r.err;
    EXPECT_EQ(r.err.find("events/events"), std::string::npos) << r.err;
  }
  // tune, status, runs and log dump share one default store.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"tune", "--help"}, std::vector<std::string>{"status", "--help"},
        std::vector<std::string>{"runs", "--help"},
        std::vector<std::string>{"log", "dump", "--help"}}) {
    auto r = run(args);
    EXPECT_EQ(r.status, exit_ok);
    EXPECT_NE(r.out.find("--store TEXT=.infrarsi "), std::string::npos) << r.out;
  }
}

// check --smoke: the baseline once, its first metric lines shown; a baseline that prints none
// exits 1 quoting its stderr.
TEST(Preflight, SmokeRunsTheBaselineOnceAndShowsItsFirstMetricLines) {
  preflight_dir d;
  int line = 0;
  auto task = d.variant("smoke", "name = \"preflight\"", "name = \"preflight\"", line);
  auto r = run_binary({"check", task, "--smoke", "--smoke-lines", "2", "--smoke-dir",
                       d.dir.sub("smoke-ok")});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("smoke: the baseline configuration once (timeout 60 s, stopped after 2 "
                          "metric lines), logs in " + d.dir.sub("smoke-ok") + "\n"
                          "  step 0: loss 2, 0.01 s, 4096 tokens\n"
                          "  step 1: loss 2.1, 0.01 s, 4096 tokens\n"
                          "smoke: 2 metric line(s) parsed (stopped there)\n"),
            std::string::npos)
    << r.output;
  EXPECT_TRUE(std::filesystem::exists(d.dir.sub("smoke-ok/rank-0.stdout")));

  std::ofstream{d.dir.sub("work/train.sh")}
    << "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n";
  r = run_binary({"check", task, "--smoke", "--smoke-dir", d.dir.sub("smoke-bad")});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("infrarsi check --smoke: the baseline printed no metric line the task's "
                          "metrics spec parses; outcome launch_error: rank 0: exited with status "
                          "1; stderr: ModuleNotFoundError: No module named 'torch' (logs: "
                          + d.dir.sub("smoke-bad") + ")\n"),
            std::string::npos)
    << r.output;
}

// check --smoke with a [smoke] launch: that launch once to its end, its work checked; a smoke
// launch whose work breaks its own contract (here: fewer steps than [smoke] says) exits 1 naming
// [smoke]; one whose loss does not fall (here: train.sh's 2.0 .. 2.3) is vacuous, a warning
// (exit 0); a smoke program that does not exist is a pre-flight problem naming smoke.argv[0].
TEST(Preflight, SmokeAlsoRunsTheTasksSmokeLaunchOnceAndChecksItsWork) {
  preflight_dir d;
  std::ofstream{d.dir.sub("work/fall.sh")}
    << "#!/bin/sh\nfor i in 0 1 2 3; do echo \"iter $i: loss 2.$((9 - i)), time 10ms\"; done\n";
  std::filesystem::permissions(d.dir.sub("work/fall.sh"), std::filesystem::perms::owner_all);
  int line = 0;
  const std::string smoke = "[smoke]\nargv = [\"./train.sh\"]\nsteps = STEPS\n"
                            "tokens_per_step = 4096\n\n[scope]";
  auto with = [&](const std::string& name, const std::string& steps, const std::string& prog) {
    auto text = smoke;
    text.replace(text.find("STEPS"), 5, steps);
    text.replace(text.find("./train.sh"), 10, prog);
    return d.variant(name, "[scope]", text, line);
  };
  auto good = with("good", "4", "./fall.sh"); // 2.9 -> 2.6
  auto r = run_binary({"check", good, "--smoke", "--smoke-dir", d.dir.sub("s-good")});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("smoke: the [smoke] launch once, unpatched (4 steps, timeout "),
            std::string::npos)
    << r.output;
  EXPECT_NE(r.output.find("smoke: the [smoke] launch ran 4 step(s) and keeps its work checks (ok)"),
            std::string::npos)
    << r.output;
  EXPECT_EQ(r.output.find("smoke: vacuous"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(d.dir.sub("s-good/smoke-launch/rank-0.stdout")));

  auto rising = with("rising", "4", "./train.sh"); // 2.0 -> 2.3
  r = run_binary({"check", rising, "--smoke", "--smoke-dir", d.dir.sub("s-rising")});
  EXPECT_EQ(r.status, 0) << r.output; // a warning, not an error
  EXPECT_NE(r.output.find("smoke: vacuous: the unpatched smoke loss went 2 -> 2.3 over 4 steps "
                          "(rose by 0.3, not more than 0.002 = max(loss_atol 1e-06, loss_rtol "
                          "0.0001 x 2, 0.001 x 2)); a probe whose loss does not fall cannot tell "
                          "a numerics change (logs: " + d.dir.sub("s-rising/smoke-launch")
                          + "); every smoke probe would be vacuous"),
            std::string::npos)
    << r.output;
  EXPECT_EQ(r.output.find("keeps its work checks"), std::string::npos) << r.output;

  auto five = with("five", "5", "./train.sh");
  r = run_binary({"check", five, "--smoke", "--smoke-dir", d.dir.sub("s-five")});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(": [smoke]: the smoke launch breaks its own contract: steps: reported 4 "
                          "steps, the contract says 5"),
            std::string::npos)
    << r.output;

  auto missing = with("missing", "4", "./trian.sh");
  r = run_binary({"check", missing});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("smoke.argv[0]: program \"./trian.sh\" does not exist"),
            std::string::npos)
    << r.output;
}

// The [smoke] launch's templates and world size are checked as workload.argv's: each element's
// FILE:LINE, the nearest known name, {rank} only with the ranks launcher; a world size that does
// not render to 1..4096 and an empty program are problems of `check`, never failed trials.
TEST(Preflight, SmokeTemplatesWorldSizesAndEmptyProgramsAreNamedWithTheirLine) {
  preflight_dir d;
  struct broken {
    std::string name, from, to;
    int offset; // lines from where `to` starts to the offending key
    std::string key, message;
    bool command_launcher = false; // workload.launcher = "command" (no {rank})
  };
  const std::string smoke_head = "[smoke]\nsteps = 4\n";
  const std::vector<broken> cases = {
    {"smoke_placeholder_typo", "[scope]",
     smoke_head + "argv = [\"./train.sh\",\n  \"{micro_bach}\"]\n\n[scope]", 3, "smoke.argv[1]",
     "placeholder {micro_bach} in \"{micro_bach}\" names no knob, constant or built-in; did you "
     "mean {micro_batch}?"},
    {"smoke_rank_without_ranks_launcher", "[scope]",
     smoke_head + "argv = [\"./train.sh\", \"{rank}\"]\n\n[scope]", 2, "smoke.argv[1]",
     "placeholder {rank} in \"{rank}\" names no knob, constant or built-in", true},
    {"smoke_world_size_placeholder_typo", "[scope]",
     smoke_head + "argv = [\"./train.sh\"]\nworld_size = \"{micro_bach}\"\n\n[scope]", 3,
     "smoke.world_size", "did you mean {micro_batch}?"},
    {"smoke_world_size_junk", "[scope]",
     smoke_head + "argv = [\"./train.sh\"]\nworld_size = \"abc\"\n\n[scope]", 3,
     "smoke.world_size", "renders to 'abc', expected an integer in 1..4096"},
    {"smoke_world_size_huge", "[scope]",
     smoke_head + "argv = [\"./train.sh\"]\nworld_size = 100000000\n\n[scope]", 3,
     "smoke.world_size", "an integer from 1 to 4096"},
    {"smoke_empty_program", "[scope]", smoke_head + "argv = [\"\"]\n\n[scope]", 2,
     "smoke.argv[0]", "the program is empty"},
    {"workload_world_size_junk", "workdir = \"work\"", "workdir = \"work\"\nworld_size = \"0\"", 1,
     "workload.world_size", "renders to '0', expected an integer in 1..4096"},
    {"workload_empty_program", "\"./train.sh\"", "\"\"", 0, "workload.argv[0]",
     "the program is empty"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    int line = 0;
    auto path = d.variant(c.name, c.from, c.to, line);
    if (c.command_launcher) { // one more line, above `to`
      std::ifstream in{path};
      std::string text{std::istreambuf_iterator<char>{in}, {}};
      text.replace(text.find("[workload]\n"), 11, "[workload]\nlauncher = \"command\"\n");
      std::ofstream{path} << text;
      ++line;
    }
    auto r = run_binary({"check", path});
    EXPECT_EQ(r.status, 1) << r.output;
    expect_problem_at(r.output, path + ":" + std::to_string(line + c.offset) + ":", c.key,
                      c.message);
  }
  // tune refuses one before any trial: no store.
  int line = 0;
  auto junk = d.variant("tune_junk", "[scope]",
                        smoke_head + "argv = [\"./train.sh\"]\nworld_size = \"abc\"\n\n[scope]",
                        line);
  auto store = d.dir.sub("store-junk");
  auto t = run_binary({"tune", junk, "--store", store});
  EXPECT_EQ(t.status, 1) << t.output;
  EXPECT_NE(t.output.find("smoke.world_size: renders to 'abc'"), std::string::npos) << t.output;
  EXPECT_FALSE(std::filesystem::exists(store)) << t.output;
}

// On a terminal, tune keeps a live status line below its progress lines (redrawn with
// "\r\033[K"); into a pipe it writes none (above).
TEST(Progress, OnATerminalTuneKeepsALiveStatusLine) {
  namespace fs = std::filesystem;
  test::temp_dir dir;
  fs::copy(std::string{INFRARSI_TEST_DATA_DIR} + "/workloads", dir.sub("workloads"),
           fs::copy_options::recursive);
  fs::create_directories(dir.sub("tasks"));
  fs::copy(std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake_tune.toml",
           dir.sub("tasks/fake_tune.toml"));
  int master = -1;
  pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl(INFRARSI_CLI_PATH, INFRARSI_CLI_PATH, "tune", dir.sub("tasks/fake_tune.toml").c_str(),
            "--store", dir.sub("store").c_str(), "--until", "doctor", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string output;
  std::array<char, 4096> buf{};
  for (;;) {
    auto n = ::read(master, buf.data(), buf.size());
    if (n <= 0)
      break; // EIO once the child has ended
    output.append(buf.data(), static_cast<std::size_t>(n));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(output.find("\r\033[K[doctor | 1 running | 0:"), std::string::npos) << output;
  // Each progress line clears the status line first, then redraws it below.
  EXPECT_NE(output.find("\r\033[Ktrial 0 baseline ok 0.0800 s/step"), std::string::npos) << output;
}

} // namespace
} // namespace infrarsi::runtime
