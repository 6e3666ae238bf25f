#include "adapters/node_broker.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <iterator>
#include <vector>

#include <zmq_addon.hpp>

#include "messages/errc.hpp"

namespace infrarsi::adapters {

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// Reads one multipart message without blocking; empty when none is waiting.
std::vector<zmq::message_t> receive_all(zmq::socket_t& s) {
  std::vector<zmq::message_t> frames;
  (void) zmq::recv_multipart(s, std::back_inserter(frames), zmq::recv_flags::dontwait);
  return frames;
}

caf::error configure_server(zmq::socket_t& s, const node_broker_options& o,
                            const std::string& domain) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::router_mandatory, 1);
  s.set(zmq::sockopt::sndhwm, o.send_hwm);
  s.set(zmq::sockopt::rcvhwm, o.receive_hwm);
  s.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(o.max_frame_bytes));
  if (o.zap != nullptr)
    return make_curve_server(s, o.keys, *o.zap, domain);
  return caf::none;
}

} // namespace

node_broker::node_broker(zmq::context_t& ctx, node_broker_options options, node_broker_sink sink)
  : ctx_(ctx), o_(std::move(options)), sink_(std::move(sink)) {}

node_broker::~node_broker() {
  stop();
}

caf::error node_broker::start() {
  std::string at;
  try {
    nodes_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::router);
    at = o_.node_endpoint;
    if (auto err = configure_server(*nodes_, o_, o_.zap_domain))
      return err;
    nodes_->bind(o_.node_endpoint);
    node_bound_ = nodes_->get(zmq::sockopt::last_endpoint);
    if (!o_.client_endpoint.empty()) {
      clients_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::router);
      at = o_.client_endpoint;
      if (auto err = configure_server(*clients_, o_, o_.client_zap_domain))
        return err;
      clients_->bind(o_.client_endpoint);
      client_bound_ = clients_->get(zmq::sockopt::last_endpoint);
    }
    std::ostringstream wake;
    wake << "inproc://infrarsi-broker-wake-" << static_cast<const void*>(this);
    wake_endpoint_ = wake.str();
    at = wake_endpoint_;
    wake_in_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::pull);
    wake_in_->bind(wake_endpoint_);
    wake_out_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::push);
    wake_out_->set(zmq::sockopt::linger, 0);
    wake_out_->connect(wake_endpoint_);
  } catch (const zmq::error_t& e) {
    nodes_.reset();
    clients_.reset();
    return make_error(errc::io_error, "daemon: cannot bind '" + at + "': " + e.what());
  }
  thread_ = std::thread{[this] { serve(); }};
  return caf::none;
}

void node_broker::stop() {
  stop_ = true;
  if (thread_.joinable())
    thread_.join();
  std::lock_guard<std::mutex> lock{mutex_};
  wake_out_.reset();
  wake_in_.reset();
  nodes_.reset();
  clients_.reset();
}

void node_broker::post(outbound o) {
  std::lock_guard<std::mutex> lock{mutex_};
  queue_.push_back(std::move(o));
  if (wake_out_ && queue_.size() == 1) {
    try {
      (void) wake_out_->send(zmq::message_t{}, zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // The broker polls its queue every 100 ms anyway; a lost wake-up only delays the send.
    }
  }
}

void node_broker::send_to_node(const std::string& identity, messages::envelope_msg env) {
  post(outbound{true, false, identity, std::move(env)});
}

void node_broker::send_to_client(const std::string& identity, messages::envelope_msg env) {
  post(outbound{false, false, identity, std::move(env)});
}

void node_broker::forget_node(const std::string& identity) {
  post(outbound{true, true, identity, {}});
}

node_broker_stats node_broker::stats() const {
  std::lock_guard<std::mutex> lock{stats_mutex_};
  return stats_;
}

void node_broker::serve() {
  std::map<std::string, clock_type::time_point> peers; // node identity -> last heard
  const auto interval = milliseconds(o_.heartbeat_ms);
  auto next_beat = clock_type::now() + interval;
  auto last_loop = clock_type::now();
  auto count = [this](auto member) {
    std::lock_guard<std::mutex> lock{stats_mutex_};
    ++(stats_.*member);
  };
  // Sends [identity, body]; false (with `why`) when the peer is unreachable or its queue is full.
  auto send_frames = [&](zmq::socket_t& s, const std::string& identity,
                         const messages::byte_buffer& body, std::string& why) {
    try {
      if (!s.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        why = "its send queue is full (high-water mark " + std::to_string(o_.send_hwm) + ")";
        return false;
      }
      (void) s.send(zmq::buffer(body.data(), body.size()), zmq::send_flags::dontwait);
      count(&node_broker_stats::frames_out);
      return true;
    } catch (const zmq::error_t& e) {
      why = e.num() == EHOSTUNREACH ? std::string{"the peer is not connected"} : e.what();
      return false;
    }
  };
  auto take = [&](zmq::socket_t& s, bool from_node) {
    for (int burst = 0; burst < 10000; ++burst) {
      auto frames = receive_all(s);
      if (frames.empty())
        return;
      count(&node_broker_stats::frames_in);
      if (frames.size() < 2) {
        count(&node_broker_stats::malformed);
        continue;
      }
      std::string identity(static_cast<const char*>(frames.front().data()),
                           frames.front().size());
      const auto& body = frames.back();
      messages::verify_limits limits;
      limits.max_bytes = o_.max_frame_bytes;
      // The envelope and its payload, by its kind, verified once (the first step of
      // messages::read_node_frame, fuzz/node_frame.cpp); the receivers open what they read.
      auto env = messages::envelope_msg::decode(body.data(), body.size(), limits);
      if (!env) {
        count(&node_broker_stats::malformed);
        continue; // counted and dropped, never read
      }
      if (from_node) {
        peers[identity] = clock_type::now();
        if (sink_.node_message)
          sink_.node_message(identity, *env);
      } else if (sink_.client_message) {
        sink_.client_message(identity, *env);
      }
    }
  };
  while (!stop_) {
    std::vector<zmq::pollitem_t> items;
    items.push_back({nodes_->handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({wake_in_->handle(), 0, ZMQ_POLLIN, 0});
    if (clients_)
      items.push_back({clients_->handle(), 0, ZMQ_POLLIN, 0});
    try {
      zmq::poll(items.data(), items.size(), milliseconds(100));
    } catch (const zmq::error_t&) {
      continue; // EINTR
    }
    if ((items[1].revents & ZMQ_POLLIN) != 0)
      while (!receive_all(*wake_in_).empty()) {
      }
    if ((items[0].revents & ZMQ_POLLIN) != 0)
      take(*nodes_, true);
    if (clients_ && (items[2].revents & ZMQ_POLLIN) != 0)
      take(*clients_, false);
    std::deque<outbound> work;
    {
      std::lock_guard<std::mutex> lock{mutex_};
      work.swap(queue_);
    }
    for (auto& w : work) {
      if (w.forget) {
        peers.erase(w.identity);
        continue;
      }
      std::string why;
      auto& s = w.to_node ? *nodes_ : *clients_;
      if (!w.to_node && !clients_)
        continue;
      if (!send_frames(s, w.identity, w.env.bytes(), why)) {
        count(&node_broker_stats::send_failures);
        if (w.to_node && sink_.node_send_failed)
          sink_.node_send_failed(w.identity, w.env, why);
      }
    }
    auto now = clock_type::now();
    // This thread was not scheduled for more than a heartbeat (the daemon was stopped, the VM
    // paused, the head node overloaded): the peers' messages of that time are still in transit,
    // so their silence says nothing about them. Every peer gets a fresh liveness period.
    if (now - last_loop > interval)
      for (auto& [identity, heard] : peers)
        heard = std::max(heard, now);
    last_loop = now;
    for (auto it = peers.begin(); it != peers.end();) {
      if (now - it->second > interval * o_.liveness) {
        auto silent = std::chrono::duration_cast<milliseconds>(now - it->second).count();
        auto identity = it->first;
        it = peers.erase(it);
        count(&node_broker_stats::nodes_gone);
        if (sink_.node_gone)
          sink_.node_gone(identity, "silent for " + std::to_string(silent) + " ms (liveness "
                                      + std::to_string(o_.liveness) + " x "
                                      + std::to_string(o_.heartbeat_ms) + " ms)");
      } else {
        ++it;
      }
    }
    if (now >= next_beat) {
      next_beat = now + interval;
      auto hb = messages::seal(messages::heartbeat_msg::pack(wire::HeartbeatT{}), "", "daemon",
                               sequence_++);
      if (hb)
        for (auto it = peers.begin(); it != peers.end();) {
          std::string why;
          if (send_frames(*nodes_, it->first, hb->bytes(), why)) {
            count(&node_broker_stats::heartbeats_out);
            ++it;
            continue;
          }
          count(&node_broker_stats::send_failures);
          auto identity = it->first;
          if (why == "the peer is not connected") { // gone for ZeroMQ already
            it = peers.erase(it);
            count(&node_broker_stats::nodes_gone);
            if (sink_.node_gone)
              sink_.node_gone(identity, "disconnected (" + why + ")");
          } else {
            ++it;
          }
        }
    }
  }
}

} // namespace infrarsi::adapters
