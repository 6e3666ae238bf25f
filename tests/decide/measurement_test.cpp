// The adaptive measurement (decide::plan_doctor, decide::reverification_looks, issue 19): whole
// runs driven by decide::next_step through the benchmark's run driver (bench/run_driver.hpp: a
// real in-memory event log and the real projection, every step answered by the decision
// functions the actors call), on a one-knob task whose trials draw their step times from a seeded
// log-normal noise model written here: a run-to-run offset (sd `run_cv`) and per-step jitter
// (sd `step_cv`) around the configuration's true step time.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "bench/evaluator.hpp"
#include "bench/run_driver.hpp"
#include "decide/decisions.hpp"
#include "decide/report.hpp"
#include "decide/seeded_trials.hpp"
#include "tuning/contract_check.hpp"

namespace infrarsi::decide {
namespace {

using test::normal;

struct noise_model {
  double base_s = 0.40;      // the baseline's true step time
  double speedup = 1.15;     // the candidate's (mb = 2) true speedup
  double run_cv = 0.08;      // log-sd of each run's offset
  double step_cv = 0.01;     // log-sd of each step's jitter
  double explore_luck = 0.8; // the search's one measurement of the candidate: this x its truth
  /// (trial id, attempt) -> a factor on every step (a disturbed run).
  std::map<std::pair<std::uint64_t, std::uint32_t>, double> disturb;
};

tuning::task_spec one_knob_task() {
  tuning::task_spec t;
  t.name = "measure";
  tuning::knob_spec k;
  k.name = "mb";
  k.type = tuning::knob_type::integer;
  k.values = {std::int64_t{1}, std::int64_t{2}};
  k.default_value = std::int64_t{1};
  t.knobs.push_back(k);
  t.contract.steps = 12;
  t.contract.timed_first = 2;
  t.contract.timed_last = 11; // 10 timed steps
  t.contract.simulated_time = true;
  t.budget.trials = 1;
  t.budget.baseline_repeats = 3;
  t.budget.verify_top = 1;
  t.budget.verify_repeats = 3;
  t.budget.target_mds = 0.03;
  t.budget.max_baseline_repeats = 12;
  t.budget.max_verify_repeats = 24;
  return t;
}

class noisy_evaluator final : public bench::evaluator {
public:
  noisy_evaluator(tuning::task_spec task, noise_model m) : task_(std::move(task)), m_(m) {}
  const tuning::task_spec& task() const override { return task_; }
  void begin_run(std::uint64_t seed) override { seed_ = seed; }
  tuning::trial_record measure(const tuning::configuration& config, std::uint64_t trial_id,
                               std::uint32_t attempt, const std::string& purpose,
                               const tuning::loss_reference* /*early_stop*/,
                               const std::vector<std::string>& /*smoke_patches*/) override {
    std::uint64_t state = seed_ * 1000003ULL + trial_id * 131ULL + attempt;
    double truth = *true_step_time(config);
    double level = truth * std::exp(m_.run_cv * normal(state));
    if (purpose == "explore")
      level = truth * m_.explore_luck; // a lucky search measurement makes it a candidate
    if (auto it = m_.disturb.find({trial_id, attempt}); it != m_.disturb.end())
      level *= it->second;
    return test::noisy_trial(task_.contract, config, trial_id, attempt, purpose, level, m_.step_cv,
                             state, 1.2);
  }
  std::optional<double> true_step_time(const tuning::configuration& c) override {
    auto it = c.knobs.find("mb");
    bool candidate = it != c.knobs.end() && it->second == tuning::knob_value{std::int64_t{2}};
    return candidate ? m_.base_s / m_.speedup : m_.base_s;
  }
  double optimum_step_time() override { return m_.base_s / std::max(1.0, m_.speedup); }
  std::string optimum_description() override { return "mb=2"; }
  double baseline_true_step_time() override { return m_.base_s; }
  std::vector<std::pair<std::string, std::string>> incompatible_patches() override { return {}; }

private:
  tuning::task_spec task_;
  noise_model m_;
  std::uint64_t seed_ = 0;
};

bench::driven_run drive(const tuning::task_spec& task, const noise_model& m, std::uint64_t seed) {
  noisy_evaluator ev{task, m};
  return bench::drive_run(ev, test::budget_options(task, seed));
}

std::size_t baseline_trials(const store::run_state& s) {
  std::set<std::uint64_t> ids;
  for (const auto& t : s.trials)
    if (t.kind == tuning::purpose_kind::baseline)
      ids.insert(t.trial_id);
  return ids.size();
}

const nlohmann::json& measurement(const bench::driven_run& r) {
  static const nlohmann::json none;
  return r.state.doctor_doc ? (*r.state.doctor_doc)["measurement"] : none;
}

TEST(NextStepAdaptive, AQuietBaselineStopsAtTheMinimumRepeats) {
  noise_model m;
  m.run_cv = 0.0;
  m.step_cv = 0.002;
  auto r = drive(one_knob_task(), m, 1);
  ASSERT_EQ(r.error, "");
  ASSERT_TRUE(adaptive_measurement(r.state));
  EXPECT_EQ(baseline_trials(r.state), 3u);
  const auto& meas = measurement(r);
  ASSERT_TRUE(meas.is_object());
  EXPECT_EQ(meas["verdict"], "target_reached");
  EXPECT_EQ(meas["runs"], 3);
  // log-sd at its floor 0.005: mds = exp(2.80 x 0.005 x sqrt(2/3)) - 1 = 1.15 %; the 80 % upper
  // limit of the measured spread (about 0.1 %, x 2.117) is below the floor, so also 1.15 %.
  EXPECT_NEAR(meas["mds_reached"].get<double>(), 0.01150, 1e-4);
  EXPECT_NEAR(meas["mds_upper80"].get<double>(), 0.01150, 1e-4);
  EXPECT_TRUE(meas["disturbed"].empty());
}

TEST(NextStepAdaptive, ANoisierBaselineTakesMoreRepeatsUntilTheTarget) {
  // Run CV 2 %: 3 runs give an mds about 4.7 % (above the 3 % target); 8 runs at the true noise,
  // about 11 at its 80 % upper limit.
  // Each seed either reaches the target with the repeats it took, or takes all 12 and says so.
  noise_model m;
  m.run_cv = 0.02;
  std::size_t more = 0;
  std::size_t reached = 0;
  std::string figures;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    auto r = drive(one_knob_task(), m, seed);
    ASSERT_EQ(r.error, "");
    const auto& meas = measurement(r);
    ASSERT_TRUE(meas.is_object());
    const auto runs = baseline_trials(r.state);
    EXPECT_EQ(meas["runs"].get<std::size_t>(), runs);
    EXPECT_EQ(r.state.noise->runs, runs);
    // Reached: the mds at the 80 % upper limit of the log-sd is within the target.
    if (meas["reached"].get<bool>()) {
      ++reached;
      EXPECT_EQ(meas["verdict"], "target_reached");
      EXPECT_LE(meas["mds_upper80"].get<double>(), 0.03);
      EXPECT_LE(meas["mds_reached"].get<double>(), 0.03);
      EXPECT_LE(runs, 12u);
    } else {
      EXPECT_EQ(meas["verdict"], "max_repeats") << meas.dump();
      EXPECT_EQ(runs, 12u);
      EXPECT_GT(meas["mds_upper80"].get<double>(), 0.03);
    }
    more += runs > 3 ? 1 : 0;
    figures += " " + std::to_string(runs) + (meas["reached"].get<bool>() ? "" : "(cap)");
  }
  EXPECT_GE(more, 9u);    // (nearly) every seed needed more than the minimum 3
  EXPECT_GE(reached, 4u); // and about half got there within 12
  std::cout << "[ figures  ] run CV 2 %: baseline runs per seed:" << figures << "\n";
}

TEST(NextStepAdaptive, ATooNoisyMachineIsReportedWithTheFigures) {
  noise_model m;
  m.run_cv = 0.08; // the loaded machine (CV 7.8 %)
  const auto task = one_knob_task();
  auto r = drive(task, m, 5);
  ASSERT_EQ(r.error, "");
  const auto& meas = measurement(r);
  ASSERT_TRUE(meas.is_object());
  EXPECT_EQ(baseline_trials(r.state), 12u); // up to the cap
  EXPECT_EQ(meas["verdict"], "max_repeats");
  EXPECT_FALSE(meas["reached"].get<bool>());
  EXPECT_GT(meas["mds_reached"].get<double>(), 0.03);
  // At CV ~8 % the target needs well over 100 runs per side; the quieter machine: CV <= 2.06 %.
  EXPECT_GT(meas["would_reach"]["runs"].get<std::size_t>(), 50u);
  // log(1.03) / (2.8016 sqrt(2 / 12)) = 2.584 %, over the 80 % upper-limit factor of 12 runs,
  // sqrt(11 / chi2_{0.2, 11}) = sqrt(11 / 6.989) = 1.2545: 2.06 %.
  EXPECT_NEAR(meas["would_reach"]["cv_at_max_repeats"].get<double>(), 0.02060, 5e-5);
  // The runs differ by far more than their steps' noise: more timed steps cannot help.
  EXPECT_TRUE(meas["would_reach"]["timed_steps"].is_null());
  const auto msg = meas["message"].get<std::string>();
  EXPECT_NE(msg.find("too noisy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("more timed steps would not do"), std::string::npos) << msg;
  auto md = render_markdown(make_report(task, r.state));
  EXPECT_NE(md.find("**WARNING** the machine is too noisy"), std::string::npos) << md;
  std::cout << "[ figures  ] run CV 8 %: " << meas["message"].get<std::string>() << "\n";

  // The same noise from the steps (step jitter 25 %, steady runs): more timed steps would do.
  noise_model steps;
  steps.run_cv = 0.0;
  steps.step_cv = 0.25;
  auto s = drive(task, steps, 5);
  ASSERT_EQ(s.error, "");
  const auto& sm = measurement(s);
  EXPECT_EQ(sm["verdict"], "max_repeats") << sm.dump();
  ASSERT_TRUE(sm["would_reach"]["timed_steps"].is_number()) << sm.dump();
  EXPECT_GT(sm["would_reach"]["timed_steps"].get<std::uint64_t>(), 10u);
  EXPECT_EQ(sm["would_reach"]["timed_steps_now"], 10);
  std::cout << "[ figures  ] step CV 25 %: " << sm["message"].get<std::string>() << "\n";
}

TEST(NextStepAdaptive, ADisturbedBaselineIsFlaggedAndReMeasured) {
  noise_model m;
  m.base_s = 0.40;
  m.run_cv = 0.01;
  m.disturb[{1, 0}] = 0.55 / 0.40; // the repeats of 0.39 s and 0.55 s
  const auto task = one_knob_task();
  auto r = drive(task, m, 7);
  ASSERT_EQ(r.error, "");
  const auto* again = r.state.find(1, 1);
  ASSERT_NE(again, nullptr); // trial 1 was re-measured as attempt 1
  EXPECT_EQ(again->kind, tuning::purpose_kind::baseline);
  const auto& meas = measurement(r);
  ASSERT_EQ(meas["disturbed"].size(), 1u) << meas.dump();
  EXPECT_EQ(meas["disturbed"][0]["trial_id"], 1);
  EXPECT_EQ(meas["disturbed"][0]["attempt"], 0);
  EXPECT_EQ(meas["disturbed"][0]["action"], "re-measured");
  EXPECT_NEAR(meas["disturbed"][0]["step_time_s"].get<double>(), 0.55, 0.02);
  // The noise is the machine's, not the disturbance's: CV about 1 %, 3 runs.
  EXPECT_LT(r.state.noise->cv, 0.03);
  EXPECT_EQ(r.state.noise->runs, 3u);
  auto md = render_markdown(make_report(task, r.state));
  EXPECT_NE(md.find("**disturbed baseline** trial 1.0"), std::string::npos) << md;

  // Disturbed again on its re-measure: it is kept, and the report says the machine is that noisy.
  m.disturb[{1, 1}] = 0.55 / 0.40;
  auto k = drive(task, m, 7);
  ASSERT_EQ(k.error, "");
  EXPECT_EQ(k.state.find(1, 2), nullptr);
  const auto& km = measurement(k);
  ASSERT_EQ(km["disturbed"].size(), 2u) << km.dump();
  EXPECT_EQ(km["disturbed"][1]["action"], "kept");
  EXPECT_GT(km["disturbed"][1]["z"].get<double>(), 4.0);
}

/// The candidate's re-verification (CandidateReverified) and whether anything was promoted.
struct outcome {
  bool promoted = false;
  std::size_t looks = 0;
  std::size_t pairs = 0;
  double ci_low = 0;
  double ci_high = 0;
  std::string decision;
};

outcome verify(const tuning::task_spec& task, const noise_model& m, std::uint64_t seed) {
  auto r = drive(task, m, seed);
  EXPECT_EQ(r.error, "");
  outcome o;
  o.promoted = r.state.promotion && r.state.promotion->value("promoted", false);
  EXPECT_EQ(r.state.reverifications.size(), 1u);
  if (r.state.reverifications.empty())
    return o;
  const auto& rv = r.state.reverifications.back();
  auto st = reverification_looks(r.state, rv.candidate_trial, rv.round);
  o.looks = st.looks.size();
  o.pairs = rv.candidate_times_s.size();
  o.ci_low = rv.estimate.ci_low;
  o.ci_high = rv.estimate.ci_high;
  o.decision = st.decision;
  EXPECT_EQ(o.promoted, st.decision == "promote");
  return o;
}

TEST(NextStepAdaptive, A115xCandidateUnderCv8IsPromotedAfterTheSequentialLooks) {
  noise_model m;
  m.run_cv = 0.08;
  m.speedup = 1.15;
  const auto task = one_knob_task();
  auto o = verify(task, m, 11);
  EXPECT_TRUE(o.promoted);
  EXPECT_EQ(o.decision, "promote");
  EXPECT_GT(o.looks, 1u); // 3 pairs (the issue's [0.84, 1.56]) never decide
  EXPECT_EQ(o.pairs, 3 * o.looks);
  EXPECT_LE(o.pairs, 24u);
  EXPECT_GT(o.ci_low, 1.03); // the repeated interval clears 1 + the margin (the target 3 %)
  EXPECT_GT(o.ci_high, 1.15);
  std::cout << "[ figures  ] 1.15x at CV 8 %: promoted at look " << o.looks << " (" << o.pairs
            << " pairs), interval [" << o.ci_low << ", " << o.ci_high << "]\n";
  // Over 20 seeds the sequential test promotes it nearly always, at a varying look.
  std::size_t promoted = 0;
  std::size_t pairs = 0;
  for (std::uint64_t seed = 100; seed < 120; ++seed) {
    auto x = verify(task, m, seed);
    promoted += x.promoted ? 1 : 0;
    pairs += x.pairs;
  }
  EXPECT_GE(promoted, 18u);
  std::cout << "[ figures  ] 1.15x at CV 8 %: promoted in " << promoted << " of 20 seeds, "
            << static_cast<double>(pairs) / 20.0 << " pairs on average\n";

  // The same report shows each look.
  auto r = drive(task, m, 11);
  auto md = render_markdown(make_report(task, r.state));
  EXPECT_NE(md.find("Sequential looks of candidate"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | 3 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| promote |"), std::string::npos) << md;
}

TEST(NextStepAdaptive, AnAaCandidateUnderCv8IsPromotedInNoneOf20Runs) {
  noise_model m;
  m.run_cv = 0.08;
  m.speedup = 1.0; // the candidate is the baseline's twin; only its search measurement was lucky
  const auto task = one_knob_task();
  std::size_t promoted = 0;
  std::size_t looks = 0;
  std::map<std::string, std::size_t> decisions;
  for (std::uint64_t seed = 200; seed < 220; ++seed) {
    auto o = verify(task, m, seed);
    promoted += o.promoted ? 1 : 0;
    looks += o.looks;
    decisions[o.decision] += 1;
  }
  EXPECT_EQ(promoted, 0u);
  EXPECT_GT(looks, 20u); // every run looked at least once, most more than once
  EXPECT_EQ(decisions["promote"], 0u);
  std::cout << "[ figures  ] A/A at CV 8 %: " << promoted << " of 20 promoted; decisions:";
  for (const auto& [d, n] : decisions)
    std::cout << " " << d << " " << n;
  std::cout << "; " << static_cast<double>(looks) / 20.0 << " looks on average\n";
}

TEST(NextStepAdaptive, ARunLockedWithoutTheRuleMeasuresAsBefore) {
  // A fixed/0 run (ContractLocked without "measurement_rule"): 3 baselines however noisy.
  store::run_state s;
  s.contract_doc = nlohmann::json{{"budget", {{"baseline_repeats", 3}, {"verify_repeats", 3}}}};
  EXPECT_FALSE(adaptive_measurement(s));
  auto b = budget_of(one_knob_task(), s);
  EXPECT_FALSE(b.adaptive);
  EXPECT_EQ(b.max_baseline_repeats, 3u);
  EXPECT_EQ(b.max_verify_repeats, 3u);
  EXPECT_EQ(b.target_mds, 0.0);
  s.contract_doc = nlohmann::json{{"measurement_rule", current_measurement_rule},
                                  {"budget",
                                   {{"baseline_repeats", 3},
                                    {"verify_repeats", 3},
                                    {"target_mds", 0.05},
                                    {"max_baseline_repeats", 9},
                                    {"max_verify_repeats", 15}}}};
  b = budget_of(one_knob_task(), s);
  EXPECT_TRUE(b.adaptive);
  EXPECT_EQ(b.max_baseline_repeats, 9u);
  EXPECT_EQ(b.max_verify_repeats, 15u);
  EXPECT_DOUBLE_EQ(b.target_mds, 0.05);
  tuning::noise_estimate n;
  n.min_detectable_speedup = 0.2;
  s.noise = n;
  EXPECT_DOUBLE_EQ(promotion_margin(s), 0.05); // the target caps the bar
  s.contract_doc->erase("measurement_rule");
  EXPECT_DOUBLE_EQ(promotion_margin(s), 0.2); // fixed/0: the doctor's mds, as before
}

/// A run locked with the adaptive rule and the one-knob task's budget, its doctor stage begun.
store::run_state adaptive_doctor_state() {
  const auto task = one_knob_task();
  store::run_state s;
  s.run_id = "r";
  s.stages_started = {"init", "doctor"};
  s.stages_completed = {"init"};
  s.contract_doc = contract_locked_doc(task, nlohmann::json::object(), nlohmann::json::object(),
                                       "hw", "", 1, task.budget.trials);
  s.priors_loaded = true;
  s.experience_seeded = true;
  return s;
}

/// A baseline attempt that ended ok: 12 steps at `level` s with a fixed per-step pattern (the
/// same for every trial), not yet verified (the doctor verifies baselines once calibrated).
tuning::trial_record ended_baseline(std::uint64_t id, std::uint32_t attempt, double level) {
  tuning::trial_record r;
  r.trial_id = id;
  r.attempt = attempt;
  r.kind = tuning::purpose_kind::baseline;
  r.purpose = tuning::label(r.kind);
  r.config = tuning::baseline_configuration(one_knob_task());
  r.dispatched = r.finished = true;
  r.outcome = tuning::trial_outcome::ok;
  for (std::uint32_t st = 0; st < 12; ++st) {
    tuning::step_point p;
    p.step = st;
    p.loss = 2.0 - 0.01 * st;
    p.step_time_s = level * (1.0 + 0.002 * static_cast<double>((st * 7) % 5) - 0.004);
    r.steps.push_back(p);
  }
  r.phase_s["forward"] = level / 3;
  r.wall_time_s = 12 * level;
  return r;
}

/// An attempt an earlier life dispatched and never saw end: TrialLost on the restart.
tuning::trial_record lost_baseline(std::uint64_t id, std::uint32_t attempt) {
  auto r = ended_baseline(id, attempt, 0.0);
  r.steps.clear();
  r.phase_s.clear();
  r.outcome = tuning::trial_outcome::lost;
  r.wall_time_s = 0.1;
  return r;
}

TEST(NextStepAdaptive, ALostBaselineAttemptReRunIsInvisibleToTheDoctor) {
  const auto task = one_knob_task();
  // Three baselines whose levels spread by about 4 %: above the 3 % target, more repeats follow.
  const std::vector<double> levels = {0.400, 0.416, 0.385};
  auto never = adaptive_doctor_state();
  for (std::uint64_t i = 0; i < 3; ++i)
    never.trials.push_back(ended_baseline(i, 0, levels[i]));
  // The same run killed twice while trial 1 ran: attempts 0 and 1 lost, attempt 2 measured what
  // attempt 0 would have.
  auto killed = adaptive_doctor_state();
  killed.trials.push_back(ended_baseline(0, 0, levels[0]));
  killed.trials.push_back(lost_baseline(1, 0));
  killed.trials.push_back(ended_baseline(2, 0, levels[2]));
  killed.trials.push_back(lost_baseline(1, 1));
  killed.trials.push_back(ended_baseline(1, 2, levels[1]));

  auto a = plan_doctor(task, never);
  auto b = plan_doctor(task, killed);
  EXPECT_TRUE(a.remeasure.empty());
  EXPECT_TRUE(b.remeasure.empty());
  ASSERT_GT(a.more, 0u) << a.measurement.dump();
  EXPECT_EQ(b.more, a.more);
  EXPECT_EQ(b.measurement, a.measurement);
  EXPECT_EQ(a.measurement["runs"], 3);
  EXPECT_EQ(a.measurement["baseline_trials"], 3);
  EXPECT_TRUE(a.measurement["disturbed"].empty());

  // next_step: the same new baselines (trial ids 3, ...), never a re-run of trial 1.
  step_input in;
  in.free_slots = 8;
  auto sa = next_step(task, never, in);
  auto sb = next_step(task, killed, in);
  ASSERT_EQ(sa.kind, step_kind::launch);
  ASSERT_EQ(sb.kind, step_kind::launch);
  ASSERT_EQ(sb.launches.size(), sa.launches.size());
  for (std::size_t i = 0; i < sa.launches.size(); ++i) {
    EXPECT_EQ(sa.launches[i].trial_id, 3 + i);
    EXPECT_EQ(sb.launches[i].trial_id, sa.launches[i].trial_id);
    EXPECT_EQ(sb.launches[i].attempt, 0u);
    EXPECT_EQ(sb.launches[i].kind, tuning::purpose_kind::baseline);
  }

  // With the repeats the plan asked for ended (the killed run lost the last one once more), the
  // calibration is byte-identical: the same trials, times, noise, phases, loss reference and
  // verdict.
  for (std::uint64_t i = 0; i < a.more; ++i) {
    const double level = 0.400 + 0.003 * static_cast<double>(i % 3);
    never.trials.push_back(ended_baseline(3 + i, 0, level));
    if (i + 1 == a.more)
      killed.trials.push_back(lost_baseline(3 + i, 0));
    killed.trials.push_back(ended_baseline(3 + i, i + 1 == a.more ? 1 : 0, level));
  }
  auto pa = plan_doctor(task, never);
  auto pb = plan_doctor(task, killed);
  EXPECT_EQ(pb.more, pa.more);
  EXPECT_EQ(pb.measurement, pa.measurement);
  if (pa.more == 0) {
    EXPECT_EQ(next_step(task, never, in).kind, step_kind::calibrate);
    EXPECT_EQ(next_step(task, killed, in).kind, step_kind::calibrate);
  }
  const auto ca = nlohmann::json::parse(calibrate_doc(task, never));
  const auto cb = nlohmann::json::parse(calibrate_doc(task, killed));
  ASSERT_FALSE(ca.contains("error")) << ca.dump();
  EXPECT_EQ(cb, ca);
  EXPECT_EQ(ca["noise"]["runs"], 3 + a.more);
  EXPECT_EQ(ca["baseline_trials"].size(), 3 + a.more);
}

TEST(NextStepAdaptive, ALostBaselineAttemptBeforeItsDisturbedRunIsReMeasuredAsIfNeverLost) {
  const auto task = one_knob_task();
  // Trial 1 is disturbed (0.55 s against about 0.40 s) in its first measured attempt.
  auto never = adaptive_doctor_state();
  never.trials.push_back(ended_baseline(0, 0, 0.400));
  never.trials.push_back(ended_baseline(1, 0, 0.550));
  never.trials.push_back(ended_baseline(2, 0, 0.401));
  auto killed = adaptive_doctor_state();
  killed.trials.push_back(ended_baseline(0, 0, 0.400));
  killed.trials.push_back(lost_baseline(1, 0));
  killed.trials.push_back(ended_baseline(1, 1, 0.550));
  killed.trials.push_back(ended_baseline(2, 0, 0.401));
  auto a = plan_doctor(task, never);
  auto b = plan_doctor(task, killed);
  ASSERT_EQ(a.remeasure.size(), 1u) << a.measurement.dump();
  EXPECT_EQ(a.remeasure[0], (attempt_id{1, 0}));
  ASSERT_EQ(b.remeasure.size(), 1u) << b.measurement.dump(); // the lost attempt measured nothing
  EXPECT_EQ(b.remeasure[0], (attempt_id{1, 1}));
  EXPECT_EQ(b.more, a.more);
  step_input in;
  in.free_slots = 4;
  auto sb = next_step(task, killed, in);
  ASSERT_EQ(sb.kind, step_kind::launch);
  ASSERT_EQ(sb.launches.size(), 1u);
  EXPECT_EQ(sb.launches[0].trial_id, 1u);
  EXPECT_EQ(sb.launches[0].attempt, 2u);

  // The re-measure ends quiet (the killed run loses it once first): the same calibration but
  // for the attempt numbers in the list of disturbed runs.
  never.trials.push_back(ended_baseline(1, 1, 0.402));
  killed.trials.push_back(lost_baseline(1, 2));
  killed.trials.push_back(ended_baseline(1, 3, 0.402));
  a = plan_doctor(task, never);
  b = plan_doctor(task, killed);
  EXPECT_TRUE(a.remeasure.empty());
  EXPECT_TRUE(b.remeasure.empty());
  EXPECT_EQ(b.more, a.more);
  EXPECT_EQ(next_step(task, killed, in).kind, next_step(task, never, in).kind);
  auto ca = nlohmann::json::parse(calibrate_doc(task, never));
  auto cb = nlohmann::json::parse(calibrate_doc(task, killed));
  for (auto* doc : {&ca, &cb}) {
    auto& d = (*doc)["measurement"]["disturbed"];
    ASSERT_EQ(d.size(), 1u) << doc->dump();
    EXPECT_EQ(d[0]["trial_id"], 1);
    EXPECT_EQ(d[0]["action"], "re-measured");
    d[0].erase("attempt"); // 0 uninterrupted, 1 in the killed run (attempt 0 was lost)
  }
  EXPECT_EQ(cb, ca);
  EXPECT_EQ(ca["noise"]["runs"], 3);
  EXPECT_NEAR(ca["baseline_step_times_s"][1].get<double>(), 0.402, 0.003);
}

TEST(NextStepAdaptive, ABaselineWhoseResultArrivedBeforeTheHarnessDiedIsNeitherLostNorReRun) {
  const auto task = one_knob_task();
  // Every baseline's TrialCompleted is logged; the harness died before BaselineCalibrated, then
  // (second run) after it but before the baselines' TrialVerified.
  auto s = adaptive_doctor_state();
  for (std::uint64_t i = 0; i < 3; ++i)
    s.trials.push_back(ended_baseline(i, 0, 0.400 + 0.0005 * static_cast<double>(i)));
  step_input in; // a fresh life: nothing running, every slot free
  in.free_slots = 4;
  auto st = next_step(task, s, in);
  EXPECT_EQ(st.kind, step_kind::calibrate) << st.reason; // not lost, not re-launched
  auto plan = plan_doctor(task, s);
  EXPECT_EQ(plan.more, 0u);
  EXPECT_EQ(plan.measurement["verdict"], "target_reached");
  const auto doc = nlohmann::json::parse(calibrate_doc(task, s));
  EXPECT_EQ(doc["noise"]["runs"], 3);
  // BaselineCalibrated logged: the three verdicts, then the end of the doctor.
  s.doctor_doc = doc;
  tuning::noise_estimate n;
  n.runs = 3;
  n.log_sd = doc["noise"]["log_sd"].get<double>();
  n.min_detectable_speedup = doc["noise"]["min_detectable_speedup"].get<double>();
  n.mean_step_time_s = doc["noise"]["mean_step_time_s"].get<double>();
  s.noise = n;
  st = next_step(task, s, in);
  ASSERT_EQ(st.kind, step_kind::verify);
  EXPECT_EQ(st.attempts, (std::vector<attempt_id>{{0, 0}, {1, 0}, {2, 0}}));
  // The calibration a replay recomputes from these events is the logged one.
  EXPECT_EQ(nlohmann::json::parse(calibrate_doc(task, s)), doc);
  for (auto& t : s.trials) {
    t.verified = true;
    t.timed_step_time_s = tuning::timed_step_time(task.contract, t.steps);
  }
  st = next_step(task, s, in);
  EXPECT_EQ(st.kind, step_kind::end_stage);
  EXPECT_EQ(st.stage, "doctor");
}

} // namespace
} // namespace infrarsi::decide
