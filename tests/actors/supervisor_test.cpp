// The event-driven supervisor (actors/supervisor.cpp) stepped by CAF's test coordinator under
// GoogleTest: every message to the supervisor, planner, verifier, llm-proposer and curator runs
// only when the test calls sched.run(); the node-runner clients are detached actors (each owns a
// ZeroMQ socket) talking over tcp://127.0.0.1 to real node-runner servers that run the real
// simulator. Checks: N slots are kept busy, the run completes with one terminal event per
// attempt, an interruption is logged and ends the run with 128 + signal, and replay reproduces
// every decision.

#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <gtest/gtest.h>

#include "actors/actors.hpp"
#include "adapters/node_bridge.hpp"
#include "adapters/task_file.hpp"
#include "durability/sim_task.hpp"
#include "messages/type_ids.hpp"
#include "runtime/replay.hpp"
#include "store/memory_event_log.hpp"
#include "store/run_projection.hpp"
#include "sanitized.hpp"
#include "test_util.hpp"

namespace infrarsi {
namespace {

class SupervisorTest : public ::testing::Test {
protected:
  void SetUp() override {
    cfg_.set("scheduler.policy", caf::atom("testing"));
    cfg_.add_message_types<caf::id_block::infrarsi>();
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    auto text = test::sim_task_text(dir_, "sim-dense-1node");
    // Every trial sleeps 0.2 s so that several are really in flight at once.
    test::replace_first(text, "argv = [\".bin/infrarsi-sim\",",
                        "argv = [\"/bin/sh\", \"-c\", \"sleep 0.2 && exec \\\"$0\\\" \\\"$@\\\"\", \""
                          + std::string{INFRARSI_SOURCE_DIR} + "/workloads/sim/.bin/infrarsi-sim\",");
    text += "\n[budget]\ntrials = 8\nbaseline_repeats = 3\nverify_top = 1\nverify_repeats = 2\n";
    task_path_ = dir_.sub("task.toml");
    std::ofstream{task_path_} << text;
    text_ = text;
    auto task = adapters::load_task_file(task_path_);
    ASSERT_TRUE(task) << describe(task.error());
    task_ = *task;
  }

  void TearDown() override {
    // A run that did not end in time (a failed test) is interrupted, so that its detached
    // node-runner clients quit and the actor system's destructor cannot wait forever.
    if (sup_ && !replied_) {
      caf::anon_send(sup_, actors::interrupt_atom_v, SIGTERM);
      cancel_ = true;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (std::chrono::steady_clock::now() < deadline) {
        sched_->run();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    for (auto& n : nodes_)
      n->stop();
  }

  /// Starts `slots` node-runner servers and a supervisor under the test coordinator.
  caf::actor start(std::uint32_t slots, caf::scoped_actor& reply_to) {
    std::vector<std::string> endpoints;
    for (std::uint32_t i = 0; i < slots; ++i) {
      nodes_.push_back(std::make_unique<adapters::node_server>(
        zmq_, "tcp://127.0.0.1:*", task_, dir_.sub("trials"), "test-" + std::to_string(i)));
      EXPECT_FALSE(nodes_.back()->start());
      endpoints.push_back(nodes_.back()->endpoint());
    }
    actors::supervisor_options o;
    o.task = &task_;
    o.log = &log_;
    o.zmq_context = &zmq_;
    o.node_endpoints = endpoints;
    o.run_id = "run-1";
    o.run_dir = dir_.sub("run");
    o.knowledge_dir = dir_.sub("no-knowledge");
    o.seed = 5;
    o.task_text = text_;
    o.cancel = &cancel_;
    o.reply_to = caf::actor{reply_to};
    sup_ = caf::actor_cast<caf::actor>(sys_->spawn(actors::supervisor, std::move(o)));
    return sup_;
  }

  /// Steps the coordinator until the supervisor replies (or 120 s pass; 600 s under sanitizers,
  /// where the simulator and the planner run 2-4x slower); tracks the most attempts ever
  /// dispatched and not yet ended in the log.
  std::pair<std::string, int> step_until_done(caf::scoped_actor& self,
                                              const std::function<void()>& between = {}) {
    std::pair<std::string, int> out{"no reply", -1};
    bool done = false;
    auto deadline = std::chrono::steady_clock::now()
                    + std::chrono::seconds(test::sanitized ? 600 : 120);
    while (!done && std::chrono::steady_clock::now() < deadline) {
      sched_->run();
      track_in_flight();
      if (between)
        between();
      self->receive(
        [&](std::string& summary, int status) { out = {summary, status}, done = replied_ = true; },
        caf::after(std::chrono::milliseconds(5)) >> [] {});
    }
    return out;
  }

  void track_in_flight() {
    auto run = store::load_run(log_, "run-1");
    if (!run)
      return;
    std::size_t open = 0;
    for (const auto& t : run->trials)
      open += t.dispatched && !t.finished ? 1 : 0;
    max_in_flight_ = std::max(max_in_flight_, open);
  }

  test::temp_dir dir_;
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  zmq::context_t zmq_;
  std::vector<std::unique_ptr<adapters::node_server>> nodes_;
  store::memory_event_log log_;
  tuning::task_spec task_;
  std::string task_path_;
  std::string text_;
  std::atomic<bool> cancel_{false};
  std::size_t max_in_flight_ = 0;
  caf::actor sup_;
  bool replied_ = false;
};

TEST_F(SupervisorTest, KeepsThreeSlotsBusyAndCompletesTheRun) {
  caf::scoped_actor self{*sys_};
  start(3, self);
  auto [summary, status] = step_until_done(self);
  ASSERT_EQ(status, 0) << summary;
  EXPECT_EQ(max_in_flight_, 3u); // the slots were kept busy, never over-filled
  auto run = store::load_run(log_, "run-1");
  ASSERT_TRUE(run);
  ASSERT_TRUE(run->applied.has_value());
  ASSERT_TRUE(run->search_stopped.has_value());
  EXPECT_EQ((*run->search_stopped)["reason"], "budget");
  std::map<std::pair<std::uint64_t, std::uint32_t>, int> terminal;
  std::size_t explore = 0;
  std::size_t batches = 0;
  auto err = log_.for_each_in_stream("run-1", 0, [&](const store::recorded_event& ev) {
    auto kind = static_cast<wire::EventKind>(ev.kind);
    if (kind == wire::EventKind::TrialCompleted) {
      auto r = messages::trial_result_msg::decode(ev.payload);
      ++terminal[{(*r)->trial_id(), (*r)->attempt()}];
    }
    batches += kind == wire::EventKind::ProposalsMade ? 1 : 0;
    return true;
  });
  ASSERT_FALSE(err);
  for (const auto& t : run->trials) {
    EXPECT_EQ(terminal[std::make_pair(t.trial_id, t.attempt)], 1) << "trial " << t.trial_id;
    explore += t.kind == tuning::purpose_kind::explore ? 1 : 0;
  }
  EXPECT_EQ(explore, 8u);
  EXPECT_LT(batches, 8u); // at least one batch held more than one proposal
  auto replayed = runtime::replay_run(log_, "run-1", task_);
  ASSERT_TRUE(replayed) << describe(replayed.error());
  EXPECT_FALSE(replayed->diverged) << replayed->decision << "\n" << replayed->logged << "\n"
                                   << replayed->recomputed;
  EXPECT_GT(replayed->reproduced, 20u);
}

TEST_F(SupervisorTest, AnInterruptIsLoggedAndEndsTheRunWith128PlusTheSignal) {
  caf::scoped_actor self{*sys_};
  auto sup = start(2, self);
  bool sent = false;
  auto [summary, status] = step_until_done(self, [&] {
    if (!sent && max_in_flight_ >= 2) {
      caf::anon_send(sup, actors::interrupt_atom_v, SIGINT);
      sent = true;
    }
  });
  ASSERT_TRUE(sent);
  EXPECT_EQ(status, 128 + SIGINT) << summary;
  auto run = store::load_run(log_, "run-1");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->interruptions, 1u);
  EXPECT_FALSE(run->applied.has_value());
  std::size_t open = 0;
  for (const auto& t : run->trials)
    open += t.dispatched && !t.finished ? 1 : 0;
  EXPECT_EQ(open, 2u) << summary; // in flight when interrupted: lost and re-queued on resume
}

} // namespace
} // namespace infrarsi
