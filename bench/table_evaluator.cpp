#include "bench/table_evaluator.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

#include "tuning/planner.hpp"
#include "tuning/search_space.hpp"

namespace fs = std::filesystem;

namespace infrarsi::bench {

namespace {

/// Splits one CSV line (RFC 4180: quoted fields may hold commas and doubled quotes).
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(cur));
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(std::move(cur));
  return out;
}

std::optional<double> number_of(const std::string& text) {
  if (text.empty())
    return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v))
    return std::nullopt;
  return v;
}

/// A --match value "A*B" (two integers) as their product; other text unchanged.
std::string product_text(const std::string& value) {
  auto star = value.find('*');
  if (star == std::string::npos)
    return value;
  auto a = number_of(value.substr(0, star));
  auto b = number_of(value.substr(star + 1));
  if (!a || !b)
    return value;
  std::ostringstream o;
  o << (*a) * (*b);
  return o.str();
}

/// Numbers compare as numbers, anything else as text.
bool same_value(const std::string& a, const std::string& b) {
  auto x = number_of(a);
  auto y = number_of(b);
  if (x && y)
    return *x == *y;
  return a == b;
}

/// "COLUMN=VALUE".
bool split_pair(const std::string& text, std::pair<std::string, std::string>& out) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    return false;
  out = {text.substr(0, eq), text.substr(eq + 1)};
  return true;
}

/// The replay options of one rendered argv (the file comment of table_evaluator.hpp).
struct replay_args {
  std::string table;
  std::vector<std::pair<std::string, std::string>> where, match;
  std::string time_column, outcome_column = "outcome", memory_column;
  double memory_unit = 1.0;
  int gpus = 0;
  double noise_sd = 0.01;
};

bool parse_replay(const std::vector<std::string>& args, replay_args& out, std::string& why) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& opt = args[i];
    if (i + 1 >= args.size()) {
      why = "workload.argv: option '" + opt + "' has no value";
      return false;
    }
    const auto& v = args[++i];
    auto bad = [&](const std::string& expected) {
      why = "workload.argv: " + opt + " '" + v + "': expected " + expected;
      return false;
    };
    if (opt == "--table") {
      out.table = v;
    } else if (opt == "--where" || opt == "--match") {
      std::pair<std::string, std::string> p;
      if (!split_pair(v, p))
        return bad("COLUMN=VALUE");
      if (opt == "--match")
        p.second = product_text(p.second);
      (opt == "--where" ? out.where : out.match).push_back(std::move(p));
    } else if (opt == "--time-column") {
      out.time_column = v;
    } else if (opt == "--outcome-column") {
      out.outcome_column = v;
    } else if (opt == "--memory-column") {
      out.memory_column = v;
    } else if (opt == "--memory-unit") {
      auto x = number_of(v);
      if (!x || *x <= 0)
        return bad("a positive number of bytes");
      out.memory_unit = *x;
    } else if (opt == "--gpus") {
      auto x = number_of(v);
      if (!x || *x < 1 || *x > 1e6 || std::floor(*x) != *x)
        return bad("an integer number of GPUs >= 1");
      out.gpus = static_cast<int>(*x);
    } else if (opt == "--noise-sd") {
      auto x = number_of(v);
      if (!x || *x < 0 || *x > 1)
        return bad("a log-sd in 0..1");
      out.noise_sd = *x;
    } else if (opt == "--trial-id" || opt == "--attempt" || opt == "--tokens-per-step" ||
               opt == "--steps" || opt == "--warmup-steps") {
      // For bench/tables/replay as a program; the evaluator takes them from the trial and the
      // task's contract.
    } else {
      why = "workload.argv: unknown option '" + opt + "'";
      return false;
    }
  }
  if (out.table.empty() || out.time_column.empty() || out.gpus == 0) {
    why = "workload.argv: --table, --time-column and --gpus are required";
    return false;
  }
  return true;
}

/// The task's argv (argv[0] left out) rendered for `knobs`, as the launcher renders it.
std::optional<std::vector<std::string>> rendered(const tuning::task_spec& task,
                                                 const tuning::knob_assignment& knobs,
                                                 std::string& why) {
  std::map<std::string, std::string> builtins{{"trial_id", "0"},
                                              {"attempt", "0"},
                                              {"trial_dir", "/tmp/infrarsi-table-replay"},
                                              {"memory_cap_bytes", "0"}};
  auto vars = tuning::template_vars(task, knobs, builtins);
  auto ws = tuning::render_template(task.workload.world_size, vars, why);
  if (!ws) {
    why = "workload.world_size: " + why;
    return std::nullopt;
  }
  vars["world_size"] = *ws;
  std::vector<std::string> args;
  for (std::size_t i = 1; i < task.workload.argv.size(); ++i) {
    auto a = tuning::render_template(task.workload.argv[i], vars, why);
    if (!a) {
      why = "workload.argv[" + std::to_string(i) + "]: " + why;
      return std::nullopt;
    }
    args.push_back(std::move(*a));
  }
  return args;
}

/// One standard normal draw from (seed, trial id, attempt) (Box-Muller on SplitMix64).
double normal_draw(std::uint64_t seed, std::uint64_t trial_id, std::uint32_t attempt) {
  tuning::splitmix64 rng(seed * 0x9E3779B97F4A7C15ull ^ (trial_id + 0x632BE59BD9B4E019ull) *
                                                          0xBF58476D1CE4E5B9ull ^
                         (static_cast<std::uint64_t>(attempt) << 48));
  rng.next();
  double u1 = (static_cast<double>(rng.next() >> 11) + 0.5) * 0x1.0p-53;
  double u2 = (static_cast<double>(rng.next() >> 11) + 0.5) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::vector<tuning::configuration> knob_grid_of(const tuning::task_spec& task) {
  std::vector<tuning::configuration> out(1);
  for (auto ki = task.knobs.rbegin(); ki != task.knobs.rend(); ++ki) {
    std::vector<tuning::configuration> next;
    for (const auto& c : out)
      for (const auto& v : tuning::search_values(*ki)) {
        auto d = c;
        d.knobs[ki->name] = v;
        next.push_back(std::move(d));
      }
    out = std::move(next);
  }
  return out;
}

} // namespace

int table_csv::column(const std::string& name) const {
  auto it = std::find(columns.begin(), columns.end(), name);
  return it == columns.end() ? -1 : static_cast<int>(it - columns.begin());
}

std::optional<table_csv> read_table_csv(const std::string& path, std::string& why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    why = path + ": cannot read the file";
    return std::nullopt;
  }
  table_csv t;
  t.path = path;
  std::string line;
  std::size_t n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.empty())
      continue;
    if (line.front() == '#') {
      t.comments.push_back(line.substr(1));
      continue;
    }
    auto fields = split_csv(line);
    if (t.columns.empty()) {
      t.columns = std::move(fields);
      continue;
    }
    if (fields.size() != t.columns.size()) {
      why = path + ":" + std::to_string(n) + ": " + std::to_string(fields.size()) +
            " fields, the header has " + std::to_string(t.columns.size());
      return std::nullopt;
    }
    t.rows.push_back(std::move(fields));
    t.lines.push_back(n);
  }
  if (t.columns.empty()) {
    why = path + ": no header line";
    return std::nullopt;
  }
  return t;
}

bool table_evaluator::is_table_task(const tuning::task_spec& task) {
  if (task.workload.argv.empty())
    return false;
  const auto& prog = task.workload.argv.front();
  const std::string tail = "replay";
  return prog.size() >= tail.size() &&
         prog.compare(prog.size() - tail.size(), tail.size(), tail) == 0;
}

std::unique_ptr<table_evaluator> table_evaluator::create(tuning::task_spec task,
                                                         std::string& why) {
  const std::string where = "task '" + task.name + "' (" + task.source + ")";
  if (!is_table_task(task)) {
    why = where + ": workload.argv[0] is not the table replay (bench/tables/replay)";
    return nullptr;
  }
  std::unique_ptr<table_evaluator> ev{new table_evaluator(std::move(task))};
  const auto& t = ev->task_;
  for (const auto& k : t.knobs)
    if (k.type != tuning::knob_type::boolean && k.values.empty()) {
      why = where + ": knob '" + k.name + "': a table task's knobs need explicit values";
      return nullptr;
    }

  // The static options, from the baseline's rendering.
  const auto base = canonical_configuration(t, tuning::baseline_configuration(t));
  auto base_args = rendered(t, base.knobs, why);
  replay_args spec;
  if (!base_args || !parse_replay(*base_args, spec, why)) {
    why = where + ": " + why;
    return nullptr;
  }
  ev->gpus_ = spec.gpus;
  ev->noise_sd_ = spec.noise_sd;
  auto path = fs::path{spec.table}.is_absolute() ? fs::path{spec.table}
                                                 : fs::path{t.workload.workdir} / spec.table;
  auto csv = read_table_csv(path.lexically_normal().string(), why);
  if (!csv) {
    why = where + ": --table: " + why;
    return nullptr;
  }
  ev->table_ = std::move(*csv);
  const auto& table = ev->table_;
  auto need_column = [&](const std::string& name, const char* option) {
    if (table.column(name) >= 0)
      return true;
    why = where + ": " + option + " '" + name + "': " + table.path + " has no such column";
    return false;
  };
  if (!need_column(spec.time_column, "--time-column") ||
      !need_column(spec.outcome_column, "--outcome-column") ||
      (!spec.memory_column.empty() && !need_column(spec.memory_column, "--memory-column")))
    return nullptr;
  for (const auto& [col, v] : spec.where)
    if (!need_column(col, "--where"))
      return nullptr;
  for (const auto& [col, v] : spec.match)
    if (!need_column(col, "--match"))
      return nullptr;
  const int time_col = table.column(spec.time_column);
  const int outcome_col = table.column(spec.outcome_column);
  const int mem_col = spec.memory_column.empty() ? -1 : table.column(spec.memory_column);

  // The subset: every row the --where options select.
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    bool in = true;
    for (const auto& [col, v] : spec.where)
      in = in && same_value(table.rows[r][static_cast<std::size_t>(table.column(col))], v);
    if (in)
      ev->subset_.push_back(r);
  }
  if (ev->subset_.empty()) {
    why = where + ": the --where options select no row of " + table.path;
    return nullptr;
  }

  // Every legal configuration, baseline first, with its rows.
  auto grid = knob_grid_of(t);
  auto bit = std::find(grid.begin(), grid.end(), base);
  if (bit != grid.end())
    std::rotate(grid.begin(), bit, bit + 1);
  std::set<std::size_t> claimed;
  for (auto& c : grid) {
    c = canonical_configuration(t, c);
    if (!tuning::constraint_violation(t, c).empty())
      continue;
    auto args = rendered(t, c.knobs, why);
    replay_args cs;
    if (!args || !parse_replay(*args, cs, why)) {
      why = where + ": " + c.key() + ": " + why;
      return nullptr;
    }
    table_entry e;
    e.config = c;
    double log_sum = 0;
    std::size_t ok_rows = 0, failed_rows = 0;
    for (auto r : ev->subset_) {
      const auto& row = table.rows[r];
      bool match = true;
      for (const auto& [col, v] : cs.match)
        match = match && same_value(row[static_cast<std::size_t>(table.column(col))], v);
      if (!match)
        continue;
      const auto& outcome = row[static_cast<std::size_t>(outcome_col)];
      const std::string at = table.path + ":" + std::to_string(table.lines[r]);
      if (outcome == "ok") {
        auto s = number_of(row[static_cast<std::size_t>(time_col)]);
        if (!s || *s <= 0) {
          why = where + ": " + at + ": " + spec.time_column + " '" +
                row[static_cast<std::size_t>(time_col)] + "': expected seconds > 0 on an ok row";
          return nullptr;
        }
        log_sum += std::log(*s);
        ++ok_rows;
        if (mem_col >= 0)
          if (auto m = number_of(row[static_cast<std::size_t>(mem_col)]))
            e.peak_memory_bytes = std::max(e.peak_memory_bytes, *m * spec.memory_unit);
      } else if (outcome == "fail" || outcome == "oom") {
        ++failed_rows;
      } else if (outcome == "missing" || outcome == "unknown" || outcome == "no_result" ||
                 outcome.empty()) {
        // no result: absent
      } else {
        why = where + ": " + at + ": " + spec.outcome_column + " '" + outcome +
              "': expected ok, fail, oom, missing, unknown or no_result";
        return nullptr;
      }
      e.rows.push_back(r);
      claimed.insert(r);
    }
    if (ok_rows > 0) {
      e.outcome = table_entry::status::ok;
      e.step_time_s = std::exp(log_sum / static_cast<double>(ok_rows));
    } else if (failed_rows > 0) {
      e.outcome = table_entry::status::failed;
    }
    ev->index_[c.key()] = ev->legal_.size();
    ev->legal_.push_back(std::move(e));
  }
  // Every subset row is some legal configuration (else the task's knobs or constraints do not
  // describe the table).
  for (auto r : ev->subset_)
    if (claimed.count(r) == 0) {
      why = where + ": " + table.path + ":" + std::to_string(table.lines[r]) +
            ": this row of the subset matches no legal configuration of the task (a knob value "
            "or constraint excludes it)";
      return nullptr;
    }
  if (ev->legal_.empty() || !(ev->legal_.front().config == base) ||
      ev->legal_.front().outcome != table_entry::status::ok) {
    why = where + ": the baseline (" + base.key() + ") is not an ok row of " + table.path;
    return nullptr;
  }
  ev->baseline_step_s_ = ev->legal_.front().step_time_s;
  const table_entry* best = nullptr;
  for (const auto& e : ev->legal_)
    if (e.outcome == table_entry::status::ok && (best == nullptr || e.step_time_s < best->step_time_s))
      best = &e;
  ev->optimum_step_s_ = best->step_time_s;
  auto change = best->config.diff_from(base);
  ev->optimum_text_ = change.empty() ? "the baseline" : change;

  // The loss every trial reports: a fixed falling curve (the same work and data in every row).
  for (std::uint32_t s = 0; s < std::max<std::uint32_t>(1, t.contract.steps); ++s)
    ev->loss_.push_back(8.0 * std::pow(0.97, static_cast<double>(s)) + 2.0);
  return ev;
}

const table_entry* table_evaluator::find(const tuning::configuration& config) const {
  auto it = index_.find(canonical_configuration(task_, config).key());
  return it == index_.end() ? nullptr : &legal_[it->second];
}

std::size_t table_evaluator::recorded() const {
  return static_cast<std::size_t>(std::count_if(legal_.begin(), legal_.end(), [](const auto& e) {
    return e.outcome != table_entry::status::absent;
  }));
}

std::optional<double> table_evaluator::true_step_time(const tuning::configuration& config) {
  const auto* e = config.patches.empty() ? find(config) : nullptr;
  if (e == nullptr || e->outcome != table_entry::status::ok)
    return std::nullopt;
  return e->step_time_s;
}

tuning::trial_record table_evaluator::measure(const tuning::configuration& raw,
                                              std::uint64_t trial_id, std::uint32_t attempt,
                                              const std::string& purpose,
                                              const tuning::loss_reference* early_stop,
                                              const std::vector<std::string>& /*smoke: none*/) {
  tuning::trial_record rec;
  rec.trial_id = trial_id;
  rec.attempt = attempt;
  rec.purpose = purpose;
  rec.config = raw;
  rec.dispatched = true;
  rec.finished = true;
  rec.verified = true;
  auto config = canonical_configuration(task_, raw);
  // Refused before launch, as the node-runner refuses.
  for (const auto& [name, value] : config.knobs) {
    const auto* k = task_.find_knob(name);
    std::string why;
    if (k == nullptr || !tuning::in_domain(*k, value, why)) {
      rec.outcome = tuning::trial_outcome::launch_error;
      rec.detail = k == nullptr ? "unknown knob '" + name + "'"
                                : "knob '" + name + "' = " + tuning::to_string(value) +
                                    ": expected " + why;
      return rec;
    }
  }
  if (!config.patches.empty()) {
    rec.outcome = tuning::trial_outcome::launch_error;
    rec.detail = "unknown patch '" + config.patches.front() + "' (a table task has no patches)";
    return rec;
  }
  if (auto v = tuning::constraint_violation(task_, config); !v.empty()) {
    rec.outcome = tuning::trial_outcome::contract_violation;
    rec.detail = "constraint: " + v.substr(std::string{"constraint "}.size());
    rec.violations.push_back(rec.detail);
    return rec;
  }
  const auto* e = find(config);
  if (e == nullptr || e->outcome == table_entry::status::absent) {
    rec.outcome = tuning::trial_outcome::launch_error;
    rec.detail = "not in the table: " + table_.path + " has no result for " + config.key();
    return rec;
  }
  if (e->outcome == table_entry::status::failed) {
    // Nothing was measured: the peak stays 0 and the memory model censors the trial at the
    // device memory.
    rec.outcome = tuning::trial_outcome::oom;
    rec.memory = tuning::memory_source::unobserved;
    rec.detail = "the table records a failed run (out of memory or crashed) for " + config.key();
    rec.wall_time_s = table_failed_launch_s;
    rec.device_seconds = table_failed_launch_s * gpus_;
    return rec;
  }
  const double step_s = e->step_time_s * std::exp(noise_sd_ * normal_draw(seed_, trial_id, attempt));
  const auto& c = task_.contract;
  const std::uint32_t steps = std::max<std::uint32_t>(1, c.steps);
  const std::uint32_t first_timed = c.timed_first;
  std::optional<std::string> stopped;
  for (std::uint32_t s = 0; s < steps && !stopped; ++s) {
    tuning::step_point p;
    p.step = s;
    p.loss = loss_[std::min<std::size_t>(s, loss_.size() - 1)];
    p.tokens = c.tokens_per_step;
    p.step_time_s = step_s;
    p.warmup = s < first_timed;
    rec.steps.push_back(p);
    if (early_stop != nullptr)
      if (auto v = tuning::early_violation(c, *early_stop, rec.steps, rec.steps.size() - 1))
        stopped = tuning::early_stop_detail(*v, s, c.steps);
  }
  rec.peak_memory_bytes = static_cast<std::uint64_t>(e->peak_memory_bytes);
  rec.memory = rec.peak_memory_bytes > 0 ? tuning::memory_source::workload
                                         : tuning::memory_source::unobserved;
  rec.wall_time_s = step_s * static_cast<double>(rec.steps.size());
  rec.device_seconds = rec.wall_time_s * gpus_;
  if (stopped) {
    rec.outcome = tuning::trial_outcome::contract_violation;
    rec.detail = *stopped;
    rec.violations = {*stopped};
    return rec;
  }
  rec.outcome = tuning::trial_outcome::ok;
  rec.timed_step_time_s = tuning::timed_step_time(c, rec.steps);
  return rec;
}

double random_expected_best(std::vector<double> f, std::size_t k) {
  if (f.empty() || k == 0)
    return 0.0;
  std::sort(f.begin(), f.end());
  const std::size_t m = f.size();
  if (k >= m)
    return f.back();
  // P(the largest of k draws is the j-th smallest, 1-based) = C(j-1, k-1) / C(m, k), computed
  // as a running ratio (no factorials): p_k = 1 / C(m, k), p_{j+1} = p_j * j / (j - k + 1).
  double p = 1.0;
  for (std::size_t i = 0; i < k; ++i)
    p *= static_cast<double>(k - i) / static_cast<double>(m - i); // 1 / C(m, k)
  double e = 0.0;
  for (std::size_t j = k; j <= m; ++j) {
    e += f[j - 1] * p;
    p *= static_cast<double>(j) / static_cast<double>(j - k + 1);
  }
  return e;
}

std::optional<double> spearman(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 3)
    return std::nullopt;
  auto ranks = [](const std::vector<double>& v) {
    std::vector<std::size_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](auto a, auto b) { return v[a] < v[b]; });
    std::vector<double> r(v.size());
    for (std::size_t i = 0; i < idx.size();) {
      std::size_t j = i;
      while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]])
        ++j;
      double avg = 0.5 * static_cast<double>(i + j) + 1.0;
      for (std::size_t k = i; k <= j; ++k)
        r[idx[k]] = avg;
      i = j + 1;
    }
    return r;
  };
  auto rx = ranks(x);
  auto ry = ranks(y);
  const double n = static_cast<double>(x.size());
  double mx = std::accumulate(rx.begin(), rx.end(), 0.0) / n;
  double my = std::accumulate(ry.begin(), ry.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < rx.size(); ++i) {
    sxy += (rx[i] - mx) * (ry[i] - my);
    sxx += (rx[i] - mx) * (rx[i] - mx);
    syy += (ry[i] - my) * (ry[i] - my);
  }
  if (sxx == 0 || syy == 0)
    return std::nullopt;
  return sxy / std::sqrt(sxx * syy);
}

} // namespace infrarsi::bench
