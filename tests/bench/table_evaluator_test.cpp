// The real-table benchmark's evaluator (bench/table_evaluator.hpp) on its committed tables, and
// random search's closed form against enumeration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "adapters/task_file.hpp"
#include "bench/run_driver.hpp"
#include "bench/table_evaluator.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/planner.hpp"

namespace infrarsi::bench {
namespace {

std::unique_ptr<table_evaluator> load(const std::string& name) {
  auto t = adapters::load_task_file(std::string{INFRARSI_SOURCE_DIR} + "/bench/tables/tasks/" +
                                    name + ".toml");
  EXPECT_TRUE(static_cast<bool>(t)) << name;
  if (!t)
    return nullptr;
  std::string why;
  auto ev = table_evaluator::create(*t, why);
  EXPECT_NE(ev, nullptr) << why;
  return ev;
}

tuning::configuration config(std::int64_t tp, std::int64_t pp, std::int64_t mb) {
  tuning::configuration c;
  c.knobs = {{"tp", tp}, {"pp", pp}, {"micro_batch", mb}};
  return c;
}

TEST(RandomExpectedBest, MatchesEnumerationOfEveryDraw) {
  const std::vector<double> f = {0.5, 0.9, 0.7, 0.7, 1.0, 0.6, 0.8};
  const std::size_t m = f.size();
  for (std::size_t k = 1; k <= m + 1; ++k) {
    // Every k-subset, by bit mask.
    double sum = 0;
    std::size_t n = 0;
    for (unsigned mask = 0; mask < (1u << m); ++mask) {
      if (static_cast<std::size_t>(__builtin_popcount(mask)) != std::min(k, m))
        continue;
      double best = 0;
      for (std::size_t i = 0; i < m; ++i)
        if (mask & (1u << i))
          best = std::max(best, f[i]);
      sum += best;
      ++n;
    }
    EXPECT_NEAR(random_expected_best(f, k), sum / static_cast<double>(n), 1e-12) << "k " << k;
  }
  EXPECT_EQ(random_expected_best({}, 3), 0.0);
}

TEST(Spearman, RanksWithTies) {
  EXPECT_NEAR(*spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0, 1e-12);
  EXPECT_NEAR(*spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0, 1e-12);
  EXPECT_FALSE(spearman({1, 2}, {1, 2}).has_value());
  EXPECT_FALSE(spearman({1, 1, 1}, {1, 2, 3}).has_value());
  // Ties take their average rank: x ranks 1.5, 1.5, 3, 4.
  EXPECT_NEAR(*spearman({1, 1, 2, 3}, {1, 2, 3, 4}), 0.9486832980505138, 1e-12);
}

TEST(TableEvaluator, ReplaysTheAmpTable) {
  auto ev = load("table-amp-gpt2-350m-16xT4");
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(ev->legal().size(), 53u); // every layout of AMP's space
  EXPECT_EQ(ev->recorded(), 52u);     // one row is "missing"
  EXPECT_DOUBLE_EQ(ev->baseline_true_step_time(), 1.32);
  EXPECT_DOUBLE_EQ(ev->optimum_step_time(), 1.2);
  EXPECT_EQ(ev->optimum_description(), "pp 1->4");

  ev->begin_run(7);
  // An ok row: its step time with 1 % noise, the same for the same (seed, trial, attempt).
  auto ok = ev->measure(config(1, 4, 1), 5, 0, "explore");
  EXPECT_EQ(ok.outcome, tuning::trial_outcome::ok);
  EXPECT_TRUE(ok.usable());
  EXPECT_NEAR(ok.timed_step_time_s, 1.2, 0.06);
  EXPECT_EQ(ok.steps.size(), 10u);
  EXPECT_DOUBLE_EQ(ok.device_seconds, ok.timed_step_time_s * 10 * 16);
  EXPECT_DOUBLE_EQ(ev->measure(config(1, 4, 1), 5, 0, "explore").timed_step_time_s,
                   ok.timed_step_time_s);
  EXPECT_NE(ev->measure(config(1, 4, 1), 6, 0, "explore").timed_step_time_s,
            ok.timed_step_time_s);
  // Every replayed trial keeps the contract against the baseline's loss.
  auto base = ev->measure(config(1, 1, 1), 1, 0, "baseline");
  auto ref = tuning::make_loss_reference({base});
  EXPECT_TRUE(tuning::check_contract(ev->task().contract, ref, ok).empty());
  // A failed row: OOM, nothing measured, a 60 s launch on every GPU.
  auto oom = ev->measure(config(1, 1, 2), 2, 0, "explore");
  EXPECT_EQ(oom.outcome, tuning::trial_outcome::oom);
  EXPECT_EQ(oom.peak_memory_bytes, 0u);
  EXPECT_EQ(oom.memory, tuning::memory_source::unobserved);
  EXPECT_DOUBLE_EQ(oom.device_seconds, table_failed_launch_s * 16);
  EXPECT_FALSE(ev->true_step_time(config(1, 1, 2)).has_value());
  // The missing row: a launch error at no cost.
  auto absent = ev->measure(config(2, 8, 32), 3, 0, "explore");
  EXPECT_EQ(absent.outcome, tuning::trial_outcome::launch_error);
  EXPECT_EQ(absent.device_seconds, 0.0);
  // A broken constraint never launches.
  auto refused = ev->measure(config(4, 16, 1), 4, 0, "explore");
  EXPECT_EQ(refused.outcome, tuning::trial_outcome::contract_violation);
  EXPECT_EQ(refused.detail.rfind("constraint:", 0), 0u);
}

TEST(TableEvaluator, MeasuredPeakMemoryAndDuplicateRows) {
  auto bs = load("table-bigscience-1b3-8xV100-32gb");
  ASSERT_NE(bs, nullptr);
  tuning::configuration c = config(1, 1, 8);
  c.knobs["recompute"] = true;
  bs->begin_run(1);
  auto rec = bs->measure(c, 3, 0, "explore");
  EXPECT_EQ(rec.outcome, tuning::trial_outcome::ok);
  EXPECT_EQ(rec.peak_memory_bytes, std::uint64_t{25} << 30); // "25GB" in mem_gb
  EXPECT_EQ(rec.memory, tuning::memory_source::workload);
  // BLOOM's (tp 4, pp 12, micro-batch 2) was measured twice: the geometric mean.
  auto bloom = load("table-bloom-prequel-384xA100");
  ASSERT_NE(bloom, nullptr);
  tuning::configuration b = config(4, 12, 2);
  EXPECT_NEAR(*bloom->true_step_time(b), std::sqrt(110.48 * 113.54), 1e-9);
}

TEST(TableEvaluator, EveryTaskLoadsAndARunFinishes) {
  for (const char* name : {"table-amp-transgan-16xV100", "table-lucie7b-seq4k-4n-gbs512",
                           "table-lucie7b-seq2k-4n-gbs192", "table-bigscience-1b3-8xV100-16gb",
                           "table-sailor-opt350-32xGH200node"}) {
    auto ev = load(name);
    ASSERT_NE(ev, nullptr) << name;
    driver_options o;
    o.trials = 6;
    o.policy_name = tuning::default_policy_name;
    o.seed = 3;
    auto run = drive_run(*ev, o);
    EXPECT_EQ(run.error, "") << name;
    EXPECT_EQ(run.verdict_mismatches, 0u) << name;
  }
}

} // namespace
} // namespace infrarsi::bench
