#pragma once
/// @file cli.hpp
/// The `infrarsi` command line (CLI11). Separate from main() so tests can drive it in-process.

#include <iosfwd>

namespace infrarsi::runtime {

/// Exit statuses of `infrarsi` (also printed by `infrarsi --help`).
enum exit_status : int {
  exit_ok = 0,
  /// The command ran and failed: missing run, unreadable or corrupt store, ...
  exit_failure = 1,
  /// Bad command line: unknown option, missing argument, invalid value.
  exit_usage = 2,
};

/// Parses `argv` and runs the subcommand, writing results to `out` and diagnostics to `err`.
/// Returns an exit_status. Never throws.
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

} // namespace infrarsi::runtime
