#include "workloads/sim/task_file.hpp"

#include <cmath>
#include <exception>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>

#include <toml++/toml.h>

namespace infrarsi::sim {

namespace fs = std::filesystem;
using tuning::knob_spec;
using tuning::knob_type;
using tuning::knob_value;

namespace {

/// Thrown inside the reader only; turned into `why` by read_task_file.
struct task_file_error {
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

std::string join(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

/// Typed access to the keys of one file; every failure names the file, the position and the key.
class reader {
public:
  explicit reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const toml::node* at, const std::string& key,
                         const std::string& message) const {
    std::ostringstream os;
    os << file_;
    if (at != nullptr && at->source().begin.line > 0)
      os << ':' << at->source().begin.line << ':' << at->source().begin.column;
    os << ": " << key << ": " << message;
    throw task_file_error{os.str()};
  }

  [[noreturn]] void expected(const toml::node& at, const std::string& key,
                             const std::string& what) const {
    fail(&at, key, "expected " + what + ", got " + describe_node(at));
  }

  /// The table at `key`, or an empty table when absent and not required.
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
                               const std::string& where) const {
    const auto* n = t.get(key);
    if (n == nullptr)
      return std::nullopt;
    if (!n->is_number())
      expected(*n, join(where, key), "a number");
    auto v = *n->value<double>();
    if (!std::isfinite(v))
      expected(*n, join(where, key), "a finite number");
    return v;
  }

  std::vector<std::string> strings(const toml::table& t, const std::string& key,
                                   const std::string& where) const {
    const auto* n = t.get(key);
    if (n == nullptr)
      fail(&t, join(where, key), "missing (an array of strings is required)");
    if (!n->is_array())
      expected(*n, join(where, key), "an array of strings");
    std::vector<std::string> out;
    std::size_t i = 0;
    for (const auto& e : *n->as_array()) {
      if (!e.is_string())
        expected(e, join(where, key) + "[" + std::to_string(i) + "]", "a string");
      out.push_back(*e.value<std::string>());
      ++i;
    }
    return out;
  }

  /// A path relative to the file's directory made absolute (as the harness resolves it).
  std::string resolve(const std::string& path) const {
    fs::path p{path};
    if (p.is_relative())
      p = fs::path{file_}.parent_path() / p;
    return fs::weakly_canonical(p).string();
  }

private:
  std::string file_;
};

knob_type parse_knob_type(const reader& r, const toml::node& n, const std::string& key) {
  static const char* const expected_types = "one of \"int\", \"real\", \"bool\", \"choice\"";
  auto text = n.value<std::string>();
  if (!text || !n.is_string())
    r.expected(n, key, expected_types);
  if (*text == "int")
    return knob_type::integer;
  if (*text == "real")
    return knob_type::real;
  if (*text == "bool")
    return knob_type::boolean;
  if (*text == "choice")
    return knob_type::choice;
  r.expected(n, key, expected_types);
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
  knob_spec k;
  k.name = *r.string(t, "name", where, true);
  if (k.name.empty() || k.name.find_first_of("{} \t") != std::string::npos)
    r.fail(t.get("name"), where + ".name",
           "expected a name without spaces or braces, got \"" + k.name + "\"");
  const auto* type = t.get("type");
  if (type == nullptr)
    r.fail(&t, where + ".type", "missing (one of \"int\", \"real\", \"bool\", \"choice\")");
  k.type = parse_knob_type(r, *type, where + ".type");
  if (const auto* values = t.get("values")) {
    if (!values->is_array() || values->as_array()->empty())
      r.expected(*values, where + ".values", "a non-empty array");
    std::size_t i = 0;
    for (const auto& v : *values->as_array())
      k.values.push_back(
          knob_value_of(r, v, k.type, where + ".values[" + std::to_string(i++) + "]"));
  }
  k.min = r.number(t, "min", where);
  k.max = r.number(t, "max", where);
  if (k.type == knob_type::choice && k.values.empty())
    r.fail(&t, where + ".values", "missing (a choice knob needs its list of values)");
  if ((k.type == knob_type::integer || k.type == knob_type::real) && k.values.empty() &&
      !(k.min && k.max))
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
  return k;
}

void parse_workload(const reader& r, const toml::table& root, tuning::task_spec& task) {
  const auto& w = r.table(root, "workload", "", true);
  task.workload.workdir = r.resolve(r.string(w, "workdir", "workload", false).value_or("."));
  task.workload.argv = r.strings(w, "argv", "workload");
  if (task.workload.argv.empty())
    r.fail(w.get("argv"), "workload.argv", "expected at least the program to run, got []");
  if (const auto* ws = w.get("world_size")) {
    if (ws->is_integer() && *ws->value<std::int64_t>() >= 1)
      task.workload.world_size = std::to_string(*ws->value<std::int64_t>());
    else if (ws->is_string())
      task.workload.world_size = *ws->value<std::string>();
    else
      r.expected(*ws, "workload.world_size",
                 "a positive integer or a template such as \"{world_size}\"");
  }
}

void parse_knobs(const reader& r, const toml::table& root, tuning::task_spec& task) {
  const auto* knobs = root.get("knobs");
  if (knobs == nullptr)
    return;
  if (!knobs->is_array_of_tables())
    r.expected(*knobs, "knobs", "an array of tables ([[knobs]])");
  std::size_t i = 0;
  for (const auto& k : *knobs->as_array()) {
    auto where = "knobs[" + std::to_string(i++) + "]";
    auto spec = parse_knob(r, *k.as_table(), where);
    if (task.find_knob(spec.name) != nullptr)
      r.fail(&k, where + ".name", "duplicate knob '" + spec.name + "'");
    task.knobs.push_back(std::move(spec));
  }
}

void parse_constants(const reader& r, const toml::table& root, tuning::task_spec& task) {
  for (const auto& [k, v] : r.table(root, "constants", "", false)) {
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
}

void parse_limits(const reader& r, const toml::table& root, tuning::task_spec& task) {
  const auto& l = r.table(root, "limits", "", false);
  const auto* n = l.get("memory_cap_bytes");
  if (n == nullptr)
    return;
  if (n->is_integer() && *n->value<std::int64_t>() >= 0) {
    task.limits.memory_cap_bytes = static_cast<std::uint64_t>(*n->value<std::int64_t>());
    return;
  }
  if (n->is_string())
    if (auto bytes = parse_byte_size(*n->value<std::string>())) {
      task.limits.memory_cap_bytes = *bytes;
      return;
    }
  r.expected(*n, "limits.memory_cap_bytes",
             "a byte count (non-negative integer, or a string such as \"3GiB\" or \"512MB\")");
}

void parse_patches(const reader& r, const toml::table& root, tuning::task_spec& task) {
  const auto* patches = root.get("patches");
  if (patches == nullptr)
    return;
  if (!patches->is_array_of_tables())
    r.expected(*patches, "patches", "an array of tables ([[patches]])");
  std::size_t i = 0;
  for (const auto& p : *patches->as_array()) {
    auto where = "patches[" + std::to_string(i++) + "]";
    const auto& t = *p.as_table();
    tuning::patch_spec spec;
    spec.name = *r.string(t, "name", where, true);
    spec.file = r.resolve(*r.string(t, "file", where, true));
    spec.description = r.string(t, "description", where, false).value_or("");
    std::error_code ec;
    if (!fs::is_regular_file(spec.file, ec))
      r.fail(t.get("file"), where + ".file", "no such file: " + spec.file);
    if (task.find_patch(spec.name) != nullptr)
      r.fail(&p, where + ".name", "duplicate patch '" + spec.name + "'");
    task.patches.push_back(std::move(spec));
  }
}

} // namespace

std::optional<std::uint64_t> parse_byte_size(const std::string& text) {
  // A plain decimal number (digits, at most one '.'), then an optional unit.
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
    return std::nullopt;
  double value = 0;
  try {
    value = std::stod(text.substr(0, pos));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  auto unit = text.substr(pos);
  while (!unit.empty() && unit.front() == ' ')
    unit.erase(unit.begin());
  static const std::pair<const char*, double> units[] = {{"", 1.0},
                                                         {"B", 1.0},
                                                         {"KB", 1e3},
                                                         {"MB", 1e6},
                                                         {"GB", 1e9},
                                                         {"TB", 1e12},
                                                         {"KiB", 1024.0},
                                                         {"MiB", 1048576.0},
                                                         {"GiB", 1073741824.0},
                                                         {"TiB", 1099511627776.0}};
  for (const auto& [name, factor] : units) {
    if (unit != name)
      continue;
    auto bytes = std::round(value * factor);
    if (!std::isfinite(bytes) || bytes < 0 || bytes >= 9.2e18 || (value > 0 && bytes < 1))
      return std::nullopt;
    return static_cast<std::uint64_t>(std::llround(bytes));
  }
  return std::nullopt;
}

std::optional<tuning::task_spec> read_task_file(const std::string& path, std::string& why) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    why = "task file '" + path + "': no such file";
    return std::nullopt;
  }
  auto abs = fs::absolute(path).lexically_normal().string();
  try {
    auto root = toml::parse_file(abs);
    reader r{abs};
    tuning::task_spec task;
    task.source = abs;
    if (auto name = r.string(root, "name", "", false))
      task.name = *name;
    parse_workload(r, root, task);
    parse_knobs(r, root, task);
    parse_constants(r, root, task);
    parse_limits(r, root, task);
    parse_patches(r, root, task);
    return task;
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << abs << ':' << e.source().begin.line << ':' << e.source().begin.column
       << ": TOML syntax error: " << e.description();
    why = os.str();
  } catch (const task_file_error& e) {
    why = e.message;
  } catch (const fs::filesystem_error& e) { // resolving a path in the file
    why = abs + ": " + e.what();
  }
  return std::nullopt;
}

} // namespace infrarsi::sim
