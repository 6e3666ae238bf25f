// End-to-end: `infrarsi tune` on a small real task (tests/data/tasks/fake_tune.toml: real
// processes, two ranks, a real memory cap), then checks on what it left: the report, one
// terminal event per trial, a replay of the log into the same run state, every planner decision
// recomputed from the events before it, and the OOM setting never proposed again.

#include "runtime/tune.hpp"
#include "runtime/replay.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/actors.hpp"
#include "adapters/trial_copy.hpp"
#include "adapters/trial_launcher.hpp"
#include "decide/resources.hpp"
#include "decide/report.hpp"
#include "adapters/task_file.hpp"
#include "store/memory_event_log.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"

#include "adapters/node_bridge.hpp"
#include "adapters/task_file.hpp"
#include "decide/report.hpp"

namespace infrarsi::runtime {

using adapters::load_task_file;
using adapters::node_client;
using adapters::node_server;
using decide::make_report;
using decide::render_markdown;
namespace {

namespace fs = std::filesystem;

class TuneEndToEnd : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir_ = new test::temp_dir;
    // A copy outside any git repository, as a user's workload would be.
    fs::copy(std::string{INFRARSI_TEST_DATA_DIR} + "/workloads", dir_->sub("workloads"),
             fs::copy_options::recursive);
    fs::create_directories(dir_->sub("tasks"));
    fs::copy(std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake_tune.toml",
             dir_->sub("tasks/fake_tune.toml"));
    tune_options o;
    o.task_path = dir_->sub("tasks/fake_tune.toml");
    o.store_dir = dir_->sub("store");
    o.run_id = "";
    std::ostringstream out;
    std::ostringstream err;
    status_ = run_tune(o, out, err);
    out_ = out.str();
    err_ = err.str();
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::unique_ptr<store::rocksdb_event_log> open_log() {
    store::rocksdb_event_log_options ro;
    ro.read_only = true;
    auto log = store::rocksdb_event_log::open(dir_->sub("store/events"), ro);
    EXPECT_TRUE(log) << describe(log.error());
    return std::move(*log);
  }

  static std::string run_id() {
    auto runs = open_log()->list_runs();
    return runs->front().run_id;
  }

  static test::temp_dir* dir_;
  static int status_;
  static std::string out_;
  static std::string err_;
};

test::temp_dir* TuneEndToEnd::dir_ = nullptr;
int TuneEndToEnd::status_ = -1;
std::string TuneEndToEnd::out_;
std::string TuneEndToEnd::err_;

/// A locked contract cannot change on resume, nor can the task.
TEST_F(TuneEndToEnd, AResumeWithAnotherContractOrTaskIsRefused) {
  ASSERT_EQ(status_, 0) << err_;
  std::ifstream in{dir_->sub("tasks/fake_tune.toml")};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  auto at = text.find("[contract]\n");
  ASSERT_NE(at, std::string::npos);
  text.insert(at + 11, "loss_rtol = 0.02\n");
  std::ofstream{dir_->sub("tasks/changed.toml")} << text;
  tune_options o;
  o.task_path = dir_->sub("tasks/changed.toml");
  o.store_dir = dir_->sub("store");
  o.run_id = run_id();
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(run_tune(o, out, err), 1);
  EXPECT_NE(err.str().find("the contract differs from the one run '" + o.run_id
                           + "' locked at init: contract.loss_rtol (locked 0.0001, now 0.02)"),
            std::string::npos)
    << err.str();
  o.task_path = std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake.toml";
  std::ostringstream err2;
  EXPECT_EQ(run_tune(o, out, err2), 1);
  EXPECT_NE(err2.str().find("belongs to task 'fake_tune', not 'fake'"), std::string::npos)
    << err2.str();
}

TEST_F(TuneEndToEnd, FinishesWithAVerifiedPromotionInTheReport) {
  ASSERT_EQ(status_, 0) << err_;
  EXPECT_NE(out_.find("Promoted step_time 0.08->0.03"), std::string::npos) << out_;
  std::ifstream in{dir_->sub("store/runs/" + run_id() + "/report.json")};
  ASSERT_TRUE(in.good());
  auto report = nlohmann::json::parse(in);
  EXPECT_NEAR(report["baseline"]["step_time_s"].get<double>(), 0.08, 0.01);
  // budget.baseline_repeats = 2, and more when the doctor's 80 % upper limit of the noise asks
  // for them (measurement_rule adaptive/1, docs/tune.md "Measurement that adapts").
  EXPECT_GE(report["baseline"]["noise"]["runs"].get<int>(), 2);
  EXPECT_EQ(report["baseline"]["measurement"]["runs"], report["baseline"]["noise"]["runs"]);
  std::size_t verified_ok = 0;
  for (const auto& t : report["trials"])
    if (t["purpose"] == "explore" && t["outcome"] == "ok" && t["violations"].empty())
      ++verified_ok;
  EXPECT_GE(verified_ok, 1u);
  ASSERT_TRUE(report["promoted"].is_object());
  EXPECT_GT(report["promoted"]["ci_low"].get<double>(), 1.5); // 0.08 -> 0.03 s/step is 2.67x
  // The group-sequential test looks every verify_repeats = 2 pairs; the fake workload reports
  // exactly the step time it is given, so the intervals have no width and the first look decides.
  EXPECT_EQ(report["promoted"]["pairs"], 2);
  ASSERT_EQ(report["reverifications"][0]["looks"].size(), 1u);
  EXPECT_EQ(report["reverifications"][0]["looks"][0]["decision"], "promote");
  EXPECT_TRUE(fs::exists(dir_->sub("store/runs/" + run_id() + "/report.md")));
  EXPECT_TRUE(fs::exists(dir_->sub("store/runs/" + run_id() + "/promoted/launch.json")));
}

/// status: one block per run, the finished run shown as finished with its promotion.
TEST_F(TuneEndToEnd, StatusShowsTheFinishedRunAsABlock) {
  ASSERT_EQ(status_, 0) << err_;
  std::ostringstream out;
  std::ostringstream err;
  ASSERT_EQ(run_status(dir_->sub("store"), out, err), 0) << err.str();
  const auto text = out.str();
  EXPECT_EQ(text.rfind(run_id() + "\n  state:    finished\n  task:     "
                         + dir_->sub("tasks/fake_tune.toml") + "\n  stages:   init, doctor, run, "
                         "report, apply\n  trials:   ",
                       0),
            0u)
    << text;
  EXPECT_NE(text.find("\n  baseline: 0.0800 s/step, cv "), std::string::npos) << text;
  EXPECT_NE(text.find("\n  promoted: step_time 0.08->0.03, 2.667x [2.667, 2.667]\n"),
            std::string::npos)
    << text;
  EXPECT_NE(text.find("\n  report:   " + dir_->sub("store/runs/" + run_id() + "/report.md")),
            std::string::npos)
    << text;
  EXPECT_EQ(text.find("resume:"), std::string::npos) << text;
}

/// Progress for people (docs/tune.md "Progress"): a header per stage with its counts, one short
/// line per trial with outcome, s/step, speedup, best so far, elapsed and ETA; no line over 120
/// characters, no JSON, and no live status line into a stream that is not a terminal.
TEST_F(TuneEndToEnd, ProgressIsOneShortLinePerTrialWithStageHeaders) {
  ASSERT_EQ(status_, 0) << err_;
  EXPECT_NE(err_.find("== doctor: 2 baseline runs (up to "), std::string::npos) << err_;
  EXPECT_NE(err_.find("== run: 5 search trials, then up to 1 candidates re-verified on 1 slot ("),
            std::string::npos)
    << err_;
  EXPECT_EQ(err_.find('\r'), std::string::npos) << "a status line went into a pipe";
  std::istringstream in{err_};
  std::size_t trial_lines = 0;
  std::size_t search_lines = 0;
  bool promoted_line = false;
  const std::regex search_line{R"(^trial \d+ explore ok \d\.\d{4} s/step \d+\.\d\dx \| best )"
                               R"(\d+\.\d\dx \| \d+:\d\d ETA (\d+:\d\d|\?) \| [1-5]/5 step_time 0\.08->)"};
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("apply: promoted configuration written to ", 0) != 0) { // a path stays whole
      EXPECT_LE(line.size(), 120u) << line;
    }
    EXPECT_EQ(line.find('{'), std::string::npos) << line;
    if (line.rfind("trial ", 0) == 0)
      ++trial_lines;
    if (std::regex_search(line, search_line))
      ++search_lines;
    if (line.find("step_time 0.08->0.03") != std::string::npos && line.find(" ok 0.0300 s/step 2.67x")
                                                             != std::string::npos)
      promoted_line = true;
  }
  // Every baseline, search and re-verification attempt has its line.
  auto log = open_log();
  auto state = store::load_run(*log, run_id());
  ASSERT_TRUE(state) << describe(state.error());
  std::size_t ended = 0;
  for (const auto& t : state->trials)
    ended += t.finished && t.outcome != tuning::trial_outcome::lost ? 1 : 0;
  EXPECT_EQ(trial_lines, ended) << err_;
  EXPECT_GE(search_lines, 1u) << err_;
  EXPECT_TRUE(promoted_line) << err_;
}

/// The report stage writes report.html beside report.md (ReportWritten names all three) and the
/// apply stage a launch.json with the command line to run the promoted configuration.
TEST_F(TuneEndToEnd, WritesReportHtmlAndALaunchableCommand) {
  ASSERT_EQ(status_, 0) << err_;
  const auto run_dir = dir_->sub("store/runs/" + run_id());
  auto state = store::load_run(*open_log(), run_id());
  ASSERT_TRUE(state) << describe(state.error());
  ASSERT_TRUE(state->report.has_value());
  EXPECT_EQ((*state->report)["report_html"], run_dir + "/report.html");
  EXPECT_FALSE(state->report->contains("report_html_error"));
  std::ifstream html{run_dir + "/report.html"};
  std::string text{std::istreambuf_iterator<char>{html}, {}};
  EXPECT_NE(text.find("<pre id=\"render-status\">"), std::string::npos);
  EXPECT_NE(text.find("\"run\":\"" + run_id() + "\""), std::string::npos);
  auto launch = nlohmann::json::parse(std::ifstream{run_dir + "/promoted/launch.json"});
  ASSERT_TRUE(launch["command"].is_string());
  EXPECT_EQ(launch["command"].get<std::string>().rfind("cd ", 0), 0u) << launch.dump(2);
  EXPECT_NE(launch["command"].get<std::string>().find(launch["argv"][0].get<std::string>()),
            std::string::npos)
    << launch.dump(2);
}

/// The retention rule on the finished run: exactly the copies decide::removable_trial_copies
/// names are gone, every trial keeps its logs, and a kept copy shares its unchanged files with
/// the workload (hard links, or clones) while its editable file is its own.
TEST_F(TuneEndToEnd, OldTrialCopiesAreRemovedTheirLogsKept) {
  ASSERT_EQ(status_, 0) << err_;
  auto task = load_task_file(dir_->sub("tasks/fake_tune.toml"));
  ASSERT_TRUE(task) << describe(task.error());
  auto state = store::load_run(*open_log(), run_id());
  ASSERT_TRUE(state) << describe(state.error());
  auto removable = decide::removable_trial_copies(*task, *state, decide::default_keep_trial_copies);
  ASSERT_GE(removable.size(), 3u); // 2 baselines, 5 search trials, 4 re-verification runs
  const auto trials = dir_->sub("store/runs/" + run_id() + "/trials");
  std::set<std::pair<std::uint64_t, std::uint32_t>> gone{removable.begin(), removable.end()};
  std::size_t kept = 0;
  for (const auto& t : state->trials) {
    auto d = trials + "/" + adapters::trial_dir_name(t.trial_id, t.attempt);
    if (!fs::exists(d + "/rank-0.stdout"))
      continue; // never launched (refused before launch)
    EXPECT_TRUE(fs::exists(d + "/rank-0.stderr")) << d;
    bool copy = fs::exists(d + "/workdir");
    EXPECT_EQ(copy, gone.count({t.trial_id, t.attempt}) == 0) << d;
    if (!copy)
      continue;
    ++kept;
    struct stat frozen {}, original {}, editable {};
    ASSERT_EQ(::stat((d + "/workdir/regex_train.py").c_str(), &frozen), 0);
    ASSERT_EQ(::stat(dir_->sub("workloads/regex_train.py").c_str(), &original), 0);
    ASSERT_EQ(::stat((d + "/workdir/fake_train.py").c_str(), &editable), 0);
    EXPECT_EQ(editable.st_nlink, 1u) << d; // the editable file: its own bytes
    if (frozen.st_ino == original.st_ino) {
      EXPECT_GE(frozen.st_nlink, 2u) << d; // a hard link, not a copy
    }
  }
  EXPECT_GE(kept, 1u + decide::default_keep_trial_copies); // the first baseline and the last K
}

TEST_F(TuneEndToEnd, EveryTrialHasExactlyOneTerminalEvent) {
  auto log = open_log();
  std::map<std::pair<std::uint64_t, std::uint32_t>, int> proposed;
  std::map<std::pair<std::uint64_t, std::uint32_t>, int> terminal;
  ASSERT_FALSE(log->for_each_in_stream(run_id(), 0, [&](const store::recorded_event& ev) {
    auto kind = static_cast<wire::EventKind>(ev.kind);
    if (kind == wire::EventKind::TrialProposed) {
      auto s = messages::trial_spec_msg::decode(ev.payload);
      ++proposed[{(*s)->trial_id(), (*s)->attempt()}];
    } else if (kind == wire::EventKind::TrialCompleted) {
      auto r = messages::trial_result_msg::decode(ev.payload);
      ++terminal[{(*r)->trial_id(), (*r)->attempt()}];
    } else if (kind == wire::EventKind::TrialLost) {
      auto s = messages::trial_spec_msg::decode(ev.payload);
      ++terminal[{(*s)->trial_id(), (*s)->attempt()}];
    }
    return true;
  }));
  EXPECT_GE(proposed.size(), 7u); // 2 baselines, >= 1 explore, 4 verification runs
  for (const auto& [key, n] : proposed) {
    EXPECT_EQ(n, 1);
    EXPECT_EQ(terminal[key], 1) << "trial " << key.first << "/" << key.second;
  }
  EXPECT_EQ(terminal.size(), proposed.size());
}

TEST_F(TuneEndToEnd, TheLogReplaysIntoTheSameRunState) {
  auto log = open_log();
  auto task = load_task_file(dir_->sub("tasks/fake_tune.toml"));
  ASSERT_TRUE(task);
  auto from_disk = store::load_run(*log, run_id());
  ASSERT_TRUE(from_disk);
  // Copy every event into an in-memory log (a different implementation) and fold again.
  store::memory_event_log copy;
  ASSERT_FALSE(log->for_each(0, [&](const store::recorded_event& ev) {
    EXPECT_TRUE(copy.append(ev.run_id, ev.sequence, {store::new_event{ev.kind, ev.payload}}));
    return true;
  }));
  auto from_copy = store::load_run(copy, run_id());
  ASSERT_TRUE(from_copy);
  EXPECT_EQ(make_report(*task, *from_disk).dump(), make_report(*task, *from_copy).dump());
  EXPECT_EQ(from_disk->stages_completed,
            (std::vector<std::string>{"init", "doctor", "run", "report", "apply"}));
}

TEST_F(TuneEndToEnd, EveryProposalIsRecomputedFromTheEventsBeforeIt) {
  auto log = open_log();
  auto task = load_task_file(dir_->sub("tasks/fake_tune.toml"));
  ASSERT_TRUE(task);
  store::run_projection before{run_id()};
  std::size_t checked = 0;
  ASSERT_FALSE(log->for_each_in_stream(run_id(), 0, [&](const store::recorded_event& ev) {
    if (static_cast<wire::EventKind>(ev.kind) == wire::EventKind::TrialProposed) {
      auto spec = messages::trial_spec_msg::decode(ev.payload);
      if ((*spec)->purpose()->str() == "explore") {
        auto in = decide::planner_input_for(*task, before.state());
        EXPECT_EQ(store::run_policy(before.state()), tuning::default_policy_name);
        auto again = tuning::make_policy(store::run_policy(before.state()))->propose(in, 1);
        EXPECT_FALSE(again.empty());
        if (!again.empty()) {
          EXPECT_EQ(again[0].config.key(), store::configuration_of(**spec).key());
        }
        ++checked;
      }
    }
    if (ev.known_kind())
      before.apply(ev);
    return true;
  }));
  EXPECT_GE(checked, 2u);
}

TEST_F(TuneEndToEnd, AnOomSettingIsNotProposedAgainUnchanged) {
  auto log = open_log();
  auto state = store::load_run(*log, run_id());
  ASSERT_TRUE(state);
  std::map<std::string, int> proposals;
  std::set<std::string> oom;
  for (const auto& t : state->trials) {
    ++proposals[t.config.key()];
    if (t.outcome == tuning::trial_outcome::oom) {
      oom.insert(t.config.key());
      EXPECT_NE(t.detail.find("exceeded the per-rank cap"), std::string::npos) << t.detail;
    }
  }
  ASSERT_FALSE(oom.empty()) << "the search never tried alloc_mb=300";
  for (const auto& key : oom)
    EXPECT_EQ(proposals[key], 1) << key;
  // alloc_mb is tagged memory-hungry and nothing saves memory: it is tried once in all.
  int hungry = 0;
  for (const auto& t : state->trials)
    hungry += std::get<std::int64_t>(t.config.knobs.at("alloc_mb")) == 300 ? 1 : 0;
  EXPECT_EQ(hungry, 1);
}

/// The early stop end to end (docs/node-runner.md "Early stop"): a knob that scales the loss by
/// 1.2 is a numerics change the contract rejects; once the doctor has calibrated, its trial
/// carries the loss reference, is stopped at its first step and ends contract_violation, and the
/// run still replays decision for decision.
TEST(TuneEarlyStop, ATrialWhoseLossDriftsIsStoppedAtItsFirstStepAndTheRunReplays) {
  test::temp_dir dir;
  fs::copy(std::string{INFRARSI_TEST_DATA_DIR} + "/workloads", dir.sub("workloads"),
           fs::copy_options::recursive);
  fs::create_directories(dir.sub("tasks"));
  std::ofstream{dir.sub("tasks/drift.toml")} << R"(name = "drift"
[workload]
workdir = "../workloads"
argv = ["python3", "fake_train.py", "--steps", "20", "--step-time", "0.1", "--tokens", "1024",
        "--loss-scale", "{loss_scale}"]
[limits]
timeout_s = 60
kill_grace_s = 1
[contract]
steps = 20
tokens_per_step = 1024
timed_steps = [1, 19]
loss_checkpoints = "all"
loss_rtol = 0.01
[budget]
trials = 1
baseline_repeats = 2
seed = 3
[[knobs]]
name = "loss_scale"
type = "real"
values = [1.0, 1.2]
default = 1.0
)";
  tune_options o;
  o.task_path = dir.sub("tasks/drift.toml");
  o.store_dir = dir.sub("store");
  std::ostringstream out;
  std::ostringstream err;
  ASSERT_EQ(run_tune(o, out, err), 0) << err.str();
  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  auto log = store::rocksdb_event_log::open(dir.sub("store/events"), ro);
  ASSERT_TRUE(log) << describe(log.error());
  auto runs = (*log)->list_runs();
  ASSERT_TRUE(runs && runs->size() == 1u);
  const auto id = runs->front().run_id;
  auto state = store::load_run(**log, id);
  ASSERT_TRUE(state);
  std::size_t stopped = 0;
  // The full trials' wall time on this machine now (a ratio side by side, not a fixed bound: a
  // loaded machine starts Python slowly).
  double baseline_wall_s = 1e9;
  for (const auto& t : state->trials)
    if (t.kind == tuning::purpose_kind::baseline)
      baseline_wall_s = std::min(baseline_wall_s, t.wall_time_s);
  for (const auto& t : state->trials) {
    if (t.kind == tuning::purpose_kind::baseline) {
      EXPECT_EQ(t.outcome, tuning::trial_outcome::ok) << t.detail;
      EXPECT_EQ(t.steps.size(), 20u); // 2 s of steps: they ran to their end
      continue;
    }
    if (t.kind != tuning::purpose_kind::explore)
      continue;
    ASSERT_EQ(std::get<double>(t.config.knobs.at("loss_scale")), 1.2);
    ++stopped;
    EXPECT_EQ(t.outcome, tuning::trial_outcome::contract_violation) << t.detail;
    EXPECT_EQ(t.detail.rfind("loss_drift: step 0 loss 6 differs from the reference 5 by 1", 0), 0u)
      << t.detail;
    EXPECT_NE(t.detail.find("; stopped early at step 0 of 20"), std::string::npos) << t.detail;
    EXPECT_LT(t.steps.size(), 10u);
    EXPECT_LT(t.wall_time_s, baseline_wall_s - 1.0)
      << "a whole trial (a baseline) took " << baseline_wall_s << " s, 2 s of it steps";
  }
  EXPECT_EQ(stopped, 1u);
  // The explore trial's TrialDispatched carried the doctor's reference; the baselines' did not.
  std::size_t with_reference = 0;
  std::size_t without = 0;
  ASSERT_FALSE((*log)->for_each_in_stream(id, 0, [&](const store::recorded_event& ev) {
    if (static_cast<wire::EventKind>(ev.kind) != wire::EventKind::TrialDispatched)
      return true;
    auto s = messages::trial_spec_msg::decode(ev.payload);
    EXPECT_TRUE(s);
    auto ref = adapters::loss_reference_of(**s);
    if ((*s)->purpose_kind() == wire::Purpose::Baseline) {
      EXPECT_FALSE(ref.has_value());
      ++without;
    } else if ((*s)->purpose_kind() == wire::Purpose::Explore) {
      EXPECT_TRUE(ref.has_value());
      if (ref) {
        EXPECT_EQ(ref->loss.size(), 20u);
        EXPECT_DOUBLE_EQ(ref->loss.at(0), 5.0);
      }
      ++with_reference;
    }
    return true;
  }));
  EXPECT_GE(without, 2u);
  EXPECT_EQ(with_reference, 1u);
  // The run replays, decision for decision.
  replay_options ro2;
  ro2.store_dir = dir.sub("store");
  ro2.run_id = id;
  std::ostringstream rout;
  std::ostringstream rerr;
  EXPECT_EQ(run_replay(ro2, rout, rerr), 0) << rout.str() << rerr.str();
}

} // namespace
} // namespace infrarsi::runtime
