#pragma once
/// @file tune.hpp
/// `infrarsi tune`: the five stages, embedded — RocksDB event log and experience bank under the
/// store directory, all actors in this process, a local node-runner reached over ZeroMQ
/// (inproc), offline priors.

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "adapters/disk_space.hpp"
#include "store/event_log.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::runtime {

struct tune_options {
  std::string task_path;
  /// Default ("" too): .infrarsi in the current directory (runtime::default_store_dir), where
  /// status, runs and log dump look without --store.
  std::string store_dir;
  /// Default: the task's budget.seed.
  std::optional<std::uint64_t> seed;
  /// Overrides budget.trials of a new run (0 is allowed: no search trials); logged at init. A
  /// resumed run keeps its logged budget (a different --trials is refused).
  std::optional<std::uint32_t> trials;
  /// What the experience bank serves a new run: "filtered" (same workload, similar hardware),
  /// "all" or "none" (decide::experience_mode; docs/experience.md "Serving"). A resumed run keeps
  /// the pack logged at its init.
  std::string experience = "filtered";
  /// Node slots: node-runners, each behind its own ZeroMQ endpoint (tcp://127.0.0.1), and trials
  /// in flight at a time. Default 1.
  std::uint32_t nodes = 1;
  /// Per slot (index = slot): environment entries "K=V;K2=V2" added to its trials.
  std::vector<std::string> slot_env;
  /// Bytes that must stay free in the store and trial directories (--disk-reserve), checked
  /// before the store is opened, before every stage and before every trial; below it the run
  /// stops with status 1 naming the directory, the free bytes and the reserve (resumable with
  /// --run). 0: no check. Not logged: a property of the machine, like --nodes.
  std::uint64_t disk_reserve_bytes = adapters::default_disk_reserve_bytes;
  /// Per slot: CPU list for `taskset -c` (e.g. "0-1").
  std::vector<std::string> slot_cpus;
  /// Continue this run (default: a new run <task>-<UTC time>).
  std::string run_id;
  /// Stop after this stage: init, doctor, run, report or apply (default).
  std::string until = "apply";
  /// Default: config/knowledge next to the task's config/tasks directory.
  std::string knowledge_dir;
  /// Only errors and their causes on stderr, no progress lines.
  bool quiet = false;
  /// Long reasons in the progress: each trial's violations or failure detail, the planner's
  /// reasons; lines are not shortened to 120 characters.
  bool verbose = false;
  /// When set, a line "SEQUENCE KIND" is appended (and flushed) to this file after every event
  /// the event log acknowledged (sync_writes: on disk).
  std::string trace_appends;
  /// Ended attempts that keep their copy of the workload (runs/<run>/trials/trial-*/workdir)
  /// besides the first baseline, the candidates and the promoted trial; older copies are removed
  /// after every verdict, their logs kept (decide::removable_trial_copies). Default 4.
  std::uint32_t keep_trial_copies = 4;
};

/// Runs (or continues) a tuning run. Returns an exit status (0: the run finished, whatever it
/// promoted; 1: it could not run; 130 / 143: interrupted by SIGINT / SIGTERM, resumable with
/// --run). Progress lines go to `err`, the summary to `out`. SIGINT and SIGTERM are handled
/// while it runs (blocked in every thread, taken by a signal thread): the first stops
/// dispatching, ends every running trial's process groups (SIGTERM, kill_grace_s, SIGKILL) and
/// logs RunInterrupted; a second exits at once after SIGKILL to every trial's process group.
int run_tune(const tune_options& options, std::ostream& out, std::ostream& err);

/// A new run id: <task>-<UTC time>-<4 random hex digits>, never one `log` already holds.
/// Errors: those of the log; errc::io_error when 64 tries all collide.
caf::expected<std::string> new_run_id(const store::event_log& log, const std::string& task_name);

/// "K=V;K2=V2" (a --slot-env value) -> {K: V, K2: V2}. Error: errc::invalid_argument naming
/// the entry.
caf::expected<std::map<std::string, std::string>> parse_slot_env(const std::string& text);

/// Why `text` is not a CPU list `taskset -c` takes ("" if it is): comma-separated core numbers
/// or ascending ranges A-B, each below the machine's core count.
std::string cpu_list_error(const std::string& text);

/// The offline knowledge base beside a task file: <task dir>/../knowledge when it exists, else
/// config/knowledge.
std::string default_knowledge_dir(const std::string& task_source);

/// What `infrarsi status` says a run is doing, from its events: "finished" (apply completed);
/// "failed in stage doctor: the baseline does not run (trial 0 launch_error: ...)" (every
/// baseline attempt ended and none ok, or decide::baseline_launch_failure, and no process holds
/// the store); "interrupted in stage S (by a signal)" (its last event is RunInterrupted);
/// "running stage S (process PID holds the store)" (`holder`: the pid holding the store's lock,
/// 0 if none); "stopped in stage S: ..." (a stage started and not completed, nothing holds the
/// store: the process failed or was killed); "stopped after stage S (--until S)"; "created".
std::string run_state_text(const store::run_state& state, bool last_event_interrupt, int holder);

/// `infrarsi status`: every run of the store as a block of lines (state, task, stages, trials
/// by outcome, baseline, promotion, report, events, and the resume command of a run that did
/// not finish). Exit status 0, 1 when the store is missing or a run's events do not verify.
int run_status(const std::string& store_dir, std::ostream& out, std::ostream& err);

} // namespace infrarsi::runtime
