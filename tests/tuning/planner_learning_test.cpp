// Tests for issue 18: bayes_ei/2 (the default when they were written) and the default policy
// learn memory from few trials, blame failures on the settings that cause them, pair only with
// real memory savers; the failure model (tuning/failure_model).

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "tuning/bayes_policy.hpp"
#include "tuning/failure_model.hpp"
#include "tuning/search_space.hpp"
#include "tuning/toy_knobs.hpp"

namespace infrarsi::tuning {
namespace {

using namespace test_knobs;


std::int64_t int_of(const configuration& c, const char* k) {
  return std::get<std::int64_t>(c.knobs.at(k));
}

trial_record finished(std::uint64_t id, const configuration& c, const char* purpose) {
  trial_record r;
  r.trial_id = id;
  r.purpose = purpose;
  r.config = c;
  r.dispatched = true;
  r.finished = true;
  r.verified = true;
  return r;
}

trial_record ok(std::uint64_t id, const configuration& c, const char* purpose, double step_s,
                double peak_bytes) {
  auto r = finished(id, c, purpose);
  r.outcome = trial_outcome::ok;
  r.timed_step_time_s = step_s;
  r.peak_memory_bytes = static_cast<std::uint64_t>(peak_bytes);
  r.device_seconds = 10.0 * step_s;
  return r;
}

/// A planner input for a toy task: seed, noise log-sd 0.01 and `design` initial-design trials.
planner_input toy_input(const task_spec& task, std::uint64_t seed, std::size_t design) {
  planner_input in;
  in.task = &task;
  in.seed = seed;
  in.noise_log_sd = 0.01;
  in.initial_design = design;
  return in;
}

// --- memory ----------------------------------------------------------------------------------

task_spec memory_task() {
  task_spec t;
  t.name = "mem";
  t.knobs = {int_knob("micro_batch", {1, 2, 4, 8, 16}, 1, {"memory-hungry"}),
             bool_knob("overlap"), int_knob("bucket", {10, 40, 160}, 40)};
  return t;
}

/// P(OOM) of `c` as the policy sees it (run_memory_model::p_oom), or from the censored fit alone
/// (`fit_only`: without the monotone rule).
double p_oom_of(const task_spec& task, const std::vector<trial_record>& history,
                const configuration& c, double capacity, const run_memory_options& options,
                bool fit_only = false) {
  feature_space fs{task, nullptr};
  auto m = fit_run_memory(task, fs, history, nullptr, capacity, options);
  EXPECT_TRUE(m.fitted) << m.why;
  if (!fit_only)
    return m.p_oom(task, fs, c);
  return m.p_oom_point(fs.point(task, c), fs.model_size());
}

double p_oom_of(const task_spec& task, const std::vector<trial_record>& history,
                const configuration& c, double capacity, const std::string& policy,
                bool fit_only = false) {
  return p_oom_of(task, history, c, capacity, memory_options_for(policy), fit_only);
}

/// Two memory settings measured apart and never together: a memory-saver and a memory-hungry
/// boolean and an untagged one; the baseline at 50 GB (3 trials), the saver alone at 45 GB and
/// the hungry setting alone at 57 GB (2 trials each); `both` is the untried pair.
struct pairs_scenario {
  task_spec task;
  configuration hungry;
  configuration both;
  std::vector<trial_record> h;
  std::uint64_t id = 0;
  pairs_scenario() {
    task.name = "pairs";
    task.knobs = {bool_knob("saver", {"memory-saver"}), bool_knob("hungry", {"memory-hungry"}),
                  bool_knob("overlap")};
    auto base = baseline_configuration(task);
    auto saver = base;
    saver.knobs["saver"] = true;
    hungry = base;
    hungry.knobs["hungry"] = true;
    both = saver;
    both.knobs["hungry"] = true;
    for (int i = 0; i < 3; ++i)
      h.push_back(ok(id++, base, "baseline", 1.0, 50e9 * (1.0 + 0.004 * i)));
    for (int i = 0; i < 2; ++i) {
      h.push_back(ok(id++, saver, "explore", 1.0, 45e9 * (1.0 + 0.004 * i)));
      h.push_back(ok(id++, hungry, "explore", 1.0, 57e9 * (1.0 - 0.004 * i)));
    }
  }
};

TEST(MemoryLearning, AnUntriedPairOfMemorySettingsIsUncertainWithInteractions) {
  // Peak memory is not a product of one factor per setting (what pipeline stages save depends on
  // what recomputation keeps). Measured: the baseline at 50 GB, the saver alone at 45 GB, the
  // hungry setting alone at 57 GB; capacity 60 GB. The additive model (bayes_ei/3) multiplies
  // the two factors, 50 x 0.9 x 1.14 = 51.3 GB, and is sure the pair fits; with interactions
  // (bayes_ei/4) the pair's own coefficient is unknown (prior sd 0.15 in log bytes), so it is
  // not.
  pairs_scenario sc;
  const auto& task = sc.task;
  const auto& hungry = sc.hungry;
  const auto& both = sc.both;
  auto& h = sc.h;
  auto& id = sc.id;
  const double capacity = 60e9;
  double additive = p_oom_of(task, h, both, capacity, "bayes_ei/3");
  double pairs = p_oom_of(task, h, both, capacity, "bayes_ei/4");
  feature_space fs{task, nullptr};
  auto m = fit_run_memory(task, fs, h, nullptr, capacity, memory_options_for("bayes_ei/4"));
  std::cout << "P(OOM) of the untried pair: additive " << additive << ", with interactions "
            << pairs << " (" << m.pairs.size() << " pair coefficients)\n";
  EXPECT_EQ(m.pairs.size(), 1u); // saver x hungry; the untagged overlap has none
  EXPECT_LT(additive, 0.01);
  EXPECT_GT(pairs, 0.05);
  EXPECT_LT(pairs, 0.5); // no evidence that it does not fit: still more likely to fit
  // A measured setting keeps its measured peak.
  EXPECT_LT(p_oom_of(task, h, hungry, capacity, "bayes_ei/4"), 0.1); // 57 of 60 GB
  // Once the pair is measured at 58 GB the interaction is learnt: the pair with a memory-neutral
  // change is predicted near 58 GB, close to a 59 GB capacity, where the additive model stays
  // nearer its 51 GB.
  h.push_back(ok(id++, both, "explore", 1.0, 58e9));
  auto both_overlap = both;
  both_overlap.knobs["overlap"] = true;
  double learnt = p_oom_of(task, h, both_overlap, 59e9, "bayes_ei/4");
  double additive_after = p_oom_of(task, h, both_overlap, 59e9, "bayes_ei/3");
  std::cout << "after the pair ran at 58 GB, P(OOM) at 59 GB with overlap on: with interactions "
            << learnt << ", additive " << additive_after << "\n";
  EXPECT_GT(learnt, 0.2);
  EXPECT_GT(learnt, additive_after + 0.1);
  // The policy that fits it.
  auto v4 = make_policy("bayes_ei/4");
  ASSERT_NE(v4, nullptr);
  EXPECT_EQ(v4->name(), "bayes_ei/4");
  EXPECT_TRUE(memory_options_for("bayes_ei/4").interactions);
  EXPECT_FALSE(memory_options_for("bayes_ei/3").interactions);
}

// For bayes_ei/2 and the default policy, early and (bayes_ei/6) late in a run: the memory model
// of the trials so far, as memory_options_for gives it at that point of a 40-trial budget.
TEST(MemoryLearning, OneOomOfMicroBatch8MakesMicroBatch16LikelyToRunOutOfMemory) {
  struct phase {
    std::string policy;
    std::size_t spent;
  };
  for (const auto& [policy, spent] : {phase{"bayes_ei/2", 0}, phase{default_policy_name, 0},
                                      phase{default_policy_name, 30}}) {
    SCOPED_TRACE(policy + " after " + std::to_string(spent) + " of 40 search trials");
    auto options = memory_options_for(policy, spent, 40);
    if (spent == 30) { // the default's late phase: the model with pairs
      EXPECT_TRUE(options.interactions);
    }
    auto task = memory_task();
    const double capacity = 80e9;
    auto base = baseline_configuration(task);
    std::vector<trial_record> h;
    for (std::uint64_t i = 0; i < 3; ++i)
      h.push_back(ok(i, base, "baseline", 1.0, 30e9 * (1.0 + 0.005 * static_cast<double>(i))));
    auto mb8 = base;
    mb8.knobs["micro_batch"] = std::int64_t{8};
    auto mb16 = base;
    mb16.knobs["micro_batch"] = std::int64_t{16};
    double before = p_oom_of(task, h, mb16, capacity, options);
    auto oom = finished(3, mb8, "explore");
    oom.outcome = trial_outcome::oom;
    h.push_back(oom);
    double after = p_oom_of(task, h, mb16, capacity, options);
    double fit_before = p_oom_of(task, {h.begin(), h.end() - 1}, mb16, capacity, options, true);
    double fit_after = p_oom_of(task, h, mb16, capacity, options, true);
    std::cout << "P(OOM) micro_batch 16: " << before << " before, " << after
              << " after one OOM of micro_batch 8 (the censored fit alone: " << fit_before << " -> "
              << fit_after << ")\n";
    EXPECT_GT(after, 0.8);
    EXPECT_GT(after, before);
    EXPECT_GT(fit_after, fit_before);
    // The same micro-batch with another, memory-neutral setting changed shares the OOM'd value.
    auto mb16_overlap = mb16;
    mb16_overlap.knobs["overlap"] = true;
    EXPECT_GT(p_oom_of(task, h, mb16_overlap, capacity, options), 0.8);
    // And a smaller micro-batch that fits by a wide margin stays likely to fit.
    auto mb2 = base;
    mb2.knobs["micro_batch"] = std::int64_t{2};
    EXPECT_LT(p_oom_of(task, h, mb2, capacity, options), 0.2);
  }
}

TEST(MemoryLearning, RepeatedOomsMoveTheModelNotItsNoise) {
  // Four OOMs of different micro-batch 8 configurations: P(OOM) of a fifth is near certain
  // under bayes_ei/2's fit (the tight prior on the residual sd).
  auto task = memory_task();
  const double capacity = 80e9;
  auto base = baseline_configuration(task);
  std::vector<trial_record> h;
  for (std::uint64_t i = 0; i < 3; ++i)
    h.push_back(ok(i, base, "baseline", 1.0, 30e9));
  std::uint64_t id = 3;
  for (std::int64_t bucket : {10, 40, 160}) {
    auto c = base;
    c.knobs["micro_batch"] = std::int64_t{8};
    c.knobs["bucket"] = bucket;
    auto r = finished(id++, c, "explore");
    r.outcome = trial_outcome::oom;
    h.push_back(r);
  }
  auto probe = base;
  probe.knobs["micro_batch"] = std::int64_t{8};
  probe.knobs["overlap"] = true;
  double v2 = p_oom_of(task, h, probe, capacity, "bayes_ei/2", true);
  double v1 = p_oom_of(task, h, probe, capacity, "bayes_ei/1", true);
  std::cout << "fit alone, P(OOM) of a 4th micro_batch 8 configuration after 3 OOMs: " << v2
            << " (bayes_ei/1's fit: " << v1 << ")\n";
  EXPECT_GT(v2, 0.9);
}

// --- failure blame ----------------------------------------------------------------------------

/// A real-script-like task: world size, threads, batch split, a numerics knob.
task_spec crashy_task() {
  task_spec t;
  t.name = "crashy";
  t.knobs = {int_knob("world_size", {1, 2, 4}, 1), int_knob("threads", {1, 2, 4}, 1),
             int_knob("batch_split", {1, 2, 4}, 1),
             choice_knob("dtype", {"float32", "bfloat16"}, "float32", {"numerics"}),
             bool_knob("pin_memory")};
  return t;
}

/// The fake workload: crashes whenever world_size > 1; otherwise faster with more threads,
/// bfloat16 and batch split 2 (truth, log step time relative to the baseline's 1 s).
trial_record run_crashy(std::uint64_t id, const configuration& c) {
  auto r = finished(id, c, "explore");
  if (int_of(c, "world_size") > 1) {
    r.outcome = trial_outcome::crash;
    r.detail = "exit status 1: RuntimeError in the process group";
    r.device_seconds = 2.0;
    return r;
  }
  double y = -0.15 * std::log2(static_cast<double>(int_of(c, "threads")));
  y += std::get<std::string>(c.knobs.at("dtype")) == "bfloat16" ? -0.2 : 0.0;
  y += int_of(c, "batch_split") == 2 ? -0.05 : 0.0;
  y += std::get<bool>(c.knobs.at("pin_memory")) ? -0.02 : 0.0;
  r.outcome = trial_outcome::ok;
  r.timed_step_time_s = std::exp(y);
  r.device_seconds = 10.0 * r.timed_step_time_s;
  return r;
}

TEST(FailureBlame, AWorkloadThatCrashesWithMoreThanOneRankGetsItAtMostTwiceInTwelveTrials) {
  auto task = crashy_task();
  auto base = baseline_configuration(task);
  for (const std::string name : {"bayes_ei/2", default_policy_name}) {
    SCOPED_TRACE(name);
    auto policy = make_policy(name);
    ASSERT_NE(policy, nullptr);
    for (std::uint64_t seed : {1, 2, 3, 4, 5}) {
      auto in = toy_input(task, seed, 4);
      std::uint64_t id = 0;
      for (; id < 3; ++id)
        in.history.push_back(ok(id, base, "baseline", 1.0, 1e9));
      int multi_rank = 0;
      bool bf16_usable = false;
      proposal_batch last;
      for (int trial = 0; trial < 12; ++trial) {
        last = policy->plan(in, 1);
        if (last.proposals.empty())
          break;
        const auto& c = last.proposals.front().config;
        multi_rank += int_of(c, "world_size") > 1 ? 1 : 0;
        auto r = run_crashy(id++, c);
        if (std::getenv("DEBUG_BLAME"))
          std::cout << "  " << c.diff_from(base) << " -> " << to_string(r.outcome) << " | " << last.proposals.front().reason << "\n";
        bf16_usable = bf16_usable
                      || (r.usable() && std::get<std::string>(c.knobs.at("dtype")) == "bfloat16");
        in.history.push_back(r);
      }
      last = policy->plan(in, 1);
      std::cout << "seed " << seed << ": world_size > 1 in " << multi_rank
                << " of 12 trials; blamed:";
      for (const auto& b : last.blamed)
        std::cout << " [" << b << "]";
      std::cout << "\n";
      EXPECT_LE(multi_rank, 2) << "seed " << seed;
      // The crash is not pinned on the numerics knob: bfloat16 ran in a usable trial.
      EXPECT_TRUE(bf16_usable) << "seed " << seed;
      // Once world_size > 1 failed twice, the batch names it with the convicting trials.
      if (multi_rank == 2) {
        bool named = false;
        for (const auto& b : last.blamed)
          named = named || b.rfind("world_size", 0) == 0;
        EXPECT_TRUE(named) << "seed " << seed;
      }
    }
  }
}

TEST(FailureModel, TwoFailuresWithOtherwiseDifferentSettingsConvictTheSharedOne) {
  auto task = crashy_task();
  feature_space fs{task, nullptr};
  auto base = baseline_configuration(task);
  std::vector<trial_record> h;
  for (std::uint64_t i = 0; i < 3; ++i)
    h.push_back(ok(i, base, "baseline", 1.0, 1e9));
  auto a = base;
  a.knobs["world_size"] = std::int64_t{2};
  a.knobs["threads"] = std::int64_t{4};
  a.knobs["dtype"] = std::string{"bfloat16"};
  auto b = base;
  b.knobs["world_size"] = std::int64_t{4};
  b.knobs["batch_split"] = std::int64_t{2};
  b.knobs["pin_memory"] = true;
  h.push_back(run_crashy(3, a));
  {
    failure_model one{task, fs, h};
    EXPECT_TRUE(one.convicted().empty()) << "one ambiguous failure convicts nothing";
  }
  h.push_back(run_crashy(4, b));
  failure_model m{task, fs, h};
  ASSERT_EQ(m.failures(), 2u);
  ASSERT_EQ(m.convicted().size(), 1u);
  EXPECT_EQ(m.convicted()[0].feature, "world_size!=default");
  EXPECT_EQ(m.convicted()[0].trials, (std::vector<std::uint64_t>{3, 4}));
  auto bf16 = base;
  bf16.knobs["dtype"] = std::string{"bfloat16"};
  EXPECT_FALSE(m.excluded(fs.active(task, bf16)));
  EXPECT_LT(m.p_fail(fs.active(task, bf16)), 0.5);
  auto ws2 = base;
  ws2.knobs["world_size"] = std::int64_t{2};
  EXPECT_TRUE(m.excluded(fs.active(task, ws2)));
  EXPECT_GT(m.p_fail(fs.active(task, ws2)), 0.5);
  // A usable trial with the setting acquits it.
  auto ok_ws = ok(5, ws2, "explore", 0.9, 1e9);
  h.push_back(ok_ws);
  failure_model acquitted{task, fs, h};
  EXPECT_TRUE(acquitted.convicted().empty());
}

// --- pairing ----------------------------------------------------------------------------------

/// Memory: recompute none is the memory-hungry direction (x1.6), selective x1.15; tp 2 halves
/// it; micro-batch doubles it per doubling. Speed: recompute none is fastest, micro-batch helps.
task_spec pairing_task() {
  task_spec t;
  t.name = "pairing";
  t.knobs = {int_knob("micro_batch", {1, 2, 4}, 1, {"memory-hungry"}),
             choice_knob("recompute", {"none", "selective", "full"}, "full", {"memory-saver"}),
             int_knob("tp", {1, 2}, 1, {"memory-saver"}), bool_knob("overlap")};
  return t;
}

double pairing_memory(const configuration& c) {
  double m = 30e9 * static_cast<double>(int_of(c, "micro_batch"));
  const auto& r = std::get<std::string>(c.knobs.at("recompute"));
  m *= r == "none" ? 1.6 : r == "selective" ? 1.15 : 1.0;
  m /= static_cast<double>(int_of(c, "tp"));
  return m;
}

TEST(Pairing, NeverPicksAMemoryRaisingSaver) {
  auto task = pairing_task();
  const double capacity = 80e9;
  auto base = baseline_configuration(task);
  for (const std::string name : {"bayes_ei/2", default_policy_name}) {
    SCOPED_TRACE(name);
    auto policy = make_policy(name);
    int paired = 0;
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      auto in = toy_input(task, seed, 3);
      in.memory_capacity_bytes = capacity;
      std::uint64_t id = 0;
      for (; id < 3; ++id)
        in.history.push_back(ok(id, base, "baseline", 1.0, pairing_memory(base)));
      for (int trial = 0; trial < 14; ++trial) {
        auto batch = policy->plan(in, 1);
        if (batch.proposals.empty())
          break;
        const auto& p = batch.proposals.front();
        auto r = finished(id++, p.config, "explore");
        double mem = pairing_memory(p.config);
        if (p.reason.find("paired ") != std::string::npos) {
          ++paired;
          // The saver is the one change between the hungry configuration and the proposal:
          // undoing it must give a configuration that needs more memory.
          bool found = false;
          for (const auto& hungry : single_changes(task, p.config))
            if (p.reason.find("paired " + hungry.diff_from(base) + " (") != std::string::npos) {
              found = true;
              EXPECT_LT(mem, pairing_memory(hungry)) << p.reason;
            }
          EXPECT_TRUE(found) << p.reason;
        }
        if (mem > capacity) {
          r.outcome = trial_outcome::oom;
        } else {
          r.outcome = trial_outcome::ok;
          const auto& rc = std::get<std::string>(p.config.knobs.at("recompute"));
          double y = -0.2 * std::log2(static_cast<double>(int_of(p.config, "micro_batch")))
                     + (rc == "none" ? -0.3 : rc == "selective" ? -0.15 : 0.0)
                     + (int_of(p.config, "tp") == 2 ? 0.05 : 0.0)
                     + (std::get<bool>(p.config.knobs.at("overlap")) ? -0.05 : 0.0);
          r.timed_step_time_s = std::exp(y);
          r.peak_memory_bytes = static_cast<std::uint64_t>(mem);
          r.device_seconds = 10.0 * r.timed_step_time_s;
        }
        in.history.push_back(r);
      }
    }
    std::cout << paired << " paired proposals over 6 seeds\n";
    EXPECT_GT(paired, 0) << "no proposal was a pair: the check above never ran";
  }
}

// --- the end game (bayes_ei/3) ------------------------------------------------------------------

/// Six knobs whose effects on log step time add up, with one interaction (threads x
/// batch_split), so that after a few trials the time model is sure of some settings and unsure
/// of others.
task_spec end_game_task() {
  task_spec t;
  t.name = "end-game";
  t.knobs = {int_knob("threads", {1, 2, 4, 8}, 1), int_knob("batch_split", {1, 2, 4}, 1),
             bool_knob("pin_memory"), bool_knob("fuse"), bool_knob("prefetch"),
             choice_knob("layout", {"a", "b", "c"}, "a")};
  return t;
}

double end_game_time(const configuration& c) {
  double y = -0.12 * std::log2(static_cast<double>(int_of(c, "threads")));
  y += -0.04 * std::log2(static_cast<double>(int_of(c, "batch_split")));
  y += 0.03 * std::log2(static_cast<double>(int_of(c, "threads")))
       * std::log2(static_cast<double>(int_of(c, "batch_split")));
  y += std::get<bool>(c.knobs.at("pin_memory")) ? -0.03 : 0.0;
  y += std::get<bool>(c.knobs.at("fuse")) ? -0.08 : 0.0;
  y += std::get<bool>(c.knobs.at("prefetch")) ? 0.02 : 0.0;
  const auto& l = std::get<std::string>(c.knobs.at("layout"));
  y += l == "b" ? -0.05 : l == "c" ? 0.04 : 0.0;
  return std::exp(y);
}

TEST(EndGame, TheLastQuarterOfTheBudgetExploitsAndEarlierTrialsAreBayesEi2s) {
  auto task = end_game_task();
  auto base = baseline_configuration(task);
  auto v2 = make_policy("bayes_ei/2");
  auto v3 = make_policy("bayes_ei/3");
  ASSERT_NE(v3, nullptr);
  EXPECT_EQ(v3->name(), "bayes_ei/3");
  EXPECT_EQ(std::string{default_policy_name}, "bayes_ei/7");
  int differed = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    auto in = toy_input(task, seed, 3);
    in.search_budget = 10;
    std::uint64_t id = 0;
    for (; id < 3; ++id)
      in.history.push_back(ok(id, base, "baseline", 1.0, 1e9));
    // Eight search trials chosen by bayes_ei/3 itself: outside the end game (10 - 8 = 2 left
    // is the first step inside it: 2 <= 0.25 x 10), so it must choose what bayes_ei/2 chooses.
    for (int trial = 0; trial < 8; ++trial) {
      auto a = v3->plan(in, 1);
      auto b = v2->plan(in, 1);
      ASSERT_EQ(a.proposals.size(), 1u);
      ASSERT_EQ(b.proposals.size(), 1u);
      EXPECT_EQ(a.proposals[0].config, b.proposals[0].config) << "seed " << seed;
      EXPECT_EQ(a.proposals[0].reason, b.proposals[0].reason) << "seed " << seed;
      const auto& c = a.proposals[0].config;
      in.history.push_back(ok(id++, c, "explore", end_game_time(c), 1e9));
    }
    auto a = v3->plan(in, 1);
    auto b = v2->plan(in, 1);
    ASSERT_EQ(a.proposals.size(), 1u);
    ASSERT_EQ(b.proposals.size(), 1u);
    EXPECT_NE(a.proposals[0].reason.find(
                "; end game (2 of 10 search trials left): EI with the posterior sd x0.30"),
              std::string::npos)
      << a.proposals[0].reason;
    EXPECT_EQ(b.proposals[0].reason.find("end game"), std::string::npos);
    // Exploitation: what the end game picks is predicted at least as fast as what bayes_ei/2
    // picks, and on some seeds faster (it gives up a more uncertain candidate).
    EXPECT_GE(a.proposals[0].predicted_speedup, b.proposals[0].predicted_speedup - 1e-12)
      << "seed " << seed << ": " << a.proposals[0].reason << " | " << b.proposals[0].reason;
    differed += a.proposals[0].config == b.proposals[0].config ? 0 : 1;
    // Unknown budget: no end game.
    in.search_budget = 0;
    auto unknown = v3->plan(in, 1);
    ASSERT_EQ(unknown.proposals.size(), 1u);
    EXPECT_EQ(unknown.proposals[0].config, b.proposals[0].config);
    EXPECT_EQ(unknown.proposals[0].reason, b.proposals[0].reason);
  }
  std::cout << "the end game chose another configuration than bayes_ei/2 on " << differed
            << " of 6 seeds\n";
  EXPECT_GT(differed, 0);
}

// --- narrowing the interactions (bayes_ei/5) -----------------------------------------------------

// Why the narrow prior: a setting measured only beside a slow one. Truth (log step time, additive):
// a -0.2, b +0.3, c -0.1. Measured: the baseline, {b}, {a, b}, {c}, {b, c}; never a without b.
// With the wide prior (interaction sd 0.1) part of a's gain may be an a x b interaction, so {a, c}
// is uncertain; with the narrow one (0.02) the mean adds up the main effects and is sure.
TEST(NarrowInteractions, AGainMeasuredBesideASlowSettingAddsUp) {
  task_spec task;
  task.name = "narrow";
  task.knobs = {bool_knob("a"), bool_knob("b"), bool_knob("c")};
  feature_space fs{task, nullptr};
  auto config = [&](bool a, bool b, bool c) {
    auto k = baseline_configuration(task);
    k.knobs["a"] = a;
    k.knobs["b"] = b;
    k.knobs["c"] = c;
    return k;
  };
  auto truth = [](bool a, bool b, bool c) { return (a ? -0.2 : 0.0) + (b ? 0.3 : 0.0) + (c ? -0.1 : 0.0); };
  std::vector<std::pair<sparse_features, double>> data;
  for (auto [a, b, c] : std::vector<std::tuple<bool, bool, bool>>{
         {false, false, false}, {false, true, false}, {true, true, false}, {false, false, true},
         {false, true, true}})
    for (int repeat = 0; repeat < 2; ++repeat)
      data.emplace_back(fs.point(task, config(a, b, c)), truth(a, b, c));
  time_model_options wide_options; // interaction sd 0.1, bayes_ei/3's and bayes_ei/5's before
  time_model_options narrow_options;
  narrow_options.interaction_sd = 0.02;
  time_model wide{fs, wide_options};
  time_model narrow{fs, narrow_options};
  wide.fit(data, 0.01);
  narrow.fit(data, 0.01);
  auto ac = fs.point(task, config(true, false, true));
  auto w = wide.predict(ac);
  auto n = narrow.predict(ac);
  EXPECT_NEAR(n.mean, -0.3, 0.02) << n.mean;
  EXPECT_LT(n.sd, 0.05) << n.sd;
  EXPECT_GT(w.sd, 2.0 * n.sd) << w.sd << " vs " << n.sd;
  EXPECT_GT(std::abs(w.mean + 0.3), std::abs(n.mean + 0.3)) << w.mean << " vs " << n.mean;
}

/// The end-game toy task's input after `trials` search trials of budget `budget` (three baseline
/// trials first, then random configurations drawn with `draws`: the toy space is small and a
/// policy would exhaust what it likes, so both policies see the same trials), expecting `a` and
/// `b` to propose the same configuration with the same reason before each of them.
planner_input same_proposals_until(const planner_policy& a, const planner_policy& b,
                                   std::uint64_t seed, std::uint64_t draws, std::size_t budget,
                                   std::size_t trials) {
  static const task_spec task = end_game_task(); // the returned input points to it
  auto base = baseline_configuration(task);
  auto in = toy_input(task, seed, 3);
  in.search_budget = budget;
  std::uint64_t id = 0;
  for (; id < 3; ++id)
    in.history.push_back(ok(id, base, "baseline", 1.0, 1e9));
  splitmix64 rng{draws};
  auto space = enumerate_candidates(task, 0);
  for (std::size_t trial = 0; trial < trials; ++trial) {
    auto pa = a.plan(in, 1);
    auto pb = b.plan(in, 1);
    EXPECT_EQ(pa.proposals.size(), 1u) << "trial " << trial;
    EXPECT_EQ(pb.proposals.size(), 1u) << "trial " << trial;
    if (pa.proposals.size() == 1 && pb.proposals.size() == 1) {
      EXPECT_EQ(pa.proposals[0].config, pb.proposals[0].config) << "trial " << trial;
      EXPECT_EQ(pa.proposals[0].reason, pb.proposals[0].reason) << "trial " << trial;
    }
    const auto& c = space[rng.below(space.size())];
    in.history.push_back(ok(id++, c, "explore", end_game_time(c), 1e9));
  }
  return in;
}

// bayes_ei/5 is bayes_ei/3 until max(20, half the budget) search trials are spent; then its reason
// names the narrower prior.
TEST(NarrowInteractions, BayesEi5IsBayesEi3UntilHalfTheBudgetAndAtLeastTwentyTrials) {
  auto v3 = make_policy("bayes_ei/3");
  auto v5 = make_policy("bayes_ei/5");
  ASSERT_NE(v5, nullptr);
  EXPECT_EQ(v5->name(), "bayes_ei/5");
  EXPECT_FALSE(memory_options_for("bayes_ei/5").interactions);
  EXPECT_TRUE(memory_options_for("bayes_ei/5").ep);
  for (std::size_t budget : {40u, 60u}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    const std::size_t after = std::max<std::size_t>(20, budget / 2);
    auto in = same_proposals_until(*v5, *v3, 7, 3, budget, after);
    auto a = v5->plan(in, 1);
    ASSERT_EQ(a.proposals.size(), 1u);
    EXPECT_NE(a.proposals[0].reason.find("; interaction prior sd 0.02 after "
                                         + std::to_string(after) + " search trials"),
              std::string::npos)
      << a.proposals[0].reason;
    auto b = v3->plan(in, 1);
    ASSERT_EQ(b.proposals.size(), 1u);
    EXPECT_EQ(b.proposals[0].reason.find("interaction prior sd"), std::string::npos);
  }
}

// --- memory interactions late (bayes_ei/6) ------------------------------------------------------

// bayes_ei/6's memory model gains the pairs at the point bayes_ei/5's time model narrows,
// max(20, half the budget) search trials, with prior sd 0.05; not before, whatever the budget.
TEST(LateMemoryInteractions, TheMemoryModelHasPairsFromHalfTheBudgetAndAtLeastTwentyTrials) {
  EXPECT_EQ(policy_names().front(), "bayes_ei/7");
  EXPECT_FALSE(memory_options_for("bayes_ei/6").interactions);
  EXPECT_TRUE(memory_options_for("bayes_ei/6").ep);
  EXPECT_TRUE(memory_options_for("bayes_ei/6").monotone);
  for (std::size_t budget : {0u, 10u, 20u, 40u, 60u}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    const std::size_t after = budget == 0 ? 20 : std::max<std::size_t>(20, (budget + 1) / 2);
    EXPECT_FALSE(memory_options_for("bayes_ei/6", after - 1, budget).interactions);
    auto late = memory_options_for("bayes_ei/6", after, budget);
    EXPECT_TRUE(late.interactions);
    EXPECT_DOUBLE_EQ(late.interaction_sd, 0.05);
    EXPECT_TRUE(late.ep && late.monotone && late.tag_priors && late.tight_sigma);
    // bayes_ei/7: the same, with the lean EP sweeps; bayes_ei/6 keeps the defaults.
    EXPECT_DOUBLE_EQ(late.interaction_ep.stop, 1e-6);
    EXPECT_FALSE(late.interaction_ep.triangle);
    EXPECT_FALSE(memory_options_for("bayes_ei/7", after - 1, budget).interactions);
    auto late7 = memory_options_for("bayes_ei/7", after, budget);
    EXPECT_TRUE(late7.interactions);
    EXPECT_DOUBLE_EQ(late7.interaction_sd, 0.05);
    EXPECT_DOUBLE_EQ(late7.interaction_ep.stop, 1e-4);
    EXPECT_DOUBLE_EQ(late7.interaction_ep.skip, 1e-6);
    EXPECT_TRUE(late7.interaction_ep.triangle);
    // The other policies do not change with the trials spent.
    EXPECT_FALSE(memory_options_for("bayes_ei/5", 1000, budget).interactions);
    EXPECT_TRUE(memory_options_for("bayes_ei/4", 0, budget).interactions);
    EXPECT_DOUBLE_EQ(memory_options_for("bayes_ei/4", 0, budget).interaction_sd, 0.15);
  }
}

// The untried pair of MemoryLearning.AnUntriedPairOfMemorySettingsIsUncertainWithInteractions
// (baseline 50 GB, saver alone 45 GB, hungry alone 57 GB, capacity 60 GB): late in a run
// bayes_ei/6 is less sure than the additive model that it fits, and surer than bayes_ei/4 (its
// prior sd on the pair is a third).
TEST(LateMemoryInteractions, AnUntriedPairIsUncertainButLessThanWithBayesEi4sPrior) {
  pairs_scenario sc;
  const auto& task = sc.task;
  const auto& both = sc.both;
  const auto& h = sc.h;
  const double capacity = 60e9;
  feature_space fs{task, nullptr};
  auto p_of = [&](const run_memory_options& o) {
    auto m = fit_run_memory(task, fs, h, nullptr, capacity, o);
    EXPECT_TRUE(m.fitted) << m.why;
    return m.p_oom(task, fs, both);
  };
  double early = p_of(memory_options_for("bayes_ei/6", 10, 40));
  double late = p_of(memory_options_for("bayes_ei/6", 20, 40));
  double additive = p_of(memory_options_for("bayes_ei/5"));
  double wide = p_of(memory_options_for("bayes_ei/4"));
  std::cout << "P(OOM) of the untried pair: bayes_ei/6 early " << early << ", late " << late
            << "; bayes_ei/5 " << additive << ", bayes_ei/4 " << wide << "\n";
  EXPECT_DOUBLE_EQ(early, additive);
  EXPECT_LT(additive, 0.01);
  EXPECT_GT(late, 2.0 * additive);
  EXPECT_LT(late, wide);
}

// bayes_ei/6 proposes what bayes_ei/5 does, reason for reason, until its late phase; then its
// reason says the memory model has the pairs.
TEST(LateMemoryInteractions, BayesEi6IsBayesEi5UntilItsLatePhase) {
  auto v5 = make_policy("bayes_ei/5");
  auto v6 = make_policy("bayes_ei/6");
  ASSERT_NE(v6, nullptr);
  EXPECT_EQ(v6->name(), "bayes_ei/6");
  auto in = same_proposals_until(*v6, *v5, 5, 11, 40, 20);
  auto a = v6->plan(in, 1);
  ASSERT_EQ(a.proposals.size(), 1u);
  EXPECT_NE(a.proposals[0].reason.find("; interaction prior sd 0.02 after 20 search trials; "
                                       "memory model with pairwise interactions (prior sd 0.05)"),
            std::string::npos)
    << a.proposals[0].reason;
  auto b = v5->plan(in, 1);
  ASSERT_EQ(b.proposals.size(), 1u);
  EXPECT_EQ(b.proposals[0].reason.find("memory model with pairwise"), std::string::npos);
}

// bayes_ei/7 proposes what bayes_ei/6 does, reason for reason, until its late phase, and in it
// the same configurations on this toy task (its EP differs from bayes_ei/6's by about 1e-6 in the
// coefficients: bench/README.md "bayes_ei/7").
TEST(LateMemoryInteractions, BayesEi7IsBayesEi6WithALeanerEp) {
  auto v6 = make_policy("bayes_ei/6");
  auto v7 = make_policy("bayes_ei/7");
  ASSERT_NE(v7, nullptr);
  EXPECT_EQ(v7->name(), "bayes_ei/7");
  auto in = same_proposals_until(*v7, *v6, 5, 11, 40, 20);
  auto a = v7->plan(in, 1);
  auto b = v6->plan(in, 1);
  ASSERT_EQ(a.proposals.size(), 1u);
  ASSERT_EQ(b.proposals.size(), 1u);
  EXPECT_EQ(a.proposals[0].config.key(), b.proposals[0].config.key());
  EXPECT_NE(a.proposals[0].reason.find("memory model with pairwise interactions (prior sd 0.05)"),
            std::string::npos)
    << a.proposals[0].reason;
}

// --- the run's encoding cache ----------------------------------------------------------------

void expect_same_batch(const proposal_batch& a, const proposal_batch& b, const std::string& at) {
  ASSERT_EQ(a.proposals.size(), b.proposals.size()) << at;
  for (std::size_t i = 0; i < a.proposals.size(); ++i) {
    EXPECT_EQ(a.proposals[i].config, b.proposals[i].config) << at;
    EXPECT_EQ(a.proposals[i].reason, b.proposals[i].reason) << at;
    // Bit for bit: the cache changes no arithmetic.
    EXPECT_EQ(a.proposals[i].predicted_speedup, b.proposals[i].predicted_speedup) << at;
    EXPECT_EQ(a.proposals[i].p_oom, b.proposals[i].p_oom) << at;
    EXPECT_EQ(a.proposals[i].prior_speedup, b.proposals[i].prior_speedup) << at;
  }
  EXPECT_EQ(a.stop_reason, b.stop_reason) << at;
  EXPECT_EQ(a.blamed, b.blamed) << at;
}

void expect_same_encoding(const history_encoding& a, const history_encoding& b) {
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.active, b.active);
  EXPECT_EQ(a.point, b.point);
}

// A run of the default policy into its late phase (budget 40, 30 search trials, OOMs above the
// capacity, a patch): with the run's encoding cache every step proposes exactly what it proposes
// without one, and encodes only the trial the step before has not seen. A lost attempt dropped
// from the middle of the history and re-run at its end re-encodes from there; a task with
// another patch (an LLM-proposed one) re-encodes everything.
TEST(EncodingCache, TheRunsCacheChangesNoProposalAndEncodesOnlyTheNewTrials) {
  static task_spec task = memory_task();
  task.patches.push_back({"fused", "/x", ""});
  task.patches.push_back({"lean", "/y", ""});
  auto policy = make_policy(default_policy_name);
  auto base = baseline_configuration(task);
  auto in = toy_input(task, 3, 4);
  in.search_budget = 40;
  in.memory_capacity_bytes = 60e9;
  auto peak = [](const configuration& c) {
    double p = 10e9 * static_cast<double>(int_of(c, "micro_batch"));
    for (const auto& x : c.patches)
      p *= x == "fused" ? 0.9 : 1.0;
    return p;
  };
  auto step_s = [](const configuration& c) {
    double y = -0.1 * std::log2(static_cast<double>(int_of(c, "micro_batch")));
    y += std::get<bool>(c.knobs.at("overlap")) ? -0.05 : 0.0;
    for (const auto& x : c.patches)
      y += x == "fused" ? -0.04 : 0.01;
    return std::exp(y);
  };
  auto run = [&](std::uint64_t id, const configuration& c) {
    if (peak(c) > in.memory_capacity_bytes) {
      auto r = finished(id, c, "explore");
      r.outcome = trial_outcome::oom;
      return r;
    }
    return ok(id, c, "explore", step_s(c), peak(c));
  };
  std::uint64_t id = 0;
  for (; id < 3; ++id)
    in.history.push_back(ok(id, base, "baseline", 1.0, peak(base)));
  // A first search trial (a seed, say) that ran out of memory: the memory model has an OOM site.
  auto mb8 = base;
  mb8.knobs["micro_batch"] = std::int64_t{8};
  in.history.push_back(run(id++, mb8));
  ASSERT_EQ(in.history.back().outcome, trial_outcome::oom);
  encoding_cache cache;
  // One step with and without the cache; returns the cached batch and what its plan encoded.
  auto step = [&](const std::string& at) {
    in.encodings = nullptr;
    auto plain = policy->plan(in, 1);
    in.encodings = &cache;
    auto cached = policy->plan(in, 1);
    std::size_t encoded = cache.last_encoded();
    expect_same_batch(plain, cached, at);
    feature_space fs{task, nullptr};
    expect_same_encoding(cache.encode(task, fs, in.history), history_encoding{task, fs, in.history});
    return std::make_pair(cached, encoded);
  };
  std::size_t late = 0;
  for (int trial = 1; trial < 30; ++trial) {
    const std::string at = "search trial " + std::to_string(trial);
    auto [batch, encoded] = step(at);
    EXPECT_EQ(encoded, trial == 1 ? in.history.size() : 1u) << at;
    ASSERT_EQ(batch.proposals.size(), 1u) << at;
    late += batch.proposals[0].reason.find("memory model with pairwise") != std::string::npos;
    in.history.push_back(run(id++, batch.proposals[0].config));
  }
  EXPECT_EQ(late, 10u); // search trials 20..29 were proposed in the late phase
  // Search trial 10 was lost: dropped from the history, re-run at its end as attempt 1.
  const std::size_t at = 3 + 10;
  auto lost = in.history[at];
  in.history.erase(in.history.begin() + static_cast<std::ptrdiff_t>(at));
  lost.attempt = 1;
  in.history.push_back(lost);
  EXPECT_EQ(step("after the lost attempt").second, in.history.size() - at);
  // Another patch in the task: the features differ, everything is encoded again.
  task.patches.push_back({"more", "/z", ""});
  EXPECT_EQ(step("with another patch").second, in.history.size());
}

} // namespace
} // namespace infrarsi::tuning
