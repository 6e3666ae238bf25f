#pragma once
/// @file cluster_identity.hpp
/// The identity of a cluster in experience federation (docs/experience.md, "Federation"): an
/// Ed25519 signing key pair (libsodium) and a cluster id derived from its public key, and the
/// trust list of the clusters whose signed experience packs a store accepts.
///
/// Files (TOML, read with toml++, at most 4096 bytes each):
///
///     STORE/cluster.key (mode 0600)            STORE/cluster.pub (mode 0644)
///     cluster_id = "<32 hex digits>"           cluster_id = "<32 hex digits>"
///     public_key = "<64 hex digits>"           public_key = "<64 hex digits>"
///     secret_seed = "<64 hex digits>"
///
/// The secret is the 32-byte Ed25519 seed (crypto_sign_seed_keypair). A secret never appears in
/// an error, a refusal or any output of this module.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace infrarsi::adapters {

/// Hex digits of a cluster id: the first 16 bytes of SHA-256 of the Ed25519 public key.
inline constexpr std::size_t cluster_id_hex_digits = 32;

/// A cluster's signing identity. Movable, not copyable; the secret is wiped on destruction.
struct cluster_identity {
  /// cluster_id_of(public_key).
  std::string cluster_id;
  /// The Ed25519 public key, 32 raw bytes.
  std::string public_key;
  /// The key file it was read from.
  std::string key_file;

  cluster_identity() = default;
  cluster_identity(cluster_identity&&) noexcept = default;
  cluster_identity& operator=(cluster_identity&&) noexcept = default;
  cluster_identity(const cluster_identity&) = delete;
  cluster_identity& operator=(const cluster_identity&) = delete;
  ~cluster_identity();

  /// The Ed25519 signature (crypto_sign_detached, 64 bytes) of `bytes`.
  [[nodiscard]] std::string sign(std::string_view bytes) const;

private:
  friend caf::expected<cluster_identity> load_cluster_identity(const std::string&, bool);
  /// libsodium's 64-byte secret key (seed followed by the public key).
  std::string secret_;
};

/// The cluster id of an Ed25519 public key (32 raw bytes): lower-case hex of the first 16 bytes
/// of its SHA-256.
[[nodiscard]] std::string cluster_id_of(std::string_view public_key);

/// Lower-case hex of `bytes`.
[[nodiscard]] std::string to_hex(std::string_view bytes);

/// Whether `signature` (64 bytes) is a valid Ed25519 signature of `bytes` by `public_key` (32
/// bytes) (crypto_sign_verify_detached). False for keys or signatures of the wrong size.
[[nodiscard]] bool verify_signature(std::string_view public_key, std::string_view bytes,
                                    std::string_view signature);

/// The key file of a store's identity: STORE/cluster.key (its public part: STORE/cluster.pub).
[[nodiscard]] std::string cluster_key_path(const std::string& store_dir);

/// Reads the key file `path` (a NAME.key as above), or, when it does not exist and
/// `create_if_missing`, generates a key pair and writes `path` (mode 0600, created before the
/// secret is written) and NAME.pub beside it (mode 0644); two processes creating it at once
/// end with the same identity (the file is linked into place whole; the loser reads it).
/// Errors name the file: errc::not_found (missing and not created), errc::not_permitted (the
/// key file is accessible to group or others: expected mode 0600), errc::invalid_argument (not
/// TOML, FILE:LINE:COLUMN; a missing or unknown key; a value that is not the expected number of
/// hex digits; a public key or cluster id that does not belong to the secret), errc::io_error.
[[nodiscard]] caf::expected<cluster_identity> load_cluster_identity(const std::string& path,
                                                                    bool create_if_missing);

/// A cluster whose experience packs are accepted.
struct trusted_cluster {
  /// Its name in the trust list (for people).
  std::string name;
  /// Its Ed25519 public key, 32 raw bytes.
  std::string public_key;
  /// cluster_id_of(public_key).
  std::string cluster_id;
  /// Where it is listed: FILE:LINE.
  std::string source;
};

/// Reads a trust list (TOML, at most 1 MiB):
///
///     [[trusted]]
///     name = "lab-b"                       # letters, digits, '.', '_', '-'; at most 64
///     public_key = "<64 hex digits>"       # the public_key of that cluster's cluster.pub
///
/// An empty file (or no [[trusted]] table) trusts nobody else. Errors name the file, the line
/// and the key: errc::not_found (no such file), errc::invalid_argument (not TOML; an unknown
/// key; a missing or malformed name or public_key; the same key or name twice), errc::io_error.
[[nodiscard]] caf::expected<std::vector<trusted_cluster>> load_trust_list(const std::string& path);

} // namespace infrarsi::adapters
