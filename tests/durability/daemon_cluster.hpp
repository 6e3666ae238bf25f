#pragma once
// Real `infrarsi daemon` and `infrarsi node` processes for the daemon tests: on 127.0.0.1, or
// each in a network namespace the test makes itself (ip netns, veth pairs), so that the nodes
// reach the daemon over a real link the test can cut (ip link set down) or make lossy (iptables
// statistic drops). Nothing is ever sent to an address outside those namespaces and loopback.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "durability/tune_process.hpp"
#include "test_util.hpp"

namespace infrarsi::test {

/// Runs `sh -c command`; its exit code.
inline int shell(const std::string& command) {
  int rc = std::system((command + " >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/// Network namespaces made by one test, removed with everything in them when it ends.
class netns_set {
public:
  /// Whether this machine can make namespaces (root, iproute2 with netns).
  static bool available() {
    return ::geteuid() == 0 && shell("command -v ip") == 0;
  }
  ~netns_set() {
    for (const auto& ns : names_) {
      shell("ip netns pids " + ns + " | xargs -r kill -9");
      shell("ip netns delete " + ns);
    }
  }
  /// Makes namespace `name` (unique per process) with its loopback up; returns its full name.
  std::string add(const std::string& name) {
    auto full = "irsi" + std::to_string(::getpid() % 100000) + name;
    shell("ip netns delete " + full);
    if (shell("ip netns add " + full) != 0 || shell("ip -n " + full + " link set lo up") != 0)
      return {};
    names_.push_back(full);
    return full;
  }
  /// A veth pair between namespaces `a` and `b` on subnet 10.231.`subnet`.0/24: `a` gets .1,
  /// `b` gets .2. Returns the two interface names (a's, b's), empty on failure.
  std::pair<std::string, std::string> link(const std::string& a, const std::string& b,
                                           int subnet) {
    auto tag = std::to_string(::getpid() % 10000) + "x" + std::to_string(subnet);
    std::string ia = "va" + tag;
    std::string ib = "vb" + tag;
    auto net = "10.231." + std::to_string(subnet) + ".";
    if (shell("ip link add " + ia + " netns " + a + " type veth peer name " + ib + " netns " + b)
          != 0
        || shell("ip -n " + a + " addr add " + net + "1/24 dev " + ia) != 0
        || shell("ip -n " + b + " addr add " + net + "2/24 dev " + ib) != 0
        || shell("ip -n " + a + " link set " + ia + " up") != 0
        || shell("ip -n " + b + " link set " + ib + " up") != 0)
      return {};
    return {ia, ib};
  }

private:
  std::vector<std::string> names_;
};

/// Processes started by a test, SIGKILLed (whole process groups) when it ends.
class process_set {
public:
  ~process_set() {
    for (auto pid : pids_) {
      ::kill(-pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  }
  pid_t add(pid_t pid) {
    pids_.push_back(pid);
    return pid;
  }
  /// Forgets `pid` (it was reaped by the test).
  void reaped(pid_t pid) { pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end()); }

private:
  std::vector<pid_t> pids_;
};

/// Writes a daemon config; returns its path.
inline std::string write_daemon_config(const temp_dir& dir, const std::string& name,
                                       const std::string& node_endpoint,
                                       const std::string& client_endpoint,
                                       const std::string& extra = {}) {
  auto path = dir.sub(name + ".toml");
  std::ofstream{path} << "[daemon]\nstore = \"" << dir.sub(name + "-store")
                      << "\"\nnode_endpoint = \"" << node_endpoint << "\"\nclient_endpoint = \""
                      << client_endpoint << "\"\ndrain_grace_s = 20\n"
                      << extra;
  return path;
}

/// Polls `until` every 50 ms for up to `timeout`; whether it became true.
template <class F>
bool eventually(std::chrono::milliseconds timeout, F until) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (until())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return until();
}

/// Whether the file at `path` contains `text`.
inline bool file_contains(const std::string& path, const std::string& text) {
  return file_text(path).find(text) != std::string::npos;
}

/// The run ids of a store's runs that ended their apply stage.
inline bool run_applied(const std::string& store, const std::string& run_id) {
  auto r = read_logged_run(store, run_id);
  return r && !r->of(wire::EventKind::ChangesApplied).empty();
}

/// Sends SIGTERM to `pid` and waits up to `timeout` for it; its exit code (-1: killed or timed out).
inline int terminate(pid_t pid, std::chrono::milliseconds timeout) {
  ::kill(pid, SIGTERM);
  auto status = wait_exit(pid, timeout);
  if (!status) {
    ::kill(-pid, SIGKILL);
    int s = 0;
    ::waitpid(pid, &s, 0);
    return -1;
  }
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

/// Runs `infrarsi ARGS...` to the end, its stdout+stderr in `output`; (exit code, output text).
inline std::pair<int, std::string> run_capture(const std::vector<std::string>& prefix,
                                               const std::vector<std::string>& args,
                                               const std::string& output) {
  { std::ofstream truncate{output}; }
  pid_t pid = start_in(prefix, args, output);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, file_text(output)};
}

} // namespace infrarsi::test
