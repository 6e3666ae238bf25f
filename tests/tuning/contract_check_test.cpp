// Tests for tuning/contract_check.cpp: each invariant, with the evidence in the message.

#include "tuning/contract_check.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace infrarsi::tuning {
namespace {

contract_spec contract() {
  contract_spec c;
  c.steps = 4;
  c.tokens_per_step = 4096;
  c.timed_first = 1;
  c.timed_last = 3;
  c.loss_rtol = 1e-4;
  c.loss_atol = 1e-6;
  return c;
}

trial_record run(double loss_shift = 0, std::uint64_t tokens = 4096, std::uint32_t steps = 4) {
  trial_record r;
  r.finished = true;
  r.outcome = trial_outcome::ok;
  r.wall_time_s = 5.0;
  for (std::uint32_t i = 0; i < steps; ++i)
    r.steps.push_back({i, 5.0 - 0.5 * i + loss_shift, tokens, 0.5 + 0.01 * i});
  return r;
}

TEST(ContractCheck, ReferenceAndCalibratedTolerance) {
  auto a = run(0.0);
  auto b = run(0.002); // baselines that are not bit-identical
  auto ref = make_loss_reference({a, b});
  EXPECT_DOUBLE_EQ(ref.loss.at(0), 5.001);
  EXPECT_NEAR(ref.spread.at(0), 0.001, 1e-12);
  // max(1e-6, 1e-4 * 5.001, 3 * 0.001) = 0.003
  EXPECT_NEAR(loss_tolerance(contract(), ref, 0), 0.003, 1e-12);
  EXPECT_TRUE(check_contract(contract(), ref, run(0.0025)).empty());
  auto v = check_contract(contract(), ref, run(0.01));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rfind("loss: step 0 loss 5.01 differs from the reference 5.001 by 0.009", 0), 0u)
    << v[0];
}

TEST(ContractCheck, FewerTokensOrStepsAreCaught) {
  auto ref = make_loss_reference({run()});
  auto v = check_contract(contract(), ref, run(0, 2048));
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0], "tokens: step 0 reported 2048 tokens, the contract says 4096");
  v = check_contract(contract(), ref, run(0, 4096, 3));
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0], "steps: reported 3 steps, the contract says 4");
}

TEST(ContractCheck, NanNeverPasses) {
  auto ref = make_loss_reference({run()});
  auto t = run();
  t.steps[2].loss = std::numeric_limits<double>::quiet_NaN();
  auto v = check_contract(contract(), ref, t);
  ASSERT_FALSE(v.empty());
  EXPECT_NE(v[0].find("non-finite loss"), std::string::npos);
}

TEST(ContractCheck, TimingWindowAndWallTime) {
  auto ref = make_loss_reference({run()});
  auto t = run();
  EXPECT_DOUBLE_EQ(timed_step_time(contract(), t.steps), 0.52); // median of 0.51, 0.52, 0.53
  t.wall_time_s = 1.0; // step times add up to 2.06 s
  auto v = check_contract(contract(), ref, t);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("step times add up to 2.06 s but the trial took 1 s"), std::string::npos);
  auto fake_timer = run();
  fake_timer.steps[1].step_time_s = 0;
  v = check_contract(contract(), ref, fake_timer);
  ASSERT_FALSE(v.empty());
  EXPECT_NE(v.back().find("timing: step 1 reported step time 0"), std::string::npos);
}

} // namespace
} // namespace infrarsi::tuning
