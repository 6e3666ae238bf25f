#include "tuning/trial.hpp"

#include <algorithm>
#include <charconv>
#include <string_view>

namespace infrarsi::tuning {

namespace {

/// Appends to_string(v) (tuning/task.hpp) to `out` without a temporary string.
void append_value(std::string& out, const knob_value& v) {
  char buf[64];
  if (const auto* i = std::get_if<std::int64_t>(&v)) {
    auto res = std::to_chars(buf, buf + sizeof buf, *i);
    out.append(buf, res.ptr);
  } else if (const auto* d = std::get_if<double>(&v)) {
    auto res = std::to_chars(buf, buf + sizeof buf, *d); // shortest exact round trip
    out.append(buf, res.ptr);
  } else if (const auto* b = std::get_if<bool>(&v)) {
    out += *b ? "true" : "false";
  } else {
    out += std::get<std::string>(v);
  }
}

} // namespace

std::string configuration::key() const {
  std::size_t size = 1 + patches.size();
  for (const auto& [k, v] : knobs)
    size += k.size() + 2 +
            (std::holds_alternative<std::string>(v) ? std::get<std::string>(v).size() : 24);
  for (const auto& p : patches)
    size += p.size();
  std::string out;
  out.reserve(size);
  for (const auto& [k, v] : knobs) {
    if (!out.empty())
      out += ',';
    out += k;
    out += '=';
    append_value(out, v);
  }
  out += '|';
  for (std::size_t i = 0; i < patches.size(); ++i) {
    if (i > 0)
      out += ',';
    out += patches[i];
  }
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
    case purpose_kind::ablation: return "ablation";
  }
  return "";
}

void set_purpose_text(trial_record& t, const std::string& text) {
  t.purpose = text;
  t.kind = purpose_kind::unknown;
  auto tagged = [&](const char* prefix, purpose_kind k) {
    std::string_view p{prefix};
    if (text.rfind(p, 0) != 0 || text.size() <= p.size() + 1 || text[p.size()] != '/')
      return false;
    const char* first = text.data() + p.size() + 1;
    const char* last = text.data() + text.size();
    std::uint64_t id = 0;
    auto [end, ec] = std::from_chars(first, last, id);
    if (ec != std::errc{} || end == first)
      return false;
    std::uint32_t round = 1;
    if (end != last) {
      if (*end != '#')
        return false;
      auto [end2, ec2] = std::from_chars(end + 1, last, round);
      if (ec2 != std::errc{} || end2 != last)
        return false;
    }
    t.kind = k;
    t.candidate_trial = id;
    t.round = round;
    t.purpose = std::string{p};
    return true;
  };
  if (text == "baseline")
    t.kind = purpose_kind::baseline;
  else if (text == "explore")
    t.kind = purpose_kind::explore;
  else if (!tagged("verify-baseline", purpose_kind::verify_baseline)
           && !tagged("verify-candidate", purpose_kind::verify_candidate))
    tagged("ablation", purpose_kind::ablation);
}

std::string purpose_text(const trial_record& t) {
  if (t.kind != purpose_kind::verify_baseline && t.kind != purpose_kind::verify_candidate
      && t.kind != purpose_kind::ablation)
    return t.purpose;
  return std::string{label(t.kind)} + "/" + std::to_string(t.candidate_trial)
         + (t.round > 1 ? "#" + std::to_string(t.round) : "");
}

const char* to_string(memory_source s) {
  switch (s) {
    case memory_source::unknown: return "unknown";
    case memory_source::unobserved: return "unobserved";
    case memory_source::workload: return "workload";
    case memory_source::device_sampled: return "device_sampled";
    case memory_source::host_rss: return "host_rss";
  }
  return "unknown";
}

bool declares_device_memory(const task_spec& task) {
  return task.limits.device_memory_bytes > 0 || task.hardware.gpu_memory_bytes > 0;
}

memory_reading choose_peak_memory(bool device_memory_declared,
                                  std::optional<std::uint64_t> workload_peak_bytes,
                                  std::uint64_t device_sampled_peak_bytes,
                                  std::uint64_t host_rss_peak_bytes) {
  std::uint64_t workload = workload_peak_bytes.value_or(0);
  if (device_memory_declared) {
    if (workload > 0)
      return {workload, memory_source::workload};
    if (device_sampled_peak_bytes > 0)
      return {device_sampled_peak_bytes, memory_source::device_sampled};
    return {0, memory_source::unobserved};
  }
  if (workload == 0 && host_rss_peak_bytes == 0)
    return {0, memory_source::unobserved};
  if (workload >= host_rss_peak_bytes)
    return {workload, memory_source::workload};
  return {host_rss_peak_bytes, memory_source::host_rss};
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
