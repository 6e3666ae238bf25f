#pragma once
/// @file daemon.hpp
/// `infrarsi daemon`: the long-running tuning service (docs/daemon.md). One RocksDB store it
/// alone writes; a ZeroMQ ROUTER for node-runners (`infrarsi node --connect`) and one for clients
/// (`infrarsi submit`, `infrarsi daemon status`); tasks from clients and from a watched
/// directory; several runs at once over the shared node pool (decide::fair_share); every
/// unfinished run resumed from the log at start; SIGTERM / SIGINT drain.

#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/codec.hpp"
#include "runtime/dashboard.hpp"
#include "tuning/task.hpp"

namespace infrarsi::runtime {

/// The daemon's configuration: `infrarsi daemon --config FILE` (TOML; config/daemon.toml is a
/// commented example). Every key is optional; defaults are written inline. Relative paths
/// resolve against the config file's directory.
struct daemon_config {
  /// [daemon] store: the store directory (events/, experience/, runs/). Default ".infrarsi-daemon".
  std::string store_dir = ".infrarsi-daemon";
  /// [daemon] node_endpoint: where node-runners connect. Default "tcp://127.0.0.1:5555" (use
  /// "tcp://*:5555" to accept other hosts, with CURVE).
  std::string node_endpoint = "tcp://127.0.0.1:5555";
  /// [daemon] client_endpoint: where `infrarsi submit` / `daemon status` connect. Default
  /// "tcp://127.0.0.1:5556".
  std::string client_endpoint = "tcp://127.0.0.1:5556";
  /// [daemon] watch_dir: every *.toml file put here is submitted, then moved to
  /// watch_dir/submitted/ (or watch_dir/rejected/ with a .error file). Default "" (none).
  std::string watch_dir;
  /// [daemon] watch_interval_s: how often watch_dir is scanned, seconds. Default 2.
  double watch_interval_s = 2.0;
  /// [daemon] heartbeat_ms: heartbeat interval both ways. Default 1000.
  int heartbeat_ms = 1000;
  /// [daemon] liveness: missed heartbeats before a node is dead. Default 3.
  int liveness = 3;
  /// [daemon] drain_grace_s: on SIGTERM, how long running trials may finish before the daemon
  /// stops them (their runs log RunInterrupted; a resume logs them lost and re-queues them).
  /// Default 60.
  double drain_grace_s = 60.0;
  /// [daemon] max_slots_per_run: most trials of one run in flight (0: its fair share). Default 0.
  std::uint32_t max_slots_per_run = 0;
  /// [daemon] send_hwm: ZeroMQ send high-water mark per peer, messages. Default 1000.
  int send_hwm = 1000;
  /// [daemon] knowledge_dir: the offline knowledge base. Default: config/knowledge beside each
  /// task's config/tasks directory, else ./config/knowledge.
  std::string knowledge_dir;
  /// [security] secret_key: the daemon's CURVE key file (NAME.key from `infrarsi keys generate`).
  /// Set: every socket is a CURVE server. Default "" (plain TCP: only for 127.0.0.1).
  std::string secret_key;
  /// [security] allow: the allow-list of node public keys (and of client keys when
  /// allow_clients is not set): a directory of *.pub files or a file of keys, one per line.
  /// Required with secret_key.
  std::string allow;
  /// [security] allow_clients: the allow-list of client keys (`submit`, `daemon status`), in the
  /// same formats. Default "": the `allow` list serves both sockets.
  std::string allow_clients;
  /// [llm]: the llm-proposer for every submitted task that has no `[llm]` table of its own
  /// (docs/llm.md; the same keys, checked the same way). The table is appended to such a task's
  /// text before its run starts, so the run's logged task holds it (resume and replay need no
  /// daemon config). Default: none (those tasks use the offline knowledge base).
  tuning::llm_spec llm;
  /// The [llm] table as TOML text ("[llm]\n..."), what is appended; "" without one.
  std::string llm_toml;
  /// [dashboard]: the live dashboard over HTTP (runtime/dashboard.hpp). Default: off.
  dashboard_config dashboard;
  /// One [[experience.peers]] table: a daemon whose experience this one pulls
  /// (docs/experience.md, "Sync between daemons").
  struct experience_peer_config {
    /// name: letters, digits, '.', '_', '-' (at most 64); unique. Required.
    std::string name;
    /// endpoint: the peer daemon's client endpoint (tcp:// or ipc://). Required.
    std::string endpoint;
    /// server_key: the peer daemon's CURVE public key file (NAME.pub). Set: the connection
    /// uses CURVE with this daemon's security.secret_key (or `key`) as the client key, which
    /// the peer must allow on its client socket. Default "": plain (loopback only).
    std::string server_key;
    /// key: this side's CURVE key file for this peer. Default: security.secret_key.
    std::string key;
    /// timeout_s: seconds to wait for each answer. Default 30.
    double timeout_s = 30.0;
  };
  /// [experience] trust: the trust list of clusters whose signed packs are accepted
  /// (adapters::load_trust_list). Default "": STORE/trust.toml when it exists, else only this
  /// store's own cluster.
  std::string experience_trust;
  /// [experience] sync_interval_s: pull from every peer at start and then every this many
  /// seconds; 0: only on request (`infrarsi experience sync --daemon`). Default 300.
  double experience_sync_interval_s = 300.0;
  /// [[experience.peers]]: the daemons to pull from. Default: none.
  std::vector<experience_peer_config> experience_peers;
  /// The file this was read from.
  std::string source;
};

/// Reads a daemon config file. Errors: errc::invalid_argument naming FILE:LINE:COLUMN (syntax),
/// or the file, the key and what was expected (unknown key, wrong type, out-of-range value);
/// errc::not_found when the file does not exist.
[[nodiscard]] caf::expected<daemon_config> load_daemon_config(const std::string& path);

/// Runs the daemon until SIGTERM / SIGINT (drain: exit 0) or a fatal error (exit 1). Log lines
/// go to `err`; `ready` (when set) is written with the bound endpoints once both sockets listen.
int run_daemon(const daemon_config& config, std::ostream& out, std::ostream& err);

/// How a client reaches a daemon.
struct client_options {
  /// e.g. tcp://head:5556.
  std::string endpoint;
  /// The daemon's public key file (NAME.pub) — with `key`, the connection uses CURVE.
  std::string server_key;
  /// This client's key file (NAME.key).
  std::string key;
  /// How long to wait for the answer, seconds. Default 10.
  double timeout_s = 10.0;
  /// When set and it becomes true, a request waiting for its answer gives up within 100 ms
  /// (errc::interrupted). Default none.
  const std::atomic<bool>* cancelled = nullptr;
};

/// One request to a daemon's client socket and its reply: a DEALER that connects to
/// `client.endpoint` (CURVE when both key files are given), sends `request` and waits
/// `client.timeout_s` for one answer. Errors name the endpoint: errc::not_found (no answer in
/// time), errc::invalid_argument (one key file without the other), the key files' errors,
/// errc::io_error, and the reply's decoding errors.
[[nodiscard]] caf::expected<messages::client_reply_msg>
ask_daemon(const client_options& client, const messages::envelope_msg& request);

/// `infrarsi submit TASK --daemon EP`: loads TASK here (errors before anything is sent), sends it
/// with its scope hashes, prints the run id. Exit 0 accepted, 1 refused or no answer.
/// `experience` ("filtered", "all", "none"; "" = the daemon's default, filtered) chooses what the
/// daemon's experience bank serves the run.
int run_submit(const client_options& client, const std::string& task_path,
               std::optional<std::uint64_t> seed, std::optional<std::uint32_t> trials,
               std::uint32_t max_slots, const std::string& experience, std::ostream& out,
               std::ostream& err);

/// `infrarsi daemon status --daemon EP`: runs, nodes, trials in flight. `json`: the raw document.
/// Exit 0, or 1 when the daemon does not answer.
int run_daemon_status(const client_options& client, bool json, std::ostream& out,
                      std::ostream& err);

/// Options of `infrarsi node`.
struct node_options {
  std::string connect;
  std::string workdir;
  std::string name;
  /// Number of slots (default 1), or per-slot environment / CPU lists as in `tune`.
  std::uint32_t slots = 1;
  std::vector<std::string> slot_env;
  std::vector<std::string> slot_cpus;
  std::string server_key;
  std::string key;
  int heartbeat_ms = 1000;
  int liveness = 3;
  std::uint64_t disk_reserve_bytes = 0;
};

/// `infrarsi node --connect EP --workdir DIR`: the node-runner, until SIGTERM / SIGINT (exit 0,
/// running trials stopped) or a refusal by the daemon (exit 1).
int run_node(const node_options& options, std::ostream& out, std::ostream& err);

} // namespace infrarsi::runtime
