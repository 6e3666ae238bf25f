#pragma once
/// @file descendants.hpp
/// Finds and ends every process a trial started, also those that left their rank's process
/// group or session (`setsid`, a double fork). Two mechanisms (docs/node-runner.md, "Every
/// descendant ends with the trial"):
///  - cgroup v2, where this process's cgroup v2 directory lets it create a child cgroup: every
///    rank joins `<own cgroup>/infrarsi-trial-<pid>-<n>` before it runs its program, so all its
///    descendants are listed in that cgroup's `cgroup.procs` whatever they do; SIGKILL goes
///    through `cgroup.kill` where the kernel has it (5.14+).
///  - a walk of /proc otherwise: the descendants of each rank by parent pid, the members of each
///    rank's process group, and the processes this process adopted as a child subreaper
///    (become_subreaper) whose environment carries the trial's marker (`INFRARSI_TRIAL_MARK`,
///    set on every rank). A descendant that both escaped before the first walk saw it and
///    cleared its environment is missed.
/// `description()` says which one a trial used (the trial report carries it).

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "adapters/process.hpp"

namespace infrarsi::adapters {

/// Ends what a launcher that died (kill -9) left in this process's cgroup v2: for every
/// `infrarsi-trial-<pid>-<n>` directory there whose <pid> is no live process, SIGKILLs its
/// processes (cgroup.kill) and removes it. Returns how many directories were removed. The first
/// trial_descendants of a process calls it once; nothing happens without a cgroup v2.
std::size_t sweep_stale_trial_cgroups();

/// The processes of one trial. Not thread safe (one per trial, used by its supervision loop).
class trial_descendants {
public:
  /// Name of the environment variable that marks a trial's processes.
  static constexpr const char* marker_name = "INFRARSI_TRIAL_MARK";

  /// Makes this process a child subreaper (once) and, with `allow_cgroup`, tries to create the
  /// trial's cgroup; without one it uses the /proc walk (description() says why).
  explicit trial_descendants(bool allow_cgroup = true);
  /// Removes the trial's cgroup (it must be empty by then; a non-empty one is left, named in
  /// no error: callers end every process first with signal_all / live).
  ~trial_descendants();
  trial_descendants(const trial_descendants&) = delete;
  trial_descendants& operator=(const trial_descendants&) = delete;

  /// True when the trial's processes are tracked by a cgroup v2.
  [[nodiscard]] bool uses_cgroup() const noexcept { return !cgroup_dir_.empty(); }
  /// "cgroup v2 DIR" or "/proc walk (cgroup v2 not used: WHY)", plus "; not a child
  /// subreaper" when prctl failed.
  [[nodiscard]] const std::string& description() const noexcept { return description_; }
  /// The marker's value (unique per trial in this process: "<pid>-<n>").
  [[nodiscard]] const std::string& marker_value() const noexcept { return marker_value_; }
  /// The `cgroup.procs` file every rank joins before exec (spawn_request::cgroup_procs); empty
  /// without a cgroup.
  [[nodiscard]] std::string cgroup_procs_file() const;

  /// Records a rank (its pid is also its process group).
  void add_rank(pid_t pid);
  /// Updates the known descendants from a fresh process table (the /proc walk; with a cgroup,
  /// nothing to do). Call it often (every 100 ms): a descendant seen once is tracked even after
  /// its parent exits.
  void observe(const std::vector<process_entry>& table);
  /// Whether the last observe() saw an adopted process whose environment could not be read yet
  /// (inside execve: environ_has). Until it can, nobody knows whether it belongs to this trial;
  /// the launcher waits a little (a bounded number of walks) before calling the trial over.
  [[nodiscard]] bool has_undecided() const noexcept { return !undecided_.empty(); }
  /// The live (not zombie) processes of the trial in `table`, ranks included (with a cgroup:
  /// the cgroup's members and the ranks' process groups).
  [[nodiscard]] std::vector<pid_t> live(const std::vector<process_entry>& table);
  /// Sends `sig` to every live process of the trial, from a fresh process table (with a cgroup,
  /// SIGKILL also through `cgroup.kill`), except those in a process group of `skip_groups`
  /// (groups the caller signals itself). Returns how many were signalled.
  std::size_t signal_all(int sig, const std::set<pid_t>& skip_groups = {});

private:
  std::string cgroup_dir_;
  std::string description_;
  std::string marker_value_;
  std::set<pid_t> ranks_;
  /// Known descendants (proc walk): pid -> start time in clock ticks (its identity).
  std::map<pid_t, unsigned long long> known_;
  /// Adopted processes whose environment was read and did not carry the marker.
  std::set<std::pair<pid_t, unsigned long long>> not_ours_;
  /// Adopted processes of the last observe() whose environment read as empty.
  std::set<pid_t> undecided_;
};

} // namespace infrarsi::adapters
