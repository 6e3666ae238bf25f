// The daemon across machines (issue 14), with real processes: `infrarsi daemon`, `infrarsi
// node` and `infrarsi submit` / `daemon status`, on loopback or in network namespaces the test
// makes itself. Each test runs the real simulator through the real launcher.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "durability/daemon_cluster.hpp"
#include "durability/sim_task.hpp"
#include "durability/tune_process.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"

namespace infrarsi {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::file_contains;
using test::file_text;

/// The endpoint the daemon printed for `what` ("nodes" or "clients"), once it listens.
std::string bound(const std::string& output, const std::string& what) {
  std::string found;
  eventually(20s, [&] {
    std::smatch m;
    auto text = file_text(output);
    if (std::regex_search(text, m, std::regex{"(^|\\n)" + what + " (tcp://[^\\s]+)"})) {
      found = m[2];
      return true;
    }
    return false;
  });
  return found;
}

/// A small sim task (every trial sleeps `sleep_s` first) with `trials` search trials.
std::string write_sim_task(const test::temp_dir& dir, const std::string& name, double sleep_s,
                           int trials) {
  auto text = test::small_sim_task_text(
    dir, "sleep " + std::to_string(sleep_s) + " && exec \"$0\" \"$@\"",
    "\n[budget]\ntrials = " + std::to_string(trials)
      + "\nbaseline_repeats = 3\nverify_top = 1\nverify_repeats = 2\n");
  auto path = dir.sub(name + ".toml");
  std::ofstream{path} << text;
  return path;
}

/// Search trials (explore) that completed with a result, by trial id.
std::set<std::uint64_t> explore_trials(const test::logged_run& r) {
  std::set<std::uint64_t> explore;
  for (const auto* e : r.of(wire::EventKind::TrialProposed))
    if (e->purpose == wire::Purpose::Explore)
      explore.insert(e->trial);
  return explore;
}

std::string submit(const std::vector<std::string>& prefix, const std::string& client,
                   const std::string& task, const test::temp_dir& dir,
                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"submit", task, "--daemon", client};
  args.insert(args.end(), extra.begin(), extra.end());
  auto [rc, text] = test::run_capture(prefix, args, dir.sub("submit.out"));
  EXPECT_EQ(rc, 0) << text;
  auto nl = text.find('\n');
  return text.substr(0, nl);
}

/// A daemon and its node-runners: on loopback, or each in its own network namespace (`prefix`:
/// `ip netns exec NS`).
struct cluster {
  cluster(test::temp_dir& d, test::process_set& p, std::string c)
    : dir(d), procs(p), config(std::move(c)) {}
  test::temp_dir& dir;
  test::process_set& procs;
  std::string config;
  std::vector<std::string> daemon_prefix;
  std::string daemon_out = dir.sub("daemon.out");
  std::string clients;
  pid_t daemon = -1;
  std::map<std::string, pid_t> nodes;

  void start_daemon() {
    daemon = procs.add(test::start_in(daemon_prefix, {"daemon", "--config", config}, daemon_out));
    clients = bound(daemon_out, "clients");
  }
  /// The last "nodes" line: a restarted daemon prints its own.
  std::string nodes_endpoint() const {
    auto text = file_text(daemon_out);
    std::string ep;
    auto re = std::regex{"(^|\\n)nodes (tcp://[^\\s]+)"};
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re);
         it != std::sregex_iterator(); ++it)
      ep = (*it)[2];
    return ep;
  }
  void start_node(const std::string& name, const std::string& endpoint,
                  const std::vector<std::string>& prefix = {},
                  const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"node",       "--connect", endpoint, "--workdir",
                                  dir.sub(name), "--name",    name};
    args.insert(args.end(), extra.begin(), extra.end());
    nodes[name] = procs.add(test::start_in(prefix, args, dir.sub(name + ".out")));
  }
  /// Whether every node of `names` joined within `timeout`.
  bool joined(const std::vector<std::string>& names, std::chrono::seconds timeout = 30s) const {
    return eventually(timeout, [&] {
      for (const auto& n : names)
        if (!file_contains(daemon_out, "node " + n + " joined"))
          return false;
      return true;
    });
  }
  /// SIGTERM (drain); the daemon's exit code.
  int drain() {
    auto rc = test::terminate(daemon, 30s);
    procs.reaped(daemon);
    return rc;
  }
};

/// A head namespace linked to two host namespaces: head 10.231.1.1 <-> a, 10.231.2.1 <-> b.
struct netns_layout {
  test::netns_set ns;
  std::string head = ns.add("d");
  std::string host_a = ns.add("a");
  std::string host_b = ns.add("b");
  std::pair<std::string, std::string> link_a = ok_names() ? ns.link(head, host_a, 1)
                                                          : std::pair<std::string, std::string>{};
  std::pair<std::string, std::string> link_b = ok_names() ? ns.link(head, host_b, 2)
                                                          : std::pair<std::string, std::string>{};
  [[nodiscard]] bool ok_names() const {
    return !head.empty() && !host_a.empty() && !host_b.empty();
  }
  [[nodiscard]] bool ok() const { return ok_names() && !link_a.first.empty() && !link_b.first.empty(); }
  [[nodiscard]] std::vector<std::string> in(const std::string& name) const {
    return {"ip", "netns", "exec", name};
  }
};

/// The daemon in the head namespace, node-a and node-b in theirs, all joined.
void start_in_namespaces(cluster& c, const netns_layout& net) {
  c.daemon_prefix = net.in(net.head);
  c.start_daemon();
  ASSERT_FALSE(c.clients.empty()) << file_text(c.daemon_out);
  c.start_node("node-a", "tcp://10.231.1.1:5555", net.in(net.host_a));
  c.start_node("node-b", "tcp://10.231.2.1:5555", net.in(net.host_b));
  ASSERT_TRUE(c.joined({"node-a", "node-b"})) << file_text(c.daemon_out);
}

/// The daemon and node-a, node-b on loopback, all joined.
void start_on_loopback(cluster& c) {
  c.start_daemon();
  ASSERT_FALSE(c.clients.empty()) << file_text(c.daemon_out);
  auto ep = c.nodes_endpoint();
  c.start_node("node-a", ep);
  c.start_node("node-b", ep);
  ASSERT_TRUE(c.joined({"node-a", "node-b"})) << file_text(c.daemon_out);
}

/// `infrarsi replay RUN --store STORE`'s exit code (0: every decision reproduced).
void expect_replays(const test::temp_dir& dir, const std::string& store, const std::string& run) {
  auto [rc, replay] = test::run_capture({}, {"replay", run, "--store", store},
                                        dir.sub("replay.out"));
  EXPECT_EQ(rc, 0) << run << ": " << replay;
}

TEST(Daemon, TwoNodesInTwoNetworkNamespacesShareASimRunThatFinishesAndReplays) {
  // scripts/setup installs iproute2 and CI runs as root: without them this fails, naming why.
  ASSERT_TRUE(test::netns_set::available())
    << "needs root and iproute2 (ip netns) to make its own network namespaces";
  test::temp_dir dir;
  netns_layout net;
  ASSERT_TRUE(net.ok()) << "ip netns add / veth failed";
  test::process_set procs;
  cluster c{dir, procs,
            test::write_daemon_config(dir, "daemon", "tcp://*:5555", "tcp://127.0.0.1:5556")};
  start_in_namespaces(c, net);
  auto run_id = submit(c.daemon_prefix, c.clients, write_sim_task(dir, "sim-daemon", 0.2, 8), dir);
  ASSERT_FALSE(run_id.empty());
  auto store = dir.sub("daemon-store");
  ASSERT_TRUE(eventually(240s, [&] { return test::run_applied(store, run_id); }))
    << file_text(c.daemon_out);
  // Status over the client socket names both nodes.
  auto [src, status] = test::run_capture(c.daemon_prefix, {"daemon", "status", "--daemon", c.clients},
                                         dir.sub("status.out"));
  EXPECT_EQ(src, 0) << status;
  EXPECT_NE(status.find("node-a"), std::string::npos) << status;
  EXPECT_NE(status.find("node-b"), std::string::npos) << status;
  EXPECT_EQ(c.drain(), 0) << file_text(c.daemon_out);
  auto r = test::read_logged_run(store, run_id);
  ASSERT_TRUE(r);
  std::map<std::string, int> per_node;
  for (const auto* e : r->of(wire::EventKind::TrialCompleted))
    ++per_node[e->node];
  EXPECT_GT(per_node["node-a"], 0) << "trials on node-a";
  EXPECT_GT(per_node["node-b"], 0) << "trials on node-b";
  EXPECT_EQ(per_node["node-a"] + per_node["node-b"],
            static_cast<int>(r->of(wire::EventKind::TrialCompleted).size()))
    << "every trial ran on one of the two nodes";
  EXPECT_EQ(explore_trials(*r).size(), 8u);
  expect_replays(dir, store, run_id);
}

TEST(Daemon, APartitionedNodeRejoinsAndALossyLinkStillFinishesTheRun) {
  ASSERT_TRUE(test::netns_set::available() && test::shell("command -v iptables") == 0)
    << "needs root, iproute2 (ip netns) and iptables (scripts/setup installs them)";
  test::temp_dir dir;
  netns_layout net;
  ASSERT_TRUE(net.ok()) << "ip netns add / veth failed";
  // node-b's link drops 10 % of the packets it receives (inside its own namespace only).
  ASSERT_EQ(test::shell("ip netns exec " + net.host_b
                        + " iptables -A INPUT -p tcp -m statistic --mode random --probability "
                          "0.1 -j DROP"),
            0);
  test::process_set procs;
  cluster c{dir, procs,
            test::write_daemon_config(dir, "daemon", "tcp://*:5555", "tcp://127.0.0.1:5556")};
  start_in_namespaces(c, net);
  auto run_id =
    submit(c.daemon_prefix, c.clients, write_sim_task(dir, "sim-partition", 1.0, 6), dir);
  ASSERT_FALSE(run_id.empty());
  auto store = dir.sub("daemon-store");
  ASSERT_TRUE(eventually(60s, [&] {
    return file_contains(dir.sub("node-a.out"), "starts in slot");
  })) << file_text(dir.sub("node-a.out"));
  // Partition node-a for about 8 s: the daemon loses its attempt and re-queues it on node-b.
  const auto& link = net.link_a.first;
  ASSERT_EQ(test::shell("ip -n " + net.head + " link set " + link + " down"), 0);
  EXPECT_TRUE(eventually(8s, [&] { return file_contains(c.daemon_out, "node node-a is gone"); }))
    << file_text(c.daemon_out);
  std::this_thread::sleep_for(4s);
  ASSERT_EQ(test::shell("ip -n " + net.head + " link set " + link + " up"), 0);
  ASSERT_TRUE(eventually(240s, [&] { return test::run_applied(store, run_id); }))
    << file_text(c.daemon_out);
  // node-a came back and said hello again after the partition.
  EXPECT_TRUE(eventually(60s, [&] {
    auto text = file_text(c.daemon_out);
    return text.find("node node-a joined", text.find("node node-a is gone")) != std::string::npos;
  })) << file_text(c.daemon_out);
  EXPECT_EQ(c.drain(), 0) << file_text(c.daemon_out);
  auto r = test::read_logged_run(store, run_id);
  ASSERT_TRUE(r);
  EXPECT_GE(r->of(wire::EventKind::TrialLost).size(), 1u);
  EXPECT_EQ(explore_trials(*r).size(), 6u);
  expect_replays(dir, store, run_id);
}

TEST(Daemon, AKilledNodeLosesItsTrialWithinFiveSecondsAndTheOtherNodeFinishesTheRun) {
  test::temp_dir dir;
  test::process_set procs;
  // Fixed loopback ports would collide between parallel tests: port 0, read back.
  cluster c{dir, procs,
            test::write_daemon_config(dir, "daemon", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*")};
  start_on_loopback(c);
  const int budget = 6;
  auto run_id = submit({}, c.clients, write_sim_task(dir, "sim-kill", 1.5, budget), dir);
  ASSERT_FALSE(run_id.empty());
  auto store = dir.sub("daemon-store");
  // Wait for node-a to be running an attempt, then kill -9 the node-runner.
  ASSERT_TRUE(eventually(60s, [&] {
    return file_contains(dir.sub("node-a.out"), "starts in slot");
  })) << file_text(dir.sub("node-a.out"));
  ::kill(c.nodes["node-a"], SIGKILL);
  auto killed_at = std::chrono::steady_clock::now();
  std::chrono::milliseconds lost_after{-1};
  ASSERT_TRUE(eventually(10s, [&] {
    auto r = test::read_logged_run(store, run_id);
    if (r && !r->of(wire::EventKind::TrialLost).empty()) {
      lost_after = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - killed_at);
      return true;
    }
    return false;
  })) << file_text(c.daemon_out);
  EXPECT_LT(lost_after.count(), 5000) << "TrialLost logged " << lost_after.count()
                                      << " ms after the kill";
  // The killed node-runner's rank died with it (PR_SET_PDEATHSIG): the rank (sh, which sleeps
  // 1.5 s before it execs the simulator, its command line naming infrarsi-sim) is gone within
  // half a second; only its own child `sleep` may outlive it, by design.
  std::vector<std::string> ranks_left;
  EXPECT_TRUE(eventually(std::chrono::milliseconds(500), [&] {
    ranks_left.clear();
    for (const auto& p : test::processes_mentioning(dir.sub("node-a")))
      if (p.find("infrarsi-sim") != std::string::npos)
        ranks_left.push_back(p);
    return ranks_left.empty();
  })) << ranks_left.front();
  std::cout << "TrialLost logged " << lost_after.count() << " ms after kill -9 of node-a\n";
  ASSERT_TRUE(eventually(240s, [&] { return test::run_applied(store, run_id); }))
    << file_text(c.daemon_out);
  auto r = test::read_logged_run(store, run_id);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->of(wire::EventKind::TrialLost).size(), 1u);
  const auto* lost = r->of(wire::EventKind::TrialLost).front();
  // Re-queued once, as the next attempt, and that attempt completed on node-b.
  bool requeued = false;
  for (const auto* e : r->of(wire::EventKind::TrialCompleted))
    if (e->trial == lost->trial && e->attempt == lost->attempt + 1) {
      requeued = true;
      EXPECT_EQ(e->node, "node-b");
    }
  EXPECT_TRUE(requeued) << "trial " << lost->trial << " attempt " << lost->attempt + 1;
  EXPECT_EQ(explore_trials(*r).size(), static_cast<std::size_t>(budget))
    << "the run spent exactly its budget";
  EXPECT_EQ(c.drain(), 0);
  expect_replays(dir, store, run_id);
}

TEST(Daemon, ASigtermedNodeHandsItsTrialBackAndASecondNodeOfTheSameNameIsRefused) {
  test::temp_dir dir;
  test::process_set procs;
  cluster c{dir, procs,
            test::write_daemon_config(dir, "daemon", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*")};
  start_on_loopback(c);
  // A second node-runner under a name a live one holds: refused, exit 1; node-a stays.
  auto [dup_rc, dup] = test::run_capture(
    {}, {"node", "--connect", c.nodes_endpoint(), "--workdir", dir.sub("dup"), "--name", "node-a"},
    dir.sub("dup.out"));
  EXPECT_EQ(dup_rc, 1) << dup;
  EXPECT_NE(dup.find("in use"), std::string::npos) << dup;
  auto run_id = submit({}, c.clients, write_sim_task(dir, "sim-term", 1.5, 4), dir);
  ASSERT_FALSE(run_id.empty());
  auto store = dir.sub("daemon-store");
  ASSERT_TRUE(eventually(60s, [&] {
    return file_contains(dir.sub("node-a.out"), "starts in slot");
  })) << file_text(dir.sub("node-a.out"));
  EXPECT_EQ(test::terminate(c.nodes["node-a"], 30s), 0) << file_text(dir.sub("node-a.out"));
  procs.reaped(c.nodes["node-a"]);
  ASSERT_TRUE(eventually(240s, [&] { return test::run_applied(store, run_id); }))
    << file_text(c.daemon_out);
  auto r = test::read_logged_run(store, run_id);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->of(wire::EventKind::TrialLost).size(), 1u) << file_text(c.daemon_out);
  const auto* lost = r->of(wire::EventKind::TrialLost).front();
  // The stopped attempt has no result of its own (not a preempted failure of its configuration);
  // its next attempt ran on node-b.
  bool requeued = false;
  for (const auto* e : r->of(wire::EventKind::TrialCompleted)) {
    EXPECT_FALSE(e->trial == lost->trial && e->attempt == lost->attempt);
    if (e->trial == lost->trial && e->attempt == lost->attempt + 1) {
      requeued = true;
      EXPECT_EQ(e->node, "node-b");
    }
  }
  EXPECT_TRUE(requeued);
  EXPECT_EQ(explore_trials(*r).size(), 4u);
  EXPECT_EQ(c.drain(), 0);
  expect_replays(dir, store, run_id);
}

TEST(Daemon, AStoppedNodesLateResultIsLoggedStaleAndNeverCounted) {
  test::temp_dir dir;
  test::process_set procs;
  cluster c{dir, procs,
            test::write_daemon_config(dir, "daemon", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*")};
  start_on_loopback(c);
  auto run_id = submit({}, c.clients, write_sim_task(dir, "sim-stop", 1.5, 4), dir);
  ASSERT_FALSE(run_id.empty());
  auto store = dir.sub("daemon-store");
  ASSERT_TRUE(eventually(60s, [&] {
    return file_contains(dir.sub("node-a.out"), "starts in slot");
  })) << file_text(dir.sub("node-a.out"));
  ::kill(c.nodes["node-a"], SIGSTOP);
  std::this_thread::sleep_for(10s);
  ::kill(c.nodes["node-a"], SIGCONT);
  ASSERT_TRUE(eventually(240s, [&] { return test::run_applied(store, run_id); }))
    << file_text(c.daemon_out);
  auto r = test::read_logged_run(store, run_id);
  ASSERT_TRUE(r);
  ASSERT_GE(r->of(wire::EventKind::TrialLost).size(), 1u);
  ASSERT_GE(r->of(wire::EventKind::TrialResultStale).size(), 1u) << file_text(c.daemon_out);
  const auto* stale = r->of(wire::EventKind::TrialResultStale).front();
  EXPECT_EQ(stale->node, "node-a");
  // The stale attempt was lost first, and no TrialCompleted counts it.
  bool was_lost = false;
  for (const auto* e : r->of(wire::EventKind::TrialLost))
    was_lost = was_lost || (e->trial == stale->trial && e->attempt == stale->attempt);
  EXPECT_TRUE(was_lost);
  for (const auto* e : r->of(wire::EventKind::TrialCompleted))
    EXPECT_FALSE(e->trial == stale->trial && e->attempt == stale->attempt);
  EXPECT_EQ(explore_trials(*r).size(), 4u);
  // Both node-runners are still alive: nothing crashed.
  EXPECT_EQ(::waitpid(c.nodes["node-a"], nullptr, WNOHANG), 0);
  EXPECT_EQ(c.drain(), 0);
  expect_replays(dir, store, run_id);
}

TEST(Daemon, KilledWithTwoRunsInFlightItResumesBothAndReplayReproducesThem) {
  test::temp_dir dir;
  test::process_set procs;
  // Fixed ports: the restarted daemon must be where the nodes reconnect.
  auto port = 20000 + (::getpid() % 6000) * 2;
  auto nodes_ep = "tcp://127.0.0.1:" + std::to_string(port);
  auto clients_ep = "tcp://127.0.0.1:" + std::to_string(port + 1);
  cluster c{dir, procs, test::write_daemon_config(dir, "daemon", nodes_ep, clients_ep)};
  start_on_loopback(c);
  ASSERT_EQ(c.clients, clients_ep) << file_text(c.daemon_out);
  auto run1 = submit({}, clients_ep, write_sim_task(dir, "sim-one", 0.3, 6), dir);
  auto run2 = submit({}, clients_ep, write_sim_task(dir, "sim-two", 0.3, 6), dir, {"--seed", "7"});
  ASSERT_FALSE(run1.empty());
  ASSERT_FALSE(run2.empty());
  ASSERT_NE(run1, run2);
  auto store = dir.sub("daemon-store");
  // Both runs have trials completed, neither has finished: kill -9 the daemon.
  ASSERT_TRUE(eventually(120s, [&] {
    auto a = test::read_logged_run(store, run1);
    auto b = test::read_logged_run(store, run2);
    return a && b && a->of(wire::EventKind::TrialCompleted).size() >= 2
           && b->of(wire::EventKind::TrialCompleted).size() >= 2;
  })) << file_text(c.daemon_out);
  ASSERT_FALSE(test::run_applied(store, run1));
  ASSERT_FALSE(test::run_applied(store, run2));
  ::kill(-c.daemon, SIGKILL);
  int st = 0;
  ::waitpid(c.daemon, &st, 0);
  procs.reaped(c.daemon);
  c.start_daemon();
  ASSERT_EQ(c.clients, clients_ep) << file_text(c.daemon_out);
  for (const auto& run : {run1, run2})
    EXPECT_TRUE(eventually(10s, [&] { return file_contains(c.daemon_out, "resuming run " + run); }))
      << file_text(c.daemon_out);
  ASSERT_TRUE(eventually(300s, [&] {
    return test::run_applied(store, run1) && test::run_applied(store, run2);
  })) << file_text(c.daemon_out);
  EXPECT_EQ(c.drain(), 0);
  for (const auto& run : {run1, run2}) {
    auto r = test::read_logged_run(store, run);
    ASSERT_TRUE(r);
    EXPECT_EQ(explore_trials(*r).size(), 6u) << run;
    expect_replays(dir, store, run);
  }
}

TEST(Daemon, ANodeWhoseKeyIsNotAllowedIsRefusedAndAPlainClientGetsNothing) {
  test::temp_dir dir;
  test::process_set procs;
  auto keys = dir.sub("keys");
  auto allowed = dir.sub("allowed");
  std::filesystem::create_directories(allowed);
  for (const auto& name : {"daemon", "good-node", "bad-node", "client"}) {
    auto [rc, text] = test::run_capture({}, {"keys", "generate", "--out", keys, "--name", name},
                                        dir.sub("keys.out"));
    ASSERT_EQ(rc, 0) << text;
  }
  // Node keys on the node socket's list, the client key on the client socket's list.
  auto clients = dir.sub("clients");
  std::filesystem::create_directories(clients);
  std::filesystem::copy_file(keys + "/good-node.pub", allowed + "/good-node.pub");
  std::filesystem::copy_file(keys + "/client.pub", clients + "/client.pub");
  cluster c{dir, procs,
            test::write_daemon_config(dir, "daemon", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                                      "[security]\nsecret_key = \"" + keys
                                        + "/daemon.key\"\nallow = \"" + allowed
                                        + "\"\nallow_clients = \"" + clients + "\"\n")};
  c.start_daemon();
  ASSERT_FALSE(c.clients.empty()) << file_text(c.daemon_out);
  for (const auto& name : {"bad-node", "good-node"})
    c.start_node(name, c.nodes_endpoint(), {},
                 {"--server-key", keys + "/daemon.pub", "--key", keys + "/" + name + ".key"});
  // The client's key, allowed on the client socket only, cannot join as a node.
  c.start_node("client-as-node", c.nodes_endpoint(), {},
               {"--server-key", keys + "/daemon.pub", "--key", keys + "/client.key"});
  ASSERT_TRUE(c.joined({"good-node"})) << file_text(c.daemon_out);
  ASSERT_TRUE(eventually(10s, [&] { return file_contains(c.daemon_out, "refused a CURVE peer"); }))
    << file_text(c.daemon_out);
  EXPECT_FALSE(file_contains(c.daemon_out, "node bad-node joined"));
  EXPECT_FALSE(file_contains(c.daemon_out, "node client-as-node joined"));
  EXPECT_FALSE(file_contains(dir.sub("bad-node.out"), "connected to"))
    << file_text(dir.sub("bad-node.out"));
  // The refusal names the refused node's public key, never a secret one.
  auto bad_public = file_text(keys + "/bad-node.pub");
  std::smatch pub;
  ASSERT_TRUE(std::regex_search(bad_public, pub, std::regex{"public\\s*=\\s*\"([^\"]+)\""}));
  EXPECT_TRUE(file_contains(c.daemon_out, pub[1])) << file_text(c.daemon_out);
  for (const auto& name : {"daemon", "good-node", "bad-node", "client"}) {
    auto key_file = file_text(keys + "/" + std::string{name} + ".key");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(key_file, m, std::regex{"secret\\s*=\\s*\"([^\"]+)\""}));
    for (const auto& out : {c.daemon_out, dir.sub("bad-node.out"), dir.sub("good-node.out")})
      EXPECT_FALSE(file_contains(out, m[1])) << name << "'s secret key in " << out;
  }
  // A plain-text client gets nothing; a client with an allowed key gets the status.
  auto [plain_rc, plain] = test::run_capture(
    {}, {"daemon", "status", "--daemon", c.clients, "--timeout", "2"}, dir.sub("plain.out"));
  EXPECT_EQ(plain_rc, 1) << plain;
  EXPECT_NE(plain.find("no answer"), std::string::npos) << plain;
  auto [ok_rc, ok] = test::run_capture({}, {"daemon", "status", "--daemon", c.clients,
                                            "--server-key", keys + "/daemon.pub", "--key",
                                            keys + "/client.key", "--json"},
                                       dir.sub("ok.out"));
  ASSERT_EQ(ok_rc, 0) << ok;
  // A node's key, allowed on the node socket only, gets no status.
  auto [node_rc, node_as_client] = test::run_capture(
    {}, {"daemon", "status", "--daemon", c.clients, "--server-key", keys + "/daemon.pub", "--key",
         keys + "/good-node.key", "--timeout", "2"},
    dir.sub("node-as-client.out"));
  EXPECT_EQ(node_rc, 1) << node_as_client;
  auto doc = nlohmann::json::parse(ok.substr(0, ok.find('\n')), nullptr, false);
  ASSERT_TRUE(doc.is_object()) << ok;
  ASSERT_EQ(doc["nodes"].size(), 1u) << ok;
  EXPECT_EQ(doc["nodes"][0].value("name", ""), "good-node");
  EXPECT_EQ(c.drain(), 0);
}

/// The JSON document on the first line of `text` (a `--json` command's output).
nlohmann::json first_json_line(const std::string& text) {
  return nlohmann::json::parse(text.substr(0, text.find('\n')), nullptr, false);
}

/// The public key line of `infrarsi experience identity` (made on first use).
std::pair<std::string, std::string> cluster_of(const test::temp_dir& dir, const std::string& store) {
  auto [rc, out] = test::run_capture({}, {"experience", "identity", "--store", store},
                                     dir.sub("identity.out"));
  EXPECT_EQ(rc, 0) << out;
  auto id = out.find("cluster id: ");
  auto key = out.find("public key: ");
  if (rc != 0 || id == std::string::npos || key == std::string::npos)
    return {};
  return {out.substr(id + 12, 32), out.substr(key + 12, 64)};
}

TEST(Daemon, TwoDaemonsOnOtherHardwareSyncOverCurveServeEachOthersFindingsAndASecondSyncPullsNothing) {
  // Issue 16, "Must show": daemon A (H100, dense) and daemon B (A100, MoE), each in its own
  // network namespace joined by a veth pair, each with its node-runner, CURVE on every socket;
  // each trusts the other's cluster key. `experience sync --daemon` makes A pull from B and B
  // from A; a repeated sync pulls nothing; A then serves B's finding to a run of B's task.
  ASSERT_TRUE(test::netns_set::available())
    << "needs root and iproute2 (ip netns) to make its own network namespaces";
  test::temp_dir dir;
  test::netns_set ns;
  auto ns_a = ns.add("xa");
  auto ns_b = ns.add("xb");
  ASSERT_FALSE(ns_a.empty() || ns_b.empty()) << "ip netns add failed";
  ASSERT_FALSE(ns.link(ns_a, ns_b, 3).first.empty()) << "veth failed";
  const std::vector<std::string> in_a{"ip", "netns", "exec", ns_a};
  const std::vector<std::string> in_b{"ip", "netns", "exec", ns_b};
  test::process_set procs;
  auto keys = dir.sub("keys");
  for (const auto& name : {"daemon-a", "daemon-b", "node", "client"}) {
    auto [rc, text] = test::run_capture({}, {"keys", "generate", "--out", keys, "--name", name},
                                        dir.sub("keys.out"));
    ASSERT_EQ(rc, 0) << text;
  }
  // Node keys on the node sockets; the client and the other daemon on each client socket.
  std::filesystem::create_directories(dir.sub("nodes"));
  std::filesystem::copy_file(keys + "/node.pub", dir.sub("nodes/node.pub"));
  for (const auto& [self, peer] : {std::pair{"a", "b"}, std::pair{"b", "a"}}) {
    auto clients = dir.sub(std::string{"clients-"} + self);
    std::filesystem::create_directories(clients);
    std::filesystem::copy_file(keys + "/client.pub", clients + "/client.pub");
    std::filesystem::copy_file(keys + "/daemon-" + peer + ".pub", clients + "/daemon-" + peer + ".pub");
  }
  // Cluster identities (Ed25519, made on first use) and trust lists: each trusts the other.
  auto store_a = dir.sub("a-store");
  auto store_b = dir.sub("b-store");
  auto [id_a, pub_a] = cluster_of(dir, store_a);
  auto [id_b, pub_b] = cluster_of(dir, store_b);
  ASSERT_FALSE(id_a.empty() || id_b.empty());
  std::ofstream{store_a + "/trust.toml"} << "[[trusted]]\nname = \"lab-b\"\npublic_key = \""
                                         << pub_b << "\"\n";
  std::ofstream{store_b + "/trust.toml"} << "[[trusted]]\nname = \"lab-a\"\npublic_key = \""
                                         << pub_a << "\"\n";
  auto config_of = [&](const std::string& self, const std::string& peer,
                       const std::string& peer_address) {
    return test::write_daemon_config(
      dir, self, "tcp://127.0.0.1:5555", "tcp://*:5556",
      "[security]\nsecret_key = \"" + keys + "/daemon-" + self + ".key\"\nallow = \""
        + dir.sub("nodes") + "\"\nallow_clients = \"" + dir.sub("clients-" + self)
        + "\"\n[experience]\nsync_interval_s = 0\n[[experience.peers]]\nname = \"lab-" + peer
        + "\"\nendpoint = \"tcp://" + peer_address + ":5556\"\nserver_key = \"" + keys
        + "/daemon-" + peer + ".pub\"\ntimeout_s = 20\n");
  };
  cluster a{dir, procs, config_of("a", "b", "10.231.3.2")};
  cluster b{dir, procs, config_of("b", "a", "10.231.3.1")};
  a.daemon_out = dir.sub("daemon-a.out");
  b.daemon_out = dir.sub("daemon-b.out");
  a.daemon_prefix = in_a;
  b.daemon_prefix = in_b;
  for (auto* c : {&a, &b}) {
    c->start_daemon();
    ASSERT_FALSE(c->clients.empty()) << file_text(c->daemon_out);
  }
  a.start_node("node-a", "tcp://127.0.0.1:5555", in_a,
               {"--server-key", keys + "/daemon-a.pub", "--key", keys + "/node.key"});
  b.start_node("node-b", "tcp://127.0.0.1:5555", in_b,
               {"--server-key", keys + "/daemon-b.pub", "--key", keys + "/node.key"});
  ASSERT_TRUE(a.joined({"node-a"})) << file_text(a.daemon_out);
  ASSERT_TRUE(b.joined({"node-b"})) << file_text(b.daemon_out);
  auto client_of = [&](const std::string& self) {
    return std::vector<std::string>{"--daemon", "tcp://127.0.0.1:5556", "--server-key",
                                    keys + "/daemon-" + self + ".pub", "--key",
                                    keys + "/client.key"};
  };
  auto task_of = [&](const std::string& name, int trials) {
    auto text = test::sim_task_text(dir, name)
                + "\n[budget]\ntrials = " + std::to_string(trials)
                + "\nbaseline_repeats = 3\nverify_top = 1\nverify_repeats = 3\n";
    auto path = dir.sub(name + ".toml");
    std::ofstream{path} << text;
    return path;
  };
  auto submit_to = [&](const std::string& self, const std::string& task,
                       const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"submit", task};
    for (const auto& arg : client_of(self))
      args.push_back(arg);
    args.insert(args.end(), extra.begin(), extra.end());
    auto [rc, text] = test::run_capture(self == "a" ? in_a : in_b, args, dir.sub("submit.out"));
    EXPECT_EQ(rc, 0) << text;
    return text.substr(0, text.find('\n'));
  };
  auto run_a = submit_to("a", task_of("sim-dense-1node", 8));
  auto moe_a100 = task_of("sim-moe-1node-a100", 8);
  auto run_b = submit_to("b", moe_a100);
  ASSERT_FALSE(run_a.empty() || run_b.empty());
  ASSERT_TRUE(eventually(300s, [&] {
    return test::run_applied(store_a, run_a) && test::run_applied(store_b, run_b);
  })) << file_text(a.daemon_out) << file_text(b.daemon_out);
  auto finding_of = [](const std::string& store, const std::string& run) {
    auto r = test::read_logged_run(store, run);
    EXPECT_TRUE(r);
    auto recorded = r ? r->of(wire::EventKind::ExperienceRecorded)
                      : std::vector<const test::logged_event*>{};
    EXPECT_EQ(recorded.size(), 1u) << run << " promoted nothing: no finding to share";
    return recorded.empty() ? nlohmann::json{} : recorded[0]->doc;
  };
  auto finding_a = finding_of(store_a, run_a);
  auto finding_b = finding_of(store_b, run_b);
  ASSERT_TRUE(finding_a.is_object() && finding_b.is_object());
  auto sync = [&](const std::string& self) {
    std::vector<std::string> args{"experience", "sync", "--json"};
    for (const auto& arg : client_of(self))
      args.push_back(arg);
    auto [rc, text] = test::run_capture(self == "a" ? in_a : in_b, args, dir.sub("sync.out"));
    EXPECT_EQ(rc, 0) << text << file_text(self == "a" ? a.daemon_out : b.daemon_out);
    auto doc = first_json_line(text);
    EXPECT_TRUE(doc.is_object() && doc["peers"].size() == 1u) << text;
    return doc.is_object() && doc["peers"].size() == 1u ? doc : nlohmann::json{};
  };
  // A pulls B's finding: signed by B's cluster, named by A's trust list.
  auto first = sync("a");
  ASSERT_TRUE(first.is_object());
  EXPECT_EQ(first["peers"][0].value("pulled", -1), 1) << first.dump();
  EXPECT_EQ(first["peers"][0].value("signer", ""), id_b);
  EXPECT_EQ(first["peers"][0].value("signer_name", ""), "lab-b");
  EXPECT_EQ(first["bank"].value("records", 0), 2) << first.dump();
  EXPECT_EQ(first["bank"].value("imported", 0), 1) << first.dump();
  // B pulls A's own finding; the one A imported from B is not offered back.
  auto second = sync("b");
  ASSERT_TRUE(second.is_object());
  EXPECT_EQ(second["peers"][0].value("pulled", -1), 1) << second.dump();
  EXPECT_EQ(second["peers"][0].value("offered", -1), 1) << second.dump();
  EXPECT_EQ(second["peers"][0].value("signer", ""), id_a);
  // A third sync (each way) transfers nothing, and the banks stay as they were.
  for (const auto& [self, before] : {std::pair{std::string{"a"}, first},
                                     std::pair{std::string{"b"}, second}}) {
    auto again = sync(self);
    ASSERT_TRUE(again.is_object());
    EXPECT_EQ(again["peers"][0].value("pulled", -1), 0) << self << ": " << again.dump();
    EXPECT_EQ(again["peers"][0].value("offered", -1), 0) << self << ": " << again.dump();
    EXPECT_EQ(again["bank"].value("hash", "x"), before["bank"].value("hash", "y")) << self;
  }
  // Each daemon's status shows the sync with its peer.
  auto [status_rc, status] = test::run_capture(in_b, [&] {
    std::vector<std::string> args{"daemon", "status", "--json"};
    for (const auto& arg : client_of("b"))
      args.push_back(arg);
    return args;
  }(), dir.sub("status.out"));
  ASSERT_EQ(status_rc, 0) << status;
  auto status_doc = first_json_line(status);
  ASSERT_TRUE(status_doc.is_object()) << status;
  EXPECT_EQ(status_doc["experience"].value("imported", 0), 1) << status;
  EXPECT_EQ(status_doc["experience"]["peers"]["lab-a"].value("ok", false), true) << status;
  // A serves B's finding: a run of B's task (A100, MoE) on A proposes B's winner first.
  auto served = submit_to("a", moe_a100, {"--trials", "2"});
  ASSERT_FALSE(served.empty());
  ASSERT_TRUE(eventually(240s, [&] { return test::run_applied(store_a, served); }))
    << file_text(a.daemon_out);
  auto r = test::read_logged_run(store_a, served);
  ASSERT_TRUE(r);
  auto seeded = r->of(wire::EventKind::ExperienceSeeded);
  ASSERT_EQ(seeded.size(), 1u);
  ASSERT_GE(seeded[0]->doc["seeds"].size(), 1u) << seeded[0]->doc.dump();
  EXPECT_EQ(seeded[0]->doc["seeds"][0].value("origin", ""), id_b) << seeded[0]->doc.dump();
  auto winner = store::configuration_from_json(finding_b["config"]);
  ASSERT_TRUE(winner) << finding_b.dump();
  std::string first_explore;
  for (const auto* e : r->of(wire::EventKind::TrialProposed))
    if (e->purpose == wire::Purpose::Explore) {
      first_explore = e->config;
      break;
    }
  EXPECT_EQ(first_explore, winner->key());
  EXPECT_TRUE(file_contains(a.daemon_out, "experience sync with peer lab-b: pulled 1"))
    << file_text(a.daemon_out);
  EXPECT_EQ(a.drain(), 0);
  EXPECT_EQ(b.drain(), 0);
}

TEST(Daemon, ASyncWithAnUnreachablePeerNeitherBlocksClientsNorDelaysTheDrain) {
  test::temp_dir dir;
  test::process_set procs;
  // A peer key file that does not exist stops the daemon at start, naming the key.
  auto bad = test::write_daemon_config(
    dir, "bad", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
    "[security]\nsecret_key = \"" + dir.sub("none.key") + "\"\nallow = \"" + dir.sub("none")
      + "\"\n[[experience.peers]]\nname = \"lab-x\"\nendpoint = \"tcp://127.0.0.1:9\"\n"
        "server_key = \"" + dir.sub("lab-x.pub") + "\"\n");
  auto [bad_rc, bad_out] = test::run_capture({}, {"daemon", "--config", bad}, dir.sub("bad.out"));
  EXPECT_EQ(bad_rc, 1) << bad_out;
  EXPECT_NE(bad_out.find(bad + ": experience.peers[1].server_key: "), std::string::npos)
    << bad_out;
  // A peer nobody answers for, with a long timeout: a sync asked for hangs on it ...
  cluster c{dir, procs,
            test::write_daemon_config(dir, "daemon", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                                      "[experience]\nsync_interval_s = 0\n[[experience.peers]]\n"
                                      "name = \"lab-x\"\nendpoint = \"tcp://127.0.0.1:9\"\n"
                                      "timeout_s = 60\n")};
  c.start_daemon();
  ASSERT_FALSE(c.clients.empty()) << file_text(c.daemon_out);
  auto sync_out = dir.sub("sync.out");
  pid_t sync = procs.add(
    test::start_in({}, {"experience", "sync", "--daemon", c.clients, "--timeout", "90"}, sync_out));
  std::this_thread::sleep_for(1s);
  // ... while the daemon answers status at once ...
  auto [status_rc, status] =
    test::run_capture({}, {"daemon", "status", "--daemon", c.clients, "--json", "--timeout", "5"},
                      dir.sub("status.out"));
  EXPECT_EQ(status_rc, 0) << status;
  int sync_status = 0;
  EXPECT_EQ(::waitpid(sync, &sync_status, WNOHANG), 0)
    << "the sync should still be waiting for the peer: " << file_text(sync_out);
  // ... and SIGTERM ends it within seconds, not after the peer's 60 s.
  auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(c.drain(), 0) << file_text(c.daemon_out);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s) << file_text(c.daemon_out);
  ::kill(sync, SIGKILL);
}

} // namespace
} // namespace infrarsi
