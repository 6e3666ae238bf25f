#pragma once
/// @file baselines.hpp
/// Baseline search policies, for benchmarks only (bench/search_quality): they implement the
/// same planner_policy interface as the product's policy, respect what every policy respects
/// (constraints, patches excluded at init, patches that do not apply together, never the same
/// configuration twice) and nothing more. Pure and deterministic.

#include "tuning/planner.hpp"

namespace infrarsi::tuning {

/// "random/1": uniform random search over the candidates (tuning::enumerate_candidates), drawn
/// with SplitMix64 seeded from (seed, number of trials so far), so the same history and seed
/// give the same proposals.
class random_search final : public planner_policy {
public:
  [[nodiscard]] std::string name() const override { return "random/1"; }
  [[nodiscard]] std::vector<proposal> propose(const planner_input& in,
                                              std::size_t n) const override;
};

/// "greedy_coordinate/1": greedy coordinate descent from the incumbent (the fastest usable
/// configuration measured so far, the baseline before any): propose the first untried single
/// change of the incumbent, coordinates in task order (each knob's other searched values, then
/// each patch toggled); a faster result becomes the new incumbent, so the search moves as soon
/// as a coordinate improves. When every single change of the incumbent has been tried (a local
/// optimum), restart from a random untried candidate.
class greedy_coordinate final : public planner_policy {
public:
  [[nodiscard]] std::string name() const override { return "greedy_coordinate/1"; }
  [[nodiscard]] std::vector<proposal> propose(const planner_input& in,
                                              std::size_t n) const override;
};

} // namespace infrarsi::tuning
