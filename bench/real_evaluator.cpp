#include "bench/real_evaluator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "decide/decisions.hpp"
#include "adapters/environment.hpp"
#include "adapters/trial_launcher.hpp"
#include "bench/sim_evaluator.hpp"
#include "messages/errc.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/planner.hpp"
#include "tuning/search_space.hpp"
#include "tuning/stats.hpp"

namespace fs = std::filesystem;

namespace infrarsi::bench {

namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// /proc/loadavg's 1, 5 and 15 minute averages (empty when unreadable).
nlohmann::json load_average() {
  std::ifstream f{"/proc/loadavg"};
  double a = 0;
  double b = 0;
  double c = 0;
  if (!(f >> a >> b >> c))
    return nlohmann::json::array();
  return {a, b, c};
}

double median_of(std::vector<double> v) {
  if (v.empty())
    return 0.0;
  std::sort(v.begin(), v.end());
  auto n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Writes `text` to `path` through a temporary file and a rename (a reader never sees half).
bool write_atomically(const fs::path& path, const std::string& text, std::string& why) {
  std::error_code ec;
  if (path.has_parent_path())
    fs::create_directories(path.parent_path(), ec);
  auto tmp = path;
  tmp += ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) {
      why = "cannot write '" + tmp.string() + "'";
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    why = "cannot rename '" + tmp.string() + "' to '" + path.string() + "': " + ec.message();
    return false;
  }
  return true;
}

} // namespace

std::string default_grid_file(const std::string& source_dir, const std::string& task_name) {
  return source_dir + "/bench/results/" + task_name + "_grid.json";
}

real_evaluator::real_evaluator(tuning::task_spec task, real_evaluator_options options)
  : task_(std::move(task)), options_(std::move(options)) {}

real_evaluator::~real_evaluator() {
  if (own_root_ && !options_.keep_trials && !root_.empty()) {
    std::error_code ec;
    fs::remove_all(root_, ec); // a temporary directory of our own; failing to remove it is harmless
  }
}

std::unique_ptr<real_evaluator> real_evaluator::create(tuning::task_spec task,
                                                       const real_evaluator_options& options,
                                                       std::string& why) {
  const std::string where = "task '" + task.name + "' (" + task.source + ")";
  if (sim_evaluator::is_sim_task(task)) {
    why = where + ": a simulator task (use sim_evaluator)";
    return nullptr;
  }
  std::error_code ec;
  if (!fs::is_directory(task.workload.workdir, ec)) {
    why = where + ": workload.workdir '" + task.workload.workdir + "' is not a directory";
    return nullptr;
  }
  std::unique_ptr<real_evaluator> ev{new real_evaluator(std::move(task), options)};
  const auto& t = ev->task_;

  // The scope lock, as init takes it: every editable and frozen file's hash.
  for (const auto* globs : {&t.scope.editable, &t.scope.frozen})
    for (const auto& rel : adapters::match_scope(t.workload.workdir, *globs)) {
      auto sha = adapters::sha256_file(t.workload.workdir + "/" + rel);
      if (!sha) {
        why = where + ": scope: " + describe(sha.error());
        return nullptr;
      }
      ev->scope_lock_[rel] = *sha;
    }

  // Where the trials run.
  if (options.trials_root.empty()) {
    auto tmpl = (fs::temp_directory_path(ec) / "infrarsi-real-eval-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) {
      why = where + ": cannot create a temporary directory from '" + tmpl + "'";
      return nullptr;
    }
    ev->root_ = buf.data();
    ev->own_root_ = true;
  } else {
    fs::create_directories(options.trials_root, ec);
    if (!fs::is_directory(options.trials_root)) {
      why = where + ": trials root '" + options.trials_root + "': cannot create it";
      return nullptr;
    }
    ev->root_ = fs::absolute(options.trials_root).string();
  }

  // Patch pairs that do not apply together, among the patches inside the scope (init's check).
  std::vector<std::string> in_scope;
  for (const auto& p : t.patches)
    if (adapters::patch_scope_violation(t, p.name).empty())
      in_scope.push_back(p.name);
  if (in_scope.size() > 1) {
    auto scratch = ev->root_ + "/patch-check";
    auto pairs = adapters::patch_conflicts(t, in_scope, scratch);
    fs::remove_all(scratch, ec); // scratch copies only
    if (!pairs) {
      why = where + ": checking which patches apply together: " + describe(pairs.error());
      return nullptr;
    }
    ev->incompatible_ = *pairs;
  }

  // The oracle.
  if (!options.grid_file.empty() && fs::exists(options.grid_file, ec)) {
    std::ifstream f{options.grid_file};
    auto doc = nlohmann::json::parse(f, nullptr, false);
    const std::string gwhere = "grid file '" + options.grid_file + "'";
    if (doc.is_discarded() || !doc.is_object()) {
      why = where + ": " + gwhere + " is not JSON";
      return nullptr;
    }
    if (doc.value("format", std::string{}) != real_grid_format) {
      why = where + ": " + gwhere + ": format '" + doc.value("format", std::string{}) +
            "', expected '" + real_grid_format + "'";
      return nullptr;
    }
    if (doc.value("task", std::string{}) != t.name) {
      why = where + ": " + gwhere + " was measured for task '" + doc.value("task", std::string{}) +
            "'";
      return nullptr;
    }
    const auto base = canonical_configuration(t, tuning::baseline_configuration(t));
    ev->baseline_key_ = base.key();
    const grid_entry* best = nullptr;
    tuning::configuration best_config;
    const auto none = nlohmann::json::array();
    const auto& assignments = doc.contains("assignments") ? doc["assignments"] : none;
    for (const auto& a : assignments) {
      tuning::configuration c;
      const auto no_knobs = nlohmann::json::object();
      const auto& knobs = a.is_object() && a.contains("knobs") ? a["knobs"] : no_knobs;
      for (const auto& [name, text] : knobs.items()) {
        const auto* k = t.find_knob(name);
        std::string err;
        std::optional<tuning::knob_value> v;
        if (k != nullptr && text.is_string())
          v = tuning::parse_knob_text(*k, text.get<std::string>(), err);
        if (!v) {
          why = where + ": " + gwhere + " names knob '" + name + "' = " + text.dump() +
                ", which the task does not have (measured for another version of the task? "
                "measure it again" +
                (options.grid_command.empty() ? std::string{} : ": " + options.grid_command) + ")";
          return nullptr;
        }
        c.knobs[name] = *v;
      }
      c = canonical_configuration(t, c);
      grid_entry e;
      e.usable = a.value("usable", false);
      if (e.usable && a.contains("median_step_s") && a["median_step_s"].is_number())
        e.median_step_s = a["median_step_s"].get<double>();
      e.usable = e.usable && e.median_step_s > 0;
      auto [it, fresh] = ev->grid_.emplace(c.key(), e);
      if (!fresh) {
        why = where + ": " + gwhere + " lists " + c.key() + " twice";
        return nullptr;
      }
      if (it->second.usable && (best == nullptr || it->second.median_step_s < best->median_step_s)) {
        best = &it->second;
        best_config = c;
      }
    }
    auto b = ev->grid_.find(ev->baseline_key_);
    if (b == ev->grid_.end() || !b->second.usable) {
      why = where + ": " + gwhere + ": the baseline (" + ev->baseline_key_ + ") is " +
            (b == ev->grid_.end() ? "not in it" : "not usable in it");
      return nullptr;
    }
    ev->optimum_step_s_ = best->median_step_s;
    auto change = best_config.diff_from(base);
    ev->optimum_text_ = change.empty() ? "the baseline" : change;
    if (!doc.value("complete", false))
      ev->optimum_text_ += " (partial grid: " + std::to_string(ev->grid_.size()) + " of " +
                           std::to_string(doc.value("assignments_total", 0)) + " assignments)";
    ev->grid_doc_ = std::move(doc);
    ev->grid_file_ = options.grid_file;
  } else if (options.require_grid) {
    why = where + ": no grid file '" + options.grid_file +
          "': the real task's truth is the exhaustive measurement of its knob grid; make it with: " +
          (options.grid_command.empty() ? std::string{"infrarsi_real_grid --task " + t.source}
                                        : options.grid_command);
    return nullptr;
  }
  ev->begin_run(0);
  return ev;
}

void real_evaluator::begin_run(std::uint64_t /*seed: the machine's noise is its own*/) {
  ++run_index_;
  projection_ = std::make_unique<store::run_projection>("bench-run-" + std::to_string(run_index_));
  sequence_ = 0;
  calibrated_ = false;
}

void real_evaluator::fold(std::uint16_t kind, const messages::byte_buffer& payload) {
  store::recorded_event ev;
  ev.kind = kind;
  ev.run_id = projection_->state().run_id;
  ev.sequence = sequence_;
  ev.global_position = sequence_;
  ++sequence_;
  ev.payload = payload;
  projection_->apply(ev);
}

void real_evaluator::fold_document(std::uint16_t kind, const std::string& schema,
                                   const std::string& json) {
  fold(kind, messages::make_document(schema, json).bytes());
}

void real_evaluator::verify(std::uint64_t trial_id, std::uint32_t attempt) {
  auto verdict = decide::check_doc(task_, projection_->state(), trial_id, attempt);
  if (!verdict)
    throw std::runtime_error("verifier: " + describe(verdict.error()));
  fold_document(static_cast<std::uint16_t>(wire::EventKind::TrialVerified), "verdict/1", *verdict);
}

void real_evaluator::calibrate() {
  auto doc = decide::calibrate_doc(task_, projection_->state());
  auto j = nlohmann::json::parse(doc);
  if (j.contains("error"))
    throw std::runtime_error("task '" + task_.name + "': the loss reference cannot be made: " +
                             j["error"].get<std::string>());
  fold_document(static_cast<std::uint16_t>(wire::EventKind::BaselineCalibrated), "doctor/1", doc);
  calibrated_ = true;
  // The doctor verifies every baseline not yet judged against the new reference.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> todo;
  for (const auto& t : projection_->state().trials)
    if (t.purpose == "baseline" && t.finished && !t.verified &&
        t.outcome != tuning::trial_outcome::lost)
      todo.emplace_back(t.trial_id, t.attempt);
  for (const auto& [id, attempt] : todo)
    verify(id, attempt);
}

tuning::trial_record real_evaluator::measure(const tuning::configuration& config,
                                             std::uint64_t trial_id, std::uint32_t attempt,
                                             const std::string& purpose,
                                             const tuning::loss_reference* early_stop,
                                             const std::vector<std::string>& smoke_patches) {
  const auto& state = projection_->state();
  if (state.find(trial_id, attempt) != nullptr)
    throw std::runtime_error("real_evaluator: trial " + std::to_string(trial_id) + "/" +
                             std::to_string(attempt) + " was already measured in this run");
  // Before the first trial that is not a baseline, the reference must exist (the doctor ran).
  if (purpose != "baseline" && !calibrated_)
    calibrate();

  adapters::trial_request req;
  req.task = &task_;
  req.knobs = config.knobs;
  req.patches = config.patches;
  std::sort(req.patches.begin(), req.patches.end()); // a set: applied in sorted order
  req.scope_lock = scope_lock_;
  req.trial_id = trial_id;
  req.attempt = attempt;
  req.timeout_s = task_.limits.timeout_s;
  req.memory_cap_bytes = task_.limits.memory_cap_bytes;
  if (early_stop != nullptr)
    req.loss_reference = *early_stop;
  req.smoke_patches = smoke_patches;
  req.trial_dir = root_ + "/run-" + std::to_string(run_index_) + "/trial-" +
                  std::to_string(trial_id) + "-" + std::to_string(attempt);
  auto spec = adapters::make_trial_spec(req, purpose);
  fold(static_cast<std::uint16_t>(wire::EventKind::TrialProposed), spec.bytes());

  // As the supervisor: a patch outside the editable scope never runs.
  std::string scope;
  for (const auto& p : req.patches)
    if (scope.empty())
      scope = adapters::patch_scope_violation(task_, p);
  messages::trial_result_msg result;
  if (!scope.empty()) {
    wire::TrialResultT r;
    r.trial_id = trial_id;
    r.attempt = attempt;
    r.outcome = wire::Outcome::ContractViolation;
    r.detail = scope;
    result = messages::trial_result_msg::pack(r);
  } else {
    fold(static_cast<std::uint16_t>(wire::EventKind::TrialDispatched), spec.bytes());
    auto report = adapters::run_trial(req);
    if (report) {
      result = report->result;
    } else {
      // As the node-runner: the tool could not run it (bad knob value, template error).
      wire::TrialResultT r;
      r.trial_id = trial_id;
      r.attempt = attempt;
      r.outcome = wire::Outcome::LaunchError;
      r.detail = "node-runner: " + describe(report.error());
      result = messages::trial_result_msg::pack(r);
    }
  }
  fold(static_cast<std::uint16_t>(wire::EventKind::TrialCompleted), result.bytes());

  if (purpose == "baseline" && !calibrated_) {
    std::size_t baselines = 0;
    for (const auto& t : state.trials)
      baselines += t.purpose == "baseline" && t.finished &&
                           t.outcome != tuning::trial_outcome::lost
                     ? 1
                     : 0;
    bool any_ok = false;
    for (const auto& t : state.trials)
      any_ok = any_ok || (t.purpose == "baseline" && t.outcome == tuning::trial_outcome::ok &&
                          tuning::timed_step_time(task_.contract, t.steps) > 0);
    if (baselines >= options_.reference_baselines && any_ok)
      calibrate(); // verifies this baseline too
  }
  if (!state.find(trial_id, attempt)->verified)
    verify(trial_id, attempt);

  tuning::trial_record rec = *state.find(trial_id, attempt);
  rec.config = config;
  std::error_code ec;
  if (!options_.keep_trials) {
    if (rec.usable())
      fs::remove_all(req.trial_dir, ec);
    else
      fs::remove_all(req.trial_dir + "/workdir", ec); // keep the rank logs of a failure
  }
  return rec;
}

std::string real_evaluator::key_of(const tuning::configuration& config) const {
  return canonical_configuration(task_, config).key();
}

bool real_evaluator::has_truth(const tuning::configuration& config) const {
  return config.patches.empty() && grid_.count(key_of(config)) != 0;
}

void real_evaluator::need_grid(const char* what) const {
  if (grid_file_.empty())
    throw std::logic_error(std::string{"real_evaluator::"} + what + ": task '" + task_.name +
                           "' has no grid file (created with require_grid off)");
}

std::optional<double> real_evaluator::true_step_time(const tuning::configuration& config) {
  need_grid("true_step_time");
  if (!config.patches.empty())
    return std::nullopt;
  auto it = grid_.find(key_of(config));
  if (it == grid_.end() || !it->second.usable)
    return std::nullopt;
  return it->second.median_step_s;
}

double real_evaluator::optimum_step_time() {
  need_grid("optimum_step_time");
  return optimum_step_s_;
}

std::string real_evaluator::optimum_description() {
  need_grid("optimum_description");
  return optimum_text_;
}

std::uint64_t real_evaluator::optimum_space_size() {
  need_grid("optimum_space_size");
  return grid_.size();
}

double real_evaluator::baseline_true_step_time() {
  need_grid("baseline_true_step_time");
  return grid_.at(baseline_key_).median_step_s;
}

// ---- the exhaustive measurement ----------------------------------------------------------------

std::vector<tuning::configuration> knob_grid(const tuning::task_spec& task) {
  // The last knob varies slowest, the first fastest (so a --grid-limit subset sweeps the first).
  std::vector<tuning::configuration> out(1);
  for (auto ki = task.knobs.rbegin(); ki != task.knobs.rend(); ++ki) {
    const auto& k = *ki;
    std::vector<tuning::configuration> next;
    for (const auto& c : out)
      for (const auto& v : tuning::search_values(k)) {
        auto d = c;
        d.knobs[k.name] = v;
        next.push_back(std::move(d));
      }
    out = std::move(next);
  }
  auto base = canonical_configuration(task, tuning::baseline_configuration(task));
  auto it = std::find(out.begin(), out.end(), base);
  if (it != out.end())
    std::rotate(out.begin(), it, it + 1); // the baseline first, the rest in order
  return out;
}

namespace {

/// One measurement of a grid assignment.
struct grid_measurement {
  std::uint32_t round = 0;
  std::uint64_t trial_id = 0;
  std::string outcome;
  bool usable = false;
  double step_s = 0;
  std::uint64_t peak_memory_bytes = 0;
  double device_s = 0;
  double wall_s = 0;
  std::string violation;
};

nlohmann::json measurement_json(const grid_measurement& m) {
  nlohmann::json j{{"round", m.round},
                   {"trial_id", m.trial_id},
                   {"outcome", m.outcome},
                   {"usable", m.usable},
                   {"step_s", m.usable ? nlohmann::json(m.step_s) : nlohmann::json(nullptr)},
                   {"peak_memory_bytes", m.peak_memory_bytes},
                   {"device_s", m.device_s},
                   {"wall_s", m.wall_s}};
  if (!m.violation.empty())
    j["detail"] = m.violation;
  return j;
}

grid_measurement measurement_of(const tuning::trial_record& t, std::uint32_t round) {
  grid_measurement m;
  m.round = round;
  m.trial_id = t.trial_id;
  m.outcome = tuning::to_string(t.outcome);
  m.usable = t.usable();
  m.step_s = t.timed_step_time_s;
  m.peak_memory_bytes = t.peak_memory_bytes;
  m.device_s = t.device_seconds;
  m.wall_s = t.wall_time_s;
  if (!m.usable) {
    auto d = t.violations.empty() ? t.detail : t.violations.front();
    m.violation = d.size() > 300 ? d.substr(0, 300) + "..." : d;
  }
  return m;
}

} // namespace

int measure_grid(real_evaluator& ev, const grid_options& o, std::ostream& progress) {
  const auto& task = ev.task();
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto grid = knob_grid(task);
  const std::size_t total = grid.size();
  if (o.limit > 0 && o.limit < grid.size())
    grid.resize(o.limit);
  const auto base = canonical_configuration(task, tuning::baseline_configuration(task));

  nlohmann::json machine = adapters::hardware_description();
  machine["load_average_before"] = load_average();
  machine["date_utc_start"] = utc_now();

  ev.begin_run(0);
  std::uint64_t next_id = 1;
  // The loss reference: the doctor's baselines.
  nlohmann::json reference = nlohmann::json::array();
  std::size_t ref_ok = 0;
  const std::size_t refs = std::max<std::size_t>(1, ev.reference_baselines());
  for (std::size_t i = 0; i < refs; ++i) {
    auto t = ev.measure(base, next_id++, 0, "baseline");
    auto m = measurement_of(t, 0);
    ref_ok += m.usable ? 1 : 0;
    reference.push_back(measurement_json(m));
    if (!o.quiet)
      progress << "reference baseline " << (i + 1) << "/" << refs << ": " << m.outcome
               << (m.usable ? " " + std::to_string(m.step_s) + " s/step" : " " + m.violation)
               << " (" << std::fixed << std::setprecision(1) << elapsed() << " s)\n";
  }
  if (ref_ok == 0) {
    progress << "measure_grid: no reference baseline passed; see the trial logs\n";
    return 1;
  }

  struct entry {
    tuning::configuration config;
    std::string refused; ///< broke a constraint: not launched
    std::vector<grid_measurement> runs;
  };
  std::vector<entry> entries;
  for (const auto& c : grid) {
    entry e;
    e.config = c;
    if (auto v = tuning::constraint_violation(task, c); !v.empty())
      e.refused = "constraint: " + v.substr(std::string{"constraint "}.size());
    entries.push_back(std::move(e));
  }
  std::size_t launched = 0;
  for (const auto& e : entries)
    launched += e.refused.empty() ? 1 : 0;

  auto document = [&](std::uint32_t rounds_done, bool finished) {
    nlohmann::json list = nlohmann::json::array();
    const entry* best = nullptr;
    double best_s = 0;
    for (const auto& e : entries) {
      nlohmann::json knobs = nlohmann::json::object();
      for (const auto& [k, v] : e.config.knobs)
        knobs[k] = tuning::to_string(v);
      auto change = e.config.diff_from(base);
      nlohmann::json a{{"knobs", knobs}, {"change", change.empty() ? "baseline" : change}};
      if (!e.refused.empty()) {
        a["outcome"] = "contract_violation";
        a["usable"] = false;
        a["median_step_s"] = nullptr;
        a["refused"] = e.refused;
        list.push_back(std::move(a));
        continue;
      }
      std::vector<double> times;
      std::string outcome = "ok";
      std::uint64_t peak = 0;
      bool usable = !e.runs.empty();
      nlohmann::json runs = nlohmann::json::array();
      for (const auto& m : e.runs) {
        runs.push_back(measurement_json(m));
        peak = std::max(peak, m.peak_memory_bytes);
        if (m.usable) {
          times.push_back(m.step_s);
        } else if (usable) {
          usable = false;
          outcome = m.outcome == "ok" ? "contract_violation" : m.outcome;
          a["detail"] = m.violation;
        }
      }
      a["outcome"] = e.runs.empty() ? "unmeasured" : outcome;
      a["usable"] = usable;
      a["step_times_s"] = times;
      double med = median_of(times);
      a["median_step_s"] = usable ? nlohmann::json(med) : nlohmann::json(nullptr);
      if (times.size() > 1) {
        a["min_step_s"] = *std::min_element(times.begin(), times.end());
        a["max_step_s"] = *std::max_element(times.begin(), times.end());
      }
      a["peak_memory_bytes"] = peak;
      a["measurements"] = std::move(runs);
      if (usable && (best == nullptr || med < best_s)) {
        best = &e;
        best_s = med;
      }
      list.push_back(std::move(a));
    }
    nlohmann::json doc;
    doc["format"] = real_grid_format;
    doc["task"] = task.name;
    doc["task_file"] = o.task_file;
    if (auto sha = adapters::sha256_file(task.source))
      doc["task_sha256"] = *sha;
    doc["command"] = o.command;
    doc["repeats"] = o.repeats;
    doc["rounds_done"] = rounds_done;
    doc["assignments_total"] = total;
    doc["assignments_measured"] = entries.size();
    doc["complete"] = finished && entries.size() == total;
    doc["order"] = "round r measures every assignment once, in the grid's order rotated by r "
                   "(assignment (i + r) mod n first)";
    doc["truth"] = "median over the repeats of each repeat's timed step time (median over the "
                   "contract's timed window, seconds of wall clock); usable when every repeat "
                   "ended ok and passed the contract";
    doc["machine"] = machine;
    doc["wall_s"] = elapsed();
    doc["reference_trials"] = reference;
    if (best != nullptr) {
      auto change = best->config.diff_from(base);
      doc["optimum"] = {{"change", change.empty() ? "baseline" : change},
                        {"median_step_s", best_s}};
    }
    doc["assignments"] = std::move(list);
    return doc;
  };

  std::size_t done = 0;
  const std::size_t n = entries.size();
  for (std::uint32_t round = 0; round < o.repeats; ++round) {
    for (std::size_t j = 0; j < n; ++j) {
      auto& e = entries[(j + round) % n];
      if (!e.refused.empty())
        continue;
      auto t = ev.measure(e.config, next_id++, 0, "grid");
      auto m = measurement_of(t, round + 1);
      ++done;
      if (!o.quiet) {
        auto change = e.config.diff_from(base);
        progress << "[" << done << "/" << launched * o.repeats << "] round " << (round + 1) << "/"
                 << o.repeats << " " << (change.empty() ? "baseline" : change) << ": "
                 << m.outcome;
        if (m.usable)
          progress << " " << std::fixed << std::setprecision(4) << m.step_s << " s/step";
        else
          progress << " (" << m.violation.substr(0, 120) << ")";
        progress << ", wall " << std::fixed << std::setprecision(1) << m.wall_s << " s ("
                 << elapsed() << " s)\n";
      }
      e.runs.push_back(std::move(m));
    }
    // After every round: a stopped measurement keeps the rounds it finished.
    bool last = round + 1 == o.repeats;
    if (last) {
      machine["load_average_after"] = load_average();
      machine["date_utc_end"] = utc_now();
    }
    std::string why;
    if (!write_atomically(o.out, document(round + 1, last).dump(1) + "\n", why)) {
      progress << "measure_grid: " << why << "\n";
      return 1;
    }
  }
  if (!o.quiet)
    progress << "measure_grid: wrote " << o.out << " (" << n << " of " << total
             << " assignments x " << o.repeats << " repeats, " << std::fixed
             << std::setprecision(1) << elapsed() << " s)\n";
  return 0;
}

} // namespace infrarsi::bench
