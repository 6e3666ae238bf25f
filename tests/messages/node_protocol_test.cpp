// messages/node.fbs through the codec: every kind of the daemon's protocol seals, decodes and
// opens; a TrialAssignment whose nested TrialSpec is damaged is rejected before it is read.

#include <gtest/gtest.h>

#include <algorithm>

#include "messages/codec.hpp"
#include "messages/node_protocol.hpp"
#include "test_util.hpp"

namespace infrarsi::messages {
namespace {

template <class Table>
message<Table> round_trip(const message<Table>& m) {
  auto env = seal(m, "run-1", "node:a", 7);
  EXPECT_TRUE(env) << describe(env.error());
  auto decoded = envelope_msg::decode(env->bytes().data(), env->bytes().size());
  EXPECT_TRUE(decoded) << describe(decoded.error());
  EXPECT_EQ((*decoded)->kind(), message_kind_of<Table>());
  EXPECT_EQ((*decoded)->run_id()->str(), "run-1");
  auto opened = open<Table>(*decoded);
  EXPECT_TRUE(opened) << describe(opened.error());
  return *opened;
}

TEST(NodeProtocol, EveryKindSealsDecodesAndOpens) {
  wire::NodeHelloT h;
  h.node = "gpu-07";
  h.protocol = node_protocol_version;
  auto slot = std::make_unique<wire::NodeSlotInfoT>();
  slot->name = "0";
  slot->env = {"CUDA_VISIBLE_DEVICES=0,1"};
  h.slots.push_back(std::move(slot));
  auto running = std::make_unique<wire::AttemptRefT>();
  running->run_id = "r";
  running->trial_id = 12;
  running->attempt = 1;
  h.running.push_back(std::move(running));
  auto hello = round_trip(node_hello_msg::pack(h));
  EXPECT_EQ(hello->node()->str(), "gpu-07");
  EXPECT_EQ(hello->slots()->Get(0)->env()->Get(0)->str(), "CUDA_VISIBLE_DEVICES=0,1");
  EXPECT_EQ(hello->running()->Get(0)->trial_id(), 12u);

  wire::TrialAssignmentT a;
  a.slot = 3;
  a.task_toml = "name = \"t\"";
  auto spec = test::sample_spec(5, 2);
  a.spec.assign(spec.bytes().data(), spec.bytes().data() + spec.bytes().size());
  auto assignment = round_trip(trial_assignment_msg::pack(a));
  EXPECT_EQ(assignment->slot(), 3u);
  auto inner = trial_spec_msg::decode(assignment->spec()->data(), assignment->spec()->size());
  ASSERT_TRUE(inner);
  EXPECT_EQ((*inner)->trial_id(), 5u);
  EXPECT_EQ((*inner)->attempt(), 2u);

  wire::SubmitTaskT s;
  s.task_toml = "name = \"t\"";
  s.trials = 6;
  auto submit = round_trip(submit_task_msg::pack(s));
  ASSERT_TRUE(submit->trials().has_value());
  EXPECT_EQ(*submit->trials(), 6u);
  EXPECT_FALSE(submit->seed().has_value());

  wire::NodeControlT c;
  c.command = "welcome";
  EXPECT_EQ(round_trip(node_control_msg::pack(c))->command()->str(), "welcome");
  wire::TrialRefusedT r;
  r.trial_id = 9;
  r.reason = "differs";
  EXPECT_EQ(round_trip(trial_refused_msg::pack(r))->reason()->str(), "differs");
  wire::ClientRequestT q;
  q.command = "status";
  EXPECT_EQ(round_trip(client_request_msg::pack(q))->command()->str(), "status");
  wire::ClientReplyT p;
  p.ok = true;
  p.json = "{}";
  EXPECT_TRUE(round_trip(client_reply_msg::pack(p))->ok());
  EXPECT_FALSE(round_trip(heartbeat_msg::pack(wire::HeartbeatT{})).empty());
}

TEST(NodeProtocol, DamagedNestedSpecOrMissingFieldsAreRejected) {
  wire::TrialAssignmentT a;
  auto spec = test::sample_spec(5);
  a.spec.assign(spec.bytes().data(), spec.bytes().data() + spec.bytes().size());
  a.spec.resize(a.spec.size() - 3); // truncated nested buffer
  auto env = seal(trial_assignment_msg::pack(a), "run-1", "daemon", 1);
  ASSERT_FALSE(env);
  EXPECT_NE(describe(env.error()).find("TrialSpec"), std::string::npos) << describe(env.error());

  wire::NodeHelloT nameless;
  EXPECT_FALSE(seal(node_hello_msg::pack(nameless), "", "node", 1));
  wire::SubmitTaskT empty_task;
  EXPECT_FALSE(seal(submit_task_msg::pack(empty_task), "", "client", 1));

  // A flipped payload byte fails the envelope checksum.
  wire::NodeControlT c;
  c.command = "welcome";
  auto good = seal(node_control_msg::pack(c), "", "daemon", 1);
  ASSERT_TRUE(good);
  auto bytes = good->bytes().to_vector();
  const std::string word = "welcome";
  auto at = std::search(bytes.begin(), bytes.end(), word.begin(), word.end());
  ASSERT_NE(at, bytes.end());
  *at = 'W'; // inside the payload: still a valid FlatBuffer, but not what was sealed
  auto flipped = envelope_msg::decode(bytes.data(), bytes.size());
  ASSERT_FALSE(flipped);
  EXPECT_NE(describe(flipped.error()).find("checksum"), std::string::npos);
}

} // namespace
} // namespace infrarsi::messages
