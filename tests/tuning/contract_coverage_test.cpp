// Tests for tuning/contract_coverage.cpp: which contract checks a task's output can decide.

#include "tuning/contract_coverage.hpp"

#include <algorithm>
#include <map>

#include <gtest/gtest.h>

namespace infrarsi::tuning {
namespace {

/// code -> status of every check of `task`.
std::map<std::string, check_status> statuses(const task_spec& task) {
  std::map<std::string, check_status> out;
  for (const auto& c : contract_coverage(task))
    out[c.code] = c.status;
  return out;
}

task_spec json_task() {
  task_spec t;
  t.contract.steps = 4;
  t.contract.timed_first = 1;
  t.contract.timed_last = 3;
  t.contract.tokens_per_step = 128;
  t.contract.global_batch = 4;
  t.contract.params = 1000;
  t.contract.layers = 2;
  return t;
}

task_spec regex_task() {
  auto t = json_task();
  t.metrics.format = metrics_spec::format_kind::regex;
  t.metrics.regex_fields = {"step", "loss", "step_time_ms"};
  t.metrics.require_final_line = false; // as the loader sets it for regex
  t.metrics.tokens_per_step = 128;
  return t;
}

TEST(ContractCoverage, JsonLinesWithItsFinalLineObservesEveryCheck) {
  auto t = json_task();
  auto s = statuses(t);
  ASSERT_EQ(s.size(), 11u);
  for (const auto& [code, status] : s)
    EXPECT_EQ(status, check_status::observed) << code;
  EXPECT_TRUE(vacuous_checks(t).empty());
  t.metrics.require_final_line = false;
  s = statuses(t);
  EXPECT_EQ(s["params"], check_status::partial);
  EXPECT_EQ(s["global_batch"], check_status::partial);
  EXPECT_EQ(s["tokens"], check_status::observed);
}

TEST(ContractCoverage, RegexWithoutATokensFieldComparesTheTaskWithItself) {
  auto t = regex_task();
  auto s = statuses(t);
  EXPECT_EQ(s["tokens"], check_status::vacuous);
  EXPECT_EQ(s["global_batch"], check_status::vacuous);
  EXPECT_EQ(s["params"], check_status::vacuous);
  EXPECT_EQ(s["layers"], check_status::vacuous);
  EXPECT_EQ(s["timed_window"], check_status::partial);
  EXPECT_EQ(s["steps"], check_status::observed);
  EXPECT_EQ(s["loss_drift"], check_status::observed);
  EXPECT_EQ(s["clock"], check_status::observed);
  auto v = vacuous_checks(t);
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(v[0].code, "tokens");
  EXPECT_EQ(v[0].evidence,
            "metrics.regex has no tokens field: every step is credited metrics.tokens_per_step "
            "= 128, the task's own constant, so the check compares contract.tokens_per_step "
            "with itself and cannot fail");
  // Another constant than the contract's: no trial can pass.
  t.metrics.tokens_per_step = 64;
  EXPECT_EQ(statuses(t)["tokens"], check_status::fails_always);
  // A tokens field: observed.
  t.metrics.regex_fields.push_back("tokens");
  EXPECT_EQ(statuses(t)["tokens"], check_status::observed);
}

TEST(ContractCoverage, MissingLossOrTimeFieldsAndWaivedClocks) {
  auto t = regex_task();
  t.metrics.regex_fields = {"step", "tokens"};
  auto s = statuses(t);
  EXPECT_EQ(s["loss_non_finite"], check_status::vacuous);
  EXPECT_EQ(s["loss_not_falling"], check_status::vacuous);
  EXPECT_EQ(s["loss_drift"], check_status::vacuous);
  EXPECT_EQ(s["step_times"], check_status::fails_always);
  EXPECT_EQ(s["clock"], check_status::fails_always);
  auto j = json_task();
  j.contract.clock_check = false;
  EXPECT_EQ(statuses(j)["clock"], check_status::off);
  j.contract.simulated_time = true;
  s = statuses(j);
  EXPECT_EQ(s["clock"], check_status::off);
  EXPECT_EQ(s["step_times"], check_status::partial);
  // Contract values of 0 are off, not vacuous.
  task_spec none;
  s = statuses(none);
  EXPECT_EQ(s["steps"], check_status::off);
  EXPECT_EQ(s["tokens"], check_status::off);
  EXPECT_EQ(s["params"], check_status::off);
  EXPECT_EQ(s["timed_window"], check_status::off);
}

TEST(ContractCoverage, TheLossModeDecidesWhatTheDriftCheckCompares) {
  auto t = regex_task();
  t.contract.loss_mode = loss_mode::window;
  t.contract.loss_window = 5;
  auto c = contract_coverage(t);
  auto drift = std::find_if(c.begin(), c.end(), [](const auto& x) { return x.code == "loss_drift"; });
  ASSERT_NE(drift, c.end());
  EXPECT_EQ(drift->status, check_status::observed);
  EXPECT_NE(drift->evidence.find("each window of contract.loss_window = 5 steps"),
            std::string::npos)
    << drift->evidence;
  // Eval mode with a regex that cannot show an eval loss: every trial would fail, and it says so.
  t.contract.loss_mode = loss_mode::eval;
  EXPECT_EQ(statuses(t)["loss_drift"], check_status::fails_always);
  t.metrics.regex_fields.push_back("eval_loss");
  EXPECT_EQ(statuses(t)["loss_drift"], check_status::observed);
  // json_lines reads "eval_loss" from each line.
  auto j = json_task();
  j.contract.loss_mode = loss_mode::eval;
  EXPECT_EQ(statuses(j)["loss_drift"], check_status::observed);
}

TEST(ContractCoverage, TheWorkIsEnforcedByTheConstraintsAndConstants) {
  auto t = regex_task();
  EXPECT_TRUE(work_enforced_by(t).empty());
  t.constraints = {"global_batch % micro_batch == 0"};
  t.constants["global_batch"] = std::int64_t{16};
  auto e = work_enforced_by(t);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0], "constraint 'global_batch % micro_batch == 0' (checked before every launch; a "
                  "configuration that breaks it never runs)");
  EXPECT_EQ(e[1], "constant global_batch = 16 (fixed, part of the contract; rendered where argv "
                  "and env name it)");
}

} // namespace
} // namespace infrarsi::tuning
