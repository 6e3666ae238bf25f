#pragma once
/// @file experience_pack.hpp
/// The experience pack file (messages/experience_pack.fbs): encoding and the structural checks a
/// reader makes before it trusts a byte. No cryptography here: the caller signs the body bytes
/// and verifies the signature (adapters/cluster_identity.hpp). Layout: store/FORMAT.md,
/// "Experience pack".

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

#include "messages/codec.hpp"

namespace infrarsi::messages {

/// Format tag in ExperiencePackBody.format.
inline constexpr const char* experience_pack_format = "infrarsi-experience-pack/1";
/// File identifier of the pack file (a size-prefixed ExperiencePack).
inline constexpr const char* experience_pack_identifier = "IRXP";
/// File identifier of the signed body (an ExperiencePackBody, not size-prefixed).
inline constexpr const char* experience_pack_body_identifier = "IRXB";
/// Bytes of an Ed25519 public key and of a signature.
inline constexpr std::size_t ed25519_public_key_bytes = 32;
inline constexpr std::size_t ed25519_signature_bytes = 64;

/// One finding of a pack (ExperienceFinding).
struct experience_finding {
  /// Origin cluster id (32 lower-case hex digits).
  std::string origin;
  /// Global position of the finding's ExperienceRecorded event in the origin's log.
  std::uint64_t origin_position = 0;
  /// The finding's "experience/1" JSON object, compact with sorted keys.
  std::string document;
};

/// The signed content of a pack (ExperiencePackBody).
struct experience_pack_body {
  /// The exporter's cluster id.
  std::string cluster_id;
  /// The exporter's Ed25519 public key: ed25519_public_key_bytes raw bytes.
  std::string public_key;
  /// Lower bound of the origin positions of the exporter's own findings (0: all).
  std::uint64_t since = 0;
  /// Sorted by (origin, origin_position).
  std::vector<experience_finding> findings;
};

/// The body as the bytes to sign: an ExperiencePackBody FlatBuffer with identifier "IRXB"
/// (format experience_pack_format). Deterministic: equal bodies give equal bytes.
[[nodiscard]] std::string encode_pack_body(const experience_pack_body& body);

/// The pack file: a size-prefixed ExperiencePack (identifier "IRXP") of `body` (the bytes of
/// encode_pack_body) and its `signature` (empty: an unsigned pack, which readers refuse).
[[nodiscard]] std::string encode_pack(std::string_view body, std::string_view signature);

/// The two parts of a pack file that passed open_pack.
struct opened_pack {
  /// The signed bytes (an ExperiencePackBody buffer that passed its verifier).
  std::string body;
  /// The signature bytes (ed25519_signature_bytes of them).
  std::string signature;
  /// The body, decoded. Trust nothing in it before the signature over `body` is verified.
  experience_pack_body decoded;
};

/// Checks and splits a pack file's bytes, before any signature check. Errors, the message
/// saying which (the caller adds the file name):
/// - errc::unsupported_format: not an experience pack (shorter than a size prefix plus an
///   identifier, or another file identifier than "IRXP"), or a body of another format tag;
/// - errc::corrupt_data: truncated (the size prefix declares more bytes than there are),
///   trailing bytes, a buffer that fails the FlatBuffers verifier (outer or body, under
///   `limits`), a body without identifier "IRXB", a public key that is not 32 bytes;
/// - errc::not_permitted: unsigned (no signature) or a signature that is not 64 bytes.
[[nodiscard]] caf::expected<opened_pack> open_pack(std::string_view file,
                                                   const verify_limits& limits = {});

} // namespace infrarsi::messages
