#pragma once
/// @file memory_model.hpp
/// Censored peak-memory model (issue 6, part 2): peak memory per rank as a linear function of a
/// configuration's features, in which an out-of-memory trial is a right-censored observation
/// (its peak is only known to exceed the capacity). Fitted by maximum a posteriori estimation of
/// censored Gaussian (Tobit) regression (Tobin 1958, "Estimation of relationships for limited
/// dependent variables", Econometrica 26(1); the right-censored likelihood below is eq. 2 of
/// Amemiya 1984, "Tobit models: a survey", J. Econometrics 24), with independent Gaussian priors
/// on the coefficients. Pure and deterministic: no clock, no randomness, no I/O.
///
/// Model: y = x'b + e, e ~ N(0, s^2). A measured trial contributes log phi((y - x'b)/s) - log s;
/// an OOM trial under capacity c contributes log(1 - Phi((c - x'b)/s)). The fit maximizes the
/// sum plus the log prior -sum_j (b_j - m_j)^2 / (2 t_j^2) by damped Newton on (b, log s), with
/// the analytic gradient and a central-difference Hessian of it.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Dense>

namespace infrarsi::tuning {

/// One trial for the memory model: its feature vector (same length for every trial; include a
/// constant 1 for the intercept), and either its measured peak (bytes) or, when it ran out of
/// memory, the capacity it exceeded (bytes).
struct memory_observation {
  Eigen::VectorXd x;
  /// Measured peak memory per rank, bytes (when !oom); the capacity exceeded, bytes (when oom).
  double bytes = 0.0;
  bool oom = false;
};

/// Gaussian prior on one coefficient, bytes per unit of its feature.
struct coefficient_prior {
  double mean = 0.0;
  /// Standard deviation; must be > 0 (use a large value for a vague prior).
  double sd = 1e12;
};

/// The fitted model.
struct memory_fit {
  /// Coefficients b, bytes per unit of each feature.
  Eigen::VectorXd coef;
  /// Posterior covariance of b (inverse of the negative Hessian of the log posterior at the
  /// optimum, restricted to b), bytes^2.
  Eigen::MatrixXd coef_cov;
  /// Residual standard deviation s, bytes.
  double sigma = 0.0;
  /// Newton iterations used; converged is false if the iteration limit was hit.
  int iterations = 0;
  bool converged = false;
  /// Log posterior at the optimum (in the fit's scaled units; for comparisons between fits of
  /// the same data only).
  double log_posterior = 0.0;

  /// Predicted peak for features x: mean x'b and standard deviation sqrt(s^2 + x' cov x), bytes.
  [[nodiscard]] double mean(const Eigen::VectorXd& x) const;
  [[nodiscard]] double sd(const Eigen::VectorXd& x) const;
  /// P(peak > capacity) for features x under the predictive distribution.
  [[nodiscard]] double p_oom(const Eigen::VectorXd& x, double capacity_bytes) const;
  /// p_oom for features given by their nonzero entries (index, value): the same formula,
  /// O(A^2) for A entries.
  [[nodiscard]] double p_oom(const std::vector<std::pair<int, double>>& x,
                             double capacity_bytes) const;
  /// The price of one unit of feature j: coefficient and its posterior standard deviation, bytes.
  [[nodiscard]] double price(std::size_t j) const { return coef[static_cast<Eigen::Index>(j)]; }
  [[nodiscard]] double price_sd(std::size_t j) const;
};

/// Fits the censored model. `priors` has one entry per feature (or is empty: vague priors).
/// `sigma_floor` (bytes, >= 0) bounds the residual sd from below, sigma = sqrt(floor^2 +
/// exp(2 log s)): a job whose peak memory is exactly reproducible (a simulator, a deterministic
/// allocator) would otherwise drive s to 0 and P(OOM) to a step function.
/// Errors (returned as a fit with converged = false and `why` set): no observations, features of
/// unequal length, a prior of the wrong length or with sd <= 0, no measured (uncensored) trial.
memory_fit fit_censored_memory(const std::vector<memory_observation>& data,
                               const std::vector<coefficient_prior>& priors, std::string& why,
                               double sigma_floor = 0.0);

/// Prior on the residual sd s of the censored fit: log s ~ N(log centre, log_sd^2).
struct sigma_prior {
  /// Centre, bytes (> 0).
  double centre = 0.0;
  /// sd of log s.
  double log_sd = 0.3;
};

/// As above with an informative prior on s. Without one (the overload above) log s has a weak
/// prior (sd 5) centred on the measured trials' residual sd, so a few OOM trials can be
/// "explained" by a larger s instead of larger coefficients: P(OOM) then stays near 0.5 however
/// often the same setting runs out of memory. A tight prior centred on the allocator's
/// reproducibility (a few percent of the peak) makes the OOMs move the coefficients.
memory_fit fit_censored_memory(const std::vector<memory_observation>& data,
                               const std::vector<coefficient_prior>& priors, std::string& why,
                               double sigma_floor, const sigma_prior& s_prior);

/// The posterior of the coefficients by expectation propagation (Minka 2001, "Expectation
/// propagation for approximate Bayesian inference", UAI; the probit sites as in Rasmussen and
/// Williams 2006, "Gaussian Processes for Machine Learning", section 3.6) at the residual sd of
/// `map` (a fit of the same data): measured trials enter exactly (Gaussian likelihood), each OOM
/// trial through a Gaussian site fitted to its censored likelihood P(x'b + e > capacity) by
/// moment matching. The Laplace approximation of the MAP fit centres the posterior at the mode,
/// which for an OOM that the prior already predicts sits just past the capacity: P(OOM) of the
/// very configuration that ran out of memory then stays near 0.5. EP matches the mean and
/// variance of the truncated posterior instead, so an OOM makes P(OOM) of its configuration and
/// of its neighbours high. Returns `map` with coef and coef_cov replaced (unchanged when there
/// is no OOM observation or the sites do not converge to finite values).
memory_fit ep_posterior(const std::vector<memory_observation>& data,
                        const std::vector<coefficient_prior>& priors, const memory_fit& map);

/// One trial for ep_posterior_sparse: the nonzero features (index, value), the intercept's
/// (0, 1.0) included, with bytes and oom as in memory_observation.
struct sparse_memory_observation {
  std::vector<std::pair<int, double>> x;
  double bytes = 0.0;
  bool oom = false;
};

/// The same posterior as ep_posterior (measured trials exact, each OOM an EP site fitted by
/// moment matching), for `priors.size()` coefficients of which each trial has few nonzero
/// features (the memory model with pairwise interactions: 100-200 coefficients, 20-40 nonzero),
/// at residual sd `sigma` (bytes, > 0; from a MAP fit). Costs O(N A^2) to accumulate the
/// measured trials (A nonzero features per trial), O(p^3) once, and per OOM site and sweep
/// O(p A + p b) plus, when the site's parameters move, a rank-one update of the covariance that
/// is applied b = 32 at a time as one matrix product (O(p^2 b) per b updates; a site whose change
/// is below 1e-8, e.g. an OOM far past the capacity that the model already predicts, is not
/// applied; the sweeps stop when no site moves by 1e-6 in the units of `bytes` (log bytes in the
/// memory model), where ep_posterior's stop at 1e-8: 13 sweeps instead of 15 at 1,000 trials of
/// the planner bench). Without OOM trials it is the conjugate Gaussian
/// posterior. Returns converged = false (and coef empty) when the sizes disagree, sigma <= 0 or
/// the result is not finite.
memory_fit ep_posterior_sparse(const std::vector<sparse_memory_observation>& data,
                               const std::vector<coefficient_prior>& priors, double sigma);

/// How ep_posterior_sparse iterates. The defaults are the sweeps above (bayes_ei/4 and
/// bayes_ei/6 use them). `stop`: the sweeps end when no site moved by this much (log bytes: its
/// precision change x the marginal variance, its precision-mean change x the marginal sd);
/// `skip`: a site that would move by less is left as it is; `triangle`: each block of rank-one
/// updates is applied to the lower triangle of the covariance only (one triangular matrix
/// product, about half the flops of the full one) and mirrored, a site's x'Cx is the quadratic
/// form over its non-zero features less the block's pending updates, and C x is built only for
/// a site that moves; the same posterior up to rounding. bayes_ei/7 uses {1e-4, 1e-6, true}: 11
/// sweeps instead of 15 at 10,000 trials of the planner bench and the EP in about 46 ms instead
/// of 81 (a site's mean then moves by less than 1e-4 log bytes, 0.01 % of the memory, per
/// further sweep).
struct ep_options {
  double stop = 1e-6;
  double skip = 1e-8;
  bool triangle = false;
};
memory_fit ep_posterior_sparse(const std::vector<sparse_memory_observation>& data,
                               const std::vector<coefficient_prior>& priors, double sigma,
                               const ep_options& options);

/// The naive fit a tuner that drops OOM trials would make: ordinary least squares (with the same
/// priors) on the measured trials only. For comparison in tests and benchmarks.
memory_fit fit_dropping_ooms(const std::vector<memory_observation>& data,
                             const std::vector<coefficient_prior>& priors, std::string& why);

/// Survival function of the standard normal, 1 - Phi(z), and its logarithm, accurate in the
/// tails (log Q uses the asymptotic series beyond z = 30).
double normal_survival(double z);
double log_normal_survival(double z);

} // namespace infrarsi::tuning
