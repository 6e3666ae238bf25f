#pragma once
/// @file node_frames.hpp
/// Reading one frame of the daemon's protocol (messages/node.fbs) as a socket receives it: the
/// envelope is decoded and verified (codec.hpp) and its payload opened as the message its kind
/// names. The daemon's broker (adapters/node_broker.cpp) and the node-runner
/// (adapters/node_agent.cpp) read every inbound frame through read_node_frame; fuzz/node_frame.cpp
/// runs it on arbitrary bytes.

#include <cstddef>
#include <string>
#include <variant>

#include <caf/expected.hpp>

#include "messages/codec.hpp"

namespace infrarsi::messages {

/// The opened payload of a frame: one alternative per MessageKind that travels alone
/// (std::monostate never appears in a frame read_node_frame returns).
using node_payload =
  std::variant<std::monostate, trial_spec_msg, trial_result_msg, event_record_msg, node_hello_msg,
               heartbeat_msg, trial_assignment_msg, trial_refused_msg, node_control_msg,
               submit_task_msg, client_request_msg, client_reply_msg>;

/// One verified inbound frame.
struct node_frame {
  /// The verified envelope (what the broker hands to its sink).
  envelope_msg envelope;
  /// envelope->kind(), never Unknown.
  wire::MessageKind kind = wire::MessageKind::Unknown;
  /// The envelope's run id, "" when absent.
  std::string run_id;
  /// The payload, opened as the message `kind` names.
  node_payload message;
};

/// Decodes `size` bytes at `data` (any alignment) as a size-prefixed Envelope under `limits`
/// (size cap, verifier depth and table limits, checksum, payload verified by its kind) and opens
/// its payload under the same limits.
/// Errors: those of envelope_msg::decode and open() (errc::corrupt_data,
/// errc::unsupported_format, errc::unknown_kind).
[[nodiscard]] caf::expected<node_frame> read_node_frame(const void* data, std::size_t size,
                                                        const verify_limits& limits);

/// The TrialSpec an assignment carries, decoded and verified under `limits` (a verified
/// TrialAssignment always has one; the error is kept for a hand-made message).
[[nodiscard]] caf::expected<trial_spec_msg> assignment_spec(const trial_assignment_msg& a,
                                                            const verify_limits& limits = {});

} // namespace infrarsi::messages
