// Issue 19 item 1: the loss invariants (contract.loss_mode pointwise, window, eval) of
// tuning/contract_check.cpp on a stochastic fake workload whose honest batch splits change every
// per-step loss: every honest split passes window and eval, every planted cheat (drift, skipped
// backward, frozen optimizer) fails each mode, and pointwise rejects the honest splits as the
// issue describes.
//
// The fake is the C++ twin of tests/data/workloads/stochastic_train.py (the end-to-end test runs
// that one through the launcher): linear regression by SGD on a fixed synthetic data set; each
// step takes the same global batch of samples (tokens_per_sample (x, y) pairs each, a sample's
// loss is the mean over its tokens), accumulated over global_batch / micro_batch micro-batches in
// an order shuffled with a seed of the step and the split, and reports the loss of its last
// micro-batch. The gradient is the mean over the whole batch, so honest splits train the same
// parameters (to rounding) and report the same eval loss on the fixed held-out set.

#include "tuning/contract_check.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace infrarsi::tuning {
namespace {

constexpr std::uint32_t steps = 40;
constexpr int global_batch = 32;
constexpr int tokens_per_sample = 32;
constexpr int dim = 4;
constexpr int eval_every = 5;
constexpr int baseline_micro_batch = 8;

enum class cheat { none, drift, skip_backward, frozen_optimizer };

/// Uniform and standard normal draws from a 64-bit Mersenne twister (Box-Muller), so the data
/// do not depend on the standard library's distributions.
struct rng {
  std::mt19937_64 gen;
  explicit rng(std::uint64_t seed) : gen(seed) {}
  double uniform() { return (static_cast<double>(gen() >> 11) + 0.5) / 9007199254740992.0; }
  double normal() {
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
  }
};

struct token {
  std::array<double, dim> x;
  double y;
};
using sample = std::vector<token>;

std::vector<sample> make_samples(rng& r, const std::array<double, dim>& w_true, std::size_t n) {
  std::vector<sample> out(n);
  for (auto& s : out)
    for (int t = 0; t < tokens_per_sample; ++t) {
      token k{};
      double y = 0;
      for (int i = 0; i < dim; ++i) {
        k.x[i] = r.normal();
        y += w_true[i] * k.x[i];
      }
      k.y = y + 0.3 * r.normal();
      s.push_back(k);
    }
  return out;
}

/// The data set: the same for every run (fixed seeds).
struct data_set {
  std::vector<sample> train;
  std::vector<sample> held_out;
  data_set() {
    rng r{20261201};
    std::array<double, dim> w_true{};
    for (auto& w : w_true)
      w = -2.0 + 4.0 * r.uniform();
    train = make_samples(r, w_true, std::size_t{steps} * global_batch);
    rng e{7};
    held_out = make_samples(e, w_true, 64);
  }
};

const data_set& data() {
  static const data_set d;
  return d;
}

/// Sum over `batch` of each sample's mean token loss 0.5 (w.x - y)^2; adds the gradient to `grad`.
double loss_of(const std::array<double, dim>& w, const std::vector<const sample*>& batch,
               std::array<double, dim>* grad) {
  double loss = 0;
  for (const auto* s : batch)
    for (const auto& k : *s) {
      double r = -k.y;
      for (int i = 0; i < dim; ++i)
        r += w[i] * k.x[i];
      loss += 0.5 * r * r / tokens_per_sample;
      if (grad != nullptr)
        for (int i = 0; i < dim; ++i)
          (*grad)[i] += r * k.x[i] / tokens_per_sample;
    }
  return loss;
}

/// One trial of the fake workload with micro-batches of `micro_batch` samples.
trial_record fake_run(int micro_batch, cheat c = cheat::none) {
  const auto& d = data();
  trial_record t;
  t.finished = true;
  t.outcome = trial_outcome::ok;
  t.wall_time_s = 10.0;
  std::array<double, dim> w{};
  double lr = 0.05 * (c == cheat::drift ? 0.6 : 1.0);
  int accum = global_batch / micro_batch;
  for (std::uint32_t step = 0; step < steps; ++step) {
    std::vector<int> order(global_batch);
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 shuffle{step * 1000003ULL + static_cast<std::uint64_t>(micro_batch)};
    for (int i = global_batch - 1; i > 0; --i) // Fisher-Yates with our own draws
      std::swap(order[i], order[shuffle() % static_cast<std::uint64_t>(i + 1)]);
    std::array<double, dim> grad{};
    double last = 0;
    for (int k = 0; k < accum; ++k) {
      std::vector<const sample*> micro;
      for (int j = k * micro_batch; j < (k + 1) * micro_batch; ++j)
        micro.push_back(&d.train[step * global_batch + order[j]]);
      std::array<double, dim> g{};
      last = loss_of(w, micro, c == cheat::skip_backward ? nullptr : &g) / micro_batch;
      for (int i = 0; i < dim; ++i)
        grad[i] += g[i] / global_batch;
    }
    if (c != cheat::frozen_optimizer || step < 5) // frozen after the first 5 steps
      for (int i = 0; i < dim; ++i)
        w[i] -= lr * grad[i];
    step_point p{step, last, 1024, 0.01};
    if ((step + 1) % eval_every == 0 || step == steps - 1) {
      std::vector<const sample*> all;
      for (const auto& s : d.held_out)
        all.push_back(&s);
      p.eval_loss = loss_of(w, all, nullptr) / static_cast<double>(all.size());
    }
    t.steps.push_back(p);
  }
  return t;
}

contract_spec contract_for(loss_mode mode) {
  contract_spec c;
  c.steps = steps;
  c.tokens_per_step = 1024;
  c.timed_first = 5;
  c.timed_last = steps - 1;
  c.simulated_time = true; // the fake's step times are not measured here
  c.loss_mode = mode;
  if (mode == loss_mode::window)
    c.loss_window = 10;
  return c;
}

/// The doctor's three bit-identical baselines, as the issue saw them.
std::vector<trial_record> baselines() {
  auto b = fake_run(baseline_micro_batch);
  return {b, b, b};
}

std::vector<std::string> codes(const std::vector<std::string>& violations) {
  std::vector<std::string> out;
  for (const auto& v : violations)
    out.push_back(violation_code(v));
  return out;
}

const std::vector<int> honest_splits = {32, 16, 4, 2, 1};

TEST(ContractCheckLossModes, HonestSplitsChangeEveryPerStepLossButNotTheWorkOrTheEvalLoss) {
  auto base = fake_run(baseline_micro_batch);
  for (int mb : honest_splits) {
    SCOPED_TRACE(mb);
    auto t = fake_run(mb);
    ASSERT_EQ(t.steps.size(), base.steps.size());
    double max_rel = 0;
    for (std::size_t i = 0; i < t.steps.size(); ++i)
      max_rel = std::max(max_rel, std::abs(t.steps[i].loss / base.steps[i].loss - 1.0));
    EXPECT_GT(max_rel, 0.05); // another micro-batch's loss: far beyond rtol 1e-4
    std::size_t evals = 0;
    for (std::size_t i = 0; i < t.steps.size(); ++i)
      if (base.steps[i].eval_loss) {
        ++evals;
        ASSERT_TRUE(t.steps[i].eval_loss.has_value());
        EXPECT_NEAR(*t.steps[i].eval_loss, *base.steps[i].eval_loss,
                    1e-12 * *base.steps[i].eval_loss);
      }
    EXPECT_EQ(evals, 8u); // steps 4, 9, ..., 39
  }
}

TEST(ContractCheckLossModes, PointwiseRejectsHonestSplitsAsTheIssueDescribes) {
  auto c = contract_for(loss_mode::pointwise);
  auto ref = make_loss_reference(c, baselines());
  EXPECT_TRUE(ref.windows.empty());
  EXPECT_TRUE(ref.eval_loss.empty());
  // Bit-identical repeats: a spread of ~0 (the rounding of their mean), the tolerance rtol x |ref|.
  for (const auto& [step, spread] : ref.spread)
    EXPECT_LE(spread, 1e-15 * ref.loss.at(step)) << step;
  EXPECT_TRUE(check_contract(c, ref, fake_run(baseline_micro_batch)).empty());
  for (int mb : honest_splits) {
    SCOPED_TRACE(mb);
    auto v = check_contract(c, ref, fake_run(mb));
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].rfind("loss_drift: step 0 loss ", 0), 0u) << v[0];
  }
}

TEST(ContractCheckLossModes, WindowReferenceHoldsTheBaselinesWindowStatistics) {
  auto c = contract_for(loss_mode::window);
  auto b = fake_run(baseline_micro_batch);
  auto ref = make_loss_reference(c, {b, b, b});
  ASSERT_EQ(ref.windows.size(), 4u);
  EXPECT_EQ(ref.windows[0].first, 0u);
  EXPECT_EQ(ref.windows[0].last, 9u);
  EXPECT_EQ(ref.windows[3].first, 30u);
  EXPECT_EQ(ref.windows[3].last, 39u);
  auto w0 = window_of(b.steps, 0, 9);
  EXPECT_EQ(w0.n, 10u);
  EXPECT_DOUBLE_EQ(ref.windows[0].mean, w0.mean);
  EXPECT_DOUBLE_EQ(ref.windows[0].within_var, w0.variance);
  EXPECT_LE(ref.windows[0].between_var, 1e-30); // identical repeats: rounding only
  EXPECT_EQ(ref.windows[0].runs, 3u);
  // The loss falls: each window's mean below the one before.
  for (std::size_t k = 1; k < ref.windows.size(); ++k)
    EXPECT_LT(ref.windows[k].mean, ref.windows[k - 1].mean) << k;
  // Two different baselines: their window means differ, so between_var is their sample variance.
  auto other = fake_run(2);
  auto two = make_loss_reference(c, {b, other});
  double m1 = window_of(b.steps, 10, 19).mean;
  double m2 = window_of(other.steps, 10, 19).mean;
  EXPECT_NEAR(two.windows[1].between_var, (m1 - m2) * (m1 - m2) / 2.0, 1e-15);
  EXPECT_NEAR(two.windows[1].mean, (m1 + m2) / 2.0, 1e-15);
}

TEST(ContractCheckLossModes, WindowPassesEveryHonestSplit) {
  auto c = contract_for(loss_mode::window);
  auto ref = make_loss_reference(c, baselines());
  ASSERT_EQ(ref.windows.size(), 4u);
  for (int mb : honest_splits) {
    SCOPED_TRACE(mb);
    auto t = fake_run(mb);
    EXPECT_TRUE(check_contract(c, ref, t).empty()) << ::testing::PrintToString(check_contract(c, ref, t));
    // With margin: every window's difference is under 3 of the 4 standard errors allowed.
    for (const auto& w : ref.windows) {
      auto s = window_of(t.steps, w.first, w.last);
      double tol = window_tolerance(c, w, s.variance, s.n);
      EXPECT_LT(std::abs(s.mean - w.mean), 0.75 * tol) << w.first << ".." << w.last;
    }
  }
}

TEST(ContractCheckLossModes, WindowCatchesEveryPlantedCheatOnEverySplit) {
  auto c = contract_for(loss_mode::window);
  auto ref = make_loss_reference(c, baselines());
  for (int mb : {baseline_micro_batch, 32, 2, 1}) {
    SCOPED_TRACE(mb);
    auto drift = codes(check_contract(c, ref, fake_run(mb, cheat::drift)));
    EXPECT_EQ(drift, std::vector<std::string>{"loss_drift"});
    auto skipped = codes(check_contract(c, ref, fake_run(mb, cheat::skip_backward)));
    EXPECT_EQ(skipped, (std::vector<std::string>{"loss_not_falling", "loss_drift"}));
    auto frozen = codes(check_contract(c, ref, fake_run(mb, cheat::frozen_optimizer)));
    EXPECT_NE(std::find(frozen.begin(), frozen.end(), "loss_drift"), frozen.end())
      << ::testing::PrintToString(check_contract(c, ref, fake_run(mb, cheat::frozen_optimizer)));
  }
  auto v = check_contract(c, ref, fake_run(baseline_micro_batch, cheat::drift));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rfind("loss_drift: steps ", 0), 0u) << v[0];
  EXPECT_NE(v[0].find("4 x the standard error of the window means"), std::string::npos) << v[0];
}

TEST(ContractCheckLossModes, WindowToleranceFormula) {
  contract_spec c;
  c.loss_atol = 1e-6;
  c.loss_rtol = 1e-4;
  loss_window_reference w;
  w.mean = 2.0;
  w.within_var = 0.04;
  w.between_var = 0.0009;
  w.runs = 3;
  // se^2 = (0.05 + 0.04) / 10 + 0.0009 x (1 + 1/3) = 0.009 + 0.0012 = 0.0102
  EXPECT_NEAR(window_tolerance(c, w, 0.05, 10), 4.0 * std::sqrt(0.0102), 1e-12);
  // The floor: bit-deterministic constant loss.
  loss_window_reference flat;
  flat.mean = 3.0;
  flat.runs = 1;
  EXPECT_DOUBLE_EQ(window_tolerance(c, flat, 0.0, 10), 3e-4);
  // Windows: the last one takes the steps that do not fill one; fewer than n steps: one window.
  using windows = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
  EXPECT_EQ(loss_windows(10, 44), (windows{{0, 9}, {10, 19}, {20, 29}, {30, 44}}));
  EXPECT_EQ(loss_windows(10, 5), (windows{{0, 5}}));
  EXPECT_TRUE(loss_windows(1, 5).empty());
  // The successive-difference variance: 1, 3, 2 -> ((2)^2 + (-1)^2) / (2 x 2) = 1.25.
  std::vector<step_point> s{{0, 1.0, 0, 0.1}, {1, 3.0, 0, 0.1}, {2, 2.0, 0, 0.1}};
  auto st = window_of(s, 0, 2);
  EXPECT_EQ(st.n, 3u);
  EXPECT_DOUBLE_EQ(st.mean, 2.0);
  EXPECT_DOUBLE_EQ(st.variance, 1.25);
}

TEST(ContractCheckLossModes, WindowMissingStepsAndNoWholeBaselineWindowAreViolations) {
  auto c = contract_for(loss_mode::window);
  auto ref = make_loss_reference(c, baselines());
  auto t = fake_run(4);
  t.steps[12].loss = std::nan("");
  auto v = check_contract(c, ref, t);
  ASSERT_EQ(codes(v), (std::vector<std::string>{"loss_non_finite", "loss_drift"}));
  EXPECT_EQ(v[1], "loss_drift: steps 10..19: 9 of 10 steps reported a finite loss");
  // A calibrated run whose baselines reported no whole window cannot pass silently.
  loss_reference no_windows = make_loss_reference(baselines());
  v = check_contract(c, no_windows, fake_run(4));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], "loss_drift: no baseline reported a whole window of contract.loss_window = 10 steps");
}

TEST(ContractCheckLossModes, EvalPassesEveryHonestSplitAndCatchesEveryCheat) {
  auto c = contract_for(loss_mode::eval);
  auto ref = make_loss_reference(c, baselines());
  ASSERT_EQ(ref.eval_loss.size(), 8u);
  EXPECT_EQ(ref.eval_loss.begin()->first, 4u);
  EXPECT_EQ(ref.eval_loss.rbegin()->first, 39u);
  for (int mb : honest_splits) {
    SCOPED_TRACE(mb);
    EXPECT_TRUE(check_contract(c, ref, fake_run(mb)).empty());
  }
  for (int mb : {baseline_micro_batch, 32, 1}) {
    SCOPED_TRACE(mb);
    EXPECT_EQ(codes(check_contract(c, ref, fake_run(mb, cheat::drift))),
              std::vector<std::string>{"loss_drift"});
    EXPECT_EQ(codes(check_contract(c, ref, fake_run(mb, cheat::skip_backward))),
              (std::vector<std::string>{"loss_not_falling", "loss_drift"}));
    auto frozen = codes(check_contract(c, ref, fake_run(mb, cheat::frozen_optimizer)));
    EXPECT_NE(std::find(frozen.begin(), frozen.end(), "loss_drift"), frozen.end())
      << ::testing::PrintToString(check_contract(c, ref, fake_run(mb, cheat::frozen_optimizer)));
  }
  auto v = check_contract(c, ref, fake_run(baseline_micro_batch, cheat::drift));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rfind("loss_drift: step 4 eval loss ", 0), 0u) << v[0];
}

TEST(ContractCheckLossModes, EvalStepsMissingNonFiniteOrWithoutReferenceAreViolations) {
  auto c = contract_for(loss_mode::eval);
  c.eval_steps = {9, 19, 39};
  auto ref = make_loss_reference(c, baselines());
  ASSERT_EQ(ref.eval_loss.size(), 3u); // only the declared steps
  EXPECT_TRUE(check_contract(c, ref, fake_run(2)).empty());
  auto t = fake_run(2);
  t.steps[19].eval_loss.reset();
  EXPECT_EQ(check_contract(c, ref, t),
            std::vector<std::string>{"loss_drift: eval step 19 reported no eval loss"});
  t = fake_run(2);
  t.steps[39].eval_loss = std::numeric_limits<double>::infinity();
  EXPECT_EQ(codes(check_contract(c, ref, t)), std::vector<std::string>{"loss_non_finite"});
  EXPECT_EQ(check_contract(c, ref, t)[0], "loss_non_finite: step 39 reported an eval loss of inf");
  // A declared step the baselines did not evaluate has no reference: never a silent pass.
  c.eval_steps = {9, 20};
  ref = make_loss_reference(c, baselines());
  EXPECT_EQ(check_contract(c, ref, fake_run(2)),
            std::vector<std::string>{
              "loss_drift: eval step 20 has no reference (no baseline reported a finite eval "
              "loss there)"});
  // Baselines that report no eval loss at all: every trial is a violation, not a pass.
  c.eval_steps.clear();
  auto silent = fake_run(baseline_micro_batch);
  for (auto& s : silent.steps)
    s.eval_loss.reset();
  ref = make_loss_reference(c, {silent, silent});
  EXPECT_TRUE(ref.eval_loss.empty());
  auto v = check_contract(c, ref, fake_run(2));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rfind("loss_drift: the baselines reported no eval loss", 0), 0u) << v[0];
}

// The early stop (tuning::early_violation) in every mode: it never stops an honest split, it
// stops every planted drift before the trial's end, and a trial it stops fails check_contract
// with the same first loss violation.
TEST(ContractCheckLossModes, EarlyStopCatchesEveryDriftBeforeTheEndAndNeverStopsAnHonestSplit) {
  for (auto mode : {loss_mode::pointwise, loss_mode::window, loss_mode::eval}) {
    SCOPED_TRACE(to_string(mode));
    auto c = contract_for(mode);
    auto ref = make_loss_reference(c, baselines());
    if (mode != loss_mode::pointwise) // pointwise rejects the honest splits (test above)
      for (int mb : honest_splits) {
        SCOPED_TRACE(mb);
        EXPECT_FALSE(early_violation(c, ref, fake_run(mb).steps).has_value());
      }
    for (int mb : {baseline_micro_batch, 32, 1}) {
      SCOPED_TRACE(mb);
      auto t = fake_run(mb, cheat::drift);
      // Step by step, as the node-runner reads them.
      std::vector<step_point> seen;
      std::optional<std::string> stop;
      for (const auto& s : t.steps) {
        seen.push_back(s);
        stop = early_violation(c, ref, seen, seen.size() - 1);
        if (stop)
          break;
      }
      ASSERT_TRUE(stop.has_value());
      EXPECT_EQ(violation_code(*stop), "loss_drift") << *stop;
      EXPECT_LT(seen.back().step, steps - 1) << *stop; // before the end
      // The whole trial fails check_contract with the same evidence.
      auto full = check_contract(c, ref, t);
      ASSERT_FALSE(full.empty());
      EXPECT_NE(std::find(full.begin(), full.end(), *stop), full.end())
        << *stop << " vs " << ::testing::PrintToString(full);
    }
  }
  // The window mode judges a window only once its last step is read: the window that proves the
  // drift in the finished trial proves it at its last step, and not one step before.
  auto c = contract_for(loss_mode::window);
  auto ref = make_loss_reference(c, baselines());
  auto t = fake_run(baseline_micro_batch, cheat::drift);
  auto full = check_contract(c, ref, t);
  ASSERT_EQ(full.size(), 1u);
  const loss_window_reference* caught = nullptr;
  for (const auto& w : ref.windows)
    if (full[0].rfind("loss_drift: steps " + std::to_string(w.first) + ".." +
                        std::to_string(w.last) + " ",
                      0) == 0)
      caught = &w;
  ASSERT_NE(caught, nullptr) << full[0];
  std::vector<step_point> before(t.steps.begin(), t.steps.begin() + caught->last);
  EXPECT_FALSE(early_violation(c, ref, before).has_value());
  std::vector<step_point> at(t.steps.begin(), t.steps.begin() + caught->last + 1);
  auto v = early_violation(c, ref, at, at.size() - 1);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, full[0]);
}

} // namespace
} // namespace infrarsi::tuning
