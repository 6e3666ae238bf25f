#pragma once
/// @file enumerate.hpp
/// The oracle: every configuration of a task's knob space (the Cartesian product of the knob
/// domains) times every subset of its patches, each priced by the simulator's truth, so the
/// exhaustive optimum of a task is known and search quality can be scored against it. Knob
/// values are rendered through the task's own argv templates and parsed by the simulator's own
/// command line, and patches are applied to the workdir's kernels.conf, so the enumeration
/// prices exactly what a trial would run.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tuning/task.hpp"
#include "workloads/sim/model.hpp"

namespace infrarsi::sim {

/// Which patch subsets to enumerate.
enum class patch_scope : std::uint8_t {
  none,  ///< no patches
  legit, ///< every subset of the work- and numerics-preserving patches (the default)
  all,   ///< every subset, including the loss-drifting and the less-work patch
};

/// One priced configuration.
struct enumerated_config {
  tuning::knob_assignment knobs;
  std::vector<std::string> patches;
  bool valid = false;
  std::string error; ///< when !valid
  bool oom = false;
  contract_kind contract = contract_kind::ok;
  double step_time_s = 0;
  double peak_memory_bytes = 0;
  double tflops_per_gpu = 0;
  double mfu = 0;
};

/// Counts and the two configurations that matter.
struct enumeration_summary {
  std::uint64_t assignments = 0;    ///< knob assignments
  std::uint64_t patch_subsets = 0;  ///< patch subsets that apply cleanly together
  std::uint64_t configurations = 0; ///< assignments x subsets
  std::uint64_t valid = 0, invalid = 0, oom = 0, contract_violating = 0;
  /// The task's reference: every knob at its default, no patches.
  std::optional<enumerated_config> baseline;
  /// The fastest valid configuration that fits in memory and keeps the contract.
  std::optional<enumerated_config> optimum;
};

/// Enumerates `task`. `sink` (may be empty) receives every configuration in a fixed order
/// (knobs in task order, last knob fastest; patch subsets by bit mask). Returns false with `why`
/// when the task cannot be enumerated (a real knob with a continuous range, an integer range
/// of more than 64 values, a template or argument the simulator rejects, an unreadable
/// kernels.conf or patch, a patch that does not apply on its own).
bool enumerate_task(const tuning::task_spec& task, patch_scope scope,
                    const std::function<void(const enumerated_config&)>& sink,
                    enumeration_summary& summary, std::string& why);

/// The kernel settings of `task`'s workdir with `patches` (names) applied in task order.
/// Returns nullopt with `why` when a file is unreadable or a patch does not apply.
std::optional<kernel_settings> patched_kernels(const tuning::task_spec& task,
                                               const std::vector<std::string>& patches,
                                               std::string& why);

/// The simulator configuration a trial of `task` with `knobs` (defaults filled in) would run,
/// with kernels from `kernels`. Returns nullopt with `why` on a template or parse error.
std::optional<sim_config> task_config(const tuning::task_spec& task,
                                      const tuning::knob_assignment& knobs,
                                      const kernel_settings& kernels, std::string& why);

} // namespace infrarsi::sim
