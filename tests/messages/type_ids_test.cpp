// Tests for messages/type_ids.hpp: the same verified bytes travel as CAF messages between actors,
// through CAF's serializer (as between nodes), and as ZeroMQ frames.

#include "messages/type_ids.hpp"

#include <vector>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <gtest/gtest.h>
#include <zmq.hpp>

#include "test_util.hpp"

namespace infrarsi::messages {
namespace {

using test::sample_result;
using test::sample_spec;

struct CafMessages : ::testing::Test {
  static caf::actor_system_config& config() {
    static caf::actor_system_config cfg = [] {
      caf::actor_system_config c;
      c.add_message_types<caf::id_block::infrarsi>();
      c.set("scheduler.max-threads", 2);
      return c;
    }();
    return cfg;
  }
  caf::actor_system sys{config()};
};

TEST(TypeIds, BlockHoldsOneIdPerMessageKind) {
  EXPECT_EQ(caf::id_block::infrarsi::begin, caf::first_custom_type_id);
  EXPECT_EQ(caf::id_block::infrarsi::end - caf::id_block::infrarsi::begin, 4);
  EXPECT_NE(caf::type_id<trial_spec_msg>::value, caf::type_id<trial_result_msg>::value);
  EXPECT_STREQ(caf::type_name<trial_result_msg>::value, "infrarsi::messages::trial_result_msg");
}

TEST_F(CafMessages, ActorsExchangeVerifiedMessagesInProcess) {
  // Spawned with an argument: CAF 0.17.6 binds a reference to a null shared_ptr<tuple<>> for
  // argument-less actor functions (init_fun_factory.hpp), which UBSan reports.
  auto runner = sys.spawn(
    [](std::uint32_t steps_per_knob) -> caf::behavior {
      return {[steps_per_knob](const trial_spec_msg& spec) -> trial_result_msg {
        return sample_result(spec->trial_id(), steps_per_knob * spec->knobs()->size());
      }};
    },
    std::uint32_t{1});
  caf::scoped_actor self{sys};
  bool replied = false;
  self->request(runner, caf::infinite, sample_spec(21))
    .receive(
      [&](const trial_result_msg& result) {
        replied = true;
        EXPECT_EQ(result->trial_id(), 21u);
        EXPECT_EQ(result->steps()->size(), 5u); // one step per knob of sample_spec
      },
      [&](caf::error& err) { FAIL() << describe(err); });
  EXPECT_TRUE(replied);
  self->send_exit(runner, caf::exit_reason::user_shutdown);
}

TEST_F(CafMessages, SerializedMessageRoundTripsThroughTheTypeRegistry) {
  auto original = caf::make_message(sample_spec(8), sample_result(8));
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  ASSERT_FALSE(sink(original));
  caf::binary_deserializer source{sys, buf};
  caf::message copy;
  auto err = source(copy);
  ASSERT_FALSE(err) << sys.render(err);
  ASSERT_TRUE((copy.match_elements<trial_spec_msg, trial_result_msg>()));
  EXPECT_EQ(copy.get_as<trial_spec_msg>(0), sample_spec(8));
  EXPECT_EQ(copy.get_as<trial_result_msg>(1), sample_result(8));
}

TEST_F(CafMessages, DeserializingTamperedBytesFailsVerification) {
  auto env = *seal(sample_spec(3), "run-x", "node:2", 5);
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  ASSERT_FALSE(sink(env));
  // Flip one bit in the middle of the carried FlatBuffer.
  auto tampered = buf;
  tampered[tampered.size() / 2] ^= 0x04;
  caf::binary_deserializer source{sys, tampered};
  envelope_msg out;
  auto err = source(out);
  ASSERT_TRUE(err);
  EXPECT_EQ(code_of(err), errc::corrupt_data) << describe(err);
  EXPECT_TRUE(out.empty());
  // Truncated serializer output fails too, never crashes.
  std::vector<char> cut(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(buf.size() - 7));
  caf::binary_deserializer short_source{sys, cut};
  envelope_msg out2;
  EXPECT_TRUE(short_source(out2));
}

TEST(ZeroMq, EnvelopeTravelsAsOneFrameUnchanged) {
  zmq::context_t ctx;
  zmq::socket_t server{ctx, zmq::socket_type::pair};
  zmq::socket_t client{ctx, zmq::socket_type::pair};
  server.bind("inproc://infrarsi-wire-test");
  client.connect("inproc://infrarsi-wire-test");
  auto env = *seal(sample_result(12, 6), "run-z", "node:7", 9);
  auto sent = client.send(zmq::buffer(env.bytes().data(), env.bytes().size()),
                          zmq::send_flags::none);
  ASSERT_TRUE(sent);
  EXPECT_EQ(*sent, env.bytes().size());
  zmq::message_t frame;
  auto got = server.recv(frame, zmq::recv_flags::none);
  ASSERT_TRUE(got);
  auto decoded = envelope_msg::decode(frame.data(), frame.size());
  ASSERT_TRUE(decoded) << describe(decoded.error());
  EXPECT_EQ(*decoded, env); // byte-identical to what the CAF path carries
  auto result = open<wire::TrialResult>(*decoded);
  ASSERT_TRUE(result);
  EXPECT_EQ((*result)->steps()->size(), 6u);
}

} // namespace
} // namespace infrarsi::messages
