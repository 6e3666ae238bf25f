// The analytic layout prior (tuning/layout_prior.hpp): its formulas against the papers'
// closed forms, its legality rules, and what the planner learns from OOMs alone (no measured
// peak memory: a GPU job whose host RSS is not its device memory).

#include "tuning/layout_prior.hpp"

#include <cmath>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tuning/bayes_policy.hpp"
#include "tuning/search_space.hpp"

namespace infrarsi::tuning {
namespace {

knob_spec role_knob(const std::string& name, std::vector<std::int64_t> values,
                    const std::string& role) {
  knob_spec k;
  k.name = name;
  k.role = role;
  k.type = knob_type::integer;
  for (auto v : values)
    k.values.emplace_back(v);
  k.default_value = std::int64_t{values.front()};
  return k;
}

/// GPT-2 medium on 4 nodes x 4 T4-16GB, global batch 32 (the shape of the AMP grid in
/// bench/tables/): tp, pp and micro-batch declared by role.
task_spec gpt2_task(bool with_model = true) {
  task_spec t;
  t.name = "gpt2-t4";
  t.knobs.push_back(role_knob("tp", {1, 2, 4}, "tp"));
  t.knobs.push_back(role_knob("pp", {1, 2, 4, 8, 16}, "pp"));
  t.knobs.push_back(role_knob("micro_batch", {1, 2, 4, 8, 16, 32}, "micro_batch"));
  if (with_model) {
    t.model.declared = true;
    t.model.name = "gpt2-medium";
    t.model.shape = {{"layers", 24}, {"hidden", 1024}, {"heads", 16}, {"seq_len", 1024},
                     {"vocab", 52256}, {"global_batch", 32}};
  }
  t.hardware.declared = true;
  t.hardware.gpu = "T4-16GB";
  t.hardware.gpus_per_node = 4;
  t.hardware.nodes = 4;
  t.hardware.interconnect = "pcie+ethernet";
  t.hardware.inter_node_bytes_per_s = 6.25e9;
  t.limits.device_memory_bytes = std::uint64_t{16} << 30;
  return t;
}

knob_assignment layout(std::int64_t tp, std::int64_t pp, std::int64_t mb) {
  return {{"tp", tp}, {"pp", pp}, {"micro_batch", mb}};
}

TEST(LayoutPrior, ComputeIsNarayanansFlopCountOverTheGpusAtTheModelledEfficiency) {
  auto task = gpt2_task();
  std::string why;
  auto prior = layout_prior::from_task(task, why);
  ASSERT_TRUE(prior) << why;
  // 12 L h^2 + V h parameters (tied embeddings): 355.5 M for GPT-2 medium.
  EXPECT_NEAR(prior->parameters(), 12.0 * 24 * 1024.0 * 1024 + 52256.0 * 1024, 1.0);
  EXPECT_DOUBLE_EQ(prior->peak_flops(), 65e12);
  auto e = prior->estimate(layout(1, 1, 1));
  ASSERT_TRUE(e.valid) << e.why_invalid;
  // Narayanan et al. 2021: 72 B s L h^2 (1 + s/(6h) + V/(12 L h)) FLOPs per step without
  // recomputation, spread over 16 GPUs; efficiency 0.5 x n/(n+128) x w/(w+128), n = 1024 tokens,
  // w = 1024 columns.
  const double B = 32, s = 1024, L = 24, h = 1024, V = 52256;
  const double flops = 72.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * L * h));
  const double eff = 0.5 * (1024.0 / 1152.0) * (1024.0 / 1152.0);
  EXPECT_NEAR(e.compute_s, flops / 16.0 / (65e12 * eff), 1e-9 * e.compute_s);
  EXPECT_EQ(e.bubble_s, 0.0);
  EXPECT_EQ(e.tp_comm_s, 0.0);
  EXPECT_EQ(e.dp, 16);
  EXPECT_EQ(e.micro_batches, 2);
  // The data-parallel ring over 16 ranks on 4 nodes: 2 x 15/16 x 2 bytes x the parameters over a
  // node's 6.25 GB/s.
  EXPECT_NEAR(e.dp_comm_s, 2.0 * 15.0 / 16.0 * 2.0 * prior->parameters() / 6.25e9,
              1e-9 * e.dp_comm_s);
}

TEST(LayoutPrior, PipelineBubbleIsPMinusOneOverMOfTheComputeAndInterleavingDividesIt) {
  auto task = gpt2_task();
  std::string why;
  auto prior = layout_prior::from_task(task, why);
  ASSERT_TRUE(prior) << why;
  auto e = prior->estimate(layout(1, 4, 1)); // dp 4, m = 32 / 4 = 8 micro-batches
  ASSERT_TRUE(e.valid);
  EXPECT_EQ(e.micro_batches, 8);
  EXPECT_NEAR(e.bubble_s / e.compute_s, 3.0 / 8.0, 1e-12);
  EXPECT_GT(e.pp_comm_s, 0.0);
  // The prior's ranking on the AMP grid's shape: small micro-batches over 4-8 stages beat the
  // user's start (tp 1, pp 1, micro-batch 1), whose 16-way gradient all-reduce crosses the
  // 50 Gb/s network; a micro-batch that leaves one micro-batch per pipeline fills it with bubble.
  auto start = prior->estimate(layout(1, 1, 1));
  EXPECT_LT(e.step_time_s, start.step_time_s);
  auto one_microbatch = prior->estimate(layout(1, 2, 16)); // dp 8, m = 32 / 128 -> invalid
  EXPECT_FALSE(one_microbatch.valid);
  auto m1 = prior->estimate(layout(1, 2, 4)); // dp 8, m = 1: bubble = compute
  ASSERT_TRUE(m1.valid);
  EXPECT_NEAR(m1.bubble_s, m1.compute_s, 1e-12);
}

TEST(LayoutPrior, ActivationMemoryFollowsKorthikantiAndStatesFollowZero) {
  auto task = gpt2_task();
  std::string why;
  auto prior = layout_prior::from_task(task, why);
  ASSERT_TRUE(prior) << why;
  const double s = 1024, h = 1024, a = 16, L = 24, V = 52256;
  for (std::int64_t b : {1, 2}) {
    auto e = prior->estimate(layout(1, 1, b));
    ASSERT_TRUE(e.valid);
    // Table 2 of Korthikanti et al. 2022, no parallelism: s b h (34 + 5 a s / h) per layer; the
    // logits 4 s b V; mixed-precision Adam 16 bytes per parameter (ZeRO stage 0).
    const double act = L * s * b * h * (34.0 + 5.0 * a * s / h) + 4.0 * s * b * V;
    EXPECT_NEAR(e.activation_bytes, act, 1e-6 * act);
    EXPECT_NEAR(e.model_state_bytes, 16.0 * prior->parameters(), 1.0);
    EXPECT_NEAR(e.peak_memory_bytes, e.model_state_bytes + e.activation_bytes + 1024.0 * 1024 * 1024,
                1.0);
  }
  // Tensor parallelism divides the states and most activations: tp 4 needs less than tp 1.
  EXPECT_LT(prior->estimate(layout(4, 1, 2)).peak_memory_bytes,
            prior->estimate(layout(1, 1, 2)).peak_memory_bytes);
  // ZeRO-1 shards the 12 optimizer bytes over the data-parallel ranks.
  auto zero = task;
  knob_spec z = role_knob("zero", {0, 1}, "zero_stage");
  zero.knobs.push_back(z);
  auto zp = layout_prior::from_task(zero, why);
  ASSERT_TRUE(zp);
  auto k = layout(1, 1, 1);
  k["zero"] = std::int64_t{1};
  EXPECT_NEAR(zp->estimate(k).model_state_bytes, (4.0 + 12.0 / 16.0) * zp->parameters(), 1.0);
}

TEST(LayoutPrior, IllegalLayoutsAreInvalidWithTheReason) {
  auto task = gpt2_task();
  std::string why;
  auto prior = layout_prior::from_task(task, why);
  ASSERT_TRUE(prior);
  auto heads = task;
  heads.model.shape["heads"] = 6;
  auto hp = layout_prior::from_task(heads, why);
  ASSERT_TRUE(hp);
  auto e = hp->estimate(layout(4, 1, 1));
  EXPECT_FALSE(e.valid);
  EXPECT_EQ(e.why_invalid, "6 heads are not divisible by tp 4");
  e = prior->estimate(layout(1, 1, 4)); // 4 x 16 does not divide 32
  EXPECT_FALSE(e.valid);
  EXPECT_EQ(e.why_invalid, "global batch 32 is not divisible by micro-batch x dp = 64");
  e = prior->estimate(layout(4, 8, 1)); // 32 GPUs > 16
  EXPECT_FALSE(e.valid);
  EXPECT_EQ(e.why_invalid, "16 GPUs are not divisible by tp x pp x cp = 32");
}

TEST(LayoutPrior, ATaskWithoutRolesModelOrKnownGpuHasNone) {
  std::string why;
  auto no_model = gpt2_task(false);
  EXPECT_FALSE(layout_prior::from_task(no_model, why));
  EXPECT_EQ(why, "the task has no [model] table");
  auto no_roles = gpt2_task();
  for (auto& k : no_roles.knobs)
    k.role.clear();
  EXPECT_FALSE(layout_prior::from_task(no_roles, why));
  EXPECT_EQ(why, "no knob declares a layout role");
  auto unknown = gpt2_task();
  unknown.hardware.gpu = "RTX4090";
  EXPECT_FALSE(layout_prior::from_task(unknown, why));
  unknown.hardware.peak_tflops = 165.0;
  EXPECT_TRUE(layout_prior::from_task(unknown, why));
  EXPECT_DOUBLE_EQ(gpu_peak_tflops("A100-SXM4-80GB"), 312.0);
  EXPECT_DOUBLE_EQ(gpu_peak_tflops("H100-PCIe"), 756.0);
  EXPECT_DOUBLE_EQ(gpu_peak_tflops("V100-16GB"), 125.0);
  EXPECT_DOUBLE_EQ(gpu_peak_tflops("T4"), 65.0);
  EXPECT_DOUBLE_EQ(gpu_peak_tflops("RTX4090"), 0.0);
}

TEST(LayoutPrior, ARoleImpliesItsMemoryTag) {
  auto task = gpt2_task();
  EXPECT_TRUE(has_tag(task.knobs[2], "memory-hungry")); // micro_batch
  EXPECT_TRUE(has_tag(task.knobs[0], "memory-saver"));  // tp
  EXPECT_FALSE(has_tag(task.knobs[0], "memory-hungry"));
}

// --- learning from OOMs alone ------------------------------------------------------------------

trial_record done(std::uint64_t id, const configuration& c, const char* purpose,
                  trial_outcome outcome, double step_s) {
  trial_record r;
  r.trial_id = id;
  set_purpose_text(r, purpose);
  r.config = c;
  r.dispatched = true;
  r.finished = true;
  r.verified = true;
  r.outcome = outcome;
  r.timed_step_time_s = outcome == trial_outcome::ok ? step_s : 0.0;
  return r; // peak_memory_bytes 0: unobserved
}

configuration config_of(const task_spec& task, std::int64_t tp, std::int64_t pp,
                        std::int64_t mb) {
  auto c = baseline_configuration(task);
  c.knobs["tp"] = tp;
  c.knobs["pp"] = pp;
  c.knobs["micro_batch"] = mb;
  return c;
}

/// Three baselines that report no memory, and OOMs of micro-batch 16 at pp 8 and pp 16 (both legal
/// layouts of the 16 GPUs and the global batch of 32, and both failed runs of the AMP grid).
std::vector<trial_record> two_ooms(const task_spec& task) {
  std::vector<trial_record> h;
  auto base = baseline_configuration(task);
  for (std::uint64_t i = 0; i < 3; ++i)
    h.push_back(done(i, base, "baseline", trial_outcome::ok, 1.3));
  h.push_back(done(3, config_of(task, 1, 8, 16), "explore", trial_outcome::oom, 0));
  h.push_back(done(4, config_of(task, 1, 16, 16), "explore", trial_outcome::oom, 0));
  return h;
}

TEST(OomsAlone, TwoOomsAtMicroBatch16MakeEveryLargerMicroBatchLikelyToRunOutOfMemory) {
  // Without [model] (no analytic prior) the micro-batch's role makes it memory-hungry and the
  // censored model is fitted from the OOMs alone; with it, the OOMs revise the prior's memory.
  for (bool with_model : {false, true}) {
    SCOPED_TRACE(with_model ? "with the analytic prior" : "without [model]");
    auto task = gpt2_task(with_model);
    feature_space fs{task, nullptr};
    auto h = two_ooms(task);
    std::string why;
    auto prior = layout_prior::from_task(task, why);
    auto offset = [&](const configuration& c) {
      if (!prior)
        return 0.0;
      auto e = prior->estimate(c.knobs);
      EXPECT_TRUE(e.valid) << c.key() << ": " << e.why_invalid;
      return std::log(e.peak_memory_bytes);
    };
    std::vector<sparse_features> point;
    std::vector<double> offsets;
    for (const auto& t : h) {
      point.push_back(fs.point(task, t.config));
      offsets.push_back(offset(t.config));
    }
    const double capacity = 16.0 * 1024 * 1024 * 1024;
    auto m = fit_run_memory(task, fs, h, point, nullptr, capacity,
                            memory_options_for(default_policy_name), prior ? &offsets : nullptr);
    ASSERT_TRUE(m.fitted) << m.why;
    auto p = [&](std::int64_t tp, std::int64_t pp, std::int64_t mb) {
      auto c = config_of(task, tp, pp, mb);
      return m.p_oom_point(fs.point(task, c), fs.model_size(), offset(c));
    };
    // Every larger micro-batch with the other settings of an OOM: the legal layouts (with the
    // prior) or all of them (without it: the features know no legality).
    std::vector<std::array<std::int64_t, 2>> larger = {{16, 32}};
    if (!with_model)
      larger.push_back({8, 32});
    for (auto [pp, mb] : larger) {
      if (with_model && !prior->estimate(config_of(task, 1, pp, mb).knobs).valid)
        continue;
      SCOPED_TRACE("pp " + std::to_string(pp) + " micro-batch " + std::to_string(mb));
      EXPECT_GT(p(1, pp, mb), 0.8);
      // The policy's own rule agrees: at least as hungry by the roles' tags as an OOM.
      auto monotone = memory_options_for(default_policy_name);
      monotone.monotone = true;
      auto mm = fit_run_memory(task, fs, h, point, nullptr, capacity, monotone,
                               prior ? &offsets : nullptr);
      EXPECT_EQ(mm.p_oom(task, fs, config_of(task, 1, pp, mb)), 1.0);
    }
    // The user's start (micro-batch 1) ran: it stays likelier to fit than the OOM'd layouts.
    EXPECT_LT(p(1, 1, 1), p(1, 8, 16));
    EXPECT_LT(p(1, 1, 1), 0.5);
    EXPECT_LT(p(1, 4, 1), 0.5);
  }
}

TEST(OomsAlone, TheInitialDesignSpendsAtMostOneTrialOverThePriorsCapacity) {
  // With the analytic prior and no memory ever measured, the four initial-design proposals of
  // the default policy: at most one that the prior puts over the GPU's memory.
  auto task = gpt2_task();
  task.constraints.push_back("16 % (tp * pp) == 0");
  task.constraints.push_back("32 % (micro_batch * (16 / (tp * pp))) == 0");
  std::string why;
  auto prior = layout_prior::from_task(task, why);
  ASSERT_TRUE(prior);
  auto policy = make_policy(default_policy_name);
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    planner_input in;
    in.task = &task;
    in.seed = seed;
    in.noise_log_sd = 0.01;
    in.initial_design = 4;
    in.search_budget = 10;
    in.memory_capacity_bytes = 16.0 * 1024 * 1024 * 1024;
    auto base = baseline_configuration(task);
    for (std::uint64_t i = 0; i < 3; ++i)
      in.history.push_back(done(i, base, "baseline", trial_outcome::ok, 1.3));
    auto batch = policy->plan(in, 4);
    ASSERT_EQ(batch.proposals.size(), 4u) << batch.stop_reason;
    int over = 0;
    for (const auto& p : batch.proposals) {
      auto e = prior->estimate(p.config.knobs);
      ASSERT_TRUE(e.valid) << p.config.key();
      over += e.peak_memory_bytes > in.memory_capacity_bytes ? 1 : 0;
      // The prior's P(OOM) is reported with each proposal.
      ASSERT_TRUE(p.p_oom.has_value());
    }
    EXPECT_LE(over, 1) << "seed " << seed;
    // The first proposal is the layout the prior ranks fastest among those it predicts to fit.
    EXPECT_EQ(batch.proposals.front().config.key(), "micro_batch=1,pp=4,tp=1|");
  }
}

} // namespace
} // namespace infrarsi::tuning
