// Issue 7's planted-cheat suite: every planted cheat and drift of the real PyTorch workload
// (config/tasks/torch_gpt_contract.toml) and of the cluster simulator (sim-dense-1node) runs for
// real through the node-runner's launcher (scope lock, copy, patch, ranks, metrics, harness
// clock), is logged as the supervisor logs it, and is judged by the verifier actor; each must be
// rejected with its reason code (tuning/contract_check.hpp), and each genuine patch must pass.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/actors.hpp"
#include "adapters/environment.hpp"
#include "adapters/trial_launcher.hpp"
#include "messages/type_ids.hpp"
#include "adapters/task_file.hpp"
#include "store/memory_event_log.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"
#include "tuning/contract_check.hpp"

namespace infrarsi {
namespace {

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
  std::uint64_t run(const std::vector<std::string>& patches, const std::string& purpose) {
    adapters::trial_request req;
    req.task = &task_;
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

  test::temp_dir dir_;
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

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST(ContractCheats, RealWorkloadEveryPlantedCheatIsRejectedWithItsReason) {
  contract_harness h{std::string{INFRARSI_SOURCE_DIR} + "/config/tasks/torch_gpt_contract.toml"};
  ASSERT_FALSE(h.lock().empty());
  for (int i = 0; i < 2; ++i)
    h.run({}, "baseline");
  auto doctor = h.calibrate();
  ASSERT_FALSE(doctor.contains("error")) << doctor.dump();
  ASSERT_EQ(doctor["noise"]["runs"], 2);

  // patch -> the reason code it must be rejected with ("" = it must pass).
  const std::map<std::string, std::string> expected = {
    {"fused_qkv", ""},
    {"attention_prescale_inplace", ""},
    {"fused_gelu", ""},
    {"all_genuine", ""},
    {"cheat_fewer_tokens", "tokens"},
    {"cheat_fewer_steps", "steps"},
    {"cheat_skip_backward", "loss_not_falling"},
    {"cheat_loss_drift", "loss_drift"},
    {"cheat_timed_window", "timed_window"},
    {"cheat_fake_timer", "clock"},
    {"cheat_frozen_file", "scope"},
  };
  // Every patch of the task is covered, so a new planted patch cannot go untested.
  ASSERT_EQ(h.task().patches.size(), expected.size());
  for (const auto& p : h.task().patches) {
    SCOPED_TRACE(p.name);
    ASSERT_EQ(expected.count(p.name), 1u);
    auto id = h.run({p.name}, "explore");
    auto verdict = h.check(id);
    auto codes = contract_harness::codes(verdict);
    std::cout << p.name << ": " << verdict["violations"].dump() << '\n';
    const auto& want = expected.at(p.name);
    if (want.empty()) {
      EXPECT_EQ(verdict["outcome"], "ok") << verdict.dump();
      EXPECT_TRUE(codes.empty()) << verdict.dump();
      EXPECT_GT(verdict["timed_step_time_s"].get<double>(), 0.0);
    } else {
      EXPECT_TRUE(has(codes, want)) << "want " << want << ": " << verdict.dump();
    }
  }
  auto state = h.state();
  for (const auto& t : state.trials) {
    if (t.purpose != "explore")
      continue;
    bool cheat = !t.config.patches.empty() && t.config.patches[0].rfind("cheat_", 0) == 0;
    EXPECT_EQ(t.usable(), !cheat) << t.trial_id << " " << t.config.key();
  }
  // The frozen-file cheat never ran: rejected by the scope check before launch, naming the path.
  for (const auto& t : state.trials)
    if (t.config.patches == std::vector<std::string>{"cheat_frozen_file"}) {
      EXPECT_EQ(t.outcome, tuning::trial_outcome::contract_violation);
      EXPECT_NE(t.detail.find("train.py"), std::string::npos) << t.detail;
      EXPECT_TRUE(t.steps.empty());
    }
}

TEST(ContractCheats, SimulatorCheatAndDriftAreRejectedGenuinePatchPasses) {
  contract_harness h{std::string{INFRARSI_SOURCE_DIR} + "/config/tasks/sim-dense-1node.toml"};
  for (int i = 0; i < 3; ++i)
    h.run({}, "baseline");
  auto doctor = h.calibrate();
  ASSERT_FALSE(doctor.contains("error")) << doctor.dump();
  const std::map<std::string, std::string> expected = {
    {"fast_dataloader", "loss_drift"},       // half of every sample: the loss sees half the data
    {"bf16_optimizer_states", "loss_drift"}, // numerics drift 1.5 % + 0.5 % per step
    {"fused_rmsnorm", ""},
    {"flash3_attention", ""},
  };
  for (const auto& [patch, want] : expected) {
    SCOPED_TRACE(patch);
    ASSERT_NE(h.task().find_patch(patch), nullptr);
    auto verdict = h.check(h.run({patch}, "explore"));
    auto codes = contract_harness::codes(verdict);
    if (want.empty())
      EXPECT_TRUE(codes.empty()) << verdict.dump();
    else
      EXPECT_TRUE(has(codes, want)) << verdict.dump();
  }
}

/// A workload edited after init is refused before launch: the scope lock no longer matches.
TEST(ContractCheats, WorkloadEditedAfterInitIsRefusedBeforeLaunch) {
  test::temp_dir dir;
  namespace fs = std::filesystem;
  const std::string src = INFRARSI_SOURCE_DIR;
  fs::create_directories(dir.sub("config"));
  fs::copy(src + "/config/tasks", dir.sub("config/tasks"), fs::copy_options::recursive);
  fs::create_directories(dir.sub("workloads"));
  fs::copy(src + "/workloads/torch_gpt", dir.sub("workloads/torch_gpt"),
           fs::copy_options::recursive);
  contract_harness h{dir.sub("config/tasks/torch_gpt_contract.toml")};
  {
    std::ofstream edit{dir.sub("workloads/torch_gpt/data.py"), std::ios::app};
    edit << "\n# edited after init\n";
  }
  auto id = h.run({}, "explore");
  auto state = h.state();
  const auto* t = state.find(id, 0);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->outcome, tuning::trial_outcome::contract_violation);
  EXPECT_NE(t->detail.find("'data.py' changed since the scope was locked"), std::string::npos)
    << t->detail;
  EXPECT_TRUE(t->steps.empty());
}

} // namespace
} // namespace infrarsi
