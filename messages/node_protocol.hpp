#pragma once
/// @file node_protocol.hpp
/// Versions of the daemon's protocol with node-runners and clients (messages/node.fbs,
/// docs/daemon.md).

#include <cstdint>
#include <string_view>

namespace infrarsi::messages {

/// The node protocol a build speaks; NodeHello.protocol. A daemon refuses a node whose protocol
/// differs (NodeControl "refused", detail naming both versions). 2: a TrialSpec may carry
/// `patch_texts` (LLM-proposed patches as diffs), which a node of protocol 1 cannot apply.
constexpr std::uint32_t node_protocol_version = 2;

/// The infrarsi version a node-runner reports in its hello.
constexpr const char* tool_version = "0.3.0";

/// Whether `name` may name a node-runner: 1-128 printable ASCII characters, no spaces (it appears
/// in logs, status documents and every TrialResult the node sends).
inline bool valid_node_name(std::string_view name) {
  if (name.empty() || name.size() > 128)
    return false;
  for (char ch : name)
    if (ch <= ' ' || ch >= 127)
      return false;
  return true;
}

} // namespace infrarsi::messages
