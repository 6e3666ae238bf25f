#include "messages/json.hpp"

#include <cctype>
#include <string>

namespace infrarsi::messages {

namespace {

std::string snake(const char* camel) {
  std::string out;
  for (const char* p = camel; *p != '\0'; ++p) {
    auto c = static_cast<unsigned char>(*p);
    if (std::isupper(c)) {
      if (p != camel)
        out += '_';
      out += static_cast<char>(std::tolower(c));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string str(const flatbuffers::String* s) {
  return s == nullptr ? std::string{} : s->str();
}

} // namespace

std::string outcome_name(wire::Outcome outcome) {
  const char* name = wire::EnumNameOutcome(outcome);
  if (name == nullptr || *name == '\0')
    return "outcome_" + std::to_string(static_cast<int>(outcome));
  return snake(name);
}

nlohmann::json to_json(const wire::TrialSpec& spec) {
  nlohmann::json knobs = nlohmann::json::object();
  if (spec.knobs() != nullptr) {
    for (const auto* k : *spec.knobs()) {
      auto name = str(k->name());
      switch (k->value_type()) {
        case wire::KnobValue::IntKnob: knobs[name] = k->value_as_IntKnob()->value(); break;
        case wire::KnobValue::RealKnob: knobs[name] = k->value_as_RealKnob()->value(); break;
        case wire::KnobValue::BoolKnob: knobs[name] = k->value_as_BoolKnob()->value(); break;
        case wire::KnobValue::TextKnob: knobs[name] = str(k->value_as_TextKnob()->value()); break;
        default: knobs[name] = nullptr; break;
      }
    }
  }
  nlohmann::json patches = nlohmann::json::array();
  if (spec.patches() != nullptr)
    for (const auto* p : *spec.patches())
      patches.push_back(p->str());
  return {{"trial_id", spec.trial_id()},       {"attempt", spec.attempt()},
          {"purpose", str(spec.purpose())},
          {"knobs", std::move(knobs)},         {"patches", std::move(patches)},
          {"timeout_s", spec.timeout_s()},     {"memory_cap_bytes", spec.memory_cap_bytes()}};
}

nlohmann::json to_json(const wire::TrialResult& result) {
  nlohmann::json steps = nlohmann::json::array();
  if (result.steps() != nullptr) {
    for (const auto* s : *result.steps()) {
      nlohmann::json j = {{"step", s->step()},
                          {"loss", s->loss()},
                          {"tokens", s->tokens()},
                          {"step_time_s", s->step_time_s()}};
      auto opt = [&j](const char* key, const auto& value) {
        if (value.has_value())
          j[key] = *value;
      };
      opt("data_s", s->data_s());
      opt("forward_s", s->forward_s());
      opt("backward_s", s->backward_s());
      opt("optimizer_s", s->optimizer_s());
      opt("communication_s", s->communication_s());
      opt("peak_memory_bytes", s->peak_memory_bytes());
      steps.push_back(std::move(j));
    }
  }
  return {{"trial_id", result.trial_id()},
          {"attempt", result.attempt()},
          {"outcome", outcome_name(result.outcome())},
          {"steps", std::move(steps)},
          {"peak_memory_bytes", result.peak_memory_bytes()},
          {"memory_source", snake(wire::EnumNameMemorySource(result.memory_source()))},
          {"host_peak_bytes", result.host_peak_bytes()},
          {"device_sampled_peak_bytes", result.device_sampled_peak_bytes()},
          {"wall_time_s", result.wall_time_s()},
          {"device_seconds", result.device_seconds()},
          {"exit_code", result.exit_code()},
          {"detail", str(result.detail())}};
}

nlohmann::json to_json(const wire::RunCreated& run) {
  return {{"task", str(run.task())},
          {"seed", run.seed()},
          {"tool_version", str(run.tool_version())}};
}

nlohmann::json to_json(const wire::StageEvent& stage) {
  return {{"stage", snake(wire::EnumNameStage(stage.stage()))}, {"detail", str(stage.detail())}};
}

namespace {

template <class Table>
nlohmann::json decoded_json(const byte_buffer& payload) {
  auto msg = message<Table>::decode(payload);
  if (!msg)
    return {{"error", describe(msg.error())}};
  return to_json(*msg->get());
}

} // namespace

nlohmann::json event_payload_json(std::uint16_t kind, const byte_buffer& payload) {
  if (!is_known_event_kind(kind))
    return {{"unknown_kind", kind}, {"bytes", payload.size()}};
  if (payload.empty())
    return nlohmann::json::object();
  switch (event_payload_of(kind)) {
    case event_payload::run_created: return decoded_json<wire::RunCreated>(payload);
    case event_payload::stage_event: return decoded_json<wire::StageEvent>(payload);
    case event_payload::trial_spec: return decoded_json<wire::TrialSpec>(payload);
    case event_payload::trial_result: return decoded_json<wire::TrialResult>(payload);
    case event_payload::document: {
      auto doc = document_msg::decode(payload);
      if (!doc)
        return {{"error", describe(doc.error())}};
      auto body = nlohmann::json::parse((*doc)->json()->str(), nullptr, false);
      return {{"schema", (*doc)->schema()->str()},
              {"data", body.is_discarded() ? nlohmann::json((*doc)->json()->str()) : body}};
    }
    case event_payload::none: break;
  }
  return {{"bytes", payload.size()}};
}

} // namespace infrarsi::messages
