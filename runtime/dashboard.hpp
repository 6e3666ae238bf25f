#pragma once
/// @file dashboard.hpp
/// The daemon's live dashboard (docs/daemon.md "Dashboard"): a read-only HTTP server
/// (cpp-httplib) inside `infrarsi daemon`. It shows what `infrarsi daemon status` shows — the
/// same status document, asked of the daemon's controller through the same path — as a page that
/// polls `/api/state`, and serves each run's report from the store. GET (and HEAD) only; bound to
/// 127.0.0.1 unless configured otherwise, and then only with a bearer token.
///
/// Routes: `/` (the page), `/dashboard.js` (its script; no data, served without a token),
/// `/api/state` (the status document, JSON), `/runs/RUN/` (report.html, else report.md as text,
/// else report.json), `/runs/RUN/report.{html,md,json}`. Any other path: 404; any other method:
/// 405; a missing or wrong token: 401. RUN must be a valid run id (store::validate_run_id) of a
/// run the status document lists, so no path outside STORE/runs/RUN/ is ever opened.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <caf/expected.hpp>

namespace infrarsi::runtime {

/// [dashboard] of the daemon config. Defaults are written inline.
struct dashboard_config {
  /// [dashboard] enabled: serve the dashboard. Default false.
  bool enabled = false;
  /// [dashboard] bind: the address to listen on (an IP address or "localhost"). Default
  /// "127.0.0.1". Any address outside 127.0.0.0/8 and ::1 requires a token.
  std::string bind = "127.0.0.1";
  /// [dashboard] port: TCP port, 0..65535 (0: the system picks one; the daemon prints the URL).
  /// Default 5580.
  int port = 5580;
  /// [dashboard] token_file: a file whose content (trailing whitespace dropped) is the bearer
  /// token, at least 16 characters. Default "" (none).
  std::string token_file;
  /// [dashboard] token_env: the name of an environment variable holding the token instead.
  /// Default "" (none). At most one of token_file and token_env.
  std::string token_env;
};

/// Whether `host` names this machine's loopback only: an IPv4 address in 127.0.0.0/8, ::1,
/// ::ffff:127.x.y.z, or "localhost". Anything else (0.0.0.0, ::, a host name) is not.
[[nodiscard]] bool is_loopback_address(const std::string& host);

/// Compares a token given by a client with the expected one in time independent of where they
/// differ: both are hashed (SHA-256) and the digests compared with OpenSSL's CRYPTO_memcmp.
/// An empty `given` never matches.
[[nodiscard]] bool same_token(std::string_view expected, std::string_view given);

/// Reads the token `config` names (token_file or token_env); "" when neither is set. Errors:
/// errc::invalid_argument naming `source` (the config file), the key and the file or variable:
/// unreadable file, unset or empty variable, a token shorter than 16 characters.
[[nodiscard]] caf::expected<std::string> load_dashboard_token(const dashboard_config& config,
                                                              const std::string& source);

/// Where the dashboard's data comes from.
struct dashboard_source {
  /// The daemon status document (`infrarsi daemon status --json`), as JSON text, or an error.
  /// Called from HTTP worker threads, at most every 0.5 s (answers are shared in between).
  std::function<caf::expected<std::string>()> status;
  /// The daemon's store directory: reports are read from STORE/runs/RUN/.
  std::string store_dir;
};

/// The HTTP server. Bind first (errors before the daemon serves anything), then serve.
class dashboard_server {
public:
  /// Binds config.bind:config.port. `token` "" means none is required (allowed only on a
  /// loopback address). Errors: errc::invalid_argument for a non-loopback address without a
  /// token; errc::io_error naming the address when it cannot be bound.
  [[nodiscard]] static caf::expected<std::unique_ptr<dashboard_server>>
  bind(const dashboard_config& config, std::string token);

  /// Starts answering on a thread of its own (worker threads: 4).
  void serve(dashboard_source source);

  /// The URL of the page, e.g. "http://127.0.0.1:5580/" (an IPv6 address in brackets).
  [[nodiscard]] std::string url() const;

  /// Stops answering and joins the threads. Idempotent; the destructor calls it.
  void stop();

  ~dashboard_server();
  dashboard_server(const dashboard_server&) = delete;
  dashboard_server& operator=(const dashboard_server&) = delete;

private:
  struct impl;
  explicit dashboard_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace infrarsi::runtime
