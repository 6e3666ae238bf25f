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
/// values, all > 0). With fewer values the interval is [0, inf). `alpha` is the interval's
/// two-sided level (0.05: a 95% interval; a group-sequential look passes its nominal level,
/// group_sequential_nominal_alpha).
speedup_estimate estimate_speedup(const std::vector<double>& a_times_s,
                                  const std::vector<double>& b_times_s, double alpha = 0.05);

/// Repeats each side of a two-sample comparison needs so that its minimum detectable speedup
/// (noise_estimate::min_detectable_speedup, alpha 0.05 / power 0.8) is at most `target_mds`
/// (a fraction, > 0) when the log step times have standard deviation `log_sd`: the formula of
/// noise_estimate solved for n,
///   n = ceil(2 ((z_{0.975} + z_{0.8}) log_sd / log(1 + target_mds))^2),
/// at least 2 (Cohen 1988, ch. 2; the sample-size step of Stein's two-stage procedure, Stein
/// 1945, with the pilot's log-sd in place of the unknown one).
std::size_t repeats_for_mds(double log_sd, double target_mds);

/// The one-sided upper confidence limit of a standard deviation estimated as `log_sd` from
/// `runs` repeats, at `confidence` (default 0.8):
///   log_sd sqrt((runs - 1) / chi2_{1 - confidence, runs - 1})
/// (the chi-square interval of a normal variance, e.g. Montgomery, "Design and Analysis of
/// Experiments", sec. 2.6; quantiles from Boost.Math). runs < 2: log_sd.
double log_sd_upper_limit(double log_sd, std::size_t runs, double confidence = 0.8);

/// The minimum detectable speedup of `runs` repeats per side at log-sd `log_sd` (the formula of
/// noise_estimate::min_detectable_speedup).
double min_detectable_speedup(double log_sd, std::size_t runs);

/// The largest log-sd at which `runs` repeats per side reach `target_mds`:
///   log(1 + target_mds) / ((z_{0.975} + z_{0.8}) sqrt(2 / runs)).
double log_sd_for_mds(std::size_t runs, double target_mds);

/// Shape of a two-sided group-sequential boundary with K equally spaced looks (Jennison and
/// Turnbull 2000, "Group Sequential Methods with Applications to Clinical Trials", ch. 2).
enum class sequential_boundary {
  /// Critical value C sqrt(K / k) at look k: very strict early, close to the fixed-sample
  /// z_{1-alpha/2} at the last look (O'Brien and Fleming 1979).
  obrien_fleming,
  /// The same critical value C at every look (Pocock 1977).
  pocock,
};

/// The constant C of a two-sided group-sequential test with `looks` (K >= 1) equally spaced
/// looks at overall two-sided level `alpha` under H0 for a normal statistic with known variance:
/// the C for which P(|Z_k| >= c_k for some k <= K) = alpha, Z_k the standardized sum of the
/// first k of K equal groups. Computed, not tabulated: the recursive numerical integration of
/// Armitage, McPherson and Rowe (1969) on the partial sums (Simpson's rule, step about 0.05) and
/// bisection to 1e-8. Reproduces Jennison and Turnbull's Table 2.3 (O'Brien-Fleming: K = 2
/// 1.977, K = 5 2.040) and Table 2.1 (Pocock: K = 2 2.178, K = 5 2.413) to 1e-3. Deterministic;
/// `looks` above 32 is treated as 32. Results are cached per (shape, K, alpha).
double group_sequential_constant(sequential_boundary shape, std::uint32_t looks,
                                 double alpha = 0.05);

/// The z critical value c_k of look `look` (1..looks) of that test: C sqrt(K / k)
/// (O'Brien-Fleming) or C (Pocock).
double group_sequential_critical(sequential_boundary shape, std::uint32_t look,
                                 std::uint32_t looks, double alpha = 0.05);

/// The nominal two-sided level of look `look`: 2 (1 - Phi(c_k)). With the variance estimated at
/// each look the interval uses Student t at this level and the look's degrees of freedom (the
/// "significance level" approach: Pocock 1977; Jennison and Turnbull 2000, sec. 3.3 and 11.3),
/// which keeps the overall error close to `alpha`. The repeated confidence intervals built this
/// way cover the true value at every look at once with probability about 1 - alpha (Jennison
/// and Turnbull 1989, JRSS B 51:305-361), so a decision may be taken at any look.
double group_sequential_nominal_alpha(sequential_boundary shape, std::uint32_t look,
                                      std::uint32_t looks, double alpha = 0.05);

/// One repeat of a measurement with its own steps: the log of its median timed step time, the
/// robust sd of its log step times (1.4826 x their median absolute deviation) and how many
/// steps it timed.
struct repeat_steps {
  double log_median = 0.0;
  double log_sd_steps = 0.0;
  std::size_t steps = 0;
};

/// The summary of one repeat from its timed step times (seconds, all > 0; empty: all zeros).
repeat_steps summarize_repeat(const std::vector<double>& step_times_s);

/// The standard error of a repeat's log median step time its own steps imply:
///   sqrt(pi / 2) max(log_sd_steps, floor_log_sd) / sqrt(steps)
/// (the asymptotic variance of a sample median, pi sigma^2 / (2 n) for normal data; Cramér 1946,
/// sec. 28.5). Steps 0: infinity.
double median_standard_error(const repeat_steps& r, double floor_log_sd = 0.005);

/// Which repeats disagree with the others beyond what the noise model allows. The model: a
/// repeat's log median step time is a common level, plus a run-to-run variation of sd at most
/// `run_allowance` (placement, clocks: default 0.05, 5%; with 5 or more repeats the robust
/// spread of the repeats, 1.4826 x their MAD, when larger), plus its median's own sampling error
/// (median_standard_error). Repeat i is disturbed when, with >= 3 repeats (with 2 nobody can say
/// which one),
///   |x_i - median(x_j, j != i)| > z (se_i^2 + se_ref^2 + tau^2)^(1/2),
/// se_ref the median of the others' standard errors, tau the allowance, z = 4 by default (a
/// normal deviation beyond 4 sd has probability 6e-5). A repeat of 0.55 s among 0.39 s and 0.40 s
/// with 1% step noise is disturbed (z about 6.6); repeats varying by 2% are not. Returns one
/// flag per repeat, and each repeat's z-score in `z_scores` when not null.
std::vector<bool> disturbed_repeats(const std::vector<repeat_steps>& repeats,
                                    std::vector<double>* z_scores = nullptr, double z = 4.0,
                                    double run_allowance = 0.05, double floor_log_sd = 0.005);

/// Spearman's rank correlation (Spearman 1904) of paired samples: Pearson's correlation of
/// their ranks, ties given their average rank. NaN when the sizes differ, with fewer than 3
/// pairs, or when either sample has no spread.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

/// Two-sided Student t quantile t_{1-alpha/2, dof} (dof may be fractional).
double student_t_quantile(double alpha, double dof);

} // namespace infrarsi::tuning
