#pragma once
/// @file sim_evaluator.hpp
/// The benchmark evaluator for the cluster simulator's tasks (config/tasks/sim-*.toml,
/// docs/simulator.md), in process: no subprocess, no files written. A trial of a configuration
/// is what `infrarsi trial run` would give, computed directly:
///
///  1. refused before launch (0 device-seconds): a knob or patch the task does not have or a
///     value outside its domain (launch_error), a broken constraint (contract_violation,
///     "constraint: ..." as the node-runner reports it), patches that do not apply together
///     (launch_error);
///  2. the configuration's simulator input: the task's argv rendered and parsed by the
///     simulator's own command line (sim::task_config) with the workdir's kernels.conf patched
///     by the configuration's patches (sim::patched_kernels, cached per patch subset), and its
///     truth (sim::compute_truth);
///  3. launched and failed (charged the simulator's 30 s start-up x GPUs): an invalid parallel
///     layout (launch_error, what the simulator's exit status 2 gives) or out of memory (oom,
///     the OOM report in `detail`);
///  4. otherwise the run's per-step metrics with cluster noise (sim::simulate_run, seed = the
///     benchmark seed, launch id = trial id, attempt), the timed step time as the verifier takes
///     it (tuning::timed_step_time: median over the contract's timed window), device-seconds from
///     the final line (simulated wall time x GPUs), and the verdict of the real contract check
///     (tuning::check_contract) against the baseline's loss trajectory; a configuration the
///     simulator's truth flags as drifting or doing less work is a contract_violation in any
///     case (the check catches both as loss_drift, tests/contract/cheats_test.cpp).
///
/// The oracle is sim::enumerate_task over the task's whole space with the contract-keeping
/// patch subsets (patch_scope::legit), computed once when the evaluator is created (0.5 to 5 s
/// per task; nothing of the 10^5 to 2.6 x 10^6 configurations is stored).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/evaluator.hpp"
#include "tuning/contract_check.hpp"
#include "workloads/sim/kernels.hpp"
#include "workloads/sim/model.hpp"
#include "workloads/sim/run.hpp"

namespace infrarsi::bench {

/// Start-up time charged to a launched trial that fails before its first step (invalid layout,
/// out of memory), simulated seconds; times the task's GPUs gives its device-seconds. The
/// simulator's own start-up of a completed run (in its final line) is 30 s plus weight
/// initialisation.
inline constexpr double sim_failed_launch_s = 30.0;

/// Evaluator of one simulator task (see the file comment).
class sim_evaluator final : public evaluator {
public:
  /// Creates the evaluator of `task` (a loaded sim task: its argv runs infrarsi-sim) and runs
  /// the oracle's enumeration. Returns nullptr and sets `why` when the task is not a simulator
  /// task, its kernels file or a patch cannot be read, or the enumeration fails.
  static std::unique_ptr<sim_evaluator> create(tuning::task_spec task, std::string& why);

  /// Whether `task` runs the cluster simulator (argv[0] ends in "infrarsi-sim").
  static bool is_sim_task(const tuning::task_spec& task);

  [[nodiscard]] const tuning::task_spec& task() const override { return task_; }
  void begin_run(std::uint64_t seed) override { seed_ = seed; }
  [[nodiscard]] tuning::trial_record measure(const tuning::configuration& config,
                                             std::uint64_t trial_id, std::uint32_t attempt,
                                             const std::string& purpose,
                                             const tuning::loss_reference* early_stop =
                                               nullptr,
                                             const std::vector<std::string>& smoke_patches =
                                               {}) override;
  [[nodiscard]] std::optional<double> true_step_time(const tuning::configuration& config) override;
  [[nodiscard]] double optimum_step_time() override { return optimum_step_s_; }
  [[nodiscard]] std::string optimum_description() override { return optimum_text_; }
  [[nodiscard]] std::uint64_t optimum_space_size() override { return space_size_; }
  [[nodiscard]] double baseline_true_step_time() override { return baseline_step_s_; }
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> incompatible_patches() override {
    return incompatible_;
  }

  /// Wall-clock seconds the oracle's enumeration took (for the report; not deterministic).
  [[nodiscard]] double oracle_wall_s() const { return oracle_wall_s_; }

private:
  explicit sim_evaluator(tuning::task_spec task) : task_(std::move(task)) {}

  /// How a configuration would start: its simulator input and truth, or why it would not run.
  struct priced {
    /// Refused before launch or failed at launch: the outcome and text (outcome unset: runs).
    tuning::trial_outcome failure = tuning::trial_outcome::unset;
    std::string detail;
    bool launched = false; ///< a failure after the process started (charged start-up)
    int gpus = 1;
    sim::sim_config cfg;
    sim::truth truth;
  };
  priced price(const tuning::configuration& config);

  /// One launch of the task's [smoke] (smoke_task_) with `config`'s knobs, with its patches
  /// (`patched`) or without: outcome ok with steps, declared work, simulated wall time and
  /// device-seconds; oom or launch_error as a full launch would end.
  tuning::trial_record smoke_run(const tuning::configuration& config, bool patched,
                                 std::uint64_t trial_id, std::uint32_t attempt);

  /// The kernels of a patch subset (sorted names), cached; nullopt with `why` if they do not apply.
  const std::optional<sim::kernel_settings>& kernels_for(const std::vector<std::string>& patches,
                                                         std::string& why);

  tuning::task_spec task_;
  /// The task's own run settings (steps, warm-up, noise), from its command line.
  sim::run_options run_;
  std::uint64_t seed_ = 0;
  int task_gpus_ = 1;
  std::map<std::string, std::pair<std::optional<sim::kernel_settings>, std::string>> kernels_;
  tuning::loss_reference reference_;
  /// The task with its [smoke] launch as the workload and contract, and that launch's run
  /// settings; nullopt when the task has no [smoke].
  std::optional<tuning::task_spec> smoke_task_;
  sim::run_options smoke_run_;
  double baseline_step_s_ = 0;
  double optimum_step_s_ = 0;
  std::string optimum_text_;
  std::uint64_t space_size_ = 0;
  double oracle_wall_s_ = 0;
  std::vector<std::pair<std::string, std::string>> incompatible_;
};

} // namespace infrarsi::bench
