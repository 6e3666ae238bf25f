#pragma once
/// @file curve.hpp
/// Security of the daemon / node-runner protocol over tcp: ZeroMQ CURVE (encryption and server
/// authentication, RFC 26) plus a ZAP handler (client authentication against an allow-list,
/// RFC 27). Without a ZAP handler ZeroMQ admits every CURVE client that knows the server's public
/// key; make_curve_server() therefore refuses to configure a socket unless a zap_handler is
/// running for its domain, and sets ZMQ_ZAP_ENFORCE_DOMAIN so that the socket refuses every
/// client (instead of admitting all) if the handler stops. docs/security.md.
///
/// Keys are Z85 text (40 characters for 32 bytes). A secret key never appears in an error, a
/// refusal or a log line written by this module.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <sys/types.h>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <zmq.hpp>

namespace infrarsi::adapters {

/// Characters of a Z85-encoded CURVE key (32 bytes).
constexpr std::size_t curve_key_chars = 40;

/// A CURVE key pair, Z85-encoded (curve_key_chars characters each), from zmq_curve_keypair.
struct curve_keypair {
  std::string public_key;
  std::string secret_key;
};

/// A fresh key pair. Error: errc::unsupported_format when this libzmq has no CURVE (built
/// without libsodium; zmq_has("curve") is false).
[[nodiscard]] caf::expected<curve_keypair> generate_curve_keypair();

/// Empty when `key` is a valid Z85 CURVE key, else why not, without quoting the key (e.g.
/// "expected 40 Z85 characters, got 39", "character 7 is not a Z85 character").
[[nodiscard]] std::string curve_key_problem(const std::string& key);

/// The public key belonging to `secret_key` (zmq_curve_public). Error: errc::invalid_argument
/// when `secret_key` is not a valid Z85 key (the message never quotes it).
[[nodiscard]] caf::expected<std::string> curve_public_of(const std::string& secret_key);

/// Key files, both TOML (read with toml++), at most 4096 bytes:
///
///     NAME.key (mode 0600)                   NAME.pub (mode 0644)
///     # comment lines                        # comment lines
///     public = "<40 Z85 characters>"         public = "<40 Z85 characters>"
///     secret = "<40 Z85 characters>"
///
/// Writes DIR/NAME.key and DIR/NAME.pub (DIR is created with mode 0700 when missing). `name`:
/// letters, digits, '.', '_', '-', not starting with '.', at most 64 characters. The secret
/// file is created with mode 0600 before the secret is written (never readable by others, even
/// for an instant); each file is written to a temporary name and renamed into place.
/// Errors: errc::invalid_argument (bad name or key pair), errc::not_permitted (a file exists
/// and `overwrite` is false; nothing is written then), errc::io_error (naming the file).
[[nodiscard]] caf::error write_key_files(const std::string& dir, const std::string& name,
                                         const curve_keypair& keys, bool overwrite);

/// Writes `text` to `path` with exactly `mode` (e.g. 0600 for a secret), through a temporary
/// file in the same directory created with `mode` before anything is written, fsynced, then
/// renamed over `path` when `overwrite`, else linked to it. Also used for the cluster identity
/// files (adapters/cluster_identity.hpp). Errors: errc::not_permitted (`path` exists and
/// `overwrite` is false; nothing is written), errc::io_error naming the file.
[[nodiscard]] caf::error write_file_atomically(const std::string& path, const std::string& text,
                                               mode_t mode, bool overwrite);

/// Reads a small file (a key file, a trust list) of at most `limit` bytes, opened once: a
/// regular file; with `secret`, one that group or others may not access (any mode bit in 0077
/// is refused: expected 0600). Buffers that held the bytes are wiped. Errors name `what` and the
/// file: errc::not_found, errc::not_permitted (the mode), errc::invalid_argument (not a regular
/// file, over the limit), errc::io_error.
[[nodiscard]] caf::expected<std::string> read_small_file(const std::string& path,
                                                         const char* what, std::size_t limit,
                                                         bool secret);

/// Reads a NAME.key file. Errors name the file and what was expected: errc::not_found (no such
/// file), errc::not_permitted (the file is accessible to group or others: any mode bit in 0077;
/// expected 0600), errc::invalid_argument (not TOML, FILE:LINE:COLUMN; a missing or extra key;
/// a key that is not 40 Z85 characters; a public key that does not belong to the secret key).
[[nodiscard]] caf::expected<curve_keypair> load_secret_key_file(const std::string& path);

/// Reads the public key of a NAME.pub file. Errors as load_secret_key_file's, and
/// errc::not_permitted when the file also holds a secret key (a .pub file is meant to be
/// copied around; the secret belongs in the .key file only). No permission check.
[[nodiscard]] caf::expected<std::string> load_public_key_file(const std::string& path);

/// The clients a ZAP domain admits: Z85 public key -> the name it is known by (may be empty).
using curve_allow_list = std::map<std::string, std::string>;

/// Loads an allow-list from `path`, either
/// - a directory: every regular file ending in `.pub` (load_public_key_file); the name is the
///   file name without `.pub`; other files are ignored; or
/// - a text file: one entry per line, `KEY` or `KEY NAME` (whitespace between), blank lines and
///   `#` comments (whole line or after the entry) ignored; at most 1 MiB.
/// The same key twice is an error naming both places. An empty list is allowed (admits nobody).
/// Errors: errc::not_found, errc::invalid_argument naming FILE:LINE (or the .pub file) and
/// what was expected; errc::not_permitted from a .pub file holding a secret.
[[nodiscard]] caf::expected<curve_allow_list> load_allow_list(const std::string& path);

class zap_handler;

/// Makes `socket` a CURVE server with `server`'s key pair whose clients are authenticated by
/// `zap` in ZAP domain `domain`, and sets ZMQ_ZAP_ENFORCE_DOMAIN (fail closed: once `zap`
/// stops, every handshake is refused). Call before bind(). Errors (nothing is left half-set
/// that would admit a client): errc::invalid_argument (a bad key; `zap` serves no `domain`),
/// errc::not_permitted (`zap` is not running), errc::unsupported_format (this libzmq lacks
/// CURVE or ZAP enforcement).
[[nodiscard]] caf::error make_curve_server(zmq::socket_t& socket, const curve_keypair& server,
                                           const zap_handler& zap, const std::string& domain);

/// Makes `socket` a CURVE client with its own key pair `client` that accepts only the server
/// holding the secret key of `server_public_key`. Call before connect(). Errors:
/// errc::invalid_argument (a bad key, never quoted when secret), errc::unsupported_format.
[[nodiscard]] caf::error make_curve_client(zmq::socket_t& socket, const curve_keypair& client,
                                           const std::string& server_public_key);

/// One handshake the ZAP handler refused (what the daemon logs). Never holds a secret key or
/// a PLAIN password.
struct zap_refusal {
  /// The ZAP domain of the server socket ("" when it has none).
  std::string domain;
  /// The peer's IP address as ZeroMQ reports it, e.g. "127.0.0.1" (no port).
  std::string address;
  /// "CURVE", "NULL" or "PLAIN" (as the request named it).
  std::string mechanism;
  /// The client's Z85 public key (CURVE only; "" otherwise).
  std::string public_key;
  /// Why, e.g. "public key not on the allow-list of domain 'nodes'".
  std::string reason;
};

/// Answers ZAP requests (RFC 27) for the sockets of one ZeroMQ context, on its own thread: it
/// binds inproc://zeromq.zap.01 on `ctx` (one handler per context). A request is admitted
/// (status 200, user id = the client's Z85 public key, metadata property "X-Peer-Name" = its
/// allow-list name when not empty) only when its mechanism is CURVE, its domain is served and
/// the client's public key is on that domain's allow-list; every other request (unknown key,
/// unserved domain, a NULL or PLAIN mechanism, a malformed request) is refused with status 400
/// (500 for a malformed one) and reported to `on_refused`.
///
/// ZeroMQ consults ZAP only during a handshake: replacing an allow-list admits or refuses the
/// next handshakes, and leaves connected peers connected.
class zap_handler {
public:
  /// Called on the handler's thread for each refused request; must not block for long (the
  /// handshakes of all sockets of the context wait for it) and must not throw.
  using refusal_callback = std::function<void(const zap_refusal&)>;

  /// `domains`: ZAP domain -> its allow-list (more can be added with set_allow_list()).
  zap_handler(zmq::context_t& ctx, std::map<std::string, curve_allow_list> domains,
              refusal_callback on_refused = {});
  ~zap_handler();
  zap_handler(const zap_handler&) = delete;
  zap_handler& operator=(const zap_handler&) = delete;

  /// Binds inproc://zeromq.zap.01 and starts answering. Call before any server socket of the
  /// context binds. Errors: errc::io_error (another handler is bound on this context, naming
  /// the endpoint), errc::not_permitted (already running).
  [[nodiscard]] caf::error start();

  /// Stops answering, joins the thread and unbinds. Sockets made by make_curve_server refuse
  /// every handshake afterwards (close them first for a clean shutdown). Idempotent.
  void stop();

  [[nodiscard]] bool running() const noexcept { return running_; }

  /// Whether `domain` has an allow-list (thread-safe).
  [[nodiscard]] bool serves(const std::string& domain) const;

  /// Replaces (or adds) the allow-list of `domain`; thread-safe, effective for the next
  /// request (key rotation: add the new key, switch the peer, remove the old one).
  void set_allow_list(const std::string& domain, curve_allow_list keys);

  /// Requests admitted / refused so far.
  [[nodiscard]] std::uint64_t admitted() const noexcept { return admitted_; }
  [[nodiscard]] std::uint64_t refused() const noexcept { return refused_; }

  /// The endpoint ZeroMQ sends ZAP requests to.
  static constexpr const char* endpoint = "inproc://zeromq.zap.01";

private:
  void serve();

  zmq::context_t& ctx_;
  mutable std::mutex mutex_; // guards domains_
  std::map<std::string, curve_allow_list> domains_;
  refusal_callback on_refused_;
  std::unique_ptr<zmq::socket_t> socket_; // owned by the serving thread while it runs
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
  std::atomic<std::uint64_t> admitted_{0};
  std::atomic<std::uint64_t> refused_{0};
};

} // namespace infrarsi::adapters
