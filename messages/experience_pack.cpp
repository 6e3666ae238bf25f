#include "messages/experience_pack.hpp"

#include <cctype>
#include <cstring>

#include <flatbuffers/flatbuffers.h>

#include "messages/experience_pack_generated.h"

namespace infrarsi::messages {

namespace {

using flatbuffers::uoffset_t;

std::string bytes_text(std::size_t n) {
  return std::to_string(n) + (n == 1 ? " byte" : " bytes");
}

std::string printable(const char* p, std::size_t n) {
  std::string s(p, n);
  for (auto& c : s)
    if (!std::isprint(static_cast<unsigned char>(c)))
      c = '?';
  return s;
}

std::string str(const flatbuffers::String* s) {
  return s == nullptr ? std::string{} : std::string{s->c_str(), s->size()};
}

std::string str(const flatbuffers::Vector<std::uint8_t>* v) {
  return v == nullptr ? std::string{}
                      : std::string{reinterpret_cast<const char*>(v->data()), v->size()};
}

} // namespace

std::string encode_pack_body(const experience_pack_body& body) {
  flatbuffers::FlatBufferBuilder fbb{1024 + body.findings.size() * 512};
  fbb.ForceDefaults(true); // `since` = 0 is written too: the signed bytes name every field
  std::vector<flatbuffers::Offset<wire::ExperienceFinding>> findings;
  findings.reserve(body.findings.size());
  for (const auto& f : body.findings)
    findings.push_back(wire::CreateExperienceFindingDirect(fbb, f.origin.c_str(), f.origin_position,
                                                           f.document.c_str()));
  // Each part built in its own statement: a fixed order, so the bytes are the same whatever
  // order a compiler evaluates function arguments in.
  auto list = fbb.CreateVector(findings);
  auto key = fbb.CreateVector(reinterpret_cast<const std::uint8_t*>(body.public_key.data()),
                              body.public_key.size());
  auto id = fbb.CreateString(body.cluster_id);
  auto format = fbb.CreateString(experience_pack_format);
  auto root = wire::CreateExperiencePackBody(fbb, format, id, key, body.since, list);
  fbb.Finish(root, experience_pack_body_identifier);
  return {reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize()};
}

std::string encode_pack(std::string_view body, std::string_view signature) {
  flatbuffers::FlatBufferBuilder fbb{body.size() + 256};
  // 8-byte alignment of the body inside the file, so it can be verified and read in place.
  fbb.ForceVectorAlignment(body.size(), 1, 8);
  auto b = fbb.CreateVector(reinterpret_cast<const std::uint8_t*>(body.data()), body.size());
  flatbuffers::Offset<flatbuffers::Vector<std::uint8_t>> s;
  if (!signature.empty())
    s = fbb.CreateVector(reinterpret_cast<const std::uint8_t*>(signature.data()), signature.size());
  auto root = wire::CreateExperiencePack(fbb, b, s);
  fbb.FinishSizePrefixed(root, experience_pack_identifier);
  return {reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize()};
}

caf::expected<opened_pack> open_pack(std::string_view file, const verify_limits& limits) {
  constexpr std::size_t header = 2 * sizeof(uoffset_t) + flatbuffers::kFileIdentifierLength;
  if (file.size() < header)
    return make_error(errc::unsupported_format,
                      "not an experience pack: " + bytes_text(file.size()) +
                          " cannot hold a size-prefixed FlatBuffer with a file identifier "
                          "(minimum 12)");
  if (std::memcmp(file.data() + 2 * sizeof(uoffset_t), experience_pack_identifier,
                  flatbuffers::kFileIdentifierLength) != 0)
    return make_error(errc::unsupported_format, "not an experience pack: file identifier '" +
                                                    printable(file.data() + 2 * sizeof(uoffset_t),
                                                              flatbuffers::kFileIdentifierLength) +
                                                    "', expected '" + experience_pack_identifier +
                                                    "'");
  if (file.size() > limits.max_bytes)
    return make_error(errc::corrupt_data, bytes_text(file.size()) + " exceed the limit of " +
                                              bytes_text(limits.max_bytes));
  // Copied into 8-byte-aligned storage: the verifier checks alignment, and the body is read in
  // place.
  const auto storage = byte_buffer::copy_of(file);
  const auto* data = storage.data();
  auto declared = std::size_t{flatbuffers::ReadScalar<uoffset_t>(data)} + sizeof(uoffset_t);
  if (declared > file.size())
    return make_error(errc::corrupt_data, "truncated: the size prefix declares " +
                                              bytes_text(declared) + " but only " +
                                              bytes_text(file.size()) + " are present");
  if (declared < file.size())
    return make_error(errc::corrupt_data, "the size prefix declares " + bytes_text(declared) +
                                              " but " + bytes_text(file.size()) +
                                              " are present (trailing bytes)");
  {
    flatbuffers::Verifier v(data, file.size(), limits.max_depth, limits.max_tables);
    if (!v.VerifySizePrefixedBuffer<wire::ExperiencePack>(experience_pack_identifier))
      return make_error(errc::corrupt_data,
                        "the pack (" + bytes_text(file.size()) +
                            ") fails FlatBuffers verification (corrupted or truncated)");
  }
  const auto* pack = flatbuffers::GetSizePrefixedRoot<wire::ExperiencePack>(data);
  opened_pack out;
  out.signature = str(pack->signature());
  if (out.signature.empty())
    return make_error(errc::not_permitted, "unsigned: the pack carries no signature");
  if (out.signature.size() != ed25519_signature_bytes)
    return make_error(errc::not_permitted, "the signature is " + bytes_text(out.signature.size()) +
                                               ", expected an Ed25519 signature of 64 bytes");
  const auto* body = pack->body();
  out.body = str(body);
  if (out.body.size() < 2 * sizeof(uoffset_t) ||
      !flatbuffers::BufferHasIdentifier(body->data(), experience_pack_body_identifier))
    return make_error(errc::corrupt_data, std::string{"the signed body is not an "
                                                      "ExperiencePackBody (identifier '"} +
                                              experience_pack_body_identifier + "' expected)");
  {
    flatbuffers::Verifier v(body->data(), body->size(), limits.max_depth, limits.max_tables);
    if (!v.VerifyBuffer<wire::ExperiencePackBody>(experience_pack_body_identifier))
      return make_error(errc::corrupt_data, "the signed body (" + bytes_text(body->size()) +
                                                ") fails FlatBuffers verification");
  }
  const auto* b = flatbuffers::GetRoot<wire::ExperiencePackBody>(body->data());
  if (str(b->format()) != experience_pack_format)
    return make_error(errc::unsupported_format,
                      "pack format '" + printable(b->format()->c_str(), b->format()->size()) +
                          "', expected '" + experience_pack_format + "'");
  out.decoded.cluster_id = str(b->cluster_id());
  out.decoded.public_key = str(b->public_key());
  if (out.decoded.public_key.size() != ed25519_public_key_bytes)
    return make_error(errc::corrupt_data, "the public key is " +
                                              bytes_text(out.decoded.public_key.size()) +
                                              ", expected an Ed25519 public key of 32 bytes");
  out.decoded.since = b->since();
  if (const auto* findings = b->findings()) {
    out.decoded.findings.reserve(findings->size());
    for (const auto* f : *findings)
      out.decoded.findings.push_back({str(f->origin()), f->origin_position(), str(f->document())});
  }
  return out;
}

} // namespace infrarsi::messages
