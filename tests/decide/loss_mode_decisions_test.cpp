// Issue 19: the loss mode in the locked contract and in the doctor's calibration
// (decide/decisions.cpp). A pointwise task's contract and calibration are what they were before
// the mode existed (their hash is compared on resume and replay); window and eval add their keys.

#include "decide/decisions.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tuning/contract_check.hpp"

namespace infrarsi::decide {
namespace {

tuning::task_spec task_with(tuning::loss_mode mode) {
  tuning::task_spec t;
  t.name = "t";
  t.contract.steps = 6;
  t.contract.timed_first = 1;
  t.contract.timed_last = 5;
  t.contract.simulated_time = true;
  t.contract.loss_mode = mode;
  if (mode == tuning::loss_mode::window)
    t.contract.loss_window = 3;
  if (mode == tuning::loss_mode::eval)
    t.contract.eval_steps = {2, 5};
  return t;
}

TEST(DecideLossMode, PointwiseContractKeepsItsKeysAndHashInput) {
  auto j = contract_json(task_with(tuning::loss_mode::pointwise));
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it)
    keys.push_back(it.key());
  // Exactly the keys of contracts locked before loss_mode existed.
  EXPECT_EQ(keys, (std::vector<std::string>{"clock_check", "clock_tolerance", "constraints",
                                            "global_batch", "layers", "loss_atol",
                                            "loss_checkpoints", "loss_rtol", "params",
                                            "simulated_time", "steps", "timed_steps",
                                            "tokens_per_step", "wall_tolerance"}));
  EXPECT_EQ(contract_changes(j, task_with(tuning::loss_mode::pointwise)), "");
}

TEST(DecideLossMode, WindowAndEvalAreInTheContractAndAChangeIsNamedOnResume) {
  auto pointwise = contract_json(task_with(tuning::loss_mode::pointwise));
  auto window = contract_json(task_with(tuning::loss_mode::window));
  EXPECT_EQ(window.at("loss_mode"), "window");
  EXPECT_EQ(window.at("loss_window"), 3);
  EXPECT_FALSE(window.contains("eval_steps"));
  auto eval = contract_json(task_with(tuning::loss_mode::eval));
  EXPECT_EQ(eval.at("loss_mode"), "eval");
  EXPECT_EQ(eval.at("eval_steps"), (std::vector<std::uint32_t>{2, 5}));
  EXPECT_FALSE(eval.contains("loss_window"));
  EXPECT_EQ(contract_changes(pointwise, task_with(tuning::loss_mode::window)),
            "contract.loss_mode (locked absent, now \"window\"), contract.loss_window (locked "
            "absent, now 3)");
  EXPECT_EQ(contract_changes(window, task_with(tuning::loss_mode::pointwise)),
            "contract.loss_mode (locked \"window\", now absent), contract.loss_window (locked 3, "
            "now absent)");
}

/// A run whose two finished baselines report `loss(run, step)` and an eval loss at steps 2, 5.
store::run_state run_with_baselines() {
  store::run_state run;
  for (std::uint64_t id = 0; id < 2; ++id) {
    tuning::trial_record t;
    t.trial_id = id;
    t.kind = tuning::purpose_kind::baseline;
    t.purpose = "baseline";
    t.finished = true;
    t.outcome = tuning::trial_outcome::ok;
    for (std::uint32_t s = 0; s < 6; ++s) {
      tuning::step_point p{s, 6.0 - s + (s % 2 == 0 ? 0.1 : -0.1) * static_cast<double>(id + 1),
                           1024, 0.5};
      if (s == 2 || s == 5)
        p.eval_loss = 5.0 - s + 0.01 * static_cast<double>(id);
      t.steps.push_back(p);
    }
    run.trials.push_back(t);
  }
  return run;
}

TEST(DecideLossMode, CalibrationAddsOnlyWhatTheModeCompares) {
  auto run = run_with_baselines();
  auto pointwise = nlohmann::json::parse(calibrate_doc(task_with(tuning::loss_mode::pointwise), run));
  EXPECT_FALSE(pointwise.contains("loss_windows"));
  EXPECT_FALSE(pointwise.contains("eval_reference"));
  ASSERT_EQ(pointwise.at("reference").size(), 6u);

  auto task = task_with(tuning::loss_mode::window);
  auto window = nlohmann::json::parse(calibrate_doc(task, run));
  auto ref = tuning::make_loss_reference(task.contract, run.trials);
  ASSERT_EQ(ref.windows.size(), 2u);
  ASSERT_EQ(window.at("loss_windows").size(), 2u);
  EXPECT_EQ(window["loss_windows"][1]["first"], 3);
  EXPECT_EQ(window["loss_windows"][1]["last"], 5);
  EXPECT_EQ(window["loss_windows"][1]["runs"], 2);
  EXPECT_DOUBLE_EQ(window["loss_windows"][1]["mean"].get<double>(), ref.windows[1].mean);
  EXPECT_DOUBLE_EQ(window["loss_windows"][1]["within_var"].get<double>(), ref.windows[1].within_var);
  EXPECT_DOUBLE_EQ(window["loss_windows"][1]["between_var"].get<double>(),
                   ref.windows[1].between_var);
  // Steps 3, 4, 5: run 0 means (2.9 + 2.1 + 0.9) / 3, run 1 (2.8 + 2.2 + 0.8) / 3: they differ.
  EXPECT_GT(ref.windows[1].between_var, 0.0);
  EXPECT_FALSE(window.contains("eval_reference"));

  auto eval = nlohmann::json::parse(calibrate_doc(task_with(tuning::loss_mode::eval), run));
  ASSERT_EQ(eval.at("eval_reference").size(), 2u);
  EXPECT_EQ(eval["eval_reference"][0]["step"], 2);
  EXPECT_DOUBLE_EQ(eval["eval_reference"][0]["loss"].get<double>(), 3.005);
  EXPECT_NEAR(eval["eval_reference"][0]["spread"].get<double>(), 0.005, 1e-12);
  EXPECT_FALSE(eval.contains("loss_windows"));
}

} // namespace
} // namespace infrarsi::decide
