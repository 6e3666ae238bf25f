#include "tuning/baselines.hpp"

#include <algorithm>
#include <set>

#include "tuning/search_space.hpp"

namespace infrarsi::tuning {

namespace {

/// Admissible candidates in enumeration order (constraints are checked by the enumeration).
std::vector<configuration> open_candidates(const planner_input& in, const history_facts& facts,
                                           const std::set<std::string>& chosen) {
  std::vector<configuration> out;
  for (auto& c : enumerate_candidates(*in.task, in.seed))
    if (admissible(in, facts, c) && chosen.count(c.key()) == 0)
      out.push_back(std::move(c));
  return out;
}

std::uint64_t stream_seed(const planner_input& in) {
  return in.seed * 0x9E3779B97F4A7C15ull + in.history.size() + 0x5EA7C4ull;
}

} // namespace

std::vector<proposal> random_search::propose(const planner_input& in, std::size_t n) const {
  const auto& task = *in.task;
  feature_space fs{task, nullptr};
  history_facts facts{task, fs, in.history};
  std::set<std::string> chosen;
  auto open = open_candidates(in, facts, chosen);
  splitmix64 rng{stream_seed(in)};
  std::vector<proposal> out;
  while (out.size() < n && !open.empty()) {
    auto i = static_cast<std::size_t>(rng.below(open.size()));
    out.push_back({open[i], 1.0, "random: uniform over the untried candidates", {}, {}});
    open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return out;
}

std::vector<proposal> greedy_coordinate::propose(const planner_input& in, std::size_t n) const {
  const auto& task = *in.task;
  feature_space fs{task, nullptr};
  history_facts facts{task, fs, in.history};
  const trial_record* incumbent = nullptr;
  for (const auto& t : in.history)
    if (t.usable() && (incumbent == nullptr || t.timed_step_time_s < incumbent->timed_step_time_s))
      incumbent = &t;
  configuration centre = incumbent != nullptr ? incumbent->config : baseline_configuration(task);
  std::set<std::string> chosen;
  std::vector<proposal> out;
  for (auto& m : single_changes(task, centre)) {
    if (out.size() >= n)
      break;
    if (constraint_violation(task, m).empty() && admissible(in, facts, m)
        && chosen.insert(m.key()).second)
      out.push_back({std::move(m), 1.0, "greedy: next untried single change of the incumbent", {}, {}});
  }
  if (out.size() < n) {
    auto open = open_candidates(in, facts, chosen);
    splitmix64 rng{stream_seed(in)};
    while (out.size() < n && !open.empty()) {
      auto i = static_cast<std::size_t>(rng.below(open.size()));
      out.push_back({open[i], 1.0, "greedy: local optimum, random restart", {}, {}});
      open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return out;
}

} // namespace infrarsi::tuning
