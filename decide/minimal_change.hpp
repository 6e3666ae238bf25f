#pragma once
/// @file minimal_change.hpp
/// The minimal promoted change (issue 18, item 4): before promotion, the re-verified winner's
/// changes that the time model credits least are undone one at a time and the smaller
/// configuration is measured (an `ablation` trial, then re-verified against the baseline in
/// interleaved pairs exactly as a candidate is); the smallest configuration whose speedup stays
/// within the winner's interval is promoted. Pure: a function of the run's events, called by
/// the step function (next_step), promotion_decision, replay and the benchmarks.
///
/// The rule ("minimal-change/1", ContractLocked "promotion_rule"; a run locked without it
/// promotes the bundle as measured):
///  1. The bundle: the promotable re-verification with the highest speedup among the explore
///     candidates (promotion_decision's winner without ablations). Nothing to do when there is
///     none, when budget.ablations is 0, or when it changes fewer than two settings.
///  2. Its changes in credit order, least first (tuning::credit_changes: the time model fitted
///     on the run's usable baseline and explore trials, which no later trial changes).
///  3. current = the bundle. For each change in that order, while fewer than budget.ablations
///     ablations were tried and current still has two changes or more: the ablation is current
///     with that change undone (tuning::undo_change); one that breaks a task constraint is
///     skipped (not counted). It runs once (purpose ablation/<bundle>#<index>); a failed or
///     contract-breaking run rejects it; otherwise it is re-verified (reverify_doc with its
///     trial id) and accepted when its re-verification is promotable and its speedup is at
///     least max(L, S / (1 + m) x exp(-1.645 se)), L and S the bundle's lower 95 % bound and
///     speedup, m = promotion_margin(run), se = sqrt(se_bundle^2 + se_ablation^2) of the two
///     log speedups (each sqrt(var(log t_base) / n + var(log t_cand) / n) over its pairs):
///     within the candidate's interval, and not shown (one-sided 95 %) to lose more than what
///     a re-verification can detect; a wide early-look interval alone would let a real effect
///     go. Accepted: current becomes it.
///  4. Promoted: current, with its own re-verification's estimate.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/run_projection.hpp"
#include "tuning/minimal_change.hpp"
#include "tuning/task.hpp"

namespace infrarsi::decide {

/// The promotion rule new runs are locked with (ContractLocked "promotion_rule").
inline constexpr const char* current_promotion_rule = "minimal-change/1";

/// True when `run` was locked with current_promotion_rule.
bool minimal_change_rule(const store::run_state& run);

/// Where one ablation stands.
enum class ablation_state {
  /// To propose now (its trial does not exist yet).
  next,
  /// Its trial is running, or waits for its verdict or a re-queue.
  running,
  /// Its trial was usable; its re-verification is not decided yet.
  reverifying,
  /// Kept: the configuration without the change is as fast (see the file comment).
  accepted,
  /// Not kept: its trial failed, or its re-verification said it is slower.
  rejected,
};

/// One ablation of the plan.
struct ablation {
  /// 1-based; the ablation trial's round.
  std::uint32_t index = 0;
  /// The change undone (from the bundle's credit order).
  tuning::bundle_change removed;
  /// The configuration measured.
  tuning::configuration config;
  /// Its trial (0: not proposed yet).
  std::uint64_t trial_id = 0;
  ablation_state state = ablation_state::next;
  /// Why accepted or rejected, in words.
  std::string reason;
  /// Its final re-verification (accepted, or rejected after re-verification).
  const store::reverification* reverification = nullptr;
};

/// The plan of a run as folded so far.
struct ablation_plan {
  /// The rule applies and the bundle has two changes or more.
  bool active = false;
  /// The bundle's re-verification (nullptr: nothing promotable).
  const store::reverification* bundle = nullptr;
  /// The bundle's changes, least credited first.
  std::vector<tuning::bundle_change> order;
  /// Ablations in index order: every one tried, then at most one that is not finished.
  std::vector<ablation> steps;
  /// Changes skipped because undoing them breaks a constraint ("name: violation").
  std::vector<std::string> skipped;
  /// The smallest accepted configuration and its re-verification (the bundle's when none was
  /// accepted).
  tuning::configuration current;
  const store::reverification* current_reverification = nullptr;
};

/// The plan of `run` (see the file comment). Deterministic in the logged events.
ablation_plan plan_ablations(const tuning::task_spec& task, const store::run_state& run);

/// True when trial `id` of `run` is an ablation trial.
bool is_ablation_trial(const store::run_state& run, std::uint64_t id);

/// The plan as logged in CandidatePromoted ("minimal_change"): {"rule", "bundle_trial",
/// "bundle_change", "bundle_speedup", "bundle_ci_low", "bundle_ci_high", "order": [{"change",
/// "model_speedup"}], "ablations": [{"index", "removed", "trial_id", "change", "speedup",
/// "ci_low", "ci_high", "accepted", "reason"}], "removed": [names], "skipped": [...]}.
nlohmann::json ablation_doc(const tuning::task_spec& task, const ablation_plan& plan);

} // namespace infrarsi::decide
