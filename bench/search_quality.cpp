/// @file search_quality.cpp
/// infrarsi_search_quality: the search-quality benchmark (issue 6; bench/README.md). Runs every
/// search policy on the paper-like simulator tasks with several seeds and a fixed trial budget,
/// promotes with one rule for all policies, and scores the promoted configuration's true
/// (noise-free) speedup against the exhaustive optimum. Writes DIR/search_quality.json (every
/// run's raw record and the aggregates) and DIR/search_quality.md (the table).
///
/// One run (policy, task, seed) is driven by bench/run_driver.hpp exactly as the supervisor
/// drives `infrarsi tune` (decide::next_step over --nodes slots, every decision by the decide/
/// functions, every event in an in-memory log folded by store::run_projection), with an
/// evaluator instead of the node-runners and a simulated clock:
///  1. doctor: 3 baseline trials (purpose "baseline", not in the budget), calibrated by
///     decide::calibrate_doc (noise: log-sd, minimum detectable speedup; the loss reference);
///  2. search: batches of proposals as large as the free slots (decide::proposal_doc with the
///     policy under test as the run's policy), every result verified (decide::check_doc), until
///     the budget of search trials is spent or the policy proposes nothing;
///  3. re-verification and promotion: decide::reverify_candidates, reverify_doc and
///     promotion_decision (the verifier's rule);
///  4. scoring from the folded run with the evaluator's oracle (noise-free): true speedup,
///     fraction of the optimum, trials to 90 % of the optimum's speedup, cost of failed trials.
/// Deterministic: the same arguments give the same JSON except the "wall_s" object.
/// `--tables` runs the real-table benchmark instead (tables_main; bench/README.md "Real
/// tables"): the tasks of bench/tables/tasks/, whose trials bench/table_evaluator.hpp replays
/// from published measurements of real clusters, at several budgets, beside random search's
/// exact expectation, the table's own tuner ranking and the analytic prior's score.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/actors.hpp"
#include "bench/evaluator.hpp"
#include "bench/real_evaluator.hpp"
#include "bench/run_driver.hpp"
#include "bench/sim_evaluator.hpp"
#include "bench/table_evaluator.hpp"
#include "decide/experience_serving.hpp"
#include "messages/errc.hpp"
#include "adapters/task_file.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/layout_prior.hpp"
#include "tuning/planner.hpp"
#include "tuning/priors.hpp"
#include "tuning/stats.hpp"

#if defined(INFRARSI_BENCH_HAVE_OPTUNA)
#include "bench/optuna_policy.hpp"
#endif

#ifndef INFRARSI_SOURCE_DIR
#error "INFRARSI_SOURCE_DIR must name the source tree (bench/CMakeLists.txt defines it)"
#endif

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace infrarsi::bench {
namespace {

constexpr const char* optuna_policy_name = "optuna_tpe/1";
/// Optuna TPE told failed trials as pruned (bench/optuna_policy.hpp).
constexpr const char* optuna_fair_policy_name = "optuna_tpe_fair/1";
/// Optuna TPE with its constraints function: failed trials are complete and infeasible.
constexpr const char* optuna_constrained_policy_name = "optuna_tpe_constrained/1";
/// Trials of the doctor stage, candidates re-verified, interleaved pairs per re-verification
/// (the task defaults of budget_spec, fixed here so that every task is scored the same way).
constexpr std::size_t baseline_repeats = 3;
constexpr std::size_t verify_top = 2;
constexpr std::size_t verify_repeats = 3;
/// Fraction of the optimum's speedup that "trials to reach" refers to.
constexpr double reach_fraction = 0.9;

const std::vector<std::string> default_tasks = {"sim-dense-1node", "sim-dense-multinode",
                                                "sim-moe-1node", "sim-moe-multinode"};

/// Command-line options; defaults inline.
struct options {
  std::string policies;                 ///< comma-separated; "" = every available policy
  std::string tasks;                    ///< comma-separated names or files; "" = default_tasks
  std::uint64_t seeds = 5;              ///< number of seeds
  std::uint64_t first_seed = 1;         ///< seeds first_seed .. first_seed + seeds - 1
  std::uint32_t budget = 40;            ///< search trials per run
  std::uint32_t nodes = 1;              ///< node slots (trials in flight at most)
  std::string out = std::string{INFRARSI_SOURCE_DIR} + "/bench/results";
  bool optuna = true; ///< include the three Optuna TPE variants (when built)
  std::string optuna_script = std::string{INFRARSI_SOURCE_DIR} + "/bench/optuna_tpe.py";
  std::string python = "/usr/bin/python3";
  bool quiet = false;
  // Real-workload tasks (bench/real_evaluator.hpp; bench/README.md "Real CPU workload").
  std::string grid;            ///< grid file of the real task; "" = bench/results/<task>_grid.json
  bool measure_grid = false;   ///< measure the real task's knob grid instead of benchmarking
  std::uint32_t repeats = 3;   ///< --measure-grid: measurements per knob assignment
  std::size_t grid_limit = 0;  ///< --measure-grid: only the first N assignments (0: all)
  /// The transfer experiment (issue 16; bench/README.md "Transfer"): source tasks whose runs
  /// fill the experience bank before the --tasks (targets) are tuned in three arms.
  std::string transfer_from;
  /// The real-table benchmark (bench/README.md "Real tables"): every task of bench/tables/tasks/
  /// (or --tasks) at each of --budgets, the default policy and --table-optuna.
  bool tables = false;
  std::string budgets = "3,5,10,20";
  std::uint64_t optuna_seeds = 20;
  std::string table_optuna = "optuna_tpe_fair/1";
  /// Offline knowledge base of priors ("" = none).
  std::string knowledge = std::string{INFRARSI_SOURCE_DIR} + "/config/knowledge";
};

/// A path as recorded in the results: relative to the source tree when inside it (so results
/// from two checkouts compare equal), else as given.
std::string display_path(const std::string& path) {
  std::error_code ec;
  auto abs = fs::weakly_canonical(fs::path{path}, ec);
  auto root = fs::weakly_canonical(fs::path{INFRARSI_SOURCE_DIR}, ec);
  auto rel = abs.lexically_relative(root);
  if (!rel.empty() && rel.native().rfind("..", 0) != 0)
    return rel.string();
  return path;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text + ",") {
    if (c == ',') {
      auto b = cur.find_first_not_of(" \t");
      auto e = cur.find_last_not_of(" \t");
      if (b != std::string::npos)
        out.push_back(cur.substr(b, e - b + 1));
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

/// A task argument: a file path, or a name under config/tasks/ ("sim-dense-1node") or, when
/// none is there, under bench/tables/tasks/ ("table-amp-gpt2-350m-16xT4").
std::string task_path(const std::string& arg) {
  if (arg.find('/') != std::string::npos ||
      (arg.size() > 5 && arg.substr(arg.size() - 5) == ".toml"))
    return arg;
  auto config = std::string{INFRARSI_SOURCE_DIR} + "/config/tasks/" + arg + ".toml";
  auto table = std::string{INFRARSI_SOURCE_DIR} + "/bench/tables/tasks/" + arg + ".toml";
  std::error_code ec;
  return !fs::exists(config, ec) && fs::exists(table, ec) ? table : config;
}

double elapsed_s(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

bool failed_outcome(tuning::trial_outcome o) {
  using tuning::trial_outcome;
  return o == trial_outcome::oom || o == trial_outcome::launch_error ||
         o == trial_outcome::contract_violation || o == trial_outcome::crash ||
         o == trial_outcome::timeout;
}

// ---- one run -----------------------------------------------------------------------------------

/// One search trial as the results record it.
struct search_trial {
  std::size_t index = 0; ///< 1-based position in the search
  std::uint64_t trial_id = 0;
  std::string outcome;
  std::string change; ///< configuration::diff_from(baseline)
  double measured_step_s = 0; ///< timed step time (usable trials), else 0
  std::optional<double> true_speedup; ///< baseline_true / true step (nullopt: not usable in truth)
  double device_s = 0;
  double predicted_speedup = 1;
  std::string reason; ///< the policy's reason for proposing it
  std::string violation; ///< first violation or failure detail (shortened)
  double ended_at_s = 0; ///< simulated clock when its result arrived (run_driver.hpp)
};

/// One candidate's re-verification.
struct reverification {
  std::uint64_t candidate_trial = 0;
  std::string change;
  std::uint32_t rounds = 1;
  std::vector<double> baseline_s, candidate_s; ///< the counted round's timed step times
  tuning::speedup_estimate estimate;
  bool promotable = false;
  std::string reason;
  std::optional<double> true_speedup;
  double device_s = 0;
};

struct run_result {
  std::string policy, task;
  std::uint64_t seed = 0;
  std::uint32_t nodes = 1;
  std::string error; ///< non-empty: the run could not finish (the policy threw, ...)
  tuning::noise_estimate noise;
  std::size_t search_trials = 0;
  std::string stop_reason;
  std::vector<search_trial> trials;
  std::vector<reverification> verifications;
  bool promoted = false;
  std::string promoted_change;
  double promoted_measured_speedup = 1, promoted_ci_low = 1, promoted_ci_high = 1;
  double true_speedup = 1;
  double fraction_of_optimum = 0;
  std::optional<std::size_t> trials_to_reach;
  double best_explored_true_speedup = 1;
  double search_device_s = 0, failed_device_s = 0, verify_device_s = 0;
  double failed_device_share = 0;
  std::size_t ooms = 0, contract_violations = 0, constraint_refusals = 0, launch_errors = 0,
              crashes = 0, usable = 0;
  /// Contract violations the smoke probe caught before the full launch (tuning::is_smoke_probe).
  std::size_t smoke_caught = 0;
  double wall_s = 0;
  /// A real task's promoted configuration had patches (no exhaustive truth): true_speedup is
  /// its re-verified measured speedup.
  bool true_speedup_measured = false;
  /// From the driver (run_driver.hpp): the planner_input's initial design, verdicts that differ
  /// from the evaluator's own, planner calls, most trials in flight, the simulated clock when
  /// the last search trial and the run ended.
  std::size_t initial_design = 0, verdict_mismatches = 0, proposal_calls = 0;
  std::uint32_t max_in_flight = 0;
  double sim_search_wall_s = 0, sim_total_wall_s = 0;
  /// --transfer-from: the arm ("none", "all", "filtered"; "" outside the transfer experiment),
  /// the seeds the curator's pack served, those proposed (search trials that ran as an
  /// experience seed) and how many of those ran out of memory; the run's finding (its
  /// ExperienceRecorded document; null when nothing was promoted).
  std::string arm;
  std::size_t seeds_served = 0, seeds_proposed = 0, seed_ooms = 0;
  nlohmann::json experience_record;
};

std::string shorten(const std::string& s, std::size_t n = 160) {
  return s.size() <= n ? s : s.substr(0, n) + "...";
}

/// --no-experience-priors: served packs' prior adjustments are not applied (an ablation).
bool experience_priors_on = true;

/// Runs one policy on one task with one seed (see the file comment): bench/run_driver.hpp drives
/// the run through decide::next_step and the decide/ decisions, as the supervisor does; the
/// benchmark's metrics are then read from the folded run and the evaluator's oracle.
run_result run_one(evaluator& ev, const tuning::planner_policy& policy, const std::string& policy_name,
                   std::uint64_t seed, std::uint32_t budget, const tuning::prior_set& priors,
                   std::uint32_t nodes, const std::string& task_text,
                   std::optional<decide::experience_mode> experience = std::nullopt,
                   const std::vector<nlohmann::json>& experience_records = {}) {
  auto start = std::chrono::steady_clock::now();
  const auto& task = ev.task();
  run_result r;
  r.policy = policy_name;
  r.task = task.name;
  r.seed = seed;
  r.nodes = nodes;

  driver_options d;
  d.nodes = nodes;
  d.trials = budget;
  d.baseline_repeats = baseline_repeats;
  d.verify_top = verify_top;
  d.verify_repeats = verify_repeats;
  d.policy_name = policy_name;
  d.policy = &policy;
  d.seed = seed;
  d.priors = priors;
  d.task_text = task_text;
  d.experience = experience;
  d.experience_records = experience_records;
  d.experience_priors = experience_priors_on;
  auto driven = drive_run(ev, d);
  const auto& run = driven.state;
  r.error = driven.error;
  r.arm = experience ? decide::to_string(*experience) : "";
  r.seeds_served = run.experience_seeds.size();
  r.experience_record = driven.experience_record;
  r.initial_design = driven.initial_design;
  r.verdict_mismatches = driven.verdict_mismatches;
  r.proposal_calls = driven.proposal_calls;
  r.max_in_flight = driven.max_in_flight;
  r.sim_search_wall_s = driven.search_end_s;
  r.sim_total_wall_s = driven.end_s;
  if (run.noise)
    r.noise = *run.noise;

  const auto baseline = canonical_configuration(task, tuning::baseline_configuration(task));
  const double base_true = ev.baseline_true_step_time();
  const double opt_speedup = base_true / ev.optimum_step_time();
  auto true_speedup_of = [&](const tuning::configuration& c) -> std::optional<double> {
    auto t = ev.true_step_time(c);
    if (!t)
      return std::nullopt;
    return base_true / *t;
  };

  // The search: explore trials in order of proposal (trial id), latest attempt each.
  for (const auto* t : run.latest_attempts()) {
    if (t->kind != tuning::purpose_kind::explore)
      continue;
    ++r.search_trials;
    search_trial s;
    s.index = r.search_trials;
    s.trial_id = t->trial_id;
    s.outcome = tuning::to_string(t->outcome);
    s.change = canonical_configuration(task, t->config).diff_from(baseline);
    s.device_s = t->device_seconds;
    if (auto p = driven.proposals.find(t->trial_id); p != driven.proposals.end()) {
      s.predicted_speedup = p->second.value("predicted_speedup", 1.0);
      s.reason = p->second.value("reason", std::string{});
    }
    if (s.reason == "initial design: experience bank seed") {
      ++r.seeds_proposed;
      r.seed_ooms += t->outcome == tuning::trial_outcome::oom ? 1 : 0;
    }
    if (auto tm = driven.times.find({t->trial_id, t->attempt}); tm != driven.times.end())
      s.ended_at_s = tm->second.ended_s;
    if (t->usable()) {
      s.measured_step_s = t->timed_step_time_s;
      s.true_speedup = true_speedup_of(t->config);
      ++r.usable;
    } else {
      s.violation = shorten(t->violations.empty() ? t->detail : t->violations.front());
    }
    r.search_device_s += t->device_seconds;
    if (failed_outcome(t->outcome))
      r.failed_device_s += t->device_seconds;
    switch (t->outcome) {
    case tuning::trial_outcome::oom: ++r.ooms; break;
    case tuning::trial_outcome::launch_error: ++r.launch_errors; break;
    case tuning::trial_outcome::crash:
    case tuning::trial_outcome::timeout: ++r.crashes; break;
    case tuning::trial_outcome::contract_violation:
      if (!t->violations.empty() && t->violations.front().rfind("constraint:", 0) == 0)
        ++r.constraint_refusals;
      else
        ++r.contract_violations;
      if (tuning::is_smoke_probe(t->detail))
        ++r.smoke_caught;
      break;
    default: break;
    }
    if (s.true_speedup) {
      r.best_explored_true_speedup = std::max(r.best_explored_true_speedup, *s.true_speedup);
      if (!r.trials_to_reach && *s.true_speedup >= reach_fraction * opt_speedup)
        r.trials_to_reach = s.index;
    }
    r.trials.push_back(std::move(s));
  }
  r.failed_device_share = r.search_device_s > 0 ? r.failed_device_s / r.search_device_s : 0.0;
  if (run.search_stopped) {
    auto reason = run.search_stopped->value("reason", std::string{});
    r.stop_reason = reason == "policy" ? run.search_stopped->value("detail", reason) : reason;
  }
  if (!r.error.empty()) {
    r.wall_s = elapsed_s(start);
    return r;
  }

  // Re-verification and promotion, as logged (decide::reverify_candidates, reverify_doc,
  // promotion_decision).
  for (const auto& v : run.reverifications) {
    reverification out;
    out.candidate_trial = v.candidate_trial;
    out.change = canonical_configuration(task, v.config).diff_from(baseline);
    out.rounds = v.round;
    out.baseline_s = v.baseline_times_s;
    out.candidate_s = v.candidate_times_s;
    out.estimate = v.estimate;
    out.promotable = v.promotable;
    out.reason = v.reason;
    out.true_speedup = true_speedup_of(v.config);
    for (const auto& t : run.trials)
      if (t.candidate_trial == v.candidate_trial &&
          (t.kind == tuning::purpose_kind::verify_baseline ||
           t.kind == tuning::purpose_kind::verify_candidate))
        out.device_s += t.device_seconds;
      else if (t.trial_id == v.candidate_trial && t.kind == tuning::purpose_kind::ablation)
        out.device_s += t.device_seconds;
    r.verify_device_s += out.device_s;
    r.verifications.push_back(std::move(out));
  }
  if (run.promotion && run.promotion->value("promoted", false)) {
    const auto& p = *run.promotion;
    auto config = store::configuration_from_json(p.value("config", json{}));
    r.promoted = true;
    r.promoted_change = config ? canonical_configuration(task, *config).diff_from(baseline)
                               : p.value("change", std::string{});
    r.promoted_measured_speedup = p.value("speedup", 1.0);
    r.promoted_ci_low = p.value("ci_low", 0.0);
    r.promoted_ci_high = p["ci_high"].is_number() ? p["ci_high"].get<double>()
                                                  : std::numeric_limits<double>::infinity();
    auto truth = config ? true_speedup_of(*config) : std::nullopt;
    r.true_speedup = truth.value_or(1.0);
    // A real task has no exhaustive truth for a configuration with patches: scored by its
    // re-verified measured speedup instead, and marked (bench/real_evaluator.hpp).
    if (auto* real = dynamic_cast<real_evaluator*>(&ev);
        real != nullptr && !truth && config && !real->has_truth(*config)) {
      r.true_speedup = r.promoted_measured_speedup;
      r.true_speedup_measured = true;
    }
  }
  r.fraction_of_optimum = r.true_speedup / opt_speedup;
  r.wall_s = elapsed_s(start);
  return r;
}

// ---- aggregation and output --------------------------------------------------------------------

struct stat3 {
  double mean = 0, min = 0, max = 0;
  std::size_t n = 0;
};

stat3 stats_of(const std::vector<double>& v) {
  stat3 s;
  s.n = v.size();
  if (v.empty())
    return s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v)
    sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

json to_json(const stat3& s) { return {{"mean", s.mean}, {"min", s.min}, {"max", s.max}}; }

struct task_info {
  std::string name, file;
  double baseline_s = 0, optimum_s = 0;
  std::string optimum;
  std::uint64_t space = 0;
  std::vector<std::pair<std::string, std::string>> incompatible;
  double memory_capacity_bytes = 0;
  bool simulated = false;
  int gpus = 0;
  double oracle_wall_s = 0;
  [[nodiscard]] double optimum_speedup() const { return baseline_s / optimum_s; }
};

/// Aggregate of one policy on one task over the seeds.
struct cell {
  std::string policy, task;
  std::size_t runs = 0, errors = 0;
  stat3 true_speedup, fraction, trials_to_reach, failed_share, ooms, violations, refusals,
      launch_errors, search_trials, best_explored, search_clock, total_clock;
  std::size_t reached = 0, promoted = 0;
  std::map<std::string, std::size_t> stop_reasons;
  double mean_wall_s = 0;
  std::size_t measured = 0; ///< runs whose true speedup is a measured one (real tasks)
};

cell aggregate(const std::string& policy, const std::string& task,
               const std::vector<run_result>& runs, std::uint32_t budget) {
  cell c;
  c.policy = policy;
  c.task = task;
  std::vector<double> sp, fr, reach, share, oom, viol, refu, lerr, st, best, sclock, tclock;
  double wall = 0;
  for (const auto& r : runs) {
    if (r.policy != policy || r.task != task)
      continue;
    ++c.runs;
    wall += r.wall_s;
    if (!r.error.empty()) {
      ++c.errors;
      continue;
    }
    sp.push_back(r.true_speedup);
    fr.push_back(r.fraction_of_optimum);
    reach.push_back(r.trials_to_reach ? static_cast<double>(*r.trials_to_reach) : budget + 1.0);
    c.reached += r.trials_to_reach ? 1 : 0;
    c.promoted += r.promoted ? 1 : 0;
    c.measured += r.true_speedup_measured ? 1 : 0;
    share.push_back(r.failed_device_share);
    oom.push_back(static_cast<double>(r.ooms));
    viol.push_back(static_cast<double>(r.contract_violations));
    refu.push_back(static_cast<double>(r.constraint_refusals));
    lerr.push_back(static_cast<double>(r.launch_errors));
    st.push_back(static_cast<double>(r.search_trials));
    best.push_back(r.best_explored_true_speedup);
    sclock.push_back(r.sim_search_wall_s);
    tclock.push_back(r.sim_total_wall_s);
    ++c.stop_reasons[r.stop_reason];
  }
  c.true_speedup = stats_of(sp);
  c.fraction = stats_of(fr);
  c.trials_to_reach = stats_of(reach);
  c.failed_share = stats_of(share);
  c.ooms = stats_of(oom);
  c.violations = stats_of(viol);
  c.refusals = stats_of(refu);
  c.launch_errors = stats_of(lerr);
  c.search_trials = stats_of(st);
  c.best_explored = stats_of(best);
  c.search_clock = stats_of(sclock);
  c.total_clock = stats_of(tclock);
  c.mean_wall_s = c.runs > 0 ? wall / static_cast<double>(c.runs) : 0.0;
  return c;
}

double geomean(const std::vector<double>& v) {
  if (v.empty())
    return 0.0;
  double s = 0;
  for (double x : v)
    s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

json run_json(const run_result& r) {
  json j;
  j["policy"] = r.policy;
  j["task"] = r.task;
  j["seed"] = r.seed;
  if (!r.error.empty())
    j["error"] = r.error;
  j["true_speedup"] = r.true_speedup;
  if (r.true_speedup_measured)
    j["true_speedup_source"] = "measured";
  j["fraction_of_optimum"] = r.fraction_of_optimum;
  j["trials_to_90pct_optimum"] =
      r.trials_to_reach ? json(*r.trials_to_reach) : json(nullptr);
  j["best_explored_true_speedup"] = r.best_explored_true_speedup;
  j["promoted"] = r.promoted;
  if (r.promoted) {
    j["promoted_change"] = r.promoted_change;
    j["promoted_measured_speedup"] = r.promoted_measured_speedup;
    j["promoted_ci95"] = {r.promoted_ci_low, r.promoted_ci_high};
  }
  j["search_trials"] = r.search_trials;
  j["stop_reason"] = r.stop_reason;
  j["usable_trials"] = r.usable;
  j["ooms"] = r.ooms;
  j["contract_violations"] = r.contract_violations;
  j["smoke_caught"] = r.smoke_caught;
  j["constraint_refusals"] = r.constraint_refusals;
  j["launch_errors"] = r.launch_errors;
  j["crashes_or_timeouts"] = r.crashes;
  j["search_device_s"] = r.search_device_s;
  j["failed_device_s"] = r.failed_device_s;
  j["failed_device_share"] = r.failed_device_share;
  j["verify_device_s"] = r.verify_device_s;
  j["nodes"] = r.nodes;
  j["proposal_calls"] = r.proposal_calls;
  j["max_in_flight"] = r.max_in_flight;
  j["verdict_mismatches"] = r.verdict_mismatches;
  j["clock_s"] = {{"search", r.sim_search_wall_s}, {"total", r.sim_total_wall_s}};
  j["noise"] = {{"runs", r.noise.runs},
                {"mean_step_time_s", r.noise.mean_step_time_s},
                {"log_sd", r.noise.log_sd},
                {"min_detectable_speedup", r.noise.min_detectable_speedup}};
  json trials = json::array();
  for (const auto& t : r.trials) {
    json tj{{"i", t.index},
            {"trial_id", t.trial_id},
            {"outcome", t.outcome},
            {"change", t.change},
            {"predicted_speedup", t.predicted_speedup},
            {"reason", t.reason},
            {"device_s", t.device_s},
            {"ended_at_s", t.ended_at_s}};
    if (t.measured_step_s > 0)
      tj["measured_step_s"] = t.measured_step_s;
    tj["true_speedup"] = t.true_speedup ? json(*t.true_speedup) : json(nullptr);
    if (!t.violation.empty())
      tj["detail"] = t.violation;
    trials.push_back(std::move(tj));
  }
  j["trials"] = std::move(trials);
  json ver = json::array();
  for (const auto& v : r.verifications)
    ver.push_back({{"candidate_trial", v.candidate_trial},
                   {"change", v.change},
                   {"rounds", v.rounds},
                   {"baseline_times_s", v.baseline_s},
                   {"candidate_times_s", v.candidate_s},
                   {"speedup", v.estimate.speedup},
                   {"ci95", {v.estimate.ci_low, v.estimate.ci_high}},
                   {"promotable", v.promotable},
                   {"reason", v.reason},
                   {"true_speedup", v.true_speedup ? json(*v.true_speedup) : json(nullptr)},
                   {"device_s", v.device_s}});
  j["verifications"] = std::move(ver);
  return j;
}

json cell_json(const cell& c) {
  json stops = json::object();
  for (const auto& [k, n] : c.stop_reasons)
    stops[k] = n;
  return {{"policy", c.policy},
          {"task", c.task},
          {"runs", c.runs},
          {"errors", c.errors},
          {"true_speedup", to_json(c.true_speedup)},
          {"fraction_of_optimum", to_json(c.fraction)},
          {"trials_to_90pct_optimum", to_json(c.trials_to_reach)},
          {"reached_90pct", c.reached},
          {"promoted", c.promoted},
          {"true_speedup_measured_runs", c.measured},
          {"best_explored_true_speedup", to_json(c.best_explored)},
          {"failed_device_share", to_json(c.failed_share)},
          {"ooms", to_json(c.ooms)},
          {"contract_violations", to_json(c.violations)},
          {"constraint_refusals", to_json(c.refusals)},
          {"launch_errors", to_json(c.launch_errors)},
          {"search_trials", to_json(c.search_trials)},
          {"clock_s", {{"search", to_json(c.search_clock)}, {"total", to_json(c.total_clock)}}},
          {"stop_reasons", stops}};
}

std::string fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

/// Trials to reach, for the table: ">BUDGET" when not reached (v = budget + 1).
std::string reach_text(double v, std::uint32_t budget, int digits = 0) {
  return v > budget ? ">" + std::to_string(budget) : fixed(v, digits);
}

/// "[min, max]" of a statistic.
std::string range_text(const stat3& s, int digits) {
  return "[" + fixed(s.min, digits) + ", " + fixed(s.max, digits) + "]";
}

const char* promotion_rule_text =
    "the two fastest usable explore configurations measured faster than the baseline mean are "
    "each re-measured in 3 interleaved baseline/candidate pairs; promotable when every "
    "re-measurement passed the contract and the 95 % Welch interval of the speedup "
    "(geometric means) has a lower bound above 1 + the doctor's minimum detectable speedup (a "
    "pair measured with more than 3x the doctor's log-sd is re-measured once); the promotable "
    "candidate with the highest measured speedup is the bundle, else nothing is promoted "
    "(speedup 1); a bundle of two changes or more is then cut to its minimal change (up to 2 "
    "ablations of its least-credited changes, each run once and re-verified the same way; "
    "decide::plan_ablations, docs/planner.md) and the smallest kept configuration is promoted. "
    "This is the rule of `infrarsi tune`'s verifier: the run is driven by decide::next_step and "
    "decided by decide::reverify_candidates, reverify_doc, plan_ablations and promotion_decision "
    "(decide/decisions.cpp, decide/minimal_change.cpp), as the supervisor does "
    "(bench/run_driver.hpp).";

std::string markdown(const std::vector<task_info>& tasks, const std::vector<std::string>& policies,
                     const std::vector<cell>& cells, const json& policy_summary,
                     const options& o, const std::vector<std::uint64_t>& seeds,
                     const std::string& command, double total_wall_s,
                     std::size_t run_count) {
  std::ostringstream md;
  bool simulated = std::all_of(tasks.begin(), tasks.end(), [](const auto& t) { return t.simulated; });
  md << "# Search quality\n\n";
  md << "Generated by `" << command << "`; raw runs and aggregates in `search_quality.json`.\n\n";
  md << "- **Budget**: " << o.budget
     << " search trials per run (the 3 baseline trials before and the promotion re-measurements "
        "after are not counted).\n";
  md << "- **Seeds**: " << seeds.front() << ".." << seeds.back() << " (" << seeds.size()
     << " per policy and task; the seed drives the policy and the cluster noise).\n";
  md << "- **Nodes**: " << o.nodes
     << (o.nodes == 1 ? " slot: one trial at a time"
                      : " slots: up to " + std::to_string(o.nodes) +
                          " trials in flight on a simulated clock, each ending after its own wall "
                          "time; the planner proposes batches as large as the free slots with "
                          "the trials in flight in its history, as the supervisor does")
     << " (bench/run_driver.hpp).\n";
  md << "- **Promotion rule (the same for every policy)**: " << promotion_rule_text << "\n";
  if (simulated)
    md << "- **Times are simulated** seconds of the modelled cluster (workloads/sim, "
          "docs/simulator.md); speedups are scored with the simulator's noise-free truth, the "
          "search and the promotion see only noisy measurements. A trial that fails at launch "
          "(invalid layout) or runs out of memory is charged the simulator's 30 s start-up x "
          "GPUs in device-seconds; one refused before launch (a broken constraint, patches that "
          "do not apply together) costs nothing.\n";
  md << "- **Priors**: the offline knowledge base's (`--knowledge`, as `infrarsi tune` loads them; "
        "the sim tasks have no entry, so theirs are neutral); only `bayes_ei/1` and "
        "`settings_only/1` use priors. Every policy sees the same planner_input, "
        "decide::planner_input_for of the run folded so far (as `infrarsi tune`'s planner): "
        "history (trials in flight included), seed, priors, noise log-sd and minimum detectable "
        "speedup, initial design min(4, max(1, budget/3)), incompatible patch pairs, memory "
        "capacity from the task.\n";
  if (!std::all_of(tasks.begin(), tasks.end(), [](const auto& t) { return t.simulated; }))
    md << "- **Real tasks** (not simulated): times are seconds of wall clock on this machine "
          "(the seed drives only the policy; the noise is the machine's own). "
          "*true* step times are the medians of the task's measured knob grid "
          "(bench/results/<task>_grid.json, `--measure-grid`), the optimum is its fastest knob "
          "assignment. A configuration with patches has no exhaustive truth: a promoted one is "
          "scored by its re-verified measured speedup, marked *(m N)* for N runs so scored, and "
          "it counts as unknown for *best explored* and *trials to 90 %*.\n";
  md << "- Wall time: " << fixed(total_wall_s, 1) << " s for " << run_count
     << " runs on this machine (oracle enumerations included).\n\n";

  md << "## Tasks and their exhaustive optimum\n\n";
  md << "| task | baseline step (s) | optimum step (s) | optimum speedup | configurations | optimum |\n";
  md << "|---|---|---|---|---|---|\n";
  for (const auto& t : tasks)
    md << "| `" << t.name << "` | " << fixed(t.baseline_s, 2) << " | " << fixed(t.optimum_s, 2)
       << " | " << fixed(t.optimum_speedup(), 3) << "x | " << t.space << " | " << t.optimum
       << " |\n";

  md << "\n## Results\n\n";
  md << "Mean over seeds, [min, max] over seeds in brackets. *true speedup*: baseline / promoted "
        "configuration, noise-free (1 when nothing was promoted). *of optimum*: true speedup / "
        "the task's optimum speedup. *trials to 90 %*: first search trial whose configuration's "
        "true speedup reaches 90 % of the optimum's and that was usable (>"
     << o.budget << ": not reached; counted as " << o.budget + 1
     << " in the mean), then how many runs reached it. *promoted*: runs that promoted a "
        "configuration. *failed dev-s*: share of the "
        "search's device-seconds spent on OOM, launch-error, crash, timeout and "
        "contract-violating trials (a trial's device-seconds include its smoke probe, when the "
        "task has [smoke] and the trial had an untested patch: docs/node-runner.md). *OOM*, "
        "*violations* (loss or work; those the smoke probe caught included), *refused* (broken "
        "constraint): mean per run.\n\n";
  md << "| policy | task | true speedup | of optimum | best explored | trials to 90 % (reached) | "
        "promoted | failed dev-s | OOM | violations | refused | trials | stop | wall s/run |\n";
  md << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& p : policies) {
    for (const auto& c : cells) {
      if (c.policy != p)
        continue;
      md << "| `" << c.policy << "` | `" << c.task << "` | ";
      if (c.errors == c.runs) {
        md << "error | | | | | | | | | | | " << fixed(c.mean_wall_s, 2) << " |\n";
        continue;
      }
      std::string stops;
      for (const auto& [k, n] : c.stop_reasons)
        stops += (stops.empty() ? "" : "; ") + shorten(k, 60) + (c.stop_reasons.size() > 1 ? " (" + std::to_string(n) + ")" : "");
      md << fixed(c.true_speedup.mean, 3) << "x " << range_text(c.true_speedup, 2)
         << (c.measured > 0 ? " (m " + std::to_string(c.measured) + ")" : std::string{}) << " | "
         << fixed(c.fraction.mean, 3) << " " << range_text(c.fraction, 2) << " | "
         << fixed(c.best_explored.mean, 3) << "x | "
         << reach_text(c.trials_to_reach.mean, o.budget, 1) << " ["
         << reach_text(c.trials_to_reach.min, o.budget) << ", "
         << reach_text(c.trials_to_reach.max, o.budget) << "] " << c.reached << "/"
         << (c.runs - c.errors) << " | " << c.promoted << "/" << (c.runs - c.errors) << " | "
         << fixed(100.0 * c.failed_share.mean, 1) << " % | " << fixed(c.ooms.mean, 1) << " | "
         << fixed(c.violations.mean, 1) << " | " << fixed(c.refusals.mean, 1) << " | "
         << fixed(c.search_trials.mean, 1) << " | " << stops << " | " << fixed(c.mean_wall_s, 2)
         << " |\n";
      if (c.errors > 0 && c.errors < c.runs)
        md << "| | (" << c.errors << " of " << c.runs << " runs failed: see the json) | | | | | | | | | | | | |\n";
    }
    for (const auto& s : policy_summary)
      if (s["policy"] == p)
        md << "| `" << p << "` | **geometric mean over tasks** | **"
           << fixed(s["geomean_true_speedup"].get<double>(), 3) << "x** | **"
           << fixed(s["geomean_fraction_of_optimum"].get<double>(), 3)
           << "** | | | | | | | | | | |\n";
  }
  md << "\n*best explored*: the highest true speedup among the usable configurations the "
        "search measured (what a perfect promotion could have kept).\n";
  return md.str();
}

int write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) {
    std::cerr << "infrarsi_search_quality: cannot write '" << path.string() << "'\n";
    return 1;
  }
  return 0;
}

/// Writes DIR/STEM.json and DIR/STEM.md (and, unless quiet, says so with the run's wall seconds);
/// 0, or 1 when either cannot be written (the message names it).
int write_outputs(const fs::path& dir, const std::string& stem, const nlohmann::json& doc,
                  const std::string& md, bool quiet, double wall_s) {
  int rc = write_file(dir / (stem + ".json"), doc.dump(1) + "\n");
  rc |= write_file(dir / (stem + ".md"), md);
  if (rc != 0)
    return 1;
  if (!quiet)
    std::cerr << "infrarsi_search_quality: wrote " << (dir / (stem + ".json")).string() << " and "
              << (dir / (stem + ".md")).string() << " (" << fixed(wall_s, 1) << " s)\n";
  return 0;
}

// ---- real-workload tasks (bench/real_evaluator.hpp) ----------------------------------------------

/// The real evaluator's options for a task of the benchmark.
real_evaluator_options real_options(const options& o, const std::string& task_name,
                                    const std::string& path) {
  real_evaluator_options r;
  r.grid_file = o.grid.empty() ? default_grid_file(INFRARSI_SOURCE_DIR, task_name) : o.grid;
  r.grid_command = "bench/search_quality --measure-grid --tasks " + display_path(path) +
                   " --repeats 3";
  return r;
}

/// --measure-grid: the exhaustive measurement of each real task's knob grid.
int measure_grid_main(const options& o, int argc, char** argv) {
  std::string command = "bench/search_quality";
  for (int i = 1; i < argc; ++i)
    command += std::string{" "} + argv[i];
  if (o.tasks.empty()) {
    std::cerr << "infrarsi_search_quality: --measure-grid needs --tasks (a real task file)\n";
    return 2;
  }
  for (const auto& arg : split_list(o.tasks)) {
    auto path = task_path(arg);
    auto t = adapters::load_task_file(path);
    if (!t) {
      std::cerr << "infrarsi_search_quality: --tasks: '" << arg << "': " << describe(t.error())
                << "\n";
      return 2;
    }
    if (sim_evaluator::is_sim_task(*t)) {
      std::cerr << "infrarsi_search_quality: --measure-grid: '" << path
                << "' is a simulator task (its truth is computed, not measured)\n";
      return 2;
    }
    auto ro = real_options(o, t->name, path);
    ro.require_grid = false;
    grid_options g;
    g.out = ro.grid_file;
    ro.grid_file.clear(); // measured, not read
    g.repeats = o.repeats;
    g.limit = o.grid_limit;
    g.command = command;
    g.task_file = display_path(path);
    g.quiet = o.quiet;
    std::string why;
    auto ev = real_evaluator::create(*t, ro, why);
    if (!ev) {
      std::cerr << "infrarsi_search_quality: --tasks: " << why << "\n";
      return 2;
    }
    if (int rc = measure_grid(*ev, g, std::cerr); rc != 0)
      return rc;
  }
  return 0;
}

/// Loads each task of `args` (files or names under config/tasks/) with its evaluator (the
/// simulator's exhaustive oracle, or a real task's grid), its text and its summary, and the
/// priors of the offline knowledge base; appends to the vectors. Returns 0, or 2 after printing
/// the error.
int load_tasks(const std::vector<std::string>& args, const options& o,
               std::vector<std::unique_ptr<evaluator>>& evaluators,
               std::vector<std::string>& task_texts, std::vector<task_info>& tasks,
               std::vector<tuning::prior_set>& task_priors) {
  for (const auto& arg : args) {
    auto path = task_path(arg);
    auto t = adapters::load_task_file(path);
    if (!t) {
      std::cerr << "infrarsi_search_quality: --tasks: '" << arg << "': " << describe(t.error())
                << "\n";
      return 2;
    }
    auto oracle_start = std::chrono::steady_clock::now();
    if (!o.quiet)
      std::cerr << "infrarsi_search_quality: " << t->name << ": enumerating the space for the "
                << "oracle...\n";
    std::string why;
    std::unique_ptr<evaluator> ev;
    if (table_evaluator::is_table_task(*t))
      ev = table_evaluator::create(*t, why);
    else if (sim_evaluator::is_sim_task(*t))
      ev = sim_evaluator::create(*t, why);
    else
      ev = real_evaluator::create(*t, real_options(o, t->name, path), why);
    if (!ev) {
      std::cerr << "infrarsi_search_quality: --tasks: " << why << "\n";
      return 2;
    }
    task_info info;
    info.name = ev->task().name;
    info.file = display_path(path);
    info.baseline_s = ev->baseline_true_step_time();
    info.optimum_s = ev->optimum_step_time();
    info.optimum = ev->optimum_description();
    info.space = ev->optimum_space_size();
    info.incompatible = ev->incompatible_patches();
    info.memory_capacity_bytes = ev->memory_capacity_bytes();
    info.simulated = ev->task().contract.simulated_time;
    info.oracle_wall_s = elapsed_s(oracle_start);
    if (!o.quiet)
      std::cerr << "infrarsi_search_quality: " << info.name << ": baseline "
                << fixed(info.baseline_s, 2) << " s, optimum " << fixed(info.optimum_s, 2)
                << " s (" << fixed(info.optimum_speedup(), 3) << "x) over " << info.space
                << " configurations, " << fixed(info.oracle_wall_s, 1) << " s\n";
    for (const auto& other : tasks)
      if (other.name == info.name) {
        std::cerr << "infrarsi_search_quality: --tasks: task '" << info.name << "' given twice\n";
        return 2;
      }
    tasks.push_back(info);
    evaluators.push_back(std::move(ev));
    std::ifstream text_file(path, std::ios::binary);
    std::ostringstream text;
    text << text_file.rdbuf();
    task_texts.push_back(text.str());
  }

  for (std::size_t ti = task_priors.size(); ti < tasks.size(); ++ti) {
    if (o.knowledge.empty()) {
      task_priors.emplace_back();
      continue;
    }
    auto priors = actors::load_knowledge(evaluators[ti]->task(), o.knowledge);
    if (!priors) {
      std::cerr << "search_quality: " << describe(priors.error()) << '\n';
      return 2;
    }
    task_priors.push_back(std::move(*priors));
  }
  return 0;
}

/// --transfer-from: the transfer experiment (issue 16; bench/README.md "Transfer"). Fills an
/// experience bank with the findings of every policy's runs on the source tasks (each seed,
/// served nothing), then runs each target task per policy and seed in three arms: served
/// nothing ("none": a cold start), every finding ("all") and the findings decide::experience_pack
/// serves by the hardware similarity rule ("filtered"). Writes OUT/transfer.json and
/// OUT/transfer.md. Returns 0, 1 (a run ended with an error) or 2 (bad input).
int transfer_main(const options& o, const std::vector<std::string>& names,
                  const std::map<std::string, std::unique_ptr<tuning::planner_policy>>& policies,
                  const std::vector<std::uint64_t>& seeds,
                  const std::vector<std::unique_ptr<evaluator>>& evaluators,
                  const std::vector<std::string>& task_texts, const std::vector<task_info>& tasks,
                  const std::vector<tuning::prior_set>& task_priors, int argc, char** argv,
                  std::chrono::steady_clock::time_point total_start) {
  std::vector<std::unique_ptr<evaluator>> src_evaluators;
  std::vector<std::string> src_texts;
  std::vector<task_info> sources;
  std::vector<tuning::prior_set> src_priors;
  if (int rc = load_tasks(split_list(o.transfer_from), o, src_evaluators, src_texts, sources,
                          src_priors);
      rc != 0)
    return rc;
  for (const auto& s : sources)
    for (const auto& t : tasks)
      if (s.name == t.name) {
        std::cerr << "infrarsi_search_quality: --transfer-from: '" << s.name
                  << "' is also a target (--tasks)\n";
        return 2;
      }
  bool any_error = false;
  auto report = [&](const run_result& r, const std::string& what, double optimum) {
    if (!r.error.empty()) {
      any_error = true;
      std::cerr << "infrarsi_search_quality: " << what << ": " << r.error << "\n";
    }
    if (!o.quiet)
      std::cerr << what << ": true speedup " << fixed(r.true_speedup, 3) << "x ("
                << fixed(r.fraction_of_optimum, 3) << " of optimum " << fixed(optimum, 3)
                << "x), 90% after "
                << (r.trials_to_reach ? std::to_string(*r.trials_to_reach) : std::string{"-"})
                << " trials, " << r.ooms << " OOM, seeds " << r.seeds_served << " served / "
                << r.seeds_proposed << " proposed; "
                << (r.promoted ? "promoted " + r.promoted_change : std::string{"nothing promoted"})
                << "\n";
  };
  // 1. The bank: every promoted finding of the source runs, in run order.
  std::vector<nlohmann::json> bank;
  std::vector<run_result> fills;
  for (std::size_t si = 0; si < sources.size(); ++si)
    for (const auto& name : names)
      for (auto seed : seeds) {
        auto r = run_one(*src_evaluators[si], *policies.at(name), name, seed, o.budget,
                         src_priors[si], o.nodes, src_texts[si]);
        report(r, "fill " + name + " " + r.task + " seed " + std::to_string(seed),
               sources[si].optimum_speedup());
        if (r.experience_record.is_object())
          bank.push_back(r.experience_record);
        fills.push_back(std::move(r));
      }
  // 2. The arms on each target.
  const std::vector<decide::experience_mode> arms = {
    decide::experience_mode::none, decide::experience_mode::all,
    decide::experience_mode::filtered};
  std::vector<run_result> runs;
  for (std::size_t ti = 0; ti < tasks.size(); ++ti)
    for (const auto& name : names)
      for (auto arm : arms)
        for (auto seed : seeds) {
          auto r = run_one(*evaluators[ti], *policies.at(name), name, seed, o.budget,
                           task_priors[ti], o.nodes, task_texts[ti], arm, bank);
          report(r,
                 std::string{decide::to_string(arm)} + " " + name + " " + r.task + " seed "
                   + std::to_string(seed),
                 tasks[ti].optimum_speedup());
          runs.push_back(std::move(r));
        }
  // 3. Aggregates per target, policy and arm.
  json cells = json::array();
  std::ostringstream table;
  for (const auto& t : tasks)
    for (const auto& name : names) {
      table << "\n### " << t.name << ", " << name << " (optimum " << fixed(t.optimum_speedup(), 3)
            << "x)\n\n"
            << "| arm | true speedup (mean, min-max) | fraction of optimum | trials to 90 % "
               "(mean; reached) | failed device-s (mean) | OOMs (mean) | seeds served / "
               "proposed / OOM (mean) |\n|---|---|---|---|---|---|---|\n";
      for (auto arm : arms) {
        std::vector<run_result> mine;
        for (const auto& r : runs)
          if (r.task == t.name && r.policy == name && r.arm == decide::to_string(arm))
            mine.push_back(r);
        auto c = aggregate(name, t.name, mine, o.budget);
        double failed = 0, served = 0, proposed = 0, seed_ooms = 0;
        for (const auto& r : mine) {
          failed += r.failed_device_s;
          served += static_cast<double>(r.seeds_served);
          proposed += static_cast<double>(r.seeds_proposed);
          seed_ooms += static_cast<double>(r.seed_ooms);
        }
        double n = std::max<double>(1.0, static_cast<double>(mine.size()));
        auto cj = cell_json(c);
        cj["arm"] = decide::to_string(arm);
        cj["failed_device_s_mean"] = failed / n;
        cj["seeds_served_mean"] = served / n;
        cj["seeds_proposed_mean"] = proposed / n;
        cj["seed_ooms_mean"] = seed_ooms / n;
        cells.push_back(cj);
        table << "| " << decide::to_string(arm) << " | " << fixed(c.true_speedup.mean, 3)
              << "x (" << fixed(c.true_speedup.min, 3) << "-" << fixed(c.true_speedup.max, 3)
              << ") | " << fixed(c.fraction.mean, 3) << " | "
              << fixed(c.trials_to_reach.mean, 1) << "; " << c.reached << "/" << c.runs
              << " | " << fixed(failed / n, 1) << " | " << fixed(c.ooms.mean, 1) << " | "
              << fixed(served / n, 1) << " / " << fixed(proposed / n, 1) << " / "
              << fixed(seed_ooms / n, 1) << " |\n";
      }
    }
  double total_wall = elapsed_s(total_start);
  std::string command = "bench/search_quality";
  for (int i = 1; i < argc; ++i)
    command += std::string{" "} + argv[i];
  auto task_list = [](const std::vector<task_info>& v) {
    json a = json::array();
    for (const auto& t : v)
      a.push_back({{"name", t.name},
                   {"file", t.file},
                   {"baseline_true_step_s", t.baseline_s},
                   {"optimum_true_step_s", t.optimum_s},
                   {"optimum_speedup", t.optimum_speedup()},
                   {"optimum", t.optimum}});
    return a;
  };
  json doc;
  doc["benchmark"] = "transfer/1";
  doc["command"] = command;
  doc["settings"] = {{"budget", o.budget},
                     {"seeds", seeds},
                     {"policies", names},
                     {"nodes", o.nodes},
                     {"reach_fraction", reach_fraction},
                     {"arms", {"none", "all", "filtered"}}};
  doc["sources"] = task_list(sources);
  doc["targets"] = task_list(tasks);
  json bj = json::array();
  for (const auto& rec : bank)
    bj.push_back({{"gpu", rec.contains("hardware_identity")
                            ? rec["hardware_identity"].value("gpu", "")
                            : rec.value("hardware", "")},
                  {"model", rec.contains("workload_identity")
                              ? rec["workload_identity"].value("model", "")
                              : rec.value("workload", "")},
                  {"run", rec.value("run", "")},
                  {"speedup", rec.value("speedup", 1.0)},
                  {"change", rec.value("change", "")}});
  doc["bank"] = bj;
  doc["arms"] = cells;
  json fj = json::array();
  for (const auto& r : fills)
    fj.push_back(run_json(r));
  doc["fill_runs"] = fj;
  json rj = json::array();
  for (const auto& r : runs) {
    auto j = run_json(r);
    j["arm"] = r.arm;
    j["seeds_served"] = r.seeds_served;
    j["seeds_proposed"] = r.seeds_proposed;
    j["seed_ooms"] = r.seed_ooms;
    rj.push_back(std::move(j));
  }
  doc["runs"] = rj;
  doc["wall_s"] = {{"total", total_wall}};

  std::ostringstream md;
  md << "# Transfer experiment: experience served cold, all, hardware-filtered\n\n"
     << "Produced by `" << command << "` (" << fixed(total_wall, 1) << " s). All numbers come "
     << "from the cluster simulator (infrarsi-sim; true speedups are its noise-free step "
     << "times). Budget " << o.budget << " search trials, seeds " << seeds.front() << ".."
     << seeds.back() << ", " << o.nodes << " node slot(s).\n\n"
     << "The bank: the findings promoted by the runs of ";
  for (std::size_t i = 0; i < sources.size(); ++i)
    md << (i ? ", " : "") << "`" << sources[i].name << "`";
  md << " (each policy and seed, served nothing): " << bank.size() << " finding(s).\n\n"
     << "| finding from | model | verified speedup there | change |\n|---|---|---|---|\n";
  for (const auto& b : bj)
    md << "| " << b["gpu"].get<std::string>() << " | " << b["model"].get<std::string>() << " | "
       << fixed(b["speedup"].get<double>(), 3) << "x | " << b["change"].get<std::string>()
       << " |\n";
  md << "\nArms: `none` is a cold start; `all` is served every finding, best verified speedup "
        "first; `filtered` is served the findings of the same workload on similar hardware "
        "(docs/experience.md, \"Serving\"). Trials to 90 %: the first search trial whose true "
        "speedup is at least 90 % of the optimum's (a run that never gets there counts as "
     << o.budget + 1 << "). Failed device-s: search trials that failed (OOM, crash, launch "
        "error, contract).\n"
     << table.str();
  if (write_outputs(o.out, "transfer", doc, md.str(), o.quiet, total_wall) != 0)
    return 1;
  return any_error ? 1 : 0;
}
// ---- real tables (bench/table_evaluator.hpp; bench/README.md "Real tables") -----------------------

/// The task files of bench/tables/tasks/, sorted.
std::vector<std::string> table_task_files() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e :
       fs::directory_iterator(fs::path{INFRARSI_SOURCE_DIR} / "bench/tables/tasks", ec))
    if (e.path().extension() == ".toml")
      out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// What the analytic prior (tuning::layout_prior) alone says of a table, against its rows.
json prior_score(table_evaluator& ev) {
  json j;
  std::string why;
  auto prior = tuning::layout_prior::from_task(ev.task(), why);
  if (!prior) {
    j["error"] = why;
    return j;
  }
  const double capacity = ev.memory_capacity_bytes();
  std::vector<double> pred, meas, log_ratio, mem_pred, mem_meas;
  std::size_t tp = 0, fp = 0, fn = 0, tn = 0, invalid = 0;
  double best_pred = std::numeric_limits<double>::infinity();
  const table_entry* prior_pick = nullptr;
  json rows = json::array();
  for (const auto& e : ev.legal()) {
    auto est = prior->estimate(e.config.knobs);
    if (!est.valid) {
      ++invalid;
      continue;
    }
    const bool fits = capacity <= 0 || est.peak_memory_bytes <= capacity;
    if (fits && est.step_time_s < best_pred) {
      best_pred = est.step_time_s;
      prior_pick = &e;
    }
    if (e.outcome == table_entry::status::absent)
      continue;
    const bool ok = e.outcome == table_entry::status::ok;
    json r{{"config", e.config.key()},
           {"outcome", ok ? "ok" : "failed"},
           {"predicted_step_s", est.step_time_s},
           {"predicted_peak_bytes", est.peak_memory_bytes}};
    if (ok) {
      r["measured_step_s"] = e.step_time_s;
      pred.push_back(est.step_time_s);
      meas.push_back(e.step_time_s);
      log_ratio.push_back(std::log(e.step_time_s) - std::log(est.step_time_s));
      if (e.peak_memory_bytes > 0) {
        r["measured_peak_bytes"] = e.peak_memory_bytes;
        mem_pred.push_back(est.peak_memory_bytes);
        mem_meas.push_back(e.peak_memory_bytes);
      }
    }
    rows.push_back(std::move(r));
    if (capacity > 0) {
      if (fits && ok)
        ++tp;
      else if (fits && !ok)
        ++fp;
      else if (!fits && ok)
        ++fn;
      else
        ++tn;
    }
  }
  j["ok_rows_scored"] = pred.size();
  j["invalid_layouts"] = invalid;
  auto rho = spearman(pred, meas);
  j["spearman"] = rho ? json(*rho) : json(nullptr);
  if (!log_ratio.empty()) {
    // The least-squares scale on log time: log c = mean(log measured - log predicted).
    double mean = 0;
    for (double x : log_ratio)
      mean += x;
    mean /= static_cast<double>(log_ratio.size());
    const double c = std::exp(mean);
    double mape = 0, raw = 0;
    for (std::size_t i = 0; i < pred.size(); ++i) {
      mape += std::abs(c * pred[i] - meas[i]) / meas[i];
      raw += std::abs(pred[i] - meas[i]) / meas[i];
    }
    j["calibration_scale"] = c;
    j["mape_calibrated"] = mape / static_cast<double>(pred.size());
    j["mape_uncalibrated"] = raw / static_cast<double>(pred.size());
  }
  if (!mem_pred.empty()) {
    double m = 0;
    for (std::size_t i = 0; i < mem_pred.size(); ++i)
      m += std::abs(mem_pred[i] - mem_meas[i]) / mem_meas[i];
    j["memory_rows"] = mem_pred.size();
    j["memory_mape"] = m / static_cast<double>(mem_pred.size());
    auto mr = spearman(mem_pred, mem_meas);
    j["memory_spearman"] = mr ? json(*mr) : json(nullptr);
  }
  if (capacity > 0 && tp + fp + fn + tn > 0) {
    auto ratio = [](std::size_t a, std::size_t b) { return b == 0 ? json(nullptr) : json(double(a) / double(b)); };
    j["fits"] = {{"true_fits", tp}, {"false_fits", fp}, {"false_oom", fn}, {"true_oom", tn},
                 {"precision", ratio(tp, tp + fp)}, {"recall", ratio(tp, tp + fn)}};
    j["does_not_fit"] = {{"precision", ratio(tn, tn + fn)}, {"recall", ratio(tn, tn + fp)}};
  }
  // Trusting the prior alone: its fastest configuration predicted to fit, run once.
  if (prior_pick != nullptr) {
    j["prior_pick"] = prior_pick->config.diff_from(ev.baseline().config);
    const double t = prior_pick->outcome == table_entry::status::ok
                         ? std::min(prior_pick->step_time_s, ev.baseline_true_step_time())
                         : ev.baseline_true_step_time();
    j["prior_pick_fraction"] = ev.optimum_step_time() / t;
    j["prior_pick_outcome"] = prior_pick->outcome == table_entry::status::ok       ? "ok"
                              : prior_pick->outcome == table_entry::status::failed ? "failed"
                                                                                  : "absent";
  }
  j["rows"] = rows;
  return j;
}

/// The search's fraction of each legal non-baseline configuration for random_expected_best, and
/// how many of them fail (failed or absent).
std::pair<std::vector<double>, std::size_t> random_fractions(table_evaluator& ev) {
  std::vector<double> f;
  std::size_t failed = 0;
  const double base = ev.baseline_true_step_time();
  for (std::size_t i = 1; i < ev.legal().size(); ++i) {
    const auto& e = ev.legal()[i];
    const bool ok = e.outcome == table_entry::status::ok;
    failed += ok ? 0 : 1;
    f.push_back(ev.optimum_step_time() / (ok ? std::min(base, e.step_time_s) : base));
  }
  return {f, failed};
}

/// AMP's own ranking (the table's trial_order column: its cost model's order of trials): the
/// best fraction of its first k picks (with the baseline), and how many of them failed;
/// nullopt when the table has no such column.
std::optional<std::pair<double, std::size_t>> ranking_best(table_evaluator& ev, std::size_t k) {
  const auto& t = ev.table();
  const int col = t.column("trial_order");
  if (col < 0)
    return std::nullopt;
  std::map<std::size_t, const table_entry*> of_row;
  for (const auto& e : ev.legal())
    for (auto r : e.rows)
      of_row[r] = &e;
  std::vector<std::pair<double, std::size_t>> order;
  for (auto r : ev.subset_rows()) {
    const auto& text = t.rows[r][static_cast<std::size_t>(col)];
    if (!text.empty())
      order.emplace_back(std::stod(text), r);
  }
  std::sort(order.begin(), order.end());
  double best = ev.baseline_true_step_time();
  std::size_t failed = 0;
  for (std::size_t i = 0; i < std::min(k, order.size()); ++i) {
    const auto* e = of_row.count(order[i].second) ? of_row[order[i].second] : nullptr;
    if (e != nullptr && e->outcome == table_entry::status::ok)
      best = std::min(best, e->step_time_s);
    else
      ++failed;
  }
  return std::make_pair(ev.optimum_step_time() / best, failed);
}

/// One policy's runs on one table at one budget, summarised.
struct table_cell {
  std::string policy;
  std::uint32_t budget = 0;
  std::size_t runs = 0, errors = 0, promoted = 0;
  double best_found = 0, promoted_fraction = 0, failed = 0, failed_share = 0, ooms = 0,
         absent = 0, search_trials = 0, wall_s = 0;
  double best_found_min = 1, promoted_min = 1;
  json per_seed = json::array();
};

table_cell run_table_cell(table_evaluator& ev, const tuning::planner_policy& policy,
                          const std::string& name, const std::vector<std::uint64_t>& seeds,
                          std::uint32_t budget, const tuning::prior_set& priors,
                          const std::string& task_text, bool quiet) {
  table_cell c;
  c.policy = name;
  c.budget = budget;
  const double opt_speedup = ev.baseline_true_step_time() / ev.optimum_step_time();
  for (auto seed : seeds) {
    auto r = run_one(ev, policy, name, seed, budget, priors, 1, task_text);
    ++c.runs;
    c.wall_s += r.wall_s;
    if (!r.error.empty()) {
      ++c.errors;
      c.per_seed.push_back({{"seed", seed}, {"error", r.error}});
      std::cerr << "infrarsi_search_quality: " << name << " on " << r.task << " seed " << seed
                << ": " << r.error << "\n";
      continue;
    }
    const double best = r.best_explored_true_speedup / opt_speedup;
    const std::size_t failed = r.ooms + r.launch_errors + r.crashes + r.contract_violations +
                               r.constraint_refusals;
    c.best_found += best;
    c.best_found_min = std::min(c.best_found_min, best);
    c.promoted_fraction += r.fraction_of_optimum;
    c.promoted_min = std::min(c.promoted_min, r.fraction_of_optimum);
    c.promoted += r.promoted ? 1 : 0;
    c.failed += static_cast<double>(failed);
    c.failed_share += r.search_trials > 0 ? double(failed) / double(r.search_trials) : 0.0;
    c.ooms += static_cast<double>(r.ooms);
    c.absent += static_cast<double>(r.launch_errors);
    c.search_trials += static_cast<double>(r.search_trials);
    c.per_seed.push_back({{"seed", seed},
                          {"best_found_fraction", best},
                          {"promoted_fraction", r.fraction_of_optimum},
                          {"promoted", r.promoted ? json(r.promoted_change) : json(nullptr)},
                          {"search_trials", r.search_trials},
                          {"failed", failed},
                          {"ooms", r.ooms},
                          {"absent", r.launch_errors},
                          {"stop", r.stop_reason}});
  }
  const double n = static_cast<double>(std::max<std::size_t>(1, c.runs - c.errors));
  for (double* x : {&c.best_found, &c.promoted_fraction, &c.failed, &c.failed_share, &c.ooms,
                    &c.absent, &c.search_trials})
    *x /= n;
  if (!quiet)
    std::cerr << "  " << name << " budget " << budget << ": best-found " << fixed(c.best_found, 3)
              << ", promoted " << fixed(c.promoted_fraction, 3) << ", failed "
              << fixed(c.failed, 2) << " (" << fixed(100 * c.failed_share, 1) << " %), "
              << fixed(c.wall_s, 1) << " s for " << c.runs << " seeds\n";
  return c;
}

json cell_to_json(const table_cell& c) {
  return {{"policy", c.policy},
          {"budget", c.budget},
          {"runs", c.runs},
          {"errors", c.errors},
          {"best_found_fraction", c.best_found},
          {"best_found_fraction_min", c.best_found_min},
          {"promoted_fraction", c.promoted_fraction},
          {"promoted_fraction_min", c.promoted_min},
          {"promoted_runs", c.promoted},
          {"failed_trials", c.failed},
          {"failed_share", c.failed_share},
          {"ooms", c.ooms},
          {"absent", c.absent},
          {"search_trials", c.search_trials},
          {"wall_s", c.wall_s},
          {"per_seed", c.per_seed}};
}

std::string opt_text(const json& v, int digits) {
  return v.is_number() ? fixed(v.get<double>(), digits) : std::string{"-"};
}

/// --tables: the real-table benchmark (bench/README.md "Real tables"). Writes OUT/tables.json
/// and OUT/tables.md. Returns 0, 1 (a run failed) or 2 (bad input).
int tables_main(const options& o, const std::vector<std::uint32_t>& budgets,
                const tuning::planner_policy* optuna, const std::string& optuna_name,
                int argc, char** argv) {
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> files;
  if (o.tasks.empty())
    files = table_task_files();
  else
    for (const auto& a : split_list(o.tasks))
      files.push_back(task_path(a));
  if (files.empty()) {
    std::cerr << "infrarsi_search_quality: --tables: no task under bench/tables/tasks/\n";
    return 2;
  }
  const std::string default_name = tuning::default_policy_name;
  auto default_policy = tuning::make_policy(default_name);
  std::vector<std::uint64_t> seeds, optuna_seeds;
  for (std::uint64_t i = 0; i < o.seeds; ++i)
    seeds.push_back(o.first_seed + i);
  for (std::uint64_t i = 0; i < std::min(o.seeds, o.optuna_seeds); ++i)
    optuna_seeds.push_back(o.first_seed + i);
  bool any_error = false;
  json tasks = json::array();
  std::ostringstream md, summary;
  std::map<std::uint32_t, std::vector<double>> g_best, g_prom, g_rand, g_opt;
  // The same over the tables with more than 4 legal configurations (the Lucie seq2k subsets
  // have 4: three to search).
  std::map<std::uint32_t, std::vector<double>> l_best, l_prom, l_rand, l_opt;
  for (const auto& path : files) {
    auto t = adapters::load_task_file(path);
    if (!t) {
      std::cerr << "infrarsi_search_quality: --tasks: '" << path << "': " << describe(t.error())
                << "\n";
      return 2;
    }
    std::string why;
    auto ev = table_evaluator::create(*t, why);
    if (!ev) {
      std::cerr << "infrarsi_search_quality: --tables: " << why << "\n";
      return 2;
    }
    std::ifstream text_file(path, std::ios::binary);
    std::ostringstream text;
    text << text_file.rdbuf();
    tuning::prior_set priors;
    if (!o.knowledge.empty()) {
      auto p = actors::load_knowledge(ev->task(), o.knowledge);
      if (!p) {
        std::cerr << "search_quality: " << describe(p.error()) << '\n';
        return 2;
      }
      priors = std::move(*p);
    }
    std::size_t ok = 0, failed_cfg = 0, absent = 0;
    for (const auto& e : ev->legal())
      (e.outcome == table_entry::status::ok       ? ok
       : e.outcome == table_entry::status::failed ? failed_cfg
                                                  : absent)++;
    const bool searched = ev->recorded() >= 4;
    json tj{{"name", ev->task().name},
            {"file", display_path(path)},
            {"table", display_path(ev->table().path)},
            {"subset_rows", ev->subset_rows().size()},
            {"legal_configurations", ev->legal().size()},
            {"ok", ok},
            {"failed", failed_cfg},
            {"absent", absent},
            {"baseline", ev->baseline().config.key()},
            {"baseline_step_s", ev->baseline_true_step_time()},
            {"optimum_step_s", ev->optimum_step_time()},
            {"optimum", ev->optimum_description()},
            {"baseline_fraction", ev->optimum_step_time() / ev->baseline_true_step_time()},
            {"gpus", ev->gpus()},
            {"searched", searched}};
    if (!o.quiet)
      std::cerr << "infrarsi_search_quality: " << ev->task().name << ": " << ev->legal().size()
                << " legal configurations (" << ok << " ok, " << failed_cfg << " failed, "
                << absent << " absent), baseline " << fixed(ev->baseline_true_step_time(), 3)
                << " s, optimum " << fixed(ev->optimum_step_time(), 3) << " s\n";
    auto prior = prior_score(*ev);
    tj["prior"] = prior;
    auto [fractions, rand_failed] = random_fractions(*ev);
    json cells = json::array();
    md << "\n### `" << ev->task().name << "`\n\n"
       << display_path(ev->table().path) << ": " << ev->subset_rows().size()
       << " rows of the subset; " << ev->legal().size() << " legal configurations: " << ok
       << " ok, " << failed_cfg << " failed (replayed as OOM), " << absent
       << " absent (launch error). Baseline `" << ev->baseline().config.key() << "` "
       << fixed(ev->baseline_true_step_time(), 3) << " s (fraction "
       << fixed(ev->optimum_step_time() / ev->baseline_true_step_time(), 3) << "), optimum "
       << fixed(ev->optimum_step_time(), 3) << " s (" << ev->optimum_description() << ").\n\n";
    if (!searched) {
      md << "Not searched: " << ev->recorded()
         << " configurations with a result (fewer than 4); scored by the prior only.\n";
    } else {
      md << "| budget | " << default_name << " best-found | promoted | failed trials (share) | "
         << "random (exact) best-found | random failed share | "
         << (optuna ? optuna_name + " best-found / promoted (" +
                        std::to_string(optuna_seeds.size()) + " seeds)"
                    : std::string{"optuna"})
         << " | table's ranking (AMP) best-found |\n|---|---|---|---|---|---|---|---|\n";
      for (auto b : budgets) {
        auto c = run_table_cell(*ev, *default_policy, default_name, seeds, b, priors, text.str(),
                                o.quiet);
        any_error = any_error || c.errors > 0;
        json cj = cell_to_json(c);
        const double rnd = random_expected_best(fractions, b);
        cj["random_exact_best_found"] = rnd;
        cj["random_failed_share"] =
          fractions.empty() ? 0.0 : double(rand_failed) / double(fractions.size());
        std::optional<table_cell> oc;
        if (optuna != nullptr) {
          oc = run_table_cell(*ev, *optuna, optuna_name, optuna_seeds, b, priors, text.str(),
                              o.quiet);
          any_error = any_error || oc->errors > 0;
          cj["optuna"] = cell_to_json(*oc);
        }
        auto rank = ranking_best(*ev, b);
        if (rank)
          cj["ranking"] = {{"best_found", rank->first}, {"failed", rank->second}};
        cells.push_back(cj);
        g_best[b].push_back(c.best_found);
        g_prom[b].push_back(c.promoted_fraction);
        g_rand[b].push_back(rnd);
        if (oc)
          g_opt[b].push_back(oc->best_found);
        if (ev->legal().size() > 4) {
          l_best[b].push_back(c.best_found);
          l_prom[b].push_back(c.promoted_fraction);
          l_rand[b].push_back(rnd);
          if (oc)
            l_opt[b].push_back(oc->best_found);
        }
        md << "| " << b << " | " << fixed(c.best_found, 3) << " | "
           << fixed(c.promoted_fraction, 3) << " (" << c.promoted << "/" << c.runs - c.errors
           << ") | " << fixed(c.failed, 2) << " (" << fixed(100 * c.failed_share, 1) << " %) | "
           << fixed(rnd, 3) << " | " << fixed(100 * cj["random_failed_share"].get<double>(), 1)
           << " % | "
           << (oc ? fixed(oc->best_found, 3) + " / " + fixed(oc->promoted_fraction, 3) +
                      " (failed " + fixed(100 * oc->failed_share, 1) + " %)"
                  : std::string{"-"})
           << " | "
           << (rank ? fixed(rank->first, 3) + " (" + std::to_string(rank->second) + " failed)"
                    : std::string{"-"})
           << " |\n";
      }
    }
    tj["budgets"] = cells;
    // The prior's score.
    md << "\nPrior alone (`tuning::layout_prior`): ";
    if (prior.contains("error")) {
      md << "none (" << prior["error"].get<std::string>() << ").\n";
    } else {
      md << "Spearman " << opt_text(prior["spearman"], 2) << " over "
         << prior["ok_rows_scored"].get<std::size_t>() << " ok rows; MAPE "
         << opt_text(prior.value("mape_calibrated", json()), 3) << " after calibration (scale "
         << opt_text(prior.value("calibration_scale", json()), 2) << ", "
         << opt_text(prior.value("mape_uncalibrated", json()), 2) << " before)";
      if (prior.contains("fits"))
        md << "; fits: precision " << opt_text(prior["fits"]["precision"], 2) << ", recall "
           << opt_text(prior["fits"]["recall"], 2) << "; does not fit: precision "
           << opt_text(prior["does_not_fit"]["precision"], 2) << ", recall "
           << opt_text(prior["does_not_fit"]["recall"], 2);
      if (prior.contains("memory_mape"))
        md << "; measured peak memory (" << prior["memory_rows"].get<std::size_t>()
           << " rows): MAPE " << opt_text(prior["memory_mape"], 2) << ", Spearman "
           << opt_text(prior["memory_spearman"], 2);
      if (prior.contains("prior_pick"))
        md << "; its fastest fitting pick `" << prior["prior_pick"].get<std::string>() << "` ("
           << prior["prior_pick_outcome"].get<std::string>() << "): fraction "
           << opt_text(prior["prior_pick_fraction"], 3);
      md << ".\n";
    }
    summary << "| `" << ev->task().name << "` | " << ev->legal().size() << " (" << ok << "/"
            << failed_cfg << "/" << absent << ") | "
            << fixed(ev->optimum_step_time() / ev->baseline_true_step_time(), 3) << " | "
            << opt_text(prior.value("spearman", json()), 2) << " | "
            << opt_text(prior.value("mape_calibrated", json()), 3) << " | "
            << (prior.contains("fits") ? opt_text(prior["fits"]["precision"], 2) + " / " +
                                           opt_text(prior["fits"]["recall"], 2)
                                       : std::string{"-"})
            << " | "
            << (prior.contains("fits") ? opt_text(prior["does_not_fit"]["precision"], 2) +
                                           " / " + opt_text(prior["does_not_fit"]["recall"], 2)
                                       : std::string{"-"})
            << " |\n";
    tasks.push_back(std::move(tj));
  }
  const double total_wall = elapsed_s(start);
  std::string command = "bench/search_quality";
  for (int i = 1; i < argc; ++i)
    command += std::string{" "} + argv[i];
  json doc;
  doc["benchmark"] = "tables/1";
  doc["command"] = command;
  doc["settings"] = {{"budgets", budgets},
                     {"seeds", seeds},
                     {"optuna_seeds", optuna_seeds},
                     {"default_policy", default_name},
                     {"optuna_policy", optuna ? json(optuna_name) : json(nullptr)},
                     {"failed_launch_charge_s", table_failed_launch_s},
                     {"promotion_rule", promotion_rule_text}};
  doc["tasks"] = tasks;
  doc["wall_s"] = total_wall;

  std::ostringstream out;
  out << "# Real tables: search quality on published measurements of real clusters\n\n"
      << "Generated by `" << command << "` in " << fixed(total_wall, 1)
      << " s; every number in `tables.json`. Method and sources: bench/README.md \"Real "
         "tables\".\n\n"
      << "- Policy under test: `" << default_name << "` (tuning::default_policy_name), seeds "
      << seeds.front() << ".." << seeds.back() << " (" << seeds.size() << ").\n"
      << "- *best-found*: mean over seeds of optimum / the best true step time the search "
         "measured (the baseline included); *promoted*: optimum / the promoted configuration's "
         "(the baseline's when nothing is promoted), with the runs that promoted; *failed "
         "trials*: search trials that ended OOM or absent from the table (launch error), mean "
         "per run and share of the search trials.\n"
      << "- *random (exact)*: the expected best-found of k distinct configurations drawn "
         "uniformly from the legal ones other than the baseline, failures counting as the "
         "baseline (closed form, bench/README.md); its failed share is the failing share of "
         "those configurations.\n"
      << "- *table's ranking*: the AMP tuner's own cost-model order (`trial_order` column): best "
         "of its first k picks with the baseline.\n\n"
      << "## Geometric mean over the searched tables\n\n";
  json summary_json = json::array();
  for (int part = 0; part < 2; ++part) {
    auto& best = part == 0 ? g_best : l_best;
    auto& prom = part == 0 ? g_prom : l_prom;
    auto& rand = part == 0 ? g_rand : l_rand;
    auto& opt = part == 0 ? g_opt : l_opt;
    const std::size_t n = best.empty() ? 0 : best.begin()->second.size();
    out << (part == 0 ? "All " + std::to_string(n) + " searched tables"
                      : "The " + std::to_string(n) + " tables with more than 4 legal "
                        "configurations")
        << ":\n\n| budget | " << default_name << " best-found | promoted | random (exact) | "
        << (optuna ? optuna_name : "optuna") << " best-found |\n|---|---|---|---|---|\n";
    for (auto b : budgets) {
      out << "| " << b << " | " << fixed(geomean(best[b]), 3) << " | "
          << fixed(geomean(prom[b]), 3) << " | " << fixed(geomean(rand[b]), 3) << " | "
          << (opt[b].empty() ? std::string{"-"} : fixed(geomean(opt[b]), 3)) << " |\n";
      summary_json.push_back({{"tables", part == 0 ? "searched" : "more_than_4_legal"},
                              {"count", n},
                              {"budget", b},
                              {"best_found", geomean(best[b])},
                              {"promoted", geomean(prom[b])},
                              {"random_exact", geomean(rand[b])},
                              {"optuna_best_found", opt[b].empty() ? json(nullptr)
                                                                   : json(geomean(opt[b]))}});
    }
    out << "\n";
  }
  doc["geometric_means"] = summary_json;
  out << "\n## The prior alone\n\n"
      << "| table | legal (ok/failed/absent) | baseline fraction | Spearman | MAPE (calibrated) "
         "| fits: precision / recall | does not fit: precision / recall |\n"
         "|---|---|---|---|---|---|---|\n"
      << summary.str() << "\n## Per table\n" << md.str();
  if (write_outputs(o.out, "tables", doc, out.str(), o.quiet, total_wall) != 0)
    return 1;
  return any_error ? 1 : 0;
}

int main_impl(int argc, char** argv) {
  options o;
  CLI::App app{
      "infrarsi_search_quality: the search-quality benchmark (issue 6). Runs every search policy "
      "on the simulator tasks with N seeds and a fixed budget of search trials, promotes with "
      "tune's verifier rule, and scores the promoted configuration's true (noise-free) speedup "
      "against the task's exhaustive optimum. Writes OUT/search_quality.json (every run and the "
      "aggregates; identical for identical arguments except the \"wall_s\" object) and "
      "OUT/search_quality.md (the table). Metrics: bench/README.md. Usually run through "
      "bench/search_quality, which builds it first."};
  app.add_option("--policies", o.policies,
                 "Comma-separated policy names (default: every policy tuning::make_policy "
                 "builds, plus optuna_tpe/1, optuna_tpe_fair/1 and optuna_tpe_constrained/1 "
                 "unless --no-optuna)");
  app.add_option("--tasks", o.tasks,
                 "Comma-separated task files, or names under config/tasks/ (default: "
                 "sim-dense-1node,sim-dense-multinode,sim-moe-1node,sim-moe-multinode)");
  app.add_option("--seeds", o.seeds, "Number of seeds per policy and task (default 5)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1000}));
  app.add_option("--first-seed", o.first_seed, "First seed; seeds are consecutive (default 1)");
  app.add_option("--budget", o.budget, "Search trials per run (default 40)")
      ->check(CLI::Range(1u, 10000u));
  app.add_option("--nodes", o.nodes,
                 "Node slots: up to N trials in flight on a simulated clock, proposals in "
                 "batches as large as the free slots, as `infrarsi tune --nodes N` (default 1)")
      ->check(CLI::Range(1u, 1024u));
  app.add_option("--out", o.out, "Output directory (default: bench/results of the source tree)");
  app.add_flag("--optuna,!--no-optuna", o.optuna,
               "Include optuna_tpe/1, optuna_tpe_fair/1 (failed trials told as pruned) and "
               "optuna_tpe_constrained/1 (told as infeasible through Optuna's constraints_func) "
               "in the default policies (default on; needs the "
               "infrarsi_bench_optuna library at build time and /usr/bin/python3 with optuna)");
  app.add_option("--optuna-script", o.optuna_script, "bench/optuna_tpe.py (default: the source tree's)");
  app.add_option("--python", o.python, "Interpreter with optuna (default /usr/bin/python3)");
  app.add_flag("--quiet", o.quiet, "No progress lines on stderr");
  app.add_option("--knowledge", o.knowledge,
                 "Offline knowledge base of priors, as infrarsi tune --knowledge (default: the "
                 "source tree's config/knowledge; \"\" for none)");
  app.add_option("--transfer-from", o.transfer_from,
                 "The transfer experiment instead of the benchmark: tune these comma-separated "
                 "source tasks (each policy, each seed, no experience) to fill an experience "
                 "bank, then tune each --tasks target three times per policy and seed: cold "
                 "(--experience none), with every finding (all) and with the hardware-filtered "
                 "findings (filtered); writes OUT/transfer.json and OUT/transfer.md");
  app.add_flag("!--no-experience-priors", experience_priors_on,
               "Transfer experiment: do not turn the served finding's learnt effects into the "
               "run's priors (decide::experience_priors), to measure what they add");
  app.add_flag("--tables", o.tables,
               "The real-table benchmark instead (bench/README.md \"Real tables\"): every task "
               "of bench/tables/tasks/ (or --tasks), trials replayed from published measurements "
               "of real clusters, the default policy and --table-optuna at each of --budgets, "
               "random search's exact expectation, the table's own ranking (AMP) and the analytic "
               "prior's score; writes OUT/tables.json and OUT/tables.md (default OUT: "
               "bench/results/tables)");
  app.add_option("--budgets", o.budgets,
                 "--tables: comma-separated budgets of search trials (default 3,5,10,20)");
  app.add_option("--optuna-seeds", o.optuna_seeds,
                 "--tables: seeds of the Optuna policy (the first N of --seeds; default 20)");
  app.add_option("--table-optuna", o.table_optuna,
                 "--tables: the Optuna variant run beside the default policy (default "
                 "optuna_tpe_fair/1; --no-optuna: none)");
  app.add_option("--grid", o.grid,
                 "Grid file of the real task (default bench/results/<task>_grid.json of the "
                 "source tree): read by the benchmark, written by --measure-grid");
  app.add_flag("--measure-grid", o.measure_grid,
               "Instead of the benchmark: measure every knob assignment of the real task(s) in "
               "--tasks --repeats times in interleaved rounds and write the grid file "
               "(bench/README.md \"Real CPU workload\")");
  app.add_option("--repeats", o.repeats, "--measure-grid: measurements per assignment (default 3)")
      ->check(CLI::Range(1u, 100u));
  app.add_option("--grid-limit", o.grid_limit,
                 "--measure-grid: only the first N assignments, baseline first (default 0: all)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e); // help: exit 0
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2; // a bad option (bench/README.md): always 2, whatever CLI11's own code
  }
  for (const char* name :
       {"--first-seed", "--seeds", "--budget", "--nodes", "--repeats", "--grid-limit",
        "--optuna-seeds"}) {
    // Unsigned options: CLI11 would wrap "-1" to 2^64 - 1.
    for (const auto& text : app.get_option(name)->results())
      if (!text.empty() && text.front() == '-') {
        std::cerr << "infrarsi_search_quality: " << name << " " << text
                  << ": must be a non-negative integer\n";
        return 2;
      }
  }
  if (!o.measure_grid && (app.count("--grid-limit") > 0 || app.count("--repeats") > 0)) {
    std::cerr << "infrarsi_search_quality: --grid-limit and --repeats apply to --measure-grid "
                 "only\n";
    return 2;
  }
  if (o.measure_grid)
    return measure_grid_main(o, argc, argv);
  if (!o.tables && (app.count("--budgets") > 0 || app.count("--optuna-seeds") > 0 ||
                    app.count("--table-optuna") > 0)) {
    std::cerr << "infrarsi_search_quality: --budgets, --optuna-seeds and --table-optuna apply "
                 "to --tables only\n";
    return 2;
  }
  if (o.tables) {
    if (app.count("--policies") > 0 || !o.transfer_from.empty() || app.count("--budget") > 0 ||
        app.count("--nodes") > 0) {
      std::cerr << "infrarsi_search_quality: --tables runs the default policy and "
                   "--table-optuna at --budgets on one node slot: --policies, --transfer-from, "
                   "--budget and --nodes do not apply\n";
      return 2;
    }
    std::vector<std::uint32_t> budgets;
    for (const auto& b : split_list(o.budgets)) {
      char* end = nullptr;
      auto v = std::strtoul(b.c_str(), &end, 10);
      if (b.empty() || *end != '\0' || b.front() == '-' || v < 1 || v > 10000) {
        std::cerr << "infrarsi_search_quality: --budgets '" << o.budgets << "': '" << b
                  << "' is not a budget of 1..10000 search trials\n";
        return 2;
      }
      budgets.push_back(static_cast<std::uint32_t>(v));
    }
    if (budgets.empty()) {
      std::cerr << "infrarsi_search_quality: --budgets: no budget given\n";
      return 2;
    }
    if (app.count("--out") == 0)
      o.out = std::string{INFRARSI_SOURCE_DIR} + "/bench/results/tables";
    std::error_code ec;
    fs::create_directories(o.out, ec);
    if (ec || !fs::is_directory(o.out)) {
      std::cerr << "infrarsi_search_quality: --out: cannot create directory '" << o.out
                << "': " << ec.message() << "\n";
      return 2;
    }
    std::unique_ptr<tuning::planner_policy> optuna;
#if defined(INFRARSI_BENCH_HAVE_OPTUNA)
    if (o.optuna) {
      const auto& n = o.table_optuna;
      if (n != optuna_policy_name && n != optuna_fair_policy_name &&
          n != optuna_constrained_policy_name) {
        std::cerr << "infrarsi_search_quality: --table-optuna '" << n << "': expected "
                  << optuna_policy_name << ", " << optuna_fair_policy_name << " or "
                  << optuna_constrained_policy_name << "\n";
        return 2;
      }
      optuna = make_optuna_policy(o.optuna_script, o.python,
                                  n == optuna_fair_policy_name          ? optuna_failures::pruned
                                  : n == optuna_constrained_policy_name ? optuna_failures::constraint
                                                                        : optuna_failures::fail);
    }
#endif
    return tables_main(o, budgets, optuna.get(), o.table_optuna, argc, argv);
  }

#if defined(INFRARSI_BENCH_HAVE_OPTUNA)
  constexpr bool optuna_built = true;
#else
  constexpr bool optuna_built = false;
#endif

  // Policies.
  std::vector<std::string> names;
  if (o.policies.empty()) {
    for (const auto& n : tuning::policy_names()) {
      if (tuning::make_policy(n))
        names.push_back(n);
      else if (!o.quiet)
        std::cerr << "infrarsi_search_quality: policy '" << n
                  << "' is listed by tuning::policy_names() but make_policy does not build it: "
                     "skipped\n";
    }
    if (o.optuna && optuna_built) {
      names.push_back(optuna_policy_name);
      names.push_back(optuna_fair_policy_name);
      names.push_back(optuna_constrained_policy_name);
    } else if (o.optuna && !o.quiet) {
      std::cerr << "infrarsi_search_quality: optuna_tpe/1, optuna_tpe_fair/1 and "
                   "optuna_tpe_constrained/1 skipped: this binary was built without the "
                   "infrarsi_bench_optuna library\n";
    }
  } else {
    names = split_list(o.policies);
  }
  if (names.empty()) {
    std::cerr << "infrarsi_search_quality: --policies: no policy to run\n";
    return 2;
  }
  std::map<std::string, std::unique_ptr<tuning::planner_policy>> policies;
  for (const auto& n : names) {
    if (policies.count(n) != 0) {
      std::cerr << "infrarsi_search_quality: --policies: '" << n << "' given twice\n";
      return 2;
    }
    if (n == optuna_policy_name || n == optuna_fair_policy_name ||
        n == optuna_constrained_policy_name) {
      if (!o.optuna) {
        std::cerr << "infrarsi_search_quality: --policies names " << n
                  << " but --no-optuna is given\n";
        return 2;
      }
#if defined(INFRARSI_BENCH_HAVE_OPTUNA)
      if (!fs::exists(o.optuna_script)) {
        std::cerr << "infrarsi_search_quality: --optuna-script: no such file '" << o.optuna_script
                  << "'\n";
        return 2;
      }
      auto failures = n == optuna_fair_policy_name          ? optuna_failures::pruned
                      : n == optuna_constrained_policy_name ? optuna_failures::constraint
                                                            : optuna_failures::fail;
      policies[n] = make_optuna_policy(o.optuna_script, o.python, failures);
      continue;
#else
      std::cerr << "infrarsi_search_quality: --policies: " << n << " is not available: this "
                   "binary was built without the infrarsi_bench_optuna library\n";
      return 2;
#endif
    }
    auto p = tuning::make_policy(n);
    if (!p) {
      std::string known;
      for (const auto& k : tuning::policy_names())
        if (tuning::make_policy(k))
          known += (known.empty() ? "" : ", ") + k;
      if (optuna_built)
        known += std::string{", "} + optuna_policy_name + ", " + optuna_fair_policy_name + ", " +
                 optuna_constrained_policy_name;
      std::cerr << "infrarsi_search_quality: --policies: unknown or unavailable policy '" << n
                << "' (available: " << known << ")\n";
      return 2;
    }
    policies[n] = std::move(p);
  }

  std::vector<std::uint64_t> seeds;
  for (std::uint64_t i = 0; i < o.seeds; ++i)
    seeds.push_back(o.first_seed + i);

  // Output directory (checked before hours of work).
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec || !fs::is_directory(o.out)) {
    std::cerr << "infrarsi_search_quality: --out: cannot create directory '" << o.out
              << "': " << ec.message() << "\n";
    return 2;
  }

  auto total_start = std::chrono::steady_clock::now();
  // Tasks and their oracles.
  std::vector<std::string> task_args = o.tasks.empty() ? default_tasks : split_list(o.tasks);
  if (task_args.empty()) {
    std::cerr << "infrarsi_search_quality: --tasks: no task given\n";
    return 2;
  }
  std::vector<std::unique_ptr<evaluator>> evaluators;
  std::vector<std::string> task_texts; ///< each task file's text (ContractLocked "task_toml")
  std::vector<task_info> tasks;
  std::vector<tuning::prior_set> task_priors;
  if (int rc = load_tasks(task_args, o, evaluators, task_texts, tasks, task_priors); rc != 0)
    return rc;
  if (!o.transfer_from.empty())
    return transfer_main(o, names, policies, seeds, evaluators, task_texts, tasks, task_priors,
                         argc, argv, total_start);

  // Runs: task, then policy, then seed.
  std::vector<run_result> runs;
  std::size_t total = tasks.size() * names.size() * seeds.size();
  bool any_error = false;
  for (std::size_t ti = 0; ti < tasks.size(); ++ti)
    for (const auto& name : names)
      for (auto seed : seeds) {
        auto r = run_one(*evaluators[ti], *policies.at(name), name, seed, o.budget,
                         task_priors[ti], o.nodes, task_texts[ti]);
        if (!r.error.empty()) {
          any_error = true;
          std::cerr << "infrarsi_search_quality: " << name << " on " << r.task << " seed " << seed
                    << ": " << r.error << "\n";
        }
        if (!o.quiet)
          std::cerr << "[" << runs.size() + 1 << "/" << total << "] " << name << " " << r.task
                    << " seed " << seed << ": true speedup " << fixed(r.true_speedup, 3)
                    << "x (" << fixed(r.fraction_of_optimum, 3) << " of optimum "
                    << fixed(tasks[ti].optimum_speedup(), 3) << "x), "
                    << (r.promoted ? "promoted " + r.promoted_change : std::string{"nothing promoted"})
                    << "; " << r.search_trials << " trials (" << r.stop_reason << "), "
                    << fixed(r.wall_s, 2) << " s\n";
        runs.push_back(std::move(r));
      }

  // Aggregates.
  std::vector<cell> cells;
  for (const auto& p : names)
    for (const auto& t : tasks)
      cells.push_back(aggregate(p, t.name, runs, o.budget));
  json policy_summary = json::array();
  for (const auto& p : names) {
    std::vector<double> sp, fr;
    std::size_t errors = 0;
    for (const auto& c : cells)
      if (c.policy == p) {
        errors += c.errors;
        if (c.errors < c.runs) {
          sp.push_back(c.true_speedup.mean);
          fr.push_back(c.fraction.mean);
        }
      }
    policy_summary.push_back({{"policy", p},
                              {"tasks", sp.size()},
                              {"errors", errors},
                              {"geomean_true_speedup", geomean(sp)},
                              {"geomean_fraction_of_optimum", geomean(fr)}});
  }
  double total_wall = elapsed_s(total_start);

  std::string command = "bench/search_quality";
  for (int i = 1; i < argc; ++i)
    command += std::string{" "} + argv[i];

  // The initial design the planner was given (decide::planner_input_for), from the first run
  // that proposed (null when none did).
  json initial_design = nullptr;
  for (const auto& r : runs)
    if (r.proposal_calls > 0) {
      initial_design = r.initial_design;
      break;
    }
  json doc;
  doc["benchmark"] = "search_quality/1";
  doc["command"] = command;
  doc["settings"] = {{"budget", o.budget},
                     {"seeds", seeds},
                     {"policies", names},
                     {"baseline_repeats", baseline_repeats},
                     {"verify_top", verify_top},
                     {"verify_repeats", verify_repeats},
                     {"nodes", o.nodes},
                     {"initial_design", initial_design},
                     {"reach_fraction", reach_fraction},
                     {"promotion_rule", promotion_rule_text},
                     {"failed_launch_charge_s", sim_failed_launch_s}};
  json tj = json::array();
  for (const auto& t : tasks) {
    json inc = json::array();
    for (const auto& [a, b] : t.incompatible)
      inc.push_back({a, b});
    tj.push_back({{"name", t.name},
                  {"file", t.file},
                  {"simulated_time", t.simulated},
                  {"baseline_true_step_s", t.baseline_s},
                  {"optimum_true_step_s", t.optimum_s},
                  {"optimum_speedup", t.optimum_speedup()},
                  {"optimum", t.optimum},
                  {"configurations", t.space},
                  {"incompatible_patches", inc},
                  {"memory_capacity_bytes", t.memory_capacity_bytes}});
  }
  doc["tasks"] = tj;
  json pj = json::array();
  for (const auto& c : cells)
    pj.push_back(cell_json(c));
  doc["aggregates"] = pj;
  doc["policy_summary"] = policy_summary;
  json rj = json::array();
  for (const auto& r : runs)
    rj.push_back(run_json(r));
  doc["runs"] = rj;
  // Everything that depends on the machine's speed, apart (diff with `jq 'del(.wall_s)'`).
  json wall;
  wall["total"] = total_wall;
  json ow = json::object();
  for (const auto& t : tasks)
    ow[t.name] = t.oracle_wall_s;
  wall["oracle"] = ow;
  json cw = json::array();
  for (const auto& c : cells)
    cw.push_back({{"policy", c.policy}, {"task", c.task}, {"mean_run_s", c.mean_wall_s}});
  wall["mean_run_by_policy_task"] = cw;
  json rw = json::array();
  for (const auto& r : runs)
    rw.push_back({{"policy", r.policy}, {"task", r.task}, {"seed", r.seed}, {"run_s", r.wall_s}});
  wall["runs"] = rw;
  doc["wall_s"] = wall;

  if (write_outputs(o.out, "search_quality", doc,
                    markdown(tasks, names, cells, policy_summary, o, seeds, command, total_wall,
                             runs.size()),
                    o.quiet, total_wall)
      != 0)
    return 1;
  if (!o.quiet) {
    for (const auto& s : policy_summary)
      std::cerr << "  " << s["policy"].get<std::string>() << ": geometric mean true speedup "
                << fixed(s["geomean_true_speedup"].get<double>(), 3) << "x, fraction of optimum "
                << fixed(s["geomean_fraction_of_optimum"].get<double>(), 3) << "\n";
  }
  return any_error ? 1 : 0;
}

} // namespace
} // namespace infrarsi::bench

int main(int argc, char** argv) {
  try {
    return infrarsi::bench::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "infrarsi_search_quality: " << e.what() << "\n";
    return 1;
  }
}
