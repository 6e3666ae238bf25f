#include "adapters/task_file.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "adapters/cluster_launch.hpp"
#include "messages/errc.hpp"
#include "tuning/expr.hpp"
#include "tuning/planner.hpp"
#include "tuning/search_space.hpp"

namespace infrarsi::adapters {

namespace fs = std::filesystem;
using tuning::knob_spec;
using tuning::knob_type;
using tuning::knob_value;
using limits = task_file_limits;

namespace {

/// Thrown inside the loader only; converted to caf::error at the border of load_task_file.
struct task_error {
  std::string message;
};

std::string describe_node(const toml::node& n) {
  std::ostringstream os;
  if (n.is_string())
    os << "string \"" << *n.value<std::string>() << '"';
  else if (n.is_integer())
    os << "integer " << *n.value<std::int64_t>();
  else if (n.is_floating_point())
    os << "float " << *n.value<double>();
  else if (n.is_boolean())
    os << "boolean " << (*n.value<bool>() ? "true" : "false");
  else if (n.is_array())
    os << "an array";
  else if (n.is_table())
    os << "a table";
  else
    os << "a date/time";
  return os.str();
}

class reader {
public:
  explicit reader(std::string file, bool check_files = true)
    : file_(std::move(file)), check_files_(check_files) {}

  /// Whether referenced files must exist (not when the task is read back from an event log).
  [[nodiscard]] bool check_files() const noexcept { return check_files_; }

  [[noreturn]] void fail(const toml::node* at, const std::string& key,
                         const std::string& message) const {
    std::ostringstream os;
    os << file_;
    if (at != nullptr && at->source().begin.line > 0)
      os << ':' << at->source().begin.line << ':' << at->source().begin.column;
    os << ": " << key << ": " << message;
    throw task_error{os.str()};
  }

  [[noreturn]] void expected(const toml::node& at, const std::string& key,
                             const std::string& what) const {
    fail(&at, key, "expected " + what + ", got " + describe_node(at));
  }

  void only_keys(const toml::table& t, const std::string& where,
                 const std::set<std::string>& allowed) const {
    for (const auto& [k, v] : t) {
      std::string key{k.str()};
      if (allowed.count(key) == 0) {
        std::string list;
        for (const auto& a : allowed)
          list += (list.empty() ? "" : ", ") + a;
        fail(&v, where.empty() ? key : where + "." + key,
             "unknown key (allowed here: " + list + ")");
      }
    }
  }

  const toml::table& table(const toml::table& t, const std::string& key, const std::string& where,
                           bool required) const {
    static const toml::table empty;
    const auto* n = t.get(key);
    if (n == nullptr) {
      if (required)
        fail(&t, join(where, key), "missing (a table is required)");
      return empty;
    }
    if (!n->is_table())
      expected(*n, join(where, key), "a table");
    return *n->as_table();
  }

  std::optional<std::string> string(const toml::table& t, const std::string& key,
                                    const std::string& where, bool required) const {
    const auto* n = t.get(key);
    if (n == nullptr) {
      if (required)
        fail(&t, join(where, key), "missing (a string is required)");
      return std::nullopt;
    }
    if (!n->is_string())
      expected(*n, join(where, key), "a string");
    return *n->value<std::string>();
  }

  std::optional<double> number(const toml::table& t, const std::string& key,
                               const std::string& where, double min_value) const {
    const auto* n = t.get(key);
    if (n == nullptr)
      return std::nullopt;
    if (!n->is_number())
      expected(*n, join(where, key), "a number");
    auto v = *n->value<double>();
    if (!std::isfinite(v) || v < min_value)
      expected(*n, join(where, key), "a finite number >= " + std::to_string(min_value));
    return v;
  }

  /// An integer key in [min_value, max_value]: a float, a string or an out-of-range value is an
  /// error naming the key and the value (never truncated or wrapped).
  std::optional<std::uint64_t> count(const toml::table& t, const std::string& key,
                                     const std::string& where, std::uint64_t min_value,
                                     std::uint64_t max_value) const {
    const auto* n = t.get(key);
    if (n == nullptr)
      return std::nullopt;
    auto range = "an integer in [" + std::to_string(min_value) + ", " + std::to_string(max_value)
                 + "]";
    if (!n->is_integer())
      expected(*n, join(where, key), range);
    auto v = *n->value<std::int64_t>();
    if (v < 0 || static_cast<std::uint64_t>(v) < min_value
        || static_cast<std::uint64_t>(v) > max_value)
      expected(*n, join(where, key), range);
    return static_cast<std::uint64_t>(v);
  }

  std::optional<bool> boolean(const toml::table& t, const std::string& key,
                              const std::string& where) const {
    const auto* n = t.get(key);
    if (n == nullptr)
      return std::nullopt;
    if (!n->is_boolean())
      expected(*n, join(where, key), "true or false");
    return *n->value<bool>();
  }

  std::vector<std::string> strings(const toml::table& t, const std::string& key,
                                   const std::string& where, bool required) const {
    const auto* n = t.get(key);
    std::vector<std::string> out;
    if (n == nullptr) {
      if (required)
        fail(&t, join(where, key), "missing (an array of strings is required)");
      return out;
    }
    if (!n->is_array())
      expected(*n, join(where, key), "an array of strings");
    std::size_t i = 0;
    for (const auto& e : *n->as_array()) {
      if (!e.is_string())
        expected(e, join(where, key) + "[" + std::to_string(i) + "]", "a string");
      out.push_back(*e.value<std::string>());
      ++i;
    }
    return out;
  }

  std::uint64_t byte_size(const toml::table& t, const std::string& key, const std::string& where,
                          std::uint64_t fallback) const {
    const auto* n = t.get(key);
    if (n == nullptr)
      return fallback;
    std::uint64_t out = 0;
    if (n->is_integer() && *n->value<std::int64_t>() >= 0)
      return static_cast<std::uint64_t>(*n->value<std::int64_t>());
    if (n->is_string() && parse_byte_size(*n->value<std::string>(), out))
      return out;
    expected(*n, join(where, key),
             "a byte count (non-negative integer, or a string such as \"3GiB\" or \"512MB\")");
  }

  std::string resolve(const std::string& path) const {
    fs::path p{path};
    if (p.is_relative())
      p = fs::path{file_}.parent_path() / p;
    std::error_code ec; // e.g. a name too long or a NUL byte: the path stays as written
    auto canonical = fs::weakly_canonical(p, ec);
    return ec ? p.lexically_normal().string() : canonical.string();
  }

  /// A name that becomes part of paths and git refs (is_safe_name), else an error naming it.
  std::string safe_name(const toml::table& t, const std::string& key, const std::string& where,
                        const std::string& value) const {
    if (!is_safe_name(value))
      fail(t.get(key), join(where, key),
           "expected a name of at most " + std::to_string(limits::max_name_length)
             + " letters, digits, '_', '.' or '-' that begins with a letter, a digit or '_' and "
               "has no \"..\" (it names directories and branches), got \""
             + value + "\"");
    return value;
  }

  /// Fails when array `key` has more than `max` elements ("N values, more than the limit").
  void at_most(const toml::node* n, const std::string& key, std::size_t max,
               const char* what) const {
    if (n != nullptr && n->is_array() && n->as_array()->size() > max)
      fail(n, key, std::to_string(n->as_array()->size()) + " " + what
                     + ", more than the limit of " + std::to_string(max));
  }

  static std::string join(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }

private:
  std::string file_;
  bool check_files_ = true;
};

knob_type parse_knob_type(const reader& r, const toml::node& n, const std::string& key) {
  auto text = n.value<std::string>();
  if (!text)
    r.expected(n, key, "one of \"int\", \"real\", \"bool\", \"choice\"");
  if (*text == "int")
    return knob_type::integer;
  if (*text == "real")
    return knob_type::real;
  if (*text == "bool")
    return knob_type::boolean;
  if (*text == "choice")
    return knob_type::choice;
  r.expected(n, key, "one of \"int\", \"real\", \"bool\", \"choice\"");
}

knob_value knob_value_of(const reader& r, const toml::node& n, knob_type type,
                         const std::string& key) {
  switch (type) {
    case knob_type::integer:
      if (n.is_integer())
        return *n.value<std::int64_t>();
      r.expected(n, key, "an integer");
    case knob_type::real:
      if (n.is_number())
        return *n.value<double>();
      r.expected(n, key, "a number");
    case knob_type::boolean:
      if (n.is_boolean())
        return *n.value<bool>();
      r.expected(n, key, "true or false");
    case knob_type::choice:
      if (n.is_string())
        return *n.value<std::string>();
      r.expected(n, key, "a string");
  }
  r.expected(n, key, "a knob value");
}

knob_spec parse_knob(const reader& r, const toml::table& t, const std::string& where) {
  r.only_keys(t, where, {"name", "type", "values", "min", "max", "default", "true_text",
                         "false_text", "tags", "description", "role"});
  knob_spec k;
  k.name = *r.string(t, "name", where, true);
  if (k.name.empty() || k.name.size() > limits::max_name_length
      || k.name.find_first_of("{} \t") != std::string::npos)
    r.fail(t.get("name"), where + ".name",
           "expected a name of at most " + std::to_string(limits::max_name_length)
             + " characters without spaces or braces, got \"" + k.name + "\"");
  const auto* type = t.get("type");
  if (type == nullptr)
    r.fail(&t, where + ".type", "missing (one of \"int\", \"real\", \"bool\", \"choice\")");
  k.type = parse_knob_type(r, *type, where + ".type");
  if (const auto* values = t.get("values")) {
    if (!values->is_array() || values->as_array()->empty())
      r.expected(*values, where + ".values", "a non-empty array");
    r.at_most(values, where + ".values", limits::max_knob_values, "values");
    std::size_t i = 0;
    for (const auto& v : *values->as_array())
      k.values.push_back(knob_value_of(r, v, k.type, where + ".values[" + std::to_string(i++) + "]"));
  }
  k.min = r.number(t, "min", where, -limits::max_real_magnitude);
  k.max = r.number(t, "max", where, -limits::max_real_magnitude);
  for (const char* bound : {"min", "max"}) {
    const auto& v = std::string{bound} == "min" ? k.min : k.max;
    bool integer = k.type == knob_type::integer;
    double magnitude = integer ? limits::max_integer_magnitude : limits::max_real_magnitude;
    if (v && (std::abs(*v) > magnitude || (integer && std::floor(*v) != *v)))
      r.expected(*t.get(bound), where + "." + bound,
                 std::string{integer ? "an integer" : "a number"} + " with |value| <= "
                   + (integer ? std::string{"2^53"} : std::string{"1e300"}));
  }
  if (k.type == knob_type::choice && k.values.empty())
    r.fail(&t, where + ".values", "missing (a choice knob needs its list of values)");
  if ((k.type == knob_type::integer || k.type == knob_type::real) && k.values.empty()
      && !(k.min && k.max))
    r.fail(&t, where, "knob '" + k.name + "' needs either values = [...] or both min and max");
  if (k.min && k.max && *k.min > *k.max)
    r.fail(t.get("min"), where + ".min", "greater than max");
  const auto* def = t.get("default");
  if (def == nullptr)
    r.fail(&t, where + ".default", "missing (the baseline value a user runs today)");
  k.default_value = knob_value_of(r, *def, k.type, where + ".default");
  std::string why;
  if (!tuning::in_domain(k, k.default_value, why))
    r.fail(def, where + ".default", "expected " + why + ", got " + describe_node(*def));
  if (auto s = r.string(t, "true_text", where, false))
    k.true_text = *s;
  if (auto s = r.string(t, "false_text", where, false))
    k.false_text = *s;
  k.tags = r.strings(t, "tags", where, false);
  r.string(t, "description", where, false);
  if (auto role = r.string(t, "role", where, false)) {
    const auto& roles = tuning::knob_roles();
    if (std::find(roles.begin(), roles.end(), *role) == roles.end()) {
      std::string list;
      for (const auto& name : roles)
        list += (list.empty() ? "" : ", ") + ("\"" + name + "\"");
      r.expected(*t.get("role"), where + ".role", "one of " + list);
    }
    bool numeric = k.type == knob_type::integer;
    bool flag = k.type == knob_type::boolean;
    if (*role == "recompute" ? !(flag || k.type == knob_type::choice)
        : (*role == "sequence_parallel" || *role == "distributed_optimizer") ? !flag
                                                                             : !numeric)
      r.expected(*t.get("role"), where + ".role",
                 "a role that fits the knob's type (\"" + *role + "\" needs "
                   + (*role == "recompute" ? std::string{"a bool or choice knob"}
                      : (*role == "sequence_parallel" || *role == "distributed_optimizer")
                        ? std::string{"a bool knob"}
                        : std::string{"an int knob"})
                   + ")");
    k.role = *role;
  }
  return k;
}

void parse_contract_sections(const reader& r, const toml::table& root, tuning::task_spec& task) {
  const auto& consts = r.table(root, "constants", "", false);
  for (const auto& [k, v] : consts) {
    std::string key{k.str()};
    if (task.find_knob(key) != nullptr)
      r.fail(&v, "constants." + key, "a knob has the same name");
    if (v.is_integer())
      task.constants[key] = *v.value<std::int64_t>();
    else if (v.is_floating_point())
      task.constants[key] = *v.value<double>();
    else if (v.is_boolean())
      task.constants[key] = *v.value<bool>();
    else if (v.is_string())
      task.constants[key] = *v.value<std::string>();
    else
      r.expected(v, "constants." + key, "an integer, number, boolean or string");
  }

  r.at_most(root.get("constraints"), "constraints", limits::max_constraints, "constraints");
  task.constraints = r.strings(root, "constraints", "", false);
  for (std::size_t i = 0; i < task.constraints.size(); ++i) {
    auto key = "constraints[" + std::to_string(i) + "]";
    std::string why;
    auto e = tuning::constraint_expr::parse(task.constraints[i], why);
    if (!e)
      r.fail(root.get("constraints"), key, "expected an expression: " + why);
    for (const auto& name : e->names())
      if (task.find_knob(name) == nullptr && task.constants.count(name) == 0)
        r.fail(root.get("constraints"), key,
               "'" + name + "' is neither a knob nor a constant (in '" + task.constraints[i]
                 + "')");
    // The baseline must satisfy every constraint: it is what the user runs today.
    auto vars = task.constants;
    for (const auto& k : task.knobs)
      vars[k.name] = k.default_value;
    auto ok = e->holds(vars, why);
    if (!ok || !*ok)
      r.fail(root.get("constraints"), key,
             "the knobs' defaults violate it: " + tuning::first_violation({*e}, vars));
  }

  const auto& c = r.table(root, "contract", "", false);
  r.only_keys(c, "contract", {"steps", "tokens_per_step", "timed_steps", "loss_checkpoints",
                              "loss_rtol", "loss_atol", "wall_tolerance", "global_batch",
                              "params", "layers", "clock_tolerance", "clock_check",
                              "simulated_time", "loss_mode", "loss_window", "eval_steps"});
  auto& k = task.contract;
  if (auto v = r.count(c, "steps", "contract", 0, 0xffffffffu))
    k.steps = static_cast<std::uint32_t>(*v);
  if (auto v = r.count(c, "tokens_per_step", "contract", 0, std::uint64_t{1} << 62))
    k.tokens_per_step = static_cast<std::uint64_t>(*v);
  k.timed_first = 0;
  k.timed_last = k.steps > 0 ? k.steps - 1 : 0;
  if (const auto* w = c.get("timed_steps")) {
    const auto* arr = w->as_array();
    if (arr == nullptr || arr->size() != 2 || !arr->get(0)->is_integer()
        || !arr->get(1)->is_integer())
      r.expected(*w, "contract.timed_steps", "[first, last] (inclusive step numbers)");
    auto first = *arr->get(0)->value<std::int64_t>();
    auto last = *arr->get(1)->value<std::int64_t>();
    if (first < 0 || last < first || (k.steps > 0 && last >= k.steps) || last > 0xffffffffLL)
      r.fail(w, "contract.timed_steps",
             "expected 0 <= first <= last < steps (" + std::to_string(k.steps) + "), got ["
               + std::to_string(first) + ", " + std::to_string(last) + "]");
    k.timed_first = static_cast<std::uint32_t>(first);
    k.timed_last = static_cast<std::uint32_t>(last);
  }
  if (const auto* lc = c.get("loss_checkpoints")) {
    if (lc->is_string() && *lc->value<std::string>() == "all") {
      k.loss_checkpoints.clear();
    } else if (lc->is_array()) {
      for (const auto& e : *lc->as_array()) {
        if (!e.is_integer() || *e.value<std::int64_t>() < 0
            || *e.value<std::int64_t>() > 0xffffffffLL
            || (k.steps > 0 && *e.value<std::int64_t>() >= k.steps))
          r.expected(e, "contract.loss_checkpoints[]", "a step number below contract.steps");
        k.loss_checkpoints.push_back(static_cast<std::uint32_t>(*e.value<std::int64_t>()));
      }
    } else {
      r.expected(*lc, "contract.loss_checkpoints", "an array of step numbers or \"all\"");
    }
  }
  if (auto mode = r.string(c, "loss_mode", "contract", false)) {
    auto m = tuning::parse_loss_mode(*mode);
    if (!m)
      r.expected(*c.get("loss_mode"), "contract.loss_mode",
                 "\"pointwise\", \"window\" or \"eval\"");
    k.loss_mode = *m;
  }
  // Each mode's own keys, and only those: a key another mode reads would be silently ignored.
  auto mode_text = std::string{"\""} + tuning::to_string(k.loss_mode) + "\"";
  if (const auto* lc = c.get("loss_checkpoints"); lc != nullptr && k.loss_mode != tuning::loss_mode::pointwise)
    r.fail(lc, "contract.loss_checkpoints",
           "only read with loss_mode = \"pointwise\" (loss_mode is " + mode_text + ")");
  if (const auto* lw = c.get("loss_window")) {
    if (k.loss_mode != tuning::loss_mode::window)
      r.fail(lw, "contract.loss_window",
             "only read with loss_mode = \"window\" (loss_mode is " + mode_text + ")");
    auto most = k.steps > 0 ? std::uint64_t{k.steps} : std::uint64_t{0xffffffffu};
    if (auto v = r.count(c, "loss_window", "contract", 2, std::max<std::uint64_t>(2, most)))
      k.loss_window = static_cast<std::uint32_t>(*v);
  } else if (k.loss_mode == tuning::loss_mode::window) {
    r.fail(&c, "contract.loss_window",
           "missing (loss_mode = \"window\" needs the steps per window, an integer >= 2)");
  }
  if (const auto* es = c.get("eval_steps")) {
    if (k.loss_mode != tuning::loss_mode::eval)
      r.fail(es, "contract.eval_steps",
             "only read with loss_mode = \"eval\" (loss_mode is " + mode_text + ")");
    if (es->is_string() && *es->value<std::string>() == "reported") {
      k.eval_steps.clear();
    } else if (es->is_array()) {
      for (const auto& e : *es->as_array()) {
        if (!e.is_integer() || *e.value<std::int64_t>() < 0
            || *e.value<std::int64_t>() > 0xffffffffLL
            || (k.steps > 0 && *e.value<std::int64_t>() >= k.steps))
          r.expected(e, "contract.eval_steps[]", "a step number below contract.steps");
        auto step = static_cast<std::uint32_t>(*e.value<std::int64_t>());
        if (!k.eval_steps.empty() && step <= k.eval_steps.back())
          r.fail(&e, "contract.eval_steps[]",
                 "expected increasing step numbers, got " + std::to_string(step) + " after "
                   + std::to_string(k.eval_steps.back()));
        k.eval_steps.push_back(step);
      }
    } else {
      r.expected(*es, "contract.eval_steps",
                 "an array of step numbers or \"reported\" (every step the baselines report an "
                 "eval loss at)");
    }
  }
  if (auto v = r.number(c, "loss_rtol", "contract", 0))
    k.loss_rtol = *v;
  if (auto v = r.number(c, "loss_atol", "contract", 0))
    k.loss_atol = *v;
  if (auto v = r.number(c, "wall_tolerance", "contract", 0))
    k.wall_tolerance = *v;
  if (auto v = r.count(c, "global_batch", "contract", 0, std::uint64_t{1} << 62))
    k.global_batch = static_cast<std::uint64_t>(*v);
  if (auto v = r.count(c, "params", "contract", 0, std::uint64_t{1} << 62))
    k.params = static_cast<std::uint64_t>(*v);
  if (auto v = r.count(c, "layers", "contract", 0, 0xffffffffu))
    k.layers = static_cast<std::uint32_t>(*v);
  if (auto v = r.number(c, "clock_tolerance", "contract", 0))
    k.clock_tolerance = *v;
  if (auto v = r.boolean(c, "clock_check", "contract"))
    k.clock_check = *v;
  if (auto v = r.boolean(c, "simulated_time", "contract"))
    k.simulated_time = *v;

  const auto& sc = r.table(root, "scope", "", false);
  r.only_keys(sc, "scope", {"editable", "frozen"});
  task.scope.editable = r.strings(sc, "editable", "scope", false);
  task.scope.frozen = r.strings(sc, "frozen", "scope", false);
  // Globs name files inside the workload directory: never absolute, never through "..".
  for (const auto* list : {&task.scope.editable, &task.scope.frozen})
    for (std::size_t i = 0; i < list->size(); ++i) {
      const auto& glob = (*list)[i];
      bool parent = false;
      for (const auto& part : fs::path{glob})
        parent = parent || part == "..";
      if (glob.empty() || glob.front() == '/' || parent)
        r.fail(sc.get(list == &task.scope.editable ? "editable" : "frozen"),
               std::string{"scope."} + (list == &task.scope.editable ? "editable" : "frozen")
                 + "[" + std::to_string(i) + "]",
               "expected a glob relative to the workload directory without a \"..\" component, "
               "got \""
                 + glob + "\"");
    }

  const auto& b = r.table(root, "budget", "", false);
  r.only_keys(b, "budget", {"trials", "wall_clock_s", "baseline_repeats", "verify_top",
                            "verify_repeats", "seed", "target_mds", "max_baseline_repeats",
                            "max_verify_repeats", "policy", "ablations"});
  auto& bu = task.budget;
  if (auto v = r.count(b, "trials", "budget", 0, 1000000))
    bu.trials = static_cast<std::uint32_t>(*v);
  if (auto v = r.number(b, "wall_clock_s", "budget", 1))
    bu.wall_clock_s = *v;
  if (auto v = r.count(b, "baseline_repeats", "budget", 1, 1000))
    bu.baseline_repeats = static_cast<std::uint32_t>(*v);
  if (auto v = r.count(b, "verify_top", "budget", 0, 1000))
    bu.verify_top = static_cast<std::uint32_t>(*v);
  if (auto v = r.count(b, "verify_repeats", "budget", 1, 1000))
    bu.verify_repeats = static_cast<std::uint32_t>(*v);
  if (auto v = r.count(b, "ablations", "budget", 0, 16))
    bu.ablations = static_cast<std::uint32_t>(*v);
  if (auto v = r.count(b, "seed", "budget", 0, std::uint64_t{1} << 62))
    bu.seed = static_cast<std::uint64_t>(*v);
  if (auto v = r.string(b, "policy", "budget", false)) {
    auto names = tuning::policy_names();
    if (std::find(names.begin(), names.end(), *v) == names.end()) {
      std::string list;
      for (const auto& n : names)
        list += (list.empty() ? "" : ", ") + n;
      r.expected(*b.get("policy"), "budget.policy", "one of the search policies: " + list);
    }
    bu.policy = *v;
  }
  // The adaptive measurement (docs/tune.md "Measurement that adapts").
  if (auto v = r.number(b, "target_mds", "budget", 0)) {
    if (!(*v > 0) || !(*v < 1))
      r.expected(*b.get("target_mds"), "budget.target_mds",
                 "a fraction in (0, 1), e.g. 0.03 for 3 %");
    bu.target_mds = *v;
  }
  bu.max_baseline_repeats = std::max<std::uint32_t>(12, bu.baseline_repeats);
  if (auto v = r.count(b, "max_baseline_repeats", "budget", 1, 1000)) {
    if (*v < bu.baseline_repeats)
      r.expected(*b.get("max_baseline_repeats"), "budget.max_baseline_repeats",
                 "an integer >= budget.baseline_repeats (" + std::to_string(bu.baseline_repeats)
                   + ")");
    bu.max_baseline_repeats = static_cast<std::uint32_t>(*v);
  }
  bu.max_verify_repeats = 8 * bu.verify_repeats;
  if (auto v = r.count(b, "max_verify_repeats", "budget", 1, 16000)) {
    if (*v < bu.verify_repeats || *v % bu.verify_repeats != 0
        || *v / bu.verify_repeats > 16)
      r.expected(*b.get("max_verify_repeats"), "budget.max_verify_repeats",
                 "a multiple of budget.verify_repeats (" + std::to_string(bu.verify_repeats)
                   + ") from 1 to 16 times it (one look of the sequential test per "
                     "verify_repeats pairs)");
    bu.max_verify_repeats = static_cast<std::uint32_t>(*v);
  }
}

/// The `[llm]` table (tuning::llm_spec; docs/llm.md).
void parse_llm(const reader& r, const toml::table& root, tuning::llm_spec& llm) {
  if (root.get("llm") == nullptr)
    return;
  const auto& t = r.table(root, "llm", "", true);
  r.only_keys(t, "llm", {"base_url", "model", "temperature", "max_tokens", "timeout_s",
                         "connect_timeout_s", "max_calls", "max_tokens_per_run", "api_key_env",
                         "max_response_bytes", "retries", "answer_retries", "patches",
                         "max_prompt_file_bytes", "max_patch_bytes", "rounds_every",
                         "rounds_on_stall", "max_rounds"});
  llm.enabled = true;
  llm.base_url = *r.string(t, "base_url", "llm", true);
  if (llm.base_url.rfind("http://", 0) != 0 && llm.base_url.rfind("https://", 0) != 0)
    r.expected(*t.get("base_url"), "llm.base_url", "an http:// or https:// URL");
  for (char c : llm.base_url)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
      r.expected(*t.get("base_url"), "llm.base_url", "a URL without spaces or control characters");
  {
    // Credentials in the URL would reach the log (LlmRequested "url"): only api_key_env.
    auto rest = llm.base_url.substr(llm.base_url.find("://") + 3);
    auto authority = rest.substr(0, rest.find('/'));
    if (authority.find('@') != std::string::npos || rest.find('?') != std::string::npos)
      r.expected(*t.get("base_url"), "llm.base_url",
                 "a URL without user:password@ or a query (the key goes in api_key_env)");
  }
  while (!llm.base_url.empty() && llm.base_url.back() == '/')
    llm.base_url.pop_back();
  llm.model = *r.string(t, "model", "llm", true);
  if (llm.model.empty() || llm.model.size() > 256)
    r.expected(*t.get("model"), "llm.model", "a model name of 1 to 256 characters");
  auto bounded = [&](const char* key, double lo, double hi, bool open_low, double& out) {
    if (t.get(key) == nullptr)
      return;
    auto v = *r.number(t, key, "llm", lo);
    if (v > hi || (open_low && v <= lo))
      r.expected(*t.get(key), std::string{"llm."} + key,
                 std::string{"a number in "} + (open_low ? "(" : "[") + std::to_string(lo) + ", "
                   + std::to_string(hi) + "]");
    out = v;
  };
  bounded("temperature", 0, 2, false, llm.temperature);
  bounded("timeout_s", 0, 3600, true, llm.timeout_s);
  bounded("connect_timeout_s", 0, 600, true, llm.connect_timeout_s);
  if (auto v = r.count(t, "max_tokens", "llm", 1, 1000000))
    llm.max_tokens = *v;
  if (auto v = r.count(t, "max_calls", "llm", 1, 1000))
    llm.max_calls = *v;
  if (auto v = r.count(t, "max_tokens_per_run", "llm", 1, 1000000000))
    llm.max_tokens_per_run = *v;
  if (auto v = r.count(t, "retries", "llm", 0, 10))
    llm.retries = *v;
  if (auto v = r.count(t, "answer_retries", "llm", 0, 5))
    llm.answer_retries = *v;
  if (auto v = r.boolean(t, "patches", "llm"))
    llm.patches = *v;
  if (auto v = r.count(t, "rounds_every", "llm", 0, 10000))
    llm.rounds_every = *v;
  if (auto v = r.count(t, "rounds_on_stall", "llm", 0, 10000))
    llm.rounds_on_stall = *v;
  if (auto v = r.count(t, "max_rounds", "llm", 0, 100))
    llm.max_rounds = *v;
  if (auto v = r.string(t, "api_key_env", "llm", false)) {
    static const std::regex env_name{"[A-Za-z_][A-Za-z0-9_]{0,127}"};
    if (!std::regex_match(*v, env_name))
      r.expected(*t.get("api_key_env"), "llm.api_key_env",
                 "the NAME of an environment variable (letters, digits, '_'), never the key");
    llm.api_key_env = *v;
  }
  auto sized = [&](const char* key, std::uint64_t lo, std::uint64_t hi, std::uint64_t& out) {
    if (t.get(key) == nullptr)
      return;
    auto v = r.byte_size(t, key, "llm", out);
    if (v < lo || v > hi)
      r.expected(*t.get(key), std::string{"llm."} + key,
                 "a byte size from " + std::to_string(lo) + " to " + std::to_string(hi));
    out = v;
  };
  sized("max_response_bytes", 1024, std::uint64_t{256} << 20, llm.max_response_bytes);
  sized("max_prompt_file_bytes", 0, std::uint64_t{16} << 20, llm.max_prompt_file_bytes);
  sized("max_patch_bytes", 64, std::uint64_t{16} << 20, llm.max_patch_bytes);
}

/// `[hardware]` (tuning::hardware_spec): the hardware the task's findings are filed under.
void parse_hardware(const reader& r, const toml::table& root, tuning::hardware_spec& hw) {
  if (root.get("hardware") == nullptr)
    return;
  const auto& t = r.table(root, "hardware", "", true);
  r.only_keys(t, "hardware", {"gpu", "gpu_memory_bytes", "gpus_per_node", "nodes",
                              "interconnect", "cpu", "simulated", "software", "peak_tflops",
                              "intra_node_gb_per_s", "inter_node_gb_per_s"});
  hw.declared = true;
  hw.gpu = *r.string(t, "gpu", "hardware", true);
  if (hw.gpu.empty() || hw.gpu.size() > 128)
    r.expected(*t.get("gpu"), "hardware.gpu", "a GPU model of 1 to 128 characters");
  hw.gpu_memory_bytes = r.byte_size(t, "gpu_memory_bytes", "hardware", 0);
  hw.gpus_per_node =
    static_cast<std::uint32_t>(r.count(t, "gpus_per_node", "hardware", 1, 4096).value_or(1));
  hw.nodes = static_cast<std::uint32_t>(r.count(t, "nodes", "hardware", 1, 65536).value_or(1));
  hw.interconnect = r.string(t, "interconnect", "hardware", false).value_or("");
  hw.cpu = r.string(t, "cpu", "hardware", false).value_or("");
  hw.simulated = r.boolean(t, "simulated", "hardware").value_or(false);
  hw.peak_tflops = r.number(t, "peak_tflops", "hardware", 0.0).value_or(0.0);
  hw.intra_node_bytes_per_s = r.number(t, "intra_node_gb_per_s", "hardware", 0.0).value_or(0.0) * 1e9;
  hw.inter_node_bytes_per_s = r.number(t, "inter_node_gb_per_s", "hardware", 0.0).value_or(0.0) * 1e9;
  if (t.get("software") != nullptr) {
    const auto& sw = r.table(t, "software", "hardware", true);
    for (const auto& [k, v] : sw) {
      auto key = "hardware.software." + std::string{k.str()};
      if (!v.is_string())
        r.expected(v, key, "a version string, e.g. \"2.4.0\"");
      hw.software[std::string{k.str()}] = *v.value<std::string>();
    }
  }
}

/// `[model]` (tuning::model_spec): the model the task trains, for the workload signature.
void parse_model(const reader& r, const toml::table& root, tuning::model_spec& m) {
  if (root.get("model") == nullptr)
    return;
  const auto& t = r.table(root, "model", "", true);
  static const std::set<std::string> shape_keys = {"layers",  "hidden",  "heads",
                                                   "kv_heads", "ffn",     "experts",
                                                   "experts_per_token", "vocab", "seq_len",
                                                   "global_batch"};
  auto allowed = shape_keys;
  allowed.insert({"name", "architecture", "attention"});
  r.only_keys(t, "model", allowed);
  m.declared = true;
  m.name = r.safe_name(t, "name", "model", *r.string(t, "name", "model", true));
  if (auto a = r.string(t, "architecture", "model", false)) {
    if (*a != "dense" && *a != "moe")
      r.expected(*t.get("architecture"), "model.architecture", "\"dense\" or \"moe\"");
    m.architecture = *a;
  }
  if (auto a = r.string(t, "attention", "model", false)) {
    if (*a != "flash" && *a != "eager")
      r.expected(*t.get("attention"), "model.attention", "\"flash\" or \"eager\"");
    m.attention = *a;
  }
  for (const auto& key : shape_keys)
    if (auto v = r.count(t, key, "model", 1, std::uint64_t{1} << 40))
      m.shape[key] = static_cast<std::int64_t>(*v);
}

/// [smoke] (tuning::smoke_spec), after [contract] and [limits]: the probe launch of untested
/// patches. Absent: the task has none.
void parse_smoke(const reader& r, const toml::table& root, tuning::task_spec& task) {
  const auto* node = root.get("smoke");
  if (node == nullptr)
    return;
  const auto& s = r.table(root, "smoke", "", false);
  r.only_keys(s, "smoke", {"argv", "world_size", "steps", "tokens_per_step", "global_batch",
                           "params", "layers", "loss_rtol", "loss_atol", "timeout_s"});
  tuning::smoke_spec smoke;
  smoke.argv = r.strings(s, "argv", "smoke", true);
  if (smoke.argv.empty())
    r.fail(s.get("argv"), "smoke.argv", "expected at least the program to run, got []");
  if (const auto* ws = s.get("world_size")) {
    if (ws->is_integer() && *ws->value<std::int64_t>() >= 1 && *ws->value<std::int64_t>() <= 4096)
      smoke.world_size = std::to_string(*ws->value<std::int64_t>());
    else if (ws->is_string())
      smoke.world_size = *ws->value<std::string>();
    else
      r.expected(*ws, "smoke.world_size", "an integer from 1 to 4096 or a template such as \"1\"");
  }
  // The full job's contract, less what only holds for the full job.
  auto& c = smoke.contract;
  c = task.contract;
  c.steps = 0;
  c.tokens_per_step = 0;
  c.global_batch = 0;
  c.params = 0;
  c.layers = 0;
  c.loss_checkpoints.clear();
  c.loss_mode = tuning::loss_mode::pointwise;
  c.loss_window = 0;
  c.eval_steps.clear();
  if (auto v = r.count(s, "steps", "smoke", 1, 100000))
    c.steps = static_cast<std::uint32_t>(*v);
  else
    r.fail(&s, "smoke.steps", "missing (the number of steps each smoke launch runs, >= 1)");
  c.timed_first = 0;
  c.timed_last = c.steps - 1;
  if (auto v = r.count(s, "tokens_per_step", "smoke", 0, std::uint64_t{1} << 62))
    c.tokens_per_step = *v;
  if (auto v = r.count(s, "global_batch", "smoke", 0, std::uint64_t{1} << 62))
    c.global_batch = *v;
  if (auto v = r.count(s, "params", "smoke", 0, std::uint64_t{1} << 62))
    c.params = *v;
  if (auto v = r.count(s, "layers", "smoke", 0, 0xffffffffu))
    c.layers = static_cast<std::uint32_t>(*v);
  if (auto v = r.number(s, "loss_rtol", "smoke", 0))
    c.loss_rtol = *v;
  if (auto v = r.number(s, "loss_atol", "smoke", 0))
    c.loss_atol = *v;
  if (auto v = r.number(s, "timeout_s", "smoke", 0.001))
    smoke.timeout_s = *v;
  // Its templates (placeholders, world size) are the pre-flight's to check, as workload.argv's
  // (adapters::preflight: each element's position, the nearest known name).
  task.smoke = std::move(smoke);
}

tuning::task_spec parse_task(const reader& r, const toml::table& root) {
  r.only_keys(root, "", {"name", "description", "workload", "knobs", "metrics", "limits",
                         "patches", "constants", "constraints", "contract", "scope", "budget",
                         "knowledge", "llm", "hardware", "model", "smoke"});
  tuning::task_spec task;
  task.name = r.safe_name(root, "name", "", *r.string(root, "name", "", true));
  task.knowledge = r.string(root, "knowledge", "", false).value_or(task.name);
  r.safe_name(root, "knowledge", "", task.knowledge);
  r.string(root, "description", "", false);

  const auto& w = r.table(root, "workload", "", true);
  r.only_keys(w, "workload", {"workdir", "launcher", "argv", "env", "world_size", "writable",
                              "distributed_env", "srun_args", "torchrun_program",
                              "torchrun_args"});
  task.workload.workdir = r.resolve(r.string(w, "workdir", "workload", false).value_or("."));
  if (auto l = r.string(w, "launcher", "workload", false)) {
    bool known = false;
    for (auto kind : {tuning::launcher_kind::ranks, tuning::launcher_kind::command,
                      tuning::launcher_kind::slurm, tuning::launcher_kind::torchrun})
      if (*l == tuning::to_string(kind)) {
        task.workload.launcher = kind;
        known = true;
      }
    if (!known)
      r.expected(*w.get("launcher"), "workload.launcher",
                 "\"ranks\", \"command\", \"slurm\" (one srun job step in the allocation "
                 "infrarsi runs in) or \"torchrun\"");
  }
  // Launcher-specific keys: only with their launcher, never an option infrarsi sets itself.
  auto launcher_args = [&](const char* key, tuning::launcher_kind kind,
                           std::string (*reserved)(const std::string&)) {
    auto values = r.strings(w, key, "workload", false);
    const auto* node = w.get(key);
    if (node != nullptr && task.workload.launcher != kind)
      r.fail(node, std::string{"workload."} + key,
             std::string{"only for workload.launcher = \""} + tuning::to_string(kind)
               + "\", got launcher \"" + tuning::to_string(task.workload.launcher) + "\"");
    for (std::size_t i = 0; i < values.size(); ++i) {
      auto name = reserved == nullptr ? std::string{} : reserved(values[i]);
      if (!name.empty())
        r.fail((*node->as_array()).get(i),
               std::string{"workload."} + key + "[" + std::to_string(i) + "]",
               "infrarsi sets " + name + " itself (docs/node-runner.md \"Launching through "
               "Slurm and torchrun\"), got string \"" + values[i] + "\"");
    }
    return values;
  };
  task.workload.srun_args =
    launcher_args("srun_args", tuning::launcher_kind::slurm, &reserved_srun_option);
  task.workload.torchrun_args =
    launcher_args("torchrun_args", tuning::launcher_kind::torchrun, &reserved_torchrun_option);
  if (w.get("torchrun_program") != nullptr) {
    auto program = launcher_args("torchrun_program", tuning::launcher_kind::torchrun, nullptr);
    if (program.empty())
      r.fail(w.get("torchrun_program"), "workload.torchrun_program",
             "expected the program that is torchrun, e.g. [\"torchrun\"], got []");
    task.workload.torchrun_program = std::move(program);
  }
  if (auto d = r.string(w, "distributed_env", "workload", false)) {
    if (*d == "always")
      task.workload.distributed_env = tuning::distributed_env_kind::always;
    else if (*d == "multi_rank")
      task.workload.distributed_env = tuning::distributed_env_kind::multi_rank;
    else
      r.expected(*w.get("distributed_env"), "workload.distributed_env",
                 "\"always\" (every rank gets RANK, WORLD_SIZE, MASTER_ADDR, ...) or "
                 "\"multi_rank\" (only when world_size > 1)");
  }
  task.workload.argv = r.strings(w, "argv", "workload", true);
  task.workload.writable = r.strings(w, "writable", "workload", false);
  if (task.workload.argv.empty())
    r.fail(w.get("argv"), "workload.argv", "expected at least the program to run, got []");
  if (const auto* ws = w.get("world_size")) {
    if (ws->is_integer() && *ws->value<std::int64_t>() >= 1 && *ws->value<std::int64_t>() <= 4096)
      task.workload.world_size = std::to_string(*ws->value<std::int64_t>());
    else if (ws->is_string())
      task.workload.world_size = *ws->value<std::string>();
    else
      r.expected(*ws, "workload.world_size", "an integer from 1 to 4096 or a template such as "
                                             "\"{world_size}\"");
  }
  const auto& env = r.table(w, "env", "workload", false);
  for (const auto& [k, v] : env) {
    if (!v.is_string())
      r.expected(v, "workload.env." + std::string{k.str()}, "a string");
    task.workload.env[std::string{k.str()}] = *v.value<std::string>();
  }

  if (const auto* knobs = root.get("knobs")) {
    if (!knobs->is_array_of_tables())
      r.expected(*knobs, "knobs", "an array of tables ([[knobs]])");
    r.at_most(knobs, "knobs", limits::max_knobs, "knobs");
    std::size_t i = 0;
    for (const auto& k : *knobs->as_array()) {
      auto where = "knobs[" + std::to_string(i++) + "]";
      auto spec = parse_knob(r, *k.as_table(), where);
      if (task.find_knob(spec.name) != nullptr)
        r.fail(&k, where + ".name", "duplicate knob '" + spec.name + "'");
      if (!spec.role.empty())
        for (const auto& other : task.knobs)
          if (other.role == spec.role)
            r.fail(k.as_table()->get("role"), where + ".role",
                   "knob '" + other.name + "' already has role \"" + spec.role
                     + "\" (at most one knob per role)");
      task.knobs.push_back(std::move(spec));
    }
  }

  // An env knob that may be "unset" removes its variable: its template must be the knob alone,
  // or "unset" would be pasted into a longer value.
  for (const auto& [k, v] : env) {
    const auto& tmpl = task.workload.env.at(std::string{k.str()});
    if (tuning::sole_knob_of(task, tmpl) != nullptr)
      continue;
    for (const auto& knob : task.knobs)
      if (tuning::may_be_unset(knob) && tmpl.find("{" + knob.name + "}") != std::string::npos)
        r.fail(&v, "workload.env." + std::string{k.str()},
               "knob '" + knob.name + "' may be \"" + tuning::unset_env_value
                 + "\" (which removes the variable), so the template must be exactly \"{"
                 + knob.name + "}\", got \"" + tmpl + "\"");
  }

  const auto& m = r.table(root, "metrics", "", false);
  r.only_keys(m, "metrics", {"format", "prefix", "regex", "regex_fields", "tokens_per_step",
                             "reporting_rank", "require_final_line", "oom_patterns",
                             "oom_exit_codes"});
  if (auto f = r.string(m, "format", "metrics", false)) {
    if (*f == "json_lines")
      task.metrics.format = tuning::metrics_spec::format_kind::json_lines;
    else if (*f == "regex")
      task.metrics.format = tuning::metrics_spec::format_kind::regex;
    else
      r.expected(*m.get("format"), "metrics.format", "\"json_lines\" or \"regex\"");
  }
  if (auto p = r.string(m, "prefix", "metrics", false))
    task.metrics.prefix = *p;
  if (auto rx = r.string(m, "regex", "metrics", false)) {
    if (rx->size() > limits::max_regex_length)
      r.fail(m.get("regex"), "metrics.regex",
             std::to_string(rx->size()) + " characters, more than the limit of "
               + std::to_string(limits::max_regex_length));
    try { // as the metrics parser compiles it (adapters/metrics.cpp), so a mistake shows here
      std::regex compiled{*rx, std::regex::ECMAScript};
    } catch (const std::regex_error& e) {
      r.fail(m.get("regex"), "metrics.regex",
             "expected an ECMAScript regular expression (" + std::string{e.what()} + "), got \""
               + *rx + "\"");
    }
    task.metrics.regex = *rx;
  }
  task.metrics.regex_fields = r.strings(m, "regex_fields", "metrics", false);
  static const std::set<std::string> fields{"step", "loss", "tokens", "step_time_s",
                                            "step_time_ms", "peak_memory_bytes",
                                            "peak_memory_mb", "peak_memory_gib",
                                            "peak_memory_gb", "eval_loss"};
  for (std::size_t i = 0; i < task.metrics.regex_fields.size(); ++i)
    if (fields.count(task.metrics.regex_fields[i]) == 0)
      r.fail(m.get("regex_fields"), "metrics.regex_fields[" + std::to_string(i) + "]",
             "expected one of step, loss, tokens, step_time_s, step_time_ms, peak_memory_bytes, "
             "peak_memory_mb, peak_memory_gib, peak_memory_gb, eval_loss, got \""
               + task.metrics.regex_fields[i] + "\"");
  if (task.metrics.format == tuning::metrics_spec::format_kind::regex) {
    if (task.metrics.regex.empty())
      r.fail(&m, "metrics.regex", "missing (format \"regex\" needs a regular expression)");
    if (task.metrics.regex_fields.empty())
      r.fail(&m, "metrics.regex_fields", "missing (one field name per capture group)");
    if (std::find(task.metrics.regex_fields.begin(), task.metrics.regex_fields.end(), "step")
          == task.metrics.regex_fields.end())
      r.fail(m.get("regex_fields"), "metrics.regex_fields", "must include \"step\"");
    task.metrics.require_final_line = false;
  }
  if (auto tps = r.number(m, "tokens_per_step", "metrics", 0)) {
    if (*tps > 4.6e18) // 2^62: the converted count stays exact and in range
      r.expected(*m.get("tokens_per_step"), "metrics.tokens_per_step", "a count <= 2^62");
    task.metrics.tokens_per_step = static_cast<std::uint64_t>(*tps);
  }
  if (auto rr = r.number(m, "reporting_rank", "metrics", 0)) {
    if (*rr > 1e6)
      r.expected(*m.get("reporting_rank"), "metrics.reporting_rank", "a rank <= 1000000");
    task.metrics.reporting_rank = static_cast<int>(*rr);
  }
  if (auto rf = r.boolean(m, "require_final_line", "metrics"))
    task.metrics.require_final_line = *rf;
  if (m.get("oom_patterns") != nullptr)
    task.metrics.oom_patterns = r.strings(m, "oom_patterns", "metrics", false);
  if (const auto* codes = m.get("oom_exit_codes")) {
    if (!codes->is_array())
      r.expected(*codes, "metrics.oom_exit_codes", "an array of integers");
    task.metrics.oom_exit_codes.clear();
    for (const auto& c : *codes->as_array()) {
      if (!c.is_integer() || *c.value<std::int64_t>() < 0 || *c.value<std::int64_t>() > 255)
        r.expected(c, "metrics.oom_exit_codes[]", "an exit status in [0, 255]");
      task.metrics.oom_exit_codes.push_back(static_cast<int>(*c.value<std::int64_t>()));
    }
  }

  const auto& l = r.table(root, "limits", "", false);
  r.only_keys(l, "limits", {"timeout_s", "memory_cap_bytes", "device_memory_bytes", "kill_grace_s",
                             "launch_window_s"});
  if (auto v = r.number(l, "timeout_s", "limits", 0.001))
    task.limits.timeout_s = *v;
  task.limits.memory_cap_bytes = r.byte_size(l, "memory_cap_bytes", "limits", 0);
  task.limits.device_memory_bytes = r.byte_size(l, "device_memory_bytes", "limits", 0);
  if (auto v = r.number(l, "kill_grace_s", "limits", 0))
    task.limits.kill_grace_s = *v;
  if (auto v = r.number(l, "launch_window_s", "limits", 0))
    task.limits.launch_window_s = *v;

  if (const auto* patches = root.get("patches")) {
    if (!patches->is_array_of_tables())
      r.expected(*patches, "patches", "an array of tables ([[patches]])");
    r.at_most(patches, "patches", limits::max_patches, "patches");
    std::size_t i = 0;
    for (const auto& p : *patches->as_array()) {
      auto where = "patches[" + std::to_string(i++) + "]";
      const auto& t = *p.as_table();
      r.only_keys(t, where, {"name", "file", "description"});
      tuning::patch_spec spec;
      spec.name = r.safe_name(t, "name", where, *r.string(t, "name", where, true));
      spec.file = r.resolve(*r.string(t, "file", where, true));
      spec.description = r.string(t, "description", where, false).value_or("");
      std::error_code ec;
      if (r.check_files() && !fs::is_regular_file(spec.file, ec))
        r.fail(t.get("file"), where + ".file", "no such file: " + spec.file);
      if (task.find_patch(spec.name) != nullptr)
        r.fail(&p, where + ".name", "duplicate patch '" + spec.name + "'");
      task.patches.push_back(std::move(spec));
    }
  }
  // The planner's features (tuning::feature_space): its models are dense in their number.
  std::size_t features = task.patches.size();
  for (const auto& k : task.knobs)
    for (const auto& v : tuning::search_values(k))
      features += v == k.default_value ? 0 : 1;
  if (features > limits::max_search_features)
    r.fail(root.get("knobs"), "knobs",
           std::to_string(features) + " search features (the searched values of every knob "
             "other than its default, plus one per patch), more than the limit of "
             + std::to_string(limits::max_search_features));
  parse_llm(r, root, task.llm);
  parse_contract_sections(r, root, task);
  parse_hardware(r, root, task.hardware);
  parse_model(r, root, task.model);
  parse_smoke(r, root, task);
  return task;
}

} // namespace

bool is_safe_name(const std::string& name) {
  if (name.empty() || name.size() > limits::max_name_length || name.find("..") != std::string::npos)
    return false;
  auto ok = [](char c, bool first) {
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    return alnum || c == '_' || (!first && (c == '.' || c == '-'));
  };
  for (std::size_t i = 0; i < name.size(); ++i)
    if (!ok(name[i], i == 0))
      return false;
  return true;
}

bool parse_byte_size(const std::string& text, std::uint64_t& out) {
  // A plain decimal number (digits, at most one '.'), then an optional unit: no sign, exponent,
  // hexadecimal ("0x10" would read as 16), "inf" or "nan".
  std::size_t pos = 0;
  bool digits = false;
  bool dot = false;
  for (; pos < text.size(); ++pos) {
    char ch = text[pos];
    if (ch >= '0' && ch <= '9')
      digits = true;
    else if (ch == '.' && !dot)
      dot = true;
    else
      break;
  }
  if (!digits)
    return false;
  double value = 0;
  try {
    value = std::stod(text.substr(0, pos));
  } catch (const std::exception&) {
    return false;
  }
  auto unit = text.substr(pos);
  while (!unit.empty() && unit.front() == ' ')
    unit.erase(unit.begin());
  static const std::pair<const char*, double> units[] = {
    {"", 1.0},      {"B", 1.0},      {"KB", 1e3},       {"MB", 1e6},       {"GB", 1e9},
    {"TB", 1e12},   {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
    {"TiB", 1099511627776.0}};
  for (const auto& [name, factor] : units) {
    if (unit == name) {
      auto bytes = std::round(value * factor);
      // At most 2^63 - 1 (what llround can return), and a non-zero size may not round to 0
      // bytes (0 means "none").
      if (!std::isfinite(bytes) || bytes < 0 || bytes >= 9.2e18 || (value > 0 && bytes < 1))
        return false;
      out = static_cast<std::uint64_t>(std::llround(bytes));
      return true;
    }
  }
  return false;
}

caf::expected<tuning::task_spec> load_task_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return make_error(errc::not_found, "task file '" + path + "': no such file");
  auto abs = fs::absolute(path).lexically_normal().string();
  auto bytes = fs::file_size(path, ec);
  if (!ec && bytes > limits::max_file_bytes)
    return make_error(errc::invalid_argument,
                      abs + ": " + std::to_string(bytes) + " bytes, more than the limit of "
                        + std::to_string(limits::max_file_bytes) + " bytes for a task file");
  try {
    auto root = toml::parse_file(abs);
    reader r{abs};
    auto task = parse_task(r, root);
    task.source = abs;
    return task;
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << abs << ':' << e.source().begin.line << ':' << e.source().begin.column
       << ": TOML syntax error: " << e.description();
    return make_error(errc::invalid_argument, os.str());
  } catch (const task_error& e) {
    return make_error(errc::invalid_argument, e.message);
  }
}

caf::expected<tuning::task_spec> load_task_text(const std::string& text,
                                                const std::string& source_path) {
  auto abs = fs::absolute(source_path).lexically_normal().string();
  if (text.size() > limits::max_file_bytes)
    return make_error(errc::invalid_argument,
                      abs + " (as logged): " + std::to_string(text.size())
                        + " bytes, more than the limit of " + std::to_string(limits::max_file_bytes)
                        + " bytes for a task file");
  try {
    auto root = toml::parse(text, abs);
    reader r{abs, false};
    auto task = parse_task(r, root);
    task.source = abs;
    return task;
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << abs << " (as logged):" << e.source().begin.line << ':' << e.source().begin.column
       << ": TOML syntax error: " << e.description();
    return make_error(errc::invalid_argument, os.str());
  } catch (const task_error& e) {
    return make_error(errc::invalid_argument, e.message);
  }
}

caf::expected<tuning::llm_spec> load_llm_table(const std::string& text, const std::string& file) {
  tuning::llm_spec llm;
  try {
    auto root = toml::parse(text, file);
    reader r{file, false};
    parse_llm(r, root, llm);
    return llm;
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << file << ':' << e.source().begin.line << ':' << e.source().begin.column
       << ": TOML syntax error: " << e.description();
    return make_error(errc::invalid_argument, os.str());
  } catch (const task_error& e) {
    return make_error(errc::invalid_argument, e.message);
  }
}

} // namespace infrarsi::adapters
