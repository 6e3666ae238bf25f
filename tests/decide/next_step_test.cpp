// The supervisor's step function (decide/next_step.hpp) on run states built step by step: the
// stage order, batches as large as the free slots, losses and re-queues, verdicts before
// proposals, the search stop, ABAB re-verification per candidate.

#include <gtest/gtest.h>

#include "decide/decisions.hpp"
#include "decide/next_step.hpp"
#include "tuning/task.hpp"

namespace infrarsi::decide {
namespace {

using tuning::purpose_kind;

tuning::task_spec small_task() {
  tuning::task_spec t;
  t.name = "t";
  tuning::knob_spec k;
  k.name = "mb";
  k.type = tuning::knob_type::integer;
  k.values = {std::int64_t{1}, std::int64_t{2}, std::int64_t{4}};
  k.default_value = std::int64_t{1};
  t.knobs.push_back(k);
  t.budget.trials = 6;
  t.budget.baseline_repeats = 3;
  t.budget.verify_top = 2;
  t.budget.verify_repeats = 2;
  return t;
}

tuning::trial_record trial(std::uint64_t id, purpose_kind kind, bool finished = true,
                           double time = 1.0) {
  tuning::trial_record r;
  r.trial_id = id;
  r.kind = kind;
  r.purpose = tuning::label(kind);
  r.dispatched = true;
  r.finished = finished;
  r.outcome = finished ? tuning::trial_outcome::ok : tuning::trial_outcome::unset;
  r.verified = finished;
  r.timed_step_time_s = finished ? time : 0.0;
  r.config.knobs["mb"] = std::int64_t{1};
  return r;
}

store::run_state after_init() {
  store::run_state s;
  s.run_id = "r";
  s.stages_started = {"init"};
  s.stages_completed = {"init"};
  s.contract_doc = nlohmann::json{{"policy", "random/1"}};
  s.priors_loaded = true;
  s.experience_seeded = true;
  return s;
}

store::run_state after_doctor() {
  auto s = after_init();
  s.stages_started.push_back("doctor");
  s.stages_completed.push_back("doctor");
  s.stages_started.push_back("run");
  tuning::noise_estimate n;
  n.mean_step_time_s = 1.0;
  n.log_sd = 0.01;
  s.noise = n;
  s.doctor_doc = nlohmann::json::object();
  for (std::uint64_t i = 0; i < 3; ++i)
    s.trials.push_back(trial(i, purpose_kind::baseline));
  return s;
}

step_input slots(std::uint32_t free) {
  step_input in;
  in.free_slots = free;
  return in;
}

TEST(NextStep, ANewRunBeginsWithInit) {
  store::run_state s;
  auto st = next_step(small_task(), s, slots(4));
  EXPECT_EQ(st.kind, step_kind::begin_stage);
  EXPECT_EQ(st.stage, "init");
  s.stages_started = {"init"};
  EXPECT_EQ(next_step(small_task(), s, slots(4)).kind, step_kind::init);
  auto in = slots(4);
  in.busy.exclusive = true;
  EXPECT_EQ(next_step(small_task(), s, in).kind, step_kind::wait);
}

TEST(NextStep, BaselinesRunInParallelOverTheFreeSlots) {
  auto s = after_init();
  s.stages_started.push_back("doctor");
  auto st = next_step(small_task(), s, slots(2));
  ASSERT_EQ(st.kind, step_kind::launch);
  ASSERT_EQ(st.launches.size(), 2u);
  EXPECT_EQ(st.launches[0].trial_id, 0u);
  EXPECT_EQ(st.launches[1].trial_id, 1u);
  EXPECT_EQ(st.launches[1].kind, purpose_kind::baseline);
  // Two running, one slot free: the third baseline.
  s.trials.push_back(trial(0, purpose_kind::baseline, false));
  s.trials.push_back(trial(1, purpose_kind::baseline, false));
  auto in = slots(1);
  in.busy.running = {{0, 0}, {1, 0}};
  st = next_step(small_task(), s, in);
  ASSERT_EQ(st.kind, step_kind::launch);
  ASSERT_EQ(st.launches.size(), 1u);
  EXPECT_EQ(st.launches[0].trial_id, 2u);
  // All three launched and running: wait; all ended: calibrate.
  s.trials.push_back(trial(2, purpose_kind::baseline, false));
  in = slots(0);
  in.busy.running = {{0, 0}, {1, 0}, {2, 0}};
  EXPECT_EQ(next_step(small_task(), s, in).kind, step_kind::wait);
  for (auto& t : s.trials) {
    t.finished = true;
    t.outcome = tuning::trial_outcome::ok;
    t.verified = false;
  }
  EXPECT_EQ(next_step(small_task(), s, slots(3)).kind, step_kind::calibrate);
  // Calibrated: the baselines' verdicts, then the end of the doctor.
  s.doctor_doc = nlohmann::json::object();
  st = next_step(small_task(), s, slots(3));
  ASSERT_EQ(st.kind, step_kind::verify);
  EXPECT_EQ(st.attempts.size(), 3u);
  for (auto& t : s.trials)
    t.verified = true;
  st = next_step(small_task(), s, slots(3));
  EXPECT_EQ(st.kind, step_kind::end_stage);
  EXPECT_EQ(st.stage, "doctor");
}

/// A launch error of the baseline that repeats (same cause up to digits) stops the repeats: the
/// doctor calibrates (and fails naming every attempt) instead of launching the third.
TEST(NextStep, ABaselineLaunchErrorThatRepeatsStopsTheRepeats) {
  auto failed = [](std::uint64_t id, const std::string& detail) {
    auto t = trial(id, purpose_kind::baseline);
    t.outcome = tuning::trial_outcome::launch_error;
    t.verified = false;
    t.timed_step_time_s = 0;
    t.detail = detail;
    return t;
  };
  auto s = after_init();
  s.stages_started.push_back("doctor");
  s.trials.push_back(failed(0, "rank 0: exited with status 3; stderr: no shard /data/7"));
  // One failure: the next repeat runs (a cause seen once may be chance).
  auto st = next_step(small_task(), s, slots(1));
  ASSERT_EQ(st.kind, step_kind::launch);
  EXPECT_EQ(st.launches.at(0).trial_id, 1u);
  EXPECT_EQ(baseline_launch_failure(s), "");
  // A second failure with another cause: still the third repeat.
  s.trials.push_back(failed(1, "rank 0: exited with status 2; stderr: usage: train.py"));
  st = next_step(small_task(), s, slots(1));
  ASSERT_EQ(st.kind, step_kind::launch);
  EXPECT_EQ(st.launches.at(0).trial_id, 2u);
  // The first cause again (other digits): no more repeats; calibrate now.
  s.trials.push_back(failed(2, "rank 0: exited with status 3; stderr: no shard /data/9"));
  EXPECT_EQ(baseline_launch_failure(s),
            "trial 2 attempt 0 ended launch_error with the cause of trial 0 attempt 0: rank 0: "
            "exited with status 3; stderr: no shard /data/9");
  auto t = small_task();
  t.budget.baseline_repeats = 5;
  st = next_step(t, s, slots(1));
  EXPECT_EQ(st.kind, step_kind::calibrate) << st.reason;
  EXPECT_EQ(st.reason.rfind("the baseline does not launch: trial 2 attempt 0", 0), 0u) << st.reason;
  // A baseline that ended ok disarms the rule: the repeats go on.
  s.trials.push_back(trial(3, purpose_kind::baseline));
  EXPECT_EQ(baseline_launch_failure(s), "");
  st = next_step(t, s, slots(1));
  ASSERT_EQ(st.kind, step_kind::launch);
  EXPECT_EQ(st.launches.at(0).trial_id, 4u);
}

TEST(NextStep, AnOrphanedAttemptIsLostThenRequeuedOnceAsTheNextAttempt) {
  auto s = after_doctor();
  s.trials.push_back(trial(3, purpose_kind::explore, false));
  // Dispatched by an earlier life (not running here): lost.
  auto st = next_step(small_task(), s, slots(4));
  ASSERT_EQ(st.kind, step_kind::lose);
  ASSERT_EQ(st.attempts.size(), 1u);
  EXPECT_EQ(st.attempts[0], (attempt_id{3, 0}));
  // Running in this life: not lost.
  auto in = slots(3);
  in.busy.running = {{3, 0}};
  EXPECT_NE(next_step(small_task(), s, in).kind, step_kind::lose);
  // Once lost: re-queued as attempt 1 with the same configuration.
  s.trials.back().finished = true;
  s.trials.back().outcome = tuning::trial_outcome::lost;
  st = next_step(small_task(), s, slots(4));
  ASSERT_EQ(st.kind, step_kind::launch);
  ASSERT_EQ(st.launches.size(), 1u);
  EXPECT_EQ(st.launches[0].trial_id, 3u);
  EXPECT_EQ(st.launches[0].attempt, 1u);
  EXPECT_EQ(st.launches[0].kind, purpose_kind::explore);
  EXPECT_FALSE(st.launches[0].proposed);
  // No free slot: the re-queue waits (and nothing is proposed over it).
  EXPECT_EQ(next_step(small_task(), s, slots(0)).kind, step_kind::wait);
}

TEST(NextStep, ProposesABatchAsLargeAsTheFreeSlotsAndTheBudgetLeft) {
  auto s = after_doctor();
  auto st = next_step(small_task(), s, slots(4));
  ASSERT_EQ(st.kind, step_kind::propose);
  EXPECT_EQ(st.n, 4u);
  for (std::uint64_t i = 3; i < 7; ++i)
    s.trials.push_back(trial(i, purpose_kind::explore));
  st = next_step(small_task(), s, slots(4));
  ASSERT_EQ(st.kind, step_kind::propose);
  EXPECT_EQ(st.n, 2u); // 6 - 4 search trials left
  // A verdict pending: nothing proposed until it is in.
  auto in = slots(4);
  in.busy.verifying = {{6, 0}};
  EXPECT_EQ(next_step(small_task(), s, in).kind, step_kind::wait);
  // An ended, unverified trial: its verdict first.
  s.trials.back().verified = false;
  st = next_step(small_task(), s, slots(4));
  ASSERT_EQ(st.kind, step_kind::verify);
  EXPECT_EQ(st.attempts, (std::vector<attempt_id>{{6, 0}}));
}

TEST(NextStep, TheSearchStopsAtTheBudgetOrTheWallClock) {
  auto s = after_doctor();
  for (std::uint64_t i = 3; i < 9; ++i)
    s.trials.push_back(trial(i, purpose_kind::explore));
  auto st = next_step(small_task(), s, slots(4));
  ASSERT_EQ(st.kind, step_kind::stop_search);
  EXPECT_EQ(st.stop["reason"], "budget");
  EXPECT_EQ(st.stop["search_trials"], 6);
  auto w = after_doctor();
  auto in = slots(4);
  in.wall_clock_expired = true;
  st = next_step(small_task(), w, in);
  ASSERT_EQ(st.kind, step_kind::stop_search);
  EXPECT_EQ(st.stop["reason"], "wall_clock");
}

TEST(NextStep, EachCandidateIsReverifiedInItsOwnInterleavedSequence) {
  auto s = after_doctor();
  auto fast = trial(3, purpose_kind::explore, true, 0.5);
  fast.config.knobs["mb"] = std::int64_t{4};
  auto faster = trial(4, purpose_kind::explore, true, 0.4);
  faster.config.knobs["mb"] = std::int64_t{2};
  s.trials.push_back(fast);
  s.trials.push_back(faster);
  s.search_stopped = search_stopped_doc("policy", "stop", 2, 6);
  // Two candidates, fastest first; each starts with a baseline run; both launched at once.
  auto st = next_step(small_task(), s, slots(4));
  ASSERT_EQ(st.kind, step_kind::launch);
  ASSERT_EQ(st.launches.size(), 2u);
  EXPECT_EQ(st.launches[0].kind, purpose_kind::verify_baseline);
  EXPECT_EQ(st.launches[0].candidate_trial, 4u);
  EXPECT_EQ(st.launches[0].trial_id, 5u);
  EXPECT_EQ(st.launches[1].candidate_trial, 3u);
  EXPECT_EQ(st.launches[1].trial_id, 6u);
  EXPECT_EQ(st.launches[0].round, 1u);
  // Candidate 4: B done; next is its candidate run (one at a time per candidate).
  auto b = trial(5, purpose_kind::verify_baseline);
  b.candidate_trial = 4;
  b.round = 1;
  s.trials.push_back(b);
  auto b3 = trial(6, purpose_kind::verify_baseline, false);
  b3.candidate_trial = 3;
  b3.round = 1;
  s.trials.push_back(b3);
  auto in = slots(3);
  in.busy.running = {{6, 0}};
  st = next_step(small_task(), s, in);
  ASSERT_EQ(st.kind, step_kind::launch);
  ASSERT_EQ(st.launches.size(), 1u); // candidate 3 still waits for its baseline run
  EXPECT_EQ(st.launches[0].kind, purpose_kind::verify_candidate);
  EXPECT_EQ(st.launches[0].candidate_trial, 4u);
  EXPECT_EQ(st.launches[0].config.knobs.at("mb"), tuning::knob_value{std::int64_t{2}});
}

TEST(NextStep, PromotionReportAndApplyFollowTheReverifications) {
  auto s = after_doctor();
  s.search_stopped = search_stopped_doc("policy", "stop", 0, 6);
  auto st = next_step(small_task(), s, slots(1));
  EXPECT_EQ(st.kind, step_kind::promote); // no candidate was faster than the baseline
  s.promotion = nlohmann::json{{"promoted", false}};
  st = next_step(small_task(), s, slots(1));
  EXPECT_EQ(st.kind, step_kind::end_stage);
  EXPECT_EQ(st.stage, "run");
  s.stages_completed.push_back("run");
  EXPECT_EQ(next_step(small_task(), s, slots(1)).kind, step_kind::begin_stage);
  s.stages_started.push_back("report");
  EXPECT_EQ(next_step(small_task(), s, slots(1)).kind, step_kind::report);
  s.report = nlohmann::json::object();
  s.stages_completed.push_back("report");
  s.stages_started.push_back("apply");
  EXPECT_EQ(next_step(small_task(), s, slots(1)).kind, step_kind::apply);
  s.applied = nlohmann::json::object();
  s.stages_completed.push_back("apply");
  EXPECT_EQ(next_step(small_task(), s, slots(1)).kind, step_kind::done);
}

TEST(NextStep, TheLoggedBudgetWinsOverTheTaskFile) {
  auto s = after_doctor();
  s.contract_doc = nlohmann::json{{"policy", "random/1"}, {"budget", {{"trials", 2}}}};
  for (std::uint64_t i = 3; i < 5; ++i)
    s.trials.push_back(trial(i, purpose_kind::explore));
  auto st = next_step(small_task(), s, slots(4)); // the task says 6
  ASSERT_EQ(st.kind, step_kind::stop_search);
  EXPECT_EQ(st.stop["budget"], 2);
}

/// Issue 20: a re-verification run that failed only the harness-clock check (a loaded machine
/// looks like a fake timer) is re-run as the next attempt of the same trial, not a veto; a second
/// clock failure stands; any other violation is never re-run.
TEST(NextStep, AReverificationRunFailingOnlyTheClockCheckIsReRunOnce) {
  auto s = after_doctor();
  auto fast = trial(3, purpose_kind::explore, true, 0.5);
  fast.config.knobs["mb"] = std::int64_t{4};
  s.trials.push_back(fast);
  s.search_stopped = search_stopped_doc("policy", "stop", 1, 6);
  const std::string clock_violation =
    "clock: steps 2..11: the median step reports -0.02 s against the harness clock's 0.1 s "
    "between consecutive metrics lines (-20%, over 10 steps; allowed +-0.015 s = tolerance 10% + "
    "5 ms + the doctor's skew 0 ms): a fake or partial step timer";
  // B of candidate 3 ran and failed the clock check alone: its next attempt, same purpose.
  auto b = trial(4, purpose_kind::verify_baseline);
  b.candidate_trial = 3;
  b.round = 1;
  b.outcome = tuning::trial_outcome::contract_violation;
  b.violations = {clock_violation};
  b.timed_step_time_s = 1.0;
  s.trials.push_back(b);
  EXPECT_TRUE(clock_remeasure_due(s, s.trials.back()));
  auto st = next_step(small_task(), s, slots(0));
  EXPECT_EQ(st.kind, step_kind::wait) << st.reason; // pending: not counted, not re-verified
  st = next_step(small_task(), s, slots(2));
  ASSERT_EQ(st.kind, step_kind::launch) << st.reason;
  ASSERT_EQ(st.launches.size(), 1u);
  EXPECT_EQ(st.launches[0].trial_id, 4u);
  EXPECT_EQ(st.launches[0].attempt, 1u);
  EXPECT_EQ(st.launches[0].kind, purpose_kind::verify_baseline);
  EXPECT_EQ(st.launches[0].candidate_trial, 3u);
  EXPECT_EQ(st.launches[0].round, 1u);
  EXPECT_FALSE(st.launches[0].proposed);
  EXPECT_NE(st.reason.find("re-measured"), std::string::npos) << st.reason;
  // The re-measurement failed the clock check again: it stands (no third attempt); the
  // candidate's sequence goes on with its candidate run.
  auto again = b;
  again.attempt = 1;
  s.trials.push_back(again);
  EXPECT_FALSE(clock_remeasure_due(s, s.trials.back()));
  EXPECT_FALSE(clock_remeasure_due(s, s.trials[s.trials.size() - 2])); // superseded
  st = next_step(small_task(), s, slots(2));
  ASSERT_EQ(st.kind, step_kind::launch) << st.reason;
  ASSERT_EQ(st.launches.size(), 1u);
  EXPECT_EQ(st.launches[0].kind, purpose_kind::verify_candidate);
  EXPECT_EQ(st.launches[0].attempt, 0u);
  // Other violations, with or without the clock's, are never re-measured; nor are baselines.
  auto drift = b;
  drift.trial_id = 9;
  drift.violations = {"loss_drift: step 3 loss 4.9 differs from the reference 4.7 by 0.2",
                      clock_violation};
  s.trials.push_back(drift);
  EXPECT_FALSE(clock_remeasure_due(s, s.trials.back()));
  auto base = trial(10, purpose_kind::baseline);
  base.outcome = tuning::trial_outcome::contract_violation;
  base.violations = {clock_violation};
  s.trials.push_back(base);
  EXPECT_FALSE(clock_remeasure_due(s, s.trials.back()));
}

/// decide::smoke_patches: the patches of a configuration that never ran in a usable trial of the
/// run, and only when the task has a [smoke] launch.
TEST(SmokePatches, AreThePatchesNoUsableTrialRanWith) {
  auto task = small_task();
  auto s = after_doctor();
  tuning::configuration c;
  c.knobs["mb"] = std::int64_t{2};
  c.patches = {"a", "b", "c"};
  EXPECT_TRUE(smoke_patches(task, s, c).empty()); // no [smoke]: nothing to probe with
  task.smoke = tuning::smoke_spec{};
  EXPECT_EQ(smoke_patches(task, s, c), (std::vector<std::string>{"a", "b", "c"}));
  // "a" ran in a usable trial; "b" only in one that violated the contract, "c" in one still
  // running: both still untested.
  auto usable = trial(10, purpose_kind::explore);
  usable.config.patches = {"a"};
  auto violated = trial(11, purpose_kind::explore);
  violated.config.patches = {"b"};
  violated.outcome = tuning::trial_outcome::contract_violation;
  auto running = trial(12, purpose_kind::explore, false);
  running.config.patches = {"c"};
  s.trials = {usable, violated, running};
  EXPECT_EQ(smoke_patches(task, s, c), (std::vector<std::string>{"b", "c"}));
  // A configuration without patches, or with only tested ones, is never probed.
  c.patches = {"a"};
  EXPECT_TRUE(smoke_patches(task, s, c).empty());
  c.patches.clear();
  EXPECT_TRUE(smoke_patches(task, s, c).empty());
}

} // namespace
} // namespace infrarsi::decide
