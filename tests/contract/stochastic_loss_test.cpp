// Issue 19 item 1, end to end: the stochastic fake workload (tests/data/workloads/
// stochastic_train.py) runs for real through the node-runner's launcher under each loss mode
// (tests/data/tasks/stochastic_{pointwise,window,eval}.toml), is calibrated by the doctor and
// judged by the verifier actor. Honest batch splits (same global batch, same tokens per step,
// another micro-batch's loss printed) pass window and eval and are rejected by pointwise, as the
// issue saw; every planted cheat (drift, skipped backward, frozen optimizer) fails window and
// eval with its reason code.

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "contract/contract_harness.hpp"
#include "tuning/contract_check.hpp"

namespace infrarsi {
namespace {

using test::contract_harness;
using test::has;

std::string task_path(const std::string& mode) {
  return std::string{INFRARSI_SOURCE_DIR} + "/tests/data/tasks/stochastic_" + mode + ".toml";
}

tuning::knob_assignment split(std::int64_t micro_batch, const std::string& cheat = "none") {
  return {{"micro_batch", micro_batch}, {"cheat", cheat}};
}

/// Three baselines (the task's defaults: micro_batch 8) and the doctor's calibration.
nlohmann::json doctor(contract_harness& h) {
  for (int i = 0; i < 3; ++i)
    h.run({}, "baseline");
  return h.calibrate();
}

TEST(ContractLossModes, PointwiseRejectsHonestBatchSplitsOfTheStochasticWorkload) {
  contract_harness h{task_path("pointwise")};
  auto doc = doctor(h);
  ASSERT_FALSE(doc.contains("error")) << doc.dump();
  EXPECT_FALSE(doc.contains("loss_windows"));
  EXPECT_FALSE(doc.contains("eval_reference"));
  // The doctor's repeats are bit-identical: a spread of ~0 at every step (the rounding of their
  // mean), so the calibrated tolerance is rtol x |reference|.
  ASSERT_EQ(doc["reference"].size(), 40u);
  for (const auto& r : doc["reference"])
    EXPECT_LE(r["spread"].get<double>(), 1e-15 * r["loss"].get<double>() + 1e-300) << r.dump();
  EXPECT_TRUE(h.check(h.run({}, "explore")).at("violations").empty());
  for (std::int64_t mb : {32, 2}) {
    SCOPED_TRACE(mb);
    auto verdict = h.check(h.run({}, "explore", split(mb)));
    std::cout << "pointwise micro_batch " << mb << ": " << verdict["violations"].dump() << '\n';
    EXPECT_EQ(contract_harness::codes(verdict), std::vector<std::string>{"loss_drift"});
  }
}

/// Honest splits pass, every cheat fails with its code, under `mode`.
void honest_pass_cheats_fail(const std::string& mode) {
  contract_harness h{task_path(mode)};
  ASSERT_EQ(tuning::to_string(h.task().contract.loss_mode), mode);
  auto doc = doctor(h);
  ASSERT_FALSE(doc.contains("error")) << doc.dump();
  if (mode == "window") {
    ASSERT_EQ(doc["loss_windows"].size(), 4u) << doc.dump();
    EXPECT_EQ(doc["loss_windows"][3]["first"], 30);
    EXPECT_EQ(doc["loss_windows"][3]["last"], 39);
    EXPECT_EQ(doc["loss_windows"][3]["runs"], 3);
    // Bit-identical repeats: their window means differ by rounding only.
    EXPECT_LE(doc["loss_windows"][3]["between_var"].get<double>(), 1e-30);
    EXPECT_GT(doc["loss_windows"][0]["within_var"].get<double>(), 0.0);
  } else {
    ASSERT_EQ(doc["eval_reference"].size(), 8u) << doc.dump();
    EXPECT_EQ(doc["eval_reference"][0]["step"], 4);
    EXPECT_EQ(doc["eval_reference"][7]["step"], 39);
  }
  // The reference the verifier judges by is the one the doctor logged.
  auto state = h.state();
  EXPECT_EQ(state.reference.windows.size(), mode == "window" ? 4u : 0u);
  EXPECT_EQ(state.reference.eval_loss.size(), mode == "eval" ? 8u : 0u);
  for (std::int64_t mb : {32, 16, 4, 2, 1}) {
    SCOPED_TRACE(mb);
    auto verdict = h.check(h.run({}, "explore", split(mb)));
    EXPECT_EQ(verdict["outcome"], "ok") << verdict.dump();
    EXPECT_TRUE(verdict["violations"].empty()) << verdict.dump();
  }
  const std::vector<std::pair<std::string, std::vector<std::string>>> cheats = {
    {"drift", {"loss_drift"}},
    {"skip_backward", {"loss_not_falling", "loss_drift"}},
    {"frozen_optimizer", {"loss_not_falling", "loss_drift"}},
  };
  for (const auto& [cheat, want] : cheats) {
    for (std::int64_t mb : {8, 2}) {
      SCOPED_TRACE(cheat + " micro_batch " + std::to_string(mb));
      auto verdict = h.check(h.run({}, "explore", split(mb, cheat)));
      std::cout << mode << " " << cheat << " micro_batch " << mb << ": "
                << verdict["violations"].dump() << '\n';
      EXPECT_EQ(contract_harness::codes(verdict), want) << verdict.dump();
    }
  }
  // Every explore trial is usable exactly when it is honest.
  std::size_t explore = 0;
  for (const auto& t : h.state().trials) {
    if (t.kind != tuning::purpose_kind::explore)
      continue;
    ++explore;
    bool cheat = std::get<std::string>(t.config.knobs.at("cheat")) != "none";
    EXPECT_EQ(t.usable(), !cheat) << t.trial_id << " " << t.config.key();
  }
  EXPECT_EQ(explore, 11u);
}

TEST(ContractLossModes, WindowPassesHonestSplitsAndCatchesEveryPlantedCheat) {
  honest_pass_cheats_fail("window");
}

TEST(ContractLossModes, EvalPassesHonestSplitsAndCatchesEveryPlantedCheat) {
  honest_pass_cheats_fail("eval");
}

} // namespace
} // namespace infrarsi
