// decide/resources.hpp over synthetic logs folded by the real projection: a lost attempt is
// charged the device-seconds it held its node (dispatch to loss, or to the interruption that
// stopped it, at most its timeout, times its world size), the same after a snapshot, in the
// report and in the totals; and the retention rule of trial copies.

#include "decide/resources.hpp"

#include <gtest/gtest.h>

#include "decide/report.hpp"
#include "messages/codec.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::decide {
namespace {

using tuning::purpose_kind;

constexpr std::int64_t t0 = 1'800'000'000'000'000'000; // ns since the Unix epoch
constexpr std::int64_t s = 1'000'000'000;

tuning::task_spec task_with_world_size(const std::string& world_size) {
  tuning::task_spec t;
  t.name = "t";
  t.workload.world_size = world_size;
  t.limits.timeout_s = 600;
  tuning::knob_spec k;
  k.name = "mb";
  k.type = tuning::knob_type::integer;
  k.values = {std::int64_t{1}, std::int64_t{2}, std::int64_t{4}};
  k.default_value = std::int64_t{1};
  t.knobs.push_back(k);
  return t;
}

/// A log being written: events with the recorded times the test chooses.
struct synthetic_log {
  std::vector<store::recorded_event> events;
  void add(wire::EventKind kind, const messages::byte_buffer& payload, std::int64_t at_ns) {
    store::recorded_event ev;
    ev.kind = static_cast<store::event_kind_t>(kind);
    ev.run_id = "r";
    ev.sequence = events.size();
    ev.global_position = events.size();
    ev.recorded_at_ns = at_ns;
    ev.payload = payload;
    events.push_back(std::move(ev));
  }
  void spec(wire::EventKind kind, std::uint64_t id, std::uint32_t attempt, std::int64_t at_ns,
            std::int64_t mb = 1) {
    wire::TrialSpecT spec;
    spec.trial_id = id;
    spec.attempt = attempt;
    spec.purpose_kind = wire::Purpose::Explore;
    spec.timeout_s = 600;
    auto k = std::make_unique<wire::KnobAssignmentT>();
    k->name = "mb";
    wire::IntKnobT v;
    v.value = mb;
    k->value.Set(v);
    spec.knobs.push_back(std::move(k));
    add(kind, messages::trial_spec_msg::pack(spec).bytes(), at_ns);
  }
  void completed(std::uint64_t id, std::uint32_t attempt, double device_s, std::int64_t at_ns) {
    wire::TrialResultT r;
    r.trial_id = id;
    r.attempt = attempt;
    r.outcome = wire::Outcome::Ok;
    r.wall_time_s = device_s / 8;
    r.device_seconds = device_s;
    add(wire::EventKind::TrialCompleted, messages::trial_result_msg::pack(r).bytes(), at_ns);
  }
  void interrupted(const nlohmann::json& in_flight, std::int64_t at_ns) {
    nlohmann::json doc = {{"signal", 15}, {"in_flight", in_flight}};
    add(wire::EventKind::RunInterrupted,
        messages::make_document("interrupted/1", doc.dump()).bytes(), at_ns);
  }
  [[nodiscard]] store::run_state fold(std::size_t first = 0) const {
    store::run_projection p{"r"};
    for (std::size_t i = first; i < events.size(); ++i)
      p.apply(events[i]);
    return p.state();
  }
};

/// The case: an attempt that ran 2 min 11 s before its node died, on 8 devices.
TEST(LostAttemptCharge, FromDispatchToTheLossTimesTheWorldSize) {
  auto task = task_with_world_size("8");
  synthetic_log log;
  log.spec(wire::EventKind::TrialProposed, 0, 0, t0 - 5 * s);
  log.spec(wire::EventKind::TrialDispatched, 0, 0, t0);
  log.spec(wire::EventKind::TrialLost, 0, 0, t0 + 131 * s);
  auto run = log.fold();
  ASSERT_EQ(run.trials.size(), 1u);
  const auto& lost = run.trials[0];
  EXPECT_EQ(lost.outcome, tuning::trial_outcome::lost);
  EXPECT_DOUBLE_EQ(lost.wall_time_s, 131.0);
  EXPECT_DOUBLE_EQ(charged_device_seconds(task, lost), 131.0 * 8);
  EXPECT_TRUE(run.in_flight.empty());

  // Re-queued as attempt 1, which completes with its measured 80 device-seconds.
  log.spec(wire::EventKind::TrialProposed, 0, 1, t0 + 132 * s);
  log.spec(wire::EventKind::TrialDispatched, 0, 1, t0 + 132 * s);
  log.completed(0, 1, 80.0, t0 + 142 * s);
  run = log.fold();
  auto spend = device_seconds_spent(task, run);
  EXPECT_DOUBLE_EQ(spend.total_s, 131.0 * 8 + 80.0);
  EXPECT_EQ(spend.lost_attempts, 1u);
  EXPECT_DOUBLE_EQ(spend.lost_s, 131.0 * 8);
  // The lost attempt does not spend a search trial: it is the same trial, re-queued.
  EXPECT_EQ(search_trials(run), 1u);

  // The report shows it, per trial, as the cost of lost trials and in the total. (The markdown
  // needs the doctor's and the promotion's documents, which every finished run has.)
  run.doctor_doc = nlohmann::json{{"noise", {{"runs", 1}, {"cv", 0.01}}}};
  run.promotion = nlohmann::json{{"promoted", false}, {"reason", "nothing to promote"}};
  auto report = make_report(task, run);
  EXPECT_DOUBLE_EQ(report["trials"][0]["device_seconds"].get<double>(), 1048.0);
  EXPECT_DOUBLE_EQ(report["trials"][0]["wall_time_s"].get<double>(), 131.0);
  EXPECT_DOUBLE_EQ(report["failed_trials_cost"]["lost"]["device_seconds"].get<double>(), 1048.0);
  EXPECT_DOUBLE_EQ(report["device_seconds_total"].get<double>(), 1128.0);
  EXPECT_EQ(report["device_seconds_lost"]["attempts"].get<int>(), 1);
  auto md = render_markdown(report);
  EXPECT_NE(md.find("Total: 1128.0 device-seconds, of which 1048.0 on 1 lost attempt(s)"),
            std::string::npos)
      << md;
}

TEST(LostAttemptCharge, AnInterruptedAttemptEndsAtTheInterruption) {
  auto task = task_with_world_size("{mb}"); // world size from a knob: mb = 4
  synthetic_log log;
  log.spec(wire::EventKind::TrialProposed, 0, 0, t0, 4);
  log.spec(wire::EventKind::TrialDispatched, 0, 0, t0, 4);
  log.spec(wire::EventKind::TrialProposed, 1, 0, t0, 4);
  log.spec(wire::EventKind::TrialDispatched, 1, 0, t0 + 10 * s, 4);
  log.interrupted(
      nlohmann::json::array({nlohmann::json::array({0, 0}), nlohmann::json::array({1, 0})}),
      t0 + 30 * s);
  // Resumed an hour later: the earlier life had stopped both at the interruption.
  log.spec(wire::EventKind::TrialLost, 0, 0, t0 + 3630 * s, 4);
  log.spec(wire::EventKind::TrialLost, 1, 0, t0 + 3630 * s, 4);
  auto run = log.fold();
  ASSERT_EQ(run.trials.size(), 2u);
  EXPECT_DOUBLE_EQ(run.trials[0].wall_time_s, 30.0);
  EXPECT_DOUBLE_EQ(run.trials[1].wall_time_s, 20.0);
  EXPECT_DOUBLE_EQ(charged_device_seconds(task, run.trials[0]), 120.0);
  EXPECT_DOUBLE_EQ(device_seconds_spent(task, run).total_s, 200.0);
}

TEST(LostAttemptCharge, AtMostTheTimeoutAndNothingWithoutADispatch) {
  auto task = task_with_world_size("2");
  synthetic_log log;
  log.spec(wire::EventKind::TrialProposed, 0, 0, t0);
  log.spec(wire::EventKind::TrialDispatched, 0, 0, t0);
  log.spec(wire::EventKind::TrialLost, 0, 0, t0 + 7200 * s); // found lost two hours later
  auto run = log.fold();
  EXPECT_DOUBLE_EQ(run.trials[0].wall_time_s, 600.0); // its timeout_s
  EXPECT_DOUBLE_EQ(charged_device_seconds(task, run.trials[0]), 1200.0);
  // A clock running backwards (an edited host clock) charges nothing rather than a negative.
  synthetic_log back;
  back.spec(wire::EventKind::TrialProposed, 0, 0, t0);
  back.spec(wire::EventKind::TrialDispatched, 0, 0, t0);
  back.spec(wire::EventKind::TrialLost, 0, 0, t0 - 50 * s);
  EXPECT_DOUBLE_EQ(back.fold().trials[0].wall_time_s, 0.0);
  // An unfinished attempt is charged nothing yet.
  synthetic_log running;
  running.spec(wire::EventKind::TrialProposed, 0, 0, t0);
  running.spec(wire::EventKind::TrialDispatched, 0, 0, t0);
  auto r = running.fold();
  EXPECT_EQ(r.in_flight.size(), 1u);
  EXPECT_DOUBLE_EQ(charged_device_seconds(task, r.trials[0]), 0.0);
}

/// A snapshot taken while the attempt is in flight (after the interruption) keeps its clock: the
/// fold of snapshot + tail charges what the full fold charges.
TEST(LostAttemptCharge, TheSameFromASnapshot) {
  synthetic_log log;
  log.spec(wire::EventKind::TrialProposed, 0, 0, t0);
  log.spec(wire::EventKind::TrialDispatched, 0, 0, t0);
  log.interrupted(nlohmann::json::array({nlohmann::json::array({0, 0})}), t0 + 42 * s);
  const std::size_t covered = log.events.size();
  auto mid = log.fold();
  log.spec(wire::EventKind::TrialLost, 0, 0, t0 + 500 * s);
  auto text = store::serialize_run_state(mid);
  auto parsed = store::parse_run_state(text);
  ASSERT_TRUE(parsed) << describe(parsed.error());
  ASSERT_EQ(parsed->in_flight.size(), 1u);
  EXPECT_EQ(parsed->in_flight.begin()->second.dispatched_at_ns, t0);
  EXPECT_EQ(parsed->in_flight.begin()->second.interrupted_at_ns, t0 + 42 * s);
  EXPECT_EQ(store::serialize_run_state(*parsed), text);
  store::run_projection restored{*parsed, covered, 0};
  for (std::size_t i = covered; i < log.events.size(); ++i)
    restored.apply(log.events[i]);
  EXPECT_DOUBLE_EQ(restored.state().trials[0].wall_time_s, 42.0);
  EXPECT_EQ(store::serialize_run_state(restored.state()), store::serialize_run_state(log.fold()));
}

tuning::trial_record trial(std::uint64_t id, purpose_kind kind, double time, bool verified = true) {
  tuning::trial_record r;
  r.trial_id = id;
  r.kind = kind;
  r.purpose = tuning::label(kind);
  r.dispatched = true;
  r.finished = true;
  r.outcome = tuning::trial_outcome::ok;
  r.verified = verified;
  r.timed_step_time_s = verified ? time : 0.0;
  r.config.knobs["mb"] = std::int64_t{static_cast<std::int64_t>(id)};
  return r;
}

TEST(TrialCopyRetention, KeepsBaselineCandidatesTheLastKAndAnythingStillOpen) {
  auto task = task_with_world_size("1");
  task.budget.verify_top = 2;
  store::run_state run;
  run.run_id = "r";
  run.contract_doc = nlohmann::json{{"policy", "random/1"}};
  tuning::noise_estimate n;
  n.mean_step_time_s = 1.0;
  run.noise = n;
  run.doctor_doc = nlohmann::json::object();
  for (std::uint64_t i = 0; i < 3; ++i)
    run.trials.push_back(trial(i, purpose_kind::baseline, 1.0));
  // Explore 3..10: 4 and 6 are the fastest (the candidates); 9 lost; 10 awaits its verdict.
  const double times[] = {0.99, 0.5, 0.98, 0.6, 0.97, 0.96, 0.95, 0.94};
  for (std::uint64_t i = 3; i <= 10; ++i)
    run.trials.push_back(trial(i, purpose_kind::explore, times[i - 3]));
  run.trials[9].outcome = tuning::trial_outcome::lost;
  run.trials[9].verified = false;
  run.trials[10].verified = false;
  tuning::trial_record open = trial(11, purpose_kind::explore, 0.0, false);
  open.finished = false;
  run.trials.push_back(open);

  auto removable = removable_trial_copies(task, run, 2);
  // Kept: 0 (first baseline), 4 and 6 (candidates), 9 and 10 (the last two ended), 11 (running).
  std::vector<attempt_id> expected = {{1, 0}, {2, 0}, {3, 0}, {5, 0}, {7, 0}, {8, 0}};
  EXPECT_EQ(removable, expected);
  // keep_last = 0: the lost attempt goes too; the one awaiting its verdict stays.
  expected.push_back({9, 0});
  EXPECT_EQ(removable_trial_copies(task, run, 0), expected);
  // A large keep_last keeps everything.
  EXPECT_TRUE(removable_trial_copies(task, run, 100).empty());
}

} // namespace
} // namespace infrarsi::decide
