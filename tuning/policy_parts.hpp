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
    // task's knobs (what the policies propose), the map of the first such call is reused: the
    // same names, every knob's value overwritten in place, and each constraint reads its names
    // through pointers into the map bound once (constraint_expr::holds by slot; a map's
    // elements do not move).
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
    if (slot_values_.empty()) { // the first call with every knob: bind
      vars_ = task->constants;
      for (const auto& [k, v] : c.knobs)
        vars_[k] = v;
      for (const auto& k : knob_names_)
        knob_value_.push_back(&vars_.at(k));
      for (const auto& e : exprs) {
        std::vector<const knob_value*> values;
        for (const auto& name : e.slot_names()) {
          auto it = vars_.find(name);
          values.push_back(it == vars_.end() ? nullptr : &it->second);
        }
        slot_values_.push_back(std::move(values));
      }
    } else {
      std::size_t i = 0;
      for (const auto& kv : c.knobs) // in knob_names_'s order (checked above)
        *knob_value_[i++] = kv.second;
    }
    std::string why;
    for (std::size_t e = 0; e < exprs.size(); ++e) {
      auto holds = exprs[e].holds(slot_values_[e], why);
      if (!holds || !*holds)
        return false;
    }
    return true;
  }

private:
  std::vector<std::string> knob_names_; // the task's knob names, sorted
  mutable std::map<std::string, knob_value> vars_;
  /// vars_'s value of each knob of knob_names_, and of each slot of each expression.
  mutable std::vector<knob_value*> knob_value_;
  mutable std::vector<std::vector<const knob_value*>> slot_values_;
};

/// printf-style formatting of one number.
inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

} // namespace infrarsi::tuning
