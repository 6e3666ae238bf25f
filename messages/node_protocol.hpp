#pragma once
/// @file node_protocol.hpp
/// Versions of the daemon's protocol with node-runners and clients (messages/node.fbs,
/// docs/daemon.md).

#include <cstdint>

namespace infrarsi::messages {

/// The node protocol a build speaks; NodeHello.protocol. A daemon refuses a node whose protocol
/// differs (NodeControl "refused", detail naming both versions).
constexpr std::uint32_t node_protocol_version = 1;

/// The infrarsi version a node-runner reports in its hello.
constexpr const char* tool_version = "0.3.0";

} // namespace infrarsi::messages
