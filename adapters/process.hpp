#pragma once
/// @file process.hpp
/// POSIX process primitives for the trial launcher: spawn a program in its own process group
/// with piped stdout/stderr and an exact argv/environment (never a shell string), measure the
/// resident memory of a process group, signal a group; a process-wide registry of the live
/// trial process groups, so that a signal-waiting thread can stop every trial at once.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
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
};

/// Starts `req` in a new process group (setpgid); with `req.register_group`, the group is in the
/// registry from before the child can run its program (a child whose exec fails is removed
/// again). Errors: errc::not_found (program not found or
/// not executable: the exec's errno text and the program name), errc::invalid_argument (empty
/// argv, missing workdir), errc::io_error (fork or pipe failed).
[[nodiscard]] caf::expected<child_process> spawn(const spawn_request& req);

/// Resident set size in bytes summed over every live process whose process group is `pgid`
/// (the rank and all its children), read from /proc/<pid>/statm. 0 if none.
std::uint64_t group_rss_bytes(pid_t pgid);

/// Pids of the live processes in process group `pgid` (from /proc).
std::vector<pid_t> group_members(pid_t pgid);

/// Sends `sig` to process group `pgid`; ESRCH (already gone) is not an error.
void signal_group(pid_t pgid, int sig);

/// Sends sig to every registered live trial process group; returns how many.
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
