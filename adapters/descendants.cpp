#include "adapters/descendants.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace infrarsi::adapters {

namespace {

/// This process's cgroup v2 directory, or "" with `why` set.
std::string own_cgroup_v2_dir(std::string& why) {
  std::ifstream cgroup{"/proc/self/cgroup"};
  std::string rel;
  for (std::string line; std::getline(cgroup, line);)
    if (line.rfind("0::", 0) == 0)
      rel = line.substr(3);
  if (rel.empty()) {
    why = "/proc/self/cgroup has no cgroup v2 entry (0::)";
    return {};
  }
  std::ifstream mountinfo{"/proc/self/mountinfo"};
  for (std::string line; std::getline(mountinfo, line);) {
    auto sep = line.find(" - ");
    if (sep == std::string::npos || line.compare(sep + 3, 8, "cgroup2 ") != 0)
      continue;
    std::istringstream fields{line.substr(0, sep)};
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    if (root != "/" && rel.rfind(root, 0) != 0)
      continue; // a mount of another part of the hierarchy
    auto below = root == "/" ? rel : rel.substr(root.size());
    auto dir = mount_point + (below == "/" ? std::string{} : below);
    return dir;
  }
  why = "no cgroup2 file system is mounted (/proc/self/mountinfo)";
  return {};
}

std::atomic<unsigned> trial_sequence{0};

/// Removes cgroup `dir` once it is empty; false after ~0.5 s of EBUSY.
bool remove_cgroup(const std::string& dir) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT)
      return true;
    ::usleep(10'000);
  }
  return false;
}

} // namespace

std::size_t sweep_stale_trial_cgroups() {
  std::string why;
  auto own = own_cgroup_v2_dir(why);
  if (own.empty())
    return 0;
  std::size_t removed = 0;
  std::error_code ec;
  const std::string prefix = "infrarsi-trial-";
  // Error codes throughout: a cgroup file system that misbehaves skips the sweep, never throws.
  for (std::filesystem::directory_iterator it{own, ec}, end; !ec && it != end; it.increment(ec)) {
    const auto& entry = *it;
    auto name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || !entry.is_directory(ec))
      continue;
    long owner = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (owner <= 0 || owner == ::getpid() || ::kill(static_cast<pid_t>(owner), 0) == 0
        || errno != ESRCH)
      continue; // its launcher is alive (or the pid is reused: left alone)
    auto dir = entry.path().string();
    signal_cgroup(dir, SIGKILL);
    if (remove_cgroup(dir))
      ++removed;
  }
  return removed;
}

trial_descendants::trial_descendants(bool allow_cgroup) {
  bool subreaper = become_subreaper();
  [[maybe_unused]] static const std::size_t swept = sweep_stale_trial_cgroups(); // once
  auto n = trial_sequence.fetch_add(1);
  marker_value_ = std::to_string(::getpid()) + "-" + std::to_string(n);
  std::string why = "disabled for this trial";
  if (allow_cgroup) {
    auto own = own_cgroup_v2_dir(why);
    if (!own.empty()) {
      auto dir = own + "/infrarsi-trial-" + marker_value_;
      if (::access((own + "/cgroup.procs").c_str(), W_OK) != 0)
        why = "'" + own + "/cgroup.procs' is not writable: " + std::strerror(errno);
      else if (::mkdir(dir.c_str(), 0755) != 0)
        why = "cannot create '" + dir + "': " + std::strerror(errno);
      else if (::access((dir + "/cgroup.procs").c_str(), W_OK) != 0) {
        why = "'" + dir + "/cgroup.procs' is not writable: " + std::strerror(errno);
        ::rmdir(dir.c_str());
      } else
        cgroup_dir_ = dir;
    }
  }
  if (uses_cgroup()) {
    description_ = "cgroup v2 " + cgroup_dir_;
    register_cgroup(cgroup_dir_);
  } else {
    description_ = "/proc walk (cgroup v2 not used: " + why + ")";
  }
  if (!subreaper)
    description_ += "; not a child subreaper (prctl failed)";
}

trial_descendants::~trial_descendants() {
  if (!uses_cgroup())
    return;
  unregister_cgroup(cgroup_dir_);
  remove_cgroup(cgroup_dir_); // a cgroup whose last process just exited can be busy a moment
}

std::string trial_descendants::cgroup_procs_file() const {
  return uses_cgroup() ? cgroup_dir_ + "/cgroup.procs" : std::string{};
}

void trial_descendants::add_rank(pid_t pid) {
  ranks_.insert(pid);
}

void trial_descendants::observe(const std::vector<process_entry>& table) {
  undecided_.clear();
  if (uses_cgroup())
    return;
  const pid_t self = ::getpid();
  std::unordered_map<pid_t, const process_entry*> by_pid;
  std::unordered_multimap<pid_t, const process_entry*> children;
  for (const auto& e : table) {
    by_pid.emplace(e.pid, &e);
    children.emplace(e.ppid, &e);
  }
  // A known pid whose start time differs was reused by an unrelated process.
  for (auto it = known_.begin(); it != known_.end();) {
    auto found = by_pid.find(it->first);
    if (found == by_pid.end() || found->second->start_ticks != it->second)
      it = known_.erase(it);
    else
      ++it;
  }
  std::deque<pid_t> roots{ranks_.begin(), ranks_.end()};
  for (const auto& [pid, start] : known_)
    roots.push_back(pid);
  auto add = [&](const process_entry& e) {
    if (ranks_.count(e.pid) == 0 && known_.emplace(e.pid, e.start_ticks).second)
      roots.push_back(e.pid);
  };
  const std::string marker = std::string{marker_name} + "=" + marker_value_;
  for (const auto& e : table) {
    if (ranks_.count(e.pgrp) != 0 && e.state != 'Z')
      add(e); // still in a rank's process group
    else if (e.ppid == self && e.state != 'Z' && ranks_.count(e.pid) == 0
             && known_.count(e.pid) == 0 && not_ours_.count({e.pid, e.start_ticks}) == 0) {
      // Adopted (its parent exited): ours if it carries this trial's marker. An environment
      // that reads as empty (the process is inside execve, as a trial's child that forked,
      // wrote its pid and exec'd is when its rank exits) is read again at the next walk.
      auto has = environ_has(e.pid, marker);
      if (has.has_value() && *has)
        add(e);
      else if (has.has_value())
        not_ours_.insert({e.pid, e.start_ticks});
      else
        undecided_.insert(e.pid);
    }
  }
  while (!roots.empty()) {
    auto parent = roots.front();
    roots.pop_front();
    auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it)
      if (it->second->state != 'Z')
        add(*it->second);
  }
}

std::vector<pid_t> trial_descendants::live(const std::vector<process_entry>& table) {
  std::set<pid_t> zombies;
  std::set<pid_t> pids;
  for (const auto& e : table) {
    if (e.state == 'Z') {
      zombies.insert(e.pid);
      continue;
    }
    auto k = known_.find(e.pid);
    if (ranks_.count(e.pid) != 0 || ranks_.count(e.pgrp) != 0
        || (k != known_.end() && k->second == e.start_ticks))
      pids.insert(e.pid);
  }
  if (uses_cgroup())
    for (auto pid : cgroup_members(cgroup_dir_))
      if (zombies.count(pid) == 0)
        pids.insert(pid);
  return {pids.begin(), pids.end()};
}

std::size_t trial_descendants::signal_all(int sig, const std::set<pid_t>& skip_groups) {
  auto table = process_table();
  observe(table);
  auto pids = live(table);
  std::unordered_map<pid_t, pid_t> group_of;
  for (const auto& e : table)
    group_of.emplace(e.pid, e.pgrp);
  if (uses_cgroup() && sig == SIGKILL)
    signal_cgroup(cgroup_dir_, SIGKILL); // atomic, also a process forked since the table
  std::size_t signalled = 0;
  for (auto pid : pids) {
    auto g = group_of.find(pid);
    if (g != group_of.end() && skip_groups.count(g->second) != 0)
      continue; // the caller signals these groups itself
    ::kill(pid, sig); // ESRCH: it ended meanwhile
    ++signalled;
  }
  return signalled;
}

} // namespace infrarsi::adapters
