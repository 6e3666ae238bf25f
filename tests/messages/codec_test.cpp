// Tests for messages/codec.cpp: round trips, and rejection of truncated, bit-flipped, trailing,
// mislabelled, over-limit and semantically invalid buffers.

#include "messages/codec.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "messages/json.hpp"
#include "test_util.hpp"

namespace infrarsi::messages {
namespace {

using test::sample_result;
using test::sample_spec;

std::vector<std::uint8_t> bytes_of(const byte_buffer& b) {
  return b.to_vector();
}

TEST(Codec, TrialSpecRoundTripSortsKnobsAndKeepsEveryType) {
  auto msg = sample_spec(7, 2);
  ASSERT_FALSE(msg.empty());
  auto decoded = trial_spec_msg::decode(msg.bytes().data(), msg.bytes().size());
  ASSERT_TRUE(decoded) << describe(decoded.error());
  const auto* spec = decoded->get();
  EXPECT_EQ(spec->trial_id(), 7u);
  EXPECT_EQ(spec->attempt(), 2u);
  ASSERT_EQ(spec->knobs()->size(), 5u);
  std::vector<std::string> names;
  for (const auto* k : *spec->knobs())
    names.push_back(k->name()->str());
  EXPECT_EQ(names, (std::vector<std::string>{"activation_checkpointing", "attention",
                                             "bucket_scale", "micro_batch", "world_size"}));
  EXPECT_EQ(spec->knobs()->Get(3)->value_as_IntKnob()->value(), 7);  // 4 + 7 % 4
  EXPECT_EQ(spec->knobs()->Get(1)->value_as_TextKnob()->value()->str(), "sdpa");
  EXPECT_FALSE(spec->knobs()->Get(0)->value_as_BoolKnob()->value()); // 7 is odd
  EXPECT_DOUBLE_EQ(spec->knobs()->Get(2)->value_as_RealKnob()->value(), 0.5);
  EXPECT_EQ(spec->patches()->Get(1)->str(), "foreach_adamw");
  EXPECT_EQ(spec->memory_cap_bytes(), std::uint64_t{3} << 30);
  // unpack -> pack reproduces the bytes exactly (deterministic encoding).
  auto native = decoded->unpack();
  ASSERT_NE(native, nullptr);
  EXPECT_EQ(trial_spec_msg::pack(*native), msg);
}

TEST(Codec, TrialResultKeepsOptionalPhaseTimesDistinctFromZero) {
  auto msg = sample_result(3, 4);
  auto decoded = trial_result_msg::decode(msg.bytes());
  ASSERT_TRUE(decoded) << describe(decoded.error());
  const auto* r = decoded->get();
  EXPECT_EQ(r->outcome(), wire::Outcome::Ok);
  ASSERT_EQ(r->steps()->size(), 4u);
  EXPECT_TRUE(r->steps()->Get(0)->forward_s().has_value());
  EXPECT_DOUBLE_EQ(*r->steps()->Get(0)->forward_s(), 0.08);
  EXPECT_FALSE(r->steps()->Get(1)->forward_s().has_value());
  EXPECT_EQ(r->steps()->Get(2)->tokens(), 16384u);
  EXPECT_DOUBLE_EQ(r->device_seconds(), 7.0);
  auto j = to_json(*r);
  EXPECT_EQ(j["outcome"], "ok");
  EXPECT_FALSE(j["steps"][1].contains("forward_s"));
  EXPECT_EQ(j["steps"][0]["peak_memory_bytes"], std::uint64_t{900} << 20);
}

TEST(Codec, EnvelopeSealOpenRoundTrip) {
  auto spec = sample_spec(11);
  auto env = *seal(spec, "run-a", "planner", 42);
  auto decoded = envelope_msg::decode(env.bytes());
  ASSERT_TRUE(decoded) << describe(decoded.error());
  EXPECT_EQ((*decoded)->schema_version(), schema_version);
  EXPECT_EQ((*decoded)->kind(), wire::MessageKind::TrialSpec);
  EXPECT_EQ((*decoded)->run_id()->str(), "run-a");
  EXPECT_EQ((*decoded)->sender()->str(), "planner");
  EXPECT_EQ((*decoded)->sequence(), 42u);
  auto inner = open<wire::TrialSpec>(*decoded);
  ASSERT_TRUE(inner) << describe(inner.error());
  EXPECT_EQ(*inner, spec);
  auto wrong = open<wire::TrialResult>(*decoded);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(code_of(wrong.error()), errc::unknown_kind);
  EXPECT_NE(describe(wrong.error()).find("carries TrialSpec, expected TrialResult"),
            std::string::npos);
}

TEST(Codec, EveryTruncationIsRejectedAndSaysTruncated) {
  auto env = *seal(sample_result(5, 3), "run-t", "node:0", 1);
  auto full = bytes_of(env.bytes());
  for (std::size_t len = 0; len < full.size(); ++len) {
    auto r = envelope_msg::decode(full.data(), len);
    ASSERT_FALSE(r) << "prefix of " << len << " bytes was accepted";
    EXPECT_EQ(code_of(r.error()), errc::corrupt_data);
    EXPECT_NE(describe(r.error()).find("truncated"), std::string::npos)
      << len << ": " << describe(r.error());
  }
}

TEST(Codec, TrailingBytesAreRejected) {
  auto full = bytes_of(sample_spec(1).bytes());
  full.push_back(0);
  auto r = trial_spec_msg::decode(full.data(), full.size());
  ASSERT_FALSE(r);
  EXPECT_NE(describe(r.error()).find("trailing bytes"), std::string::npos) << describe(r.error());
}

// Every single-bit flip of an envelope is either rejected with an error, or decodes to exactly
// the same content (a flip in alignment padding changes nothing that is read).
TEST(Codec, EveryBitFlipIsRejectedOrChangesNothing) {
  auto original = *seal(sample_result(9, 3), "run-f", "node:1", 77);
  auto full = bytes_of(original.bytes());
  auto payload_of = [](const envelope_msg& e) {
    return std::string(reinterpret_cast<const char*>(e->payload()->data()), e->payload()->size());
  };
  std::size_t rejected = 0;
  std::size_t harmless = 0;
  for (std::size_t byte = 0; byte < full.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      auto flipped = full;
      flipped[byte] ^= static_cast<std::uint8_t>(1u << bit);
      auto r = envelope_msg::decode(flipped.data(), flipped.size());
      if (!r) {
        ++rejected;
        EXPECT_NE(code_of(r.error()), errc::none);
        EXPECT_FALSE(describe(r.error()).empty());
        continue;
      }
      ++harmless;
      EXPECT_EQ((*r)->kind(), original->kind()) << "byte " << byte << " bit " << bit;
      EXPECT_EQ((*r)->run_id()->str(), "run-f");
      EXPECT_EQ((*r)->sender()->str(), "node:1");
      EXPECT_EQ((*r)->sequence(), 77u);
      EXPECT_EQ((*r)->schema_version(), schema_version);
      EXPECT_EQ(payload_of(*r), payload_of(original)) << "byte " << byte << " bit " << bit;
    }
  }
  EXPECT_EQ(rejected + harmless, full.size() * 8);
  // The checksum covers all content, so the great majority of flips must be caught.
  EXPECT_GT(rejected, full.size() * 8 * 9 / 10) << "harmless flips: " << harmless;
}

TEST(Codec, PayloadBitFlipIsReportedAsChecksumMismatch) {
  auto env = *seal(sample_spec(4), "r", "s", 0);
  auto full = bytes_of(env.bytes());
  // Flip a bit inside the payload: find the payload bytes inside the envelope.
  auto inner = bytes_of(sample_spec(4).bytes());
  auto at = std::search(full.begin(), full.end(), inner.begin(), inner.end());
  ASSERT_NE(at, full.end());
  auto mid = static_cast<std::size_t>(at - full.begin()) + inner.size() - 3;
  full[mid] ^= 0x10;
  auto r = envelope_msg::decode(full.data(), full.size());
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::corrupt_data);
  EXPECT_NE(describe(r.error()).find("checksum mismatch"), std::string::npos)
    << describe(r.error());
}

// Bare payloads carry no checksum; a flip must never crash the reader (ASan builds check reads).
TEST(Codec, BitFlippedBareResultNeverCrashesTheReader) {
  auto full = bytes_of(sample_result(2, 5).bytes());
  std::size_t rejected = 0;
  for (std::size_t byte = 0; byte < full.size(); ++byte) {
    auto flipped = full;
    flipped[byte] ^= 0x41;
    auto r = trial_result_msg::decode(flipped.data(), flipped.size());
    if (!r) {
      ++rejected;
      continue;
    }
    auto j = to_json(*r->get()); // touches every field the verifier admitted
    EXPECT_TRUE(j.is_object());
  }
  EXPECT_GT(rejected, 0u);
}

TEST(Codec, WrongFileIdentifierIsNamed) {
  auto spec = sample_spec(1);
  auto r = trial_result_msg::decode(spec.bytes());
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::corrupt_data);
  EXPECT_NE(describe(r.error()).find("wrong file identifier 'IRTS', expected 'IRTR'"),
            std::string::npos)
    << describe(r.error());
}

TEST(Codec, ExplicitLimitsAreEnforced) {
  auto res = sample_result(1, 50);
  verify_limits small;
  small.max_bytes = 64;
  auto r = trial_result_msg::decode(res.bytes(), small);
  ASSERT_FALSE(r);
  EXPECT_NE(describe(r.error()).find("exceed the limit of 64 bytes"), std::string::npos);
  verify_limits few_tables;
  few_tables.max_tables = 10; // 1 root + 50 steps
  r = trial_result_msg::decode(res.bytes(), few_tables);
  ASSERT_FALSE(r);
  EXPECT_NE(describe(r.error()).find("tables 10"), std::string::npos) << describe(r.error());
  verify_limits shallow;
  shallow.max_depth = 1; // root -> steps vector -> step table is deeper
  EXPECT_FALSE(trial_result_msg::decode(res.bytes(), shallow));
  EXPECT_TRUE(trial_result_msg::decode(res.bytes())); // defaults accept it
}

TEST(Codec, DuplicateOrUnsortedKnobNamesAreRejected) {
  flatbuffers::FlatBufferBuilder fbb;
  auto make_knob = [&fbb](const char* name, std::int64_t v) {
    auto value = wire::CreateIntKnob(fbb, v);
    return wire::CreateKnobAssignment(fbb, fbb.CreateString(name), wire::KnobValue::IntKnob,
                                      value.Union());
  };
  std::vector<flatbuffers::Offset<wire::KnobAssignment>> knobs{make_knob("tp", 2),
                                                               make_knob("tp", 4)};
  auto spec = wire::CreateTrialSpec(fbb, 1, 0, fbb.CreateVector(knobs));
  fbb.FinishSizePrefixed(spec, "IRTS");
  auto r = trial_spec_msg::decode(fbb.GetBufferPointer(), fbb.GetSize());
  ASSERT_FALSE(r);
  EXPECT_NE(describe(r.error()).find("knob names not strictly sorted at 'tp'"), std::string::npos)
    << describe(r.error());
}

// Found by fuzz/node_frame.cpp: a union type without its table passed the verifier, and the
// node-runner's configuration_of read the missing IntKnob.
TEST(Codec, KnobWithATypeButNoValueIsRejected) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<wire::KnobAssignment>> knobs{wire::CreateKnobAssignment(
    fbb, fbb.CreateString("micro_batch"), wire::KnobValue::IntKnob, 0)};
  auto spec = wire::CreateTrialSpec(fbb, 1, 0, fbb.CreateVector(knobs));
  fbb.FinishSizePrefixed(spec, "IRTS");
  auto r = trial_spec_msg::decode(fbb.GetBufferPointer(), fbb.GetSize());
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::corrupt_data);
  EXPECT_NE(describe(r.error()).find("knob 'micro_batch' has no value"), std::string::npos)
    << describe(r.error());
}

// Found by fuzz/node_frame.cpp: 8 to 11 bytes whose size prefix matches reached
// BufferHasIdentifier, which read the identifier past the end (ASan: heap-buffer-overflow).
TEST(Codec, BufferTooShortForItsIdentifierIsTruncated) {
  for (std::uint8_t n = 8; n < 12; ++n) {
    std::vector<std::uint8_t> b(n, 0x2a);
    b[0] = static_cast<std::uint8_t>(n - 4);
    b[1] = b[2] = b[3] = 0;
    auto r = envelope_msg::decode(b.data(), b.size());
    ASSERT_FALSE(r) << int{n};
    EXPECT_EQ(code_of(r.error()), errc::corrupt_data);
    EXPECT_NE(describe(r.error()).find("truncated"), std::string::npos) << describe(r.error());
  }
}

// Found by fuzz/node_frame.cpp: a client reads the JSON of an ok reply unconditionally.
TEST(Codec, OkClientReplyWithoutItsJsonIsRejected) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.FinishSizePrefixed(wire::CreateClientReply(fbb, true));
  auto r = client_reply_msg::decode(fbb.GetBufferPointer(), fbb.GetSize());
  ASSERT_FALSE(r);
  EXPECT_NE(describe(r.error()).find("an ok reply without its JSON answer"), std::string::npos)
    << describe(r.error());
  flatbuffers::FlatBufferBuilder refused;
  refused.FinishSizePrefixed(wire::CreateClientReply(refused, false, refused.CreateString("no")));
  EXPECT_TRUE(client_reply_msg::decode(refused.GetBufferPointer(), refused.GetSize()));
}

TEST(Codec, NewerSchemaVersionIsUnsupported) {
  auto payload = sample_spec(1).bytes();
  flatbuffers::FlatBufferBuilder fbb;
  auto run = fbb.CreateString("r");
  auto snd = fbb.CreateString("s");
  auto pl = fbb.CreateVector(payload.data(), payload.size());
  auto sum = envelope_checksum(99, wire::MessageKind::TrialSpec, "r", "s", 0, payload.view());
  fbb.FinishSizePrefixed(
    wire::CreateEnvelope(fbb, 99, wire::MessageKind::TrialSpec, run, snd, 0, pl, sum), "IREN");
  auto r = envelope_msg::decode(fbb.GetBufferPointer(), fbb.GetSize());
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::unsupported_format);
  EXPECT_NE(describe(r.error()).find("schema version 99"), std::string::npos);
}

TEST(Codec, EventPayloadMustMatchItsKind) {
  auto spec = sample_spec(1);
  auto result = sample_result(1);
  auto k = [](wire::EventKind e) { return static_cast<std::uint16_t>(e); };
  EXPECT_FALSE(verify_event_payload(k(wire::EventKind::TrialProposed), spec.bytes().data(),
                                    spec.bytes().size()));
  EXPECT_FALSE(verify_event_payload(k(wire::EventKind::TrialCompleted), result.bytes().data(),
                                    result.bytes().size()));
  auto err = verify_event_payload(k(wire::EventKind::TrialCompleted), spec.bytes().data(),
                                  spec.bytes().size());
  EXPECT_EQ(code_of(err), errc::corrupt_data);
  // Unknown kinds are not verified (readers skip them); empty payloads are allowed.
  EXPECT_FALSE(verify_event_payload(4242, "junk", 4));
  EXPECT_FALSE(verify_event_payload(k(wire::EventKind::StageStarted), nullptr, 0));
}

TEST(Codec, EventKindNamesRoundTrip) {
  EXPECT_EQ(event_kind_name(12), "trial_completed");
  EXPECT_EQ(event_kind_name(1), "run_created");
  EXPECT_EQ(event_kind_name(0), "unknown");
  EXPECT_EQ(event_kind_name(9999), "unknown");
  EXPECT_TRUE(is_known_event_kind(13));
  EXPECT_FALSE(is_known_event_kind(8));
  EXPECT_EQ(event_kind_name(4), "contract_locked");
  auto k = event_kind_from_name("trial_lost");
  ASSERT_TRUE(k);
  EXPECT_EQ(*k, 13);
  EXPECT_EQ(*event_kind_from_name("StageStarted"), 2);
  EXPECT_FALSE(event_kind_from_name("trial_exploded"));
}

} // namespace
} // namespace infrarsi::messages
