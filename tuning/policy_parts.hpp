#pragma once
/// @file policy_parts.hpp
/// Small pieces the model-based policies (bayes_policy.cpp, bayes_cost_policy.cpp) share.
/// Internal to tuning/.

#include <cstdio>
#include <string>
#include <vector>

#include "tuning/expr.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::tuning {

/// The task's constraints, parsed once (a constraint that does not parse is left out: the task
/// file's loader has refused such a task already).
struct constraint_set {
  std::vector<constraint_expr> exprs;
  const task_spec* task = nullptr;
  explicit constraint_set(const task_spec& t) : task(&t) {
    for (const auto& text : t.constraints) {
      std::string why;
      if (auto e = constraint_expr::parse(text, why))
        exprs.push_back(std::move(*e));
    }
  }
  /// True if `c` satisfies every constraint.
  [[nodiscard]] bool ok(const configuration& c) const {
    auto vars = task->constants;
    for (const auto& [k, v] : c.knobs)
      vars[k] = v;
    return first_violation(exprs, vars).empty();
  }
};

/// printf-style formatting of one number.
inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

} // namespace infrarsi::tuning
