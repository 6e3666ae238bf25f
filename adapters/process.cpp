#include "adapters/process.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "messages/errc.hpp"

extern char** environ;

namespace infrarsi::adapters {

namespace {

std::string errno_text(int err) {
  return std::string{std::strerror(err)};
}

/// The process-wide registry of live trial process groups and cgroups (signal_all_groups),
/// and of the children spawn() started and nobody has reaped yet (reap_adopted_zombies).
struct group_registry {
  std::mutex mutex;
  std::set<pid_t> groups;
  std::set<std::string> cgroups;
  std::set<pid_t> own_children;
};

group_registry& registry() {
  static group_registry r; // constructed on first use, thread-safe (C++11 statics)
  return r;
}

/// Drops the groups of `r` that have no process left; `r.mutex` must be held.
void prune_dead_groups(group_registry& r) {
  for (auto it = r.groups.begin(); it != r.groups.end();) {
    if (::kill(-*it, 0) != 0 && errno == ESRCH)
      it = r.groups.erase(it);
    else
      ++it;
  }
}

} // namespace

caf::expected<child_process> spawn(const spawn_request& req) {
  if (req.argv.empty())
    return make_error(errc::invalid_argument, "spawn: empty argv");
  if (!req.workdir.empty() && ::access(req.workdir.c_str(), X_OK) != 0)
    return make_error(errc::invalid_argument,
                      "spawn: working directory '" + req.workdir + "': " + errno_text(errno));
  // Everything the child needs is prepared before fork (no allocation after fork).
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : req.env)
    env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = req.argv;
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  // Resolve the program on the child's PATH (execvpe would use ours).
  std::string program = req.argv[0];
  if (program.find('/') == std::string::npos) {
    auto path_it = req.env.find("PATH");
    std::string path = path_it != req.env.end() ? path_it->second : "/usr/local/bin:/usr/bin:/bin";
    std::istringstream dirs{path};
    std::string found;
    for (std::string dir; std::getline(dirs, dir, ':');) {
      auto candidate = (dir.empty() ? std::string{"."} : dir) + "/" + program;
      if (::access(candidate.c_str(), X_OK) == 0) {
        found = candidate;
        break;
      }
    }
    if (found.empty())
      return make_error(errc::not_found,
                        "spawn: program '" + program + "' not found on PATH=" + path);
    program = found;
  }

  int out_pipe[2];
  int err_pipe[2];
  int exec_pipe[2]; // reports the exec errno to the parent; closed on a successful exec
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    return make_error(errc::io_error, "spawn: pipe: " + errno_text(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return make_error(errc::io_error, "spawn: pipe: " + errno_text(errno));
  }
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
      ::close(fd);
    return make_error(errc::io_error, "spawn: pipe: " + errno_text(errno));
  }
  const char* workdir = req.workdir.empty() ? nullptr : req.workdir.c_str();
  const char* cgroup_procs = req.cgroup_procs.empty() ? nullptr : req.cgroup_procs.c_str();
  // The registry's lock is held across fork until the child is recorded (and its group, with
  // registration), so a concurrent signal_all_groups() either runs before the child exists or
  // sees its group, and reap_adopted_zombies() never mistakes it for an adopted process.
  // The child never touches the lock.
  std::unique_lock<std::mutex> registry_lock{registry().mutex};
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    registry_lock.unlock();
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], exec_pipe[0],
                   exec_pipe[1]})
      ::close(fd);
    return make_error(errc::io_error, "spawn: fork: " + errno_text(e));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    ::setpgid(0, 0);
    // A harness killed with SIGKILL (a node-runner, `tune`) cannot stop its trials: the kernel
    // does, so no rank keeps a GPU busy while its attempt is re-run elsewhere. The spawning thread
    // waits for the child, so it outlives it otherwise. (The rank's own descendants are not
    // covered; the launcher's cgroup or /proc sweep ends those while the harness lives.)
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      ::_exit(127); // the harness died between fork and prctl
    // The child reports a failure as {stage, errno}: 1 joining the cgroup, 2 chdir, 3 exec.
    auto fail = [&](int stage) {
      int report[2] = {stage, errno};
      [[maybe_unused]] auto n = ::write(exec_pipe[1], report, sizeof report);
      ::_exit(127);
    };
    if (cgroup_procs != nullptr) {
      int fd = ::open(cgroup_procs, O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1)
        fail(1);
      ::close(fd);
    }
    // The harness blocks SIGINT and SIGTERM in its threads (a signal thread takes them); the
    // trial must get them as usual, or stopping it would wait for SIGKILL.
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      ::dup2(devnull, STDIN_FILENO);
    ::signal(SIGPIPE, SIG_DFL);
    if (workdir != nullptr && ::chdir(workdir) != 0)
      fail(2);
    ::execve(program.c_str(), argv.data(), envp.data());
    fail(3);
    ::_exit(127); // not reached: fail() exits
  }
  // Parent. Also set the group here, so it exists before we might signal it.
  ::setpgid(pid, pid);
  registry().own_children.insert(pid);
  if (req.register_group)
    registry().groups.insert(pid);
  registry_lock.unlock();
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::close(exec_pipe[1]);
  int child_report[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(exec_pipe[0], child_report, sizeof child_report);
  } while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof child_report)) {
    if (req.register_group)
      unregister_group(pid); // before the reap, after which the id may be reused
    int status = 0;
    reap_child(pid, status, 0);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    auto text = errno_text(child_report[1]);
    if (child_report[0] == 1)
      return make_error(errc::io_error, "spawn: cannot join cgroup '" + req.cgroup_procs
                                          + "' before running '" + program + "': " + text);
    if (child_report[0] == 2)
      return make_error(errc::invalid_argument,
                        "spawn: cannot enter working directory '" + req.workdir + "': " + text);
    return make_error(errc::not_found, "spawn: cannot execute '" + program + "': " + text);
  }
  for (int fd : {out_pipe[0], err_pipe[0]})
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return child_process{pid, out_pipe[0], err_pipe[0]};
}

namespace {

/// Parses one /proc/<pid>/stat line; false if it is not one.
bool parse_stat(const std::string& content, process_entry& e) {
  // Fields after the command (which may contain spaces) start after the last ')'.
  auto close = content.rfind(')');
  if (close == std::string::npos || close + 2 >= content.size())
    return false;
  std::istringstream rest{content.substr(close + 2)};
  long ppid = 0;
  long pgrp = 0;
  long session = 0;
  rest >> e.state >> ppid >> pgrp >> session;
  // Fields 7..21 (tty_nr .. itrealvalue) precede starttime, field 22.
  std::string skip;
  for (int i = 7; i <= 21 && rest; ++i)
    rest >> skip;
  rest >> e.start_ticks;
  if (!rest)
    return false;
  e.ppid = static_cast<pid_t>(ppid);
  e.pgrp = static_cast<pid_t>(pgrp);
  e.session = static_cast<pid_t>(session);
  return true;
}

} // namespace

std::vector<process_entry> process_table() {
  std::vector<process_entry> table;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr)
    return table;
  while (auto* ent = ::readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(ent->d_name, &end, 10);
    if (*end != '\0' || pid <= 0)
      continue;
    std::ifstream stat{std::string{"/proc/"} + ent->d_name + "/stat"};
    std::string content;
    process_entry e;
    e.pid = static_cast<pid_t>(pid);
    if (std::getline(stat, content) && parse_stat(content, e))
      table.push_back(e);
  }
  ::closedir(dir);
  return table;
}

std::vector<pid_t> group_members(pid_t pgid) {
  std::vector<pid_t> result;
  for (const auto& e : process_table())
    if (e.pgrp == pgid && e.state != 'Z')
      result.push_back(e.pid);
  return result;
}

pid_t reap_child(pid_t pid, int& status, int flags) {
  pid_t got;
  do {
    got = ::waitpid(pid, &status, flags);
  } while (got < 0 && errno == EINTR);
  if (got == pid || (got < 0 && errno == ECHILD)) {
    auto& r = registry();
    std::lock_guard<std::mutex> lock{r.mutex};
    r.own_children.erase(pid);
  }
  return got;
}

bool become_subreaper() {
  static const bool set = ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
  return set;
}

std::size_t reap_adopted_zombies(const std::vector<process_entry>& table) {
  const pid_t self = ::getpid();
  auto& r = registry();
  std::lock_guard<std::mutex> lock{r.mutex};
  std::size_t reaped = 0;
  for (const auto& e : table) {
    if (e.state != 'Z' || e.ppid != self || r.own_children.count(e.pid) != 0)
      continue;
    int status = 0;
    if (::waitpid(e.pid, &status, WNOHANG) == e.pid)
      ++reaped;
  }
  return reaped;
}

std::optional<bool> environ_has(pid_t pid, const std::string& key_value) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/environ", std::ios::binary};
  if (!in)
    return std::nullopt;
  bool read_any = false;
  for (std::string entry; std::getline(in, entry, '\0');) {
    read_any = true;
    if (entry == key_value)
      return true;
  }
  if (!read_any)
    return std::nullopt; // empty: mid-execve, a zombie, or a process that cleared its environment
  return false;
}

std::vector<pid_t> cgroup_members(const std::string& dir) {
  std::vector<pid_t> pids;
  std::ifstream in{dir + "/cgroup.procs"};
  for (long pid = 0; in >> pid;)
    if (pid > 0)
      pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

std::size_t signal_cgroup(const std::string& dir, int sig) {
  auto pids = cgroup_members(dir);
  if (pids.empty())
    return 0;
  if (sig == SIGKILL) {
    std::ofstream kill_file{dir + "/cgroup.kill"};
    if (kill_file && (kill_file << "1").flush())
      return pids.size();
  }
  for (auto pid : pids)
    ::kill(pid, sig); // ESRCH: it ended meanwhile
  return pids.size();
}

void register_cgroup(const std::string& dir) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock{r.mutex};
  r.cgroups.insert(dir);
}

void unregister_cgroup(const std::string& dir) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock{r.mutex};
  r.cgroups.erase(dir);
}

std::uint64_t group_rss_bytes(pid_t pgid) {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  std::uint64_t total = 0;
  for (auto pid : group_members(pgid)) {
    std::ifstream statm{"/proc/" + std::to_string(pid) + "/statm"};
    std::uint64_t size = 0;
    std::uint64_t resident = 0;
    if (statm >> size >> resident)
      total += resident * page;
  }
  return total;
}

void signal_group(pid_t pgid, int sig) {
  if (pgid > 1)
    ::kill(-pgid, sig); // ESRCH: already gone, nothing to do
}

std::size_t signal_all_groups(int sig) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock{r.mutex};
  std::size_t signalled = 0;
  for (auto it = r.groups.begin(); it != r.groups.end();) {
    if (::kill(-*it, sig) == 0) {
      ++signalled;
      ++it;
    } else if (errno == ESRCH) {
      it = r.groups.erase(it); // nothing of the group is left
    } else {
      ++it; // EPERM/EINVAL: not ours to judge; the launcher still owns it
    }
  }
  for (const auto& dir : r.cgroups)
    signal_cgroup(dir, sig); // not counted: the groups are the count callers report
  return signalled;
}

std::size_t live_group_count() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock{r.mutex};
  prune_dead_groups(r);
  return r.groups.size();
}

void unregister_group(pid_t pgid) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock{r.mutex};
  r.groups.erase(pgid);
}

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv{*e};
    auto eq = kv.find('=');
    if (eq != std::string::npos)
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

caf::expected<int> free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return make_error(errc::io_error, "free_tcp_port: socket: " + errno_text(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int e = errno;
    ::close(fd);
    return make_error(errc::io_error, "free_tcp_port: " + errno_text(e));
  }
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

} // namespace infrarsi::adapters
