// The smoke probe (task [smoke], trial_request::smoke_patches) with real processes: a patch that
// changes the loss ends its trial before the full launch, at the cost of two small launches; a
// patch that keeps the contract goes on to its full launch, which is charged the probe too.

#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "adapters/task_file.hpp"
#include "adapters/trial_launcher.hpp"
#include "test_util.hpp"
#include "tuning/contract_check.hpp"

namespace infrarsi::adapters {
namespace {

namespace fs = std::filesystem;
const std::string data_dir = INFRARSI_TEST_DATA_DIR;

std::string read(const std::string& file) {
  std::ifstream in{file};
  return {std::istreambuf_iterator<char>{in}, {}};
}

/// A workload whose loss scale is a file a patch may edit: work/scale.txt (1.0), drift.patch
/// (1.0 -> 1.05, a 5 % loss change against a 1 % tolerance) and notes.patch (a file the run
/// never reads). The full launch runs 6 steps of 0.05 s, the smoke launch 2 steps of 0.01 s.
class SmokeProbeTest : public ::testing::Test {
protected:
  test::temp_dir dir;
  tuning::task_spec task;

  void SetUp() override {
    fs::create_directories(dir.sub("work"));
    fs::copy_file(data_dir + "/workloads/fake_train.py", dir.sub("work/fake_train.py"));
    std::ofstream{dir.sub("work/scale.txt")} << "1.0\n";
    std::ofstream{dir.sub("work/notes.txt")} << "a\n";
    std::ofstream{dir.sub("drift.patch")} << "--- a/scale.txt\n+++ b/scale.txt\n@@ -1 +1 @@\n"
                                             "-1.0\n+1.05\n";
    std::ofstream{dir.sub("notes.patch")} << "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n"
                                             "-a\n+b\n";
    std::ofstream{dir.sub("task.toml")} << R"(name = "smoke_probe"
[workload]
workdir = "work"
argv = ["sh", "-c", "exec python3 fake_train.py --loss-scale $(cat scale.txt) --steps 6 --step-time 0.05 --tokens 512"]
[smoke]
argv = ["sh", "-c", "exec python3 fake_train.py --loss-scale $(cat scale.txt) --steps 2 --step-time 0.01 --tokens 64"]
steps = 2
tokens_per_step = 64
[limits]
timeout_s = 60
[contract]
steps = 6
tokens_per_step = 512
timed_steps = [1, 5]
loss_rtol = 0.01
[scope]
editable = ["scale.txt", "notes.txt"]
[[knobs]]
name = "unused"
type = "int"
values = [1, 2]
default = 1
[[patches]]
name = "drift"
file = "drift.patch"
[[patches]]
name = "notes"
file = "notes.patch"
)";
    auto t = load_task_file(dir.sub("task.toml"));
    ASSERT_TRUE(t) << describe(t.error());
    task = std::move(*t);
  }

  trial_report run(std::vector<std::string> patches, std::vector<std::string> smoke,
                   const std::string& name) {
    trial_request req;
    req.task = &task;
    req.patches = std::move(patches);
    req.smoke_patches = std::move(smoke);
    req.trial_dir = dir.sub(name);
    req.trial_id = 3;
    auto r = run_trial(req);
    if (!r)
      throw std::runtime_error(describe(r.error()));
    return std::move(*r);
  }
};

TEST_F(SmokeProbeTest, TheTaskFileGivesTheSmokeLaunchAndItsContract) {
  ASSERT_TRUE(task.smoke);
  EXPECT_EQ(task.smoke->argv.size(), 3u);
  EXPECT_EQ(task.smoke->world_size, "1");
  EXPECT_EQ(task.smoke->contract.steps, 2u);
  EXPECT_EQ(task.smoke->contract.tokens_per_step, 64u);
  EXPECT_DOUBLE_EQ(task.smoke->contract.loss_rtol, 0.01); // the task's contract, unless given
  EXPECT_EQ(task.smoke->contract.timed_first, 0u);
  EXPECT_EQ(task.smoke->contract.timed_last, 1u);
  EXPECT_EQ(task.contract.steps, 6u); // the full job's contract is untouched
}

TEST_F(SmokeProbeTest, APatchThatMovesTheLossEndsItsTrialBeforeTheFullLaunch) {
  auto r = run({"drift"}, {"drift"}, "drift");
  const auto* res = r.result.get();
  ASSERT_EQ(res->outcome(), wire::Outcome::ContractViolation) << res->detail()->str();
  auto detail = res->detail()->str();
  EXPECT_EQ(tuning::violation_code(detail), "loss_drift") << detail;
  EXPECT_TRUE(tuning::is_smoke_probe(detail)) << detail;
  EXPECT_NE(detail.find("; smoke probe of drift (the full launch did not start)"),
            std::string::npos)
    << detail;
  EXPECT_TRUE(res->steps() == nullptr || res->steps()->size() == 0);
  // Both smoke launches ran (their logs say so); the full launch never started.
  EXPECT_NE(read(dir.sub("drift/smoke-unpatched/rank-0.stdout")).find("\"loss\": 5.0"),
            std::string::npos);
  EXPECT_NE(read(dir.sub("drift/smoke-patched/rank-0.stdout")).find("\"loss\": 5.25"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.sub("drift/rank-0.stdout")));
  const auto note = read(dir.sub("drift/smoke.txt"));
  EXPECT_EQ(note.rfind("smoke probe of drift: violation: loss_drift", 0), 0u) << note;
  // ... and the note's probe cost is the trial's.
  EXPECT_NEAR(std::stod(note.substr(note.find("(2 launches, ") + 13)), res->device_seconds(),
              1e-3 * res->device_seconds());
  // It cost the two smoke launches: positive, and less than the full launch's 6 x 0.05 s alone.
  EXPECT_GT(res->device_seconds(), 0.0);
  EXPECT_NEAR(res->device_seconds(), res->wall_time_s(), 1e-9); // one rank each
  EXPECT_EQ(r.log_files.size(), 4u);
}

TEST_F(SmokeProbeTest, APatchThatKeepsTheContractGoesOnToItsFullLaunchChargedWithTheProbe) {
  auto r = run({"notes"}, {"notes"}, "notes");
  const auto* res = r.result.get();
  ASSERT_EQ(res->outcome(), wire::Outcome::Ok) << res->detail()->str();
  ASSERT_NE(res->steps(), nullptr);
  EXPECT_EQ(res->steps()->size(), 6u);
  const auto note = read(dir.sub("notes/smoke.txt"));
  EXPECT_EQ(note.rfind("smoke probe of notes: passed (2 launches, ", 0), 0u) << note;
  EXPECT_TRUE(fs::exists(dir.sub("notes/rank-0.stdout")));
  // Device-seconds: the full launch's wall time x 1 rank, plus the two smoke launches; its wall
  // time is the full launch's alone (6 steps of 0.05 s and Python's start-up, not the probe's).
  EXPECT_GT(res->device_seconds(), res->wall_time_s() + 1e-3);
  auto tested = run({"notes"}, {}, "notes-tested"); // the same launch without a probe
  EXPECT_LT(res->wall_time_s(), tested.result->wall_time_s() * 1.5 + 0.5);
  const double probe = std::stod(note.substr(note.find("(2 launches, ") + 13));
  EXPECT_GT(probe, 0.0);
  EXPECT_NEAR(res->device_seconds(), res->wall_time_s() + probe, 1e-3 * probe + 1e-9);
}

TEST_F(SmokeProbeTest, NoProbeWithoutSmokePatchesOrWithoutPatches) {
  // A patch already tested in the run (no smoke_patches): the full launch only.
  auto r = run({"drift"}, {}, "tested");
  ASSERT_EQ(r.result->outcome(), wire::Outcome::Ok) << r.result->detail()->str();
  EXPECT_FALSE(fs::exists(dir.sub("tested/smoke.txt")));
  EXPECT_NEAR(r.result->device_seconds(), r.result->wall_time_s(), 1e-9);
  // A task without [smoke]: nothing to probe with.
  task.smoke.reset();
  auto plain = run({"drift"}, {"drift"}, "plain");
  ASSERT_EQ(plain.result->outcome(), wire::Outcome::Ok);
  EXPECT_FALSE(fs::exists(dir.sub("plain/smoke.txt")));
}

// A [smoke] declaration its own launch breaks (here: 3 steps declared, 2 run) is no patch's
// fault: the probe is inconclusive after the unpatched launch alone, the patched one never runs,
// the full launch judges the patch, and its result says why the probe could not.
TEST_F(SmokeProbeTest, ASmokeLaunchThatBreaksItsOwnContractJudgesNoPatch) {
  task.smoke->contract.steps = 3;
  task.smoke->contract.timed_last = 2;
  auto r = run({"notes"}, {"notes"}, "wrong-smoke");
  const auto* res = r.result.get();
  ASSERT_EQ(res->outcome(), wire::Outcome::Ok) << res->detail()->str();
  ASSERT_NE(res->steps(), nullptr);
  EXPECT_EQ(res->steps()->size(), 6u); // the full launch ran
  const auto detail = res->detail()->str();
  EXPECT_TRUE(tuning::is_smoke_inconclusive(detail)) << detail;
  EXPECT_NE(detail.find("the unpatched smoke run breaks [smoke]: steps: reported 2 steps, the "
                        "contract says 3"),
            std::string::npos)
    << detail;
  const auto note = read(dir.sub("wrong-smoke/smoke.txt"));
  EXPECT_EQ(note.rfind("smoke probe of notes: inconclusive: the unpatched smoke run breaks [smoke]: "
                       "steps: reported 2 steps",
                       0),
            0u)
    << note;
  EXPECT_NE(note.find("(1 launch, "), std::string::npos) << note;
  EXPECT_TRUE(fs::exists(dir.sub("wrong-smoke/smoke-unpatched/rank-0.stdout")));
  EXPECT_FALSE(fs::exists(dir.sub("wrong-smoke/smoke-patched")));
  // The drifting patch is not caught by it either: its full launch runs (and the full contract's
  // loss check, with a calibrated reference, is what rejects it later).
  auto drift = run({"drift"}, {"drift"}, "wrong-smoke-drift");
  EXPECT_EQ(drift.result->outcome(), wire::Outcome::Ok) << drift.result->detail()->str();
  EXPECT_TRUE(fs::exists(dir.sub("wrong-smoke-drift/rank-0.stdout")));
  // A smoke launch that cannot even start (a world size that does not render: a task the
  // pre-flight did not see) fails no trial either.
  task.smoke->world_size = "abc";
  auto unstartable = run({"notes"}, {"notes"}, "unstartable-smoke");
  ASSERT_EQ(unstartable.result->outcome(), wire::Outcome::Ok)
    << unstartable.result->detail()->str();
  const auto why = read(dir.sub("unstartable-smoke/smoke.txt"));
  EXPECT_EQ(why.rfind("smoke probe of notes: inconclusive: the unpatched smoke run ended "
                      "launch_error (",
                      0),
            0u)
    << why;
  EXPECT_NE(why.find("renders to 'abc'"), std::string::npos) << why;
}

// A smoke launch whose loss does not fall (here flat at 5.0, as a model at its loss ceiling) shows
// nothing of what a patch does to the training: the probe is vacuous after the unpatched launch
// alone, the patched one never runs, no patch is blamed (not even the 5 % drift it would have
// caught), the full launch judges the patch, and its result says why the probe could not.
TEST_F(SmokeProbeTest, ASmokeLaunchWhoseLossDoesNotFallIsVacuousAndJudgesNoPatch) {
  task.smoke->argv[2] += " --loss-fall 0";
  auto r = run({"drift"}, {"drift"}, "flat");
  const auto* res = r.result.get();
  ASSERT_EQ(res->outcome(), wire::Outcome::Ok) << res->detail()->str();
  ASSERT_NE(res->steps(), nullptr);
  EXPECT_EQ(res->steps()->size(), 6u); // the full launch ran
  const std::string why = "the unpatched smoke loss went 5 -> 5 over 2 steps (fell by 0, not "
                          "more than 0.05 = max(loss_atol 1e-06, loss_rtol 0.01 x 5, 0.001 x 5)); "
                          "a probe whose loss does not fall cannot tell a numerics change";
  const auto detail = res->detail()->str();
  EXPECT_TRUE(tuning::is_smoke_vacuous(detail)) << detail;
  EXPECT_FALSE(tuning::is_smoke_inconclusive(detail)) << detail;
  EXPECT_FALSE(tuning::is_smoke_probe(detail)) << detail;
  EXPECT_EQ(tuning::smoke_vacuous_reason(detail), why) << detail;
  const auto note = read(dir.sub("flat/smoke.txt"));
  EXPECT_EQ(note.rfind("smoke probe of drift: vacuous: " + why + " (1 launch, ", 0), 0u) << note;
  EXPECT_NE(read(dir.sub("flat/smoke-unpatched/rank-0.stdout")).find("\"loss\": 5.0"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.sub("flat/smoke-patched")));
  EXPECT_TRUE(fs::exists(dir.sub("flat/rank-0.stdout")));
  // Charged the one smoke launch and the full launch.
  const double probe = std::stod(note.substr(note.find("(1 launch, ") + 11));
  EXPECT_GT(probe, 0.0);
  EXPECT_NEAR(res->device_seconds(), res->wall_time_s() + probe, 1e-3 * probe + 1e-9);
}

TEST(SmokeTaskFile, BadSmokeSectionsNameTheKey) {
  test::temp_dir dir;
  auto load = [&](const std::string& smoke) {
    std::ofstream{dir.sub("t.toml")} << "name = \"t\"\n[workload]\nargv = [\"true\"]\n"
                                        "[[knobs]]\nname = \"k\"\ntype = \"int\"\nvalues = [1]\n"
                                        "default = 1\n"
                                     << smoke;
    auto t = load_task_file(dir.sub("t.toml"));
    return t ? std::string{} : describe(t.error());
  };
  EXPECT_EQ(load(""), "");
  EXPECT_EQ(load("[smoke]\nargv = [\"true\", \"{k}\"]\nsteps = 1\n"), "");
  auto missing_steps = load("[smoke]\nargv = [\"true\"]\n");
  EXPECT_NE(missing_steps.find("smoke.steps: missing"), std::string::npos) << missing_steps;
  auto no_argv = load("[smoke]\nsteps = 2\n");
  EXPECT_NE(no_argv.find("smoke.argv"), std::string::npos) << no_argv;
  auto unknown = load("[smoke]\nargv = [\"true\"]\nsteps = 2\nstep = 3\n");
  EXPECT_NE(unknown.find("smoke.step: unknown key"), std::string::npos) << unknown;
  // Placeholders are the pre-flight's (Preflight.SmokeTemplates...): the file loads.
  EXPECT_EQ(load("[smoke]\nargv = [\"true\", \"{nope}\"]\nsteps = 2\n"), "");
  auto ws = load("[smoke]\nargv = [\"true\"]\nsteps = 2\nworld_size = 0\n");
  EXPECT_NE(ws.find("smoke.world_size"), std::string::npos) << ws;
  auto huge = load("[smoke]\nargv = [\"true\"]\nsteps = 2\nworld_size = 4097\n");
  EXPECT_NE(huge.find("smoke.world_size: expected an integer from 1 to 4096"), std::string::npos)
    << huge;
}

} // namespace
} // namespace infrarsi::adapters
