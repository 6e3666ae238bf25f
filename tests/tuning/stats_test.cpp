// Tests for tuning/stats.cpp against hand-computed values.

#include "tuning/stats.hpp"

#include <cmath>

#include <gtest/gtest.h>

namespace infrarsi::tuning {
namespace {

TEST(Stats, Median) {
  EXPECT_DOUBLE_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(median({}), 0.0);
}

TEST(Stats, NoiseOfRepeatedRuns) {
  // log times: log(1.0)=0, log(1.02), log(0.98): sd of {0, 0.0198026, -0.0202027} = 0.0200027
  auto n = estimate_noise({1.0, 1.02, 0.98});
  EXPECT_EQ(n.runs, 3u);
  EXPECT_NEAR(n.mean_step_time_s, 1.0, 1e-12);
  EXPECT_NEAR(n.cv, 0.02, 1e-12);
  EXPECT_NEAR(n.log_sd, 0.0200027, 1e-6);
  // mds = exp(2.8015856 * 0.0200027 * sqrt(2/3)) - 1 = exp(0.0457557) - 1 = 0.046825
  EXPECT_NEAR(n.min_detectable_speedup, 0.046825, 1e-5);
  // The floor keeps a suspiciously quiet baseline from promising an impossible resolution.
  auto quiet = estimate_noise({1.0, 1.0, 1.0});
  EXPECT_DOUBLE_EQ(quiet.log_sd, 0.005);
  EXPECT_EQ(estimate_noise({2.0}).min_detectable_speedup, 0.0);
}

TEST(Stats, StudentTQuantilesMatchTables) {
  EXPECT_NEAR(student_t_quantile(0.05, 1), 12.706, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.05, 4), 2.776, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.05, 30), 2.042, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.05, 1e6), 1.960, 1e-3);
}

TEST(Stats, WelchSpeedupInterval) {
  // A: baseline ~1.0 s, B: ~0.8 s: speedup 1.25.
  std::vector<double> a{1.00, 1.02, 0.98, 1.01};
  std::vector<double> b{0.80, 0.81, 0.79, 0.80};
  auto s = estimate_speedup(a, b);
  double la = (std::log(1.00) + std::log(1.02) + std::log(0.98) + std::log(1.01)) / 4;
  double lb = (std::log(0.80) + std::log(0.81) + std::log(0.79) + std::log(0.80)) / 4;
  EXPECT_NEAR(s.speedup, std::exp(la - lb), 1e-12);
  EXPECT_LT(s.ci_low, s.speedup);
  EXPECT_GT(s.ci_high, s.speedup);
  EXPECT_GT(s.ci_low, 1.2);
  EXPECT_LT(s.ci_high, 1.3);
  EXPECT_GT(s.dof, 3.0);
  EXPECT_LT(s.dof, 6.0);
  // Equal samples: the interval straddles 1.
  auto aa = estimate_speedup(a, {1.01, 0.99, 1.00, 1.02});
  EXPECT_LT(aa.ci_low, 1.0);
  EXPECT_GT(aa.ci_high, 1.0);
  // One value each: no interval.
  auto one = estimate_speedup({1.0}, {0.5});
  EXPECT_DOUBLE_EQ(one.speedup, 2.0);
  EXPECT_EQ(one.ci_low, 0.0);
  EXPECT_TRUE(std::isinf(one.ci_high));
}

} // namespace
} // namespace infrarsi::tuning
