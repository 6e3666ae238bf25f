#pragma once
/// @file planner.hpp
/// The search policy: which configurations to try next. Pure and deterministic: the same input
/// (task, priors, history, seed) gives the same proposals, byte for byte.
///
/// `seeded_local_search` (the first policy):
///  1. Candidates: the knob space (explicit value lists; integer ranges of at most 64 values;
///     real ranges at 5 evenly spaced points) times every subset of the task's patches, filtered
///     by the task's constraints; at most 20,000, sampled with the seed beyond that.
///  2. Never proposed: a configuration already tried (any outcome), one that violates a
///     constraint, one that is at least as memory-hungry as a configuration that ran out of
///     memory (same patches, memory-hungry knobs >=, memory savers <=; knobs without a memory
///     tag are taken as memory-neutral), one with a patch outside the editable scope, one with
///     a setting or patch that broke the contract when it was the only setting of that trial
///     never seen to pass (so the blame is unambiguous) and never passed since.
///     A proposal brings at most one setting or patch that has not yet passed the contract in
///     some trial (one new thing at a time, so a violation or an OOM has an unambiguous
///     cause), unless no such candidate is left.
///  3. Initial design (the first `initial_design` proposals): experience seeds first, then the
///     candidates at most three changes away from the baseline with the best prior-predicted
///     speedup, spread for diversity — each pick maximizes predicted gain + 0.05 x its Hamming
///     distance to those already chosen.
///  4. Afterwards: a Bayesian additive model of log step time over one-hot settings
///     (per-setting effects with Gaussian priors N(-log prior speedup, 0.3^2), noise from the
///     doctor's log_sd; closed-form posterior with Eigen) scores the neighbours (Hamming
///     distance <= 2) of the three fastest verified configurations by an optimistic bound
///     (predicted log time minus one posterior standard deviation); the best are proposed.
///     If no neighbour is left, the whole candidate set is scored the same way.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tuning/priors.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::tuning {

class encoding_cache;

/// Everything a policy may look at.
struct planner_input {
  const task_spec* task = nullptr;
  const prior_set* priors = nullptr;
  /// Every trial so far (baseline, search and verification runs), in log order.
  std::vector<trial_record> history;
  /// Configurations recommended by the experience bank, best first.
  std::vector<configuration> experience_seeds;
  /// Patches excluded at init (decide::excluded_patches): outside the editable scope, or not
  /// applying to the unpatched workload. Never proposed.
  std::vector<std::string> excluded_patches;
  /// Pairs of patches that do not apply together (found at init): never proposed together.
  std::vector<std::pair<std::string, std::string>> incompatible_patches;
  /// log-sd of step time from the doctor (noise of one measurement).
  double noise_log_sd = 0.02;
  std::uint64_t seed = 0;
  /// Number of initial-design proposals (before the model takes over).
  std::size_t initial_design = 4;
  /// The doctor's minimum detectable speedup (e.g. 1.056); 0: unknown. Policies that stop on
  /// their own stop when the best expected improvement is below it.
  double min_detectable_speedup = 0.0;
  /// Memory one rank may use before it runs out, bytes (task limits.device_memory_bytes, else
  /// limits.memory_cap_bytes); 0: unknown (the memory model then cannot price OOMs).
  double memory_capacity_bytes = 0.0;
  /// Search trials the run may spend (the task's budget.trials, or tune --trials); 0: unknown.
  /// bayes_ei/3 and /5 exploit in the last quarter of it (tuning/bayes_policy.hpp, the end game);
  /// bayes_ei/5 and /6 narrow their time model's interaction prior after half of it (at least
  /// 20), and bayes_ei/6 and /7 then fit their memory model with pairwise interactions.
  std::size_t search_budget = 0;
  /// Search trials counted against that budget so far (distinct explore trial ids, lost attempts
  /// included: decide::search_trials); the policy takes the larger of this and the explore trials
  /// in `history`, so a resumed run whose lost attempts are not re-queued yet counts them.
  std::size_t search_spent = 0;
  /// The run's encodings of its trials from the steps before (tuning/search_space.hpp), or
  /// nullptr. Saves time only: the proposals are the same with and without it. The policies of
  /// the bayes_ei_cost family (bayes_ei/2 to /7) use it.
  encoding_cache* encodings = nullptr;
};

/// Search trials spent by `in`: the explore trials of its history (in flight included), or
/// planner_input::search_spent when larger. What the policies' late phases (the end game, the
/// narrowed interactions) and the report's memory model count.
std::size_t search_trials_spent(const planner_input& in);

/// One proposal and why it was chosen.
struct proposal {
  configuration config;
  /// Predicted speedup over the baseline (prior or posterior), and the reason in words.
  double predicted_speedup = 1.0;
  std::string reason;
  /// Speedup the priors alone predict (before any revision by measurements); unset for
  /// policies without a prior model. Used for the prior/posterior rank correlation.
  std::optional<double> prior_speedup;
  /// Predicted probability that the configuration runs out of memory; unset when not modelled.
  std::optional<double> p_oom;
};

/// What a policy returns: the proposals, and why it stopped early when it returns fewer than
/// asked for (empty when the space is exhausted or nothing was asked).
struct proposal_batch {
  std::vector<proposal> proposals;
  std::string stop_reason;
  /// Settings the policy excludes for the failures they caused, each with the trials that
  /// convict it (e.g. "world_size!=default: failed in trials 4, 6, never usable (P(fail)
  /// 0.93)"); empty for policies without failure blame.
  std::vector<std::string> blamed;
};

/// A search policy (one module per algorithm behind this interface; baselines for benchmarks
/// implement it too).
class planner_policy {
public:
  virtual ~planner_policy() = default;
  /// Name recorded in the log, e.g. "seeded_local_search/1".
  [[nodiscard]] virtual std::string name() const = 0;
  /// Up to `n` proposals (fewer when the space is exhausted).
  [[nodiscard]] virtual std::vector<proposal> propose(const planner_input& in,
                                                      std::size_t n) const = 0;
  /// Proposals with the stop reason (policies with a stopping rule override this).
  [[nodiscard]] virtual proposal_batch plan(const planner_input& in, std::size_t n) const {
    return {propose(in, n), "", {}};
  }
};

/// Names of the built-in policies: "bayes_ei/7" (the default: bayes_ei/6 with a cheaper EP in its
/// late memory model), "bayes_ei/6" (bayes_ei/5 whose memory model gains pairwise interactions
/// of the memory-tagged knobs when the time model narrows),
/// "bayes_ei/5" (bayes_ei/3 whose time model narrows its interaction prior in the second half of
/// a run), "bayes_ei/4" (bayes_ei/3 with memory interactions all run; opt-in), "bayes_ei/3",
/// "bayes_ei/2" and "bayes_ei/1" (the defaults before it; a task
/// picks any with `budget.policy`), "seeded_local_search/1" (the
/// first policy; kept so that old logs replay), and the baselines for benchmarks only:
/// "random/1", "greedy_coordinate/1", "settings_only/1".
std::vector<std::string> policy_names();

/// The policy of that name, or nullptr.
std::unique_ptr<planner_policy> make_policy(const std::string& name);

/// The name new runs use.
inline constexpr const char* default_policy_name = "bayes_ei/7";

/// The policy described in the file comment.
class seeded_local_search final : public planner_policy {
public:
  [[nodiscard]] std::string name() const override { return "seeded_local_search/1"; }
  [[nodiscard]] std::vector<proposal> propose(const planner_input& in,
                                              std::size_t n) const override;
};

/// The baseline configuration: every knob at its default, no patches.
configuration baseline_configuration(const task_spec& task);

/// All candidate configurations of the task (step 1 above), in a deterministic order.
std::vector<configuration> enumerate_candidates(const task_spec& task, std::uint64_t seed,
                                                std::size_t limit = 20000);

/// "" if `config` satisfies the task's constraints, else the violation (tuning/expr.hpp).
std::string constraint_violation(const task_spec& task, const configuration& config);

/// SplitMix64 (Steele et al. 2014): a fully specified generator, identical on every platform.
class splitmix64 {
public:
  explicit splitmix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n) (n > 0), by rejection (no modulo bias).
  std::uint64_t below(std::uint64_t n) {
    auto limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
    std::uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return x % n;
  }

private:
  std::uint64_t state_;
};

} // namespace infrarsi::tuning
