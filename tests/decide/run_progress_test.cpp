// decide/run_progress.cpp: what `daemon status` and the dashboard show of a run, checked on a
// built run state and against the report of a committed golden log (the two must agree).

#include "decide/run_progress.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "adapters/task_file.hpp"
#include "decide/decisions.hpp"
#include "decide/report.hpp"
#include "store/rocksdb_event_log.hpp"
#include "test_util.hpp"

namespace infrarsi::decide {
namespace {

TEST(RunProgress, AFreshRunAndOneInItsSearch) {
  store::run_state run;
  auto p = progress_of(run);
  EXPECT_EQ(p.stage, "created");
  EXPECT_EQ(p.search_trials_done, 0u);
  EXPECT_FALSE(p.search_trials_budget);
  EXPECT_FALSE(p.best_measured_speedup);
  EXPECT_FALSE(p.best_verified_speedup);
  EXPECT_TRUE(to_json(p)["search_trials_budget"].is_null());
  EXPECT_FALSE(to_json(p).contains("promoted"));

  run.stages_started = {"init", "doctor", "run"};
  run.stages_completed = {"init", "doctor"};
  run.contract_doc = nlohmann::json{{"budget", {{"trials", 12}}}};
  run.noise = tuning::noise_estimate{};
  run.noise->mean_step_time_s = 2.0;
  auto trial = [&run](std::uint64_t id, tuning::purpose_kind kind, bool finished, double step_s) {
    tuning::trial_record t;
    t.trial_id = id;
    t.kind = kind;
    t.dispatched = true;
    t.finished = finished;
    t.outcome = finished ? tuning::trial_outcome::ok : tuning::trial_outcome::unset;
    t.verified = finished;
    t.timed_step_time_s = step_s;
    run.trials.push_back(t);
  };
  trial(1, tuning::purpose_kind::baseline, true, 2.0);
  trial(2, tuning::purpose_kind::explore, true, 1.6);  // 1.25x
  trial(3, tuning::purpose_kind::explore, true, 2.5);  // 0.8x
  trial(4, tuning::purpose_kind::explore, false, 0.0); // in flight
  p = progress_of(run);
  EXPECT_EQ(p.stage, "run");
  EXPECT_EQ(p.search_trials_budget, 12u);              // from the locked budget
  EXPECT_EQ(progress_of(run, 7).search_trials_budget, 7u); // the caller's budget_of wins
  EXPECT_EQ(p.search_trials_done, 2u);
  EXPECT_EQ(p.attempts_in_flight, 1u);
  ASSERT_TRUE(p.best_measured_speedup);
  EXPECT_DOUBLE_EQ(*p.best_measured_speedup, 1.25);
  EXPECT_FALSE(p.best_verified_speedup);

  store::reverification a;
  a.candidate_trial = 2;
  a.promotable = false;
  a.estimate.speedup = 1.3;
  store::reverification b = a;
  b.promotable = true;
  b.estimate.speedup = 1.2;
  b.estimate.ci_low = 1.1;
  b.estimate.ci_high = 1.3;
  run.reverifications = {a, b};
  p = progress_of(run);
  ASSERT_TRUE(p.best_verified_speedup); // only a promotable re-verification counts
  EXPECT_DOUBLE_EQ(*p.best_verified_speedup, 1.2);
  EXPECT_EQ(to_json(p)["best_verified_ci"], nlohmann::json({1.1, 1.3}));
  EXPECT_EQ(p.search_stopped, "");
  run.search_stopped = nlohmann::json{{"reason", "wall_clock"}};
  run.promotion = nlohmann::json{{"promoted", true}};
  p = progress_of(run);
  EXPECT_EQ(p.search_stopped, "wall_clock");
  EXPECT_EQ(to_json(p)["promoted"], true);
}

TEST(RunProgress, AgreesWithTheReportOfAGoldenRun) {
  namespace fs = std::filesystem;
  test::temp_dir dir;
  const std::string golden = std::string{INFRARSI_SOURCE_DIR} + "/tests/data/golden";
  // The 4-slot sim run: its budget (--trials 10) and SearchStopped are in its log.
  fs::copy(golden + "/sim_dense_1node_nodes4", dir.sub("store"), fs::copy_options::recursive);
  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  auto log = store::rocksdb_event_log::open(dir.sub("store/events"), ro);
  ASSERT_TRUE(log) << describe(log.error());
  auto run = store::load_run(**log, "sim-dense-1node-20261201-130610-9d59");
  ASSERT_TRUE(run) << describe(run.error());
  ASSERT_TRUE(run->contract_doc && run->contract_doc->contains("task_toml"));
  auto task = adapters::load_task_text((*run->contract_doc)["task_toml"].get<std::string>(),
                                       std::string{INFRARSI_SOURCE_DIR}
                                         + "/config/tasks/sim-dense-1node.toml");
  ASSERT_TRUE(task) << describe(task.error());
  auto p = progress_of(*run, budget_of(*task, *run).trials);
  EXPECT_EQ(progress_of(*run).search_trials_budget, p.search_trials_budget); // from the log
  auto report = make_report(*task, *run);

  EXPECT_EQ(p.stage, "apply");
  EXPECT_EQ(p.search_trials_budget, 10u); // the run was made with --trials 10
  EXPECT_EQ(p.search_trials_done, 10u);
  EXPECT_EQ(p.attempts_in_flight, 0u);
  double measured = 0.0;
  int explore = 0;
  for (const auto& t : report["trials"])
    if (t["purpose"] == "explore") {
      ++explore;
      if (t["speedup_vs_baseline"].is_number())
        measured = std::max(measured, t["speedup_vs_baseline"].get<double>());
    }
  ASSERT_GE(explore, 10);
  ASSERT_TRUE(p.best_measured_speedup);
  EXPECT_DOUBLE_EQ(*p.best_measured_speedup, measured);
  double verified = 0.0;
  for (const auto& r : report["reverifications"])
    if (r["promotable"].get<bool>())
      verified = std::max(verified, r["speedup"].get<double>());
  ASSERT_GT(verified, 1.0) << report["reverifications"].dump(2);
  ASSERT_TRUE(p.best_verified_speedup);
  EXPECT_DOUBLE_EQ(*p.best_verified_speedup, verified);
  ASSERT_TRUE(p.promoted);
  EXPECT_EQ(*p.promoted, run->promotion->value("promoted", false));
  EXPECT_EQ(p.search_stopped, run->search_stopped->value("reason", ""));
  EXPECT_EQ(p.search_stopped, "budget");
}

} // namespace
} // namespace infrarsi::decide
