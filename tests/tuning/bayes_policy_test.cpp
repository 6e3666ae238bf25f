// Tests for the planner's models and the default policy (issue 6): the global time model and
// prior revision (tuning/time_model, tuning/prior_revision), expected improvement, the bayes_ei/1
// policy (pairing, stop rule, determinism) and the benchmark baselines (tuning/baselines).

#include "tuning/bayes_policy.hpp"

#include <cmath>
#include <iostream>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "tuning/baselines.hpp"
#include "tuning/prior_revision.hpp"
#include "tuning/stats.hpp"
#include "tuning/time_model.hpp"
#include "tuning/toy_knobs.hpp"

namespace infrarsi::tuning {
namespace {

using namespace test_knobs;


/// A toy job: micro-batch (memory-hungry), checkpointing (memory saver), a few switches, two
/// patches. Its truth (below) has main effects, a trend in micro-batch and one interaction.
task_spec toy_task() {
  task_spec t;
  t.name = "toy";
  t.knobs = {int_knob("micro_batch", {1, 2, 4, 8}, 1, {"memory-hungry"}),
             bool_knob("checkpointing", {"memory-saver"}), bool_knob("overlap"),
             bool_knob("graphs"), int_knob("bucket", {10, 40, 160}, 40)};
  t.patches = {{"fused_a", "/a", ""}, {"fused_b", "/b", ""}};
  return t;
}

/// A boolean knob of a toy configuration (false when the task has no such knob).
bool flag(const configuration& c, const char* name) {
  auto it = c.knobs.find(name);
  return it != c.knobs.end() && std::get<bool>(it->second);
}

/// True log step time (relative to the baseline) of a toy configuration.
double truth_log_time(const configuration& c) {
  double y = 0;
  auto mb = std::get<std::int64_t>(c.knobs.at("micro_batch"));
  y += -0.12 * std::log2(static_cast<double>(mb)); // bigger micro-batches are faster
  bool ckpt = flag(c, "checkpointing");
  bool overlap = flag(c, "overlap");
  bool graphs = flag(c, "graphs");
  y += ckpt ? 0.25 : 0.0;
  y += overlap ? -0.10 : 0.0;
  y += graphs ? -0.05 : 0.0;
  y += (overlap && graphs) ? -0.08 : 0.0; // interaction
  auto has = [&](const char* p) {
    return std::find(c.patches.begin(), c.patches.end(), p) != c.patches.end();
  };
  y += has("fused_a") ? -0.15 : 0.0;
  y += has("fused_b") ? 0.04 : 0.0;
  return y;
}

/// Peak memory of a toy configuration, bytes: 1.8 GB x micro-batch^0.53 (2.6 GB at 2, 3.75 GB
/// at 4, 5.4 GB at 8), halved by checkpointing.
double truth_memory(const configuration& c) {
  auto mb = static_cast<double>(std::get<std::int64_t>(c.knobs.at("micro_batch")));
  bool ckpt = flag(c, "checkpointing");
  return 1.8e9 * std::pow(mb, 0.53) * (ckpt ? 0.5 : 1.0);
}

trial_record run_toy(const configuration& c, std::uint64_t id, const std::string& purpose,
                     splitmix64& rng, double capacity = 0) {
  trial_record r;
  r.trial_id = id;
  r.purpose = purpose;
  r.config = c;
  r.finished = true;
  r.verified = true;
  if (capacity > 0 && truth_memory(c) > capacity) {
    r.outcome = trial_outcome::oom;
    return r;
  }
  // Noise: uniform in +-1 % (deterministic stream).
  double u = static_cast<double>(rng.next() >> 11) / 9007199254740992.0;
  r.outcome = trial_outcome::ok;
  r.timed_step_time_s = 2.0 * std::exp(truth_log_time(c)) * (0.99 + 0.02 * u);
  r.peak_memory_bytes = static_cast<std::uint64_t>(truth_memory(c));
  return r;
}

/// `n` toy trials at seeded random configurations of the toy task: (features, log time ratio).
std::vector<std::pair<sparse_features, double>> random_toy_data(const task_spec& task,
                                                                const feature_space& fs, int n,
                                                                std::uint64_t seed) {
  splitmix64 rng{seed};
  auto candidates = enumerate_candidates(task, 0);
  std::vector<std::pair<sparse_features, double>> data;
  for (int i = 0; i < n; ++i) {
    const auto& c = candidates[rng.below(candidates.size())];
    auto r = run_toy(c, static_cast<std::uint64_t>(i), "explore", rng);
    data.emplace_back(fs.point(task, c), std::log(r.timed_step_time_s / 2.0));
  }
  return data;
}

TEST(ExpectedImprovement, MatchesTheClosedForm) {
  // EI(best, mu, sd) = (best - mu) Phi(z) + sd phi(z), z = (best - mu) / sd (Jones et al. 1998).
  EXPECT_NEAR(expected_improvement(0.0, 0.0, 1.0), 0.3989422804, 1e-9); // phi(0)
  EXPECT_NEAR(expected_improvement(1.0, 0.0, 0.0), 1.0, 1e-12);
  EXPECT_NEAR(expected_improvement(0.0, 1.0, 0.0), 0.0, 1e-12);
  // z = 1: 1 x 0.8413447461 + 1 x 0.2419707245
  EXPECT_NEAR(expected_improvement(1.0, 0.0, 1.0), 1.0833154706, 1e-8);
  EXPECT_GT(expected_improvement(0.0, 0.1, 0.2), expected_improvement(0.0, 0.1, 0.1));
}

TEST(Spearman, RanksWithTiesAndNoSpread) {
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0, 1e-12);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0, 1e-12);
  // Ties: ranks (1.5, 1.5, 3) vs (1, 2, 3): r = 0.8660254.
  EXPECT_NEAR(spearman({5, 5, 7}, {1, 2, 3}), 0.8660254038, 1e-9);
  EXPECT_TRUE(std::isnan(spearman({1, 1, 1}, {1, 2, 3})));
  EXPECT_TRUE(std::isnan(spearman({1, 2}, {1, 2})));
}

// Issue 20: the dense D x D covariance must not follow a hostile task to 40 GB. Interactions are
// kept while D = 1 + F + pairs stays within max_dimension; beyond, the additive model (D = 1 + F).
TEST(TimeModel, DimensionIsCappedByDroppingInteractions) {
  task_spec small;
  small.knobs = {int_knob("a", {1, 2}, 1), int_knob("b", {1, 2}, 1), bool_knob("c")};
  feature_space fs_small{small, nullptr};
  ASSERT_EQ(fs_small.model_size(), 3u);
  EXPECT_EQ(time_model{fs_small}.dimension(), 1u + 3u + 3u); // three pairs of different knobs

  task_spec wide; // 60 knobs of 3 values: F = 120 one-hot features, 60 ordinal
  for (int k = 0; k < 60; ++k)
    wide.knobs.push_back(int_knob("k" + std::to_string(k), {1, 2, 4}, 1));
  feature_space fs_wide{wide, nullptr};
  ASSERT_EQ(fs_wide.model_size(), 180u);
  time_model capped{fs_wide};
  EXPECT_EQ(capped.dimension(), 1u + 180u); // ~15,900 pairs would exceed 2,048
  // The cap decides: 25 two-valued knobs have 300 pairs (D = 326) and keep them unless capped.
  task_spec medium;
  for (int k = 0; k < 25; ++k)
    medium.knobs.push_back(int_knob("m" + std::to_string(k), {1, 2}, 1));
  feature_space fs_medium{medium, nullptr};
  EXPECT_EQ(time_model{fs_medium}.dimension(), 1u + 25u + 300u);
  time_model_options tight;
  tight.max_dimension = 325;
  EXPECT_EQ(time_model(fs_medium, tight).dimension(), 1u + 25u);
  // The capped model still fits and predicts: main effects only.
  std::vector<std::pair<sparse_features, double>> data;
  configuration c = baseline_configuration(wide);
  c.knobs["k3"] = std::int64_t{4};
  data.emplace_back(fs_wide.point(wide, c), std::log(0.5));
  data.emplace_back(fs_wide.point(wide, baseline_configuration(wide)), 0.0);
  capped.fit(data, 0.01);
  EXPECT_EQ(capped.observations(), 2u);
  EXPECT_LT(capped.predict(fs_wide.point(wide, c)).mean, -0.3);
}

TEST(TimeModel, LearnsMainEffectsTrendAndInteraction) {
  auto task = toy_task();
  feature_space fs{task, nullptr};
  ASSERT_EQ(fs.ordinal_names, (std::vector<std::string>{"log2(micro_batch)", "log2(bucket)"}));
  auto candidates = enumerate_candidates(task, 0);
  ASSERT_EQ(candidates.size(), 4u * 2 * 2 * 2 * 3 * 4);
  // 60 trials at random configurations.
  auto data = random_toy_data(task, fs, 60, 11);
  time_model with{fs};
  with.fit(data, 0.006);
  time_model_options additive;
  additive.interactions = false;
  time_model without{fs, additive};
  without.fit(data, 0.006);
  EXPECT_GT(with.dimension(), without.dimension());
  // Held out: every configuration's true log time.
  double se_with = 0, se_without = 0;
  for (const auto& c : candidates) {
    auto x = fs.point(task, c);
    se_with += std::pow(with.predict(x).mean - truth_log_time(c), 2);
    se_without += std::pow(without.predict(x).mean - truth_log_time(c), 2);
  }
  double rmse_with = std::sqrt(se_with / static_cast<double>(candidates.size()));
  double rmse_without = std::sqrt(se_without / static_cast<double>(candidates.size()));
  EXPECT_LT(rmse_with, 0.02) << rmse_with;
  EXPECT_LT(rmse_with, rmse_without) << rmse_with << " vs " << rmse_without;
  // The checkpointing penalty, alone: exp(0.25) slower.
  auto base = baseline_configuration(task);
  auto ck = base;
  ck.knobs["checkpointing"] = true;
  EXPECT_NEAR(with.predict(fs.point(task, ck)).mean - with.predict({}).mean, 0.25, 0.02);
  // The trend carries to an untried value: micro-batch 8 never measured alone still predicts
  // about -0.36 (3 doublings x -0.12).
  auto mb8 = base;
  mb8.knobs["micro_batch"] = std::int64_t{8};
  EXPECT_NEAR(with.predict(fs.point(task, mb8)).mean, -0.36, 0.03);
}

// The posterior covariance is inverted from the precision's Cholesky factor by the potri route
// (inverse_from_cholesky): the same matrix as solving P X = I with the factor, to rounding, at
// sizes below, at and across the 48-column block.
TEST(TimeModel, InverseFromTheCholeskyFactorIsTheSolve) {
  splitmix64 rng{3};
  for (int d : {1, 2, 47, 48, 49, 97, 130}) {
    Eigen::MatrixXd a(d, d);
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j)
        a(i, j) = static_cast<double>(rng.next() >> 11) / 9007199254740992.0 - 0.5;
    // Sparse-ish like a Gram matrix of one-hot features: a third of the entries zero.
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j)
        if ((i * 7 + j * 3) % 3 == 0)
          a(i, j) = 0;
    Eigen::MatrixXd p = a * a.transpose() + 0.1 * Eigen::MatrixXd::Identity(d, d);
    Eigen::LLT<Eigen::MatrixXd> llt(p);
    ASSERT_EQ(llt.info(), Eigen::Success);
    Eigen::MatrixXd solved = llt.solve(Eigen::MatrixXd::Identity(d, d));
    Eigen::MatrixXd inv = inverse_from_cholesky(llt.matrixLLT());
    double scale = solved.cwiseAbs().maxCoeff();
    EXPECT_LT((inv - solved).cwiseAbs().maxCoeff(), 1e-10 * scale) << "d = " << d;
    EXPECT_EQ((inv - inv.transpose()).cwiseAbs().maxCoeff(), 0.0) << "d = " << d; // symmetric
    EXPECT_LT((p * inv - Eigen::MatrixXd::Identity(d, d)).cwiseAbs().maxCoeff(), 1e-8) << d;
  }
}

// Neighbours of one configuration are predicted from the features that differ
// (time_model::predict_near): the mean bit for bit, the sd to rounding, for every one-setting
// change and for a configuration far from the centre (the fallback to predict).
TEST(TimeModel, PredictionNearACentreIsThePrediction) {
  auto task = toy_task();
  feature_space fs{task, nullptr};
  time_model model{fs};
  model.fit(random_toy_data(task, fs, 25, 17), 0.01);
  auto centre_config = baseline_configuration(task);
  centre_config.knobs["micro_batch"] = std::int64_t{4};
  centre_config.knobs["overlap"] = true;
  centre_config.patches = {"fused_a"};
  time_model::centre centre;
  model.prepare_centre(fs.point(task, centre_config), centre);
  int compared = 0;
  auto check = [&](const configuration& c) {
    auto x = fs.point(task, c);
    auto near = model.predict_near(centre, x);
    auto full = model.predict(x);
    EXPECT_EQ(near.mean, full.mean) << c.key();
    EXPECT_NEAR(near.sd, full.sd, 1e-12) << c.key();
    EXPECT_GT(full.sd, 0.0);
    ++compared;
  };
  check(centre_config);
  for (const auto& k : task.knobs)
    for (const auto& v : k.type == knob_type::boolean ? std::vector<knob_value>{false, true}
                                                      : k.values) {
      auto c = centre_config;
      c.knobs[k.name] = v;
      check(c);
    }
  for (const char* p : {"fused_a", "fused_b"}) {
    auto c = centre_config;
    auto it = std::find(c.patches.begin(), c.patches.end(), p);
    if (it == c.patches.end())
      c.patches.emplace_back(p);
    else
      c.patches.erase(it);
    std::sort(c.patches.begin(), c.patches.end());
    check(c);
  }
  // Far: every setting changed.
  auto far = baseline_configuration(task);
  far.knobs["micro_batch"] = std::int64_t{8};
  far.knobs["checkpointing"] = true;
  far.knobs["graphs"] = true;
  far.knobs["bucket"] = std::int64_t{160};
  far.patches = {"fused_b"};
  check(far);
  EXPECT_EQ(compared, 1 + 4 + 2 + 2 + 2 + 3 + 2 + 1);
}

TEST(PriorRevision, MovesAWrongPriorTowardTheTruthAndRanksBetter) {
  auto task = toy_task();
  // Wrong priors: checkpointing "1.3x faster" (truth: 0.78x), fused_a "0.8x" (truth 1.16x),
  // overlap "0.9x" (truth 1.105x), fused_b "1.2x" (truth 0.96x).
  prior_set priors;
  priors.settings.push_back({"checkpointing", true, 1.3, 0, "test"});
  priors.settings.push_back({"overlap", true, 0.9, 0, "test"});
  priors.patches.push_back({"fused_a", 0.8, 0, "test"});
  priors.patches.push_back({"fused_b", 1.2, 0, "test"});
  splitmix64 rng{5};
  auto base = baseline_configuration(task);
  std::vector<trial_record> history;
  for (int i = 0; i < 3; ++i)
    history.push_back(run_toy(base, static_cast<std::uint64_t>(i), "baseline", rng));
  auto candidates = enumerate_candidates(task, 0);
  for (int i = 0; i < 30; ++i)
    history.push_back(run_toy(candidates[rng.below(candidates.size())],
                              static_cast<std::uint64_t>(3 + i), "explore", rng));
  auto rev = revise_priors(task, priors, history, 0.006);
  EXPECT_EQ(rev.trials, 30u);
  std::map<std::string, double> truth = {{"checkpointing=true", std::exp(-0.25)},
                                         {"overlap=true", std::exp(0.10)},
                                         {"+fused_a", std::exp(0.15)},
                                         {"+fused_b", std::exp(-0.04)}};
  std::size_t checked = 0;
  for (const auto& e : rev.effects) {
    auto it = truth.find(e.feature);
    if (it == truth.end())
      continue;
    ++checked;
    ASSERT_TRUE(e.has_prior);
    double before = std::abs(std::log(e.prior_speedup / it->second));
    double after = std::abs(std::log(e.posterior_speedup / it->second));
    EXPECT_LT(after, 0.25 * before) << e.feature << ": prior " << e.prior_speedup << ", posterior "
                                    << e.posterior_speedup << ", truth " << it->second;
  }
  EXPECT_EQ(checked, 4u);
  // The priors rank the measured speedups backwards; the revised model ranks them well.
  EXPECT_LT(rev.spearman_prior, 0.0) << rev.spearman_prior;
  EXPECT_GT(rev.spearman_posterior, 0.6) << rev.spearman_posterior;
}

/// Runs `policy` for `trials` search trials on the toy task from 3 baselines.
std::vector<trial_record> search(const planner_policy& policy, std::uint64_t seed, int trials,
                                 double capacity = 0, std::vector<std::string>* reasons = nullptr) {
  auto task = toy_task();
  prior_set priors;
  splitmix64 noise{seed * 7 + 1};
  planner_input in;
  in.task = &task;
  in.priors = &priors;
  in.seed = seed;
  in.noise_log_sd = 0.006;
  in.initial_design = 4;
  in.memory_capacity_bytes = capacity;
  auto base = baseline_configuration(task);
  for (int i = 0; i < 3; ++i)
    in.history.push_back(run_toy(base, static_cast<std::uint64_t>(i), "baseline", noise, capacity));
  for (int i = 0; i < trials; ++i) {
    auto batch = policy.plan(in, 1);
    if (batch.proposals.empty())
      break;
    if (reasons != nullptr)
      reasons->push_back(batch.proposals[0].config.key() + " " + batch.proposals[0].reason);
    in.history.push_back(run_toy(batch.proposals[0].config, in.history.size(), "explore", noise,
                                 capacity));
  }
  return in.history;
}

TEST(BayesEi, IdenticalSeedsGiveIdenticalProposals) {
  for (const auto& name : policy_names()) {
    auto a = make_policy(name);
    auto b = make_policy(name);
    ASSERT_TRUE(a && b) << name;
    std::vector<std::string> ra, rb;
    search(*a, 3, 12, 5e9, &ra);
    search(*b, 3, 12, 5e9, &rb);
    ASSERT_FALSE(ra.empty()) << name;
    EXPECT_EQ(ra, rb) << name; // configurations and reasons, byte for byte
  }
  // The seed matters where the policy draws at random.
  std::vector<std::string> r3, r4;
  search(random_search{}, 3, 8, 0, &r3);
  search(random_search{}, 4, 8, 0, &r4);
  EXPECT_NE(r3, r4);
}

TEST(BayesEi, FindsTheToyOptimumAndNeverRepeatsAConfiguration) {
  bayes_ei policy;
  auto history = search(policy, 1, 30, 5e9);
  std::set<std::string> keys;
  double best = 1e9;
  for (const auto& t : history) {
    if (t.purpose != "explore")
      continue;
    EXPECT_TRUE(keys.insert(t.config.key()).second) << t.config.key();
    if (t.usable())
      best = std::min(best, truth_log_time(t.config));
  }
  // Optimum under 5 GB: micro-batch 4 (3.75 GB) without checkpointing, overlap, graphs, fused_a:
  // -0.24 - 0.10 - 0.05 - 0.08 - 0.15 = -0.62 (bucket does nothing).
  EXPECT_NEAR(best, -0.62, 1e-9);
}

TEST(BayesEi, PairsAMemoryHungrySettingWithTheSaverThatMakesItFit) {
  auto task = toy_task();
  task.patches.clear(); // micro-batch and checkpointing only
  task.knobs.resize(2);
  prior_set priors;
  splitmix64 noise{2};
  planner_input in;
  in.task = &task;
  in.priors = &priors;
  in.noise_log_sd = 0.006;
  in.initial_design = 0;
  // Micro-batch 4 (3.75 GB) and 8 (5.4 GB) do not fit, with checkpointing (1.9, 2.7 GB) they do.
  in.memory_capacity_bytes = 3.0e9;
  auto base = baseline_configuration(task);
  auto with = [&](configuration c, const char* k, knob_value v) {
    c.knobs[k] = std::move(v);
    return c;
  };
  std::uint64_t id = 0;
  for (int i = 0; i < 3; ++i)
    in.history.push_back(run_toy(base, id++, "baseline", noise, in.memory_capacity_bytes));
  for (auto c : {with(base, "micro_batch", std::int64_t{2}), with(base, "checkpointing", true)})
    in.history.push_back(run_toy(c, id++, "explore", noise, in.memory_capacity_bytes));
  bayes_ei policy;
  auto batch = policy.plan(in, 1);
  ASSERT_EQ(batch.proposals.size(), 1u);
  const auto& p = batch.proposals[0];
  EXPECT_GE(std::get<std::int64_t>(p.config.knobs.at("micro_batch")), 4) << p.config.key();
  EXPECT_TRUE(std::get<bool>(p.config.knobs.at("checkpointing"))) << p.config.key();
  EXPECT_NE(p.reason.find("paired "), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("micro_batch 1->"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("with checkpointing false->true (fitted memory x0.5"), std::string::npos)
    << p.reason;
  ASSERT_TRUE(p.p_oom.has_value());
  EXPECT_LT(*p.p_oom, 0.5) << p.reason; // the hungry configuration alone: > 0.5
  EXPECT_LE(truth_memory(p.config), in.memory_capacity_bytes);
  std::cout << p.reason << "\n";
}

TEST(BayesEi, StopsWhenNothingLeftCanBeatTheMinimumDetectableSpeedup) {
  // Switch a does nothing, switch b is 40 % faster. Only a+b is left once both were tried; its
  // EI (the interaction prior's sd 0.1 x phi(0) = 0.040) is below log(1.05) = 0.049: stop.
  task_spec task;
  task.name = "two";
  task.knobs = {bool_knob("a"), bool_knob("b")};
  prior_set priors;
  planner_input in;
  in.task = &task;
  in.priors = &priors;
  in.noise_log_sd = 0.005;
  in.min_detectable_speedup = 1.05;
  in.initial_design = 0;
  auto make = [](bool a, bool b, double t, const char* purpose) {
    trial_record r;
    r.config.knobs = {{"a", a}, {"b", b}};
    r.purpose = purpose;
    r.finished = r.verified = true;
    r.outcome = trial_outcome::ok;
    r.timed_step_time_s = t;
    return r;
  };
  in.history = {make(false, false, 1.0, "baseline"), make(false, false, 1.0, "baseline"),
                make(true, false, 1.0, "explore")};
  bayes_ei policy;
  auto batch = policy.plan(in, 1);
  ASSERT_EQ(batch.proposals.size(), 1u) << batch.stop_reason; // b was never tried: no stop
  in.history.push_back(make(false, true, 0.6, "explore"));
  batch = policy.plan(in, 1);
  EXPECT_TRUE(batch.proposals.empty());
  EXPECT_NE(batch.stop_reason.find("below log(min detectable speedup 1.0500)"), std::string::npos)
    << batch.stop_reason;
  // A finer doctor (1 %) keeps searching; after a+b nothing is left.
  in.min_detectable_speedup = 1.01;
  batch = policy.plan(in, 1);
  ASSERT_EQ(batch.proposals.size(), 1u) << batch.stop_reason;
  EXPECT_EQ(batch.proposals[0].config.key(), "a=true,b=true|");
  EXPECT_NEAR(batch.proposals[0].predicted_speedup, 1.0 / 0.6, 0.02);
  in.history.push_back(make(true, true, 0.6, "explore"));
  batch = policy.plan(in, 1);
  EXPECT_TRUE(batch.proposals.empty());
  EXPECT_EQ(batch.stop_reason, "the search space is exhausted");
}

TEST(BayesEi, APatchThatCrashedIsBlamedAndNotProposedAgain) {
  // The real-workload benchmark's failure: a patch that crashes the job (cheat_loss_drift at
  // world size 2) with a tempting prior. Once it crashed as the only untested patch of a trial,
  // no proposal may carry it again.
  auto task = toy_task();
  prior_set priors;
  priors.patches.push_back({"fused_b", 2.0, 0, "test"}); // "2x faster"
  splitmix64 noise{9};
  planner_input in;
  in.task = &task;
  in.priors = &priors;
  in.noise_log_sd = 0.006;
  in.initial_design = 0;
  auto base = baseline_configuration(task);
  for (std::uint64_t i = 0; i < 3; ++i)
    in.history.push_back(run_toy(base, i, "baseline", noise));
  bayes_ei policy;
  auto first = policy.plan(in, 1);
  ASSERT_EQ(first.proposals.size(), 1u);
  ASSERT_EQ(first.proposals[0].config.patches, std::vector<std::string>{"fused_b"})
    << first.proposals[0].config.key(); // the prior makes it the best bet
  trial_record crashed;
  crashed.trial_id = 3;
  crashed.purpose = "explore";
  crashed.config = first.proposals[0].config;
  crashed.finished = crashed.verified = true;
  crashed.outcome = trial_outcome::crash;
  in.history.push_back(crashed);
  for (int i = 0; i < 10; ++i) {
    auto batch = policy.plan(in, 1);
    ASSERT_EQ(batch.proposals.size(), 1u);
    const auto& c = batch.proposals[0].config;
    EXPECT_EQ(std::count(c.patches.begin(), c.patches.end(), "fused_b"), 0) << c.key();
    in.history.push_back(run_toy(c, 4 + static_cast<std::uint64_t>(i), "explore", noise));
  }
}

TEST(Baselines, GreedyMovesFromTheIncumbentOneCoordinateAtATime) {
  greedy_coordinate policy;
  std::vector<std::string> reasons;
  auto history = search(policy, 1, 10, 0, &reasons);
  auto task = toy_task();
  // Every proposal is one change away from the fastest configuration measured before it.
  for (std::size_t i = 3; i < history.size(); ++i) {
    const trial_record* inc = nullptr;
    for (std::size_t j = 0; j < i; ++j)
      if (history[j].usable() && (inc == nullptr || history[j].timed_step_time_s < inc->timed_step_time_s))
        inc = &history[j];
    ASSERT_NE(inc, nullptr);
    EXPECT_EQ(hamming(history[i].config, inc->config), 1u) << history[i].config.key();
  }
}

} // namespace
} // namespace infrarsi::tuning
