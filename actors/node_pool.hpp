#pragma once
/// @file node_pool.hpp
/// The node pool: the daemon's registry of remote node-runners, their slots and the attempts
/// running on them (interfaces.hpp, node_pool_actor). It holds nothing the event log needs: which
/// node runs an attempt is recorded by the node itself (TrialResult.node); a lost attempt is
/// logged by its run's supervisor when the pool answers its request with an error.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <caf/all.hpp>

#include "actors/interfaces.hpp"
#include "adapters/node_broker.hpp"

namespace infrarsi::actors {

/// (run id, trial id, attempt): one attempt in the pool.
using pool_key = std::tuple<std::string, std::uint64_t, std::uint32_t>;

/// Options of the pool. Defaults are written inline.
struct node_pool_options {
  /// The broker the pool sends through (must outlive the pool).
  adapters::node_broker* broker = nullptr;
  /// Node protocol a node must speak (messages/node_protocol.hpp).
  std::uint32_t protocol = 0;
  /// Lines about nodes (joined, gone, refused trials); nullptr: none.
  std::ostream* log = nullptr;
  /// The heartbeat interval (ms): a node name heard from within two of them is in use.
  int heartbeat_ms = 1000;
};

struct node_pool_state {
  static inline const char* name = "node-pool";

  struct slot {
    std::string name;
    /// Running here: the attempt (run id empty: idle).
    pool_key running;
    bool busy = false;
    /// An attempt the node reported from before this daemon knew it (no request waits for it).
    bool foreign = false;
  };
  struct node {
    std::string identity;
    std::string name;
    std::string fingerprint;
    std::string hardware;
    std::vector<slot> slots;
    std::uint64_t trials_assigned = 0;
    /// When the pool last heard from it (a duplicate name is refused while this is recent).
    std::chrono::steady_clock::time_point last_heard{};
  };
  struct pending {
    messages::trial_spec_msg spec;
    caf::typed_response_promise<messages::trial_result_msg> promise;
    /// Where it runs ("" while queued).
    std::string identity;
    std::uint32_t slot = 0;
  };
  struct run_entry {
    std::uint32_t max_slots = 0;
    std::string task_toml;
    std::string task_path;
    caf::actor supervisor;
    std::uint32_t share = 0;
    /// Nodes that refused an attempt of this run (never assigned to again).
    std::set<std::string> refused_by;
  };

  node_pool_options o;
  std::map<std::string, node> nodes;            // by identity
  std::map<std::string, std::string> by_name;   // node name -> identity
  std::map<pool_key, pending> attempts;         // requests not yet answered
  std::deque<pool_key> queue;                   // waiting for a slot, oldest first
  std::vector<std::string> run_order;           // runs in the order they joined
  std::map<std::string, run_entry> runs;
  std::uint64_t sequence = 0;
  std::uint64_t stale_results = 0;
  std::uint64_t lost_attempts = 0;
};

/// The node pool actor (interfaces.hpp, node_pool_actor).
node_pool_actor::behavior_type node_pool(node_pool_actor::stateful_pointer<node_pool_state> self,
                                         node_pool_options options);

} // namespace infrarsi::actors
