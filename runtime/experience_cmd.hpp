#pragma once
/// @file experience_cmd.hpp
/// `infrarsi experience list|rebuild|hash|identity|export|import|sync`: the experience bank of a
/// store, a projection of its event log (store/experience_bank.hpp), and its federation with
/// other clusters through signed experience packs (docs/experience.md, "Federation").

#include <cstdint>
#include <ostream>
#include <string>

#include "runtime/daemon.hpp"

namespace infrarsi::runtime {

/// `experience sync`'s connection defaults: a sync may take a while (120 s).
inline client_options sync_client() {
  client_options c;
  c.timeout_s = 120.0;
  return c;
}

struct experience_options {
  /// "list", "rebuild", "hash", "identity", "export", "import" or "sync".
  std::string action;
  /// Store directory (the one `infrarsi tune` used: events/, experience/, cluster.key). The
  /// event log is opened read-only, except by `import`, which appends to it; the bank's index
  /// (experience/) is written (caught up, or rebuilt); the cluster identity STORE/cluster.key is
  /// created on first use.
  std::string store_dir;
  /// list: print one JSON object per record instead of the table. Default false.
  bool json = false;
  /// export: the lowest origin (= global log) position of the store's own findings to include.
  /// Default 0 (all). Findings the store imported are always included.
  std::uint64_t since = 0;
  /// export: the pack file to write (mode 0644, written whole or not at all); "" (default): the
  /// pack goes to `out` and the summary to `err`.
  std::string out_file;
  /// import: the pack file to read.
  std::string pack_file;
  /// import, sync --store: the trust list (adapters::load_trust_list); "" (default):
  /// STORE/trust.toml when it exists, else only the store's own cluster is trusted.
  std::string trust_file;
  /// sync: with daemon.endpoint set, a running daemon is asked to pull from its configured
  /// peers (`peer`: only the one of that name or endpoint); otherwise the store pulls from the
  /// daemon at endpoint `peer` itself. daemon.server_key / daemon.key: CURVE key files for the
  /// connection this command makes. Default timeout 120 s.
  client_options daemon = sync_client();
  std::string peer;
};

/// Runs the action:
/// - `list` prints each record (hardware, workload, speedup and its 95 % interval, provenance:
///   local with run and log position, or imported with its origin cluster and position), the
///   count per hardware and workload (local, imported), and the bank's hash;
/// - `rebuild` deletes the index and folds it again from the log, then prints the record count,
///   the position read and the hash;
/// - `hash` prints the hash alone: SHA-256 (hex) of experience_bank::content();
/// - `identity` prints the store's cluster id, public key (hex) and key file paths;
/// - `export` writes a signed pack of the bank's findings (messages/experience_pack.fbs);
/// - `import` verifies a pack (pack structure, Ed25519 signature, signer in the trust list) and
///   appends the findings the store lacks, by (origin, origin position), to the stream
///   store::imported_experience_stream in one atomic batch; nothing when it lacks none;
/// - `sync` pulls from a peer daemon what the store lacks (runtime/experience_sync.hpp), or
///   asks a running daemon to pull from its configured peers, and prints per peer what came.
/// Exit status: 0 done, 1 it could not be or the pack was refused (the message names the file
/// and why: not a pack, truncated, unsigned, signature does not verify, signer not trusted, a
/// bad trust list; no event log; the store or bank held by a running tune or daemon; an I/O
/// error; sync: a peer not reached or its pack refused), 2 a bad action or a bad combination of
/// sync's options.
int run_experience(const experience_options& options, std::ostream& out, std::ostream& err);

} // namespace infrarsi::runtime
