#include "tuning/trial.hpp"

#include <algorithm>

namespace infrarsi::tuning {

std::string configuration::key() const {
  std::string out;
  for (const auto& [k, v] : knobs) {
    if (!out.empty())
      out += ',';
    out += k + "=" + to_string(v);
  }
  out += '|';
  for (std::size_t i = 0; i < patches.size(); ++i)
    out += (i > 0 ? "," : "") + patches[i];
  return out;
}

std::string configuration::diff_from(const configuration& other) const {
  std::string out;
  auto add = [&out](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
  for (const auto& [k, v] : knobs) {
    auto it = other.knobs.find(k);
    if (it == other.knobs.end() || it->second != v)
      add(k + " " + (it == other.knobs.end() ? "?" : to_string(it->second)) + "->" + to_string(v));
  }
  for (const auto& p : patches)
    if (std::find(other.patches.begin(), other.patches.end(), p) == other.patches.end())
      add("+" + p);
  for (const auto& p : other.patches)
    if (std::find(patches.begin(), patches.end(), p) == patches.end())
      add("-" + p);
  return out.empty() ? "(baseline)" : out;
}

const char* label(purpose_kind k) {
  switch (k) {
    case purpose_kind::unknown: return "";
    case purpose_kind::baseline: return "baseline";
    case purpose_kind::explore: return "explore";
    case purpose_kind::verify_baseline: return "verify-baseline";
    case purpose_kind::verify_candidate: return "verify-candidate";
  }
  return "";
}

std::string purpose_text(const trial_record& t) {
  if (t.kind != purpose_kind::verify_baseline && t.kind != purpose_kind::verify_candidate)
    return t.purpose;
  return std::string{label(t.kind)} + "/" + std::to_string(t.candidate_trial)
         + (t.round > 1 ? "#" + std::to_string(t.round) : "");
}

const char* to_string(trial_outcome o) {
  switch (o) {
    case trial_outcome::unset: return "unset";
    case trial_outcome::ok: return "ok";
    case trial_outcome::oom: return "oom";
    case trial_outcome::crash: return "crash";
    case trial_outcome::timeout: return "timeout";
    case trial_outcome::launch_error: return "launch_error";
    case trial_outcome::contract_violation: return "contract_violation";
    case trial_outcome::lost: return "lost";
    case trial_outcome::preempted: return "preempted";
  }
  return "?";
}

} // namespace infrarsi::tuning
