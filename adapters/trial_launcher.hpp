#pragma once
/// @file trial_launcher.hpp
/// Runs one trial of a training job faithfully (docs/node-runner.md): renders the knob
/// assignment into argv and environment exactly as the task says, starts the ranks (each in its
/// own process group, torchrun environment contract, a free rendezvous port per trial) or the
/// user's own command, caps per-rank memory, enforces the wall-clock limit, stops every rank as
/// soon as one fails or prints an OOM pattern, ends every descendant of the trial with it
/// (descendants.hpp: cgroup v2 or a /proc walk, as a child subreaper), writes each rank's
/// stdout/stderr to the trial directory as it is read, reads the metrics, and classifies the
/// outcome (classify.hpp). Reference: docs/node-runner.md.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "adapters/metrics.hpp"
#include "messages/codec.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/task.hpp"

namespace infrarsi::adapters {

/// One trial to run.
struct trial_request {
  /// The task (must outlive the call).
  const tuning::task_spec* task = nullptr;
  /// Knob values; knobs not named here take their defaults.
  tuning::knob_assignment knobs;
  /// Names of task patches to apply, in order (the trial then runs in a patched copy).
  std::vector<std::string> patches;
  /// The diff text of every patch in `patches` that is not one of the task's [[patches]] (an
  /// accepted LLM-proposed patch), by name: packed into the TrialSpec (`patch_texts`) so that a
  /// node needs no file for it (run_node_trial writes it into the trial directory).
  std::map<std::string, std::string> patch_texts;
  /// The scope lock taken at init: SHA-256 (hex) of each editable and frozen file, by path
  /// relative to the workload directory. When not empty the trial runs in a fresh copy (also
  /// without patches); before launch the copy must match every hash, and after the patches are
  /// applied no frozen file may differ and every path a patch names must be editable. Any
  /// failure ends the trial as contract_violation ("scope: ...", naming the path) unlaunched.
  std::map<std::string, std::string> scope_lock;
  std::uint64_t trial_id = 0;
  std::uint32_t attempt = 0;
  /// Directory for this trial's logs (and patched copy); created if missing.
  std::string trial_dir;
  /// Overrides of the task's limits; 0 keeps the task's value.
  double timeout_s = 0.0;
  std::uint64_t memory_cap_bytes = 0;
  /// Set to true (from any thread) to stop the trial; it ends as preempted.
  const std::atomic<bool>* stop = nullptr;
  /// The doctor's loss reference (tuning::early_stop_reference of the run's): after each metrics
  /// step of the reporting rank, tuning::early_violation(task.contract, *loss_reference, steps)
  /// is asked, and a violation stops the trial at once as contract_violation (its detail: the
  /// violation, then "; stopped early at step S of N"). nullopt (baselines, before the
  /// calibration): the trial runs to its end and only the verifier judges it.
  std::optional<tuning::loss_reference> loss_reference;
  /// The patches of `patches` never run in a usable trial (decide::smoke_patches). When not empty
  /// and the task has [smoke], the smoke probe runs first (trial_dir/smoke-unpatched,
  /// trial_dir/smoke-patched: the smoke launch without and with `patches`); a patched run that
  /// breaks the contract against the unpatched one (tuning::smoke_violation) ends the trial as
  /// contract_violation (detail tuning::smoke_probe_detail) with the two launches' wall time and
  /// device-seconds only; otherwise the full launch follows and its result carries both costs too.
  /// An unpatched run that is no reference (tuning::smoke_reference_problem: inconclusive) or
  /// whose loss does not fall (tuning::smoke_vacuous: vacuous) ends the probe after one launch,
  /// and the full launch's detail carries tuning::smoke_inconclusive_detail or
  /// tuning::smoke_vacuous_detail.
  std::vector<std::string> smoke_patches;
  /// Called for every metrics step as it is read (progress display); may be empty.
  std::function<void(const step_sample&)> on_step;
  /// Whether the trial's processes may be tracked by a cgroup v2 (where this process can
  /// create one); false: always the /proc walk (descendants.hpp). Default true.
  bool allow_cgroup = true;
};

/// What happened, for the caller and the user.
struct trial_report {
  /// The FlatBuffers result (outcome, steps, peak memory, wall time, device-seconds, detail).
  messages::trial_result_msg result;
  /// The argv each rank ran (rank 0's for the ranks launcher) and the knob-rendered environment
  /// entries (inherited variables not included).
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  /// Variables removed from every rank's environment: workload.env entries whose knob is
  /// "unset" (tuning::unset_env_value), and at world size 1 with workload.distributed_env =
  /// "multi_rank" the torchrun variables (torchrun_env_names()); sorted, each once.
  std::vector<std::string> env_unset;
  /// Working directory the trial ran in (a patched copy when patches were applied).
  std::string workdir;
  /// Number of ranks (or devices of a command).
  int world_size = 1;
  /// Per-rank log files: rank-N.stdout, rank-N.stderr (written as they are read).
  std::vector<std::string> log_files;
  /// How the trial's descendants were found and ended: "cgroup v2 DIR" or "/proc walk (cgroup
  /// v2 not used: WHY)" (trial_descendants::description); empty when nothing was launched.
  std::string descendants;
};

/// Pairs of the named patches that cannot be applied together: for each patch A (in order), a
/// fresh copy of the workload under `scratch_dir` gets A applied, then every later patch B is
/// checked (`git apply --check`) on top of it. A patch that does not apply alone conflicts with
/// every later one; when `not_alone` is given, each such patch is also entered there with git's
/// message (patch name -> why it does not apply to the unpatched workload).
/// Errors: errc::invalid_argument (unknown patch), errc::io_error (copy failed).
/// Cost: one copy of the workload and one `git apply` per patch, one check per pair.
[[nodiscard]] caf::expected<std::vector<std::pair<std::string, std::string>>>
patch_conflicts(const tuning::task_spec& task, const std::vector<std::string>& names,
                const std::string& scratch_dir,
                std::map<std::string, std::string>* not_alone = nullptr);

/// Whether `patch_file` applies to the files under `dir` (`git apply --check`, run as a plain
/// patch tool: repository discovery stops at `dir`); nothing is written. When it does not,
/// `why` holds git's message. Used by the pre-flight check (adapters/preflight.hpp).
bool patch_applies(const std::string& patch_file, const std::string& dir, std::string& why);
/// Runs `git apply --whitespace=nowarn [--check] PATCH` in `dir` as a plain patch tool (no
/// shell; repository discovery stops at `dir`); false (with git's stderr in `err_text`) when it
/// does not apply or git cannot run.
bool git_apply(const std::string& patch_file, const std::string& dir, bool check_only,
               std::string& err_text);

/// Checks an assignment against the task: every name is a knob, every value in its domain.
/// Returns the complete assignment (defaults filled in). Error: errc::invalid_argument naming the
/// knob, the value and what was expected.
[[nodiscard]] caf::expected<tuning::knob_assignment>
complete_assignment(const tuning::task_spec& task, const tuning::knob_assignment& knobs);

/// The variables of the torchrun environment contract the ranks launcher sets: RANK,
/// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
const std::vector<std::string>& torchrun_env_names();

/// Runs the trial to its end. Every trial outcome (ok, oom, crash, timeout, launch_error,
/// preempted) is a successful return; errors mean the tool itself could not run it:
/// errc::invalid_argument (unknown knob or patch, value out of domain, template error),
/// errc::io_error (cannot create the trial directory, fork failed).
[[nodiscard]] caf::expected<trial_report> run_trial(const trial_request& req);

/// The loss reference a TrialSpec carries (its `loss_reference`), or nullopt when it carries none.
std::optional<tuning::loss_reference> loss_reference_of(const wire::TrialSpec& spec);

/// A TrialSpec message for a request (what the node-runner receives and the log records), with
/// the trial's purpose ("baseline", "explore", ...) and req.loss_reference when set.
messages::trial_spec_msg make_trial_spec(const trial_request& req, const std::string& purpose = {});

} // namespace infrarsi::adapters
