// The re-verification rule (decide/decisions.hpp): interleaved pairs, Welch interval on log step
// times, promotion only above 1 + MDS, a single fast run never enough, and a round measured under
// visibly higher variance than the doctor's re-measured once.

#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "decide/decisions.hpp"

namespace infrarsi::decide {
namespace {

tuning::trial_record timed(std::uint64_t id, const std::string& purpose, double step_time_s) {
  tuning::trial_record t;
  t.trial_id = id;
  tuning::set_purpose_text(t, purpose);
  t.finished = true;
  t.verified = true;
  t.outcome = tuning::trial_outcome::ok;
  t.timed_step_time_s = step_time_s;
  return t;
}

/// A run whose doctor measured log-sd 0.01 (MDS 3 %) and whose candidate trial 5 was explored.
store::run_state run_with_doctor() {
  store::run_state s;
  tuning::noise_estimate n;
  n.runs = 3;
  n.mean_step_time_s = 1.0;
  n.log_sd = 0.01;
  n.cv = 0.01;
  n.min_detectable_speedup = 0.03;
  s.noise = n;
  s.trials.push_back(timed(5, "explore", 0.7));
  return s;
}

void add_pairs(store::run_state& s, const std::string& tag, const std::vector<double>& base,
               const std::vector<double>& cand) {
  std::uint64_t id = 100 + s.trials.size();
  for (std::size_t i = 0; i < base.size(); ++i) {
    s.trials.push_back(timed(id++, "verify-baseline" + tag, base[i]));
    s.trials.push_back(timed(id++, "verify-candidate" + tag, cand[i]));
  }
}

TEST(Reverify, ClearSpeedupIsPromotable) {
  auto s = run_with_doctor();
  add_pairs(s, "/5", {1.00, 1.01, 0.99}, {0.80, 0.81, 0.79});
  auto doc = nlohmann::json::parse(*reverify_doc(s, 5));
  EXPECT_TRUE(doc["promotable"].get<bool>()) << doc.dump();
  EXPECT_NEAR(doc["speedup"].get<double>(), 1.25, 0.01);
  EXPECT_GT(doc["ci_low"].get<double>(), 1.03);
  EXPECT_EQ(doc["round"], 1);
  EXPECT_FALSE(doc["remeasure"].get<bool>());
}

TEST(Reverify, AFastExploreRunAloneIsNotConfirmation) {
  // The explore run said 0.7 s (1.43x); the interleaved pairs say the same as the baseline.
  auto s = run_with_doctor();
  add_pairs(s, "/5", {1.00, 1.01, 0.99}, {1.00, 0.99, 1.01});
  auto doc = nlohmann::json::parse(*reverify_doc(s, 5));
  EXPECT_FALSE(doc["promotable"].get<bool>());
  EXPECT_NE(doc["reason"].get<std::string>().find("does not clear 1 + the minimum detectable"),
            std::string::npos)
    << doc.dump();
  // Fewer than two pairs never promote either.
  auto one = run_with_doctor();
  add_pairs(one, "/5", {1.0}, {0.5});
  EXPECT_FALSE(nlohmann::json::parse(*reverify_doc(one, 5))["promotable"].get<bool>());
}

TEST(Reverify, VisiblyNoisierThanTheDoctorIsRemeasuredOnceAndOnlyTheNewRoundCounts) {
  auto s = run_with_doctor();
  // Round 1: the candidate's runs spread by +-20 % (log-sd ~0.2 vs the doctor's 0.01).
  add_pairs(s, "/5", {1.00, 1.01, 0.99}, {0.60, 0.90, 0.75});
  auto first = nlohmann::json::parse(*reverify_doc(s, 5));
  EXPECT_FALSE(first["promotable"].get<bool>());
  EXPECT_TRUE(first["remeasure"].get<bool>()) << first.dump();
  EXPECT_EQ(first["round"], 1);
  // Round 2 (purposes "/5#2") is quiet and clear: it alone decides.
  add_pairs(s, "/5#2", {1.00, 1.01, 0.99}, {0.80, 0.81, 0.79});
  auto second = nlohmann::json::parse(*reverify_doc(s, 5));
  EXPECT_EQ(second["round"], 2);
  EXPECT_TRUE(second["promotable"].get<bool>()) << second.dump();
  EXPECT_EQ(second["candidate_times_s"].size(), 3u);
  // A second noisy round is rejected, not re-measured again.
  auto t = run_with_doctor();
  add_pairs(t, "/5", {1.00, 1.01, 0.99}, {0.60, 0.90, 0.75});
  add_pairs(t, "/5#2", {1.00, 1.01, 0.99}, {0.60, 0.90, 0.75});
  auto again = nlohmann::json::parse(*reverify_doc(t, 5));
  EXPECT_FALSE(again["promotable"].get<bool>());
  EXPECT_FALSE(again["remeasure"].get<bool>());
}

TEST(Reverify, ALostAttemptIsNotAFailedRun) {
  auto s = run_with_doctor();
  add_pairs(s, "/5", {1.00, 1.01, 0.99}, {0.80, 0.81, 0.79});
  auto lost = timed(200, "verify-candidate/5", 0.0);
  lost.outcome = tuning::trial_outcome::lost;
  lost.verified = false;
  s.trials.push_back(lost); // re-queued under the next attempt: not a measurement
  EXPECT_TRUE(nlohmann::json::parse(*reverify_doc(s, 5))["promotable"].get<bool>());
  auto crashed = timed(201, "verify-candidate/5", 0.0);
  crashed.outcome = tuning::trial_outcome::crash;
  s.trials.push_back(crashed); // a failed interleaved run blocks promotion
  EXPECT_FALSE(nlohmann::json::parse(*reverify_doc(s, 5))["promotable"].get<bool>());
}

/// Issue 20: an interleaved run that failed only the clock check and was re-measured is replaced
/// by its re-measurement (the latest attempt counts); a re-measurement that failed again vetoes.
TEST(Reverify, ARunReMeasuredAfterTheClockCheckIsReplacedByItsLatestAttempt) {
  auto s = run_with_doctor();
  add_pairs(s, "/5", {1.00, 1.01, 0.99}, {0.80, 0.81, 0.79});
  auto failed = timed(200, "verify-candidate/5", 0.8);
  failed.outcome = tuning::trial_outcome::contract_violation;
  failed.violations = {"clock: steps 2..11: the median step reports -0.02 s ..."};
  s.trials.push_back(failed);
  auto remeasured = timed(200, "verify-candidate/5", 0.80);
  remeasured.attempt = 1;
  s.trials.push_back(remeasured);
  auto doc = nlohmann::json::parse(*reverify_doc(s, 5));
  EXPECT_TRUE(doc["promotable"].get<bool>()) << doc.dump();
  EXPECT_EQ(doc["candidate_times_s"].size(), 4u);
  // The re-measurement broke the contract too: that one counts, and blocks promotion.
  s.trials.back().outcome = tuning::trial_outcome::contract_violation;
  s.trials.back().violations = failed.violations;
  doc = nlohmann::json::parse(*reverify_doc(s, 5));
  EXPECT_FALSE(doc["promotable"].get<bool>());
  EXPECT_EQ(doc["reason"], "1 interleaved run(s) failed or broke the contract");
}

} // namespace
} // namespace infrarsi::decide
