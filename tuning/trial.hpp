#pragma once
/// @file trial.hpp
/// Plain records of configurations and trials, as the method sees them (folded from the event
/// log by store/run_projection.hpp). No I/O.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include "tuning/task.hpp"

namespace infrarsi::tuning {

/// A point of the search space: every knob's value and the set of applied patches.
struct configuration {
  knob_assignment knobs;
  /// Patch names, sorted (a set: order of application is the sorted order).
  std::vector<std::string> patches;

  /// Canonical text, e.g. "micro_batch=4,threads=2|fused_qkv": equal iff configurations equal.
  [[nodiscard]] std::string key() const;
  /// Differences from `other`, e.g. "micro_batch 1->4, +fused_qkv".
  [[nodiscard]] std::string diff_from(const configuration& other) const;
  friend bool operator==(const configuration& a, const configuration& b) {
    return a.knobs == b.knobs && a.patches == b.patches;
  }
};

/// Terminal state of a trial (mirrors wire::Outcome).
enum class trial_outcome : std::uint8_t {
  unset = 0, ok = 1, oom = 2, crash = 3, timeout = 4, launch_error = 5,
  contract_violation = 6, lost = 7, preempted = 8,
};

const char* to_string(trial_outcome o);

/// Where a trial's peak memory came from (mirrors wire::MemorySource; values equal).
enum class memory_source : std::uint8_t {
  /// Recorded before results named their source: the peak is used as recorded.
  unknown = 0,
  /// Nothing device-real was measured for a task that declares device memory: peak 0.
  unobserved = 1,
  /// The workload's own metrics lines.
  workload = 2,
  /// nvidia-smi's used_memory of the trial's processes, sampled by the node-runner.
  device_sampled = 3,
  /// Resident (host) memory of the rank's processes: tasks declaring no device memory only.
  host_rss = 4,
};

/// "unknown", "unobserved", "workload", "device_sampled", "host_rss".
const char* to_string(memory_source s);

/// Whether the task declares the memory of one rank's device (limits.device_memory_bytes or
/// [hardware] gpu_memory_bytes > 0): its memory model then reads device-real peaks only
/// (workload-reported or sampled from the device), never host resident memory.
bool declares_device_memory(const task_spec& task);

/// A trial's peak memory per rank and where it came from.
struct memory_reading {
  /// Bytes of the most loaded rank; 0 when unobserved.
  std::uint64_t peak_bytes = 0;
  memory_source source = memory_source::unobserved;
};

/// The peak a trial's result carries, from what was measured (bytes, most loaded rank; 0 or
/// nullopt: not measured). A task that declares device memory: the workload's own peak, else
/// the peak nvidia-smi showed for the trial's processes, else unobserved (0) — host resident
/// memory never stands in for device memory. A task that declares none (a CPU job): the larger
/// of the workload's peak and the resident memory sampled (source workload when the workload's
/// is the larger or equal, host_rss otherwise), unobserved when both are 0.
memory_reading choose_peak_memory(bool device_memory_declared,
                                  std::optional<std::uint64_t> workload_peak_bytes,
                                  std::uint64_t device_sampled_peak_bytes,
                                  std::uint64_t host_rss_peak_bytes);

/// One reported step.
struct step_point {
  std::uint32_t step = 0;
  double loss = 0.0;
  std::uint64_t tokens = 0;
  double step_time_s = 0.0;
  /// The workload marked the step as warm-up.
  bool warmup = false;
  /// When the harness read the step's metrics line, seconds since launch (< 0: not observed).
  double observed_at_s = -1.0;
  /// The evaluation loss the workload reported with this step (metrics field `eval_loss`: loss on
  /// fixed held-out data, for contract.loss_mode eval); nullopt: none reported; NaN: reported
  /// but not a finite number.
  std::optional<double> eval_loss = std::nullopt;
};

/// What the workload's final line declares (json_lines workloads; all unset for regex ones).
struct declared_work {
  /// A final line was printed.
  bool final_seen = false;
  std::optional<std::uint64_t> global_batch;
  std::optional<std::uint64_t> params;
  std::optional<std::uint64_t> layers;
  /// "timed_steps": [first, last] inclusive.
  std::optional<std::pair<std::uint32_t, std::uint32_t>> timed_steps;
};

/// Why a trial runs (wire::Purpose; values equal).
enum class purpose_kind : std::uint8_t {
  unknown = 0,
  baseline = 1,
  explore = 2,
  verify_baseline = 3,
  verify_candidate = 4,
  /// The re-verified bundle (candidate_trial) with one change undone (round: the ablation's
  /// index, 1-based): decide/minimal_change.hpp.
  ablation = 5,
};

/// The label of a purpose: "baseline", "explore", "verify-baseline", "verify-candidate",
/// "ablation" ("" for unknown).
const char* label(purpose_kind k);

struct trial_record;

/// Sets t.kind, t.candidate_trial, t.round and t.purpose from a purpose written as text, as logs
/// before the structured purpose wrote it: "baseline", "explore", "verify-baseline/<id>" (round
/// 1), "verify-candidate/<id>#<round>", "ablation/<id>#<index>". Unknown text: kind unknown,
/// purpose kept as written.
void set_purpose_text(trial_record& t, const std::string& text);

/// A trial's purpose for people: "baseline", "explore", "verify-candidate/12" (round 1),
/// "verify-baseline/12#2" (round 2).
std::string purpose_text(const trial_record& t);

/// One trial attempt and what is known about it.
struct trial_record {
  std::uint64_t trial_id = 0;
  std::uint32_t attempt = 0;
  /// "baseline", "explore", "verify-baseline", "verify-candidate" (label(kind)).
  std::string purpose;
  purpose_kind kind = purpose_kind::unknown;
  /// verify-baseline / verify-candidate: the trial re-verified (an explore or ablation trial),
  /// and the round (1 or 2). ablation: the bundle's explore trial, and the ablation's index.
  std::uint64_t candidate_trial = 0;
  std::uint32_t round = 0;
  configuration config;
  /// Handed to a node-runner (TrialDispatched logged).
  bool dispatched = false;
  /// Set once the trial has ended.
  bool finished = false;
  trial_outcome outcome = trial_outcome::unset;
  std::vector<step_point> steps;
  /// The final line's declarations.
  declared_work declared;
  double wall_time_s = 0.0;
  double device_seconds = 0.0;
  /// Peak memory per rank the memory model may read, bytes (0: not measured); its source below.
  std::uint64_t peak_memory_bytes = 0;
  /// Where peak_memory_bytes came from (unknown: recorded before sources were logged).
  memory_source memory = memory_source::unknown;
  /// Peak resident (host) memory of the most loaded rank, bytes (0: not sampled or not logged);
  /// for people, never read by the memory model of a task that declares device memory.
  std::uint64_t host_peak_bytes = 0;
  std::string detail;
  /// Mean seconds per step of each phase the workload reported ("data", "forward", "backward",
  /// "optimizer", "communication"), over all reported steps.
  std::map<std::string, double> phase_s;
  /// Set once the verifier has checked it.
  bool verified = false;
  /// Contract violations found by the verifier (empty: passed).
  std::vector<std::string> violations;
  /// Median step time over the contract's timed window, seconds (0: not available).
  double timed_step_time_s = 0.0;

  /// Finished ok and passed the contract.
  [[nodiscard]] bool usable() const {
    return finished && outcome == trial_outcome::ok && verified && violations.empty()
           && timed_step_time_s > 0;
  }
};

} // namespace infrarsi::tuning
