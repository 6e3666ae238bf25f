#pragma once
/// @file failure_model.hpp
/// Failure blame (issue 18, part 2): which settings make a trial fail, learned from every failed
/// and every usable trial of a run. Pure and deterministic: no clock, no randomness, no I/O.
///
/// Failures are the outcomes that measure nothing and are not a memory problem: crash, timeout,
/// launch_error and contract violations (an outcome contract_violation, or a finished trial the
/// verifier found violating). Out-of-memory trials are the memory model's (tuning/memory_model.hpp)
/// and are left out here, as are lost, preempted and unfinished trials.
///
/// Model: noisy-OR (Pearl 1988, "Probabilistic Reasoning in Intelligent Systems", section
/// 4.3.2): every setting f of a configuration independently makes the trial fail with
/// probability q_f, and something outside the settings (the machine, the cluster) with the leak
/// probability q_0:
///
///   P(fail | c) = 1 - (1 - q_0) prod_{f in c} (1 - q_f),
///
/// over the features z(c) = the one-hot features of tuning::feature_space (one per non-default
/// knob value and per patch) plus one "knob changed" feature per knob (1 when the knob is not at
/// its default), so that a failure of world_size=2 also raises P(fail) of world_size=4. The q_f
/// have Beta(a, b) priors (a rare-failure prior, mean a / (a + b) = 0.005) and are estimated by
/// EM on the latent causes (Dempster, Laird, Rubin 1977): in a failed trial, f is the cause with
/// posterior probability q_f / P(fail | c) (capped at 1); a usable trial says no setting of it
/// caused a failure; q_f = (a + expected causes) / (a + b + trials with f), the posterior mean.
/// Unlike a logistic model with Gaussian priors, which spreads the blame of a failure evenly
/// over every setting of the trial, the noisy-OR explains away: two failures that share one
/// setting put the blame on that setting and clear the others.
///
/// Blame: a feature is *convicted* when it was active in at least `min_convictions` failed
/// trials, never in a usable one, and its P(fail) alone is at least `exclude_above` (q_f; for a
/// knob value with its knob's change, 1 - (1 - q_value)(1 - q_changed)); the policy never proposes a convicted feature again and
/// the proposal batch lists it with the trials that convict it.

#include <cstdint>
#include <string>
#include <vector>

#include "tuning/search_space.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::tuning {

struct failure_model_options {
  /// Beta(a, b) prior of each q_f: mean 0.005 (a configuration that changes 15 settings, 30
  /// features with the knob-changed ones, is expected to fail with P 0.14 before any failure),
  /// the weight of one trial (two failures that share a setting make its q about 0.6).
  double prior_a = 0.005;
  double prior_b = 0.995;
  /// q_0: failures of the baseline configuration itself.
  double leak = 0.01;
  /// A feature is convicted after this many failed trials with it (and none usable) ...
  int min_convictions = 2;
  /// ... when its P(fail) alone is at least this.
  double exclude_above = 0.5;
};

/// True for the outcomes this model counts as failures (see the file comment).
bool is_failure(const trial_record& t);

/// A setting the model convicts, with the trials that convict it.
struct blamed_setting {
  /// Feature name as tuning::feature_space names it ("world_size=2", "+fused_qkv") or
  /// "knob changed" features as "world_size!=default".
  std::string feature;
  /// Failed trials (ids, log order) in which the feature was active.
  std::vector<std::uint64_t> trials;
  /// P(fail) of the baseline with the feature alone, leak aside.
  double p_fail = 0.0;
};

class failure_model {
public:
  /// Fits the model over `history` (finished trials; see is_failure). With no failure at all the
  /// model is its prior (P(fail) = sigmoid(intercept_mean) for every configuration).
  failure_model(const task_spec& task, const feature_space& fs,
                const std::vector<trial_record>& history, failure_model_options options = {});
  /// As above; a contract violation can only have been caused by a contract-risky feature
  /// (`risky`, one entry per one-hot feature: patches and values of "numerics" knobs; launch
  /// settings keep the work by construction), so its other settings are neither suspects nor
  /// exonerated by it.
  failure_model(const task_spec& task, const feature_space& fs,
                const std::vector<trial_record>& history, const std::vector<bool>& risky,
                failure_model_options options = {});
  /// As above with each trial's feature_space::active (`active[i]` of history[i]; e.g.
  /// history_encoding::active).
  failure_model(const task_spec& task, const feature_space& fs,
                const std::vector<trial_record>& history,
                const std::vector<std::vector<int>>& active, const std::vector<bool>& risky,
                failure_model_options options = {});

  /// P(fail) of a configuration given by its one-hot active features (indices of feature_space,
  /// ascending; the knobs they change are added): the noisy-OR at the estimated q.
  [[nodiscard]] double p_fail(const std::vector<int>& active) const;

  /// The convicted features (see the file comment), in feature order.
  [[nodiscard]] const std::vector<blamed_setting>& convicted() const { return convicted_; }
  /// Suspects: features not convicted, never in a usable trial, in at least one failed trial,
  /// whose P(fail) alone is at least `above` (the policy avoids them while a candidate predicted
  /// safer remains), in feature order.
  [[nodiscard]] std::vector<blamed_setting> suspects(double above) const;
  /// True if any active feature (or the knob change of an active one-hot) is convicted.
  [[nodiscard]] bool excluded(const std::vector<int>& active) const;
  /// The convicted feature among `active`, or "" (for the reason a candidate is left out).
  [[nodiscard]] std::string excluded_by(const std::vector<int>& active) const;
  /// Failed trials the fit used.
  [[nodiscard]] std::size_t failures() const { return failures_; }

private:
  [[nodiscard]] std::vector<int> columns(const std::vector<int>& active) const;
  /// Calls f(column) for each of columns(active), in the same order, without allocating when
  /// `active` is ascending (its knobs then come in order); otherwise walks columns(active).
  template <class F>
  void for_each_column(const std::vector<int>& active, F&& f) const;
  std::size_t one_hot_ = 0;
  std::vector<int> knob_of_;
  /// q per column (leak, one-hot features, knob changed).
  std::vector<double> q_;
  /// Per column: the convicted feature's name, "" when not convicted.
  std::vector<std::string> convicted_name_;
  std::vector<blamed_setting> convicted_;
  /// Per column: P(fail) alone, failed trials with it, usable trials with it, name.
  std::vector<double> alone_;
  std::vector<std::vector<std::uint64_t>> failed_with_;
  std::vector<int> usable_with_;
  std::vector<std::string> names_;
  std::size_t failures_ = 0;
};

} // namespace infrarsi::tuning
