// adapters/llm_client.cpp against a real HTTP server on 127.0.0.1 (tests/llm_server.hpp): good
// answers, the API key's path, 429 storms with Retry-After, 5xx then success, a slow answer past
// the timeout, a 50 MB answer past the size cap (with and without Content-Length), the server
// down.

#include "adapters/llm_client.hpp"

#include <cstdlib>

#include <gtest/gtest.h>

#include "llm_server.hpp"

namespace infrarsi::adapters {
namespace {

tuning::llm_spec spec_for(const std::string& base_url) {
  tuning::llm_spec s;
  s.enabled = true;
  s.base_url = base_url;
  s.model = "test-model";
  s.timeout_s = 10;
  s.connect_timeout_s = 2;
  s.retries = 3;
  return s;
}

TEST(LlmClient, GoodAnswerCarriesTheKeyOnlyInTheHeader) {
  test::llm_server server{[](const httplib::Request&, httplib::Response& res, int) {
    res.set_content(test::chat_answer("{}"), "application/json");
  }};
  auto x = post_chat(spec_for(server.base_url()), "sk-secret-123", R"({"model":"m"})", 10, 1);
  ASSERT_TRUE(x.ok) << x.error;
  EXPECT_EQ(x.http_status, 200);
  EXPECT_EQ(x.body, test::chat_answer("{}"));
  ASSERT_EQ(x.attempts.size(), 1u);
  auto got = server.received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, R"({"model":"m"})");
  EXPECT_EQ(got[0].authorization, "Bearer sk-secret-123");
  EXPECT_EQ(to_json(x).dump().find("sk-secret"), std::string::npos);
}

TEST(LlmClient, NoKeyNoAuthorizationHeader) {
  test::llm_server server{[](const httplib::Request&, httplib::Response& res, int) {
    res.set_content(test::chat_answer("{}"), "application/json");
  }};
  auto x = post_chat(spec_for(server.base_url()), "", "{}", 10, 1);
  ASSERT_TRUE(x.ok) << x.error;
  EXPECT_EQ(server.received().at(0).authorization, "");
}

TEST(LlmClient, ApiKeyComesFromTheNamedVariableOnly) {
  tuning::llm_spec s;
  s.api_key_env = "INFRARSI_TEST_LLM_KEY_UNSET_VAR";
  ::unsetenv(s.api_key_env.c_str());
  std::string key;
  std::string why;
  EXPECT_FALSE(read_api_key(s, key, why));
  EXPECT_NE(why.find("INFRARSI_TEST_LLM_KEY_UNSET_VAR"), std::string::npos) << why;
  ::setenv(s.api_key_env.c_str(), "sk-from-env", 1);
  ASSERT_TRUE(read_api_key(s, key, why));
  EXPECT_EQ(key, "sk-from-env");
  ::unsetenv(s.api_key_env.c_str());
}

TEST(LlmClient, TooManyRequestsStormHonoursRetryAfterThenGivesUp) {
  test::llm_server server{[](const httplib::Request&, httplib::Response& res, int) {
    res.status = 429;
    res.set_header("Retry-After", "1");
    res.set_content(R"({"error":"rate limited"})", "application/json");
  }};
  auto s = spec_for(server.base_url());
  s.retries = 2;
  auto start = std::chrono::steady_clock::now();
  auto x = post_chat(s, "", "{}", 10, 1);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(x.ok);
  EXPECT_EQ(x.http_status, 429);
  ASSERT_EQ(x.attempts.size(), 3u);
  EXPECT_EQ(server.received().size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(x.attempts[i].http_status, 429);
    EXPECT_DOUBLE_EQ(x.attempts[i].retry_after_s, 1.0);
  }
  EXPECT_DOUBLE_EQ(x.attempts[0].backoff_s, 1.0);
  EXPECT_DOUBLE_EQ(x.attempts[1].backoff_s, 1.0);
  EXPECT_DOUBLE_EQ(x.attempts[2].backoff_s, 0.0);
  EXPECT_GE(took, 2.0); // two Retry-After waits
  EXPECT_EQ(x.error, "HTTP 429 (after 3 attempts)");
}

TEST(LlmClient, CallsLeftBoundTheAttempts) {
  test::llm_server server{[](const httplib::Request&, httplib::Response& res, int) {
    res.status = 503;
    res.set_header("Retry-After", "0");
  }};
  auto x = post_chat(spec_for(server.base_url()), "", "{}", 2, 1);
  EXPECT_FALSE(x.ok);
  EXPECT_EQ(x.attempts.size(), 2u);
  EXPECT_EQ(server.received().size(), 2u);
}

TEST(LlmClient, ServerErrorThenSuccessWithJitteredBackoff) {
  test::llm_server server{[](const httplib::Request&, httplib::Response& res, int call) {
    if (call == 0) {
      res.status = 502;
      return;
    }
    res.set_content(test::chat_answer("{}"), "application/json");
  }};
  auto x = post_chat(spec_for(server.base_url()), "", "{}", 10, 42);
  ASSERT_TRUE(x.ok) << x.error;
  ASSERT_EQ(x.attempts.size(), 2u);
  EXPECT_EQ(x.attempts[0].http_status, 502);
  EXPECT_EQ(x.attempts[0].retry_after_s, -1);
  // 0.5 s x jitter in [0.5, 1.5)
  EXPECT_GE(x.attempts[0].backoff_s, 0.25);
  EXPECT_LT(x.attempts[0].backoff_s, 0.75);
}

TEST(LlmClient, ClientErrorIsNotRetried) {
  test::llm_server server{[](const httplib::Request&, httplib::Response& res, int) {
    res.status = 400;
    res.set_content(R"({"error":"bad request"})", "application/json");
  }};
  auto x = post_chat(spec_for(server.base_url()), "", "{}", 10, 1);
  EXPECT_FALSE(x.ok);
  EXPECT_EQ(x.attempts.size(), 1u);
  EXPECT_EQ(x.error, "HTTP 400");
  EXPECT_EQ(x.body, R"({"error":"bad request"})");
}

TEST(LlmClient, SlowAnswerPastTheTimeout) {
  test::llm_server server{[](const httplib::Request&, httplib::Response& res, int) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    res.set_content(test::chat_answer("{}"), "application/json");
  }};
  auto s = spec_for(server.base_url());
  s.timeout_s = 0.3;
  s.retries = 0;
  auto start = std::chrono::steady_clock::now();
  auto x = post_chat(s, "", "{}", 10, 1);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(x.ok);
  EXPECT_EQ(x.http_status, 0);
  EXPECT_NE(x.error.find("Timeout"), std::string::npos) << x.error;
  EXPECT_LT(took, 1.4);
}

TEST(LlmClient, FiftyMegabyteAnswerIsAbortedAtTheCap) {
  const std::size_t big = 50u << 20;
  test::llm_server server{[big](const httplib::Request&, httplib::Response& res, int) {
    res.set_chunked_content_provider(
        "application/json",
        [big, sent = std::size_t{0}](std::size_t, httplib::DataSink& sink) mutable {
          std::string chunk(1u << 16, 'x');
          if (sent >= big) {
            sink.done();
            return true;
          }
          sent += chunk.size();
          return sink.write(chunk.data(), chunk.size());
        });
  }};
  auto s = spec_for(server.base_url());
  s.max_response_bytes = 1u << 20;
  auto x = post_chat(s, "", "{}", 10, 1);
  EXPECT_FALSE(x.ok);
  EXPECT_TRUE(x.too_large);
  EXPECT_EQ(x.body.size(), std::size_t{1} << 20);
  EXPECT_EQ(x.attempts.size(), 1u); // never retried
  EXPECT_NE(x.error.find("max_response_bytes"), std::string::npos) << x.error;
}

TEST(LlmClient, FiftyMegabyteAnswerWithContentLengthIsRefusedUpFront) {
  const std::string body(50u << 20, 'y');
  test::llm_server server{[&body](const httplib::Request&, httplib::Response& res, int) {
    res.set_content(body, "application/json");
  }};
  auto s = spec_for(server.base_url());
  s.max_response_bytes = 1u << 20;
  auto x = post_chat(s, "", "{}", 10, 1);
  EXPECT_FALSE(x.ok);
  EXPECT_TRUE(x.too_large);
  EXPECT_LE(x.body.size(), std::size_t{1} << 20);
  EXPECT_EQ(x.attempts.size(), 1u);
}

TEST(LlmClient, ServerDownIsRetriedThenReported) {
  auto s = spec_for("http://127.0.0.1:" + std::to_string(test::closed_port()) + "/v1");
  s.retries = 1;
  auto x = post_chat(s, "", "{}", 10, 1);
  EXPECT_FALSE(x.ok);
  EXPECT_EQ(x.http_status, 0);
  EXPECT_EQ(x.attempts.size(), 2u);
  EXPECT_NE(x.error.find("connect"), std::string::npos) << x.error;
}

TEST(LlmClient, OnlyHttpAndHttps) {
  auto s = spec_for("file:///etc");
  auto x = post_chat(s, "", "{}", 10, 1);
  EXPECT_FALSE(x.ok);
  EXPECT_EQ(x.attempts.size(), 1u);
}

} // namespace
} // namespace infrarsi::adapters
