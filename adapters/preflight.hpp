#pragma once
/// @file preflight.hpp
/// The pre-flight check of a loaded task: what would make every trial fail before it starts,
/// found before a run is created (`infrarsi check TASK`, and `infrarsi tune` before it opens the
/// store). The task loader (adapters/task_file.hpp) already refuses what a file alone shows
/// (constraints that do not parse, name an unknown knob or that the defaults violate; a metrics
/// regex that does not compile or has no step field; a missing patch file); this adds what needs
/// the filesystem and the templates. Reference: docs/task-contract.md "Pre-flight".

#include <string>
#include <vector>

#include "tuning/task.hpp"

namespace infrarsi::adapters {

/// One problem: where (FILE:LINE:COLUMN of the value in the task file; FILE alone when the value
/// has no position, e.g. a default), the key ("workload.argv[3]") and what is wrong, naming the
/// value ("placeholder {cuda_graph} names no knob, constant or built-in; did you mean
/// {cuda_graphs}? ...").
struct preflight_problem {
  std::string where;
  std::string key;
  std::string message;
};

/// "WHERE: KEY: MESSAGE", the form every error of the task loader has.
std::string to_string(const preflight_problem& p);

struct preflight_options {
  /// The store `infrarsi tune` would write ("" : not checked): it must be a directory this user
  /// can write, or be creatable (its nearest existing ancestor is a writable directory).
  std::string store_dir;
  /// Whether each patch is checked with `git apply --check` against the unpatched workload.
  bool check_patches = true;
  /// Whether an `[llm]` api_key_env must name a set, non-empty environment variable of this
  /// process (false for `infrarsi submit`: the key is the daemon's, which checks it on receipt).
  bool check_api_key = true;
};

/// Every pre-flight problem of `task` (loaded by load_task_file; task.source names the file),
/// all of them (not only the first), templates first, then the working directory, the program,
/// the patches and the store:
///  - every `{name}` in workload.argv, workload.env, workload.world_size, workload.srun_args,
///    workload.torchrun_args, workload.torchrun_program, smoke.argv and smoke.world_size names a
///    knob, a constant or a
///    built-in (trial_id, attempt, trial_dir, memory_cap_bytes, world_size; rank with the ranks
///    launcher), and braces balance (tuning::render_template's rule); an unknown name gets the
///    nearest known one (edit distance <= 2) as a suggestion;
///  - workload.world_size and smoke.world_size render to an integer in 1..4096 for the defaults;
///  - workload.workdir is a directory;
///  - the program (argv[0]; torchrun_program[0] with the torchrun launcher), rendered with the
///    knobs' defaults, resolves as the launcher resolves it (with a '/': relative to
///    workload.workdir; without: on PATH, workload.env's PATH when it sets one) to a regular file
///    this user may execute (an empty program is a problem); smoke.argv[0] likewise;
///  - every patch applies alone to the unpatched workload (`git apply --check`, git's message
///    quoted) when options.check_patches;
///  - options.store_dir can be written;
///  - with an `[llm]` table whose api_key_env names a variable (options.check_api_key): that
///    variable is set and not empty here (its value is never read into a message).
/// Cost: one `git apply --check` per patch; no copy, nothing written.
[[nodiscard]] std::vector<preflight_problem> preflight(const tuning::task_spec& task,
                                                      const preflight_options& options = {});

/// The names a template uses: `{name}` for each placeholder, in order (`{{` and `}}` are literal
/// braces). Sets `why` (and stops) at an unbalanced brace, as tuning::render_template would.
std::vector<std::string> template_placeholders(const std::string& tmpl, std::string& why);

} // namespace infrarsi::adapters
