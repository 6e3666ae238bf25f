// Issue 7's planted-cheat suite: every planted cheat and drift of the real PyTorch workload
// (config/tasks/torch_gpt_contract.toml) and of the cluster simulator (sim-dense-1node) runs for
// real through the node-runner's launcher (scope lock, copy, patch, ranks, metrics, harness
// clock), is logged as the supervisor logs it, and is judged by the verifier actor; each must be
// rejected with its reason code (tuning/contract_check.hpp), and each genuine patch must pass.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "contract/contract_harness.hpp"
#include "test_util.hpp"
#include "tuning/contract_check.hpp"

namespace infrarsi {
namespace {

using test::contract_harness;
using test::has;

TEST(ContractCheats, RealWorkloadEveryPlantedCheatIsRejectedWithItsReason) {
  contract_harness h{std::string{INFRARSI_SOURCE_DIR} + "/config/tasks/torch_gpt_contract.toml"};
  ASSERT_FALSE(h.lock().empty());
  for (int i = 0; i < 2; ++i)
    h.run({}, "baseline");
  auto doctor = h.calibrate();
  ASSERT_FALSE(doctor.contains("error")) << doctor.dump();
  ASSERT_EQ(doctor["noise"]["runs"], 2);

  // patch -> the reason code it must be rejected with ("" = it must pass).
  const std::map<std::string, std::string> expected = {
    {"fused_qkv", ""},
    {"attention_prescale_inplace", ""},
    {"fused_gelu", ""},
    {"all_genuine", ""},
    {"cheat_fewer_tokens", "tokens"},
    {"cheat_fewer_steps", "steps"},
    {"cheat_skip_backward", "loss_not_falling"},
    {"cheat_loss_drift", "loss_drift"},
    {"cheat_timed_window", "timed_window"},
    {"cheat_fake_timer", "clock"},
    {"cheat_frozen_file", "scope"},
  };
  // Every patch of the task is covered, so a new planted patch cannot go untested.
  ASSERT_EQ(h.task().patches.size(), expected.size());
  for (const auto& p : h.task().patches) {
    SCOPED_TRACE(p.name);
    ASSERT_EQ(expected.count(p.name), 1u);
    auto id = h.run({p.name}, "explore");
    auto verdict = h.check(id);
    auto codes = contract_harness::codes(verdict);
    std::cout << p.name << ": " << verdict["violations"].dump() << '\n';
    const auto& want = expected.at(p.name);
    if (want.empty()) {
      EXPECT_EQ(verdict["outcome"], "ok") << verdict.dump();
      EXPECT_TRUE(codes.empty()) << verdict.dump();
      EXPECT_GT(verdict["timed_step_time_s"].get<double>(), 0.0);
    } else {
      EXPECT_TRUE(has(codes, want)) << "want " << want << ": " << verdict.dump();
    }
  }
  auto state = h.state();
  for (const auto& t : state.trials) {
    if (t.purpose != "explore")
      continue;
    bool cheat = !t.config.patches.empty() && t.config.patches[0].rfind("cheat_", 0) == 0;
    EXPECT_EQ(t.usable(), !cheat) << t.trial_id << " " << t.config.key();
  }
  // The frozen-file cheat never ran: rejected by the scope check before launch, naming the path.
  for (const auto& t : state.trials)
    if (t.config.patches == std::vector<std::string>{"cheat_frozen_file"}) {
      EXPECT_EQ(t.outcome, tuning::trial_outcome::contract_violation);
      EXPECT_NE(t.detail.find("train.py"), std::string::npos) << t.detail;
      EXPECT_TRUE(t.steps.empty());
    }
}

TEST(ContractCheats, SimulatorCheatAndDriftAreRejectedGenuinePatchPasses) {
  contract_harness h{std::string{INFRARSI_SOURCE_DIR} + "/config/tasks/sim-dense-1node.toml"};
  for (int i = 0; i < 3; ++i)
    h.run({}, "baseline");
  auto doctor = h.calibrate();
  ASSERT_FALSE(doctor.contains("error")) << doctor.dump();
  const std::map<std::string, std::string> expected = {
    {"fast_dataloader", "loss_drift"},       // half of every sample: the loss sees half the data
    {"bf16_optimizer_states", "loss_drift"}, // numerics drift 1.5 % + 0.5 % per step
    {"fused_rmsnorm", ""},
    {"flash3_attention", ""},
  };
  for (const auto& [patch, want] : expected) {
    SCOPED_TRACE(patch);
    ASSERT_NE(h.task().find_patch(patch), nullptr);
    auto verdict = h.check(h.run({patch}, "explore"));
    auto codes = contract_harness::codes(verdict);
    if (want.empty())
      EXPECT_TRUE(codes.empty()) << verdict.dump();
    else
      EXPECT_TRUE(has(codes, want)) << verdict.dump();
  }
}

/// A workload edited after init is refused before launch: the scope lock no longer matches.
TEST(ContractCheats, WorkloadEditedAfterInitIsRefusedBeforeLaunch) {
  test::temp_dir dir;
  namespace fs = std::filesystem;
  const std::string src = INFRARSI_SOURCE_DIR;
  fs::create_directories(dir.sub("config"));
  fs::copy(src + "/config/tasks", dir.sub("config/tasks"), fs::copy_options::recursive);
  fs::create_directories(dir.sub("workloads"));
  fs::copy(src + "/workloads/torch_gpt", dir.sub("workloads/torch_gpt"),
           fs::copy_options::recursive);
  contract_harness h{dir.sub("config/tasks/torch_gpt_contract.toml")};
  {
    std::ofstream edit{dir.sub("workloads/torch_gpt/data.py"), std::ios::app};
    edit << "\n# edited after init\n";
  }
  auto id = h.run({}, "explore");
  auto state = h.state();
  const auto* t = state.find(id, 0);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->outcome, tuning::trial_outcome::contract_violation);
  EXPECT_NE(t->detail.find("'data.py' changed since the scope was locked"), std::string::npos)
    << t->detail;
  EXPECT_TRUE(t->steps.empty());
}

} // namespace
} // namespace infrarsi
