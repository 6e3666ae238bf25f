// Tests for messages/node_frames.cpp: a frame is read as the daemon's broker and a node-runner
// read it (envelope verified, payload opened by its kind), and rejected whole otherwise.

#include "messages/node_frames.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace infrarsi::messages {
namespace {

using test::sample_spec;

verify_limits broker_limits() {
  verify_limits limits;
  limits.max_bytes = std::size_t{16} << 20;
  return limits;
}

TEST(NodeFrames, AHelloIsOpenedAsItsKind) {
  wire::NodeHelloT h;
  h.node = "gpu-07";
  h.slots.push_back(std::make_unique<wire::NodeSlotInfoT>());
  h.slots.back()->name = "gpu0-3";
  h.slots.back()->env = {"CUDA_VISIBLE_DEVICES=0,1,2,3"};
  h.protocol = 1;
  auto env = *seal(node_hello_msg::pack(h), "", "node:gpu-07", 3);
  auto f = read_node_frame(env.bytes().data(), env.bytes().size(), broker_limits());
  ASSERT_TRUE(f) << describe(f.error());
  EXPECT_EQ(f->kind, wire::MessageKind::NodeHello);
  EXPECT_EQ(f->run_id, "");
  EXPECT_EQ(f->envelope, env);
  const auto* hello = std::get_if<node_hello_msg>(&f->message);
  ASSERT_NE(hello, nullptr);
  EXPECT_EQ((*hello)->node()->str(), "gpu-07");
  EXPECT_EQ((*hello)->slots()->Get(0)->env()->Get(0)->str(), "CUDA_VISIBLE_DEVICES=0,1,2,3");
}

TEST(NodeFrames, AnAssignmentCarriesItsSpecAndRunId) {
  auto spec = sample_spec(12, 1);
  wire::TrialAssignmentT a;
  a.slot = 1;
  a.task_toml = "name = \"t\"";
  a.spec.assign(spec.bytes().begin(), spec.bytes().end());
  auto env = *seal(trial_assignment_msg::pack(a), "run-1", "daemon", 8);
  auto f = read_node_frame(env.bytes().data(), env.bytes().size(), broker_limits());
  ASSERT_TRUE(f) << describe(f.error());
  EXPECT_EQ(f->kind, wire::MessageKind::TrialAssignment);
  EXPECT_EQ(f->run_id, "run-1");
  auto inner = assignment_spec(std::get<trial_assignment_msg>(f->message));
  ASSERT_TRUE(inner) << describe(inner.error());
  EXPECT_EQ(*inner, spec);
  EXPECT_FALSE(assignment_spec(trial_assignment_msg{}));
}

TEST(NodeFrames, AFrameOverTheLimitOrCorruptIsRejected) {
  wire::ClientRequestT r;
  r.command = "status";
  auto env = *seal(client_request_msg::pack(r), "", "client", 0);
  auto bytes = env.bytes().to_vector();
  verify_limits tight;
  tight.max_bytes = bytes.size() - 1;
  auto over = read_node_frame(bytes.data(), bytes.size(), tight);
  ASSERT_FALSE(over);
  EXPECT_EQ(code_of(over.error()), errc::corrupt_data);
  bytes[bytes.size() / 2] ^= 0x40;
  EXPECT_FALSE(read_node_frame(bytes.data(), bytes.size(), broker_limits()));
  EXPECT_FALSE(read_node_frame(nullptr, 0, broker_limits()));
}

} // namespace
} // namespace infrarsi::messages
