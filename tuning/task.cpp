#include "tuning/task.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace infrarsi::tuning {

const knob_spec* task_spec::find_knob(const std::string& knob_name) const {
  for (const auto& k : knobs)
    if (k.name == knob_name)
      return &k;
  return nullptr;
}

const patch_spec* task_spec::find_patch(const std::string& patch_name) const {
  for (const auto& p : patches)
    if (p.name == patch_name)
      return &p;
  return nullptr;
}

task_spec smoke_task(const task_spec& task) {
  task_spec small = task;
  small.workload.argv = task.smoke->argv;
  small.workload.world_size = task.smoke->world_size;
  small.contract = task.smoke->contract;
  small.smoke.reset();
  return small;
}

const std::vector<std::string>& knob_roles() {
  static const std::vector<std::string> roles = {
    "tp",         "pp",        "vpp",       "cp",
    "ep",         "dp",        "micro_batch", "grad_accum",
    "recompute",  "sequence_parallel", "zero_stage", "distributed_optimizer"};
  return roles;
}

knob_assignment task_spec::default_assignment() const {
  knob_assignment result;
  for (const auto& k : knobs)
    result.emplace(k.name, k.default_value);
  return result;
}

std::string to_string(const knob_value& value) {
  struct visitor {
    std::string operator()(std::int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const {
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof buf, v); // shortest exact round trip
      return std::string(buf, res.ptr);
    }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return v; }
  };
  return std::visit(visitor{}, value);
}

const char* to_string(knob_type type) {
  switch (type) {
    case knob_type::integer: return "int";
    case knob_type::real: return "real";
    case knob_type::boolean: return "bool";
    case knob_type::choice: return "choice";
  }
  return "?";
}

const char* to_string(launcher_kind kind) {
  switch (kind) {
    case launcher_kind::ranks: return "ranks";
    case launcher_kind::command: return "command";
    case launcher_kind::slurm: return "slurm";
    case launcher_kind::torchrun: return "torchrun";
  }
  return "?";
}

const char* to_string(loss_mode mode) {
  switch (mode) {
    case loss_mode::pointwise: return "pointwise";
    case loss_mode::window: return "window";
    case loss_mode::eval: return "eval";
  }
  return "?";
}

std::optional<loss_mode> parse_loss_mode(const std::string& name) {
  for (auto m : {loss_mode::pointwise, loss_mode::window, loss_mode::eval})
    if (name == to_string(m))
      return m;
  return std::nullopt;
}

namespace {

std::string list_text(const std::vector<knob_value>& values) {
  std::string out;
  for (const auto& v : values) {
    if (!out.empty())
      out += ", ";
    out += to_string(v);
  }
  return out;
}

bool matches_type(knob_type type, const knob_value& value) {
  switch (type) {
    case knob_type::integer: return std::holds_alternative<std::int64_t>(value);
    case knob_type::real: return std::holds_alternative<double>(value);
    case knob_type::boolean: return std::holds_alternative<bool>(value);
    case knob_type::choice: return std::holds_alternative<std::string>(value);
  }
  return false;
}

double as_double(const knob_value& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v))
    return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v))
    return *d;
  return std::nan("");
}

} // namespace

bool in_domain(const knob_spec& knob, const knob_value& value, std::string& why) {
  if (!matches_type(knob.type, value)) {
    why = std::string{"a value of type "} + to_string(knob.type);
    return false;
  }
  if (knob.type == knob_type::boolean)
    return true;
  if (!knob.values.empty()) {
    for (const auto& v : knob.values)
      if (v == value)
        return true;
    why = "one of " + list_text(knob.values);
    return false;
  }
  auto x = as_double(value);
  if ((knob.min && x < *knob.min) || (knob.max && x > *knob.max) || std::isnan(x)) {
    std::ostringstream os;
    os << "a value in [" << (knob.min ? to_string(knob_value{*knob.min}) : "-inf") << ", "
       << (knob.max ? to_string(knob_value{*knob.max}) : "inf") << "]";
    why = os.str();
    return false;
  }
  return true;
}

std::optional<knob_value> parse_knob_text(const knob_spec& knob, const std::string& text,
                                          std::string& why) {
  switch (knob.type) {
    case knob_type::integer: {
      char* end = nullptr;
      errno = 0;
      auto v = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE) {
        why = "an integer";
        return std::nullopt;
      }
      return knob_value{static_cast<std::int64_t>(v)};
    }
    case knob_type::real: {
      char* end = nullptr;
      auto v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !std::isfinite(v)) {
        why = "a finite number";
        return std::nullopt;
      }
      return knob_value{v};
    }
    case knob_type::boolean:
      if (text == "true" || text == "1" || text == "on" || text == "yes")
        return knob_value{true};
      if (text == "false" || text == "0" || text == "off" || text == "no")
        return knob_value{false};
      why = "true or false";
      return std::nullopt;
    case knob_type::choice: return knob_value{text};
  }
  why = "a known knob type";
  return std::nullopt;
}

std::optional<std::string> render_template(const std::string& tmpl,
                                           const std::map<std::string, std::string>& vars,
                                           std::string& why) {
  std::string out;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    char c = tmpl[i];
    if (c == '{' && i + 1 < tmpl.size() && tmpl[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < tmpl.size() && tmpl[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      auto close = tmpl.find('}', i + 1);
      if (close == std::string::npos) {
        why = "unclosed '{' at offset " + std::to_string(i) + " in \"" + tmpl + "\"";
        return std::nullopt;
      }
      auto name = tmpl.substr(i + 1, close - i - 1);
      auto it = vars.find(name);
      if (it == vars.end()) {
        why = "unknown placeholder {" + name + "} in \"" + tmpl + "\"";
        return std::nullopt;
      }
      out += it->second;
      i = close;
    } else if (c == '}') {
      why = "unmatched '}' at offset " + std::to_string(i) + " in \"" + tmpl + "\"";
      return std::nullopt;
    } else {
      out += c;
    }
  }
  return out;
}

std::map<std::string, std::string> template_vars(const task_spec& task,
                                                 const knob_assignment& assignment,
                                                 std::map<std::string, std::string> builtins) {
  auto vars = std::move(builtins);
  for (const auto& [name, value] : task.constants)
    vars[name] = to_string(value);
  for (const auto& [name, value] : assignment) {
    const auto* knob = task.find_knob(name);
    if (knob != nullptr && knob->type == knob_type::boolean && std::holds_alternative<bool>(value))
      vars[name] = std::get<bool>(value) ? knob->true_text : knob->false_text;
    else
      vars[name] = to_string(value);
  }
  return vars;
}

std::optional<int> world_size_of(const task_spec& task, const knob_assignment& assignment,
                                 const std::map<std::string, std::string>& builtins,
                                 std::string& why) {
  auto vars = template_vars(task, assignment, builtins);
  std::string render_why;
  auto text = render_template(task.workload.world_size, vars, render_why);
  if (!text) {
    why = "workload.world_size: " + render_why;
    return std::nullopt;
  }
  auto n = world_size_value(*text, why);
  if (!n)
    why = "workload.world_size " + why;
  return n;
}

std::optional<int> world_size_value(const std::string& text, std::string& why) {
  char* end = nullptr;
  long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < 1 || n > 4096) {
    why = "renders to '" + text + "', expected an integer in 1..4096";
    return std::nullopt;
  }
  return static_cast<int>(n);
}

bool may_be_unset(const knob_spec& knob) {
  if (knob.type != knob_type::choice)
    return false;
  for (const auto& v : knob.values)
    if (const auto* text = std::get_if<std::string>(&v); text != nullptr && *text == unset_env_value)
      return true;
  return false;
}

const knob_spec* sole_knob_of(const task_spec& task, const std::string& tmpl) {
  if (tmpl.size() < 3 || tmpl.front() != '{' || tmpl.back() != '}' || tmpl[1] == '{')
    return nullptr;
  auto name = tmpl.substr(1, tmpl.size() - 2);
  if (name.find_first_of("{}") != std::string::npos)
    return nullptr;
  return task.find_knob(name);
}

} // namespace infrarsi::tuning
