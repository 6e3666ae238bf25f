#pragma once
/// @file bayes_policy.hpp
/// The model-based search policies, "bayes_ei/1" (issue 6, part 4) to "bayes_ei/7" (the default;
/// tuning::default_policy_name): batch, joint over
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

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tuning/layout_prior.hpp"
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

/// "bayes_ei/2" (issue 18), "bayes_ei/3": bayes_ei/2 with the end game of options::end_game,
/// "bayes_ei/4": bayes_ei/3 whose memory model has the pairwise interactions of the
/// memory-tagged knobs (options::memory_interactions), "bayes_ei/5": bayes_ei/3 whose time model
/// narrows its interaction prior in the second half of a run (options::late_interaction_sd),
/// "bayes_ei/6": bayes_ei/5 whose memory model gains the pairwise interactions (prior sd 0.05)
/// at the same point (options::late_memory_interactions), and "bayes_ei/7", the default policy:
/// bayes_ei/6 with a cheaper EP for those interactions (options::late_lean_ep).
/// bayes_ei/2 is
/// bayes_ei/1's models and batch, with
///  1. no enumeration of the space: candidates are the single changes of the baseline and of the
///     six fastest usable configurations, 400 seeded random configurations and 16 Thompson draws
///     of the time model (the best setting of every knob and patch under one posterior draw),
///     refined by coordinate ascent as in bayes_ei/1;
///  2. a memory model that learns from few trials (run_memory_options: priors from the task's
///     memory tags, a tight prior on the residual sd), so that P(OOM) of a configuration that
///     shares an OOM'd setting rises after the OOM;
///  3. failure blame for every failure class (tuning/failure_model.hpp: a logistic model of
///     crash, timeout, launch error and contract violation over the settings); a crash, timeout
///     or launch error is blamed outright only on its only untested setting of any kind, a
///     contract violation on its only untested contract-risky one; convicted settings are never
///     proposed again and the batch lists them (proposal_batch::blamed);
///  4. acquisition per cost: EI x P(fits) x P(no failure) / expected cost, the cost in units of
///     one baseline trial: (1 + P(runs) x predicted time ratio + P(OOM) x an OOM's cost +
///     P(fail) x a failure's cost) / 2, the costs of OOMs and failures being what they cost so
///     far (device-seconds; a quarter and a half of a baseline trial before any); candidates
///     predicted to fit and not to fail (both >= 0.5) come before any other;
///  5. an initial design that spreads the priors' favoured settings over its trials (a setting
///     already covered by a design or measured trial counts a quarter), safe candidates first;
///  6. pairing only with savers whose fitted memory effect is negative at its 95 % upper bound.
class bayes_ei_cost final : public planner_policy {
public:
  struct options {
    bool stop_rule = true;
    time_model_options time;
    /// The end game ("bayes_ei/3"): in the last `end_game_share` of the search budget
    /// (planner_input::search_budget; never when it is unknown) the expected improvement is
    /// computed with the posterior sd scaled by `end_game_sd_scale`, so the last trials refine
    /// the configurations the time model predicts fastest instead of exploring uncertain ones
    /// (what is promoted comes from the measured configurations, so a late exploratory trial
    /// rarely pays). A decaying exploration weight as in GP-UCB (Srinivas, Krause, Kakade,
    /// Seeger 2010, "Gaussian process optimization in the bandit setting", ICML) applied to EI;
    /// the share and scale were chosen on the four sim tasks (bench/README.md, "The end game").
    bool end_game = false;
    double end_game_share = 0.25;
    double end_game_sd_scale = 0.3;
    /// "bayes_ei/4": bayes_ei/3 with the memory model's pairwise interactions of the
    /// memory-tagged knobs (run_memory_options::interactions, through memory_options_for).
    bool memory_interactions = false;
    /// "bayes_ei/5": bayes_ei/3 whose time model narrows its interaction prior (sd
    /// time_model_options::interaction_sd, 0.1) to `late_interaction_sd` once
    /// late_after(search budget) search trials are spent; 0: never. Early, the wide prior makes
    /// configurations that change many settings at once the uncertain ones, and EI spends the
    /// first trials on bundles (what gains most in a short run); later, the narrow prior lets
    /// the posterior mean add up main effects measured apart (a setting measured only beside a
    /// slow one is not blamed for its slowness through an interaction) and ranks the
    /// configurations by that mean. Chosen on the four sim tasks (bench/README.md, "Narrowing
    /// the interactions (bayes_ei/5)").
    double late_interaction_sd = 0.0;
    /// The search trials after which the narrow prior applies: max(late_after_trials,
    /// late_after_share x budget), late_after_trials when the budget is unknown. At budgets 10
    /// and 20 narrowing at half the budget cost 0.03 and 0.01 of the optimum on the sim tasks.
    std::size_t late_after_trials = 20;
    double late_after_share = 0.5;
    /// "bayes_ei/6": from the same point (late_after) the memory model has the pairwise
    /// interactions of the memory-tagged knobs, prior sd 0.05 (memory_options_for with the
    /// search trials spent and the budget). Late in a run the search works near the memory
    /// capacity, where the additive model multiplies factors measured apart and is sure about
    /// combinations it never ran (bayes_ei/5 ran out of memory in 19 % of sim-moe-multinode's 40
    /// search trials, 27 of its 38 OOMs over 5 seeds after the 20th trial, 18 at P(fits) >= 0.9);
    /// early, the pairs' uncertainty would keep the first trials from the bundles a
    /// short run gains most from. Chosen on the four sim tasks (bench/README.md, "Memory
    /// interactions late (bayes_ei/6)").
    bool late_memory_interactions = false;
    /// "bayes_ei/7": bayes_ei/6 whose late memory model iterates its EP more loosely and
    /// cheaply (run_memory_options::interaction_ep: sweeps stop when no site moves by 1e-4 log
    /// bytes instead of 1e-6, a site that would move by less than 1e-6 is left, and each block
    /// of rank-one updates goes to one triangle of the covariance): the same posterior to about
    /// 2e-6 in the coefficients, in about half the time (a late proposal step at 10,000 trials;
    /// bench/README.md, "bayes_ei/7"). Before its late phase it is bayes_ei/6, proposal for
    /// proposal.
    bool late_lean_ep = false;
    /// The analytic layout prior (tuning/layout_prior.hpp) as the prior mean of the time and
    /// memory models, for a task whose knobs declare their layout roles (a task without roles,
    /// [model] or a known GPU is searched as before). Its predicted gain also ranks the initial
    /// design, and the 32 layouts it predicts fastest join the candidates.
    bool analytic_prior = true;
    [[nodiscard]] std::size_t late_after(std::size_t search_budget) const {
      auto share = static_cast<std::size_t>(
        std::ceil(late_after_share * static_cast<double>(search_budget)));
      return std::max(late_after_trials, share);
    }
  };
  bayes_ei_cost() = default;
  explicit bayes_ei_cost(options o) : options_(o) {}
  [[nodiscard]] std::string name() const override {
    return options_.memory_interactions       ? "bayes_ei/4"
           : options_.late_lean_ep             ? "bayes_ei/7"
           : options_.late_memory_interactions ? "bayes_ei/6"
           : options_.late_interaction_sd > 0  ? "bayes_ei/5"
           : options_.end_game               ? "bayes_ei/3"
                                             : "bayes_ei/2";
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
  /// With run_memory_options::monotone: the configurations that ran out of memory.
  std::vector<configuration> ooms;
  /// Interaction coefficients (run_memory_options::interactions): pairs (i, j), i < j, of model
  /// features (feature_space::model_size() indices) whose product is coefficient 1 + M + k of
  /// `fit` for pairs[k]. Empty: the additive model.
  std::vector<std::pair<int, int>> pairs;
  /// pair_index[i * M + j] (i < j, M = feature_space::model_size()): k of pairs[k], -1 if none.
  std::vector<int> pair_index;

  /// The fit's feature vector of a configuration with model features `point`
  /// (feature_space::point): [1, point, products of `pairs`], size fit.coef.size().
  [[nodiscard]] Eigen::VectorXd features(const sparse_features& point, std::size_t model_size) const;
  /// The same features as (index, value) of the nonzero ones: the intercept, `point` (shifted
  /// by 1) and the products of the pairs present in `point`.
  [[nodiscard]] std::vector<std::pair<int, double>> expand(const sparse_features& point,
                                                           std::size_t model_size) const;
  /// P(OOM) of a configuration from its features alone (no monotone rule): the fit's, 0 when not
  /// fitted. The additive model evaluates densely, the model with pairs sparsely (O(A^2)).
  /// `log_offset`: the configuration's prior log peak memory when the model was fitted with
  /// offsets (fit_run_memory's `log_offset`; the analytic layout prior), else 0.
  [[nodiscard]] double p_oom_point(const sparse_features& point, std::size_t model_size,
                                   double log_offset = 0.0) const;
  /// Fitted with per-trial offsets (the analytic layout prior): the coefficients model log peak
  /// memory minus the prior's log peak.
  bool offset = false;
  /// The analytic layout prior the model revises (run_memory_options::analytic_prior, for a
  /// task that has one), and its estimate of the baseline.
  std::optional<layout_prior> layout;
  layout_estimate layout_base;
  /// The prior's log peak bytes of `c` (tuning::layout_offsets), 0 without a layout prior:
  /// what p_oom_point's `log_offset` takes for `c`.
  [[nodiscard]] double log_offset(const configuration& c) const {
    return layout ? layout_offsets(*layout, layout_base, c.knobs).second : 0.0;
  }

  /// P(OOM) of `c`: 1 when it is at least as memory-hungry by the task's tags as a configuration
  /// that ran out of memory (tuning::at_least_as_hungry; with run_memory_options::monotone), else
  /// the fit's (0 when not fitted).
  [[nodiscard]] double p_oom(const task_spec& task, const feature_space& fs,
                             const configuration& c) const;
};

/// How the memory model is fitted: "bayes_ei/1" fits it with all off (so that its logs replay);
/// "bayes_ei/2", "bayes_ei/3" and "bayes_ei/5" with all on but `interactions` (issue 18, part 1);
/// "bayes_ei/4" with all on; "bayes_ei/6" as bayes_ei/5 until its late phase, then with all on
/// and `interaction_sd` 0.05.
struct run_memory_options {
  /// Coefficient priors from the task's memory tags (docs/task-contract.md: a knob without a
  /// memory tag is memory-neutral): the log2 trend of a "memory-hungry" numeric knob has prior
  /// N(+0.5 log 2, (0.35 log 2)^2) per doubling (a factor 2 per doubling, all memory
  /// proportional to it, is 1.4 sd away), of a "memory-saver" N(-0.5 log 2, ...); a tagged
  /// boolean's non-default value N(+-0.1, 0.5^2) in log bytes; a tagged choice N(0, 0.7^2); a
  /// value of an untagged knob N(0, 0.1^2); a patch N(0, 0.3^2). Off: bayes_ei/1's priors (every
  /// coefficient centred on 0; sd 1, 0.3 or log 2 per doubling).
  bool tag_priors = false;
  /// The residual sd of log peak memory has an informative prior, log s ~ N(log 0.03, 0.3^2)
  /// (peaks reproduce to a few percent), so OOMs move the coefficients rather than s
  /// (tuning::sigma_prior). Off: s has a weak prior and P(OOM) stays near 0.5 after OOMs.
  bool tight_sigma = false;
  /// Memory is monotone in the tagged knobs (docs/task-contract.md): a configuration at least as
  /// hungry as one that ran out of memory runs out of memory (run_memory_model::p_oom).
  bool monotone = false;
  /// The coefficients' posterior by expectation propagation at the fit's residual sd
  /// (tuning::ep_posterior) instead of the Laplace approximation at the mode.
  bool ep = false;
  /// Pairwise interactions of the memory-tagged knobs' features (log peak memory is not
  /// additive in them: what pipeline stages save depends on what recomputation keeps), each with
  /// prior N(0, interaction_sd^2) in log bytes (0.15: a pair changes memory by 16 % at 1 sd
  /// beyond the product of its two factors). Fitted as the second-order model of the time
  /// model (BOCS, tuning/time_model.hpp) but censored: the residual sd comes from the
  /// main-effects MAP fit, the coefficients' posterior from tuning::ep_posterior_sparse. An
  /// untried pair of memory settings then has a P(OOM) with the pair's uncertainty in it,
  /// where the additive model multiplies two measured factors and is sure. Off: main effects
  /// only.
  bool interactions = false;
  double interaction_sd = 0.15;
  /// How the interactions' EP iterates (tuning::ep_options): the defaults for bayes_ei/4 and
  /// bayes_ei/6; bayes_ei/7 stops at 1e-4 and applies its updates to one triangle.
  ep_options interaction_ep;
  /// The model revises the analytic layout prior (tuning/layout_prior.hpp) when the task has
  /// one: fit_run_memory's offsets come from it (bayes_ei/2 to /7; a task without layout roles
  /// is fitted as before).
  bool analytic_prior = false;
};

/// The options of the named policy at the start of a run ("bayes_ei/4": all on; "bayes_ei/2",
/// "bayes_ei/3", "bayes_ei/5", "bayes_ei/6", "bayes_ei/7": all on but `interactions`; anything
/// else: all off).
run_memory_options memory_options_for(const std::string& policy_name);
/// The options of the named policy once `search_spent` search trials of `search_budget` (0:
/// unknown) are spent (tuning::search_trials_spent): those above, but for "bayes_ei/6" and
/// "bayes_ei/7", which have `interactions` at sd 0.05 from
/// bayes_ei_cost::options::late_after(search_budget) trials on (max(20, half the budget));
/// bayes_ei/7's with `interaction_ep` {1e-4, 1e-6, triangle}. The policy, the report's memory model and the experience
/// seeds' P(OOM) call this, so they see the model the proposals saw.
run_memory_options memory_options_for(const std::string& policy_name, std::size_t search_spent,
                                      std::size_t search_budget);

/// Fits the model over the finished ok (peak > 0) and OOM trials of `history`. `priors` may be
/// nullptr. Deterministic. With OOM trials but no measured peak, the model is its prior (the
/// intercept centred at log capacity - 0.5, sd 0.5) conditioned on the OOMs by expectation
/// propagation at a residual sd of 0.05, so OOMs alone teach it (an OOM at micro-batch 8 makes
/// every larger micro-batch with the same other settings likelier to run out of memory).
run_memory_model fit_run_memory(const task_spec& task, const feature_space& fs,
                                const std::vector<trial_record>& history,
                                const prior_set* priors, double capacity_bytes,
                                run_memory_options options = {});
/// As above with each trial's feature_space::point (`point[i]` of history[i]; e.g.
/// history_encoding::point).
/// `log_offset` (nullptr: none): per trial of `history`, the log of the peak memory a prior
/// model predicts for it (tuning::layout_prior, log bytes). With it the model is a revision of
/// that prior: each trial's log peak (or log capacity, for an OOM) less its offset is regressed
/// on the features, the intercept has prior N(0, 0.5^2) (the analytic peak within a factor 1.65
/// at 1 sd), the trend of a numeric knob with a layout role N(0, 0.2^2) per doubling and each
/// value of such a knob N(0, 0.1^2) around it; OOM trials alone (no
/// measured peak: a GPU job whose workload prints none) still fit it, by expectation
/// propagation from the prior at a residual sd of 0.05.
run_memory_model fit_run_memory(const task_spec& task, const feature_space& fs,
                                const std::vector<trial_record>& history,
                                const std::vector<sparse_features>& point, const prior_set* priors,
                                double capacity_bytes, run_memory_options options = {},
                                const std::vector<double>* log_offset = nullptr);

/// Expected improvement for minimization: E[max(best - Y, 0)] for Y ~ N(mean, sd^2)
/// (Jones et al. 1998, eq. 15); max(best - mean, 0) when sd = 0.
double expected_improvement(double best, double mean, double sd);

} // namespace infrarsi::tuning
