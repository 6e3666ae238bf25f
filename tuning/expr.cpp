#include "tuning/expr.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <vector>

namespace infrarsi::tuning {

struct constraint_expr::node {
  enum class kind_t { literal, name, unary, binary } kind = kind_t::literal;
  knob_value value = std::int64_t{0};
  std::string name;
  std::string op;
  /// `op` as a code, set by the parser: evaluation switches on it instead of comparing text.
  enum class op_t { none, not_, or_, and_, eq, ne, lt, le, gt, ge, add, sub, mul, div, mod };
  op_t code = op_t::none;
  /// A name's index in constraint_expr::slot_names().
  std::size_t slot = 0;
  std::shared_ptr<const node> lhs;
  std::shared_ptr<const node> rhs;
  /// Levels of the subtree (1 for a leaf; see max_expr_depth).
  std::size_t depth = 1;
};

namespace {

using node = constraint_expr::node;
using node_ptr = std::shared_ptr<const node>;

node::op_t op_code(const std::string& op) {
  using o = node::op_t;
  static const std::pair<const char*, o> codes[] = {
    {"-", o::sub},  {"!", o::not_}, {"||", o::or_}, {"&&", o::and_}, {"==", o::eq},
    {"!=", o::ne},  {"<", o::lt},   {"<=", o::le},  {">", o::gt},    {">=", o::ge},
    {"+", o::add},  {"*", o::mul},  {"/", o::div},  {"%", o::mod}};
  for (const auto& [text, code] : codes)
    if (op == text)
      return code;
  return o::none;
}

struct parser {
  const std::string& s;
  std::size_t pos = 0;
  std::string error;
  std::set<std::string>& names;
  std::vector<std::string>& slots;
  /// Parentheses and unary operators open around the current position (bounds the recursion).
  std::size_t level = 0;

  void skip() {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos])))
      ++pos;
  }
  bool eat(const char* tok) {
    skip();
    auto n = std::char_traits<char>::length(tok);
    if (s.compare(pos, n, tok) != 0)
      return false;
    // "<" must not eat the first char of "<=" etc.
    if (n == 1 && pos + 1 < s.size() && (tok[0] == '<' || tok[0] == '>' || tok[0] == '!'
                                         || tok[0] == '=')
        && s[pos + 1] == '=')
      return false;
    pos += n;
    return true;
  }
  node_ptr fail(const std::string& why) {
    if (error.empty())
      error = why + " at offset " + std::to_string(pos) + " in '" + s + "'";
    return nullptr;
  }
  node_ptr too_deep() {
    if (error.empty())
      error = "nested deeper than the limit of " + std::to_string(max_expr_depth)
              + " levels at offset " + std::to_string(pos);
    return nullptr;
  }
  node_ptr bin(std::string op, node_ptr l, node_ptr r) {
    if (!l || !r)
      return nullptr;
    auto n = std::make_shared<node>();
    n->kind = node::kind_t::binary;
    n->code = op_code(op);
    n->op = std::move(op);
    n->depth = 1 + std::max(l->depth, r->depth);
    n->lhs = std::move(l);
    n->rhs = std::move(r);
    if (n->depth > max_expr_depth)
      return too_deep();
    return n;
  }

  node_ptr parse_or() {
    auto l = parse_and();
    while (l && eat("||"))
      l = bin("||", l, parse_and());
    return l;
  }
  node_ptr parse_and() {
    auto l = parse_cmp();
    while (l && eat("&&"))
      l = bin("&&", l, parse_cmp());
    return l;
  }
  node_ptr parse_cmp() {
    auto l = parse_add();
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"})
      if (l && eat(op))
        return bin(op, l, parse_add());
    return l;
  }
  node_ptr parse_add() {
    auto l = parse_mul();
    for (;;) {
      if (l && eat("+"))
        l = bin("+", l, parse_mul());
      else if (l && eat("-"))
        l = bin("-", l, parse_mul());
      else
        return l;
    }
  }
  node_ptr parse_mul() {
    auto l = parse_unary();
    for (;;) {
      if (l && eat("*"))
        l = bin("*", l, parse_unary());
      else if (l && eat("/"))
        l = bin("/", l, parse_unary());
      else if (l && eat("%"))
        l = bin("%", l, parse_unary());
      else
        return l;
    }
  }
  node_ptr parse_unary() {
    for (const char* op : {"-", "!"}) {
      if (eat(op)) {
        if (++level >= max_expr_depth)
          return too_deep();
        auto operand = parse_unary();
        --level;
        if (!operand)
          return nullptr;
        auto n = std::make_shared<node>();
        n->kind = node::kind_t::unary;
        n->op = op;
        n->code = op_code(n->op);
        n->depth = 1 + operand->depth;
        n->lhs = operand;
        if (n->depth > max_expr_depth)
          return too_deep();
        return n;
      }
    }
    return parse_primary();
  }
  node_ptr parse_primary() {
    skip();
    if (pos >= s.size())
      return fail("unexpected end");
    if (eat("(")) {
      if (++level >= max_expr_depth)
        return too_deep();
      auto e = parse_or();
      --level;
      if (e && !eat(")"))
        return fail("expected ')'");
      if (!e)
        return e;
      if (e->depth + 1 > max_expr_depth)
        return too_deep();
      auto wrapped = std::make_shared<node>(*e); // shallow: the children are shared
      wrapped->depth = e->depth + 1;
      return wrapped;
    }
    auto n = std::make_shared<node>();
    char c = s[pos];
    if (c == '"') {
      auto close = s.find('"', pos + 1);
      if (close == std::string::npos)
        return fail("unterminated string");
      n->value = s.substr(pos + 1, close - pos - 1);
      pos = close + 1;
      return n;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      auto start = pos;
      bool is_real = false;
      while (pos < s.size()
             && (std::isdigit(static_cast<unsigned char>(s[pos])) || s[pos] == '.' || s[pos] == '_'
                 || s[pos] == 'e' || s[pos] == 'E')) {
        is_real = is_real || s[pos] == '.' || s[pos] == 'e' || s[pos] == 'E';
        ++pos;
      }
      std::string digits;
      for (auto i = start; i < pos; ++i)
        if (s[i] != '_')
          digits += s[i];
      try {
        if (is_real)
          n->value = std::stod(digits);
        else
          n->value = static_cast<std::int64_t>(std::stoll(digits));
      } catch (const std::exception&) {
        return fail("bad number '" + digits + "'");
      }
      return n;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      auto start = pos;
      while (pos < s.size() && (std::isalnum(static_cast<unsigned char>(s[pos])) || s[pos] == '_'))
        ++pos;
      auto word = s.substr(start, pos - start);
      if (word == "true" || word == "false") {
        n->value = word == "true";
        return n;
      }
      n->kind = node::kind_t::name;
      n->name = word;
      names.insert(word);
      n->slot = static_cast<std::size_t>(std::find(slots.begin(), slots.end(), word) - slots.begin());
      if (n->slot == slots.size())
        slots.push_back(word);
      return n;
    }
    return fail(std::string{"unexpected '"} + c + "'");
  }
};

struct evaluator {
  /// The variables by name, or (when `slots` is set) by slot.
  const std::map<std::string, knob_value>* vars = nullptr;
  const std::vector<const knob_value*>* slots = nullptr;
  std::string error;

  static bool is_number(const knob_value& v) {
    return std::holds_alternative<std::int64_t>(v) || std::holds_alternative<double>(v);
  }
  static double as_double(const knob_value& v) {
    return std::holds_alternative<std::int64_t>(v) ? static_cast<double>(std::get<std::int64_t>(v))
                                                   : std::get<double>(v);
  }
  static bool truthy(const knob_value& v) {
    if (const auto* b = std::get_if<bool>(&v))
      return *b;
    if (is_number(v))
      return as_double(v) != 0.0;
    return !std::get<std::string>(v).empty();
  }

  std::optional<knob_value> eval(const node& n) {
    switch (n.kind) {
      case node::kind_t::literal: return n.value;
      case node::kind_t::name: {
        const knob_value* v = nullptr;
        if (slots != nullptr)
          v = n.slot < slots->size() ? (*slots)[n.slot] : nullptr;
        else if (auto it = vars->find(n.name); it != vars->end())
          v = &it->second;
        if (v == nullptr) {
          error = "unknown name '" + n.name + "'";
          return std::nullopt;
        }
        return *v;
      }
      case node::kind_t::unary: {
        auto v = eval(*n.lhs);
        if (!v)
          return std::nullopt;
        if (n.code == node::op_t::not_)
          return knob_value{!truthy(*v)};
        if (const auto* i = std::get_if<std::int64_t>(&*v)) {
          std::int64_t neg = 0;
          if (__builtin_sub_overflow(std::int64_t{0}, *i, &neg)) {
            error = "integer overflow in -" + to_string(*v);
            return std::nullopt;
          }
          return knob_value{neg};
        }
        if (const auto* d = std::get_if<double>(&*v))
          return knob_value{-*d};
        error = "'-' needs a number";
        return std::nullopt;
      }
      case node::kind_t::binary: break;
    }
    if (n.code == node::op_t::and_ || n.code == node::op_t::or_) {
      auto l = eval(*n.lhs);
      if (!l)
        return std::nullopt;
      if (n.code == node::op_t::and_ && !truthy(*l))
        return knob_value{false};
      if (n.code == node::op_t::or_ && truthy(*l))
        return knob_value{true};
      auto r = eval(*n.rhs);
      if (!r)
        return std::nullopt;
      return knob_value{truthy(*r)};
    }
    auto l = eval(*n.lhs);
    auto r = l ? eval(*n.rhs) : std::nullopt;
    if (!l || !r)
      return std::nullopt;
    if (n.code == node::op_t::eq || n.code == node::op_t::ne) {
      bool eq;
      if (is_number(*l) && is_number(*r))
        eq = as_double(*l) == as_double(*r);
      else if (l->index() == r->index())
        eq = *l == *r;
      else {
        error = "cannot compare " + to_string(*l) + " with " + to_string(*r);
        return std::nullopt;
      }
      return knob_value{n.code == node::op_t::eq ? eq : !eq};
    }
    if (!is_number(*l) || !is_number(*r)) {
      error = "'" + n.op + "' needs numbers, got " + to_string(*l) + " and " + to_string(*r);
      return std::nullopt;
    }
    bool ints = std::holds_alternative<std::int64_t>(*l) && std::holds_alternative<std::int64_t>(*r);
    if (n.code == node::op_t::lt || n.code == node::op_t::le || n.code == node::op_t::gt
        || n.code == node::op_t::ge) {
      double a = as_double(*l), b = as_double(*r);
      bool res = n.code == node::op_t::lt   ? a < b
                 : n.code == node::op_t::le ? a <= b
                 : n.code == node::op_t::gt ? a > b
                                            : a >= b;
      return knob_value{res};
    }
    if ((n.code == node::op_t::div || n.code == node::op_t::mod) && as_double(*r) == 0.0) {
      error = "division by zero";
      return std::nullopt;
    }
    if (ints) {
      auto a = std::get<std::int64_t>(*l), b = std::get<std::int64_t>(*r);
      std::int64_t res = 0;
      bool overflow = false;
      if (n.code == node::op_t::add)
        overflow = __builtin_add_overflow(a, b, &res);
      else if (n.code == node::op_t::sub)
        overflow = __builtin_sub_overflow(a, b, &res);
      else if (n.code == node::op_t::mul)
        overflow = __builtin_mul_overflow(a, b, &res);
      else if (b == -1 && a == std::numeric_limits<std::int64_t>::min())
        overflow = n.code == node::op_t::div; // INT64_MIN % -1 is 0
      else
        res = n.code == node::op_t::div ? a / b : a % b;
      if (overflow) {
        error = "integer overflow in " + to_string(*l) + " " + n.op + " " + to_string(*r);
        return std::nullopt;
      }
      return knob_value{res};
    }
    double a = as_double(*l), b = as_double(*r);
    if (n.code == node::op_t::add)
      return knob_value{a + b};
    if (n.code == node::op_t::sub)
      return knob_value{a - b};
    if (n.code == node::op_t::mul)
      return knob_value{a * b};
    if (n.code == node::op_t::div)
      return knob_value{a / b};
    return knob_value{std::fmod(a, b)};
  }
};

} // namespace

std::optional<constraint_expr> constraint_expr::parse(const std::string& text, std::string& why) {
  if (text.size() > max_expr_length) {
    why = "expression of " + std::to_string(text.size()) + " characters is longer than the limit of "
          + std::to_string(max_expr_length);
    return std::nullopt;
  }
  constraint_expr e;
  e.text_ = text;
  parser p{text, 0, {}, e.names_, e.slots_};
  auto root = p.parse_or();
  p.skip();
  if (root && p.pos != text.size())
    root = p.fail("unexpected text");
  if (!root) {
    why = p.error;
    return std::nullopt;
  }
  e.root_ = root;
  return e;
}

std::optional<bool> constraint_expr::holds(const std::map<std::string, knob_value>& vars,
                                           std::string& why) const {
  evaluator ev{&vars, nullptr, {}};
  auto v = ev.eval(*root_);
  if (!v) {
    why = ev.error;
    return std::nullopt;
  }
  return evaluator::truthy(*v);
}

std::optional<bool> constraint_expr::holds(const std::vector<const knob_value*>& values,
                                           std::string& why) const {
  evaluator ev{nullptr, &values, {}};
  auto v = ev.eval(*root_);
  if (!v) {
    why = ev.error;
    return std::nullopt;
  }
  return evaluator::truthy(*v);
}

std::string first_violation(const std::vector<constraint_expr>& constraints,
                            const std::map<std::string, knob_value>& vars) {
  for (const auto& c : constraints) {
    std::string why;
    auto ok = c.holds(vars, why);
    if (ok && *ok)
      continue;
    std::string values;
    for (const auto& name : c.names()) {
      auto it = vars.find(name);
      values += (values.empty() ? "" : ", ") + name + "="
                + (it == vars.end() ? std::string{"?"} : to_string(it->second));
    }
    return "constraint '" + c.text() + "' " + (ok ? "is false" : "cannot be evaluated (" + why + ")")
           + " for " + values;
  }
  return {};
}

} // namespace infrarsi::tuning
