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
  // mds = exp(2.8015852 * 0.0200027 * sqrt(2/3)) - 1 = exp(0.0457557) - 1 = 0.046825
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

TEST(Stats, GroupSequentialConstantsMatchJennisonAndTurnbull) {
  using sb = sequential_boundary;
  // Jennison and Turnbull (2000), Table 2.3 (O'Brien-Fleming C_B) and Table 2.1 (Pocock C_P),
  // two-sided alpha 0.05.
  EXPECT_NEAR(group_sequential_constant(sb::obrien_fleming, 1), 1.960, 1e-3);
  EXPECT_NEAR(group_sequential_constant(sb::obrien_fleming, 2), 1.977, 1e-3);
  EXPECT_NEAR(group_sequential_constant(sb::obrien_fleming, 3), 2.004, 1e-3);
  EXPECT_NEAR(group_sequential_constant(sb::obrien_fleming, 5), 2.040, 1e-3);
  EXPECT_NEAR(group_sequential_constant(sb::obrien_fleming, 10), 2.087, 1e-3);
  EXPECT_NEAR(group_sequential_constant(sb::pocock, 2), 2.178, 1e-3);
  EXPECT_NEAR(group_sequential_constant(sb::pocock, 5), 2.413, 1e-3);
  // O'Brien-Fleming look k of K: C sqrt(K / k); the last look is close to 1.96.
  EXPECT_NEAR(group_sequential_critical(sb::obrien_fleming, 1, 8), 2.0722 * std::sqrt(8.0), 1e-3);
  EXPECT_NEAR(group_sequential_critical(sb::obrien_fleming, 8, 8), 2.0722, 1e-3);
  EXPECT_NEAR(group_sequential_nominal_alpha(sb::obrien_fleming, 8, 8), 0.0382, 5e-4);
  EXPECT_LT(group_sequential_nominal_alpha(sb::obrien_fleming, 1, 8), 1e-8);
}

TEST(Stats, NaiveRepeatedTestingInflatesTheErrorTheBoundaryKeeps) {
  // Monte Carlo on known-variance z statistics of 8 equal groups: testing every look at 1.96
  // rejects a true H0 far more often than 5 %; the O'Brien-Fleming boundary keeps it near 5 %.
  std::uint64_t state = 42;
  auto next = [&state] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (static_cast<double>((z ^ (z >> 31)) >> 11) + 0.5) * 0x1.0p-53;
  };
  const int runs = 20000;
  int naive = 0;
  int obf = 0;
  for (int r = 0; r < runs; ++r) {
    double sum = 0;
    bool n = false;
    bool o = false;
    for (std::uint32_t k = 1; k <= 8; ++k) {
      double u1 = next();
      double u2 = next();
      sum += std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
      double z = sum / std::sqrt(static_cast<double>(k));
      n = n || std::fabs(z) > 1.959964;
      o = o || std::fabs(z) > group_sequential_critical(sequential_boundary::obrien_fleming, k, 8);
    }
    naive += n ? 1 : 0;
    obf += o ? 1 : 0;
  }
  EXPECT_GT(naive / static_cast<double>(runs), 0.15); // about 0.19 for 8 looks
  EXPECT_NEAR(obf / static_cast<double>(runs), 0.05, 0.006);
}

TEST(Stats, RepeatsForATargetMds) {
  // The loaded machine: CV 7.8 % needs 2 (2.8016 x 0.078 / log 1.03)^2 = 109.3 -> 110.
  EXPECT_EQ(repeats_for_mds(0.078, 0.03), 110u);
  EXPECT_EQ(repeats_for_mds(0.005, 0.03), 2u);
  // Round trip: the log-sd at which 12 runs reach 3 %, and back.
  double sd = log_sd_for_mds(12, 0.03);
  EXPECT_NEAR(sd, std::log(1.03) / (2.8015852 * std::sqrt(2.0 / 12.0)), 1e-9);
  EXPECT_EQ(repeats_for_mds(sd, 0.03), 12u);
  auto n = estimate_noise(std::vector<double>(12, 1.0));
  EXPECT_LT(n.min_detectable_speedup, 0.03);
  EXPECT_NEAR(min_detectable_speedup(0.0200027, 3), 0.046825, 1e-5);
  // 80 % upper limits: sqrt(2 / chi2_{0.2, 2}) = sqrt(2 / 0.4463) = 2.1169 (2 dof: -2 ln 0.8),
  // sqrt(11 / 6.989) = 1.2545 (chi-square table, 11 dof).
  EXPECT_NEAR(log_sd_upper_limit(1.0, 3), std::sqrt(2.0 / (-2.0 * std::log(0.8))), 1e-9);
  EXPECT_NEAR(log_sd_upper_limit(1.0, 12), 1.2545, 2e-4);
  EXPECT_DOUBLE_EQ(log_sd_upper_limit(0.3, 1), 0.3);
}

TEST(Stats, ARepeatOutsideTheNoiseModelIsDisturbed) {
  // 0.39 s and 0.40 s, then 0.55 s, each median of 10 steps with 1 % step noise.
  std::vector<repeat_steps> r{{std::log(0.39), 0.01, 10}, {std::log(0.40), 0.01, 10},
                              {std::log(0.55), 0.01, 10}};
  std::vector<double> z;
  auto d = disturbed_repeats(r, &z);
  EXPECT_FALSE(d[0]);
  EXPECT_FALSE(d[1]);
  EXPECT_TRUE(d[2]);
  // |log 0.55 - log 0.395| / sqrt(2 x (1.2533 x 0.01 / sqrt 10)^2 + 0.05^2) = 6.58
  EXPECT_NEAR(z[2], 6.58, 0.005);
  // Repeats 2 % apart are within the model; two repeats cannot say which one is off.
  EXPECT_FALSE(disturbed_repeats({{0.0, 0.01, 10}, {0.02, 0.01, 10}, {-0.02, 0.01, 10}})[0]);
  EXPECT_FALSE(disturbed_repeats({{0.0, 0.01, 10}, {0.5, 0.01, 10}})[1]);
  // A repeat's own steps: median and robust sd (1.4826 x MAD) of the log step times.
  auto s = summarize_repeat({1.0, 1.0, 2.0});
  EXPECT_DOUBLE_EQ(s.log_median, 0.0);
  EXPECT_DOUBLE_EQ(s.log_sd_steps, 0.0);
  EXPECT_EQ(s.steps, 3u);
  EXPECT_NEAR(median_standard_error({0.0, 0.02, 16}), 1.2533141 * 0.02 / 4.0, 1e-9);
}

} // namespace
} // namespace infrarsi::tuning
