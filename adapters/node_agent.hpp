#pragma once
/// @file node_agent.hpp
/// `infrarsi node --connect tcp://HOST:PORT`: the node-runner on a GPU host. A ZeroMQ DEALER that
/// connects to the daemon's node ROUTER, says hello (name, hardware, slots, attempts still
/// running), heartbeats both ways (Paranoid Pirate, zguide ch. 4), runs each assigned trial in its
/// slot with the launcher of adapters/trial_launcher.hpp and sends the result back. The protocol
/// is in messages/node.fbs and docs/daemon.md.
///
/// Liveness: a heartbeat is sent every `heartbeat_ms` when nothing else was; a daemon silent for
/// `liveness` intervals is gone: the socket is closed and reopened after a back-off that starts
/// at `reconnect_initial_ms` and doubles up to `reconnect_max_ms` (reset by a welcome). Trials
/// keep running across a reconnect; their results are sent when a connection is up again.
///
/// Every inbound frame is verified (messages/codec.hpp) before it is read; a malformed one is
/// counted and dropped. The socket is owned by the thread that calls run().

#include <atomic>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "messages/codec.hpp"

namespace infrarsi::adapters {

/// One slot of a node: a share of the machine that runs one trial at a time.
struct node_slot_config {
  /// Unique within the node, e.g. "0" or "gpu0-1".
  std::string name;
  /// Environment entries added to this slot's trials (e.g. CUDA_VISIBLE_DEVICES=0,1).
  std::map<std::string, std::string> env;
  /// CPU list for `taskset -c` ("" for none).
  std::string cpus;
};

/// Options of a node-runner. Defaults are written inline.
struct node_agent_options {
  /// The daemon's node endpoint, e.g. tcp://head:5555. Required.
  std::string connect;
  /// Trial directories go below `workdir`/runs/<run id>/trials. Required.
  std::string workdir;
  /// Node name in the pool; default: the host name.
  std::string name;
  /// Default: one slot named "0" with no environment and no CPU list.
  std::vector<node_slot_config> slots;
  /// Bytes that must stay free in the trial directories before a trial (0: no check).
  std::uint64_t disk_reserve_bytes = 0;
  /// Heartbeat interval in milliseconds. Default 1000.
  int heartbeat_ms = 1000;
  /// Missed intervals before the daemon is taken for gone. Default 3.
  int liveness = 3;
  /// First reconnect back-off in milliseconds, doubled after each failure. Default 1000.
  int reconnect_initial_ms = 1000;
  /// Largest reconnect back-off in milliseconds. Default 32000.
  int reconnect_max_ms = 32000;
  /// CURVE: the daemon's public key (Z85, 40 characters). Empty: plain TCP (refused by a daemon
  /// that requires CURVE).
  std::string server_public_key;
  /// CURVE: this node's key pair (Z85). Required when server_public_key is set.
  std::string public_key;
  std::string secret_key;
  /// Progress lines (connections, trials, refusals); nullptr: none.
  std::ostream* log = nullptr;
};

/// Counters of a node-runner, for its log and tests.
struct node_agent_stats {
  std::uint64_t connects = 0;
  std::uint64_t trials_run = 0;
  std::uint64_t trials_refused = 0;
  std::uint64_t malformed_frames = 0;
};

/// The node-runner. Not copyable; run() on one thread.
class node_agent {
public:
  node_agent(zmq::context_t& ctx, node_agent_options options);
  ~node_agent();
  node_agent(const node_agent&) = delete;
  node_agent& operator=(const node_agent&) = delete;

  /// Serves until `stop` is set, then stops every running trial (SIGTERM, kill_grace_s,
  /// SIGKILL), tries to send their results and returns 0. Returns 1 when the daemon refused
  /// this node (its detail written to the log).
  int run(const std::atomic<bool>& stop);

  [[nodiscard]] node_agent_stats stats() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Why the files under `workdir` do not match `hashes` (path relative to `workdir`, SHA-256; a
/// TrialSpec's scope lock or a SubmitTask's scope), "" when they all match (or `hashes` is null):
/// the first missing or different file with its expected and found SHA-256.
std::string scope_mismatch(const std::string& workdir,
                           const flatbuffers::Vector<flatbuffers::Offset<wire::FileHash>>* hashes);

} // namespace infrarsi::adapters
