#pragma once
/// @file run_progress.hpp
/// How far a run has come, for people watching it (`infrarsi daemon status`, the daemon's
/// dashboard): its stage, search trials ended against the budget, and the best speedups so far.
/// A pure function of the folded run (store/run_projection.hpp) and its budget; nothing here reads
/// a clock, a file or the network.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "store/run_projection.hpp"

namespace infrarsi::decide {

/// A run's progress.
struct run_progress {
  /// The stage in progress (the last started and not completed), else the last completed one,
  /// else "created" (init, doctor, run, report, apply).
  std::string stage = "created";
  /// Search (explore) trials whose latest attempt has ended, any outcome.
  std::uint32_t search_trials_done = 0;
  /// Search trials of the budget (decide::budget_of); nullopt when unknown (no task and no
  /// ContractLocked "budget").
  std::optional<std::uint32_t> search_trials_budget;
  /// Trial attempts of any purpose dispatched and not yet ended.
  std::uint32_t attempts_in_flight = 0;
  /// Best measured speedup of a search trial over the baseline so far: max over usable explore
  /// trials of (the doctor's mean baseline step time) / (the trial's timed step time), the
  /// report's "speedup_vs_baseline"; nullopt before the doctor or without a usable trial.
  std::optional<double> best_measured_speedup;
  /// Best verified speedup: the largest speedup of a promotable re-verification (interleaved
  /// against the baseline, decide::reverification_looks) with its 95 % interval; nullopt
  /// when no candidate has been verified promotable yet.
  std::optional<double> best_verified_speedup;
  double best_verified_ci_low = 0.0;
  double best_verified_ci_high = 0.0;
  /// The explore trial whose re-verification gave best_verified_speedup (0: none).
  std::uint64_t best_verified_trial = 0;
  /// The promotion decision, once made: whether a change was promoted.
  std::optional<bool> promoted;
  /// SearchStopped "reason" ("budget", "wall_clock", ...), once the search stopped.
  std::string search_stopped;
};

/// The progress of `run`. `budget_trials`: the run's search budget (decide::budget_of(task,
/// run).trials) when the caller has the task; without it, the ContractLocked "budget"."trials"
/// of the run is used when present.
run_progress progress_of(const store::run_state& run,
                         std::optional<std::uint32_t> budget_trials = std::nullopt);

/// As JSON: {"stage", "search_trials_done", "search_trials_budget" (null: unknown),
/// "attempts_in_flight", "best_measured_speedup" (null), "best_verified_speedup" (null),
/// "best_verified_ci": [low, high] (with best_verified_speedup), "best_verified_trial",
/// "promoted" (absent until decided), "search_stopped" ("" while searching)}.
nlohmann::json to_json(const run_progress& p);

} // namespace infrarsi::decide
