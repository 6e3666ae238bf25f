// Tests for tuning/expr.cpp: parsing, precedence, integer/real arithmetic, strings, errors.

#include "tuning/expr.hpp"

#include <limits>

#include <gtest/gtest.h>

namespace infrarsi::tuning {
namespace {

bool holds(const std::string& text, const std::map<std::string, knob_value>& vars) {
  std::string why;
  auto e = constraint_expr::parse(text, why);
  EXPECT_TRUE(e) << why;
  auto r = e->holds(vars, why);
  EXPECT_TRUE(r) << why;
  return r.value_or(false);
}

TEST(ConstraintExpr, DivisibilityOfTheGlobalBatch) {
  std::map<std::string, knob_value> v{{"global_batch", std::int64_t{16}},
                                      {"micro_batch", std::int64_t{4}},
                                      {"world_size", std::int64_t{2}}};
  EXPECT_TRUE(holds("global_batch % (micro_batch * world_size) == 0", v));
  v["micro_batch"] = std::int64_t{3};
  EXPECT_FALSE(holds("global_batch % (micro_batch * world_size) == 0", v));
  EXPECT_TRUE(holds("global_batch / micro_batch == 5", v)); // integer division truncates
}

TEST(ConstraintExpr, PrecedenceBooleansStringsAndReals) {
  std::map<std::string, knob_value> v{{"ckpt", true},
                                      {"mb", std::int64_t{8}},
                                      {"attention", std::string{"naive"}},
                                      {"scale", 0.5}};
  EXPECT_TRUE(holds("ckpt || mb <= 4", v));
  EXPECT_FALSE(holds("!ckpt && mb <= 4 || mb > 100", v));
  EXPECT_TRUE(holds("1 + 2 * 3 == 7", v));
  EXPECT_TRUE(holds("-mb + 10 == 2", v));
  EXPECT_TRUE(holds("attention != \"fused\"", v));
  EXPECT_TRUE(holds("scale * 4 == 2", v));
  EXPECT_TRUE(holds("mb >= 8 && mb < 9", v));
}

TEST(ConstraintExpr, SyntaxAndEvaluationErrorsSayWhere) {
  std::string why;
  EXPECT_FALSE(constraint_expr::parse("mb % (tp * dp", why));
  EXPECT_NE(why.find("expected ')'"), std::string::npos) << why;
  EXPECT_FALSE(constraint_expr::parse("mb >> 2", why));
  EXPECT_FALSE(constraint_expr::parse("", why));
  auto e = constraint_expr::parse("mb % tp == 0", why);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->names(), (std::set<std::string>{"mb", "tp"}));
  auto r = e->holds({{"mb", std::int64_t{4}}, {"tp", std::int64_t{0}}}, why);
  EXPECT_FALSE(r);
  EXPECT_EQ(why, "division by zero");
  r = e->holds({{"mb", std::int64_t{4}}}, why);
  EXPECT_FALSE(r);
  EXPECT_EQ(why, "unknown name 'tp'");
}

TEST(ConstraintExpr, LengthAndDepthAreLimitedWithoutDeepRecursion) {
  std::string why;
  // Ten thousand nested parentheses (issue 20: a segfault by unbounded recursion on main).
  auto deep = std::string(10000, '(') + "a" + std::string(10000, ')');
  EXPECT_FALSE(constraint_expr::parse(deep, why));
  EXPECT_EQ(why, "expression of 20001 characters is longer than the limit of 4096");
  // Nesting within the length limit: parentheses, unary operators and operator chains.
  auto parens = [](std::size_t n) { return std::string(n, '(') + "a" + std::string(n, ')'); };
  EXPECT_TRUE(constraint_expr::parse(parens(max_expr_depth - 1), why)) << why;
  EXPECT_FALSE(constraint_expr::parse(parens(max_expr_depth), why));
  EXPECT_EQ(why.rfind("nested deeper than the limit of 64 levels at offset", 0), 0u) << why;
  EXPECT_FALSE(constraint_expr::parse(std::string(2000, '-') + "a", why));
  EXPECT_EQ(why.rfind("nested deeper than the limit of 64 levels", 0), 0u) << why;
  std::string chain = "a";
  for (int i = 0; i < 1000; ++i)
    chain += " + a";
  EXPECT_FALSE(constraint_expr::parse(chain, why));
  EXPECT_EQ(why.rfind("nested deeper than the limit of 64 levels", 0), 0u) << why;
  // A comparison of a chain just within the limit parses and evaluates: 62 additions are 63
  // levels, the comparison the 64th.
  chain = "a";
  for (int i = 0; i < 62; ++i)
    chain += " + a";
  EXPECT_FALSE(constraint_expr::parse(chain + " + a == 64", why)); // 65 levels
  auto e = constraint_expr::parse(chain + " == 64", why);
  ASSERT_TRUE(e) << why;
  EXPECT_EQ(e->holds({{"a", std::int64_t{1}}}, why), std::optional<bool>{false}) << why;
  ASSERT_TRUE(e = constraint_expr::parse(chain + " == 630", why)) << why;
  EXPECT_EQ(e->holds({{"a", std::int64_t{10}}}, why), std::optional<bool>{true}) << why;
}

TEST(ConstraintExpr, IntegerOverflowIsAnEvaluationErrorNotWrapped) {
  std::string why;
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  const std::int64_t small = std::numeric_limits<std::int64_t>::min();
  for (const char* text : {"a * a > 0", "a + a > 0", "-b > 0", "b - a < 0", "b / c < 0"}) {
    auto e = constraint_expr::parse(text, why);
    ASSERT_TRUE(e) << why;
    auto r = e->holds({{"a", big}, {"b", small}, {"c", std::int64_t{-1}}}, why);
    EXPECT_FALSE(r) << text;
    EXPECT_EQ(why.rfind("integer overflow in ", 0), 0u) << text << ": " << why;
  }
  auto e = constraint_expr::parse("b % c == 0", why);
  ASSERT_TRUE(e) << why;
  EXPECT_EQ(e->holds({{"b", small}, {"c", std::int64_t{-1}}}, why), std::optional<bool>{true});
}

// The planners evaluate constraints by slot (values in slot_names() order, no name looked up):
// the same truth values and the same errors as by name.
TEST(ConstraintExpr, SlotsGiveTheAnswersOfNames) {
  std::string why;
  auto e = constraint_expr::parse("gb % (mb * ws) == 0 && (ws == 1 || mb <= 4) && gb >= mb", why);
  ASSERT_TRUE(e) << why;
  EXPECT_EQ(e->slot_names(), (std::vector<std::string>{"gb", "mb", "ws"})); // first occurrence
  int agree = 0;
  for (std::int64_t gb : {8, 12, 16, 3})
    for (std::int64_t mb : {1, 2, 3, 8})
      for (std::int64_t ws : {1, 2, 0}) {
        std::map<std::string, knob_value> vars{{"gb", gb}, {"mb", mb}, {"ws", ws}};
        knob_value g{gb}, m{mb}, w{ws};
        std::string why_names, why_slots;
        auto by_name = e->holds(vars, why_names);
        auto by_slot = e->holds(std::vector<const knob_value*>{&g, &m, &w}, why_slots);
        ASSERT_EQ(by_name, by_slot) << gb << " " << mb << " " << ws;
        if (!by_name) {
          EXPECT_EQ(why_slots, why_names);
        }
        ++agree;
      }
  EXPECT_EQ(agree, 48);
  // ws = 0: division by zero, by name and by slot.
  knob_value g{std::int64_t{8}}, m{std::int64_t{2}}, zero{std::int64_t{0}};
  EXPECT_FALSE(e->holds(std::vector<const knob_value*>{&g, &m, &zero}, why));
  EXPECT_EQ(why, "division by zero");
  // A slot without a value (nullptr) is the unknown name; too few values are an error, not a read
  // past the end.
  EXPECT_FALSE(e->holds(std::vector<const knob_value*>{&g, nullptr, &m}, why));
  EXPECT_EQ(why, "unknown name 'mb'");
  EXPECT_FALSE(e->holds(std::vector<const knob_value*>{&g}, why));
  EXPECT_EQ(why, "unknown name 'mb'");
  // Types mismatch the same way.
  knob_value text{std::string{"x"}}, one{std::int64_t{1}};
  std::string why_name;
  auto by_name = e->holds({{"gb", std::string{"x"}}, {"mb", std::int64_t{2}}, {"ws", std::int64_t{1}}},
                          why_name);
  EXPECT_FALSE(by_name);
  EXPECT_FALSE(e->holds(std::vector<const knob_value*>{&text, &m, &one}, why));
  EXPECT_EQ(why, why_name);
}

TEST(ConstraintExpr, FirstViolationNamesConstraintAndValues) {
  std::string why;
  std::vector<constraint_expr> cs{*constraint_expr::parse("layers % pp == 0", why),
                                  *constraint_expr::parse("heads % tp == 0", why)};
  std::map<std::string, knob_value> v{{"layers", std::int64_t{32}},
                                      {"pp", std::int64_t{4}},
                                      {"heads", std::int64_t{12}},
                                      {"tp", std::int64_t{8}}};
  EXPECT_EQ(first_violation(cs, v), "constraint 'heads % tp == 0' is false for heads=12, tp=8");
  v["tp"] = std::int64_t{4};
  EXPECT_EQ(first_violation(cs, v), "");
}

} // namespace
} // namespace infrarsi::tuning
