// The censored (Tobit) peak-memory model, tuning/memory_model.hpp: it recovers known coefficients
// from synthetic trials in which everything above the capacity ran out of memory (a fit that drops
// the OOM trials does not), its P(OOM) is calibrated on held-out trials, and it is deterministic.

#include "tuning/memory_model.hpp"

#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

#include <gtest/gtest.h>

namespace infrarsi::tuning {
namespace {

/// splitmix64 and Box-Muller: the same numbers on every platform.
struct rng {
  std::uint64_t state;
  double uniform() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (static_cast<double>(z >> 11) + 0.5) / 9007199254740992.0;
  }
  double normal() {
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
  }
};

// Truth: peak = 600 MB + 150 MB x micro-batch - 250 MB x checkpointing, noise 150 MB (the
// spread of repeated peaks of one configuration of the real workload is of that order); capacity
// 1.5 GB, so micro-batches above about 6 (8 with checkpointing) run out of memory.
constexpr double b0 = 600e6;
constexpr double b_mb = 150e6;
constexpr double b_ckpt = -250e6;
constexpr double noise = 150e6;
constexpr double capacity = 1.5e9;

struct trial {
  Eigen::VectorXd x;
  double peak;
};

std::vector<trial> draw(rng& r, int n) {
  std::vector<trial> out;
  for (int i = 0; i < n; ++i) {
    Eigen::VectorXd x(3);
    x << 1.0, 1.0 + 11.0 * r.uniform(), r.uniform() < 0.5 ? 1.0 : 0.0;
    out.push_back({x, b0 + b_mb * x[1] + b_ckpt * x[2] + noise * r.normal()});
  }
  return out;
}

std::vector<memory_observation> observe(const std::vector<trial>& trials) {
  std::vector<memory_observation> out;
  for (const auto& t : trials)
    out.push_back(t.peak > capacity ? memory_observation{t.x, capacity, true}
                                    : memory_observation{t.x, t.peak, false});
  return out;
}

TEST(CensoredMemoryModel, RecoversTheTruthWhereDroppingOomsDoesNot) {
  rng r{42};
  auto data = observe(draw(r, 600));
  std::size_t ooms = 0;
  for (const auto& o : data)
    ooms += o.oom ? 1 : 0;
  ASSERT_GT(ooms, 200u); // heavily censored: a third of the trials or more
  std::string why;
  auto tobit = fit_censored_memory(data, {}, why);
  ASSERT_TRUE(why.empty()) << why;
  EXPECT_TRUE(tobit.converged);
  // Every price comes with its uncertainty, and the truth lies within 3 standard deviations.
  const double truth[3] = {b0, b_mb, b_ckpt};
  for (std::size_t j = 0; j < 3; ++j) {
    EXPECT_GT(tobit.price_sd(j), 0.0);
    EXPECT_LT(std::abs(tobit.price(j) - truth[j]), 3.0 * tobit.price_sd(j))
      << "coefficient " << j << ": " << tobit.price(j) << " +- " << tobit.price_sd(j);
  }
  EXPECT_NEAR(tobit.price(1), b_mb, 0.05 * b_mb);
  EXPECT_NEAR(tobit.sigma, noise, 0.15 * noise);
  // Dropping the OOM trials keeps only the lucky low draws near the capacity: the micro-batch
  // price comes out too low, by far more than the censored fit's error.
  auto naive = fit_dropping_ooms(data, {}, why);
  ASSERT_TRUE(why.empty()) << why;
  double naive_err = std::abs(naive.price(1) - b_mb);
  double tobit_err = std::abs(tobit.price(1) - b_mb);
  EXPECT_LT(naive.price(1), b_mb);
  EXPECT_GT(naive_err, 3.0 * tobit_err) << "naive " << naive.price(1) << ", tobit " << tobit.price(1);
  EXPECT_LT(naive.sigma, noise); // and the noise looks smaller than it is
  std::cout << ooms << " of " << data.size() << " trials OOM; micro-batch price: truth "
            << b_mb / 1e6 << " MB, censored fit " << tobit.price(1) / 1e6 << " +- "
            << tobit.price_sd(1) / 1e6 << " MB, OOMs dropped " << naive.price(1) / 1e6
            << " MB; noise: censored " << tobit.sigma / 1e6 << " MB, dropped " << naive.sigma / 1e6
            << " MB\n";
}

TEST(CensoredMemoryModel, POomIsCalibratedOnHeldOutTrials) {
  rng r{7};
  auto train = observe(draw(r, 600));
  std::string why;
  auto tobit = fit_censored_memory(train, {}, why);
  auto naive = fit_dropping_ooms(train, {}, why);
  auto held_out = draw(r, 4000);
  // Reliability in 5 bins of predicted probability, and the Brier score against the naive fit.
  double sum_p[5] = {};
  double sum_y[5] = {};
  int count[5] = {};
  double brier_tobit = 0.0;
  double brier_naive = 0.0;
  for (const auto& t : held_out) {
    double y = t.peak > capacity ? 1.0 : 0.0;
    double p = tobit.p_oom(t.x, capacity);
    int bin = std::min(4, static_cast<int>(p * 5.0));
    sum_p[bin] += p;
    sum_y[bin] += y;
    ++count[bin];
    brier_tobit += (p - y) * (p - y);
    double q = naive.p_oom(t.x, capacity);
    brier_naive += (q - y) * (q - y);
  }
  // Each bin's observed OOM frequency within 3 binomial standard errors (+0.02) of its mean
  // predicted probability.
  for (int b = 0; b < 5; ++b) {
    if (count[b] < 100)
      continue;
    double p = sum_p[b] / count[b];
    double se = std::sqrt(p * (1.0 - p) / count[b]);
    EXPECT_NEAR(p, sum_y[b] / count[b], 3.0 * se + 0.02)
      << "bin " << b << " (" << count[b] << " trials)";
  }
  EXPECT_LT(brier_tobit, brier_naive);
  std::cout << "held-out Brier score: censored fit " << brier_tobit / held_out.size()
            << ", OOMs dropped " << brier_naive / held_out.size() << '\n';
}

TEST(CensoredMemoryModel, PriorsPullAndIdenticalInputsGiveIdenticalFits) {
  rng r{3};
  auto data = observe(draw(r, 12)); // few trials: the prior matters
  std::string why;
  std::vector<coefficient_prior> wrong = {{600e6, 1e9}, {50e6, 1e6}, {0.0, 1e9}};
  auto pulled = fit_censored_memory(data, wrong, why);
  ASSERT_TRUE(why.empty()) << why;
  EXPECT_NEAR(pulled.price(1), 50e6, 5e6); // a tight prior dominates twelve trials
  auto a = fit_censored_memory(data, {}, why);
  auto b = fit_censored_memory(data, {}, why);
  EXPECT_EQ(a.coef, b.coef); // bit for bit
  EXPECT_EQ(a.sigma, b.sigma);
  // Errors name what is wrong.
  fit_censored_memory({}, {}, why);
  EXPECT_EQ(why, "no observations");
  fit_censored_memory({{data[0].x, capacity, true}}, {}, why);
  EXPECT_EQ(why, "no measured (uncensored) trial");
  fit_censored_memory(data, {{0.0, 1.0}}, why);
  EXPECT_EQ(why, "need one prior per feature (3), got 1");
}

TEST(CensoredMemoryModel, TheSparseEpPosteriorIsTheDenseOneOnTheSameTrials) {
  // ep_posterior_sparse (the memory model with interactions) against ep_posterior: the same
  // trials, priors and residual sd give the same posterior up to rounding, and the same P(OOM).
  rng r{11};
  auto data = observe(draw(r, 300));
  std::size_t ooms = 0;
  for (const auto& o : data)
    ooms += o.oom ? 1 : 0;
  ASSERT_GT(ooms, 50u);
  std::vector<coefficient_prior> priors = {{1e9, 1e9}, {100e6, 100e6}, {0.0, 300e6}};
  std::string why;
  auto map = fit_censored_memory(data, priors, why);
  ASSERT_TRUE(why.empty()) << why;
  auto dense = ep_posterior(data, priors, map);
  std::vector<sparse_memory_observation> sparse;
  for (const auto& o : data) {
    sparse_memory_observation s{{}, o.bytes, o.oom};
    for (int j = 0; j < 3; ++j)
      if (o.x[j] != 0.0)
        s.x.emplace_back(j, o.x[j]);
    sparse.push_back(s);
  }
  auto fast = ep_posterior_sparse(sparse, priors, map.sigma);
  ASSERT_TRUE(fast.converged);
  ASSERT_EQ(fast.coef.size(), 3);
  EXPECT_NE(dense.coef, map.coef); // EP moved the coefficients: the comparison is not vacuous
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(fast.coef[j], dense.coef[j], 1e-6 * std::abs(dense.coef[j]) + 1.0) << j;
    for (int k = 0; k < 3; ++k)
      EXPECT_NEAR(fast.coef_cov(j, k), dense.coef_cov(j, k),
                  1e-6 * std::sqrt(dense.coef_cov(j, j) * dense.coef_cov(k, k)))
        << j << "," << k;
  }
  EXPECT_EQ(fast.sigma, map.sigma);
  for (const auto& s : sparse) {
    Eigen::VectorXd x = Eigen::VectorXd::Zero(3);
    for (const auto& [j, v] : s.x)
      x[j] = v;
    EXPECT_NEAR(fast.p_oom(s.x, capacity), dense.p_oom(x, capacity), 1e-6);
  }
  // Without OOM trials it is the conjugate posterior: the ridge solution of the measured trials.
  std::vector<sparse_memory_observation> measured;
  for (const auto& s : sparse)
    if (!s.oom)
      measured.push_back(s);
  auto conj = ep_posterior_sparse(measured, priors, map.sigma);
  ASSERT_TRUE(conj.converged);
  Eigen::MatrixXd prec = Eigen::MatrixXd::Zero(3, 3);
  Eigen::VectorXd h = Eigen::VectorXd::Zero(3);
  for (int j = 0; j < 3; ++j) {
    prec(j, j) = 1.0 / (priors[j].sd * priors[j].sd);
    h[j] = priors[j].mean / (priors[j].sd * priors[j].sd);
  }
  for (const auto& s : measured) {
    Eigen::VectorXd x = Eigen::VectorXd::Zero(3);
    for (const auto& [j, v] : s.x)
      x[j] = v;
    prec += x * x.transpose() / (map.sigma * map.sigma);
    h += x * s.bytes / (map.sigma * map.sigma);
  }
  Eigen::VectorXd ridge = prec.ldlt().solve(h);
  for (int j = 0; j < 3; ++j)
    EXPECT_NEAR(conj.coef[j], ridge[j], 1e-6 * std::abs(ridge[j]) + 1.0) << j;
  // Bad input: a feature index outside the priors, a non-positive sd.
  EXPECT_FALSE(ep_posterior_sparse({{{{3, 1.0}}, 1e9, false}}, priors, map.sigma).converged);
  EXPECT_FALSE(ep_posterior_sparse(sparse, priors, 0.0).converged);
}

TEST(CensoredMemoryModel, TheLeanEpSweepsGiveTheSamePosteriorInFewerSweeps) {
  // bayes_ei/7's ep_options {1e-4, 1e-6, triangle} against the defaults (bayes_ei/6) on a model
  // shaped like the memory model with pairs, in log bytes: 12 one-hot features, their 66 pairs
  // and the intercept; 600 trials of random settings, a third or so censored at the capacity.
  rng r{7};
  const int f = 12;
  const int p = 1 + f + f * (f - 1) / 2;
  Eigen::VectorXd truth(p);
  truth[0] = std::log(60e9) - 0.1;
  for (int j = 1; j < p; ++j)
    truth[j] = (j <= f ? 0.08 : 0.02) * r.normal();
  const double sigma = 0.03;
  const double cap = std::log(60e9);
  std::vector<sparse_memory_observation> data;
  std::size_t ooms = 0;
  for (int t = 0; t < 600; ++t) {
    std::vector<int> on;
    for (int j = 0; j < f; ++j)
      if (r.uniform() < 0.4)
        on.push_back(j);
    sparse_memory_observation o;
    o.x.emplace_back(0, 1.0);
    for (int j : on)
      o.x.emplace_back(1 + j, 1.0);
    for (std::size_t a = 0; a < on.size(); ++a)
      for (std::size_t b = a + 1; b < on.size(); ++b) {
        int i = on[a];
        int j = on[b];
        o.x.emplace_back(1 + f + i * (2 * f - i - 1) / 2 + (j - i - 1), 1.0);
      }
    double y = sigma * r.normal();
    for (const auto& [k, v] : o.x)
      y += v * truth[k];
    o.oom = y > cap;
    o.bytes = o.oom ? cap : y;
    ooms += o.oom ? 1 : 0;
    data.push_back(std::move(o));
  }
  ASSERT_GT(ooms, 100u);
  ASSERT_LT(ooms, 400u);
  std::vector<coefficient_prior> priors(p, coefficient_prior{0.0, 0.05});
  priors[0] = {cap, 10.0};
  for (int j = 1; j <= f; ++j)
    priors[j] = {0.0, 0.5};
  auto exact = ep_posterior_sparse(data, priors, sigma);
  auto triangle = ep_posterior_sparse(data, priors, sigma, ep_options{1e-6, 1e-8, true});
  auto lean = ep_posterior_sparse(data, priors, sigma, ep_options{1e-4, 1e-6, true});
  ASSERT_TRUE(exact.converged && triangle.converged && lean.converged);
  std::cout << "EP sweeps: defaults " << exact.iterations << ", triangle " << triangle.iterations
            << ", lean " << lean.iterations << "\n";
  // The triangle alone: the same sweeps, the same posterior up to rounding.
  EXPECT_EQ(triangle.iterations, exact.iterations);
  EXPECT_LT((triangle.coef - exact.coef).lpNorm<Eigen::Infinity>(), 1e-9);
  EXPECT_LT((triangle.coef_cov - exact.coef_cov).lpNorm<Eigen::Infinity>(), 1e-12);
  // Lean: fewer sweeps, the coefficients within 1e-4 log bytes, P(OOM) within 1e-3.
  EXPECT_LT(lean.iterations, exact.iterations);
  EXPECT_LT((lean.coef - exact.coef).lpNorm<Eigen::Infinity>(), 1e-4);
  EXPECT_LT((lean.coef_cov - exact.coef_cov).lpNorm<Eigen::Infinity>(),
            1e-3 * exact.coef_cov.diagonal().maxCoeff());
  EXPECT_GT((lean.coef - exact.coef).lpNorm<Eigen::Infinity>(), 0.0); // not the same sweeps
  double worst = 0.0;
  for (const auto& o : data)
    worst = std::max(worst, std::abs(lean.p_oom(o.x, cap) - exact.p_oom(o.x, cap)));
  EXPECT_LT(worst, 1e-3);
}

TEST(CensoredMemoryModel, NormalTailsAreAccurate) {
  EXPECT_NEAR(normal_survival(0.0), 0.5, 1e-15);
  EXPECT_NEAR(normal_survival(1.959963984540054), 0.025, 1e-12);
  EXPECT_NEAR(log_normal_survival(10.0), std::log(7.61985302416047e-24), 1e-9);
  // Across the switch to the asymptotic series the log survival stays continuous.
  EXPECT_NEAR(log_normal_survival(29.999999), log_normal_survival(30.0), 1e-4);
  EXPECT_TRUE(std::isfinite(log_normal_survival(60.0)));
}

} // namespace
} // namespace infrarsi::tuning
