#pragma once
// Knob builders for the planner's toy tasks (bayes_policy_test, planner_learning_test).

#include <cstdint>
#include <string>
#include <vector>

#include "tuning/task.hpp"

namespace infrarsi::tuning::test_knobs {

inline knob_spec int_knob(const std::string& name, std::vector<std::int64_t> values, std::int64_t def,
                   std::vector<std::string> tags = {}) {
  knob_spec k;
  k.name = name;
  k.type = knob_type::integer;
  for (auto v : values)
    k.values.emplace_back(v);
  k.default_value = def;
  k.tags = std::move(tags);
  return k;
}

inline knob_spec bool_knob(const std::string& name, std::vector<std::string> tags = {}) {
  knob_spec k;
  k.name = name;
  k.type = knob_type::boolean;
  k.default_value = false;
  k.tags = std::move(tags);
  return k;
}

inline knob_spec choice_knob(const std::string& name, std::vector<std::string> values,
                      const std::string& def, std::vector<std::string> tags = {}) {
  knob_spec k;
  k.name = name;
  k.type = knob_type::choice;
  for (auto& v : values)
    k.values.emplace_back(v);
  k.default_value = def;
  k.tags = std::move(tags);
  return k;
}

} // namespace infrarsi::tuning::test_knobs
