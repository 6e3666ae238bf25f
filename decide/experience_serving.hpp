#pragma once
/// @file experience_serving.hpp
/// Which findings of the experience bank a run is served (issue 16, parts 2 and 3;
/// docs/experience.md, "Identity" and "Serving"). Pure and deterministic: the curator actor,
/// the benchmark driver and the tests call these functions; nothing here reads the bank.
///
/// Identity. A run files its findings under two structured documents logged in ContractLocked:
/// - hardware_identity: {"gpu", "gpu_family", "gpu_memory_bytes", "gpus_per_node", "nodes",
///   "interconnect", "cpu", "simulated", "software", "declared"} from the task's `[hardware]`
///   table (a simulator task declares what it simulates), else from the node's description;
/// - workload_identity: {"model", "architecture", "shape", "layout", "class"}: the model from the
///   task's `[model]` table (else the task's name), and the parallel layout class (the task's
///   knobs tagged "parallelism", sorted, and the GPU count). "class" is a hash of all of it: two
///   runs train the same workload when their classes are equal.
///
/// Similarity rule (hardware_match), best first:
///   same_model          the same GPU model (vendor name), GPUs per node and nodes;
///   same_family_memory  the same GPU family (architecture generation: gpu_family) and the same
///                       memory class (the larger per-GPU memory at most twice the smaller);
///   other               anything else (another family, or memories more than 2x apart).
/// The rule is ours (no published source); it encodes that a setting's speed and memory effects
/// transfer across GPUs of one generation with room for the same activations.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tuning/priors.hpp"
#include "tuning/task.hpp"

namespace infrarsi::decide {

/// Rank of a finding's hardware against the run's, best first (see the file comment).
enum class hardware_match : std::uint8_t { same_model = 0, same_family_memory = 1, other = 2 };

/// "same GPU model", "same family and memory class", "other hardware".
const char* to_string(hardware_match m);

/// What the curator serves (`infrarsi tune --experience`):
///   filtered  findings for the same workload class, best hardware rank first (same_model,
///             then same_family_memory, then other), then best verified speedup (the default).
///             Findings on other hardware are served after every similar one, not dropped: the
///             transfer experiment (bench/README.md "Transfer") measured that a run with no
///             similar hardware in the bank gains from them as much as from similar hardware;
///   all       every finding of the bank, whatever its hardware and workload, best verified
///             speedup first (the naive bank: seeds outside the task's space are refused, with
///             the reason, like any other);
///   none      nothing (a cold start).
enum class experience_mode : std::uint8_t { filtered = 0, all = 1, none = 2 };

const char* to_string(experience_mode m);
/// Parses "filtered", "all" or "none"; nullopt otherwise.
std::optional<experience_mode> parse_experience_mode(const std::string& text);

/// GPU family (architecture generation) of a GPU model name, case-insensitive by substring:
/// V100 "volta"; A100, A10, A30, A40, A6000, RTX 30xx "ampere"; L4, L40, RTX 40xx "ada";
/// H100, H200, H800, H20, GH200 "hopper"; B100, B200, GB200 "blackwell"; MI250 "cdna2";
/// MI300 "cdna3". Anything else: the name itself, lower-cased (a family of one model).
std::string gpu_family(const std::string& gpu);

/// The run's hardware identity (see the file comment). `node` is the node's description
/// (adapters::hardware_description: "cpu", "gpus" [model names], ...), used when the task does
/// not declare `[hardware]`: the first GPU's model and their count on one node, else "cpu:" and
/// the CPU model. gpu_memory_bytes falls back to task.limits.device_memory_bytes.
nlohmann::json hardware_identity(const tuning::task_spec& task, const nlohmann::json& node);

/// Fingerprint of a declared hardware identity: 16 hex digits of SHA-256 over its gpu,
/// gpu_memory_bytes, gpus_per_node, nodes and interconnect. Only for tasks with `[hardware]`
/// (the supervisor uses adapters::hardware_fingerprint of the node otherwise).
std::string declared_hardware_fingerprint(const nlohmann::json& identity);

/// The fingerprint a run's findings are filed under: declared_hardware_fingerprint of the
/// declared hardware for a task with `[hardware]`, else adapters::hardware_fingerprint(node).
std::string run_hardware_fingerprint(const tuning::task_spec& task, const nlohmann::json& node);

/// The task's workload identity (see the file comment).
nlohmann::json workload_identity(const tuning::task_spec& task);

/// Rank of hardware `finding` against the run's `run` (both hardware_identity documents).
hardware_match match_hardware(const nlohmann::json& finding, const nlohmann::json& run);

/// The run's side of serving: its identities, exact keys and the mode.
struct serving_request {
  nlohmann::json hardware_identity = nlohmann::json::object();
  nlohmann::json workload_identity = nlohmann::json::object();
  /// ContractLocked's hardware_fingerprint and workload_signature: a finding without identity
  /// documents (logged before them) matches only on these, as same_model.
  std::string hardware_fingerprint;
  std::string workload_signature;
  experience_mode mode = experience_mode::filtered;
};

/// The experience pack to log as ExperienceSeeded (Document "experience_pack/1"):
///   {"hardware", "workload" (the exact keys), "hardware_identity", "workload_identity",
///    "mode", "serving": "propose-or-explain/1",
///    "seeds": [{"config", "speedup", "ci_low", "run", "position", "origin_hardware" (its GPU or
///               fingerprint), "match" (to_string(hardware_match)), "same_workload",
///               "peak_memory_bytes" (when the finding has it), "origin" (the cluster that
///               found it, for banks that record it; "position" is then its origin position
///               when it was imported)}],
///    "served_by_match": {to_string(hardware_match): N, ...},
///    "not_served": {"other_workload": N},
///    "prior_adjustment" (only when a served finding of the same workload on the same GPU model
///    carries "effects"; the first such in serving order): {"run", "origin" (when
///    recorded), "origin_hardware", "match", "effects": [{"feature", "speedup" (the finding's
///    revised speedup), "log_sd", "trials"}], "memory": [{"feature", "bytes"}] (its memory
///    prices, when its memory model was fitted)}}
/// from `records` (experience_bank::records() documents). Order: filtered by match rank, then
/// speedup (highest first), then position; all by speedup, then position. Findings with the same
/// configuration are served once (the first in that order).
nlohmann::json experience_pack(const std::vector<nlohmann::json>& records,
                               const serving_request& request);

/// The priors a run uses once its pack is served: `priors` with each setting and patch of the
/// pack's "prior_adjustment" set to what that finding's models learnt (speedup: its revised
/// speedup; memory_bytes: its memory price in bytes, when it has one; source
/// "experience:RUN (GPU, MATCH)"). Features the task does not have (another knob value, a patch
/// it lacks) are skipped. std::nullopt when the pack has no adjustment or nothing changes.
/// Pure: the supervisor appends the result as PriorsLoaded in the ExperienceSeeded batch, replay
/// recomputes it, the benchmark's driver calls it too.
std::optional<tuning::prior_set> experience_priors(const tuning::task_spec& task,
                                                   const tuning::prior_set& priors,
                                                   const nlohmann::json& pack);

/// One line about a pack (experience_pack's document, or the report's "experience" summary with
/// its "served" count): "2 seed(s) served (1 same GPU model, 1
/// other hardware); 3 finding(s) of other workloads not served". For the progress line and the
/// report.
std::string experience_pack_text(const nlohmann::json& pack);

} // namespace infrarsi::decide
