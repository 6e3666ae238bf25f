#include "messages/node_frames.hpp"

#include <string>
#include <utility>

namespace infrarsi::messages {

namespace {

template <class Table>
caf::error open_into(const envelope_msg& env, const verify_limits& limits, node_payload& out) {
  auto msg = open<Table>(env, limits);
  if (!msg)
    return std::move(msg.error());
  out = std::move(*msg);
  return caf::none;
}

caf::error open_payload(const envelope_msg& env, const verify_limits& limits,
                        node_payload& out) {
  switch (env->kind()) {
    case wire::MessageKind::TrialSpec: return open_into<wire::TrialSpec>(env, limits, out);
    case wire::MessageKind::TrialResult: return open_into<wire::TrialResult>(env, limits, out);
    case wire::MessageKind::EventRecord: return open_into<wire::EventRecord>(env, limits, out);
    case wire::MessageKind::NodeHello: return open_into<wire::NodeHello>(env, limits, out);
    case wire::MessageKind::Heartbeat: return open_into<wire::Heartbeat>(env, limits, out);
    case wire::MessageKind::TrialAssignment:
      return open_into<wire::TrialAssignment>(env, limits, out);
    case wire::MessageKind::TrialRefused: return open_into<wire::TrialRefused>(env, limits, out);
    case wire::MessageKind::NodeControl: return open_into<wire::NodeControl>(env, limits, out);
    case wire::MessageKind::SubmitTask: return open_into<wire::SubmitTask>(env, limits, out);
    case wire::MessageKind::ClientRequest:
      return open_into<wire::ClientRequest>(env, limits, out);
    case wire::MessageKind::ClientReply: return open_into<wire::ClientReply>(env, limits, out);
    default: break;
  }
  // envelope_msg::decode rejects kinds this build does not know; kept for safety.
  return make_error(errc::unknown_kind,
                    "Envelope: message kind " + std::to_string(static_cast<int>(env->kind()))
                      + " is unknown to this build");
}

} // namespace

caf::expected<node_frame> read_node_frame(const void* data, std::size_t size,
                                          const verify_limits& limits) {
  auto env = envelope_msg::decode(data, size, limits);
  if (!env)
    return std::move(env.error());
  node_frame f;
  f.kind = (*env)->kind();
  f.run_id = (*env)->run_id() != nullptr ? (*env)->run_id()->str() : std::string{};
  if (auto err = open_payload(*env, limits, f.message))
    return err;
  f.envelope = std::move(*env);
  return f;
}

caf::expected<trial_spec_msg> assignment_spec(const trial_assignment_msg& a,
                                              const verify_limits& limits) {
  if (a.empty() || a->spec() == nullptr || a->spec()->size() == 0)
    return make_error(errc::corrupt_data, "TrialAssignment: missing TrialSpec");
  return trial_spec_msg::decode(a->spec()->data(), a->spec()->size(), limits);
}

} // namespace infrarsi::messages
