#pragma once
/// @file expr.hpp
/// Constraint expressions between knobs, e.g. `global_batch % (micro_batch * world_size) == 0`
/// or `activation_checkpointing || micro_batch <= 4`. Checked before any launch; a violation is
/// never launched and is reported with the values involved.
///
/// Grammar (C precedence): || && == != < <= > >= + - * / % unary - ! ( ) ; literals: integers,
/// decimals, true, false, "strings"; names: knobs and task constants. Integer arithmetic when
/// both operands are integers (`/` and `%` truncate; division by zero is a violation with that
/// reason), otherwise double. Comparisons of strings with == and != only. Integer arithmetic
/// that overflows int64 is an evaluation error ("integer overflow"), never wrapped.
///
/// Limits (hostile task files): an expression is at most `max_expr_length` characters and its
/// syntax tree at most `max_expr_depth` levels deep (parentheses, unary operators and chains of
/// binary operators all count), so parsing, evaluation and destruction recurse a bounded depth.
/// Beyond either, parse fails with a message naming the limit.

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tuning/task.hpp"

namespace infrarsi::tuning {

/// Longest constraint expression parse accepts, characters (bytes).
inline constexpr std::size_t max_expr_length = 4096;
/// Deepest nesting parse accepts, levels: a name or literal is 1 level deep, an operator one
/// more than its deepest operand, a parenthesis one more than its contents (`a + b * c` is 3
/// deep, `-(a)` is 3, ten thousand nested parentheses are 10,001).
inline constexpr std::size_t max_expr_depth = 64;

/// A parsed expression (immutable, cheap to copy).
class constraint_expr {
public:
  /// Parses `text`. Returns nullopt and sets `why` (with the offset) on a syntax error, or
  /// naming the limit when `text` is longer than max_expr_length or nests deeper than
  /// max_expr_depth. Cost: O(length); recursion depth O(max_expr_depth).
  static std::optional<constraint_expr> parse(const std::string& text, std::string& why);

  /// Names the expression refers to.
  [[nodiscard]] const std::set<std::string>& names() const noexcept { return names_; }

  /// The source text.
  [[nodiscard]] const std::string& text() const noexcept { return text_; }

  /// Evaluates with `vars`. Returns the truth value; nullopt and `why` when it cannot be
  /// evaluated (unknown name, type mismatch, division by zero).
  std::optional<bool> holds(const std::map<std::string, knob_value>& vars, std::string& why) const;

  /// The names in slot order (first occurrence in the text): holds(values) takes their values
  /// in this order.
  [[nodiscard]] const std::vector<std::string>& slot_names() const noexcept { return slots_; }
  /// As holds(vars) with the names' values given by slot (`values[i]` the value of
  /// slot_names()[i], nullptr for an unknown name): no name is looked up (the planners check
  /// thousands of configurations per proposal).
  std::optional<bool> holds(const std::vector<const knob_value*>& values, std::string& why) const;

  struct node;

private:
  std::shared_ptr<const node> root_;
  std::set<std::string> names_;
  std::vector<std::string> slots_;
  std::string text_;
};

/// Evaluates every constraint of `constraints` on `vars`; returns "" if all hold, else a message
/// naming the first violated constraint and the values of the names it uses, e.g.
/// "constraint 'global_batch % (micro_batch * world_size) == 0' is false for global_batch=16,
/// micro_batch=3, world_size=2".
std::string first_violation(const std::vector<constraint_expr>& constraints,
                            const std::map<std::string, knob_value>& vars);

} // namespace infrarsi::tuning
