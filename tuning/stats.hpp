#pragma once
/// @file stats.hpp
/// Noise statistics of repeated step-time measurements and the speedup test used to promote a
/// candidate. Pure functions; all times in seconds, all estimates on log step times (speedups are
/// multiplicative, and log times are close to normal under multiplicative noise).

#include <cstdint>
#include <vector>

namespace infrarsi::tuning {

/// The noise of a configuration, measured by repeating it (the doctor stage).
struct noise_estimate {
  /// Number of repeated runs.
  std::size_t runs = 0;
  /// Mean of the runs' median timed step times, seconds.
  double mean_step_time_s = 0.0;
  /// Standard deviation of the log of the runs' median step times (≈ coefficient of variation
  /// for small noise).
  double log_sd = 0.0;
  /// Coefficient of variation of the runs' median step times (sd / mean).
  double cv = 0.0;
  /// Smallest speedup (as a fraction: 0.05 = 5%) a two-sample comparison of `runs` runs each can
  /// detect with two-sided alpha 0.05 and power 0.8:
  ///   mds = exp((z_{0.975} + z_{0.8}) * log_sd * sqrt(2 / runs)) - 1
  /// (normal approximation for a difference of two means, e.g. Cohen 1988, ch. 2).
  double min_detectable_speedup = 0.0;
};

/// Median of `values` (empty: 0).
double median(std::vector<double> values);

/// Noise of repeated runs given each run's median timed step time. Needs >= 2 runs for a
/// spread (with 1 run log_sd, cv and mds are 0). `floor_log_sd` is a lower bound on log_sd
/// (timer resolution and unseen drift; default 0.005 = 0.5%).
noise_estimate estimate_noise(const std::vector<double>& run_step_times_s,
                              double floor_log_sd = 0.005);

/// A speedup estimate of B over A from interleaved runs (A B A B ...).
struct speedup_estimate {
  /// exp(mean log t_A - mean log t_B): > 1 means B is faster.
  double speedup = 1.0;
  /// Two-sided 95% confidence interval of the speedup (Welch's t interval on log times,
  /// Welch 1947; Student t quantiles from Boost.Math).
  double ci_low = 1.0;
  double ci_high = 1.0;
  /// Welch–Satterthwaite degrees of freedom.
  double dof = 0.0;
  /// Standard deviation of log times within B's runs and within A's.
  double log_sd_b = 0.0;
  double log_sd_a = 0.0;
};

/// Welch interval for the ratio of geometric means of `a_times_s` over `b_times_s` (each >= 2
/// values, all > 0). With fewer values the interval is [0, inf).
speedup_estimate estimate_speedup(const std::vector<double>& a_times_s,
                                  const std::vector<double>& b_times_s);

/// Spearman's rank correlation (Spearman 1904) of paired samples: Pearson's correlation of
/// their ranks, ties given their average rank. NaN when the sizes differ, with fewer than 3
/// pairs, or when either sample has no spread.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

/// Two-sided Student t quantile t_{1-alpha/2, dof} (dof may be fractional).
double student_t_quantile(double alpha, double dof);

} // namespace infrarsi::tuning
