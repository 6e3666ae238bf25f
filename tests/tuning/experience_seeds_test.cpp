// tuning::seed_refusal: an experience seed is proposed, or refused with the reason the report
// shows (issue 16): outside the task's space, the baseline, a broken constraint, an excluded
// patch, as hungry as an OOM.

#include "tuning/experience_seeds.hpp"

#include <gtest/gtest.h>

#include "toy_knobs.hpp"

namespace infrarsi::tuning {
namespace {

using test_knobs::bool_knob;
using test_knobs::int_knob;

task_spec toy_task() {
  task_spec t;
  t.name = "seeds";
  t.knobs = {int_knob("tp", {1, 2, 4}, 1, {"parallelism", "memory-saver"}),
             int_knob("micro_batch", {1, 2, 4}, 1, {"memory-hungry"}), bool_knob("cuda_graphs")};
  t.constraints = {"tp * micro_batch <= 8"};
  patch_spec p;
  p.name = "fused";
  t.patches = {p};
  return t;
}

configuration config(std::int64_t tp, std::int64_t mb, bool graphs,
                     std::vector<std::string> patches = {}) {
  configuration c;
  c.knobs = {
      {"tp", knob_value{tp}}, {"micro_batch", knob_value{mb}}, {"cuda_graphs", knob_value{graphs}}};
  c.patches = std::move(patches);
  return c;
}

struct fixture {
  task_spec task = toy_task();
  prior_set priors;
  planner_input in;
  fixture() {
    in.task = &task;
    in.priors = &priors;
  }
};

TEST(SeedRefusal, AnAdmissibleSeedHasNoReason) {
  fixture f;
  EXPECT_EQ(seed_refusal(f.in, config(2, 2, true, {"fused"}), "bayes_ei/1"), "");
}

TEST(SeedRefusal, EachReasonNamesWhatIsWrong) {
  fixture f;
  auto why = [&](const configuration& c) { return seed_refusal(f.in, c, "bayes_ei/1"); };
  EXPECT_EQ(why(config(4, 4, false))
                .rfind("it breaks a constraint: constraint 'tp * micro_batch <= 8'", 0),
            0u)
      << why(config(4, 4, false));
  EXPECT_EQ(why(config(1, 1, false)), "it is the baseline configuration (the doctor measures it)");
  EXPECT_EQ(why(config(3, 1, false)),
            "not in this task's search space: knob 'tp' value 3 is not among its searched values");
  auto extra = config(2, 1, false);
  extra.knobs["pp"] = knob_value{std::int64_t{2}};
  EXPECT_EQ(why(extra), "not in this task's search space: the task has no knob 'pp'");
  EXPECT_EQ(why(config(2, 1, false, {"other"})),
            "not in this task's search space: the task has no patch 'other'");
  f.in.excluded_patches = {"fused"};
  EXPECT_EQ(why(config(2, 1, false, {"fused"})).rfind("patch 'fused' is excluded", 0), 0u);
}

TEST(SeedRefusal, ASeedAsHungryAsAnOomIsRefused) {
  fixture f;
  trial_record oom;
  oom.trial_id = 3;
  oom.purpose = "explore";
  oom.config = config(1, 2, false);
  oom.finished = true;
  oom.outcome = trial_outcome::oom;
  f.in.history.push_back(oom);
  // micro_batch 4 at the same tp is at least as hungry; tp 2 (a memory saver) is not.
  auto hungry = seed_refusal(f.in, config(1, 4, false), "bayes_ei/1");
  EXPECT_NE(hungry.find("memory-hungry"), std::string::npos) << hungry;
  EXPECT_EQ(seed_refusal(f.in, config(1, 2, false), "bayes_ei/1"),
            "it was tried in this run already");
}

} // namespace
} // namespace infrarsi::tuning
