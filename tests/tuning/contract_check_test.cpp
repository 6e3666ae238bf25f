// Tests for tuning/contract_check.cpp: each invariant, with the evidence in the message.

#include "tuning/contract_check.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace infrarsi::tuning {
namespace {

contract_spec contract() {
  contract_spec c;
  c.steps = 4;
  c.tokens_per_step = 4096;
  c.timed_first = 1;
  c.timed_last = 3;
  c.loss_rtol = 1e-4;
  c.loss_atol = 1e-6;
  return c;
}

trial_record run(double loss_shift = 0, std::uint64_t tokens = 4096, std::uint32_t steps = 4) {
  trial_record r;
  r.finished = true;
  r.outcome = trial_outcome::ok;
  r.wall_time_s = 5.0;
  for (std::uint32_t i = 0; i < steps; ++i)
    r.steps.push_back({i, 5.0 - 0.5 * i + loss_shift, tokens, 0.5 + 0.01 * i});
  return r;
}

TEST(ContractCheck, ReferenceAndCalibratedTolerance) {
  auto a = run(0.0);
  auto b = run(0.002); // baselines that are not bit-identical
  auto ref = make_loss_reference({a, b});
  EXPECT_DOUBLE_EQ(ref.loss.at(0), 5.001);
  EXPECT_NEAR(ref.spread.at(0), 0.001, 1e-12);
  // max(1e-6, 1e-4 * 5.001, 3 * 0.001) = 0.003
  EXPECT_NEAR(loss_tolerance(contract(), ref, 0), 0.003, 1e-12);
  EXPECT_TRUE(check_contract(contract(), ref, run(0.0025)).empty());
  auto v = check_contract(contract(), ref, run(0.01));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rfind("loss_drift: step 0 loss 5.01 differs from the reference 5.001 by 0.009", 0), 0u)
    << v[0];
}

TEST(ContractCheck, EarlyStopJudgesEachNewStepWithCheckContractsMessages) {
  auto a = run(0.0);
  auto b = run(0.002);
  auto ref = make_loss_reference({a, b}); // tolerance 0.003 at every step
  // An honest trial is never stopped, whichever steps are read.
  auto honest = run(0.0025);
  EXPECT_FALSE(early_violation(contract(), ref, honest.steps).has_value());
  // Drift from step 2 on: steps 0 and 1 read alone prove nothing; step 2 does, with the message
  // check_contract gives the whole trial.
  auto drift = run(0.0);
  for (std::size_t i = 2; i < drift.steps.size(); ++i)
    drift.steps[i].loss += 0.01;
  std::vector<step_point> two(drift.steps.begin(), drift.steps.begin() + 2);
  EXPECT_FALSE(early_violation(contract(), ref, two).has_value());
  std::vector<step_point> three(drift.steps.begin(), drift.steps.begin() + 3);
  auto v = early_violation(contract(), ref, three, 2);
  ASSERT_TRUE(v.has_value());
  auto full = check_contract(contract(), ref, drift);
  ASSERT_FALSE(full.empty());
  EXPECT_EQ(*v, full.front());
  EXPECT_EQ(v->rfind("loss_drift: step 2 loss 4.01 differs from the reference 4.001", 0), 0u) << *v;
  // `from` past the drifting step: only the newer steps are judged.
  EXPECT_FALSE(early_violation(contract(), ref, three, 3).has_value());
  // Fewer tokens and a NaN loss stop at the step that shows them, also before the calibration
  // (an empty reference: the loss itself is not compared then).
  auto fewer = run(0.0, 2048);
  EXPECT_EQ(early_violation(contract(), loss_reference{}, fewer.steps).value_or(""),
            "tokens: step 0 reported 2048 tokens, the contract says 4096");
  auto nan = run(0.0);
  nan.steps[1].loss = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(early_violation(contract(), loss_reference{}, nan.steps).value_or(""),
            "loss_non_finite: step 1 reported a loss of nan");
  EXPECT_FALSE(early_violation(contract(), loss_reference{}, drift.steps).has_value());
  // Checkpoints the contract names: a drifting step that is not one is not judged.
  auto c = contract();
  c.loss_checkpoints = {0, 1};
  EXPECT_FALSE(early_violation(c, ref, drift.steps).has_value());
  // The detail of a stopped trial keeps the violation's code.
  auto detail = early_stop_detail(*v, 2, 4);
  EXPECT_EQ(detail, *v + "; stopped early at step 2 of 4");
  EXPECT_EQ(violation_code(detail), "loss_drift");
  EXPECT_TRUE(is_early_stop(detail));
  EXPECT_FALSE(is_early_stop(*v));
}

TEST(ContractCheck, TheEarlyStopReferenceIsTheFirstEntriesOfEachList) {
  trial_record long_run;
  for (std::uint32_t i = 0; i < 1000; ++i)
    long_run.steps.push_back({i, 5.0 - 0.001 * i, 4096, 0.5});
  auto other = long_run;
  for (auto& s : other.steps)
    s.loss += 0.002;
  auto ref = make_loss_reference({long_run, other});
  ASSERT_EQ(ref.loss.size(), 1000u);
  auto cut = early_stop_reference(ref, 256);
  ASSERT_EQ(cut.loss.size(), 256u);
  EXPECT_EQ(cut.loss.rbegin()->first, 255u);
  EXPECT_DOUBLE_EQ(cut.loss.at(255), ref.loss.at(255));
  EXPECT_DOUBLE_EQ(cut.spread.at(255), ref.spread.at(255));
  EXPECT_EQ(cut.spread.size(), 256u);
  // The tolerance at a carried step is the verifier's.
  EXPECT_DOUBLE_EQ(loss_tolerance(contract(), cut, 10), loss_tolerance(contract(), ref, 10));
}

TEST(ContractCheck, FewerTokensOrStepsAreCaught) {
  auto ref = make_loss_reference({run()});
  auto v = check_contract(contract(), ref, run(0, 2048));
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0], "tokens: step 0 reported 2048 tokens, the contract says 4096");
  v = check_contract(contract(), ref, run(0, 4096, 3));
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0], "steps: reported 3 steps, the contract says 4");
}

TEST(ContractCheck, NanNeverPasses) {
  auto ref = make_loss_reference({run()});
  auto t = run();
  t.steps[2].loss = std::numeric_limits<double>::quiet_NaN();
  auto v = check_contract(contract(), ref, t);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0], "loss_non_finite: step 2 reported a loss of nan");
}

TEST(ContractCheck, TimingWindowAndWallTime) {
  auto ref = make_loss_reference({run()});
  auto t = run();
  EXPECT_DOUBLE_EQ(timed_step_time(contract(), t.steps), 0.52); // median of 0.51, 0.52, 0.53
  t.wall_time_s = 1.0; // step times add up to 2.06 s
  auto v = check_contract(contract(), ref, t);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("step times add up to 2.06 s but the trial took 1 s"), std::string::npos);
  auto fake_timer = run();
  fake_timer.steps[1].step_time_s = 0;
  v = check_contract(contract(), ref, fake_timer);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.back(), "step_times: step 1 reported a step time of 0 s");
}

/// A run whose metrics lines were read `gap_s` seconds apart (the harness clock).
trial_record observed(double reported_scale, double gap_s = 0.5) {
  auto t = run();
  t.wall_time_s = 10.0;
  for (auto& s : t.steps) {
    s.observed_at_s = 1.0 + gap_s * s.step;
    s.step_time_s = gap_s * reported_scale;
  }
  return t;
}

TEST(ContractCheck, WindowSumRuleOfRunsLockedBeforeStepMedian) {
  auto ref = make_loss_reference({run()});
  clock_options legacy;
  legacy.rule = clock_rule::window_sum;
  // Honest: steps 1..3 report 1.5 s, the clock saw 1.5 s between the lines of steps 0 and 3.
  auto honest = observed(1.0);
  auto c = clock_check(contract(), honest.steps);
  ASSERT_TRUE(c.made) << c.why;
  EXPECT_EQ(c.from_step, 0u);
  EXPECT_EQ(c.to_step, 3u);
  EXPECT_DOUBLE_EQ(c.reported_s, 1.5);
  EXPECT_DOUBLE_EQ(c.observed_s, 1.5);
  EXPECT_TRUE(check_contract(contract(), ref, honest, legacy).empty());
  EXPECT_TRUE(check_contract(contract(), ref, observed(1.09), legacy).empty()); // within 10 %
  // A timer running 40 % slow: -40 % against the clock.
  auto fake = check_contract(contract(), ref, observed(0.6), legacy);
  ASSERT_EQ(fake.size(), 1u);
  EXPECT_EQ(fake[0].rfind("step_times: steps 1..3 report 0.9 s in total but the harness clock saw "
                          "1.5 s between their metrics lines (-40%",
                          0),
            0u)
    << fake[0];
  EXPECT_NE(fake[0].find("a fake or partial step timer"), std::string::npos);
  // Lines that arrive in one burst cannot confirm 1.5 s of reported time.
  auto burst = check_contract(contract(), ref, observed(1000.0, 0.0005), legacy);
  ASSERT_EQ(burst.size(), 1u);
  EXPECT_NE(burst[0].find("buffered stdout?"), std::string::npos) << burst[0];
  // Simulated step times and a waived check are not compared with the clock.
  auto sim = contract();
  sim.simulated_time = true;
  EXPECT_TRUE(check_contract(sim, ref, observed(0.6), legacy).empty());
  EXPECT_FALSE(clock_check(sim, observed(0.6).steps).made);
  auto waived = contract();
  waived.clock_check = false;
  EXPECT_TRUE(check_contract(waived, ref, observed(0.6), legacy).empty());
  // Short honest steps: 20 ms each, 3 ms between lines that no step timer covers (-13 %):
  // within the 5 ms-per-step slack.
  auto short_steps = observed(20.0 / 23.0, 0.023);
  auto sc = clock_check(contract(), short_steps.steps);
  ASSERT_TRUE(sc.made) << sc.why;
  EXPECT_LT(sc.disagreement(), -0.1);
  EXPECT_TRUE(check_contract(contract(), ref, short_steps, legacy).empty());
  // Not observed at all (a result built elsewhere): the check is not made.
  EXPECT_FALSE(clock_check(contract(), run().steps).made);
}

/// A run of `n` steps whose lines the harness read at `at[i]`, reporting `reported[i]`.
trial_record clocked(const std::vector<double>& at, const std::vector<double>& reported) {
  auto t = run(0, 4096, static_cast<std::uint32_t>(at.size()));
  t.wall_time_s = 10.0;
  for (std::size_t i = 0; i < at.size(); ++i) {
    t.steps[i].observed_at_s = at[i];
    t.steps[i].step_time_s = reported[i];
  }
  return t;
}

TEST(ContractCheck, StepMedianRuleAgainstTheHarnessClock) {
  auto ref = make_loss_reference({run()});
  EXPECT_EQ(clock_rule_name(current_clock_rule), std::string{"step_median/1"});
  EXPECT_TRUE(parse_clock_rule("window_sum/0") == clock_rule::window_sum);
  EXPECT_FALSE(parse_clock_rule("step_median/9").has_value());
  // Honest, 0.5 s steps: passes; the compared steps are 1..3 with the line of step 0 before.
  auto c = step_clock_check(contract(), observed(1.0).steps);
  ASSERT_TRUE(c.made) << c.why;
  EXPECT_EQ(c.from_step, 0u);
  EXPECT_EQ(c.to_step, 3u);
  EXPECT_EQ(c.compared, 3u);
  EXPECT_NEAR(c.median_difference_s, 0.0, 1e-12);
  EXPECT_NEAR(c.median_interval_s, 0.5, 1e-12);
  EXPECT_TRUE(check_contract(contract(), ref, observed(1.0)).empty());
  EXPECT_TRUE(check_contract(contract(), ref, observed(1.09)).empty()); // within 10 % + 5 ms
  // A timer running 40 % slow: every step -0.2 s against the clock.
  auto fake = check_contract(contract(), ref, observed(0.6));
  ASSERT_EQ(fake.size(), 1u);
  EXPECT_EQ(violation_code(fake[0]), "clock");
  EXPECT_EQ(fake[0].rfind("clock: steps 1..3: the median step reports -0.2 s against the harness "
                          "clock's 0.5 s between consecutive metrics lines (-40%, over 3 steps; "
                          "allowed 0 +- 0.055 s = the doctor's offset 0 ms, tolerance 10% + 5 ms + "
                          "the doctor's skew 0 ms)",
                          0),
            0u)
    << fake[0];
  EXPECT_NE(fake[0].find("a fake or partial step timer"), std::string::npos);
  // Lines that arrive in one burst cannot confirm 1.5 s of reported time.
  auto burst = check_contract(contract(), ref, observed(1000.0, 0.0005));
  ASSERT_EQ(burst.size(), 1u);
  EXPECT_EQ(violation_code(burst[0]), "clock");
  EXPECT_NE(burst[0].find("buffered stdout?"), std::string::npos) << burst[0];
  // Simulated step times and a waived check are not compared with the clock.
  auto sim = contract();
  sim.simulated_time = true;
  EXPECT_TRUE(check_contract(sim, ref, observed(0.6)).empty());
  EXPECT_FALSE(step_clock_check(sim, observed(0.6).steps).made);
  auto waived = contract();
  waived.clock_check = false;
  EXPECT_TRUE(check_contract(waived, ref, observed(0.6)).empty());
  EXPECT_FALSE(step_clock_check(contract(), run().steps).made); // nothing observed
}

TEST(ContractCheck, StepMedianIgnoresALateEndLineThatWindowSumRejects) {
  auto ref = make_loss_reference({run()});
  clock_options legacy;
  legacy.rule = clock_rule::window_sum;
  // 0.1 s steps, honestly timed; the line of step 3 (the window's end) read 60 ms late: a
  // loaded machine. The window sum sees 0.3 s reported against 0.36 s (-16.7 %).
  auto late = clocked({1.0, 1.1, 1.2, 1.36}, {0.1, 0.1, 0.1, 0.1});
  auto old = check_contract(contract(), ref, late, legacy);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_NE(old[0].find("a fake or partial step timer"), std::string::npos) << old[0];
  EXPECT_TRUE(check_contract(contract(), ref, late).empty());
  // The line of step 0 read 60 ms late (step 1's interval looks short: +60 %): the same.
  auto early = clocked({1.06, 1.1, 1.2, 1.3}, {0.1, 0.1, 0.1, 0.1});
  EXPECT_FALSE(check_contract(contract(), ref, early, legacy).empty());
  EXPECT_TRUE(check_contract(contract(), ref, early).empty());
  // A timer that lies on most steps moves the median: caught.
  auto mostly_fake = clocked({1.0, 1.1, 1.2, 1.3}, {0.1, 0.06, 0.06, 0.1});
  auto v = check_contract(contract(), ref, mostly_fake);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(violation_code(v[0]), "clock") << v[0];
}

TEST(ContractCheck, TheBandFollowsTheDoctorsOffsetAndSkewWithinLimits) {
  auto ref = make_loss_reference({run()});
  // Honest baselines on a loaded machine: 18 ms and 12 ms per 0.1 s step outside the step timer
  // (the process waited for the CPU after printing its line).
  auto b1 = clocked({1.0, 1.1, 1.2, 1.3}, {0.1, 0.082, 0.082, 0.082});
  auto b2 = clocked({1.0, 1.1, 1.2, 1.3}, {0.1, 0.088, 0.088, 0.088});
  auto cal = calibrate_clock(contract(), {b1, b2, run()}); // run(): not observed, not counted
  EXPECT_EQ(cal.runs, 2u);
  ASSERT_EQ(cal.differences_s.size(), 2u);
  EXPECT_NEAR(cal.differences_s[0], -0.018, 1e-9);
  EXPECT_NEAR(cal.offset_s, -0.015, 1e-9);
  EXPECT_NEAR(cal.skew_s, 0.003, 1e-9);
  // A trial like them: 18 ms is outside 10 ms + 5 ms around 0, inside the calibrated band.
  EXPECT_FALSE(check_contract(contract(), ref, b1).empty());
  clock_options calibrated;
  calibrated.offset_s = cal.offset_s;
  calibrated.skew_s = cal.skew_s;
  EXPECT_TRUE(check_contract(contract(), ref, b1, calibrated).empty());
  auto c = step_clock_check(contract(), b1.steps);
  auto band = clock_band_for(contract(), c, calibrated);
  EXPECT_NEAR(band.center_s, -0.015, 1e-9);
  EXPECT_NEAR(band.half_width_s, 0.018, 1e-9);
  // A 40 % fake timer on that machine: caught.
  auto fake = clocked({1.0, 1.1, 1.2, 1.3}, {0.1, 0.06 - 0.015, 0.06 - 0.015, 0.06 - 0.015});
  auto v = check_contract(contract(), ref, fake, calibrated);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("the doctor's offset -15 ms"), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("a fake or partial step timer"), std::string::npos) << v[0];
  // Limits: the offset is followed to at most half the interval and only below zero (time
  // outside the timer); the skew widens the band by at most the tolerance.
  clock_options huge;
  huge.offset_s = -1.0;
  huge.skew_s = 1.0;
  band = clock_band_for(contract(), c, huge);
  EXPECT_NEAR(band.center_s, -0.05, 1e-9);
  EXPECT_NEAR(band.half_width_s, 0.025, 1e-9);
  huge.offset_s = 0.5; // lines early by a fixed amount is never the machine
  EXPECT_NEAR(clock_band_for(contract(), c, huge).center_s, 0.0, 1e-12);
  // However calibrated, a timer reporting a fifth of the clock's time fails.
  auto partial = clocked({1.0, 1.1, 1.2, 1.3}, {0.1, 0.02, 0.02, 0.02});
  huge.offset_s = -1.0;
  EXPECT_FALSE(check_contract(contract(), ref, partial, huge).empty());
}

TEST(ContractCheck, TimedWindowMustBeTheContracts) {
  auto ref = make_loss_reference({run()});
  auto t = run();
  t.declared.final_seen = true;
  t.declared.timed_steps = std::pair<std::uint32_t, std::uint32_t>{2, 3};
  auto v = check_contract(contract(), ref, t);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], "timed_window: the workload timed steps [2, 3], the contract's window is [1, 3]");
  t.declared.timed_steps = std::pair<std::uint32_t, std::uint32_t>{1, 3};
  EXPECT_TRUE(check_contract(contract(), ref, t).empty());
  t.steps[1].warmup = true; // a warm-up mark inside the window
  v = check_contract(contract(), ref, t);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], "timed_window: step 1 is marked warm-up but lies in the contract's timed window [1, 3]");
}

TEST(ContractCheck, DeclaredWorkMustMatchWhereTheFinalLineDeclaresIt) {
  auto ref = make_loss_reference({run()});
  auto c = contract();
  c.global_batch = 16;
  c.params = 1000;
  c.layers = 6;
  auto t = run();
  EXPECT_TRUE(check_contract(c, ref, t).empty()); // no final line (a regex workload)
  t.declared.final_seen = true;
  t.declared.global_batch = 16;
  t.declared.params = 1000;
  t.declared.layers = 6;
  EXPECT_TRUE(check_contract(c, ref, t).empty());
  t.declared.layers = 3;
  t.declared.params.reset();
  auto v = check_contract(c, ref, t);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], "params: the final line does not declare params; the contract says 1000");
  EXPECT_EQ(v[1], "layers: the final line declares layers = 3, the contract says 6");
}

TEST(ContractCheck, LossThatDoesNotFallIsNamed) {
  auto ref = make_loss_reference({run()}); // 5.0, 4.5, 4.0, 3.5
  auto frozen = run();
  for (auto& s : frozen.steps)
    s.loss = 5.0; // nothing trains
  auto v = check_contract(contract(), ref, frozen);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], "loss_not_falling: the loss went 5 -> 5 from step 0 to step 3 while the "
                  "reference fell 5 -> 3.5 (backward or optimizer step skipped?)");
  EXPECT_EQ(violation_code(v[1]), "loss_drift");
  EXPECT_EQ(violation_code(v[0]), "loss_not_falling");
}

} // namespace
} // namespace infrarsi::tuning

namespace infrarsi::tuning {
namespace {

/// The smoke probe's verdict: work and numerics of the patched smoke run against the unpatched
/// one; timing never; nothing when either run did not end ok.
TEST(SmokeViolation, JudgesWorkAndNumericsAgainstTheUnpatchedRunOnly) {
  auto c = contract();
  c.loss_rtol = 0.01;
  auto unpatched = run(0.0);
  // 1.2 % above the unpatched loss at step 0 (tolerance 1 % of 5 = 0.05): the first evidence.
  auto v = smoke_violation(c, unpatched, run(0.06));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->rfind("loss_drift: step 0 loss 5.06 differs from the reference 5 by 0.06", 0), 0u)
    << *v;
  // Within 1 % at every step (0.02 of 3.5..5): no violation.
  EXPECT_FALSE(smoke_violation(c, unpatched, run(0.02)));
  auto slow = run(0.0);
  slow.wall_time_s = 0.1; // step times add up to more than the wall time: not judged here
  slow.steps[1].warmup = true; // a warm-up mark inside the timed window: not judged either
  EXPECT_FALSE(smoke_violation(c, unpatched, slow));
  ASSERT_FALSE(check_contract(c, make_loss_reference({unpatched}), slow).empty());
  // Less work: fewer tokens, fewer steps.
  auto fewer = smoke_violation(c, unpatched, run(0.0, 2048));
  ASSERT_TRUE(fewer);
  EXPECT_EQ(violation_code(*fewer), "tokens") << *fewer;
  auto short_run = smoke_violation(c, unpatched, run(0.0, 4096, 3));
  ASSERT_TRUE(short_run);
  EXPECT_EQ(violation_code(*short_run), "steps") << *short_run;
  auto nan = run(0.0);
  nan.steps[2].loss = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(violation_code(*smoke_violation(c, unpatched, nan)), "loss_non_finite");
  // Inconclusive: either run did not end ok.
  auto crashed = run(0.5);
  crashed.outcome = trial_outcome::crash;
  EXPECT_FALSE(smoke_violation(c, unpatched, crashed));
  auto oom = run(0.0);
  oom.outcome = trial_outcome::oom;
  EXPECT_FALSE(smoke_violation(c, oom, run(0.5)));
}

TEST(SmokeViolation, AnUnpatchedRunThatBreaksItsOwnContractJudgesNothing) {
  auto c = contract();
  c.loss_rtol = 0.01;
  EXPECT_FALSE(smoke_reference_problem(c, run(0.0)));
  // [smoke] says 5 steps; the launch runs 4: the declaration is wrong, not the patch.
  auto wrong = c;
  wrong.steps = 5;
  auto why = smoke_reference_problem(wrong, run(0.0));
  ASSERT_TRUE(why);
  EXPECT_EQ(why->rfind("the unpatched smoke run breaks [smoke]: steps: reported 4 steps, the "
                       "contract says 5",
                       0),
            0u)
    << *why;
  EXPECT_FALSE(smoke_violation(wrong, run(0.0), run(0.5))); // a drift it cannot judge
  auto timeout = run(0.0);
  timeout.outcome = trial_outcome::timeout;
  timeout.detail = "wall-clock limit of 2 s passed";
  EXPECT_EQ(*smoke_reference_problem(c, timeout),
            "the unpatched smoke run ended timeout (wall-clock limit of 2 s passed)");
  auto d = smoke_inconclusive_detail(*why);
  EXPECT_TRUE(is_smoke_inconclusive(d));
  EXPECT_TRUE(is_smoke_inconclusive("crash: rank 0 exit 1; " + d));
  EXPECT_FALSE(is_smoke_inconclusive(smoke_probe_detail("loss_drift: x", {"a"})));
  EXPECT_NE(d.find("(fix [smoke]: infrarsi check --smoke)"), std::string::npos) << d;
}

/// A smoke launch at its loss ceiling: three steps of ln(32000) = 10.3735 with a +-0.02 wobble,
/// as the simulator's thin smoke model of a 32,000-token vocabulary (docs/simulator.md "Loss").
trial_record at_ceiling() {
  trial_record r = run(0.0, 4096, 3);
  r.steps[0].loss = 10.3735;
  r.steps[1].loss = 10.3812;
  r.steps[2].loss = 10.3647;
  return r;
}

TEST(SmokeVacuous, AnUnpatchedLossThatDoesNotFallByMoreThanTheToleranceJudgesNoNumerics) {
  auto c = contract();
  c.steps = 3;
  c.loss_rtol = 0.01;
  c.loss_atol = 0;
  // Falling 5 -> 4 over 3 steps: far more than max(0, 0.01 x 5, 0.001 x 5) = 0.05.
  EXPECT_DOUBLE_EQ(smoke_min_loss_fall(c, 5.0), 0.05);
  EXPECT_FALSE(smoke_vacuous(c, run(0.0, 4096, 3)));
  // At the ceiling: 10.3735 -> 10.3647 fell by 0.0088, not more than 1 % of 10.3735.
  EXPECT_NEAR(smoke_min_loss_fall(c, 10.3735), 0.103735, 1e-12);
  auto why = smoke_vacuous(c, at_ceiling());
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "the unpatched smoke loss went 10.3735 -> 10.3647 over 3 steps (fell by 0.0088, "
                  "not more than 0.103735 = max(loss_atol 0, loss_rtol 0.01 x 10.3735, 0.001 x "
                  "10.3735)); a probe whose loss does not fall cannot tell a numerics change");
  // ... and it judges no patch: a patched run 0.05 off (within the band of a flat loss) or one
  // that drifts by 2 % is left to the full launch.
  auto patched = at_ceiling();
  for (auto& s : patched.steps)
    s.loss *= 1.02;
  EXPECT_TRUE(smoke_violation(c, run(0.0, 4096, 3), run(0.5, 4096, 3))); // a falling reference
  EXPECT_FALSE(smoke_violation(c, at_ceiling(), patched));
  // A rising loss does not fall either.
  auto rising = at_ceiling();
  rising.steps[2].loss = 10.40;
  auto rose = smoke_vacuous(c, rising);
  ASSERT_TRUE(rose);
  EXPECT_NE(rose->find("10.3735 -> 10.4 over 3 steps (rose by 0.0265, "), std::string::npos)
    << *rose;
}

TEST(SmokeVacuous, AFallOfExactlyTheThresholdIsNoFallAndTheMarginHoldsWithoutTolerances) {
  auto c = contract();
  c.steps = 3;
  c.loss_rtol = 0;
  c.loss_atol = 0.25; // max(0.25, 0, 0.001 x 2) = 0.25
  auto r = run(0.0, 4096, 3);
  r.steps[0].loss = 2.0;
  r.steps[1].loss = 1.9;
  r.steps[2].loss = 1.75; // fell by exactly 0.25
  EXPECT_DOUBLE_EQ(smoke_min_loss_fall(c, 2.0), 0.25);
  EXPECT_TRUE(smoke_vacuous(c, r));
  r.steps[2].loss = 1.5; // fell by 0.5
  EXPECT_FALSE(smoke_vacuous(c, r));
  // An exact contract (no tolerance): the 0.1 % margin still asks for a real fall.
  c.loss_atol = 0;
  r.steps[0].loss = 5.0;
  r.steps[2].loss = 4.997; // 0.003 < 0.005
  EXPECT_DOUBLE_EQ(smoke_min_loss_fall(c, 5.0), 5.0 * smoke_min_loss_fall_rel);
  EXPECT_TRUE(smoke_vacuous(c, r));
  r.steps[2].loss = 4.99; // 0.01 > 0.005
  EXPECT_FALSE(smoke_vacuous(c, r));
  // First and last by step number, whatever the order of the record.
  std::swap(r.steps[0], r.steps[2]);
  EXPECT_FALSE(smoke_vacuous(c, r));
  // One step shows no fall nor its absence: not judged by this rule.
  EXPECT_FALSE(smoke_vacuous(c, run(0.0, 4096, 1)));
}

TEST(SmokeVacuous, ItsNoteIsFoundInADetailAndIsNotTheInconclusiveOne) {
  const std::string why = "the unpatched smoke loss went 10.37 -> 10.37 over 3 steps (...)";
  auto d = smoke_vacuous_detail(why);
  EXPECT_EQ(d, "smoke probe vacuous: " + why + " (fix [smoke]: infrarsi check --smoke)");
  EXPECT_TRUE(is_smoke_vacuous(d));
  EXPECT_EQ(*smoke_vacuous_reason("[2 malformed]; " + d), why);
  EXPECT_FALSE(is_smoke_inconclusive(d));
  EXPECT_FALSE(is_smoke_vacuous(smoke_inconclusive_detail(why)));
  EXPECT_FALSE(is_smoke_vacuous(smoke_probe_detail("loss_drift: x", {"a"})));
}

TEST(SmokeViolation, ItsDetailKeepsTheViolationsCode) {
  auto d = smoke_probe_detail("loss_drift: step 0 loss 5.5 differs", {"a", "b"});
  EXPECT_EQ(d, "loss_drift: step 0 loss 5.5 differs; smoke probe of a, b (the full launch did "
               "not start)");
  EXPECT_EQ(violation_code(d), "loss_drift");
  EXPECT_TRUE(is_smoke_probe(d));
  EXPECT_FALSE(is_smoke_probe("loss_drift: x; stopped early at step 0 of 4"));
  EXPECT_FALSE(is_early_stop(d));
}

} // namespace
} // namespace infrarsi::tuning
