#pragma once
/// @file tune.hpp
/// `infrarsi tune`: the five stages, embedded — RocksDB event log and experience bank under the
/// store directory, all actors in this process, a local node-runner reached over ZeroMQ
/// (inproc), offline priors.

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace infrarsi::runtime {

struct tune_options {
  std::string task_path;
  /// Default: .infrarsi/ beside the task file.
  std::string store_dir;
  /// Default: the task's budget.seed.
  std::optional<std::uint64_t> seed;
  /// Overrides budget.trials (0 is allowed: no search trials). Unset on a resumed run: the
  /// budget the run was started with (logged at init).
  std::optional<std::uint32_t> trials;
  /// Continue this run (default: a new run <task>-<UTC time>).
  std::string run_id;
  /// Stop after this stage: init, doctor, run, report or apply (default).
  std::string until = "apply";
  /// Default: config/knowledge next to the task's config/tasks directory.
  std::string knowledge_dir;
  bool quiet = false;
  /// When set, a line "SEQUENCE KIND" is appended (and flushed) to this file after every event
  /// the event log acknowledged (sync_writes: on disk).
  std::string trace_appends;
};

/// Runs (or continues) a tuning run. Returns an exit status (0: the run finished, whatever it
/// promoted; 1: it could not run). Progress lines go to `err`, the summary to `out`.
int run_tune(const tune_options& options, std::ostream& out, std::ostream& err);

/// `infrarsi status`: every run of the store with its stages and promotion. Exit status.
int run_status(const std::string& store_dir, std::ostream& out, std::ostream& err);

} // namespace infrarsi::runtime
