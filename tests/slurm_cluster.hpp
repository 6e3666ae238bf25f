#pragma once
// A real one-node Slurm cluster for tests, started by the test itself (docs/testing.md "The
// Slurm tests"): munged, slurmctld and slurmd from Debian's `munge` and `slurm-wlm`, each with
// its own key, configuration, state, spool, socket and log files under a fresh temporary
// directory, on free 127.0.0.1 ports. Nothing of the machine's own Slurm or munge (if any) is
// used or touched. Needs root (slurmd runs the tasks as the submitting user and must be able to
// switch to it; the state files are root's).
//
//   ASSERT_EQ(test::slurm_cluster::cannot_run(), "");  // names what is missing (not root, ...)
//   test::slurm_cluster cluster;                  // throws std::runtime_error when it fails
//   auto r = cluster.run("salloc -n 2 srun hostname");   // SLURM_CONF set
//
// While a cluster object lives, SLURM_CONF in this process's environment names its
// configuration (so every client command and every child, e.g. `infrarsi trial run`, talks to
// it); the previous value is restored afterwards. The destructor stops every daemon it started
// (SIGTERM, SIGKILL after 5 s) and then every process still carrying its SLURM_CONF (a job
// step's slurmstepd or task), also when the test failed; the daemons also get SIGKILL should
// this process die first (PR_SET_PDEATHSIG).

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "proc_text.hpp"
#include "test_util.hpp"

namespace infrarsi::test {

/// Output and exit status of a shell command.
struct command_result {
  /// Exit status (WEXITSTATUS), or -1 when the command did not exit normally.
  int status = -1;
  /// Its stdout (and stderr, where the command line redirects it).
  std::string output;
};

/// Runs `command` with /bin/sh; returns its exit status and stdout.
inline command_result run_shell(const std::string& command) {
  command_result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr)
    return r;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0)
    r.output.append(buf, n);
  int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// Pids of live processes (not zombies) whose environment holds `key=value`; never this one.
inline std::vector<pid_t> processes_with_env(const std::string& key_value) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator{"/proc", ec}) {
    auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    auto pid = static_cast<pid_t>(std::stol(name));
    if (pid == ::getpid())
      continue;
    std::string st = proc_text(e.path() / "stat");
    auto close = st.rfind(')');
    if (st.empty() || (close != std::string::npos && close + 2 < st.size() && st[close + 2] == 'Z'))
      continue;
    std::string all = proc_text(e.path() / "environ");
    std::string entry = key_value + std::string{"\0", 1};
    if (all.rfind(entry, 0) == 0 || all.find(std::string{"\0", 1} + entry) != std::string::npos)
      out.push_back(pid);
  }
  return out;
}

/// A running one-node Slurm cluster (see the file comment).
class slurm_cluster {
public:
  /// Why this machine cannot run the cluster ("" when it can): not root, or a program missing.
  static std::string cannot_run() {
    if (::geteuid() != 0)
      return "the Slurm tests start slurmd and slurmctld, which need root (euid is " +
             std::to_string(::geteuid()) + ")";
    for (const char* program : {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd",
                                "/usr/bin/srun", "/usr/bin/salloc", "/usr/bin/scontrol",
                                "/usr/bin/squeue", "/usr/bin/scancel", "/usr/bin/sinfo"})
      if (::access(program, X_OK) != 0)
        return std::string{program} + " is missing: install the Debian packages slurm-wlm and "
                                      "munge (scripts/setup does)";
    return {};
  }

  /// Starts munged, slurmctld and slurmd and waits (at most 60 s) until the node is idle.
  /// Throws std::runtime_error naming the daemon and the tail of its log when one fails.
  slurm_cluster() {
    namespace fs = std::filesystem;
    for (const char* d : {"state", "spool", "log", "run"})
      fs::create_directories(dir_.sub(d));
    ::chmod(dir_.path().c_str(), 0755); // munged refuses a key or socket under a 0700 tree
    conf_ = dir_.sub("slurm.conf");
    const char* old = std::getenv("SLURM_CONF");
    if (old != nullptr)
      old_conf_ = old;
    ::setenv("SLURM_CONF", conf_.c_str(), 1);
    try {
      start();
    } catch (...) {
      stop();
      throw;
    }
  }

  ~slurm_cluster() { stop(); }
  slurm_cluster(const slurm_cluster&) = delete;
  slurm_cluster& operator=(const slurm_cluster&) = delete;

  /// Path of the cluster's slurm.conf (also $SLURM_CONF while the object lives).
  [[nodiscard]] const std::string& conf() const { return conf_; }
  /// The node's name (`hostname -s`).
  [[nodiscard]] const std::string& node() const { return node_; }
  /// The cluster's temporary directory (configuration, state, logs).
  [[nodiscard]] const temp_dir& dir() const { return dir_; }
  /// Runs a shell command against the cluster (SLURM_CONF set), stderr joined to stdout.
  [[nodiscard]] command_result run(const std::string& command) const {
    return run_shell("(" + command + ") 2>&1");
  }
  /// The tail (at most `bytes`) of one of the daemons' logs: "munged", "slurmctld", "slurmd".
  [[nodiscard]] std::string log_tail(const std::string& daemon, std::size_t bytes = 3000) const {
    std::ifstream in{dir_.sub("log/" + daemon + ".log")};
    std::string all{std::istreambuf_iterator<char>{in}, {}};
    return all.size() > bytes ? all.substr(all.size() - bytes) : all;
  }

private:
  static int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      if (fd >= 0)
        ::close(fd);
      throw std::runtime_error("slurm_cluster: no free port on 127.0.0.1");
    }
    ::close(fd);
    return ntohs(addr.sin_port);
  }

  /// Starts `argv` in the foreground as this process's child, output to log/NAME.out.
  pid_t start_daemon(const std::string& name, const std::vector<std::string>& argv) {
    auto out = dir_.sub("log/" + name + ".out");
    pid_t pid = ::fork();
    if (pid < 0)
      throw std::runtime_error("slurm_cluster: fork failed for " + name);
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::setpgid(0, 0);
      int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int null = ::open("/dev/null", O_RDONLY);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      if (null >= 0)
        ::dup2(null, 0);
      std::vector<char*> args;
      for (const auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    pids_.push_back(pid);
    return pid;
  }

  /// Waits until `ready` holds (polling every 100 ms) or `limit_s` passes; a daemon that exits
  /// meanwhile is an error.
  template <class Ready>
  void wait_for(const std::string& what, double limit_s, Ready ready) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    while (std::chrono::steady_clock::now() < deadline) {
      if (ready())
        return;
      for (auto pid : pids_) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
          pids_.erase(std::find(pids_.begin(), pids_.end(), pid));
          throw std::runtime_error("slurm_cluster: a daemon exited while waiting for " + what +
                                   diagnostics());
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error("slurm_cluster: " + what + " not ready after " +
                             std::to_string(static_cast<int>(limit_s)) + " s" + diagnostics());
  }

  std::string diagnostics() const {
    std::string text;
    for (const char* d : {"munged", "slurmctld", "slurmd"}) {
      std::ifstream in{dir_.sub(std::string{"log/"} + d + ".out")};
      std::string out{std::istreambuf_iterator<char>{in}, {}};
      text += std::string{"\n--- "} + d + " log:\n" + log_tail(d, 1500) + out.substr(0, 500);
    }
    return text;
  }

  void start() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    node_ = host;
    node_ = node_.substr(0, node_.find('.'));
    // munged: its own key (1 KiB of random bytes, mode 0600), socket, pid, seed and log files.
    auto key = dir_.sub("munge.key");
    {
      std::random_device rd;
      std::ofstream k{key, std::ios::binary};
      for (int i = 0; i < 1024; ++i)
        k.put(static_cast<char>(rd() & 0xff));
    }
    ::chmod(key.c_str(), 0600);
    auto socket = dir_.sub("run/munge.sock");
    start_daemon("munged", {"/usr/sbin/munged", "--foreground", "--force", "--socket=" + socket,
                            "--key-file=" + key, "--pid-file=" + dir_.sub("run/munged.pid"),
                            "--seed-file=" + dir_.sub("run/munged.seed"),
                            "--log-file=" + dir_.sub("log/munged.log")});
    wait_for("munged", 20, [&] { return std::filesystem::exists(socket); });

    int ctld_port = free_port();
    int slurmd_port = free_port();
    while (slurmd_port == ctld_port)
      slurmd_port = free_port();
    std::ofstream c{conf_};
    c << "# Written by tests/slurm_cluster.hpp: a one-node test cluster.\n"
      << "ClusterName=infrarsi-test\n"
      << "SlurmctldHost=" << node_ << "(127.0.0.1)\n"
      << "SlurmctldPort=" << ctld_port << "\n"
      << "SlurmdPort=" << slurmd_port << "\n"
      << "SlurmUser=root\nSlurmdUser=root\n"
      << "AuthType=auth/munge\nCredType=cred/munge\n"
      << "AuthInfo=socket=" << socket << "\n"
      << "StateSaveLocation=" << dir_.sub("state") << "\n"
      << "SlurmdSpoolDir=" << dir_.sub("spool") << "\n"
      << "SlurmctldPidFile=" << dir_.sub("run/slurmctld.pid") << "\n"
      << "SlurmdPidFile=" << dir_.sub("run/slurmd.pid") << "\n"
      << "SlurmctldLogFile=" << dir_.sub("log/slurmctld.log") << "\n"
      << "SlurmdLogFile=" << dir_.sub("log/slurmd.log") << "\n"
      << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
      << "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
      << "SchedulerType=sched/builtin\nMpiDefault=none\nReturnToService=2\n"
      << "KillWait=2\nInactiveLimit=0\nMinJobAge=2\n"
      << "JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n"
      << "JobAcctGatherType=jobacct_gather/none\n"
      << "NodeName=" << node_ << " NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n"
      << "PartitionName=test Nodes=" << node_
      << " Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO\n";
    c.close();
    start_daemon("slurmctld", {"/usr/sbin/slurmctld", "-D", "-i", "-f", conf_});
    wait_for("slurmctld", 30, [&] {
      return run_shell("scontrol ping 2>&1").output.find("UP") != std::string::npos;
    });
    start_daemon("slurmd", {"/usr/sbin/slurmd", "-D", "-f", conf_});
    wait_for("slurmd (node idle)", 60, [&] {
      return run_shell("sinfo -h -n " + node_ + " -o %T 2>/dev/null").output.rfind("idle", 0) == 0;
    });
  }

  void stop() {
    // The daemons, in reverse order of start: SIGTERM, SIGKILL after 5 s.
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it) {
      ::kill(*it, SIGTERM);
      int status = 0;
      bool gone = false;
      for (int i = 0; i < 50 && !gone; ++i) {
        gone = ::waitpid(*it, &status, WNOHANG) == *it;
        if (!gone)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!gone) {
        ::kill(*it, SIGKILL);
        ::waitpid(*it, &status, 0);
      }
    }
    pids_.clear();
    // What the daemons started and left (a step's slurmstepd, its tasks) carries SLURM_CONF.
    if (!conf_.empty())
      for (int round = 0; round < 50; ++round) {
        auto left = processes_with_env("SLURM_CONF=" + conf_);
        if (left.empty())
          break;
        for (auto pid : left)
          ::kill(pid, SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    if (old_conf_)
      ::setenv("SLURM_CONF", old_conf_->c_str(), 1);
    else
      ::unsetenv("SLURM_CONF");
  }

  temp_dir dir_;
  std::string conf_;
  std::string node_;
  std::optional<std::string> old_conf_;
  std::vector<pid_t> pids_;
};

} // namespace infrarsi::test
