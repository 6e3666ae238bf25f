#pragma once
/// @file bayes_policy.hpp
/// The default search policy, "bayes_ei/1" (issue 6, part 4): model-based, batch, joint over
/// knobs and code patches, learning from every trial including out-of-memory ones.
///
///  1. Candidates: tuning::enumerate_candidates (the whole space when it has at most 20,000
///     configurations, a seeded sample otherwise), filtered by what every policy respects
///     (tuning::admissible) and by two certainties: a configuration at least as memory-hungry
///     by the task's tags as one that ran out of memory, and a patch or numerics-tagged setting
///     that broke the contract, crashed, timed out or failed to launch as the only untested
///     contract-risky feature of its trial (for a crash, timeout or launch error without one:
///     the only untested feature of any kind), and never passed since, are never proposed. A proposal brings at most one contract-risky
///     feature (a patch, a value of a knob tagged "numerics") never seen to pass the contract,
///     so a violation has an unambiguous cause, unless no such candidate is left (then any
///     candidate may be proposed); launch settings keep the work by construction and may change
///     together.
///  2. Initial design (the first `initial_design` search trials): the experience bank's seeds,
///     then the candidates at most three changes from the baseline with the best
///     prior-predicted speedup, spread out (each pick maximizes predicted log gain + 0.05 x its
///     Hamming distance to the picks before it).
///  3. Models, refitted from all trials at every call: the global time model
///     (tuning/time_model.hpp: log step time, main effects with the priors' means, pairwise
///     interactions) and the censored memory model (tuning/memory_model.hpp: Tobit regression
///     of log peak memory per rank on an intercept and the main effects; an OOM trial is
///     right-censored at log(capacity); coefficient priors centred on the priors' memory_bytes
///     relative to the baseline's measured peak), which gives P(OOM) of any configuration.
///  4. Acquisition: expected improvement of log step time over the best posterior mean among
///     measured configurations (Jones, Schonlau, Welch 1998, "Efficient global optimization of
///     expensive black-box functions", J. Global Optim. 13, eq. 15), times P(fits) = 1 - P(OOM)
///     (constrained EI: Gardner et al. 2014, "Bayesian optimization with inequality
///     constraints", ICML; Gelbart, Snoek, Adams 2014). It is maximized over the candidates,
///     then refined by coordinate ascent (every single knob change and patch toggle) from the
///     eight best and from the fastest measured configuration, so a sampled candidate set does
///     not hide the optimum.
///  5. Pairing: for the (up to 16) configurations with the best EI that are predicted to run
///     out of memory (P(OOM) > 0.5), each single memory-saving change (a knob tagged
///     memory-saver, or a patch, that lowers the fitted memory) that makes it fit (P(OOM) < 0.5)
///     is scored too, even outside the candidate set (the rules of 1 still apply); a proposal
///     that is such a pair says which hungry configuration, which saver and the saver's fitted
///     price (a memory factor). Without a declared capacity, OOM trials are censored at the
///     largest peak measured in a trial that fitted (a lower bound of the capacity).
///  6. Batches: after each pick the time model is conditioned on the pick at its predicted mean
///     (kriging believer), which lowers the EI of similar configurations, so a batch is diverse.
///  7. Stop: after the initial design, when the best EI x P(fits) is below
///     log(min detectable speedup) of the doctor and every setting and patch has been measured
///     in a usable trial or excluded for a failure (before that, an untried setting's EI rests
///     on the prior alone), no more proposals (stop_reason says so).
///
/// Pure and deterministic: the same input gives the same proposals, byte for byte.

#include <string>
#include <vector>

#include "tuning/memory_model.hpp"
#include "tuning/planner.hpp"
#include "tuning/search_space.hpp"
#include "tuning/time_model.hpp"

namespace infrarsi::tuning {

class bayes_ei final : public planner_policy {
public:
  struct options {
    /// Search code patches jointly with the knobs (false: "settings_only/1", a benchmark
    /// baseline that never applies a patch).
    bool use_patches = true;
    /// Apply the stopping rule (7).
    bool stop_rule = true;
    time_model_options time;
  };
  bayes_ei() = default;
  explicit bayes_ei(options o) : options_(o) {}

  [[nodiscard]] std::string name() const override {
    return options_.use_patches ? "bayes_ei/1" : "settings_only/1";
  }
  [[nodiscard]] std::vector<proposal> propose(const planner_input& in,
                                              std::size_t n) const override {
    return plan(in, n).proposals;
  }
  [[nodiscard]] proposal_batch plan(const planner_input& in, std::size_t n) const override;

private:
  options options_;
};

/// The censored memory model of step 3, fitted as the policy fits it (its one home: the policy
/// and the report call this).
struct run_memory_model {
  /// The fit is usable: finite coefficients and covariance, non-negative variances.
  bool fitted = false;
  /// Why not (no capacity known and no OOM, no measured trial, or the fit's own error).
  std::string why;
  /// Capacity OOM trials are censored at, bytes: the task's (device memory or memory cap) or,
  /// when none is given and a trial ran out of memory, the largest peak measured in a trial that
  /// fitted (`capacity_inferred`). 0: unknown.
  double capacity_bytes = 0.0;
  bool capacity_inferred = false;
  /// Tobit fit of log peak bytes per rank on [1, fs.point(config)] (size 1 + fs.model_size()).
  memory_fit fit;
};

/// Fits the model over the finished ok (peak > 0) and OOM trials of `history`. `priors` may be
/// nullptr. Deterministic.
run_memory_model fit_run_memory(const task_spec& task, const feature_space& fs,
                                const std::vector<trial_record>& history,
                                const prior_set* priors, double capacity_bytes);

/// Expected improvement for minimization: E[max(best - Y, 0)] for Y ~ N(mean, sd^2)
/// (Jones et al. 1998, eq. 15); max(best - mean, 0) when sd = 0.
double expected_improvement(double best, double mean, double sd);

} // namespace infrarsi::tuning
