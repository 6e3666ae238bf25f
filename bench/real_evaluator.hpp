#pragma once
/// @file real_evaluator.hpp
/// The benchmark evaluator for a task with a real workload (any task that is not a simulator
/// task, e.g. bench/tasks/torch_gpt_search.toml), and the exhaustive measurement of its knob
/// grid that serves as its truth (bench/README.md "Real CPU workload").
///
/// A trial is run and judged exactly as `infrarsi tune` runs and judges it, in process:
///  1. launched by the node-runner's launcher (adapters::run_trial) in a fresh copy of the
///     workload directory taken under the task's scope lock (SHA-256 of every editable and
///     frozen file, hashed once when the evaluator is created, as init does), with the
///     configuration's patches applied; a patch outside the editable scope, a broken constraint
///     or a knob the task does not have ends the trial before launch, as the node-runner ends it;
///  2. its TrialProposed, TrialDispatched and TrialCompleted events are folded by the run
///     projection (store::run_projection), so the record holds what the event log would;
///  3. the doctor: when the run's `reference_baselines`-th trial of purpose "baseline" has
///     ended (or before the first trial of another purpose, from the baselines there are), the
///     verifier's calibration (decide::calibrate_doc: tuning::make_loss_reference over those
///     baselines) is folded as BaselineCalibrated;
///  4. the verifier's verdict (decide::check_doc: tuning::check_contract against that reference)
///     is folded as TrialVerified. Baselines that end before the reference exists are judged on
///     everything but the loss (work, timing window, clocks); their loss is the reference.
/// Step times are this machine's wall-clock seconds; device-seconds are the launcher's (wall
/// time x ranks). The run's noise is the machine's own: begin_run's seed is not used for it.
///
/// The oracle is the grid file written by measure_grid(): the median timed step time of every
/// knob assignment (no patches) over repeated, interleaved measurements. A configuration with
/// patches has no exhaustive truth: true_step_time() gives nullopt for it and has_truth() says
/// so; the benchmark driver then scores a promoted patched configuration by its re-verified
/// measured speedup and marks it as measured.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/evaluator.hpp"
#include "store/run_projection.hpp"
#include "tuning/task.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::bench {

/// Format tag of the grid file (measure_grid's output).
inline constexpr const char* real_grid_format = "infrarsi-real-grid/1";

/// How a real_evaluator runs and where its truth comes from. Defaults inline.
struct real_evaluator_options {
  /// The grid file of the task (measure_grid's output). Required unless `require_grid` is false.
  std::string grid_file;
  /// Whether create() fails when `grid_file` is missing or unreadable (default true). Off for
  /// the grid measurement itself; the oracle functions then throw std::logic_error.
  bool require_grid = true;
  /// The command that writes `grid_file`, named in the error when it is missing.
  std::string grid_command;
  /// Directory under which each trial's directory (rank logs, the patched copy) is created as
  /// run-<n>/trial-<id>-<attempt>. "" (default): a fresh directory under the system temporary
  /// directory, removed with the evaluator.
  std::string trials_root;
  /// Keep every trial directory (default false: a usable trial's directory is removed once its
  /// record is folded; a failed trial keeps its logs and loses only its copy of the workload).
  bool keep_trials = false;
  /// Baseline trials the loss reference is made of (the doctor's count). Default 3.
  std::size_t reference_baselines = 3;
};

/// Default location of a task's grid file: SOURCE_DIR/bench/results/<task name>_grid.json.
std::string default_grid_file(const std::string& source_dir, const std::string& task_name);

/// Evaluator of one real task (see the file comment).
class real_evaluator final : public evaluator {
public:
  /// Creates the evaluator of `task` (loaded from its file): hashes the scope (its workdir must
  /// exist), finds the patch pairs that do not apply together (adapters::patch_conflicts, in a
  /// scratch copy) and reads the grid file. Returns nullptr and sets `why` when the task is a
  /// simulator task, a scope file cannot be hashed, the patches cannot be checked, or the grid
  /// file is required and missing (the message names options.grid_command), unreadable, of
  /// another format, of another task, or names a knob or value the task does not have.
  static std::unique_ptr<real_evaluator> create(tuning::task_spec task,
                                                const real_evaluator_options& options,
                                                std::string& why);
  ~real_evaluator() override;
  real_evaluator(const real_evaluator&) = delete;
  real_evaluator& operator=(const real_evaluator&) = delete;

  [[nodiscard]] const tuning::task_spec& task() const override { return task_; }
  /// Starts a new run: an empty event stream (trial ids may repeat between runs), no reference.
  void begin_run(std::uint64_t seed) override;
  /// Runs the trial for real (see the file comment); seconds of wall clock per trial plus the
  /// workload's own run time. Throws std::runtime_error when the loss reference is needed and
  /// no baseline trial of the run completed its timed window.
  [[nodiscard]] tuning::trial_record measure(const tuning::configuration& config,
                                             std::uint64_t trial_id, std::uint32_t attempt,
                                             const std::string& purpose,
                                             const tuning::loss_reference* early_stop =
                                               nullptr,
                                             const std::vector<std::string>& smoke_patches =
                                               {}) override;
  /// The grid median of a knob-only configuration whose every repeat passed; nullopt for a
  /// configuration with patches (no exhaustive truth), one outside the grid or one the grid saw
  /// fail or break the contract.
  [[nodiscard]] std::optional<double> true_step_time(const tuning::configuration& config) override;
  /// The fastest usable grid entry (knob assignments only: see the file comment).
  [[nodiscard]] double optimum_step_time() override;
  [[nodiscard]] std::string optimum_description() override;
  [[nodiscard]] std::uint64_t optimum_space_size() override;
  [[nodiscard]] double baseline_true_step_time() override;
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> incompatible_patches() override {
    return incompatible_;
  }

  /// Whether true_step_time() can know `config` at all: it has no patches and its knob
  /// assignment is in the grid. False means "no exhaustive truth", not "unusable".
  [[nodiscard]] bool has_truth(const tuning::configuration& config) const;

  /// The grid file's document (null when none was read).
  [[nodiscard]] const nlohmann::json& grid() const { return grid_doc_; }
  /// The grid file read, "" when none.
  [[nodiscard]] const std::string& grid_file() const { return grid_file_; }

  /// Baseline trials the loss reference is made of (options.reference_baselines).
  [[nodiscard]] std::size_t reference_baselines() const { return options_.reference_baselines; }

  /// The run so far as the event log's projection holds it (trials, reference, noise).
  [[nodiscard]] const store::run_state& run() const { return projection_->state(); }

private:
  real_evaluator(tuning::task_spec task, real_evaluator_options options);

  /// One grid entry as the oracle uses it.
  struct grid_entry {
    bool usable = false;
    double median_step_s = 0;
  };

  void fold(std::uint16_t kind, const messages::byte_buffer& payload);
  void fold_document(std::uint16_t kind, const std::string& schema, const std::string& json);
  void calibrate();
  void verify(std::uint64_t trial_id, std::uint32_t attempt);
  void need_grid(const char* what) const;
  [[nodiscard]] std::string key_of(const tuning::configuration& config) const;

  tuning::task_spec task_;
  real_evaluator_options options_;
  std::map<std::string, std::string> scope_lock_;
  std::vector<std::pair<std::string, std::string>> incompatible_;
  std::string root_;        ///< trials root
  bool own_root_ = false;   ///< created here, removed by the destructor
  std::uint64_t run_index_ = 0;
  std::unique_ptr<store::run_projection> projection_;
  std::uint64_t sequence_ = 0;
  bool calibrated_ = false;

  std::string grid_file_;
  nlohmann::json grid_doc_;
  std::map<std::string, grid_entry> grid_;
  std::string baseline_key_;
  double optimum_step_s_ = 0;
  std::string optimum_text_;
};

/// Options of measure_grid. Defaults inline.
struct grid_options {
  /// Measurements per knob assignment, each in its own round (default 3).
  std::uint32_t repeats = 3;
  /// Measure only the first N assignments of the grid (baseline first, then the others in task
  /// order); 0 (default): all. The file then says "complete": false.
  std::size_t limit = 0;
  /// Where to write the grid file (rewritten after every round, so a stopped measurement leaves
  /// the rounds it finished).
  std::string out;
  /// Recorded in the file (how it was made).
  std::string command;
  /// The task file, as recorded in the file.
  std::string task_file;
  /// No progress lines.
  bool quiet = false;
};

/// Every knob assignment of `task` (the values tuning::search_values gives each knob), baseline
/// first, then the rest in order: the task's first knob varies fastest, the last slowest.
std::vector<tuning::configuration> knob_grid(const tuning::task_spec& task);

/// The exhaustive measurement (bench/README.md "Real CPU workload"): `evaluator` (a fresh
/// real_evaluator, grid not required) first measures options.reference_baselines baseline trials
/// (the loss reference; recorded under "reference_trials"), then every assignment of
/// knob_grid() (the first `limit`) once per round for `repeats` rounds, round r in the grid's
/// order rotated by r, so that no configuration's repeats run back to back. An assignment that
/// breaks a task constraint is recorded as refused and not launched. Each measurement is
/// checked against the contract. Writes options.out (json, format real_grid_format): the
/// machine (cores, CPU, memory, load average before and after, dates), the settings, per
/// assignment: knobs, change from the baseline, per-repeat timed step times / outcomes / peak
/// memory / device-seconds / first violation, the median over the usable repeats, an overall
/// outcome (ok when every repeat passed, else the first failure's) and the fastest usable
/// assignment. Progress on `progress`. Returns 0, or 1 with the reason on `progress` when the
/// file cannot be written or the reference baselines do not run.
int measure_grid(real_evaluator& evaluator, const grid_options& options, std::ostream& progress);

} // namespace infrarsi::bench
