// decide/report.cpp: the report names the contract checks a task's output cannot decide and what
// enforces the work instead (issue 19, tuning/contract_coverage.hpp).

#include "decide/report.hpp"

#include <map>

#include <gtest/gtest.h>

#include "store/run_projection.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/planner.hpp"

namespace infrarsi::decide {
namespace {

tuning::task_spec regex_task() {
  tuning::task_spec t;
  t.name = "r";
  t.metrics.format = tuning::metrics_spec::format_kind::regex;
  t.metrics.regex = "iter (\\d+): loss ([0-9.]+), time ([0-9.]+)ms";
  t.metrics.regex_fields = {"step", "loss", "step_time_ms"};
  t.metrics.require_final_line = false;
  t.metrics.tokens_per_step = 4096;
  t.contract.tokens_per_step = 4096;
  t.constraints = {"global_batch % 4 == 0"};
  t.constants["global_batch"] = std::int64_t{16};
  return t;
}

/// A run with the documents every finished run has (the markdown needs them).
store::run_state finished_run() {
  store::run_state run;
  run.doctor_doc = nlohmann::json{{"noise", {{"runs", 1}, {"cv", 0.01}}}};
  run.promotion = nlohmann::json{{"promoted", false}, {"reason", "nothing to promote"}};
  return run;
}

TEST(ReportContractCoverage, ARegexTaskNamesTheVacuousTokensCheckAndWhatEnforcesTheWork) {
  auto task = regex_task();
  auto report = make_report(task, finished_run());
  const auto& cov = report["contract_coverage"];
  ASSERT_EQ(cov["vacuous"].size(), 1u) << cov.dump(2);
  EXPECT_EQ(cov["vacuous"][0]["code"], "tokens");
  EXPECT_EQ(cov["vacuous"][0]["status"], "vacuous");
  ASSERT_EQ(cov["work_enforced_by"].size(), 2u);
  EXPECT_EQ(cov["work_enforced_by"][0].get<std::string>().rfind("constraint 'global_batch % 4 == 0'", 0), 0u);
  auto md = render_markdown(report);
  EXPECT_NE(md.find("Checks this task's output cannot decide (`infrarsi check TASK`):\n\n- tokens "
                    "(vacuous): metrics.regex has no tokens field: every step is credited "
                    "metrics.tokens_per_step = 4096, the task's own constant"),
            std::string::npos)
    << md;
  EXPECT_NE(md.find("The work is enforced instead by the task:\n\n- constraint 'global_batch % 4 "
                    "== 0' (checked before every launch"),
            std::string::npos)
    << md;

  // A tokens field in the regex: nothing to report, and the section is absent.
  task.metrics.regex = "iter (\\d+): loss ([0-9.]+), time ([0-9.]+)ms, tokens (\\d+)";
  task.metrics.regex_fields.push_back("tokens");
  report = make_report(task, finished_run());
  EXPECT_TRUE(report["contract_coverage"]["vacuous"].empty());
  EXPECT_EQ(render_markdown(report).find("Checks this task's output cannot decide"),
            std::string::npos);
}

/// What report.html draws, for a run with nothing measured: every figure present and empty, and
/// the memory model says why it was not fitted (the page shows that sentence).
TEST(ReportFigures, ARunWithoutTrialsHasEmptyFiguresAndSaysWhyThereIsNoMemoryModel) {
  auto task = regex_task();
  auto report = make_report(task, finished_run());
  EXPECT_EQ(report["search_progress"], nlohmann::json::array());
  EXPECT_EQ(report["top_configurations"], nlohmann::json::array());
  EXPECT_TRUE(report["noise_band"].is_null());
  EXPECT_EQ(report["prior_revision"]["points"], nlohmann::json::array());
  const auto& mm = report["memory_model"];
  EXPECT_EQ(mm["fitted"], false);
  EXPECT_EQ(mm["why"], "no memory capacity: the task gives neither limits.device_memory_bytes nor "
                       "limits.memory_cap_bytes, and no trial ran out of memory");
  task.limits.device_memory_bytes = 1u << 30;
  report = make_report(task, finished_run());
  EXPECT_EQ(report["memory_model"]["why"], "no trial measured its peak memory");
  EXPECT_EQ(report["memory_model"]["capacity_bytes"], double(1u << 30));
}

/// A finished, verified trial of `config` (peak bytes 0: none measured).
tuning::trial_record finished_trial(std::uint64_t id, const tuning::configuration& config,
                                    const char* purpose, tuning::trial_outcome outcome,
                                    double peak_bytes) {
  tuning::trial_record r;
  r.trial_id = id;
  r.purpose = purpose;
  r.kind = std::string{purpose} == "baseline" ? tuning::purpose_kind::baseline
                                               : tuning::purpose_kind::explore;
  r.config = config;
  r.dispatched = r.finished = r.verified = true;
  r.outcome = outcome;
  r.timed_step_time_s = outcome == tuning::trial_outcome::ok ? 1.0 : 0.0;
  r.peak_memory_bytes = static_cast<std::uint64_t>(peak_bytes);
  return r;
}

// Issue 18: the report shows the OOM boundary the memory model believes in.
TEST(ReportFigures, TheOomBoundaryAroundTheBaselineAndThePromotionFollowsTheMemoryModel) {
  tuning::task_spec task;
  task.name = "mem";
  tuning::knob_spec mb;
  mb.name = "micro_batch";
  mb.type = tuning::knob_type::integer;
  for (std::int64_t v : {1, 2, 4, 8, 16})
    mb.values.emplace_back(v);
  mb.default_value = std::int64_t{1};
  mb.tags = {"memory-hungry"};
  tuning::knob_spec overlap;
  overlap.name = "overlap";
  overlap.type = tuning::knob_type::boolean;
  overlap.default_value = false;
  task.knobs = {mb, overlap};
  task.limits.device_memory_bytes = 80'000'000'000ull;
  auto run = finished_run();
  run.contract_doc = nlohmann::json{{"policy", "bayes_ei/2"}};
  auto base = tuning::baseline_configuration(task);
  for (std::uint64_t i = 1; i <= 3; ++i)
    run.trials.push_back(finished_trial(i, base, "baseline", tuning::trial_outcome::ok, 30e9));
  auto mb2 = base;
  mb2.knobs["micro_batch"] = std::int64_t{2};
  mb2.knobs["overlap"] = true;
  run.trials.push_back(finished_trial(4, mb2, "explore", tuning::trial_outcome::ok, 36e9));
  auto mb8 = base;
  mb8.knobs["micro_batch"] = std::int64_t{8};
  run.trials.push_back(finished_trial(5, mb8, "explore", tuning::trial_outcome::oom, 0));
  run.promotion = nlohmann::json::object();
  (*run.promotion)["promoted"] = true;
  (*run.promotion)["config"] = store::to_json(mb2);
  auto report = make_report(task, run);
  const auto& mm = report["memory_model"];
  ASSERT_TRUE(mm["fitted"].get<bool>()) << mm.dump();
  ASSERT_EQ(mm["boundary"].size(), 2u) << mm["boundary"].dump(); // micro_batch, twice
  for (const auto& row : mm["boundary"]) {
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row["knob"], "micro_batch");
    ASSERT_EQ(row["values"].size(), 5u);
    std::map<std::int64_t, double> p;
    for (const auto& v : row["values"])
      p[v["value"].get<std::int64_t>()] = v["p_oom"].get<double>();
    // The measured peaks fit by a wide margin; micro-batch 8 ran out of memory, and 16 needs more.
    EXPECT_LT(p[1], 0.2);
    EXPECT_LT(p[2], 0.2);
    EXPECT_GT(p[8], 0.5);
    EXPECT_GT(p[16], 0.8);
    EXPECT_LE(p[8], p[16]);
    ASSERT_TRUE(row["fits_up_to"].is_number_integer());
    const auto fits = row["fits_up_to"].get<std::int64_t>();
    EXPECT_TRUE(fits == 2 || fits == 4) << fits;
    EXPECT_LT(p[fits], 0.5);
  }
  EXPECT_EQ(mm["boundary"][0]["around"], "baseline");
  EXPECT_EQ(mm["boundary"][0]["current"], 1);
  EXPECT_EQ(mm["boundary"][1]["around"], "promoted");
  EXPECT_EQ(mm["boundary"][1]["current"], 2);
  auto md = render_markdown(report);
  EXPECT_NE(md.find("## OOM boundary (memory model)"), std::string::npos) << md;
  EXPECT_NE(md.find("against a capacity of 76294 MiB"), std::string::npos) << md;
  EXPECT_NE(md.find("| baseline | micro_batch | 1 | "
                    + std::to_string(mm["boundary"][0]["fits_up_to"].get<std::int64_t>())
                    + " | 1: 0."),
            std::string::npos)
    << md;
  // Without a fitted model there is no boundary section.
  task.limits.device_memory_bytes = 0;
  run.trials.pop_back(); // no OOM, no capacity: nothing to fit against
  EXPECT_EQ(render_markdown(make_report(task, run)).find("## OOM boundary"), std::string::npos);
}

// Each trial says where its peak memory came from (docs/node-runner.md "Device memory").
TEST(ReportTrials, EachTrialSaysWhereItsPeakMemoryCameFrom) {
  tuning::task_spec task;
  task.name = "gpu";
  task.limits.device_memory_bytes = 16ull << 30;
  auto run = finished_run();
  auto base = tuning::baseline_configuration(task);
  auto unobserved = finished_trial(1, base, "baseline", tuning::trial_outcome::ok, 0);
  unobserved.memory = tuning::memory_source::unobserved;
  unobserved.host_peak_bytes = 9'437'184; // the launcher's view of the rank: not device memory
  auto sampled = finished_trial(2, base, "baseline", tuning::trial_outcome::ok, 3713.0 * 1048576);
  sampled.memory = tuning::memory_source::device_sampled;
  auto reported = finished_trial(3, base, "baseline", tuning::trial_outcome::ok, 12e9);
  reported.memory = tuning::memory_source::workload;
  auto logged_before = finished_trial(4, base, "baseline", tuning::trial_outcome::ok, 11e9);
  run.trials = {unobserved, sampled, reported, logged_before};
  auto trials = make_report(task, run)["trials"];
  ASSERT_EQ(trials.size(), 4u) << trials.dump();
  EXPECT_EQ(trials[0]["memory_source"], "unobserved");
  EXPECT_EQ(trials[0]["peak_memory_bytes"], 0u);
  EXPECT_EQ(trials[1]["memory_source"], "device_sampled");
  EXPECT_EQ(trials[1]["peak_memory_bytes"], 3713ull * 1048576);
  EXPECT_EQ(trials[2]["memory_source"], "workload");
  EXPECT_EQ(trials[3]["memory_source"], "unknown");
  EXPECT_EQ(trials[3]["peak_memory_bytes"], 11'000'000'000ull);
}

// Issue 19: the report says what each trial's loss was compared with and how far it could be.
TEST(ReportLossInvariant, WindowModeShowsEachWindowsReferenceAndTolerance) {
  auto task = regex_task();
  task.contract.loss_mode = tuning::loss_mode::window;
  task.contract.loss_window = 10;
  auto run = finished_run();
  tuning::loss_window_reference w;
  w.first = 0;
  w.last = 9;
  w.mean = 4.0;
  w.within_var = 0.01;
  w.between_var = 0.0001;
  w.runs = 3;
  run.reference.windows = {w};
  auto report = make_report(task, run);
  const auto& li = report["loss_invariant"];
  EXPECT_EQ(li["mode"], "window");
  ASSERT_EQ(li["windows"].size(), 1u);
  // se^2 = (0.01 + 0.01) / 10 + 0.0001 x (1 + 1/3) = 0.00213333; 4 se = 0.184752.
  EXPECT_NEAR(li["windows"][0]["tolerance"].get<double>(), 0.184752, 1e-6);
  EXPECT_EQ(li["windows"][0]["reference"].get<double>(), 4.0);
  auto md = render_markdown(report);
  EXPECT_NE(md.find("loss invariant: window (mean training loss over windows of 10 steps"),
            std::string::npos)
    << md;
  EXPECT_NE(md.find("steps 0-9 4.0000 +/- 0.1848;"), std::string::npos) << md;
}

TEST(ReportLossInvariant, PointwiseModeShowsTheCalibratedToleranceOfEachComparedStep) {
  auto task = regex_task();
  auto run = finished_run();
  run.reference.loss = {{0, 5.0}, {1, 4.0}};
  run.reference.spread = {{0, 0.01}, {1, 0.0}};
  auto report = make_report(task, run);
  const auto& steps = report["loss_invariant"]["steps"];
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_NEAR(steps[0]["tolerance"].get<double>(), 0.03, 1e-12);   // 3 x spread
  EXPECT_NEAR(steps[1]["tolerance"].get<double>(), 4.0e-4, 1e-12); // rtol x |reference|
  auto md = render_markdown(report);
  EXPECT_NE(md.find("step 0 5.0000 +/- 0.0300; step 1 4.0000 +/- 0.0004;"), std::string::npos)
    << md;
}

} // namespace
} // namespace infrarsi::decide
