#include "adapters/node_agent.hpp"

#include <iterator>
#include <zmq_addon.hpp>
#include <chrono>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "adapters/curve.hpp"
#include "adapters/environment.hpp"
#include "adapters/node_bridge.hpp"
#include "adapters/task_file.hpp"
#include "messages/node_frames.hpp"
#include "messages/node_protocol.hpp"
#include "store/event_log.hpp"

namespace infrarsi::adapters {

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0')
    return "node";
  return buf;
}

} // namespace

std::string scope_mismatch(const std::string& workdir,
                           const flatbuffers::Vector<flatbuffers::Offset<wire::FileHash>>* hashes) {
  if (hashes == nullptr)
    return {};
  for (const auto* h : *hashes) {
    auto path = workdir + "/" + h->path()->str();
    auto found = sha256_file(path);
    if (!found)
      return "locked file '" + h->path()->str() + "' is missing or unreadable under '" + workdir
             + "' (" + describe(found.error()) + ")";
    if (*found != h->sha256()->str())
      return "locked file '" + h->path()->str() + "' under '" + workdir
             + "' differs from the run's scope lock (expected SHA-256 " + h->sha256()->str()
             + ", found " + *found + ")";
  }
  return {};
}

struct node_agent::impl {
  /// One slot's running trial.
  struct worker {
    std::thread thread;
    std::atomic<bool> stop{false};
    std::atomic<bool> done{false};
    std::string run_id;
    std::uint64_t trial_id = 0;
    std::uint32_t attempt = 0;
  };

  zmq::context_t& ctx;
  node_agent_options o;
  std::unique_ptr<zmq::socket_t> socket;
  std::vector<std::unique_ptr<worker>> workers; // one per slot; null when idle
  std::map<std::string, tuning::task_spec> tasks; // by SHA-256 of the task text
  std::mutex results_mutex;
  std::deque<std::pair<std::string, messages::trial_result_msg>> results; // (run id, result)
  std::uint64_t sequence = 0;
  mutable std::mutex stats_mutex;
  node_agent_stats counters;
  bool welcomed = false;
  int refused_status = 0;

  impl(zmq::context_t& c, node_agent_options opts) : ctx(c), o(std::move(opts)) {
    if (o.name.empty())
      o.name = host_name();
    if (o.slots.empty())
      o.slots.push_back(node_slot_config{"0", {}, {}});
    workers.resize(o.slots.size());
  }

  std::ostream* log() { return o.log; }

  void note(const std::string& line) {
    if (o.log != nullptr)
      *o.log << "infrarsi node " << o.name << ": " << line << std::endl;
  }

  void open_socket() {
    socket = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::sndhwm, 10000);
    socket->set(zmq::sockopt::rcvhwm, 10000);
    // ZeroMQ's own reconnects (a daemon restart, a failed CURVE handshake: wrong server key)
    // back off like ours instead of retrying every 100 ms.
    // Queue only to a completed connection: while the daemon is away a result stays in our own
    // queue (sent after the reconnect) instead of in a pipe that the reconnect discards.
    socket->set(zmq::sockopt::immediate, 1);
    socket->set(zmq::sockopt::reconnect_ivl, o.reconnect_initial_ms);
    socket->set(zmq::sockopt::reconnect_ivl_max, o.reconnect_max_ms);
    if (!o.server_public_key.empty())
      if (auto e = make_curve_client(*socket, curve_keypair{o.public_key, o.secret_key},
                                     o.server_public_key))
        note("CURVE: " + describe(e)); // checked when the keys were loaded; cannot happen here
    socket->connect(o.connect);
    std::lock_guard<std::mutex> lock{stats_mutex};
    ++counters.connects;
  }

  template <class Table>
  bool send(const messages::message<Table>& msg, const std::string& run_id) {
    auto env = messages::seal(msg, run_id, "node:" + o.name, sequence++);
    if (!env)
      return false;
    try {
      auto sent = socket->send(zmq::buffer(env->bytes().data(), env->bytes().size()),
                               zmq::send_flags::dontwait);
      return sent.has_value();
    } catch (const zmq::error_t& e) {
      note(std::string{"send failed: "} + e.what());
      return false;
    }
  }

  std::vector<std::unique_ptr<wire::AttemptRefT>> running() const {
    std::vector<std::unique_ptr<wire::AttemptRefT>> out;
    for (std::size_t i = 0; i < workers.size(); ++i)
      if (workers[i] && !workers[i]->done) {
        auto a = std::make_unique<wire::AttemptRefT>();
        a->run_id = workers[i]->run_id;
        a->trial_id = workers[i]->trial_id;
        a->attempt = workers[i]->attempt;
        a->slot = static_cast<std::uint32_t>(i);
        out.push_back(std::move(a));
      }
    return out;
  }

  void send_hello() {
    wire::NodeHelloT h;
    h.node = o.name;
    auto hw = hardware_description();
    h.hardware = hw.dump();
    h.fingerprint = hardware_fingerprint(hw);
    for (const auto& s : o.slots) {
      auto info = std::make_unique<wire::NodeSlotInfoT>();
      info->name = s.name;
      for (const auto& [k, v] : s.env)
        info->env.push_back(k + "=" + v);
      info->cpus = s.cpus;
      h.slots.push_back(std::move(info));
    }
    h.running = running();
    h.tool_version = messages::tool_version;
    h.protocol = messages::node_protocol_version;
    send(messages::node_hello_msg::pack(h), "");
  }

  void send_heartbeat() {
    wire::HeartbeatT hb;
    hb.running = running();
    send(messages::heartbeat_msg::pack(hb), "");
  }

  void refuse(const std::string& run_id, std::uint64_t trial, std::uint32_t attempt,
              const std::string& why) {
    wire::TrialRefusedT r;
    r.trial_id = trial;
    r.attempt = attempt;
    r.reason = "node-runner " + o.name + ": " + why;
    note("refused trial " + std::to_string(trial) + " attempt " + std::to_string(attempt)
         + " of run " + run_id + ": " + why);
    send(messages::trial_refused_msg::pack(r), run_id);
    std::lock_guard<std::mutex> lock{stats_mutex};
    ++counters.trials_refused;
  }

  const tuning::task_spec* task_of(const std::string& text, const std::string& path,
                                   std::string& why) {
    auto key = sha256_hex(text);
    if (auto it = tasks.find(key); it != tasks.end())
      return &it->second;
    auto loaded = load_task_text(text, path);
    if (!loaded) {
      why = "the run's task does not load here: " + describe(loaded.error());
      return nullptr;
    }
    if (tasks.size() > 64)
      tasks.clear(); // a bounded cache: tasks are re-parsed when needed
    return &tasks.emplace(key, std::move(*loaded)).first->second;
  }

  void on_assignment(const std::string& run_id, const messages::trial_assignment_msg& a) {
    auto spec = messages::assignment_spec(a);
    if (!spec) { // cannot happen: the assignment was verified with its spec
      std::lock_guard<std::mutex> lock{stats_mutex};
      ++counters.malformed_frames;
      return;
    }
    auto trial = (*spec)->trial_id();
    auto attempt = (*spec)->attempt();
    auto slot = a->slot();
    if (slot >= workers.size())
      return refuse(run_id, trial, attempt,
                    "slot " + std::to_string(slot) + " does not exist (this node has "
                      + std::to_string(workers.size()) + ")");
    if (workers[slot] && !workers[slot]->done)
      return refuse(run_id, trial, attempt, "slot " + std::to_string(slot) + " is busy");
    if (workers[slot] && workers[slot]->thread.joinable())
      workers[slot]->thread.join();
    if (auto bad = store::validate_run_id(run_id))
      return refuse(run_id, trial, attempt, describe(bad));
    std::string why;
    const auto* task = task_of(a->task_toml() != nullptr ? a->task_toml()->str() : "",
                               a->task_path() != nullptr ? a->task_path()->str() : "", why);
    if (task == nullptr)
      return refuse(run_id, trial, attempt, why);
    if (auto bad = scope_mismatch(task->workload.workdir, (*spec)->scope_lock()); !bad.empty())
      return refuse(run_id, trial, attempt, bad);
    auto w = std::make_unique<worker>();
    w->run_id = run_id;
    w->trial_id = trial;
    w->attempt = attempt;
    auto trials_root = o.workdir + "/runs/" + run_id + "/trials";
    std::error_code ec;
    std::filesystem::create_directories(trials_root, ec);
    auto t = slot_task(*task, o.slots[slot].env, o.slots[slot].cpus);
    note("trial " + std::to_string(trial) + " attempt " + std::to_string(attempt) + " of run "
         + run_id + " starts in slot " + std::to_string(slot));
    auto* wp = w.get();
    w->thread = std::thread{[this, wp, t = std::move(t), s = *spec, trials_root, run_id] {
      auto result =
        run_node_trial(t, s, trials_root, o.name, o.disk_reserve_bytes, &wp->stop);
      {
        std::lock_guard<std::mutex> lock{results_mutex};
        results.emplace_back(run_id, std::move(result));
      }
      wp->done = true;
    }};
    workers[slot] = std::move(w);
  }

  void on_control(const std::string& run_id, const messages::node_control_msg& c) {
    auto command = c->command()->str();
    auto detail = c->detail() != nullptr ? c->detail()->str() : std::string{};
    if (command == "welcome") {
      if (!welcomed)
        note("connected to " + o.connect + (detail.empty() ? "" : " (" + detail + ")"));
      welcomed = true;
    } else if (command == "hello") {
      send_hello();
    } else if (command == "refused") {
      note("the daemon refused this node: " + detail);
      refused_status = 1;
    } else if (command == "cancel") {
      for (auto& w : workers)
        if (w && !w->done && w->run_id == run_id && w->trial_id == c->trial_id()
            && w->attempt == c->attempt()) {
          note("trial " + std::to_string(w->trial_id) + " attempt " + std::to_string(w->attempt)
               + " of run " + run_id + " cancelled by the daemon: " + detail);
          w->stop = true;
        }
    }
  }

  /// Handles one inbound frame set; true when it came from the daemon (liveness).
  bool on_frames(std::vector<zmq::message_t>& frames) {
    if (frames.empty())
      return false;
    const auto& body = frames.back();
    // Envelope and payload verified, the payload opened by its kind (fuzz/node_frame.cpp).
    auto frame = messages::read_node_frame(body.data(), body.size(), messages::verify_limits{});
    if (!frame) {
      std::lock_guard<std::mutex> lock{stats_mutex};
      ++counters.malformed_frames;
      return false;
    }
    switch (frame->kind) {
      case wire::MessageKind::Heartbeat: break;
      case wire::MessageKind::NodeControl:
        on_control(frame->run_id, std::get<messages::node_control_msg>(frame->message));
        break;
      case wire::MessageKind::TrialAssignment:
        on_assignment(frame->run_id, std::get<messages::trial_assignment_msg>(frame->message));
        break;
      default: {
        std::lock_guard<std::mutex> lock{stats_mutex};
        ++counters.malformed_frames; // a kind a node never receives
        break;
      }
    }
    return true;
  }

  void flush_results() {
    std::lock_guard<std::mutex> lock{results_mutex};
    while (!results.empty()) {
      auto& [run_id, result] = results.front();
      if (!send(result, run_id))
        return; // no connection now: sent after the next (re)connect
      note("trial " + std::to_string(result->trial_id()) + " attempt "
           + std::to_string(result->attempt()) + " of run " + run_id + " ended: "
           + wire::EnumNameOutcome(result->outcome()));
      {
        std::lock_guard<std::mutex> s{stats_mutex};
        ++counters.trials_run;
      }
      results.pop_front();
    }
  }

  void stop_all() {
    for (auto& w : workers)
      if (w)
        w->stop = true;
    for (auto& w : workers)
      if (w && w->thread.joinable())
        w->thread.join();
  }

  /// Stopping this node: the daemon is told first (it assigns nothing more here and re-queues
  /// the attempts running here at once), then the running trials are stopped. Their results
  /// (preempted by this node, not by their configuration) are not sent: the attempts are lost.
  void say_goodbye() {
    if (!socket)
      return;
    wire::NodeControlT bye;
    bye.command = "bye";
    bye.detail = "node " + o.name + " is stopping";
    send(messages::node_control_msg::pack(bye), "");
  }

  int serve(const std::atomic<bool>& stop) {
    auto hb = milliseconds(o.heartbeat_ms);
    auto backoff = milliseconds(o.reconnect_initial_ms);
    open_socket();
    send_hello();
    auto last_heard = clock_type::now();
    auto next_beat = clock_type::now() + hb;
    while (!stop && refused_status == 0) {
      zmq::pollitem_t item{socket->handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, milliseconds(50));
      } catch (const zmq::error_t&) {
        continue; // EINTR
      }
      if ((item.revents & ZMQ_POLLIN) != 0) {
        for (int burst = 0; burst < 1000; ++burst) {
          std::vector<zmq::message_t> frames;
          (void) zmq::recv_multipart(*socket, std::back_inserter(frames), zmq::recv_flags::dontwait);
          if (frames.empty())
            break;
          if (on_frames(frames)) {
            last_heard = clock_type::now();
            backoff = welcomed ? milliseconds(o.reconnect_initial_ms) : backoff;
          }
        }
      }
      flush_results();
      auto now = clock_type::now();
      if (now >= next_beat) {
        send_heartbeat();
        next_beat = now + hb;
      }
      if (now - last_heard > hb * o.liveness) {
        note("the daemon at " + o.connect + " was silent for "
             + std::to_string(std::chrono::duration_cast<milliseconds>(now - last_heard).count())
             + " ms; reconnecting in " + std::to_string(backoff.count()) + " ms"
             + (welcomed ? ""
                         : o.server_public_key.empty()
                           ? " (never welcomed: is the daemon running there? does it require "
                             "CURVE keys: --server-key, --key?)"
                           : " (never welcomed: is this node's public key on the daemon's "
                             "allow-list, and --server-key the daemon's?)"));
        socket.reset();
        welcomed = false;
        auto until = clock_type::now() + backoff;
        while (!stop && clock_type::now() < until)
          std::this_thread::sleep_for(milliseconds(50));
        backoff = std::min(backoff * 2, milliseconds(o.reconnect_max_ms));
        if (stop)
          break;
        open_socket();
        send_hello();
        last_heard = clock_type::now();
        next_beat = last_heard + hb;
      }
    }
    if (refused_status == 0) {
      flush_results(); // what ended before the stop is sent
      say_goodbye();
    }
    std::size_t stopped = 0;
    for (const auto& w : workers)
      stopped += (w && !w->done) ? 1 : 0;
    stop_all();
    {
      std::lock_guard<std::mutex> lock{results_mutex};
      results.clear(); // preempted by this stop: lost and re-queued by the daemon
    }
    if (stopped > 0)
      note(std::to_string(stopped) + " running trial(s) stopped; the daemon re-queues them");
    if (socket) {
      // Give the goodbye a moment to leave (linger is 0 on close).
      auto until = clock_type::now() + milliseconds(200);
      while (clock_type::now() < until)
        std::this_thread::sleep_for(milliseconds(20));
      socket.reset();
    }
    return refused_status;
  }
};

node_agent::node_agent(zmq::context_t& ctx, node_agent_options options)
  : impl_(std::make_unique<impl>(ctx, std::move(options))) {}

node_agent::~node_agent() {
  impl_->stop_all();
}

int node_agent::run(const std::atomic<bool>& stop) {
  return impl_->serve(stop);
}

node_agent_stats node_agent::stats() const {
  std::lock_guard<std::mutex> lock{impl_->stats_mutex};
  return impl_->counters;
}

} // namespace infrarsi::adapters
