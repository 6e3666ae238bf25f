#pragma once
/// @file experience_sync.hpp
/// Federation of experience banks (docs/experience.md, "Federation" and "Sync between
/// daemons"): building a signed experience pack from a bank, checking a pack before a byte of it
/// is trusted, appending its new findings to the event log, and pulling from a peer daemon over
/// ZeroMQ (its client socket, CURVE when keys are given). `infrarsi experience export|import|sync`
/// and the daemon's "experience-pull" / "experience-sync" requests all go through these
/// functions: one home for each decision (what a pack holds, which pack is accepted, what is
/// appended).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "adapters/cluster_identity.hpp"
#include "store/event_log.hpp"
#include "store/experience_bank.hpp"

namespace infrarsi::runtime {

/// A finding's identity across clusters: (origin cluster id, global position of its
/// ExperienceRecorded event in the origin's log).
using finding_key = std::pair<std::string, std::uint64_t>;

/// A signed pack as make_pack builds it.
struct built_pack {
  /// The pack file's bytes (messages::encode_pack: size-prefixed ExperiencePack).
  std::string bytes;
  /// Findings in it: this store's own, and imported ones.
  std::size_t local = 0;
  std::size_t imported = 0;
  /// False when `max_bytes` stopped it before every eligible finding was in: ask again with
  /// the keys received added to `exclude`.
  bool complete = true;
};

/// Builds a pack of `bank`'s findings signed by `me`: the store's own findings from origin
/// position `since` on and every imported one, minus those whose key is in `exclude`, sorted
/// by (origin, origin position). `max_bytes` (0: no limit) bounds the sum of the findings'
/// document sizes; the first finding always goes in. Errors: the bank's (errc::io_error).
[[nodiscard]] caf::expected<built_pack> make_pack(const store::experience_bank& bank,
                                                  const adapters::cluster_identity& me,
                                                  std::uint64_t since,
                                                  const std::set<finding_key>& exclude = {},
                                                  std::size_t max_bytes = 0);

/// The keys of every finding `bank` holds (its own and imported). Errors: the bank's.
[[nodiscard]] caf::expected<std::set<finding_key>> held_findings(const store::experience_bank& bank);

/// The clusters a store accepts packs from, and how to name where that list came from.
struct trust_set {
  std::vector<adapters::trusted_cluster> trusted;
  /// For refusals: "'FILE'" or "(no 'FILE': only this store's own cluster is trusted)".
  std::string label;
};

/// Reads the trust list `file` (adapters::load_trust_list). When `required` is false a missing
/// file trusts nobody else (the store's default STORE/trust.toml); when true it is an error.
/// Errors: those of load_trust_list, naming the file, the line and the key.
[[nodiscard]] caf::expected<trust_set> load_trust(const std::string& file, bool required);

/// A pack that passed every check of verify_pack.
struct verified_pack {
  /// The signer's cluster id and its name (the trust list's, or "this cluster").
  std::string signer;
  std::string signer_name;
  /// SHA-256 (hex) of the pack's bytes, logged with each imported finding.
  std::string sha256;
  struct finding {
    std::string origin;
    std::uint64_t position = 0;
    /// The finding without provenance fields (store::experience_finding_of).
    nlohmann::json document;
  };
  /// In the pack's order.
  std::vector<finding> findings;
};

/// Checks a pack's bytes before anything of it is trusted: structure (messages::open_pack,
/// FlatBuffers verifier under the default limits), the Ed25519 signature over its body, the
/// cluster id it names against its key, the signer (`own_cluster_id`, or in `trust`), and each
/// finding (origin a cluster id, no key twice, a JSON object with non-empty hardware and
/// workload). Errors (the message is the reason, for "refused: REASON"):
/// errc::unsupported_format, errc::corrupt_data, errc::not_permitted.
[[nodiscard]] caf::expected<verified_pack> verify_pack(std::string_view bytes,
                                                       const std::string& own_cluster_id,
                                                       const trust_set& trust);

/// What appending a verified pack did.
struct import_counts {
  /// Findings in the pack.
  std::size_t offered = 0;
  /// Appended as ExperienceImported events.
  std::size_t imported = 0;
  /// Already in the bank (of them, with other content: the first one kept).
  std::size_t present = 0;
  std::size_t conflicting = 0;
  /// Findings of this store's own cluster (it has them itself).
  std::size_t own = 0;
};

/// Appends the findings of `pack` that `bank` lacks (by origin and origin position; none of
/// this store's own) to the stream store::imported_experience_stream of `log` in one atomic
/// batch, each as an ExperienceImported event {origin, origin_position, finding, via: signer,
/// pack_sha256}, then catches the bank up. Appends nothing when it lacks none. Errors: the
/// log's (errc::version_conflict when another writer appended to the stream meanwhile) and the
/// bank's.
[[nodiscard]] caf::expected<import_counts> append_pack(verified_pack pack, store::event_log& log,
                                                       store::experience_bank& bank);

/// The bank's record count, position read and content hash, as commands print them.
struct bank_summary {
  std::size_t records = 0;
  std::size_t imported = 0;
  std::uint64_t position = 0;
  /// SHA-256 (hex) of experience_bank::content().
  std::string hash;
};
[[nodiscard]] caf::expected<bank_summary> summarize(const store::experience_bank& bank);

/// A peer daemon to pull findings from.
struct experience_peer {
  /// Its name (the daemon config's [[experience.peers]] name, or the endpoint).
  std::string name;
  /// Its client endpoint, e.g. tcp://lab-b:5556.
  std::string endpoint;
  /// The peer daemon's CURVE public key file and this side's CURVE key file: both or neither.
  std::string server_key;
  std::string key;
  /// Seconds to wait for each answer.
  double timeout_s = 30.0;
  /// When set and it becomes true, the pull gives up within 100 ms (errc::interrupted).
  const std::atomic<bool>* cancelled = nullptr;
  /// For the hint when the peer does not answer: where its keys are configured (e.g. the
  /// daemon config's "FILE: experience.peers[2]"); "" for the command line's --server-key/--key.
  std::string configured_at;
};

/// What one pull did.
struct pull_result {
  std::string peer;
  /// Requests made (a peer answers at most `max_reply_bytes` of findings at a time).
  std::size_t rounds = 0;
  /// The signer of the peer's packs.
  std::string signer;
  std::string signer_name;
  import_counts counts;
};

/// A pull's entry in a sync result document: {"ok", and "pulled", "offered", "present",
/// "conflicting", "own", "rounds", "signer", "signer_name"; or "error"} (the daemon's status
/// experience.peers, `experience sync --json`).
[[nodiscard]] nlohmann::json pull_entry(const caf::expected<pull_result>& pulled);

/// A bank summary as a sync result's "bank": {"records", "imported", "position", "hash"}.
[[nodiscard]] nlohmann::json bank_entry(const bank_summary& summary);

/// The most finding bytes one "experience-pull" answer carries (the broker's frames are at
/// most 16 MiB).
inline constexpr std::size_t max_reply_bytes = std::size_t{8} << 20;

/// Pulls from `peer` what `bank` lacks: sends "experience-pull" with the keys of every finding
/// the bank holds, verifies the signed pack it answers (verify_pack under `trust`) and appends
/// it (append_pack), until the peer says its answer was complete (at most 64 rounds). Errors:
/// errc::not_found (no answer within timeout_s), errc::invalid_argument (the peer refused the
/// request, with its reason; bad key files), errc::not_permitted and the other refusals of
/// verify_pack (prefixed "the peer's pack was refused: "), and those of append_pack.
[[nodiscard]] caf::expected<pull_result> pull_from_peer(const experience_peer& peer,
                                                        store::event_log& log,
                                                        store::experience_bank& bank,
                                                        const trust_set& trust);

/// The argument of an "experience-pull" request: {"have": {ORIGIN: [POSITION, ...]},
/// "max_bytes": N}.
[[nodiscard]] std::string pull_request_argument(const std::set<finding_key>& have,
                                                std::size_t max_bytes);

/// Reads that argument back. Errors: errc::invalid_argument naming what is malformed.
struct pull_request {
  std::set<finding_key> have;
  std::size_t max_bytes = max_reply_bytes;
};
[[nodiscard]] caf::expected<pull_request> parse_pull_request(std::string_view argument);

} // namespace infrarsi::runtime
