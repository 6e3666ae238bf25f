#include "tuning/experience_seeds.hpp"

#include <algorithm>

#include "tuning/bayes_policy.hpp"
#include "tuning/policy_parts.hpp"
#include "tuning/search_space.hpp"

namespace infrarsi::tuning {

std::string seed_refusal(const planner_input& in, const configuration& seed,
                         const std::string& memory_policy) {
  const task_spec& task = *in.task;
  const std::string outside = "not in this task's search space: ";
  for (const auto& [name, value] : seed.knobs)
    if (std::none_of(task.knobs.begin(), task.knobs.end(),
                     [&](const knob_spec& k) { return k.name == name; }))
      return outside + "the task has no knob '" + name + "'";
  for (const auto& k : task.knobs) {
    auto it = seed.knobs.find(k.name);
    if (it == seed.knobs.end())
      return outside + "knob '" + k.name + "' is not set";
    auto values = search_values(k);
    if (it->second != k.default_value &&
        std::find(values.begin(), values.end(), it->second) == values.end())
      return outside + "knob '" + k.name + "' value " + to_string(it->second) +
             " is not among its searched values";
  }
  for (const auto& p : seed.patches)
    if (std::none_of(task.patches.begin(), task.patches.end(),
                     [&](const auto& tp) { return tp.name == p; }))
      return outside + "the task has no patch '" + p + "'";
  if (seed == baseline_configuration(task))
    return "it is the baseline configuration (the doctor measures it)";
  feature_space fs{task, in.priors};
  history_facts facts{task, fs, in.history};
  if (facts.was_tried(seed, seed.key()))
    return "it was tried in this run already";
  for (const auto& p : seed.patches)
    if (std::find(in.excluded_patches.begin(), in.excluded_patches.end(), p) !=
        in.excluded_patches.end())
      return "patch '" + p +
             "' is excluded in this run (outside the scope, or does not apply alone)";
  for (const auto& [a, b] : in.incompatible_patches)
    if (std::binary_search(seed.patches.begin(), seed.patches.end(), a) &&
        std::binary_search(seed.patches.begin(), seed.patches.end(), b))
      return "patches '" + a + "' and '" + b + "' do not apply together";
  constraint_set constraints{task};
  if (!constraints.ok(seed)) {
    auto vars = task.constants;
    for (const auto& [k, v] : seed.knobs)
      vars[k] = v;
    return "it breaks a constraint: " + first_violation(constraints.exprs, vars);
  }
  if (facts.dominated_by_oom(task, seed))
    return "it is at least as memory-hungry (by the task's memory tags) as a configuration that "
           "ran out of memory in this run";
  auto memory = fit_run_memory(task, fs, in.history, in.priors, in.memory_capacity_bytes,
                               memory_options_for(memory_policy, search_trials_spent(in),
                                                  in.search_budget));
  if (memory.fitted) {
    double p = memory.p_oom(task, fs, seed);
    if (p > 0.5)
      return "the memory model predicts it does not fit: P(OOM) " + fmt("%.2f", p);
  }
  return {};
}

} // namespace infrarsi::tuning
