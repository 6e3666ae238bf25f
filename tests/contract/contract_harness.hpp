#pragma once
/// @file contract_harness.hpp
/// The planted-cheat suites' harness (tests/contract/): trials of a task run for real through the
/// node-runner's launcher (scope lock, copy, patches, ranks, metrics, harness clock), logged as
/// the supervisor logs them, calibrated and judged by the real verifier actor.

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/actors.hpp"
#include "adapters/environment.hpp"
#include "adapters/task_file.hpp"
#include "adapters/trial_launcher.hpp"
#include "messages/type_ids.hpp"
#include "store/memory_event_log.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"
#include "tuning/contract_check.hpp"

namespace infrarsi::test {

/// One run's worth of trials of a task, logged like the supervisor logs them and judged by the
/// real verifier actor.
class contract_harness {
public:
  explicit contract_harness(const std::string& task_path) {
    auto t = adapters::load_task_file(task_path);
    if (!t) {
      ADD_FAILURE() << describe(t.error());
      return;
    }
    task_ = *t;
    for (const auto* globs : {&task_.scope.editable, &task_.scope.frozen})
      for (const auto& rel : adapters::match_scope(task_.workload.workdir, *globs))
        lock_[rel] = *adapters::sha256_file(task_.workload.workdir + "/" + rel);
    cfg_.add_message_types<caf::id_block::infrarsi>();
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    verifier_ = sys_->spawn(actors::verifier, &log_, &task_);
  }

  const tuning::task_spec& task() const { return task_; }
  const std::map<std::string, std::string>& lock() const { return lock_; }

  /// Runs one trial with `patches` through the launcher and logs it; returns its id.
  std::uint64_t run(const std::vector<std::string>& patches, const std::string& purpose,
                    const tuning::knob_assignment& knobs = {}) {
    adapters::trial_request req;
    req.task = &task_;
    req.knobs = knobs;
    req.patches = patches;
    req.trial_id = next_id_++;
    req.trial_dir = dir_.sub("trial-" + std::to_string(req.trial_id));
    req.scope_lock = lock_;
    append(wire::EventKind::TrialProposed, adapters::make_trial_spec(req, purpose).bytes());
    auto report = adapters::run_trial(req);
    EXPECT_TRUE(report) << describe(report.error());
    if (report)
      append(wire::EventKind::TrialCompleted, report->result.bytes());
    return req.trial_id;
  }

  /// The doctor's calibration from the baseline trials logged so far (logged, as the
  /// supervisor does).
  nlohmann::json calibrate() {
    auto doc = ask_verifier([&](caf::scoped_actor& self) {
      return self->request(verifier_, caf::infinite, actors::calibrate_atom_v, run_id_);
    });
    append(wire::EventKind::BaselineCalibrated,
           messages::make_document("doctor/1", doc.dump()).bytes());
    return doc;
  }

  /// The verifier's verdict on trial `id` (logged).
  nlohmann::json check(std::uint64_t id) {
    auto doc = ask_verifier([&](caf::scoped_actor& self) {
      return self->request(verifier_, caf::infinite, actors::check_atom_v, run_id_, id, 0u);
    });
    append(wire::EventKind::TrialVerified, messages::make_document("verdict/1", doc.dump()).bytes());
    return doc;
  }

  /// Reason codes of a verdict's violations, e.g. {"tokens", "loss_drift"}.
  static std::vector<std::string> codes(const nlohmann::json& verdict) {
    std::vector<std::string> out;
    for (const auto& v : verdict["violations"])
      out.push_back(tuning::violation_code(v.get<std::string>()));
    return out;
  }

  store::run_state state() const { return *store::load_run(log_, run_id_); }

private:
  template <class Request>
  nlohmann::json ask_verifier(Request request) {
    caf::scoped_actor self{*sys_};
    nlohmann::json out;
    request(self).receive(
      [&out](const std::string& doc) { out = nlohmann::json::parse(doc); },
      [](const caf::error& e) { ADD_FAILURE() << "verifier: " << describe(e); });
    return out;
  }

  void append(wire::EventKind kind, const messages::byte_buffer& payload) {
    auto r = log_.append(run_id_, version_,
                         {store::new_event{static_cast<store::event_kind_t>(kind), payload}});
    ASSERT_TRUE(r) << describe(r.error());
    version_ = r->version;
  }

  temp_dir dir_;
  tuning::task_spec task_;
  std::map<std::string, std::string> lock_;
  store::memory_event_log log_;
  std::string run_id_ = "contract-test";
  std::uint64_t version_ = 0;
  std::uint64_t next_id_ = 1;
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  actors::verifier_actor verifier_;
};

/// Whether `v` holds `x` (a reason code among a verdict's codes).
inline bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

} // namespace infrarsi::test
