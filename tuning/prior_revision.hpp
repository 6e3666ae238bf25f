#pragma once
/// @file prior_revision.hpp
/// Priors revised from a live run (issue 6, part 3): what the priors said about each setting,
/// what the global time model (tuning/time_model.hpp) says after the run's measurements, and how
/// well each ranks the measured configurations. Pure and deterministic.
///
/// Rank agreement is Spearman's rho (Spearman 1904) between predicted and measured speedups of
/// the run's usable search trials, in log order:
///  - prior: the priors alone, exp(sum of -prior log effects) (no measurement used), times the
///    analytic layout prior's predicted speedup when the task has one (tuning/layout_prior.hpp:
///    then the time model revises that prior, as in the policy);
///  - posterior: for each trial, the time model fitted on the usable trials logged BEFORE it
///    (sequential, out of sample: a trial never predicts itself), so "after revision" measures
///    what the revised model would have known when it chose.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tuning/priors.hpp"
#include "tuning/time_model.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::tuning {

/// One setting's effect before and after the run.
struct revised_effect {
  /// Feature name: "knob=value" or "+patch".
  std::string feature;
  /// The prior's speedup (1 when the priors say nothing), and whether they said anything.
  double prior_speedup = 1.0;
  bool has_prior = false;
  /// The revised model's speedup of the baseline with only this setting changed, exp(-(mean
  /// minus the baseline's mean)), and the posterior sd of that configuration's log time.
  double posterior_speedup = 1.0;
  double posterior_log_sd = 0.0;
  /// The prior's sd of the setting's effect on log step time (time_model_options::main_sd; its
  /// 95% interval is prior_speedup x exp(+-1.96 sd)).
  double prior_log_sd = 0.0;
  /// Usable trials in which the setting was active (search, baseline and re-verification).
  std::size_t trials = 0;
  /// Settings that were active in exactly the same usable trials (perfectly confounded: the
  /// data cannot tell their effects apart; the posterior splits them by the priors), by name.
  std::vector<std::string> confounded_with;
};

/// One usable search trial as the rank correlations see it.
struct revised_point {
  std::uint64_t trial_id = 0;
  std::uint32_t attempt = 0;
  /// Measured speedup over the baseline median; the priors' prediction; the sequential
  /// posterior's prediction (time model fitted on the usable trials logged before it).
  double measured = 1.0;
  double prior = 1.0;
  double posterior = 1.0;
};

struct prior_revision {
  /// Usable search trials compared.
  std::size_t trials = 0;
  /// Spearman's rho of prior-predicted vs measured speedups, and of sequential posterior
  /// predictions vs measured; NaN with fewer than 3 trials or no spread.
  double spearman_prior = 0.0;
  double spearman_posterior = 0.0;
  /// Whether the priors said anything about any setting (false: no knowledge-base entry).
  bool priors_given = false;
  /// The compared trials, in log order (what the two rhos are computed from).
  std::vector<revised_point> points;
  /// Every one-hot feature (each knob's non-default searched values, then each patch).
  std::vector<revised_effect> effects;
};

/// Revises `priors` with the usable trials of `history` (baseline and every measured
/// configuration; the rank correlations use the "explore" trials). `noise_log_sd` is the
/// doctor's. Speedups are over the median of the usable baseline trials.
prior_revision revise_priors(const task_spec& task, const prior_set& priors,
                             const std::vector<trial_record>& history, double noise_log_sd,
                             time_model_options options = {});

} // namespace infrarsi::tuning
