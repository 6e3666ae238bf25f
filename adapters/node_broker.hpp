#pragma once
/// @file node_broker.hpp
/// The daemon's ZeroMQ front: one thread owns the node ROUTER (node-runners connect with DEALERs,
/// adapters/node_agent.hpp) and the client ROUTER (`infrarsi submit`, `infrarsi daemon status`).
/// It verifies every inbound frame (messages/codec.hpp, size cap and verifier limits) and hands
/// verified envelopes to its sink; it sends what other threads queue (send_to_node,
/// send_to_client); it keeps the node peers' liveness (Paranoid Pirate, zguide ch. 4): a
/// Heartbeat to every peer every `heartbeat_ms`, and a peer silent for `liveness` intervals is
/// forgotten and reported gone.
///
/// Both ROUTERs set ZMQ_ROUTER_MANDATORY (a send to a vanished peer is an error, reported to the
/// sink with the message, never a silent drop) and high-water marks; a full queue (EAGAIN) is
/// reported the same way. With a key pair set, both sockets are CURVE servers, the node socket in
/// ZAP domain `zap_domain` and the client socket in `client_zap_domain` (the daemon runs the ZAP
/// handler that admits only the keys on each domain's allow-list).

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

#include <caf/error.hpp>
#include <zmq.hpp>

#include "adapters/curve.hpp"
#include "messages/codec.hpp"

namespace infrarsi::adapters {

/// Options of the broker. Defaults are written inline.
struct node_broker_options {
  /// Where node-runners connect, e.g. tcp://*:5555 (port 0 or * picks a free port).
  std::string node_endpoint = "tcp://127.0.0.1:5555";
  /// Where clients connect, e.g. tcp://127.0.0.1:5556 ("" for none).
  std::string client_endpoint = "tcp://127.0.0.1:5556";
  /// Heartbeat interval in milliseconds. Default 1000.
  int heartbeat_ms = 1000;
  /// Missed intervals before a node is gone. Default 3.
  int liveness = 3;
  /// Send high-water mark per peer (messages). Default 1000.
  int send_hwm = 1000;
  /// Receive high-water mark per peer (messages). Default 1000.
  int receive_hwm = 1000;
  /// Largest accepted frame in bytes. Default 16 MiB.
  std::size_t max_frame_bytes = std::size_t{16} << 20;
  /// CURVE: when set, both sockets are CURVE servers with `keys`, authenticated by this running
  /// ZAP handler in `zap_domain` (adapters/curve.hpp). nullptr: plain TCP.
  const zap_handler* zap = nullptr;
  curve_keypair keys;
  /// ZAP domain of the node socket (its allow-list: node keys). Default "nodes".
  std::string zap_domain = "nodes";
  /// ZAP domain of the client socket (its allow-list: client keys). Default "clients".
  std::string client_zap_domain = "clients";
};

/// What the broker reports; every callback runs on the broker's thread and must not block.
struct node_broker_sink {
  /// A verified envelope from node peer `identity`.
  std::function<void(const std::string& identity, const messages::envelope_msg&)> node_message;
  /// Node peer `identity` was silent for `liveness` intervals (or unreachable): forgotten.
  std::function<void(const std::string& identity, const std::string& why)> node_gone;
  /// A message to node `identity` could not be sent (`why`: unreachable, queue full).
  std::function<void(const std::string& identity, const messages::envelope_msg&,
                     const std::string& why)>
    node_send_failed;
  /// A verified envelope from client `identity`.
  std::function<void(const std::string& identity, const messages::envelope_msg&)>
    client_message;
};

/// Counters of the broker (for status and tests).
struct node_broker_stats {
  std::uint64_t frames_in = 0;
  std::uint64_t frames_out = 0;
  /// Frames dropped before they were read: failed verification, too large, wrong shape.
  std::uint64_t malformed = 0;
  /// Sends that failed (peer unreachable or queue full); each reported to the sink.
  std::uint64_t send_failures = 0;
  std::uint64_t nodes_gone = 0;
  std::uint64_t heartbeats_out = 0;
};

class node_broker {
public:
  node_broker(zmq::context_t& ctx, node_broker_options options, node_broker_sink sink);
  ~node_broker();
  node_broker(const node_broker&) = delete;
  node_broker& operator=(const node_broker&) = delete;

  /// Binds both endpoints and starts the thread. Error: errc::io_error naming the endpoint.
  [[nodiscard]] caf::error start();
  /// Stops the thread (queued sends are flushed first, best effort). Idempotent.
  void stop();

  /// Queues `env` for node peer `identity` (thread-safe).
  void send_to_node(const std::string& identity, messages::envelope_msg env);
  /// Queues `env` for client `identity` (thread-safe).
  void send_to_client(const std::string& identity, messages::envelope_msg env);
  /// Stops heartbeating `identity` and forgets it (no gone report) (thread-safe).
  void forget_node(const std::string& identity);

  /// The bound endpoints (after start()).
  [[nodiscard]] const std::string& node_endpoint() const noexcept { return node_bound_; }
  [[nodiscard]] const std::string& client_endpoint() const noexcept { return client_bound_; }
  [[nodiscard]] node_broker_stats stats() const;

private:
  struct outbound {
    bool to_node = true;
    bool forget = false;
    std::string identity;
    messages::envelope_msg env;
  };
  void serve();
  void post(outbound o);

  zmq::context_t& ctx_;
  node_broker_options o_;
  node_broker_sink sink_;
  std::unique_ptr<zmq::socket_t> nodes_;
  std::unique_ptr<zmq::socket_t> clients_;
  std::unique_ptr<zmq::socket_t> wake_in_;
  std::unique_ptr<zmq::socket_t> wake_out_; // guarded by mutex_
  std::string wake_endpoint_;
  std::string node_bound_;
  std::string client_bound_;
  std::mutex mutex_;
  std::deque<outbound> queue_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex stats_mutex_;
  node_broker_stats stats_;
  std::uint64_t sequence_ = 0;
};

} // namespace infrarsi::adapters
