#pragma once
/// @file policy_parts.hpp
/// Small pieces the model-based policies (bayes_policy.cpp, bayes_cost_policy.cpp) share.
/// Internal to tuning/.

#include <algorithm>
#include <cstdio>
#include <map>
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
    for (const auto& k : t.knobs)
      knob_names_.push_back(k.name);
    std::sort(knob_names_.begin(), knob_names_.end());
  }
  /// True if `c` satisfies every constraint.
  [[nodiscard]] bool ok(const configuration& c) const {
    if (exprs.empty())
      return true;
    // The variables are the task's constants with c's knobs over them. When c sets exactly the
    // task's knobs (what the policies propose), the map of the last call is reused: the same
    // names, every knob's value overwritten (no map built per call).
    bool every_knob = c.knobs.size() == knob_names_.size();
    if (every_knob) {
      auto name = knob_names_.begin();
      for (const auto& kv : c.knobs)
        every_knob = every_knob && kv.first == *name++;
    }
    if (!every_knob) {
      auto vars = task->constants;
      for (const auto& [k, v] : c.knobs)
        vars[k] = v;
      return first_violation(exprs, vars).empty();
    }
    if (vars_.empty()) {
      vars_ = task->constants;
      for (const auto& [k, v] : c.knobs)
        vars_[k] = v;
    } else {
      auto it = vars_.begin();
      for (const auto& [k, v] : c.knobs) {
        while (it->first != k) // c's knobs are a subset of vars_'s names, both in name order
          ++it;
        it->second = v;
      }
    }
    return first_violation(exprs, vars_).empty();
  }

private:
  std::vector<std::string> knob_names_; // the task's knob names, sorted
  mutable std::map<std::string, knob_value> vars_;
};

/// printf-style formatting of one number.
inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

} // namespace infrarsi::tuning
