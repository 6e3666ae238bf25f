#pragma once
/// @file cli.hpp
/// The infrarsi-sim command line (CLI11): one option per knob, the model and cluster, the run,
/// and the modes (trial run, --truth, --enumerate). The same parser turns a task's rendered argv
/// into a configuration for --enumerate, so the enumeration prices exactly what a trial runs.
///
/// Exit statuses of the program: 0 ok; 2 bad command line, bad kernels file or invalid parallel
/// layout (before any metrics, so the launcher classifies it launch_error); 86 simulated
/// out-of-memory (an `INFRARSI_OOM {json}` line on stderr first); 1 anything else (an unreadable
/// task file for --enumerate).

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "workloads/sim/model.hpp"
#include "workloads/sim/run.hpp"

namespace infrarsi::sim {

/// Exit status for a simulated out-of-memory (the launcher's default oom_exit_codes).
inline constexpr int exit_oom = 86;
/// Exit status for a bad command line, kernels file or parallel layout.
inline constexpr int exit_usage = 2;

/// Everything the command line sets. Model fields left at 0 (or -1) come from the preset.
struct cli_state {
  // Cluster.
  std::string gpu = "H100-80GB";
  int gpus = 8;
  // Model: a preset plus overrides.
  std::string model = "llama3-8b";
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  int experts = -1, top_k = 0, expert_ffn = 0, shared_expert_ffn = -1;
  int seq_len = 4096;
  int global_batch = 256;
  // Knobs.
  parallel_config parallel;
  std::string recompute = "none";
  std::string kernels_path = "kernels.conf";
  std::uint64_t memory_cap_bytes = 0;
  // Run.
  run_options run;
  std::string noise = "on";
  bool launch_id_given = false;
  bool attempt_given = false;
  // Modes.
  bool truth = false;
  bool enumerate = false;
  std::string task;
  std::string patches_mode = "legit"; ///< enumerate: none | legit | all
  int top = 0;                        ///< enumerate: print only the best N (0: every one)
  bool summary_only = false;
  bool include_invalid = false;
};

/// Builds the parser bound to `state` (which must outlive it).
std::unique_ptr<CLI::App> make_app(cli_state& state);

/// Turns parsed options into a configuration (preset + overrides); kernels are left at their
/// defaults (the caller loads the kernels file). Returns "" or what is wrong.
std::string resolve_config(const cli_state& state, sim_config& out);

/// The whole program: parses `args` (without the program name), runs the mode, writes metrics
/// and reports to `out`, diagnostics to `err`, and returns the exit status. `env_trial_id` and
/// `env_attempt` are the launcher's INFRARSI_TRIAL_ID / INFRARSI_ATTEMPT ("" when unset).
int run_program(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                const std::string& env_trial_id = "", const std::string& env_attempt = "");

} // namespace infrarsi::sim
