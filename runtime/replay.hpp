#pragma once
/// @file replay.hpp
/// `infrarsi replay`: the audit. Folds a run's events in order and, at every logged decision,
/// recomputes it from the events before it with the same pure functions the actors used
/// (decide/decisions.hpp), then byte-compares with what was logged. Replay never launches a
/// trial, calls an LLM or contacts a peer: priors, experience seeds and measurements are inputs
/// read from the log.
///
/// Decisions checked:
///   contract     ContractLocked's contract == contract_json(task)  (the task file is the run's)
///   proposal     each first-attempt TrialProposed: explore -> the planner's first proposal on
///                the state before it; baseline -> the baseline configuration; verify-* -> the
///                baseline or the candidate's configuration; the trial id is the next free one
///   calibration  BaselineCalibrated == calibrate_doc
///   verdict      TrialVerified == check_doc
///   reverification  CandidateReverified == reverify_doc, for a candidate reverify_candidates picks
///   promotion    CandidatePromoted == promotion_decision
///   llm request  a priors LlmRequested's body == decide::llm_request on the state before it
///   llm answer   LlmAnswerParsed == decide::llm_parsed_doc of the logged LlmResponded (each
///                patch's "apply_error", the `git apply --check` on the tree, is an input)
///   priors       with an [llm] table: PriorsLoaded == the last valid LLM priors, when any

#include <cstdint>
#include <ostream>
#include <string>

#include <caf/expected.hpp>

#include "store/event_log.hpp"
#include "store/run_projection.hpp"
#include "tuning/task.hpp"

namespace infrarsi::runtime {

/// What a replay found.
struct replay_result {
  /// Decisions recomputed and found byte-identical before the first divergence (all of them
  /// when `diverged` is false).
  std::size_t reproduced = 0;
  /// Events folded.
  std::size_t events = 0;
  bool diverged = false;
  /// The first divergence: the event's stream sequence, the decision ("proposal", "verdict",
  /// ...), what was logged and what the replay computed.
  std::uint64_t sequence = 0;
  std::string decision;
  std::string logged;
  std::string recomputed;
};

/// Replays run `run_id` of `log` against `task`. Errors: errc::not_found (no such run), or the
/// log's own read errors (damaged log).
[[nodiscard]] caf::expected<replay_result> replay_run(const store::event_log& log,
                                                      const std::string& run_id,
                                                      const tuning::task_spec& task);

/// The task run `run` was locked with: the task text logged at init (ContractLocked's
/// "task_toml"; the log is self-contained), or, for runs logged before the task text was,
/// `task_path` or else the path the run recorded. A file that differs from the one the run
/// started with (logged sha256) gets a note on `err`, prefixed with `command`. Errors:
/// errc::corrupt_data (the logged text does not load), errc::not_found (the file does not load;
/// the message says to give --task FILE when the recorded path was used).
[[nodiscard]] caf::expected<tuning::task_spec> task_of_run(const store::run_state& run,
                                                           const std::string& task_path,
                                                           const char* command,
                                                           std::ostream& err);

struct replay_options {
  std::string run_id;
  /// Store directory (the one `infrarsi tune` used); its events/ database is opened read-only.
  std::string store_dir;
  /// Task file; default: the path the run recorded at creation.
  std::string task_path;
};

/// `infrarsi replay`. Prints "N decisions reproduced (M events)" or the first divergence with
/// both versions. Exit status: 0 every decision reproduced, 1 a divergence, 3 the replay could
/// not be made (no such run, damaged log, task file missing).
int run_replay(const replay_options& options, std::ostream& out, std::ostream& err);

} // namespace infrarsi::runtime
