#pragma once
/// @file contract_coverage.hpp
/// Which of the verifier's contract checks (contract_check.hpp) a task's output can make fail,
/// and which it cannot: a check whose input the metrics format does not carry compares the
/// task's own settings with themselves (a regex script without a tokens field is credited
/// metrics.tokens_per_step on every step, so `tokens` compares that constant with the
/// contract's). Pure functions of the task; shown by `infrarsi check TASK` and in the run
/// report (docs/task-contract.md "What a task's output can show").

#include <cstdint>
#include <string>
#include <vector>

#include "tuning/task.hpp"

namespace infrarsi::tuning {

/// Whether a trial's output can make one contract check fail.
enum class check_status : std::uint8_t {
  /// The check compares what the trial printed with the contract: a trial can fail it.
  observed,
  /// Part of the rule is observed and part cannot fail (the evidence says which part).
  partial,
  /// The contract asks for it but nothing the trial prints can make it fail.
  vacuous,
  /// Nothing the trial prints can make it pass: every trial fails it (a task mistake).
  fails_always,
  /// The contract does not ask for it (its value is 0) or the task waives it.
  off,
};

/// "observed", "partial", "vacuous", "fails_always" or "off".
const char* to_string(check_status status);

/// One contract check of a task.
struct check_coverage {
  /// The violation code (contract_check.hpp): steps, tokens, global_batch, params, layers,
  /// loss_non_finite, loss_not_falling, loss_drift, timed_window, step_times, clock.
  std::string code;
  check_status status = check_status::observed;
  /// What the check compares, or why it cannot fail (names the task keys involved).
  std::string evidence;
};

/// Every contract check of `task`, in the order of the violation codes above. Never fails.
/// The rules: with metrics.format = "regex" a field the regex does not capture is not observed
/// (tokens: credited metrics.tokens_per_step; loss: 0; step time: 0 s), and there is no final
/// line (global_batch, params, layers and the workload's own timed window are never read) and
/// no warm-up mark; with json_lines and require_final_line = false the final line's
/// declarations are checked only when a trial prints one; contract values of 0 and a waived or
/// simulated clock are off.
std::vector<check_coverage> contract_coverage(const task_spec& task);

/// The entries of contract_coverage(task) a trial's output cannot fail or cannot pass
/// (partial, vacuous, fails_always), in the same order. Empty: every check the contract asks
/// for is observed.
std::vector<check_coverage> vacuous_checks(const task_spec& task);

/// What enforces the contracted work where the output cannot show it: each of the task's
/// constraints ("constraint 'EXPR'": checked before every launch, a configuration that breaks
/// one never runs) and constants ("constant global_batch = 16": fixed, part of the contract,
/// rendered into argv and env). Empty when the task has neither; then nothing does.
std::vector<std::string> work_enforced_by(const task_spec& task);

} // namespace infrarsi::tuning
