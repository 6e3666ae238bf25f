#include "adapters/metrics.hpp"

#include <algorithm>
#include <cmath>

namespace infrarsi::adapters {

metrics_parser::metrics_parser(const tuning::metrics_spec& spec) : spec_(spec) {
  if (spec_.format == tuning::metrics_spec::format_kind::regex) {
    try {
      regex_.emplace(spec_.regex, std::regex::ECMAScript | std::regex::optimize);
      if (regex_->mark_count() < spec_.regex_fields.size())
        config_error_ = "metrics.regex has " + std::to_string(regex_->mark_count())
                        + " capture group(s) but regex_fields names "
                        + std::to_string(spec_.regex_fields.size());
    } catch (const std::regex_error& e) {
      config_error_ = "metrics.regex does not compile: " + std::string{e.what()};
      regex_.reset();
    }
  }
}

void metrics_parser::malformed(std::string_view line, const std::string& why) {
  if (malformed_++ == 0)
    first_malformed_ = why + ": " + std::string{line.substr(0, 200)};
}

void metrics_parser::feed(std::string_view line) {
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  if (spec_.format == tuning::metrics_spec::format_kind::json_lines) {
    auto pos = line.find(spec_.prefix);
    if (pos == std::string_view::npos)
      return;
    feed_json(line.substr(pos + spec_.prefix.size()), line);
  } else if (regex_) {
    feed_regex(std::string{line});
  }
}

namespace {

std::optional<double> number_at(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number())
    return std::nullopt;
  return it->get<double>();
}

} // namespace

void metrics_parser::feed_json(std::string_view body, std::string_view line) {
  auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    malformed(line, "not a JSON object");
    return;
  }
  if (auto ev = j.find("event"); ev != j.end()) {
    if (ev->is_string() && ev->get<std::string>() == "final")
      final_ = j;
    return; // other events are informational
  }
  auto step = number_at(j, "step");
  auto loss = j.find("loss");
  auto time = number_at(j, "step_time_s");
  if (!step || *step < 0 || loss == j.end() || !time) {
    malformed(line, "missing step, loss or step_time_s");
    return;
  }
  step_sample s;
  s.step = static_cast<std::uint32_t>(*step);
  // A NaN/Inf loss is printed as null or a string by most JSON writers: keep it as NaN so the
  // verifier can reject it, never as 0.
  s.loss = loss->is_number() ? loss->get<double>() : std::nan("");
  s.step_time_s = *time;
  if (auto t = number_at(j, "tokens"); t && *t >= 0)
    s.tokens = static_cast<std::uint64_t>(*t);
  s.data_s = number_at(j, "data_s");
  s.forward_s = number_at(j, "forward_s");
  s.backward_s = number_at(j, "backward_s");
  s.optimizer_s = number_at(j, "optimizer_s");
  s.communication_s = number_at(j, "communication_s");
  if (auto m = number_at(j, "peak_memory_bytes"); m && *m >= 0)
    s.peak_memory_bytes = static_cast<std::uint64_t>(*m);
  // As the loss: a reported eval loss that is not a number is kept as NaN for the verifier.
  if (auto e = j.find("eval_loss"); e != j.end())
    s.eval_loss = e->is_number() ? e->get<double>() : std::nan("");
  if (auto w = j.find("warmup"); w != j.end() && w->is_boolean())
    s.warmup = w->get<bool>();
  steps_.push_back(s);
}

namespace {

/// Bytes of a regex memory field's value: peak_memory_bytes as it is; peak_memory_mb in MiB and
/// peak_memory_gib / peak_memory_gb in GiB, the binary units frameworks print under those names
/// (Megatron-LM's "memory (MB)" and torchtitan's "GiB" divide torch's byte counters by 1024^2
/// and 1024^3). nullopt for a field that is not a memory field.
std::optional<std::uint64_t> memory_field_bytes(const std::string& field, double v) {
  if (field == "peak_memory_bytes")
    return static_cast<std::uint64_t>(v);
  if (field == "peak_memory_mb")
    return static_cast<std::uint64_t>(v * 1048576.0);
  if (field == "peak_memory_gib" || field == "peak_memory_gb")
    return static_cast<std::uint64_t>(v * 1073741824.0);
  return std::nullopt;
}

bool is_memory_field(const std::string& field) {
  return memory_field_bytes(field, 0.0).has_value();
}

} // namespace

void metrics_parser::feed_regex(const std::string& line) {
  std::smatch m;
  if (!std::regex_search(line, m, *regex_))
    return;
  // A line of its own for memory (Megatron-LM prints "[Rank 0] (after N iterations) memory (MB)
  // | ... | max allocated: X | ..." after the iteration's line): a match in which the step
  // group took no part but a memory field did gives the last step read its peak.
  bool step_took_part = false;
  for (std::size_t i = 0; i < spec_.regex_fields.size(); ++i)
    step_took_part = step_took_part || (spec_.regex_fields[i] == "step" && m[i + 1].matched);
  if (!step_took_part) {
    for (std::size_t i = 0; i < spec_.regex_fields.size(); ++i) {
      const auto& field = spec_.regex_fields[i];
      if (!is_memory_field(field) || !m[i + 1].matched)
        continue;
      auto text = m[i + 1].str();
      char* end = nullptr;
      double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(v >= 0)) {
        malformed(line, "field " + field + " is not a number ('" + text + "')");
        return;
      }
      if (steps_.empty())
        return; // memory before any step: nothing to give it to
      auto& peak = steps_.back().peak_memory_bytes;
      peak = std::max(peak.value_or(0), *memory_field_bytes(field, v));
      return;
    }
  }
  step_sample s;
  bool have_step = false;
  for (std::size_t i = 0; i < spec_.regex_fields.size(); ++i) {
    const auto& field = spec_.regex_fields[i];
    if (is_memory_field(field) && !m[i + 1].matched)
      continue; // an optional group that did not take part: no memory on this line
    auto text = m[i + 1].str();
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') {
      if ((field == "loss" || field == "eval_loss")
          && (text == "nan" || text == "inf" || text == "-inf")) {
        (field == "loss" ? s.loss : s.eval_loss.emplace()) = std::nan("");
        continue;
      }
      if (field == "eval_loss" && text.empty())
        continue; // an optional group that did not take part: no eval loss on this line
      malformed(line, "field " + field + " is not a number ('" + text + "')");
      return;
    }
    if (field == "step") {
      s.step = static_cast<std::uint32_t>(v);
      have_step = true;
    } else if (field == "loss") {
      s.loss = v;
    } else if (field == "tokens") {
      s.tokens = static_cast<std::uint64_t>(v);
    } else if (field == "step_time_s") {
      s.step_time_s = v;
    } else if (field == "step_time_ms") {
      s.step_time_s = v / 1000.0;
    } else if (field == "eval_loss") {
      s.eval_loss = v;
    } else if (auto bytes = memory_field_bytes(field, v)) {
      s.peak_memory_bytes = *bytes;
    }
  }
  if (!have_step)
    return;
  if (s.tokens == 0)
    s.tokens = spec_.tokens_per_step;
  steps_.push_back(s);
}

const std::string* find_oom_pattern(const tuning::metrics_spec& spec, std::string_view line) {
  for (const auto& p : spec.oom_patterns)
    if (!p.empty() && line.find(p) != std::string_view::npos)
      return &p;
  return nullptr;
}

} // namespace infrarsi::adapters
