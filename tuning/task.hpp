#pragma once
/// @file task.hpp
/// The task: everything about one tuning job that the launcher and the method need — the
/// workload and how to launch it, its knobs and how each renders into argv or environment, how
/// to read its metrics, and its limits. Pure data and pure functions (no I/O): the TOML file is
/// read by adapters/task_file.hpp; the reference is docs/task-contract.md.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace infrarsi::tuning {

/// A knob's value. Which alternative is used follows the knob's type.
using knob_value = std::variant<std::int64_t, double, bool, std::string>;

/// Knob assignment: knob name -> value, ordered by name (deterministic iteration).
using knob_assignment = std::map<std::string, knob_value>;

/// Type of a launch knob.
enum class knob_type : std::uint8_t {
  integer, ///< values: explicit list, or min..max (inclusive)
  real,    ///< values: explicit list, or min..max (inclusive)
  boolean, ///< false, true
  choice,  ///< one of an explicit list of strings
};

/// A launch knob: a setting that may change speed (or, for a numerics knob, the numbers) but
/// never the contracted work.
struct knob_spec {
  std::string name;
  knob_type type = knob_type::integer;
  /// Explicit domain (integer, real, choice). Empty: use min/max (integer, real).
  std::vector<knob_value> values;
  std::optional<double> min;
  std::optional<double> max;
  /// The baseline value (what the user runs today). Required.
  knob_value default_value = std::int64_t{0};
  /// Text a boolean renders to in templates. Defaults "1" and "0".
  std::string true_text = "1";
  std::string false_text = "0";
  /// Free-form tags, e.g. "memory-hungry", "memory-saver", "numerics".
  std::vector<std::string> tags;
  /// What the knob is in the parallel layout (task key `role`), read by the analytic prior
  /// (tuning/layout_prior.hpp): one of knob_roles(); "" (the default) for a knob the prior does
  /// not model. At most one knob per role.
  std::string role;
};

/// The knob roles the analytic layout prior understands, in a fixed order: "tp" (tensor-parallel
/// size), "pp" (pipeline-parallel stages), "vpp" (virtual stages per pipeline rank:
/// interleaving), "cp" (context-parallel size), "ep" (expert-parallel size), "dp"
/// (data-parallel size, when it is a knob rather than GPUs / (tp x pp x cp)), "micro_batch"
/// (sequences per micro-batch), "grad_accum" (micro-batches per step per data-parallel rank),
/// "recompute" (activation recomputation: a boolean, or a choice among "none", "selective",
/// "full"), "sequence_parallel" (a boolean), "zero_stage" (ZeRO / FSDP sharding stage 0..3),
/// "distributed_optimizer" (a boolean: optimizer states sharded over data parallelism, as
/// ZeRO stage 1).
const std::vector<std::string>& knob_roles();

/// How a trial's processes are started.
enum class launcher_kind : std::uint8_t {
  /// infrarsi starts `world_size` ranks itself with the torchrun environment contract
  /// (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
  ranks,
  /// One process; the user's command handles ranks itself (torchrun, srun, mpirun).
  command,
  /// `world_size` ranks as one Slurm job step (`srun`) of the allocation infrarsi runs in
  /// (SLURM_JOB_ID); each rank's torchrun variables come from Slurm's own (SLURM_PROCID, ...).
  /// Outside an allocation the trial is a launch_error (adapters/cluster_launch.hpp).
  slurm,
  /// One `torchrun` process that starts `world_size` ranks on this node (c10d rendezvous on a
  /// free port of 127.0.0.1) and sets their torchrun variables itself.
  torchrun,
};

/// The task-file name of a launcher ("ranks", "command", "slurm", "torchrun").
const char* to_string(launcher_kind kind);

/// When the ranks launcher gives a rank the torchrun environment contract (RANK, LOCAL_RANK,
/// WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Task key `workload.distributed_env`.
enum class distributed_env_kind : std::uint8_t {
  /// Every rank, also at world size 1 ("always"; the default, the behaviour before the key).
  always,
  /// Only when the trial has more than one rank ("multi_rank"): at world size 1 the process runs
  /// as the plain process a user starts by hand, with none of these variables in its
  /// environment (inherited ones removed too), so a script that switches to its distributed path
  /// when they exist runs its single-process path.
  multi_rank,
};

/// The knob value that means "leave this environment variable unset": an entry of
/// workload.env whose template is exactly `{knob}` is removed from the child's environment
/// (also when the harness's own environment has it) when the knob's value is this text.
inline constexpr const char* unset_env_value = "unset";

/// The workload and how to launch it. Templates may contain `{knob}` placeholders (and `{{`/`}}`
/// for literal braces); built-in placeholders: {trial_id}, {attempt}, {trial_dir}, {rank} (ranks
/// launcher only), {world_size}, {memory_cap_bytes}.
struct workload_spec {
  /// Working directory of the trial (absolute after loading).
  std::string workdir;
  launcher_kind launcher = launcher_kind::ranks;
  /// argv template; argv[0] is the program (looked up on PATH when it has no '/').
  std::vector<std::string> argv;
  /// Environment templates added to (and overriding) the inherited environment.
  std::map<std::string, std::string> env;
  /// Number of ranks (ranks, slurm, torchrun launchers) or devices a command uses (command
  /// launcher): a template,
  /// e.g. "{world_size}" or "2".
  std::string world_size = "1";
  /// Files the workload writes in its own directory at run time (checkpoints, caches, outputs it
  /// overwrites in place): globs relative to the workload directory, match_scope rules
  /// (adapters/environment.hpp). A trial's copy gives them, like the editable files, their own
  /// bytes; every other file may be a hard link to the original (docs/node-runner.md "The
  /// trial's copy of the workload"). Default: none.
  std::vector<std::string> writable;
  /// Whether the ranks launcher sets the torchrun variables at world size 1. Default always.
  distributed_env_kind distributed_env = distributed_env_kind::always;
  /// Slurm launcher: templates of extra srun options (e.g. "--nodes=2", "--cpus-per-task=2",
  /// "--mem-per-cpu=2G"), after infrarsi's own options. Never one infrarsi sets itself
  /// (adapters::reserved_srun_option). Default none.
  std::vector<std::string> srun_args;
  /// torchrun launcher: the program (with leading arguments) that is torchrun. Default
  /// {"torchrun"}; e.g. {"/usr/bin/python3", "-m", "torch.distributed.run"}.
  std::vector<std::string> torchrun_program = {"torchrun"};
  /// torchrun launcher: templates of extra torchrun options (e.g. "--monitor_interval=1"),
  /// never one infrarsi sets itself (adapters::reserved_torchrun_option). Default none.
  std::vector<std::string> torchrun_args;
};

/// How to read per-step metrics from the workload's output.
struct metrics_spec {
  enum class format_kind : std::uint8_t { json_lines, regex };
  format_kind format = format_kind::json_lines;
  /// json_lines: lines starting with this prefix carry one JSON object.
  std::string prefix = "INFRARSI_METRICS ";
  /// regex: ECMAScript regular expression matched against every stdout line of the reporting
  /// rank; capture groups map to `regex_fields` in order.
  std::string regex;
  /// Field of each capture group: step, loss, tokens, step_time_s, step_time_ms,
  /// peak_memory_bytes, peak_memory_mb.
  std::vector<std::string> regex_fields;
  /// Tokens per step when the output does not report them (regex scripts); 0: unknown.
  std::uint64_t tokens_per_step = 0;
  /// Rank whose stdout carries the metrics. Default 0.
  int reporting_rank = 0;
  /// json_lines: the trial is ok only if a final line {"event":"final","status":"ok"} was seen.
  bool require_final_line = true;
  /// Substrings that mark an out-of-memory failure in any rank's stdout or stderr.
  std::vector<std::string> oom_patterns = {"INFRARSI_OOM",
                                           "CUDA out of memory",
                                           "OutOfMemoryError",
                                           "DefaultCPUAllocator: can't allocate memory",
                                           "MemoryError"};
  /// Exit statuses that mean out-of-memory. Default {86} (workloads/torch_gpt).
  std::vector<int> oom_exit_codes = {86};
};

/// Limits of one trial.
struct limits_spec {
  /// Wall-clock limit of a trial in seconds. Default 600.
  double timeout_s = 600.0;
  /// Per-rank memory cap in bytes (resident set of the rank's process tree); 0: none.
  std::uint64_t memory_cap_bytes = 0;
  /// Memory one rank's device has, bytes (e.g. a GPU's HBM); 0: unknown. Not enforced: it is
  /// the capacity at which the planner's censored memory model places out-of-memory trials.
  /// When 0, memory_cap_bytes is used.
  std::uint64_t device_memory_bytes = 0;
  /// Seconds between SIGTERM and SIGKILL when a trial is stopped. Default 3.
  double kill_grace_s = 3.0;
  /// Read from task files and kept (old task files and logged task texts still load), but no
  /// longer decides the outcome: a start-up failure is a launch_error by its phase (before the
  /// reporting rank's first metrics line), whatever the clock says (adapters/classify.hpp).
  /// Seconds. Default 3.
  double launch_window_s = 3.0;
};

/// The hardware a task runs on, as declared in its `[hardware]` table (docs/experience.md,
/// "Identity"). The experience bank files a run's findings under it and serves findings by the
/// similarity rule over it (tuning/experience_identity.hpp). A simulator task declares the
/// hardware it simulates; a task without the table is described from the node (the GPUs the
/// driver lists, else the CPU).
struct hardware_spec {
  /// True when the task has a `[hardware]` table.
  bool declared = false;
  /// GPU model as the vendor names it, e.g. "H100-80GB", "A100-SXM4-80GB" (required).
  std::string gpu;
  /// Memory of one GPU, bytes; 0: limits.device_memory_bytes.
  std::uint64_t gpu_memory_bytes = 0;
  /// GPUs per node (>= 1) and nodes (>= 1).
  std::uint32_t gpus_per_node = 1;
  std::uint32_t nodes = 1;
  /// Interconnect within and between nodes, free text ("nvlink", "nvlink+infiniband"); may be "".
  std::string interconnect;
  /// CPU model; may be "".
  std::string cpu;
  /// Dense 16-bit peak of one GPU, TFLOP/s; 0: from the GPU's name (tuning/layout_prior.hpp's
  /// table of vendor datasheet figures), unknown names: no analytic prior.
  double peak_tflops = 0.0;
  /// Bandwidth of one GPU to the other GPUs of its node, and of one node (all its NICs) to the
  /// other nodes, bytes per second (task keys `intra_node_gb_per_s`, `inter_node_gb_per_s`, in
  /// GB/s); 0: from `interconnect` (tuning/layout_prior.hpp).
  double intra_node_bytes_per_s = 0.0;
  double inter_node_bytes_per_s = 0.0;
  /// The hardware is simulated (infrarsi-sim): findings are filed under it all the same.
  bool simulated = false;
  /// Software versions the workload runs with, e.g. {"torch": "2.4", "cuda": "12.4", "nccl":
  /// "2.21"}; recorded with each finding, not part of the similarity rule.
  std::map<std::string, std::string> software;
};

/// The model a task trains, as declared in its `[model]` table: the workload signature the bank
/// matches findings by (tuning/experience_identity.hpp). Without the table a task's findings
/// match only runs of a task of the same name.
struct model_spec {
  /// True when the task has a `[model]` table.
  bool declared = false;
  /// Model name, e.g. "yi-9b" (required in the table).
  std::string name;
  /// "dense" or "moe" (default "dense").
  std::string architecture = "dense";
  /// Shape: integer keys among layers, hidden, heads, kv_heads, ffn, experts, experts_per_token,
  /// vocab, seq_len, global_batch (each >= 1).
  std::map<std::string, std::int64_t> shape;
  /// How attention is computed (task key `attention`): "flash" (FlashAttention and fused SDPA
  /// kernels, which store no s x s score matrix) or "eager" (the default: the scores, softmax
  /// and dropout mask are stored, as in Korthikanti et al. 2022). Read by the analytic prior's
  /// activation memory (tuning/layout_prior.hpp).
  std::string attention = "eager";
};

/// A candidate code patch: a unified diff applied in the trial's copy of the workload.
struct patch_spec {
  std::string name;
  /// Absolute path of the diff.
  std::string file;
  std::string description;
};

/// How a trial's loss is compared with the baseline's (contract.loss_mode; docs/task-contract.md
/// "Loss invariants"). This enum only grows.
enum class loss_mode : std::uint8_t {
  /// "pointwise": the training loss at each checkpoint step, within max(atol, rtol x |ref|,
  /// 3 x the repeats' spread). Right for a bit-deterministic job whose trials see the same
  /// samples in the same order; it rejects an honest batch split that reports another
  /// micro-batch's loss.
  pointwise = 0,
  /// "window": the mean training loss over each window of contract.loss_window steps, within a
  /// tolerance from the within-window variation of the trial and the baseline and the
  /// between-repeat variation of the baseline (tuning::window_tolerance).
  window = 1,
  /// "eval": a workload-reported evaluation loss on fixed data (metrics field `eval_loss`) at
  /// contract.eval_steps, pointwise against the baselines' (rule of `pointwise`).
  eval = 2,
};

/// "pointwise", "window" or "eval".
const char* to_string(loss_mode mode);

/// The mode named `name` (to_string), or nullopt.
std::optional<loss_mode> parse_loss_mode(const std::string& name);

/// The task contract proper (what "the same work with the same numerics" means). Fixed at init;
/// nothing later may change it.
struct contract_spec {
  /// Optimizer steps every trial must report (0: not checked).
  std::uint32_t steps = 0;
  /// Tokens every step must report, whole global batch (0: not checked).
  std::uint64_t tokens_per_step = 0;
  /// Inclusive window of steps whose step times are timed; warm-up steps before it are excluded.
  std::uint32_t timed_first = 0;
  std::uint32_t timed_last = 0;
  /// Steps whose loss is compared with the baseline's reference (empty: every step).
  std::vector<std::uint32_t> loss_checkpoints;
  /// |loss - reference| must be <= max(loss_atol, loss_rtol * |reference|, calibrated spread)
  /// (window mode: the window's statistical tolerance instead of the spread).
  double loss_rtol = 1e-4;
  double loss_atol = 1e-6;
  /// Which loss invariant holds (loss_mode). Default pointwise, as before the key existed.
  tuning::loss_mode loss_mode = tuning::loss_mode::pointwise;
  /// window mode: steps per window (>= 2); windows [0, N-1], [N, 2N-1], ...; the last window
  /// takes the steps that do not fill one (tuning::loss_windows). 0 outside window mode.
  std::uint32_t loss_window = 0;
  /// eval mode: steps whose eval loss is compared (empty: every step at which the baselines
  /// reported one).
  std::vector<std::uint32_t> eval_steps;
  /// Reported time must agree with wall time: the sum of step times may not exceed the trial's
  /// wall time by more than this fraction. Default 0.10.
  double wall_tolerance = 0.10;
  /// The work the workload's final line must declare where it reports it (0: not checked):
  /// sequences per optimizer step over all ranks, parameter count, layer count.
  std::uint64_t global_batch = 0;
  std::uint64_t params = 0;
  std::uint32_t layers = 0;
  /// Harness-clock cross-check of the timed window: the reported step times of the window must
  /// agree with the intervals between the arrivals of their metrics lines (read by the
  /// node-runner) within this fraction. Default 0.10. Catches fake timers and unit slips.
  double clock_tolerance = 0.10;
  /// Whether the clock cross-check applies. Default true. Set false only for workloads that
  /// cannot print their metrics lines as the steps end (the report then says it was waived).
  bool clock_check = true;
  /// The reported step times are simulated seconds (workloads/sim), not wall-clock seconds:
  /// every check against the harness clock or the trial's wall time is skipped. Default false.
  bool simulated_time = false;
};

/// Which files a candidate may change (globs relative to the workload directory).
struct scope_spec {
  std::vector<std::string> editable;
  std::vector<std::string> frozen;
};

/// What one tuning run may spend.
struct budget_spec {
  /// Trials of the search stage (baseline and re-verification runs not included). Default 20.
  std::uint32_t trials = 20;
  /// Wall-clock limit of the whole run in seconds. Default 3600.
  double wall_clock_s = 3600.0;
  /// Baseline repeats in the doctor stage. Default 3.
  std::uint32_t baseline_repeats = 3;
  /// Candidates re-verified against the baseline. Default 2.
  std::uint32_t verify_top = 2;
  /// Interleaved baseline/candidate pairs per re-verification (the adaptive measurement rule:
  /// per look of the sequential test). Default 3.
  std::uint32_t verify_repeats = 3;
  /// The minimum detectable speedup the doctor aims for, as a fraction (0.03 = 3 %): it repeats
  /// the baseline until the doctor's minimum detectable speedup is at most this, or
  /// max_baseline_repeats (docs/tune.md "Measurement that adapts"). In (0, 1). Default 0.03.
  double target_mds = 0.03;
  /// The doctor's baseline runs at most (>= baseline_repeats). Default 12.
  std::uint32_t max_baseline_repeats = 12;
  /// Interleaved pairs per candidate and round at most: the sequential test's last look (a
  /// multiple of verify_repeats, at most 16 looks). Default 8 x verify_repeats (24).
  std::uint32_t max_verify_repeats = 24;
  /// Ablations before promotion at most (the minimal promoted change, docs/planner.md): the
  /// re-verified winner with one change undone, least credited by the time model first, each
  /// measured once and then re-verified like a candidate; 0: promote the bundle as measured.
  /// In [0, 16]. Default 2.
  std::uint32_t ablations = 2;
  /// Seed of every random choice. Default 0.
  std::uint64_t seed = 0;
  /// The search policy a new run uses (a name of tuning::policy_names(), e.g. "bayes_ei/3");
  /// empty: tuning::default_policy_name. Recorded at init (ContractLocked `policy`), so a resume
  /// and a replay keep it whatever the default becomes.
  std::string policy;
};

/// The llm-proposer's endpoint: an OpenAI-compatible `POST {base_url}/chat/completions`
/// (vLLM, llama.cpp server, Ollama, hosted services). Read from the task file's `[llm]` table;
/// absent (enabled false) means the offline knowledge base. Reference: docs/llm.md.
struct llm_spec {
  /// Whether the task has an `[llm]` table.
  bool enabled = false;
  /// "http://127.0.0.1:8000/v1" or "https://api.example.com/v1" (no trailing "/chat/completions").
  std::string base_url;
  /// The model name sent in each request.
  std::string model;
  /// Sampling temperature, [0, 2]. Default 0.
  double temperature = 0.0;
  /// Completion tokens per request at most (the request's max_tokens), [1, 1000000]. Default 4096.
  std::uint64_t max_tokens = 4096;
  /// Total time of one HTTP attempt, seconds, (0, 3600]. Default 120.
  double timeout_s = 120.0;
  /// Time to connect, seconds, (0, 600]. Default 10.
  double connect_timeout_s = 10.0;
  /// HTTP requests per run at most (retries included), [1, 1000]. Default 16.
  std::uint64_t max_calls = 16;
  /// Tokens (prompt + completion, from each answer's `usage`) per run at most; no request is
  /// sent once they are spent. [1, 10^9]. Default 200000.
  std::uint64_t max_tokens_per_run = 200000;
  /// Name of the environment variable holding the API key ("" = send no Authorization header).
  /// The key itself is never in a task file, an event, a report or any output.
  std::string api_key_env;
  /// Bytes of one answer at most: the transfer is aborted past it. Default 4 MiB, at most 256 MiB.
  std::uint64_t max_response_bytes = 4u << 20;
  /// Retries of one request after a 429, a 5xx or a transport error (exponential backoff with
  /// jitter, honouring Retry-After in seconds), [0, 10]. Default 3.
  std::uint64_t retries = 3;
  /// Re-asks after an answer that is not valid (malformed JSON, wrong schema), [0, 5]; then the
  /// run goes on with the fallback priors. Default 1.
  std::uint64_t answer_retries = 1;
  /// Whether to ask for code patches as well as priors. Default true.
  bool patches = true;
  /// Bytes of editable files quoted in the patch prompt at most (each file is cut to what is
  /// left). Default 64 KiB.
  std::uint64_t max_prompt_file_bytes = 64u << 10;
  /// Bytes of one proposed diff at most. Default 64 KiB.
  std::uint64_t max_patch_bytes = 64u << 10;
  /// Rounds (docs/llm.md "Rounds"): during the search the model is asked again, with what was
  /// measured (failures and contract violations included), every `rounds_every` finished search
  /// trials (0: never for that reason), [0, 10000]. Default 0.
  std::uint64_t rounds_every = 0;
  /// ... and when the search stalls: after this many finished search trials in a row without a
  /// better usable one (0: never for that reason), [0, 10000]. Default 0.
  std::uint64_t rounds_on_stall = 0;
  /// Rounds after the one at init at most, [0, 100]. Default 3.
  std::uint64_t max_rounds = 3;
};

/// A cheap launch of the same training code (the task file's [smoke] section): how a patch that
/// has never run in a usable trial is probed before its full trial (the node-runner's smoke
/// probe, docs/node-runner.md "Smoke probe"). The probe runs this launch twice in the trial's
/// directory, unpatched and patched, and checks the patched run's contract against the unpatched
/// one (tuning::smoke_violation): a patch that changes the numerics or the work ends its trial
/// as contract_violation at the cost of two small launches instead of a full one.
struct smoke_spec {
  /// Replaces workload.argv (same placeholders: knobs, constants, built-ins); e.g. the job with
  /// two layers on one GPU for three steps.
  std::vector<std::string> argv;
  /// Replaces workload.world_size (a positive integer or a template).
  std::string world_size = "1";
  /// The task's contract with the [smoke] keys in place of its own: steps, tokens_per_step,
  /// global_batch, params, layers (0 unless given: the full job's values do not hold for the small
  /// one), loss_rtol and loss_atol; every step is a loss checkpoint and timed.
  contract_spec contract;
  /// Wall-clock limit of each smoke launch, seconds (default: limits.timeout_s).
  double timeout_s = 0.0;
};

/// One tuning task.
struct task_spec {
  std::string name;
  /// Name of the offline knowledge-base entry for priors (config/knowledge/<knowledge>.toml).
  /// Defaults to `name`.
  std::string knowledge;
  /// Absolute path of the file the task was read from ("" when built in code).
  std::string source;
  workload_spec workload;
  std::vector<knob_spec> knobs;
  metrics_spec metrics;
  limits_spec limits;
  std::vector<patch_spec> patches;
  /// Fixed values usable in templates and constraints (e.g. global_batch = 16).
  std::map<std::string, knob_value> constants;
  /// Constraint expressions between knobs and constants (tuning/expr.hpp), checked before launch.
  std::vector<std::string> constraints;
  contract_spec contract;
  scope_spec scope;
  budget_spec budget;
  llm_spec llm;
  hardware_spec hardware;
  model_spec model;
  /// [smoke]: the probe launch of untested patches; nullopt when the task has none.
  std::optional<smoke_spec> smoke;

  /// The knob named `name`, or nullptr.
  [[nodiscard]] const knob_spec* find_knob(const std::string& knob_name) const;
  /// The patch named `name`, or nullptr.
  [[nodiscard]] const patch_spec* find_patch(const std::string& patch_name) const;
  /// Every knob at its default value.
  [[nodiscard]] knob_assignment default_assignment() const;
};

/// The task as its [smoke] launch runs it (task.smoke must be set): workload.argv,
/// workload.world_size and the contract replaced by the smoke_spec's, no [smoke] of its own. The
/// smoke probe (adapters::run_trial), the simulator benchmark and `infrarsi check --smoke` launch
/// this task.
task_spec smoke_task(const task_spec& task);

/// Human-readable text of a value ("4", "0.5", "true", "sdpa").
std::string to_string(const knob_value& value);

/// Name of a knob type ("int", "real", "bool", "choice").
const char* to_string(knob_type type);

/// Whether `value` lies in the knob's domain (type and range or list). On failure `why` says what
/// was expected, e.g. "one of 1, 2, 4, 8".
bool in_domain(const knob_spec& knob, const knob_value& value, std::string& why);

/// Parses command-line text for a knob ("4", "true", "sdpa") into a value of the knob's type.
/// Returns nullopt and sets `why` when the text does not fit the type.
std::optional<knob_value> parse_knob_text(const knob_spec& knob, const std::string& text,
                                          std::string& why);

/// Renders a template: `{name}` is replaced by `vars.at(name)`; `{{` and `}}` are literal braces.
/// Returns nullopt and sets `why` on an unknown placeholder or an unbalanced brace.
std::optional<std::string> render_template(const std::string& tmpl,
                                           const std::map<std::string, std::string>& vars,
                                           std::string& why);

/// The template variables of an assignment: the task's constants, each knob's rendered text
/// (booleans as their true_text/false_text) and the given built-ins.
std::map<std::string, std::string> template_vars(const task_spec& task,
                                                 const knob_assignment& assignment,
                                                 std::map<std::string, std::string> builtins);

/// Ranks (ranks launcher) or devices (command launcher) of a trial: task.workload.world_size
/// rendered with template_vars(task, assignment, builtins), an integer in 1..4096. The trial
/// launcher starts that many ranks and charges wall time times this in device-seconds; a lost
/// attempt is charged with it too (decide/resources.hpp). Returns nullopt and sets `why` (e.g.
/// "workload.world_size renders to 'x', expected an integer in 1..4096") when it does not render.
std::optional<int> world_size_of(const task_spec& task, const knob_assignment& assignment,
                                 const std::map<std::string, std::string>& builtins,
                                 std::string& why);

/// A rendered world size `text` as an integer in 1..4096 (world_size_of's rule); nullopt with
/// `why` = "renders to 'TEXT', expected an integer in 1..4096" otherwise.
std::optional<int> world_size_value(const std::string& text, std::string& why);

/// Whether `knob` may take the value unset_env_value ("unset"): a choice knob that lists it.
bool may_be_unset(const knob_spec& knob);

/// The knob whose placeholder is the whole template (exactly "{name}"), or nullptr (text around
/// it, several placeholders, a constant or a built-in).
const knob_spec* sole_knob_of(const task_spec& task, const std::string& tmpl);

} // namespace infrarsi::tuning
