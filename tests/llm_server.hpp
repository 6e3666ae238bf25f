#pragma once
// A real OpenAI-compatible HTTP server on 127.0.0.1 (cpp-httplib) with scripted answers: the one
// thing the LLM tests cannot run for real is the model, so its answers are scripted; the HTTP,
// the sockets and the timing are real.

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace infrarsi::test {

/// A chat-completions answer whose message content is `content`, with usage.
inline std::string chat_answer(const std::string& content, int prompt_tokens = 100,
                               int completion_tokens = 50) {
  nlohmann::json j = {{"id", "chatcmpl-test"},
                      {"object", "chat.completion"},
                      {"choices", nlohmann::json::array(
                                      {{{"index", 0},
                                        {"message", {{"role", "assistant"}, {"content", content}}},
                                        {"finish_reason", "stop"}}})},
                      {"usage",
                       {{"prompt_tokens", prompt_tokens},
                        {"completion_tokens", completion_tokens},
                        {"total_tokens", prompt_tokens + completion_tokens}}}};
  return j.dump();
}

/// One request as the server received it.
struct received_request {
  std::string body;
  std::string authorization;
};

class llm_server {
public:
  using handler = std::function<void(const httplib::Request&, httplib::Response&, int call)>;

  explicit llm_server(handler h) : handler_(std::move(h)) {
    server_.Post("/v1/chat/completions",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   int call = 0;
                   {
                     std::lock_guard<std::mutex> lock{mutex_};
                     received_.push_back({req.body, req.get_header_value("Authorization")});
                     call = static_cast<int>(received_.size()) - 1;
                   }
                   handler_(req, res, call);
                 });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread{[this] { server_.listen_after_bind(); }};
    while (!server_.is_running()) // the socket is bound: connections queue until it runs
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~llm_server() { stop(); }
  llm_server(const llm_server&) = delete;
  llm_server& operator=(const llm_server&) = delete;

  void stop() {
    if (thread_.joinable()) {
      server_.stop();
      thread_.join();
    }
  }
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string base_url() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/v1";
  }
  [[nodiscard]] std::vector<received_request> received() const {
    std::lock_guard<std::mutex> lock{mutex_};
    return received_;
  }

private:
  handler handler_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::vector<received_request> received_;
};

/// A port on 127.0.0.1 where nothing listens (a server bound there and stopped).
inline int closed_port() {
  llm_server s{[](const httplib::Request&, httplib::Response&, int) {}};
  int port = s.port();
  s.stop();
  return port;
}

} // namespace infrarsi::test
