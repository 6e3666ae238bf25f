// Tests for tuning/planner.cpp: enumeration under constraints, determinism, the rules about what
// is never proposed, the prior-driven initial design and the model-driven local search.

#include "tuning/planner.hpp"
#include "tuning/search_space.hpp"

#include <cmath>
#include <map>
#include <set>

#include <gtest/gtest.h>

namespace infrarsi::tuning {
namespace {

task_spec make_task() {
  task_spec t;
  t.name = "toy";
  knob_spec mb;
  mb.name = "micro_batch";
  mb.type = knob_type::integer;
  mb.values = {std::int64_t{1}, std::int64_t{2}, std::int64_t{4}, std::int64_t{8}};
  mb.default_value = std::int64_t{1};
  mb.tags = {"memory-hungry"};
  knob_spec ws = mb;
  ws.name = "world_size";
  ws.values = {std::int64_t{1}, std::int64_t{2}};
  ws.tags = {};
  knob_spec ckpt;
  ckpt.name = "checkpointing";
  ckpt.type = knob_type::boolean;
  ckpt.default_value = false;
  ckpt.tags = {"memory-saver"};
  knob_spec attn;
  attn.name = "attention";
  attn.type = knob_type::choice;
  attn.values = {std::string{"naive"}, std::string{"fused"}};
  attn.default_value = std::string{"naive"};
  t.knobs = {mb, ws, ckpt, attn};
  t.patches = {{"fused_qkv", "/x", ""}};
  t.constants = {{"global_batch", std::int64_t{8}}};
  t.constraints = {"global_batch % (micro_batch * world_size) == 0"};
  return t;
}

prior_set make_priors() {
  prior_set p;
  p.settings.push_back({"micro_batch", std::int64_t{4}, 1.5, 1e8, "test"});
  p.settings.push_back({"attention", std::string{"fused"}, 1.2, 0, "test"});
  p.patches.push_back({"fused_qkv", 1.1, 0, "test"});
  return p;
}

trial_record measured(const configuration& c, double t, const std::string& purpose = "explore",
                      trial_outcome outcome = trial_outcome::ok) {
  trial_record r;
  r.config = c;
  r.purpose = purpose;
  r.finished = true;
  r.outcome = outcome;
  r.verified = outcome == trial_outcome::ok;
  r.timed_step_time_s = outcome == trial_outcome::ok ? t : 0;
  return r;
}

TEST(Planner, EnumerationRespectsConstraints) {
  auto task = make_task();
  auto all = enumerate_candidates(task, 1);
  // 4 mb x 2 ws x 2 ckpt x 2 attn x 2 patch = 64; mb*ws must divide 8: the 8 configurations
  // with (mb 8, ws 2) are invalid -> 56
  EXPECT_EQ(all.size(), 56u);
  for (const auto& c : all)
    EXPECT_EQ(constraint_violation(task, c), "") << c.key();
  configuration bad = baseline_configuration(task);
  bad.knobs["micro_batch"] = std::int64_t{8};
  bad.knobs["world_size"] = std::int64_t{2};
  EXPECT_EQ(constraint_violation(task, bad),
            "constraint 'global_batch % (micro_batch * world_size) == 0' is false for "
            "global_batch=8, micro_batch=8, world_size=2");
}

TEST(Planner, InitialDesignFollowsPriorsAndIsDiverseAndDeterministic) {
  auto task = make_task();
  auto priors = make_priors();
  planner_input in;
  in.task = &task;
  in.priors = &priors;
  in.history = {measured(baseline_configuration(task), 1.0, "baseline")};
  in.seed = 3;
  seeded_local_search policy;
  auto a = policy.propose(in, 4);
  auto b = policy.propose(in, 4);
  ASSERT_EQ(a.size(), 4u);
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].config.key(), b[i].config.key());
  // Only the baseline has passed: each pick changes one setting. The first is the one the priors
  // like best (micro_batch 4, 1.5x); the design then spreads over other settings.
  EXPECT_EQ(std::get<std::int64_t>(a[0].config.knobs.at("micro_batch")), 4);
  EXPECT_NEAR(a[0].predicted_speedup, 1.5, 1e-9);
  EXPECT_EQ(std::get<std::string>(a[1].config.knobs.at("attention")), "fused");
  for (const auto& p : a) {
    std::size_t changes = p.config.patches.size();
    for (const auto& [k, v] : p.config.knobs)
      changes += v == baseline_configuration(task).knobs.at(k) ? 0 : 1;
    EXPECT_LE(changes, 3u) << p.config.key();
  }
  std::set<std::string> keys;
  for (const auto& p : a)
    keys.insert(p.config.key());
  EXPECT_EQ(keys.size(), 4u);
  EXPECT_EQ(keys.count(baseline_configuration(task).key()), 0u);
}

TEST(Planner, NeverProposesTriedOrOomDominatedConfigurations) {
  auto task = make_task();
  auto priors = make_priors();
  planner_input in;
  in.task = &task;
  in.priors = &priors;
  in.initial_design = 0;
  auto base = baseline_configuration(task);
  in.history = {measured(base, 1.0, "baseline")};
  auto oom = base;
  oom.knobs["micro_batch"] = std::int64_t{4};
  in.history.push_back(measured(oom, 0, "explore", trial_outcome::oom));
  auto saver = base;
  saver.knobs["checkpointing"] = true;
  in.history.push_back(measured(saver, 1.2)); // the memory saver has passed on its own
  seeded_local_search policy;
  auto all = policy.propose(in, 100);
  EXPECT_FALSE(all.empty());
  for (const auto& p : all) {
    EXPECT_NE(p.config.key(), base.key());
    EXPECT_NE(p.config.key(), oom.key());
    // Untagged knobs (world_size, attention) are memory-neutral: only the saver and the patches
    // can make micro_batch >= 4 fit.
    bool same_rest = p.config.knobs.at("checkpointing") == oom.knobs.at("checkpointing")
                     && p.config.patches == oom.patches;
    if (same_rest) {
      EXPECT_LT(std::get<std::int64_t>(p.config.knobs.at("micro_batch")), 4) << p.config.key();
    }
  }
  // The memory saver makes micro_batch 4 eligible again.
  bool saver_pairing = false;
  for (const auto& p : all)
    saver_pairing = saver_pairing
                    || (std::get<std::int64_t>(p.config.knobs.at("micro_batch")) == 4
                        && std::get<bool>(p.config.knobs.at("checkpointing")));
  EXPECT_TRUE(saver_pairing);
}

TEST(Planner, MeasurementsOverrideAWrongPrior) {
  auto task = make_task();
  auto priors = make_priors(); // claims fused attention is 1.2x faster
  planner_input in;
  in.task = &task;
  in.priors = &priors;
  in.initial_design = 0;
  in.noise_log_sd = 0.01;
  auto base = baseline_configuration(task);
  in.history = {measured(base, 1.0, "baseline"), measured(base, 1.0, "baseline")};
  auto fused = base;
  fused.knobs["attention"] = std::string{"fused"};
  in.history.push_back(measured(fused, 1.6)); // measured: much slower
  auto mb2 = base;
  mb2.knobs["micro_batch"] = std::int64_t{2};
  in.history.push_back(measured(mb2, 0.7)); // measured: faster
  seeded_local_search policy;
  auto next = policy.propose(in, 3);
  ASSERT_EQ(next.size(), 3u);
  for (const auto& p : next)
    EXPECT_EQ(std::get<std::string>(p.config.knobs.at("attention")), "naive") << p.config.key();
  EXPECT_NE(next[0].reason.find("local search"), std::string::npos);
}

TEST(Planner, SplitMixIsFullySpecified) {
  splitmix64 r{0};
  EXPECT_EQ(r.next(), 0xE220A8397B1DCDAFull); // reference value of SplitMix64 with seed 0
  splitmix64 s{42};
  for (int i = 0; i < 1000; ++i)
    EXPECT_LT(s.below(7), 7u);
}

// The history is compared by configuration code (config_coder) instead of by key text: over every
// configuration of the toy task (with and without its patch) and some outside the searched values,
// two configurations have the same code iff they have the same key; the history's encoding gives
// each trial the coder's code (or none, and then its key); and a history with them answers
// was_tried exactly as the set of keys does.
TEST(Planner, ConfigurationCodesAgreeWithKeys) {
  auto task = make_task();
  task.patches.push_back({"aa_first", "/y", ""}); // a second patch, before the first by name
  feature_space fs{task, nullptr};
  ASSERT_TRUE(fs.coder.usable);
  auto base = baseline_configuration(task);
  std::vector<configuration> all{base}; // every knob value and patch set (no constraints)
  for (const auto& k : task.knobs) {
    std::vector<configuration> next;
    for (const auto& c : all)
      for (const auto& v : search_values(k)) {
        next.push_back(c);
        next.back().knobs[k.name] = v;
      }
    all = std::move(next);
  }
  for (std::size_t i = 0, n = all.size(); i < n; ++i)
    for (auto patches : std::vector<std::vector<std::string>>{
           {"aa_first"}, {"fused_qkv"}, {"aa_first", "fused_qkv"}}) {
      all.push_back(all[i]);
      all.back().patches = patches;
    }
  ASSERT_EQ(all.size(), 4u * 2 * 2 * 2 * 4); // 4 x 2 x 2 x 2 knob values x 4 patch sets
  auto outside = base;
  outside.knobs["micro_batch"] = std::int64_t{3}; // not a searched value
  auto unknown_patch = base;
  unknown_patch.patches = {"not_in_task"};
  auto unsorted = base;
  unsorted.patches = {"fused_qkv", "aa_first"};
  auto extra_knob = base;
  extra_knob.knobs["threads"] = std::int64_t{2};
  for (const auto* c : {&outside, &unknown_patch, &unsorted, &extra_knob})
    EXPECT_FALSE(fs.coder.code(*c).has_value()) << c->key();
  std::map<std::uint64_t, std::string> key_of_code;
  for (const auto& c : all) {
    auto code = fs.coder.code(c);
    ASSERT_TRUE(code.has_value()) << c.key();
    auto [it, fresh] = key_of_code.emplace(*code, c.key());
    EXPECT_TRUE(fresh) << c.key() << " and " << it->second << " share code " << *code;
  }
  EXPECT_EQ(key_of_code.size(), all.size());
  EXPECT_EQ(*fs.coder.code(base), 0u);

  // Every other configuration of the space is in the history, plus the ones without a code.
  std::vector<trial_record> history;
  std::set<std::string> keys;
  for (std::size_t i = 0; i < all.size(); i += 2) {
    history.push_back(measured(all[i], 1.0));
    keys.insert(all[i].key());
  }
  for (const auto* c : {&outside, &unknown_patch, &unsorted, &extra_knob}) {
    history.push_back(measured(*c, 1.0));
    keys.insert(c->key());
  }
  history_encoding enc{task, fs, history};
  for (std::size_t i = 0; i < history.size(); ++i) {
    auto code = fs.coder.code(history[i].config);
    EXPECT_EQ(enc.codes[i], code ? *code : history_encoding::no_code) << history[i].config.key();
    EXPECT_EQ(enc.keys[i], code ? std::string{} : history[i].config.key());
  }
  history_facts facts{task, fs, history, enc};
  EXPECT_EQ(facts.tried_codes.size(), all.size() / 2);
  EXPECT_EQ(facts.tried.size(), 4u);
  auto probe = all;
  for (const auto* c : {&outside, &unknown_patch, &unsorted, &extra_knob})
    probe.push_back(*c);
  auto outside5 = base;
  outside5.knobs["micro_batch"] = std::int64_t{5};
  probe.push_back(outside5);
  for (const auto& c : probe)
    EXPECT_EQ(facts.was_tried(c, c.key()), keys.count(c.key()) == 1) << c.key();
}

} // namespace
} // namespace infrarsi::tuning

namespace infrarsi::tuning {
namespace {

TEST(Planner, ASettingThatBrokeTheContractIsNotProposedAgain) {
  auto task = make_task();
  auto priors = make_priors();
  planner_input in;
  in.task = &task;
  in.priors = &priors;
  in.initial_design = 0;
  auto base = baseline_configuration(task);
  in.history = {measured(base, 1.0, "baseline")};
  auto drift = base;
  drift.patches = {"fused_qkv"};
  auto bad = measured(drift, 0.5);
  bad.violations = {"loss: step 3 differs"};
  in.history.push_back(bad);
  seeded_local_search policy;
  for (const auto& p : policy.propose(in, 100))
    EXPECT_TRUE(p.config.patches.empty()) << p.config.key();
}

} // namespace
} // namespace infrarsi::tuning

namespace infrarsi::tuning {
namespace {

TEST(Planner, BlameForAViolationGoesOnlyToAnUnambiguousCulprit) {
  auto task = make_task();
  task.patches.push_back({"other_patch", "/y", ""});
  auto priors = make_priors();
  planner_input in;
  in.task = &task;
  in.priors = &priors;
  in.initial_design = 0;
  auto base = baseline_configuration(task);
  in.history = {measured(base, 1.0, "baseline")};
  // Two new settings at once broke the contract: neither is banned (ambiguous).
  auto both = base;
  both.knobs["world_size"] = std::int64_t{2};
  both.patches = {"fused_qkv"};
  auto bad = measured(both, 0.5);
  bad.violations = {"tokens: step 0 reported 2048 tokens"};
  in.history.push_back(bad);
  // world_size=2 passes on its own: now fused_qkv is the only unexplained setting.
  auto ws2 = base;
  ws2.knobs["world_size"] = std::int64_t{2};
  in.history.push_back(measured(ws2, 0.9));
  in.excluded_patches = {"other_patch"};
  seeded_local_search policy;
  auto all = policy.propose(in, 200);
  ASSERT_FALSE(all.empty());
  bool ws2_again = false;
  for (const auto& p : all) {
    EXPECT_TRUE(p.config.patches.empty()) << p.config.key(); // fused_qkv banned, other excluded
    ws2_again = ws2_again || std::get<std::int64_t>(p.config.knobs.at("world_size")) == 2;
  }
  EXPECT_TRUE(ws2_again); // world_size=2 is not blamed
}

} // namespace
} // namespace infrarsi::tuning
