#pragma once
/// @file time_model.hpp
/// The global execution-time model (issue 6, part 1): log step time as a function of a
/// configuration's settings, fitted over every measured trial of a run.
///
/// Model (Bayesian linear regression with a second-order feature map, as in BOCS: Baptista and
/// Poloczek 2018, "Bayesian Optimization of Combinatorial Structures", ICML; conjugate update:
/// Bishop 2006, "Pattern Recognition and Machine Learning", eqs. 3.50-3.51):
///
///   log t(c) - log t(baseline) = w0 + sum_i w_i x_i(c) + sum_{i<j} v_ij x_i(c) x_j(c) + e,
///
/// where x(c) is the feature vector of tuning/search_space.hpp (one-hot: one feature per
/// non-default knob value and per patch; ordinal: log2(value / default) of numeric knobs with
/// three or more values), the pairs (i, j) run over features of different knobs (every
/// knob-knob, knob-patch and patch-patch interaction), and e ~ N(0, s^2) with
/// s^2 = noise_log_sd^2 + model_error_sd^2 (measurement noise from the doctor plus what a
/// second-order model cannot represent). Priors, independent Gaussians:
///   w0 ~ N(0, intercept_sd^2)            (the baseline is measured, so w0 is small)
///   w_i ~ N(-log prior_speedup_i, main_sd^2)   (one-hot: the llm-proposer's / experience bank's
///                                               prior; ordinal: N(0, ordinal_sd^2) over the range)
///   v_ij ~ N(0, interaction_sd^2)
/// The posterior is Gaussian in closed form: precision P = diag(1/prior var) + X'X / s^2,
/// mean m = P^-1 (prior precision x prior mean + X'y / s^2). Predictions for any
/// configuration: mean x'm and variance x' P^-1 x (of the expected log time; add s^2 for one
/// new measurement). Pure and deterministic (Eigen, no randomness).
///
/// Cost: dimension D = 1 + F + (pairs of features of different knobs); F = 20..30 gives
/// D = 200..450. A fit is O(N A^2 + D^3) for N trials with A active expanded features each;
/// a prediction O(A^2). Memory: O(D^2) for the covariance and, with interactions, an F x F
/// pair index; D (and so F with interactions) is capped by time_model_options::max_dimension.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "tuning/search_space.hpp"

namespace infrarsi::tuning {

struct time_model_options {
  /// Prior sd of the intercept (log units).
  double intercept_sd = 0.05;
  /// Prior sd of one setting's main effect on log step time: 0.3 = a setting that changes step
  /// time by 35 % is one sd away from its prior mean.
  double main_sd = 0.3;
  /// Prior sd of an ordinal feature's coefficient: the change of log step time from the
  /// default to the farthest searched value of the knob (the feature is scaled to [-1, 1]).
  double ordinal_sd = 0.5;
  /// Prior sd of one pairwise interaction (log units).
  double interaction_sd = 0.1;
  /// Added to the measurement noise: what the second-order model cannot represent (log units).
  double model_error_sd = 0.03;
  /// Fit pairwise interactions (false: the additive model of main effects only).
  bool interactions = true;
  /// Largest dimension D with interactions: the posterior covariance is a dense D x D matrix
  /// (8 D^2 bytes) and a fit costs O(D^3), so a task whose pairs would make D larger fits the
  /// additive model (D = 1 + F) instead. 2048: 32 MiB and about a second per fit. With the
  /// task-file limit of 1024 features (adapters::task_file_limits) the additive model's D is at
  /// most 1 + 1024 + ordinal features.
  std::size_t max_dimension = 2048;
};

/// A prediction of log(step time / baseline step time).
struct time_prediction {
  double mean = 0.0;
  /// Posterior sd of the expected value (not including the noise of one measurement).
  double sd = 0.0;
};

/// The inverse of a symmetric positive-definite matrix P from its Cholesky factor: `llt` is
/// Eigen::LLT::matrixLLT() (P = L L', L in the lower triangle; the upper triangle is ignored).
/// Returns P^-1 = L^-T L^-1 (d x d, symmetric). L^-1 is computed block column by block column,
/// each block solving only the rows below its diagonal (L^-1 is lower triangular), and the
/// upper triangle of the product block column by block column over the rows where both factors
/// are not zero: about 2/3 d^3 flops instead of the 2 d^3 of solving
/// P X = I with the factor (the LAPACK potri route: Anderson et al. 1999, "LAPACK Users'
/// Guide", dpotri = dtrtri + dlauum). Agrees with the solve to rounding.
Eigen::MatrixXd inverse_from_cholesky(const Eigen::MatrixXd& llt);

class time_model {
public:
  /// `fs` gives the features and the prior means (copied; `fs` need not outlive the model).
  time_model(const feature_space& fs, time_model_options options = {});

  /// Fits the posterior to `data`: (features of a trial, feature_space::point, its log step time minus
  /// the baseline's log step time). `noise_log_sd` is the doctor's log-sd of one measurement
  /// (floored at 0.005; 0.02 when not finite). Replaces any earlier fit (the prior is always the
  /// starting point). Non-finite data leave the model at its prior (observations() == 0).
  void fit(const std::vector<std::pair<sparse_features, double>>& data, double noise_log_sd);

  /// Posterior prediction for a configuration given by its features.
  [[nodiscard]] time_prediction predict(const sparse_features& x) const;
  /// predict(x).mean alone: O(A) instead of O(A^2) (the same number, bit for bit).
  [[nodiscard]] double predict_mean(const sparse_features& x) const;

  /// A configuration whose neighbours are predicted next (prepare_centre): its expanded
  /// features z, C z (C the posterior covariance; length dimension()) and z' C z.
  struct centre {
    sparse_features expanded;
    Eigen::VectorXd cz;
    double var = 0.0;
  };
  /// Prepares `out` for predict_near around the configuration with features `x`: O(A D).
  void prepare_centre(const sparse_features& x, centre& out) const;
  /// predict(x) for a configuration near the centre (one setting changed): with d = z(x) - z
  /// (the expanded features that differ), x' C x = z' C z + 2 d' C z + d' C d, O(|d|^2 + A)
  /// instead of O(A^2). The mean is predict(x).mean bit for bit; the sd agrees with predict's
  /// to rounding. Falls back to predict when more than half of the features differ.
  [[nodiscard]] time_prediction predict_near(const centre& c, const sparse_features& x) const;
  /// Prediction from the prior alone (main effects' prior means; what the priors say).
  [[nodiscard]] double prior_mean(const sparse_features& x) const;

  /// Conditions the posterior on one more observation `value` at `active` (rank-one update).
  /// With value = predict(active).mean this is the "kriging believer" fantasy of batch
  /// Bayesian optimization (Ginsbourger, Le Riche, Carraro 2010, "Kriging is well-suited to
  /// parallelize optimization"): the mean is unchanged and the variance near `active` shrinks,
  /// so the next pick of a batch goes elsewhere.
  void condition(const sparse_features& x, double value);

  /// Posterior mean and sd of main effect `i` (model feature index; log units; speedup =
  /// exp(-mean)).
  [[nodiscard]] double effect_mean(int i) const;
  [[nodiscard]] double effect_sd(int i) const;

  /// Number of coefficients (intercept, main effects, interactions).
  [[nodiscard]] std::size_t dimension() const { return static_cast<std::size_t>(prior_mean_.size()); }
  /// Observations in the last fit.
  [[nodiscard]] std::size_t observations() const { return observations_; }
  /// Residual variance used (noise + model error), log units squared.
  [[nodiscard]] double noise_variance() const { return noise_var_; }

private:
  /// The coefficients active for a configuration and their feature values: intercept (1),
  /// mains, pairs (product of the two values), into `out` (cleared first; its capacity is
  /// reused).
  void expand_into(const sparse_features& x, sparse_features& out) const;

  std::size_t features_ = 0;
  time_model_options options_;
  /// pair_[i * F + j] (i < j): coefficient index of the interaction, -1 if none (same knob);
  /// empty when the model has no interactions.
  std::vector<int> pair_;
  Eigen::VectorXd prior_mean_;
  Eigen::VectorXd prior_var_;
  Eigen::VectorXd mean_;
  Eigen::MatrixXd cov_;
  double noise_var_ = 0.0;
  std::size_t observations_ = 0;
};

} // namespace infrarsi::tuning
