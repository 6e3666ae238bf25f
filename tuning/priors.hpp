#pragma once
/// @file priors.hpp
/// Priors: the expected effect of each setting and patch before any measurement, as the
/// llm-proposer supplies them (offline knowledge base, an LLM, or replay). Known to be
/// miscalibrated; the planner's time model revises them from live runs.

#include <string>
#include <vector>

#include "tuning/task.hpp"

namespace infrarsi::tuning {

/// Expected effect of setting one knob to one value, relative to the knob's default.
struct setting_prior {
  std::string knob;
  knob_value value;
  /// Expected speedup factor of the step time (1.3 = 30% faster, 0.8 = slower). Default 1.
  double speedup = 1.0;
  /// Expected change of per-rank peak memory in bytes (negative saves memory). Default 0.
  double memory_bytes = 0.0;
  /// Where it came from ("knowledge:config/knowledge/torch_gpt.toml", "llm:...", ...).
  std::string source;
};

/// Expected effect of applying one patch.
struct patch_prior {
  std::string patch;
  double speedup = 1.0;
  double memory_bytes = 0.0;
  std::string source;
};

/// All priors of one run.
struct prior_set {
  std::vector<setting_prior> settings;
  std::vector<patch_prior> patches;

  /// The prior of knob=value, or nullptr.
  [[nodiscard]] const setting_prior* find(const std::string& knob, const knob_value& value) const {
    for (const auto& s : settings)
      if (s.knob == knob && s.value == value)
        return &s;
    return nullptr;
  }
  [[nodiscard]] const patch_prior* find_patch(const std::string& name) const {
    for (const auto& p : patches)
      if (p.patch == name)
        return &p;
    return nullptr;
  }
};

} // namespace infrarsi::tuning
