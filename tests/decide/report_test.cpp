// decide/report.cpp: the report names the contract checks a task's output cannot decide and what
// enforces the work instead (issue 19, tuning/contract_coverage.hpp).

#include "decide/report.hpp"

#include <gtest/gtest.h>

#include "store/run_projection.hpp"

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

} // namespace
} // namespace infrarsi::decide
