#include "adapters/llm_client.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include <curl/curl.h>

namespace infrarsi::adapters {

namespace {

struct transfer {
  std::string body;
  std::uint64_t cap = 0;
  bool too_large = false;
  double retry_after_s = -1;
};

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<transfer*>(user);
  auto bytes = size * n;
  if (t->body.size() + bytes > t->cap) {
    t->body.append(data, t->cap - t->body.size());
    t->too_large = true;
    return 0; // aborts the transfer (CURLE_WRITE_ERROR)
  }
  t->body.append(data, bytes);
  return bytes;
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<transfer*>(user);
  std::string line{data, size * n};
  static const std::string name = "retry-after:";
  if (line.size() > name.size()) {
    std::string head = line.substr(0, name.size());
    std::transform(head.begin(), head.end(), head.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (head == name) {
      auto value = line.substr(name.size());
      char* end = nullptr;
      double v = std::strtod(value.c_str(), &end);
      bool digits = end != value.c_str();
      for (; end != nullptr && *end != '\0'; ++end)
        if (*end != ' ' && *end != '\r' && *end != '\n')
          digits = false; // an HTTP date: not honoured (the backoff applies)
      if (digits && std::isfinite(v) && v >= 0)
        t->retry_after_s = v;
    }
  }
  return size * n;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool retryable(long status, CURLcode code, bool too_large) {
  if (too_large)
    return false;
  if (code != CURLE_OK)
    return code == CURLE_COULDNT_CONNECT || code == CURLE_OPERATION_TIMEDOUT ||
           code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR || code == CURLE_GOT_NOTHING ||
           code == CURLE_PARTIAL_FILE;
  return status == 429 || (status >= 500 && status <= 599);
}

} // namespace

nlohmann::json to_json(const llm_exchange& x) {
  auto attempts = nlohmann::json::array();
  for (const auto& a : x.attempts)
    attempts.push_back({{"http_status", a.http_status},
                        {"error", a.error},
                        {"retry_after_s", a.retry_after_s},
                        {"backoff_s", a.backoff_s},
                        {"elapsed_s", a.elapsed_s}});
  return {{"ok", x.ok},       {"http_status", x.http_status},
          {"body", x.body},   {"too_large", x.too_large},
          {"error", x.error}, {"attempts", attempts}};
}

bool read_api_key(const tuning::llm_spec& spec, std::string& key, std::string& why) {
  key.clear();
  if (spec.api_key_env.empty())
    return true;
  const char* v = std::getenv(spec.api_key_env.c_str());
  if (v == nullptr || *v == '\0') {
    why = "llm.api_key_env: the environment variable " + spec.api_key_env +
          " is not set (or empty): it must hold the API key";
    return false;
  }
  key = v;
  return true;
}

llm_exchange post_chat(const tuning::llm_spec& spec, const std::string& api_key,
                       const std::string& body, std::uint64_t attempts_left,
                       std::uint64_t jitter_seed) {
  global_init();
  llm_exchange x;
  std::mt19937_64 rng{jitter_seed};
  std::uniform_real_distribution<double> jitter{0.5, 1.5};
  const std::string url = spec.base_url + "/chat/completions";
  const std::uint64_t max_attempts = std::min<std::uint64_t>(spec.retries + 1, attempts_left);
  if (max_attempts == 0) {
    x.error = "no call left (llm.max_calls spent)";
    return x;
  }
  for (std::uint64_t i = 0; i < max_attempts; ++i) {
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl{curl_easy_init(), curl_easy_cleanup};
    if (!curl) {
      x.error = "curl_easy_init failed";
      return x;
    }
    transfer t;
    t.cap = spec.max_response_bytes;
    char errbuf[CURL_ERROR_SIZE] = {0};
    struct curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Accept: application/json");
    std::string auth;
    if (!api_key.empty()) {
      auth = "Authorization: Bearer " + api_key;
      headers = curl_slist_append(headers, auth.c_str());
    }
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list{headers,
                                                                            curl_slist_free_all};
    CURL* c = curl.get();
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::ceil(spec.connect_timeout_s * 1000)));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(std::ceil(spec.timeout_s * 1000)));
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE,
                     static_cast<curl_off_t>(spec.max_response_bytes));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "infrarsi-llm-proposer");
    auto start = std::chrono::steady_clock::now();
    CURLcode code = curl_easy_perform(c);
    llm_attempt a;
    a.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.http_status);
    a.retry_after_s = t.retry_after_s;
    if (code == CURLE_FILESIZE_EXCEEDED)
      t.too_large = true;
    if (t.too_large)
      a.error = "the answer is larger than llm.max_response_bytes (" +
                std::to_string(spec.max_response_bytes) + " bytes): transfer aborted";
    else if (code != CURLE_OK)
      a.error = std::string{curl_easy_strerror(code)} + (errbuf[0] != '\0' ? ": " : "") + errbuf;
    else if (a.http_status < 200 || a.http_status > 299)
      a.error = "HTTP " + std::to_string(a.http_status);
    x.http_status = a.http_status;
    x.body = std::move(t.body);
    x.too_large = t.too_large;
    bool last = i + 1 == max_attempts;
    if (a.error.empty()) {
      x.ok = true;
      x.error.clear();
      x.attempts.push_back(a);
      return x;
    }
    x.error = a.error;
    if (!retryable(a.http_status, code, t.too_large) || last) {
      if (last && retryable(a.http_status, code, t.too_large) && max_attempts > 1)
        x.error += " (after " + std::to_string(max_attempts) + " attempts)";
      x.attempts.push_back(a);
      return x;
    }
    double delay = a.retry_after_s >= 0
                       ? std::min(a.retry_after_s, 300.0)
                       : std::min(30.0, 0.5 * std::pow(2.0, static_cast<double>(i))) * jitter(rng);
    a.backoff_s = delay;
    x.attempts.push_back(a);
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  }
  return x;
}

} // namespace infrarsi::adapters
