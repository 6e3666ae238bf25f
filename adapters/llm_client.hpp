#pragma once
/// @file llm_client.hpp
/// The llm-proposer's HTTP client (libcurl): one OpenAI-compatible chat-completions request,
/// `POST {base_url}/chat/completions`, with connect and total timeouts, retries with exponential
/// backoff and jitter on 429, 5xx and transport errors (honouring Retry-After in seconds), a cap
/// on the answer's size (the transfer is aborted past it) and TLS verification on. Only http and
/// https, no redirects. The API key goes only into the Authorization header: never into the
/// result, an error text or a log. Reference: docs/llm.md.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tuning/task.hpp"

namespace infrarsi::adapters {

/// One HTTP attempt of an exchange.
struct llm_attempt {
  /// HTTP status (0 when no answer came: connection refused, timeout, aborted transfer).
  long http_status = 0;
  /// Why the attempt failed ("" when it succeeded): curl's error text or "HTTP 429".
  std::string error;
  /// Retry-After of the answer, seconds (-1 when absent or not a number of seconds).
  double retry_after_s = -1;
  /// Seconds slept before the next attempt (0 for the last).
  double backoff_s = 0;
  /// Seconds the attempt took.
  double elapsed_s = 0;
};

/// The outcome of one request with its retries.
struct llm_exchange {
  /// A 2xx answer arrived whole (within the size cap).
  bool ok = false;
  /// HTTP status of the last attempt (0: none).
  long http_status = 0;
  /// The last answer's body, at most max_response_bytes (cut where the transfer was aborted).
  std::string body;
  /// The transfer was aborted because the answer passed max_response_bytes.
  bool too_large = false;
  /// Why the exchange failed ("" when ok).
  std::string error;
  std::vector<llm_attempt> attempts;
};

/// The exchange as the LlmResponded document: {"ok", "http_status", "body", "too_large",
/// "error", "attempts": [{"http_status", "error", "retry_after_s", "backoff_s", "elapsed_s"}]}.
nlohmann::json to_json(const llm_exchange& x);

/// The API key from the environment variable `spec.api_key_env` ("" when the name is empty).
/// Errors: the variable is named but unset or empty -> false, `why` names the variable (never a
/// value).
bool read_api_key(const tuning::llm_spec& spec, std::string& key, std::string& why);

/// Sends `body` (a chat-completions request, JSON) to `spec.base_url` + "/chat/completions",
/// retrying after a 429, a 5xx or a transport error at most `spec.retries` times and at most
/// `attempts_left` attempts in all. The delay before retry i (0-based) is the answer's
/// Retry-After when it gives one (at most 300 s), else min(30, 0.5 x 2^i) s times a jitter
/// factor in [0.5, 1.5) drawn from `jitter_seed`. An answer larger than
/// `spec.max_response_bytes` is aborted and not retried. Blocks for the whole exchange.
llm_exchange post_chat(const tuning::llm_spec& spec, const std::string& api_key,
                       const std::string& body, std::uint64_t attempts_left,
                       std::uint64_t jitter_seed);

} // namespace infrarsi::adapters
