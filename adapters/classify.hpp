#pragma once
/// @file classify.hpp
/// Classifies a finished trial into one terminal outcome from what the launcher observed.
/// Pure function of its input (no I/O), so every rule is unit-tested without processes.
///
/// Rules, in order (docs/node-runner.md):
///  1. The program could not be started (exec failed: missing binary, not executable):
///     launch_error.
///  2. Otherwise the earliest *cause* in time decides; events after the launcher began stopping
///     the trial are consequences, not causes:
///     memory cap exceeded -> oom; an OOM pattern in any rank's output -> oom;
///     a collective-communication failure in any rank's output (collective_failure_patterns():
///     NCCL watchdog, NCCL error, gloo timeout, connection closed by peer) -> crash (at start-up:
///     launch_error, below), the detail starting "collective communication failed"; an exit
///     status listed as OOM -> oom;
///     the wall-clock limit -> timeout; a stop request (preemption, cancel) -> preempted;
///     metrics that prove a contract violation (the early stop) -> contract_violation;
///     a rank exiting non-zero or by a signal, or a collective failure -> by its phase, never by
///     the clock: launch_error when it happened before the reporting rank's first metrics line
///     (start-up: a bad argument, an import error, a failed rendezvous), else crash.
///     Collective text is evidence of a failure, not a failure by itself: when the only causes
///     before the stop are collective text (every rank exited 0), rule 3 decides; when a rank
///     that printed no collective text died by a signal or exited non-zero before the stop, that
///     rank's exit decides, although its peers' collective errors were read first (a killed
///     rank is seen when it is reaped, its peers' "connection reset by peer" as it is printed).
///     A launch_error or crash of a rank quotes the tail of that rank's stderr (stderr_tail):
///     "; stderr: LINE | LINE | ... | EXCEPTION LINE".
///  3. No cause: every rank exited 0. ok, unless a final metrics line was required and missing
///     (crash: "exited 0 without the final metrics line").

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "messages/codec.hpp"

namespace infrarsi::adapters {

/// Something that can end a trial, with the time it was observed.
struct trial_cause {
  enum class kind_t : std::uint8_t {
    exec_failed,      ///< the program could not be started
    memory_cap,       ///< a rank's resident memory exceeded the cap (the launcher killed it)
    oom_text,         ///< an OOM pattern appeared in a rank's stdout or stderr
    exit_nonzero,     ///< a rank exited with a non-zero status (detail holds it)
    killed_by_signal, ///< a rank died from a signal the launcher did not send
    timeout,          ///< the wall-clock limit passed
    stop_requested,   ///< the launcher was asked to stop the trial (preemption)
    collective_text,  ///< a collective-communication failure pattern appeared in a rank's output
    /// the reporting rank's metrics proved a contract violation (tuning::early_violation; the
    /// detail starts with its code, e.g. "loss_drift: ..."); the launcher stops the trial then
    contract_violation,
  };
  kind_t kind = kind_t::exit_nonzero;
  /// Seconds since the trial started.
  double at_s = 0.0;
  /// Rank involved (-1: the whole trial).
  int rank = -1;
  /// Exit status for exit_nonzero, signal number for killed_by_signal.
  int code = 0;
  /// Evidence shown to the user (the OOM line, "RSS 3.1 GiB > cap 3.0 GiB", ...).
  std::string detail;
};

/// What the launcher saw.
struct trial_observation {
  std::vector<trial_cause> causes;
  /// Seconds since start when the launcher began stopping the trial (< 0: it never did).
  double stop_began_at_s = -1.0;
  /// Time of the first metrics line (< 0: none).
  double first_metrics_at_s = -1.0;
  /// All ranks exited with status 0.
  bool all_exited_zero = false;
  bool final_line_required = false;
  bool final_line_seen = false;
  /// The final line said status "ok" (when seen).
  bool final_line_ok = true;
  /// Launch window of the task (seconds). Kept for callers; the outcome no longer depends on it.
  double launch_window_s = 3.0;
  /// The tail of each rank's stderr (stderr_tail::text()), indexed by rank; a rank beyond the
  /// vector, or an empty text, quotes nothing.
  std::vector<std::string> stderr_tails;
  /// Exit statuses that mean OOM.
  std::vector<int> oom_exit_codes;
};

/// The verdict: outcome, the deciding cause (if any), and a one-line human explanation.
struct trial_verdict {
  wire::Outcome outcome = wire::Outcome::Unset;
  int exit_code = 0;
  std::string detail;
};

/// The last lines of one rank's stderr, kept as they are read, for the detail of a failed
/// trial: a Python traceback's last lines, ending in the exception line. Blank lines are skipped;
/// each line has its leading whitespace and trailing carriage return removed.
class stderr_tail {
public:
  /// At most this many lines are quoted.
  static constexpr std::size_t max_lines = 8;
  /// At most this many characters of them are quoted (the earliest lines are dropped first;
  /// a last line longer than this keeps its first max_chars characters).
  static constexpr std::size_t max_chars = 1000;

  /// Adds one line (without its newline).
  void add(std::string_view line);
  /// The quoted tail: the kept lines joined by " | " ("" when none), at most max_chars
  /// characters plus the separators.
  [[nodiscard]] std::string text() const;

private:
  std::vector<std::string> lines_; // the last max_lines non-blank lines, oldest first
};

/// Applies the rules above.
trial_verdict classify(const trial_observation& obs);

/// One output pattern that marks a failed collective operation (NCCL, gloo, c10d).
struct collective_pattern {
  /// Case-sensitive substring matched against every line of every rank's stdout and stderr.
  const char* text;
  /// What it means, as named in the verdict's detail ("NCCL watchdog timeout").
  const char* what;
};

/// The collective-failure patterns, in the order they are tried (docs/node-runner.md has the
/// same table). Each is specific to a failure: PyTorch's benign "ProcessGroupNCCL" warnings
/// (e.g. a process group not destroyed at exit) match none of them.
const std::vector<collective_pattern>& collective_failure_patterns();

/// The first collective-failure pattern that occurs in `line`, or nullptr.
const collective_pattern* find_collective_pattern(std::string_view line);

} // namespace infrarsi::adapters
