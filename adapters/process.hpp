#pragma once
/// @file process.hpp
/// POSIX process primitives for the trial launcher: spawn a program in its own process group
/// with piped stdout/stderr and an exact argv/environment (never a shell string), measure the
/// resident memory of a process group, signal a group; a process-wide registry of the live
/// trial process groups, so that a signal-waiting thread can stop every trial at once; the
/// registry of the children spawn() started (reap_child), so that the processes this process
/// adopts as a child subreaper (become_subreaper) can be told apart and reaped
/// (reap_adopted_zombies); a snapshot of the process table (process_table).

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace infrarsi::adapters {

/// A started child: its pid (= its process-group id) and the read ends of its output pipes
/// (non-blocking, close-on-exec). The caller owns the descriptors.
struct child_process {
  pid_t pid = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
};

/// What to start.
struct spawn_request {
  /// argv[0] is looked up on the child's PATH when it has no '/'.
  std::vector<std::string> argv;
  /// The complete environment of the child (nothing else is inherited).
  std::map<std::string, std::string> env;
  /// Working directory of the child.
  std::string workdir;
  /// Whether spawn() records the child's process group in the registry of live trial groups
  /// (signal_all_groups); the caller then calls unregister_group() once it has reaped the
  /// leader and no member of the group remains. The trial launcher sets it for its ranks.
  bool register_group = false;
  /// A cgroup v2 `cgroup.procs` file the child moves itself into before it runs its program
  /// (its descendants then stay in that cgroup whatever session or group they move to); empty:
  /// none. Error when it cannot: errc::io_error naming the file.
  std::string cgroup_procs = {};
};

/// Starts `req` in a new process group (setpgid); with `req.register_group`, the group is in the
/// registry from before the child can run its program (a child whose exec fails is removed
/// again). Every child is recorded as this process's own until reap_child() reaps it, so
/// reap_adopted_zombies() never takes its exit status. Errors: errc::not_found (program not
/// found or not executable: the exec's errno text and the program name),
/// errc::invalid_argument (empty argv, missing workdir), errc::io_error (fork or pipe failed,
/// the cgroup could not be joined: the file and the errno text).
[[nodiscard]] caf::expected<child_process> spawn(const spawn_request& req);

/// waitpid(pid, status, flags) for a child spawn() started; once it is reaped it leaves the
/// registry of own children. Returns waitpid's value (pid: reaped; 0: still running with
/// WNOHANG; -1: error, errno set). Retries on EINTR.
pid_t reap_child(pid_t pid, int& status, int flags);

/// Makes this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux 3.4+): orphaned
/// descendants (a trial's double-forked or `setsid` child whose parent exited) become its
/// children instead of init's, so the launcher can find, kill and reap them. Idempotent and
/// thread safe; returns whether the flag is set (false: prctl failed; errno is not kept).
bool become_subreaper();

/// One line of the process table (from /proc/<pid>/stat).
struct process_entry {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  /// 'R', 'S', 'D', 'Z' (zombie), ... (proc(5) field 3).
  char state = '?';
  /// Start time in clock ticks since boot (proc(5) field 22): with the pid, the identity of a
  /// process across pid reuse.
  unsigned long long start_ticks = 0;
};

/// Every process of /proc at one moment, zombies included. Cost: one open and read per process.
std::vector<process_entry> process_table();

/// Reaps (waitpid WNOHANG) every zombie in `table` whose parent is this process and that
/// spawn() did not start: processes adopted as a child subreaper. Returns how many were reaped.
/// Thread safe (the registry lock is held, so a child spawn() starts meanwhile is never taken).
std::size_t reap_adopted_zombies(const std::vector<process_entry>& table);

/// Whether /proc/<pid>/environ holds the entry `key_value` ("K=V") exactly: true or false when
/// it was read; std::nullopt when nothing could be read (gone, a zombie, another user's, or a
/// process in the middle of execve, whose new environment is not yet in place and reads as
/// empty). A caller that classifies processes asks again later on nullopt rather than deciding.
std::optional<bool> environ_has(pid_t pid, const std::string& key_value);

/// Records a trial cgroup directory (cgroup v2) in the registry of live trial groups:
/// signal_all_groups() then also signals every process in it. unregister_cgroup removes it.
/// Thread safe.
void register_cgroup(const std::string& dir);
/// Pids listed in `dir`/cgroup.procs (cgroup v2; live processes). Empty when unreadable.
std::vector<pid_t> cgroup_members(const std::string& dir);
/// Sends sig to every process of cgroup `dir`; SIGKILL writes "1" to `dir`/cgroup.kill when it
/// exists (Linux 5.14+: atomic, also reaches a process forked meanwhile). Returns how many
/// processes were listed (cgroup.kill: at least 1 if any were).
std::size_t signal_cgroup(const std::string& dir, int sig);
void unregister_cgroup(const std::string& dir);

/// Resident set size in bytes summed over every live process whose process group is `pgid`
/// (the rank and all its children), read from /proc/<pid>/statm. 0 if none.
std::uint64_t group_rss_bytes(pid_t pgid);

/// Pids of the live processes in process group `pgid` (from /proc).
std::vector<pid_t> group_members(pid_t pgid);

/// Sends `sig` to process group `pgid`; ESRCH (already gone) is not an error.
void signal_group(pid_t pgid, int sig);

/// Sends sig to every registered live trial process group, and to every process of each
/// registered trial cgroup (SIGKILL: through `cgroup.kill` where the kernel has it; this reaches
/// a trial's descendants that left its groups); returns how many process groups were signalled
/// (cgroups are not counted).
/// A group with no process left (kill reports ESRCH) is dropped from the registry and not
/// counted. Thread safe (one mutex, also taken by spawn() around fork); for a normal thread,
/// e.g. the CLI's signal-waiting thread, not for a signal handler. A group that spawn() starts
/// after this call returns is not signalled: callers stop the launchers too (trial_request::stop).
std::size_t signal_all_groups(int sig);

/// Number of registered trial process groups that still have a process (groups without one are
/// dropped first). Thread safe.
std::size_t live_group_count();

/// Removes `pgid` from the registry of live trial groups (no effect if absent). Call once the
/// group's leader is reaped and no member remains, so the id is never signalled after the
/// kernel may reuse it. Thread safe.
void unregister_group(pid_t pgid);

/// The current environment as a map.
std::map<std::string, std::string> current_environment();

/// A free TCP port on 127.0.0.1 (bound to port 0 and released; another process could take it
/// before it is used, which the rendezvous then reports).
[[nodiscard]] caf::expected<int> free_tcp_port();

} // namespace infrarsi::adapters
