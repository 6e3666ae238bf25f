// daemon_bench: 1,000 node-runner connections to one daemon on loopback (issue 14).
//
// Two processes. The daemon side (this process, measured) runs the daemon's real node front:
// adapters::node_broker (the node ROUTER, liveness, heartbeats) and the actors::node_pool actor
// (hello, slots, assignment, results), as `infrarsi daemon` does. The node side (a forked child)
// holds N DEALER sockets, one per simulated node-runner, each with one slot: it says hello,
// heartbeats every second as `infrarsi node` does, and answers every TrialAssignment at once
// with a TrialResult whose detail carries the CLOCK_MONOTONIC time it received the assignment.
//
// Phases: join (every node said hello and was welcomed), idle (heartbeats only: the daemon's CPU
// share), load (a load actor keeps --concurrency dispatch requests in flight through the pool;
// dispatch latency = the node's receipt time minus the request's send time, both on
// CLOCK_MONOTONIC, which the two processes share; round trip = the result back at the load
// actor). Daemon CPU share = this process's user+system CPU seconds (getrusage) over the phase's
// wall seconds, in cores; it includes the load actor and CAF's scheduler, so it is an upper bound
// for the daemon itself.
//
// Usage: infrarsi_daemon_bench [--nodes N] [--idle-s S] [--load-s S] [--concurrency C]
//                              [--json FILE]

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/all.hpp>
#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "actors/node_pool.hpp"
#include "adapters/node_broker.hpp"
#include "messages/node_protocol.hpp"
#include "messages/type_ids.hpp"

namespace {

using namespace infrarsi;
using clock_type = std::chrono::steady_clock;

std::int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec)
         + static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

void raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0.0;
  std::sort(v.begin(), v.end());
  auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// -- the node side (child process) ------------------------------------------------------------------

template <class Table>
void send_env(zmq::socket_t& s, const messages::message<Table>& m, const std::string& run,
              const std::string& sender, std::uint64_t& seq) {
  auto env = messages::seal(m, run, sender, seq++);
  if (env)
    (void) s.send(zmq::buffer(env->bytes().data(), env->bytes().size()),
                  zmq::send_flags::dontwait);
}

int run_nodes(const std::string& endpoint, int n, int read_fd_unused) {
  (void) read_fd_unused;
  raise_fd_limit();
  zmq::context_t ctx;
  ctx.set(zmq::ctxopt::max_sockets, n + 64);
  std::vector<std::unique_ptr<zmq::socket_t>> socks;
  std::vector<std::string> names;
  std::uint64_t seq = 0;
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    s->connect(endpoint);
    names.push_back("bench-node-" + std::to_string(i));
    wire::NodeHelloT h;
    h.node = names.back();
    h.fingerprint = "bench";
    h.protocol = messages::node_protocol_version;
    h.tool_version = messages::tool_version;
    auto slot = std::make_unique<wire::NodeSlotInfoT>();
    slot->name = "0";
    h.slots.push_back(std::move(slot));
    send_env(*socks.emplace_back(std::move(s)), messages::node_hello_msg::pack(h), "",
             names.back(), seq);
  }
  std::vector<zmq::pollitem_t> items;
  for (auto& s : socks)
    items.push_back({s->handle(), 0, ZMQ_POLLIN, 0});
  auto next_beat = clock_type::now() + std::chrono::seconds(1);
  auto heartbeat = messages::heartbeat_msg::pack(wire::HeartbeatT{});
  for (;;) {
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(10));
    for (std::size_t i = 0; i < items.size(); ++i) {
      if ((items[i].revents & ZMQ_POLLIN) == 0)
        continue;
      for (;;) {
        zmq::message_t frame;
        if (!socks[i]->recv(frame, zmq::recv_flags::dontwait))
          break;
        auto got = monotonic_ns();
        auto env = messages::envelope_msg::decode(frame.data(), frame.size());
        if (!env)
          continue;
        if ((*env)->kind() == wire::MessageKind::NodeControl) {
          auto c = messages::open<wire::NodeControl>(*env);
          if (c && (*c)->command()->str() == "hello") {
            wire::NodeHelloT h;
            h.node = names[i];
            h.protocol = messages::node_protocol_version;
            auto slot = std::make_unique<wire::NodeSlotInfoT>();
            slot->name = "0";
            h.slots.push_back(std::move(slot));
            send_env(*socks[i], messages::node_hello_msg::pack(h), "", names[i], seq);
          }
          if (c && (*c)->command()->str() == "bye")
            return 0;
          continue;
        }
        if ((*env)->kind() != wire::MessageKind::TrialAssignment)
          continue;
        auto a = messages::open<wire::TrialAssignment>(*env);
        if (!a)
          continue;
        auto spec = messages::trial_spec_msg::decode((*a)->spec()->data(), (*a)->spec()->size());
        if (!spec)
          continue;
        wire::TrialResultT r;
        r.trial_id = (*spec)->trial_id();
        r.attempt = (*spec)->attempt();
        r.outcome = wire::Outcome::Ok;
        r.detail = std::to_string(got);
        r.node = names[i];
        send_env(*socks[i], messages::trial_result_msg::pack(r), (*env)->run_id()->str(),
                 names[i], seq);
      }
    }
    if (clock_type::now() >= next_beat) {
      next_beat += std::chrono::seconds(1);
      for (std::size_t i = 0; i < socks.size(); ++i)
        send_env(*socks[i], heartbeat, "", names[i], seq);
    }
  }
}

// -- the load actor (daemon side) -----------------------------------------------------------------

struct load_state {
  static inline const char* name = "bench-load";
  actors::node_pool_actor pool;
  int concurrency = 64;
  bool running = true;
  std::uint64_t next_trial = 0;
  std::map<std::uint64_t, std::int64_t> sent;
  std::vector<double> dispatch_ms;
  std::vector<double> round_trip_ms;
  std::uint64_t lost = 0;
};

using stop_atom = caf::atom_constant<caf::atom("stop")>;
using go_atom = caf::atom_constant<caf::atom("go")>;
using report_atom = caf::atom_constant<caf::atom("report")>;

void issue(caf::stateful_actor<load_state>* self) {
  auto& st = self->state;
  if (!st.running)
    return;
  wire::TrialSpecT spec;
  spec.trial_id = st.next_trial++;
  spec.purpose = "explore";
  auto msg = messages::trial_spec_msg::pack(spec);
  auto id = spec.trial_id;
  st.sent[id] = monotonic_ns();
  self->request(st.pool, std::chrono::seconds(30), actors::run_atom_v, std::string{"bench-run"},
                msg)
    .then(
      [self, id](messages::trial_result_msg& r) {
        auto& s = self->state;
        auto now = monotonic_ns();
        auto t0 = s.sent[id];
        s.sent.erase(id);
        s.round_trip_ms.push_back(static_cast<double>(now - t0) / 1e6);
        auto got = std::stoll(r->detail()->str());
        s.dispatch_ms.push_back(static_cast<double>(got - t0) / 1e6);
        issue(self);
      },
      [self, id](caf::error&) {
        self->state.sent.erase(id);
        ++self->state.lost;
        issue(self);
      });
}

caf::behavior load(caf::stateful_actor<load_state>* self, actors::node_pool_actor pool,
                   int concurrency) {
  self->state.pool = pool;
  self->state.concurrency = concurrency;
  return {
    [self](go_atom) {
      for (int i = 0; i < self->state.concurrency; ++i)
        issue(self);
    },
    [self](stop_atom) { self->state.running = false; },
    [self](report_atom) -> std::string {
      auto& s = self->state;
      return nlohmann::json{{"requests_completed", s.round_trip_ms.size()},
                            {"lost", s.lost},
                            {"dispatch_ms_p50", percentile(s.dispatch_ms, 0.50)},
                            {"dispatch_ms_p99", percentile(s.dispatch_ms, 0.99)},
                            {"dispatch_ms_max", percentile(s.dispatch_ms, 1.0)},
                            {"round_trip_ms_p50", percentile(s.round_trip_ms, 0.50)},
                            {"round_trip_ms_p99", percentile(s.round_trip_ms, 0.99)}}
        .dump();
    },
    [](actors::slots_atom, std::uint32_t) {}};
}

} // namespace

int main(int argc, char** argv) {
  int nodes = 1000;
  double idle_s = 10;
  double load_s = 20;
  int concurrency = 64;
  std::string json_out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--nodes")
      nodes = std::stoi(next());
    else if (a == "--idle-s")
      idle_s = std::stod(next());
    else if (a == "--load-s")
      load_s = std::stod(next());
    else if (a == "--concurrency")
      concurrency = std::stoi(next());
    else if (a == "--json")
      json_out = next();
    else {
      std::cerr << "usage: infrarsi_daemon_bench [--nodes N] [--idle-s S] [--load-s S] "
                   "[--concurrency C] [--json FILE]\n";
      return 2;
    }
  }
  raise_fd_limit();
  int pipe_fd[2];
  if (::pipe(pipe_fd) != 0)
    return 1;
  pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fd[1]);
    char buf[256] = {};
    auto n = ::read(pipe_fd[0], buf, sizeof buf - 1);
    if (n <= 0)
      ::_exit(1);
    ::_exit(run_nodes(std::string{buf, static_cast<std::size_t>(n)}, nodes, pipe_fd[0]));
  }
  ::close(pipe_fd[0]);

  zmq::context_t zctx;
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::infrarsi>();
  caf::actor_system sys{cfg};
  actors::node_pool_actor pool;
  adapters::node_broker_sink sink;
  sink.node_message = [&pool](const std::string& id, const messages::envelope_msg& env) {
    caf::anon_send(pool, actors::node_atom_v, id, env);
  };
  sink.node_gone = [&pool](const std::string& id, const std::string& why) {
    caf::anon_send(pool, actors::gone_atom_v, id, why);
  };
  adapters::node_broker_options bo;
  bo.node_endpoint = "tcp://127.0.0.1:*";
  bo.client_endpoint = "";
  adapters::node_broker broker{zctx, bo, sink};
  actors::node_pool_options po;
  po.broker = &broker;
  pool = sys.spawn(actors::node_pool, po);
  if (auto e = broker.start()) {
    std::cerr << "daemon_bench: " << describe(e) << '\n';
    ::kill(child, SIGKILL);
    return 1;
  }
  auto ep = broker.node_endpoint();
  if (::write(pipe_fd[1], ep.data(), ep.size()) != static_cast<ssize_t>(ep.size()))
    return 1;
  ::close(pipe_fd[1]);

  caf::scoped_actor self{sys};
  auto status = [&]() {
    nlohmann::json doc;
    self->request(pool, std::chrono::seconds(10), actors::status_atom_v)
      .receive([&](std::string& s) { doc = nlohmann::json::parse(s); },
               [&](caf::error&) {});
    return doc;
  };
  // Join: every node said hello.
  auto t0 = clock_type::now();
  std::size_t joined = 0;
  while (clock_type::now() - t0 < std::chrono::seconds(120)) {
    auto doc = status();
    joined = doc.is_object() ? doc["nodes"].size() : 0;
    if (joined >= static_cast<std::size_t>(nodes))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  auto join_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::cerr << "daemon_bench: " << joined << " of " << nodes << " nodes joined in " << join_s
            << " s\n";
  // The bench's run joins the pool (its supervisor is the load actor, which ignores shares).
  auto loader = sys.spawn(load, pool, concurrency);
  caf::anon_send(pool, actors::join_atom_v, std::string{"bench-run"}, std::uint32_t{0},
                 std::string{}, std::string{}, loader);
  // Idle: heartbeats only.
  auto before = broker.stats();
  auto c0 = cpu_seconds();
  auto w0 = clock_type::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
  auto idle_wall = std::chrono::duration<double>(clock_type::now() - w0).count();
  auto idle_cpu = cpu_seconds() - c0;
  auto after_idle = broker.stats();
  // Load: dispatches through the pool while every node heartbeats.
  c0 = cpu_seconds();
  w0 = clock_type::now();
  caf::anon_send(loader, go_atom::value);
  std::this_thread::sleep_for(std::chrono::duration<double>(load_s));
  caf::anon_send(loader, stop_atom::value);
  auto load_wall = std::chrono::duration<double>(clock_type::now() - w0).count();
  auto load_cpu = cpu_seconds() - c0;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  nlohmann::json load_doc;
  self->request(loader, std::chrono::seconds(10), report_atom::value)
    .receive([&](std::string& s) { load_doc = nlohmann::json::parse(s); }, [&](caf::error&) {});
  auto final_status = status();
  auto after = broker.stats();
  nlohmann::json out = {
    {"nodes", nodes},
    {"nodes_joined", joined},
    {"join_s", join_s},
    {"idle_s", idle_wall},
    {"idle_daemon_cpu_cores", idle_cpu / idle_wall},
    {"idle_heartbeats_in_per_s",
     static_cast<double>(after_idle.frames_in - before.frames_in) / idle_wall},
    {"idle_heartbeats_out_per_s",
     static_cast<double>(after_idle.heartbeats_out - before.heartbeats_out) / idle_wall},
    {"load_s", load_wall},
    {"load_daemon_cpu_cores", load_cpu / load_wall},
    {"concurrency", concurrency},
    {"dispatches_per_s", load_doc.value("requests_completed", 0) / load_wall},
    {"load", load_doc},
    {"nodes_gone", after.nodes_gone},
    {"malformed", after.malformed},
    {"send_failures", after.send_failures},
    {"nodes_at_end", final_status.is_object() ? final_status["nodes"].size() : 0}};
  std::cout << out.dump(2) << '\n';
  if (!json_out.empty())
    std::ofstream{json_out} << out.dump(2) << '\n';
  ::kill(child, SIGKILL);
  int st = 0;
  ::waitpid(child, &st, 0);
  broker.stop();
  caf::anon_send_exit(loader, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
  return 0;
}
