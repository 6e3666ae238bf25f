// The node-runner bridge's attempt fencing over real ZeroMQ sockets: a reply for an attempt the
// supervisor already gave up on (lost) is never returned as the awaited attempt's result; it is
// handed to the stale callback (the supervisor logs it as TrialResultStale), and the fold never
// counts it.

#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "messages/codec.hpp"
#include "adapters/node_bridge.hpp"
#include "store/memory_event_log.hpp"
#include "store/run_projection.hpp"

#include "adapters/node_bridge.hpp"
#include "adapters/task_file.hpp"
#include "decide/report.hpp"

namespace infrarsi::runtime {

using adapters::load_task_file;
using adapters::node_client;
using adapters::node_server;
using decide::make_report;
using decide::render_markdown;
namespace {

messages::trial_result_msg result(std::uint64_t id, std::uint32_t attempt, double step_time) {
  wire::TrialResultT r;
  r.trial_id = id;
  r.attempt = attempt;
  r.outcome = wire::Outcome::Ok;
  auto s = std::make_unique<wire::StepMetricsT>();
  s->step = 0;
  s->loss = 2.0;
  s->tokens = 64;
  s->step_time_s = step_time;
  r.steps.push_back(std::move(s));
  return messages::trial_result_msg::pack(r);
}

TEST(NodeBridge, AReplyForALostAttemptIsStaleNeverTheResult) {
  zmq::context_t ctx;
  const std::string endpoint = "inproc://node-bridge-test";
  zmq::socket_t node{ctx, zmq::socket_type::router};
  node.bind(endpoint);
  // A node that answers the request for attempt 1 first with a late result of attempt 0 (a
  // request the supervisor gave up on), then with attempt 1's own.
  std::thread peer{[&node] {
    std::vector<zmq::message_t> frames;
    for (;;) {
      zmq::message_t f;
      ASSERT_TRUE(node.recv(f, zmq::recv_flags::none));
      bool more = f.more();
      frames.push_back(std::move(f));
      if (!more)
        break;
    }
    for (std::uint32_t attempt : {0u, 1u}) {
      auto env = messages::seal(result(7, attempt, attempt == 0 ? 0.5 : 1.0), "run", "node", attempt);
      ASSERT_TRUE(env);
      node.send(zmq::buffer(frames.front().data(), frames.front().size()), zmq::send_flags::sndmore);
      node.send(zmq::message_t{}, zmq::send_flags::sndmore);
      node.send(zmq::buffer(env->bytes().data(), env->bytes().size()), zmq::send_flags::none);
    }
  }};
  node_client client{ctx, endpoint, "run", "supervisor"};
  wire::TrialSpecT spec;
  spec.trial_id = 7;
  spec.attempt = 1;
  std::vector<messages::trial_result_msg> stale;
  auto got = client.run(messages::trial_spec_msg::pack(spec), 10.0,
                        [&stale](const messages::trial_result_msg& r) { stale.push_back(r); });
  peer.join();
  ASSERT_TRUE(got) << describe(got.error());
  EXPECT_EQ((*got)->attempt(), 1u);
  EXPECT_DOUBLE_EQ((*got)->steps()->Get(0)->step_time_s(), 1.0);
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0]->attempt(), 0u);

  // Logged as the supervisor logs it: attempt 0 lost, attempt 1 completed, then the stale
  // result of attempt 0. The fold counts it as stale and nothing else changes.
  store::memory_event_log log;
  std::uint64_t v = 0;
  auto append = [&](wire::EventKind k, const messages::byte_buffer& payload) {
    auto r = log.append("run", v, {store::new_event{static_cast<store::event_kind_t>(k), payload}});
    ASSERT_TRUE(r);
    v = r->version;
  };
  wire::TrialSpecT a0;
  a0.trial_id = 7;
  a0.attempt = 0;
  a0.purpose = "explore";
  auto s0 = messages::trial_spec_msg::pack(a0);
  append(wire::EventKind::TrialProposed, s0.bytes());
  append(wire::EventKind::TrialDispatched, s0.bytes());
  append(wire::EventKind::TrialLost, s0.bytes());
  auto s1 = messages::trial_spec_msg::pack(spec);
  append(wire::EventKind::TrialProposed, s1.bytes());
  append(wire::EventKind::TrialDispatched, s1.bytes());
  append(wire::EventKind::TrialCompleted, got->bytes());
  append(wire::EventKind::TrialResultStale, stale[0].bytes());
  // Even a stale result logged as an ordinary completion is fenced by its attempt number.
  append(wire::EventKind::TrialCompleted, stale[0].bytes());
  auto state = store::load_run(log, "run");
  ASSERT_TRUE(state);
  EXPECT_EQ(state->stale_results, 1u);
  ASSERT_EQ(state->trials.size(), 2u);
  EXPECT_EQ(state->find(7, 0)->outcome, tuning::trial_outcome::lost);
  EXPECT_TRUE(state->find(7, 0)->steps.empty());
  EXPECT_EQ(state->find(7, 1)->outcome, tuning::trial_outcome::ok);
  ASSERT_EQ(state->find(7, 1)->steps.size(), 1u);
  EXPECT_DOUBLE_EQ(state->find(7, 1)->steps[0].step_time_s, 1.0);
}

} // namespace
} // namespace infrarsi::runtime
