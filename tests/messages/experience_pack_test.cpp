// messages/experience_pack.cpp: the pack file's structure checks, before any signature check.

#include <string>

#include <gtest/gtest.h>

#include "messages/experience_pack.hpp"

namespace infrarsi::messages {
namespace {

experience_pack_body sample_body() {
  experience_pack_body b;
  b.cluster_id = std::string(32, 'a');
  b.public_key = std::string(32, '\x07');
  b.since = 5;
  b.findings = {{std::string(32, 'a'), 7, R"({"hardware":"h","workload":"w","speedup":1.25})"},
                {std::string(32, 'b'), 3, R"({"hardware":"h","workload":"w","speedup":1.5})"}};
  return b;
}

TEST(ExperiencePack, RoundTripsTheBodyBytesAndSignatureExactly) {
  auto body = encode_pack_body(sample_body());
  EXPECT_EQ(body.substr(4, 4), "IRXB");
  EXPECT_EQ(encode_pack_body(sample_body()), body); // deterministic
  const std::string sig(64, '\x2a');
  auto file = encode_pack(body, sig);
  EXPECT_EQ(file.substr(8, 4), "IRXP");
  auto opened = open_pack(file);
  ASSERT_TRUE(opened) << describe(opened.error());
  EXPECT_EQ(opened->body, body);
  EXPECT_EQ(opened->signature, sig);
  EXPECT_EQ(opened->decoded.cluster_id, std::string(32, 'a'));
  EXPECT_EQ(opened->decoded.public_key, std::string(32, '\x07'));
  EXPECT_EQ(opened->decoded.since, 5u);
  ASSERT_EQ(opened->decoded.findings.size(), 2u);
  EXPECT_EQ(opened->decoded.findings[1].origin, std::string(32, 'b'));
  EXPECT_EQ(opened->decoded.findings[1].origin_position, 3u);
  EXPECT_EQ(opened->decoded.findings[1].document, sample_body().findings[1].document);
}

TEST(ExperiencePack, RefusesWhatIsNotASignedPack) {
  auto body = encode_pack_body(sample_body());
  auto file = encode_pack(body, std::string(64, '\x2a'));
  auto why = [](std::string_view bytes) {
    auto r = open_pack(bytes);
    return r ? std::string{"accepted"} : describe(r.error());
  };
  EXPECT_EQ(why("IRXP"), "unsupported_format: not an experience pack: 4 bytes cannot hold a "
                         "size-prefixed FlatBuffer with a file identifier (minimum 12)");
  EXPECT_NE(why("hello!! this is text\n").find("not an experience pack: file identifier 'this'"),
            std::string::npos);
  EXPECT_NE(why(file.substr(0, file.size() - 1))
                .find("corrupt_data: truncated: the size prefix "
                      "declares " +
                      std::to_string(file.size())),
            std::string::npos);
  EXPECT_NE(why(file + "x").find("(trailing bytes)"), std::string::npos);
  EXPECT_EQ(why(encode_pack(body, "")), "not_permitted: unsigned: the pack carries no signature");
  EXPECT_NE(why(encode_pack(body, "short")).find("expected an Ed25519 signature of 64 bytes"),
            std::string::npos);
  // A body that is not an ExperiencePackBody.
  EXPECT_NE(why(encode_pack(std::string(16, '\0'), std::string(64, '\x2a')))
                .find("the signed body is not an ExperiencePackBody"),
            std::string::npos);
  // A body whose public key is not 32 bytes.
  auto bad = sample_body();
  bad.public_key = "xx";
  EXPECT_NE(why(encode_pack(encode_pack_body(bad), std::string(64, '\x2a')))
                .find("the public key is 2 bytes"),
            std::string::npos);
}

} // namespace
} // namespace infrarsi::messages
