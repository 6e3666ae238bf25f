#pragma once
/// @file node_bridge.hpp
/// The ZeroMQ bridge between the supervisor and node-runners. The node-runner is reached through
/// a socket even in embedded mode (an inproc:// or ipc:// endpoint), so going multi-machine
/// changes an endpoint, not the code path. Frames are Envelopes (messages/envelope.fbs):
/// TrialSpec requests, TrialResult replies, verified on receipt.
///
/// Protocol (ROUTER on the node, DEALER on the client): the client sends [empty, envelope]; the
/// node replies [empty, envelope] on the same connection when the trial has ended.
/// Each socket is owned by exactly one thread (ZeroMQ sockets are not thread-safe).

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <caf/expected.hpp>
#include <zmq.hpp>

#include "messages/codec.hpp"
#include "tuning/task.hpp"

namespace infrarsi::adapters {

/// The task as one node slot runs it: `slot_env` entries added to its environment and, when
/// `cpu_list` is not empty, every rank run under `taskset -c cpu_list`.
tuning::task_spec slot_task(const tuning::task_spec& task,
                            const std::map<std::string, std::string>& slot_env,
                            const std::string& cpu_list);

/// Runs one trial attempt of `spec` with `task` (already a slot_task) in
/// `trials_root`/trial-<id>-<attempt> and returns its result, `node` recorded in it. Never fails:
/// an attempt this node cannot prepare (less than `disk_reserve_bytes` free in `trials_root`, or
/// errc::io_error from run_trial) is outcome Lost with a detail naming the cause and the free
/// space; a request the tool cannot run (bad knob value) is LaunchError. `stop`, when set, stops
/// the running trial (it ends as preempted).
messages::trial_result_msg run_node_trial(const tuning::task_spec& task,
                                          const messages::trial_spec_msg& spec,
                                          const std::string& trials_root, const std::string& node,
                                          std::uint64_t disk_reserve_bytes,
                                          const std::atomic<bool>* stop);

/// A node-runner serving one task's trials on `endpoint`, one at a time, on its own thread.
class node_server {
public:
  /// `trials_root`: trial directories are created below it as trial-<id>-<attempt>.
  /// `slot_env`: environment entries this node slot adds to every trial (its share of the
  /// machine, e.g. CUDA_VISIBLE_DEVICES=2,3); `cpu_list`: when not empty, every rank runs
  /// under `taskset -c cpu_list` (e.g. "0-3"). `disk_reserve_bytes`: before each trial,
  /// `trials_root` must have at least this many bytes free (adapters/disk_space.hpp; 0: no
  /// check).
  ///
  /// A trial this node cannot prepare (too little free space, or errc::io_error from
  /// run_trial: its directory or workload copy could not be written, a fork failed) is answered
  /// with outcome Lost and a detail naming the cause and the free space of `trials_root`: the
  /// attempt never ran, so it is not the configuration's result (docs/node-runner.md).
  node_server(zmq::context_t& ctx, std::string endpoint, const tuning::task_spec& task,
              std::string trials_root, std::string node_name,
              std::map<std::string, std::string> slot_env = {}, std::string cpu_list = {},
              std::uint64_t disk_reserve_bytes = 0);
  ~node_server();
  node_server(const node_server&) = delete;
  node_server& operator=(const node_server&) = delete;

  /// Binds the endpoint and starts serving; endpoint() is then the bound one (a tcp port of 0
  /// or "*" becomes the port the system chose). Error: errc::io_error naming the endpoint.
  [[nodiscard]] caf::error start();

  /// Stops serving; a running trial is stopped (it ends as preempted). Idempotent.
  void stop();

  /// Asks the serving thread to stop without waiting for it (stop() then joins): a running
  /// trial begins its SIGTERM / kill_grace_s / SIGKILL sequence now, so several slots stop in
  /// parallel.
  void request_stop() noexcept { stop_ = true; }

  [[nodiscard]] const std::string& endpoint() const noexcept { return endpoint_; }

private:
  void serve();
  messages::trial_result_msg run_one(const messages::trial_spec_msg& spec);

  zmq::context_t& ctx_;
  std::string endpoint_;
  const tuning::task_spec& task_;
  std::string trials_root_;
  std::string node_name_;
  std::map<std::string, std::string> slot_env_;
  std::string cpu_list_;
  std::uint64_t disk_reserve_bytes_ = 0;
  /// The task as this slot runs it (slot environment added, argv under taskset).
  tuning::task_spec slot_task_;
  std::unique_ptr<zmq::socket_t> socket_; // owned by the serving thread after start()
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::uint64_t sequence_ = 0;
};

/// The supervisor's end: sends one TrialSpec at a time and waits for its TrialResult.
/// Use from one thread only (a detached actor).
class node_client {
public:
  node_client(zmq::context_t& ctx, std::string endpoint, std::string run_id, std::string sender);

  /// Sends `spec` and waits up to `timeout_s` for the result. Errors: errc::io_error (socket),
  /// errc::not_found (no reply within the timeout: the node vanished), errc::corrupt_data
  /// (a reply that fails verification).
  /// A reply for another trial or attempt (an earlier attempt given up as lost) is never
  /// returned: it goes to `on_stale` (when set) and the wait goes on.
  /// Once `*cancel` is set (checked every 200 ms) the wait ends with errc::interrupted.
  [[nodiscard]] caf::expected<messages::trial_result_msg>
  run(const messages::trial_spec_msg& spec, double timeout_s,
      const std::function<void(const messages::trial_result_msg&)>& on_stale = {},
      const std::atomic<bool>* cancel = nullptr);

private:
  zmq::socket_t socket_;
  std::string endpoint_;
  std::string run_id_;
  std::string sender_;
  std::uint64_t sequence_ = 0;
};

} // namespace infrarsi::adapters
