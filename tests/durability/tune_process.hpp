#pragma once
// The durability tests' view of real `infrarsi` processes: start the CLI in its own process group
// with its output in a file, wait for it with a deadline, find processes left behind, and read a
// run's events back from the store (read-only, decoded).

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "messages/codec.hpp"
#include "proc_text.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::test {

/// Waits until the trace file (tune --trace-appends) shows a TrialDispatched; false if `pid`
/// exited or 60 s passed.
inline bool wait_dispatched(pid_t pid, const std::string& trace) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in{trace};
    std::uint64_t seq = 0;
    unsigned kind = 0;
    while (in >> seq >> kind)
      if (kind == static_cast<unsigned>(wire::EventKind::TrialDispatched))
        return true;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  return false;
}

/// Starts `prefix... infrarsi ARGS...` (e.g. prefix `ip netns exec NS`; empty: infrarsi itself)
/// in its own process group (so the whole tree can be SIGKILLed), stdout and stderr appended to
/// `output`; returns its pid.
inline pid_t start_in(const std::vector<std::string>& prefix, const std::vector<std::string>& args,
                      const std::string& output) {
  std::cout.flush(); // the child's freopen would write the parent's unflushed output again
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (std::freopen(output.c_str(), "a", stderr) == nullptr
        || std::freopen(output.c_str(), "a", stdout) == nullptr)
      ::_exit(126);
    std::vector<std::string> all = prefix;
    all.push_back(INFRARSI_CLI_PATH);
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  if (pid > 0)
    ::setpgid(pid, pid); // also from here: no race with a kill(-pid) right after the fork
  return pid;
}

/// Starts `infrarsi ARGS...` in its own process group, output appended to `output`.
inline pid_t start_cli(const std::vector<std::string>& args, const std::string& output) {
  return start_in({}, args, output);
}

/// Waits up to `timeout` for `pid` to exit; its wait status, or nothing if it still runs.
inline std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return status;
    if (std::chrono::steady_clock::now() >= deadline)
      return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

/// Runs `infrarsi ARGS...` to the end; its exit code (-1 when it did not exit normally).
inline int run_cli(const std::vector<std::string>& args, const std::string& output) {
  pid_t pid = start_cli(args, output);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string file_text(const std::string& path) {
  std::ifstream in{path};
  return {std::istreambuf_iterator<char>{in}, {}};
}

/// Live processes (zombies excluded) whose command line mentions `marker` or whose working
/// directory is under it: "PID STATE CMDLINE" each.
inline std::vector<std::string> processes_mentioning(const std::string& marker) {
  std::vector<std::string> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr)
    return found;
  const std::string self = std::to_string(::getpid());
  while (dirent* e = ::readdir(proc)) {
    std::string pid = e->d_name;
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid == self)
      continue;
    std::string base = "/proc/" + pid;
    std::string stat = proc_text(base + "/stat");
    auto close = stat.rfind(')');
    char state = close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
    if (stat.empty() || state == 'Z' || state == 'X')
      continue;
    std::string cmdline = proc_text(base + "/cmdline");
    for (auto& ch : cmdline)
      if (ch == '\0')
        ch = ' ';
    char cwd[4096];
    auto n = ::readlink((base + "/cwd").c_str(), cwd, sizeof cwd - 1);
    std::string dir = n > 0 ? std::string{cwd, static_cast<std::size_t>(n)} : std::string{};
    if (cmdline.find(marker) != std::string::npos || dir.rfind(marker, 0) == 0)
      found.push_back(pid + " " + state + " " + cmdline + " (cwd " + dir + ")");
  }
  ::closedir(proc);
  return found;
}

/// Polls up to `timeout` until no process mentions `marker`; what is still there.
inline std::vector<std::string> processes_left(const std::string& marker,
                                               std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = processes_mentioning(marker);
    if (left.empty() || std::chrono::steady_clock::now() >= deadline)
      return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// One event of a run, decoded as far as the tests need.
struct logged_event {
  std::uint64_t sequence = 0;
  std::uint16_t kind = 0;
  /// Wall-clock time of the append (the same for every event of one atomic batch).
  std::int64_t recorded_at_ns = 0;
  /// Trial events: the trial, attempt, purpose and configuration key.
  std::uint64_t trial = 0;
  std::uint32_t attempt = 0;
  /// TrialCompleted / TrialResultStale: the node-runner that ran it (TrialResult.node).
  std::string node;
  wire::Purpose purpose = wire::Purpose::Unknown;
  std::string config;
  /// Document events: the JSON.
  nlohmann::json doc;
  [[nodiscard]] bool is(wire::EventKind k) const { return kind == static_cast<std::uint16_t>(k); }
};

struct logged_run {
  std::string run_id;
  std::vector<logged_event> events;
  [[nodiscard]] std::vector<const logged_event*> of(wire::EventKind k) const {
    std::vector<const logged_event*> out;
    for (const auto& e : events)
      if (e.is(k))
        out.push_back(&e);
    return out;
  }
};

/// The events of `run_id` (the store's first run when empty); nothing when the store has no run
/// yet or cannot be read.
inline std::optional<logged_run> read_logged_run(const std::string& store,
                                                 const std::string& run_id = "") {
  store::rocksdb_event_log_options o;
  o.read_only = true;
  auto log = store::rocksdb_event_log::open(store + "/events", o);
  if (!log)
    return std::nullopt;
  auto runs = (*log)->list_runs();
  if (!runs || runs->empty())
    return std::nullopt;
  logged_run r;
  r.run_id = run_id.empty() ? runs->front().run_id : run_id;
  auto err = (*log)->for_each_in_stream(r.run_id, 0, [&](const store::recorded_event& ev) {
    logged_event e;
    e.sequence = ev.sequence;
    e.kind = ev.kind;
    e.recorded_at_ns = ev.recorded_at_ns;
    switch (static_cast<wire::EventKind>(ev.kind)) {
      case wire::EventKind::TrialProposed:
      case wire::EventKind::TrialDispatched:
      case wire::EventKind::TrialLost:
        if (auto spec = messages::trial_spec_msg::decode(ev.payload)) {
          e.trial = (*spec)->trial_id();
          e.attempt = (*spec)->attempt();
          e.purpose = (*spec)->purpose_kind();
          e.config = store::configuration_of(**spec).key();
        }
        break;
      case wire::EventKind::TrialCompleted:
      case wire::EventKind::TrialResultStale:
        if (auto res = messages::trial_result_msg::decode(ev.payload)) {
          e.trial = (*res)->trial_id();
          e.attempt = (*res)->attempt();
          if ((*res)->node() != nullptr)
            e.node = (*res)->node()->str();
        }
        break;
      case wire::EventKind::ContractLocked:
      case wire::EventKind::BaselineCalibrated:
      case wire::EventKind::TrialVerified:
      case wire::EventKind::CandidateReverified:
      case wire::EventKind::CandidatePromoted:
      case wire::EventKind::ReportWritten:
      case wire::EventKind::ChangesApplied:
      case wire::EventKind::ProposalsMade:
      case wire::EventKind::SearchStopped:
      case wire::EventKind::RunInterrupted:
      case wire::EventKind::ApplyStarted:
      case wire::EventKind::ExperienceSeeded:
      case wire::EventKind::ExperienceRecorded:
      case wire::EventKind::PriorsLoaded:
        if (auto doc = messages::document_msg::decode(ev.payload))
          if ((*doc)->json() != nullptr)
            e.doc = nlohmann::json::parse((*doc)->json()->str(), nullptr, false);
        break;
      default: break;
    }
    r.events.push_back(std::move(e));
    return true;
  });
  if (err)
    return std::nullopt;
  return r;
}

} // namespace infrarsi::test
