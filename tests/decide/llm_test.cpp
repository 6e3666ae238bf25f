// decide/llm.cpp (pure): the diff checks, the strict answer parsing, what to do next (resume
// re-sends the logged request; bounded re-asks; budgets), and the [llm] task-file table.

#include "decide/llm.hpp"

#include <fstream>

#include <gtest/gtest.h>

#include "adapters/llm_client.hpp"
#include "adapters/task_file.hpp"
#include "llm_server.hpp"
#include "test_util.hpp"

namespace infrarsi::decide {
namespace {

using nlohmann::json;

tuning::task_spec task() {
  tuning::task_spec t;
  t.name = "t";
  tuning::knob_spec k;
  k.name = "micro_batch";
  k.type = tuning::knob_type::integer;
  k.values = {std::int64_t{1}, std::int64_t{2}, std::int64_t{4}};
  k.default_value = std::int64_t{1};
  t.knobs.push_back(k);
  t.scope.editable = {"*.py", "conf/*.conf"};
  t.scope.frozen = {"data.py"};
  t.llm.enabled = true;
  t.llm.model = "m";
  t.llm.base_url = "http://127.0.0.1:1/v1";
  return t;
}

std::string check(const std::string& diff, std::uint64_t cap = 1u << 16) {
  std::vector<std::string> paths;
  return check_llm_diff(task(), diff, cap, paths);
}

TEST(LlmDiff, AcceptsAnEditOfAnEditableFile) {
  std::vector<std::string> paths;
  auto why = check_llm_diff(task(),
                            "diff --git a/train.py b/train.py\nindex 1..2 100644\n--- a/train.py\n"
                            "+++ b/train.py\n@@ -1 +1 @@\n-a\n+b\n",
                            1u << 16, paths);
  EXPECT_EQ(why, "");
  EXPECT_EQ(paths, std::vector<std::string>{"train.py"});
}

TEST(LlmDiff, RefusesEveryUntrustedShape) {
  const std::string hunk = "@@ -1 +1 @@\n-a\n+b\n";
  EXPECT_NE(check("--- a/data.py\n+++ b/data.py\n" + hunk).find("frozen"), std::string::npos);
  EXPECT_NE(check("--- a/../x.py\n+++ b/../x.py\n" + hunk).find("'..'"), std::string::npos);
  EXPECT_NE(check("--- a/conf/../x.py\n+++ b/conf/../x.py\n" + hunk).find("'..'"),
            std::string::npos);
  EXPECT_NE(check("--- /etc/x.py\n+++ /etc/x.py\n" + hunk).find("absolute"), std::string::npos);
  EXPECT_NE(check("--- a/README.md\n+++ b/README.md\n" + hunk).find("not editable"),
            std::string::npos);
  EXPECT_NE(check("diff --git a/t.py b/t.py\nold mode 100644\nnew mode 100755\n").find("old mode"),
            std::string::npos);
  EXPECT_NE(
      check("diff --git a/t.py b/t.py\nnew file mode 100644\n--- /dev/null\n+++ b/t.py\n" + hunk)
          .find("new file mode"),
      std::string::npos);
  EXPECT_NE(check("--- /dev/null\n+++ b/t.py\n" + hunk).find("/dev/null"), std::string::npos);
  EXPECT_NE(check("diff --git a/t.py b/t.py\nindex 1..2 120000\n--- a/t.py\n+++ b/t.py\n" + hunk)
                .find("symbolic link"),
            std::string::npos);
  EXPECT_NE(check("diff --git a/t.py b/t.py\nGIT binary patch\nliteral 1\n").find("binary"),
            std::string::npos);
  EXPECT_NE(check("Binary files a/t.py and b/t.py differ\n").find("Binary"), std::string::npos);
  std::string nul = "--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-";
  nul += '\0';
  nul += "\n";
  EXPECT_NE(check(nul).find("NUL"), std::string::npos);
  EXPECT_NE(check("--- a/t.py\n+++ b/u.py\n" + hunk).find("does not match"), std::string::npos);
  EXPECT_NE(check("--- a/t.py\n+++ b/t.py\n").find("no hunk"), std::string::npos);
  EXPECT_NE(check("just text\n").find("no file"), std::string::npos);
  EXPECT_NE(check("--- a/t.py\n+++ b/t.py\n" + hunk, 10).find("more than llm.max_patch_bytes"),
            std::string::npos);
}

json response(const std::string& content) {
  adapters::llm_exchange x;
  x.ok = true;
  x.http_status = 200;
  x.body = test::chat_answer(content, 7, 3);
  return adapters::to_json(x);
}

TEST(LlmParse, StrictSchemaMalformedAndFencedAnswers) {
  store::run_state run;
  auto t = task();
  auto bad = llm_parsed_doc(t, run, llm_priors, 0, response("{\"settings\": []}"));
  EXPECT_FALSE(bad["valid"].get<bool>());
  EXPECT_EQ(bad["error"], "the content does not fit the schema: answer.patches: missing");
  auto extra = llm_parsed_doc(t, run, llm_priors, 0,
                              response(R"({"settings": [], "patches": [], "note": 1})"));
  EXPECT_EQ(extra["error"], "the content does not fit the schema: answer.note: unknown key");
  auto type = llm_parsed_doc(
      t, run, llm_priors, 0,
      response(R"({"settings": [{"knob": "micro_batch", "value": 2, "speedup": "fast",
                 "memory_bytes": 0, "confidence": 1}], "patches": []})"));
  EXPECT_EQ(type["error"],
            "the content does not fit the schema: answer.settings[0].speedup: expected "
            "\"number\", got string");
  auto fenced = llm_parsed_doc(
      t, run, llm_priors, 1,
      response("```json\n{\"settings\": [{\"knob\": \"micro_batch\", \"value\": 4, \"speedup\": "
               "1.5, \"memory_bytes\": 1e9, \"confidence\": 1}, {\"knob\": \"micro_batch\", "
               "\"value\": 3, \"speedup\": 1.2, \"memory_bytes\": 0, \"confidence\": 1}], "
               "\"patches\": [{\"patch\": \"nope\", \"speedup\": 1, \"memory_bytes\": 0, "
               "\"confidence\": 2}]}\n```"));
  ASSERT_TRUE(fenced["valid"].get<bool>()) << fenced.dump();
  EXPECT_EQ(fenced["tokens"]["prompt"], 7);
  auto priors = store::priors_from_json(fenced["priors"]);
  ASSERT_EQ(priors.settings.size(), 1u);
  EXPECT_EQ(priors.settings[0].value, tuning::knob_value{std::int64_t{4}});
  EXPECT_DOUBLE_EQ(priors.settings[0].memory_bytes, 1e9);
  ASSERT_EQ(fenced["rejected"].size(), 2u);
  EXPECT_NE(fenced["rejected"][0]["why"].get<std::string>().find("outside the domain"),
            std::string::npos);
  EXPECT_EQ(fenced["rejected"][1]["why"], "unknown patch");
  adapters::llm_exchange failed;
  failed.error = "HTTP 429 (after 4 attempts)";
  auto f = llm_parsed_doc(t, run, llm_priors, 0, adapters::to_json(failed));
  EXPECT_FALSE(f["valid"].get<bool>());
  EXPECT_EQ(f["error"], "HTTP 429 (after 4 attempts)");
}

TEST(LlmNext, ResumeResendsTheLoggedRequestAndReAsksAreBounded) {
  auto t = task();
  t.llm.patches = false;
  t.llm.answer_retries = 1;
  store::run_state run;
  auto s = llm_next(t, run, {});
  ASSERT_EQ(s.k, llm_step::kind::request);
  EXPECT_EQ(s.purpose, llm_priors);
  EXPECT_EQ(s.body["model"], "m");
  // A crash after LlmRequested: the same body is sent again.
  json req = {{"event", "request"}, {"purpose", "priors"}, {"attempt", 0}, {"body", s.body}};
  run.llm.push_back(req);
  auto resend = llm_next(t, run, {});
  ASSERT_EQ(resend.k, llm_step::kind::resend);
  EXPECT_EQ(resend.body.dump(), s.body.dump());
  auto resp = response("not json");
  resp["event"] = "response";
  resp["purpose"] = "priors";
  resp["attempt"] = 0;
  run.llm.push_back(resp);
  auto parse = llm_next(t, run, {});
  ASSERT_EQ(parse.k, llm_step::kind::parse);
  auto parsed = llm_parsed_doc(t, run, llm_priors, 0, parse.response);
  parsed["event"] = "parsed";
  run.llm.push_back(parsed);
  auto again = llm_next(t, run, {});
  ASSERT_EQ(again.k, llm_step::kind::request);
  EXPECT_EQ(again.attempt, 1u);
  run.llm.push_back(
      {{"event", "request"}, {"purpose", "priors"}, {"attempt", 1}, {"body", again.body}});
  run.llm.push_back(resp);
  run.llm.push_back(parsed);
  auto done = llm_next(t, run, {});
  ASSERT_EQ(done.k, llm_step::kind::finish);
  EXPECT_FALSE(done.priors.has_value());
  EXPECT_NE(done.detail.find("no valid answer in 2 asks"), std::string::npos) << done.detail;
  EXPECT_EQ(llm_usage_of(run).prompt_tokens, 14u);
}

TEST(LlmNext, NoRequestOnceTheCallsOrTokensAreSpent) {
  auto t = task();
  t.llm.patches = false;
  t.llm.max_tokens_per_run = 10; // one answer uses 7 + 3
  t.llm.answer_retries = 3;
  store::run_state run;
  run.llm.push_back(
      {{"event", "request"}, {"purpose", "priors"}, {"attempt", 0}, {"body", json::object()}});
  auto resp = response("not json");
  resp["event"] = "response";
  resp["purpose"] = "priors";
  run.llm.push_back(resp);
  auto parsed = llm_parsed_doc(t, run, llm_priors, 0, resp);
  parsed["event"] = "parsed";
  run.llm.push_back(parsed);
  auto s = llm_next(t, run, {});
  ASSERT_EQ(s.k, llm_step::kind::finish);
  EXPECT_NE(s.detail.find("llm.max_tokens_per_run (10) spent"), std::string::npos) << s.detail;
}

TEST(LlmTaskFile, StrictKeysTypesAndRanges) {
  test::temp_dir dir;
  auto load = [&](const std::string& llm) {
    std::ofstream{dir.sub("t.toml")} << "name = \"t\"\n[workload]\nargv = [\"true\"]\n"
                                        "[contract]\nsteps = 1\n[[knobs]]\nname = \"k\"\n"
                                        "type = \"int\"\nvalues = [1]\ndefault = 1\n[llm]\n"
                                     << llm;
    return adapters::load_task_file(dir.sub("t.toml"));
  };
  auto ok = load("base_url = \"http://127.0.0.1:8000/v1/\"\nmodel = \"qwen\"\ntemperature = 0.5\n"
                 "max_response_bytes = \"2MiB\"\napi_key_env = \"OPENAI_API_KEY\"\n");
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_TRUE(ok->llm.enabled);
  EXPECT_EQ(ok->llm.base_url, "http://127.0.0.1:8000/v1");
  EXPECT_EQ(ok->llm.max_response_bytes, 2u << 20);
  EXPECT_EQ(ok->llm.api_key_env, "OPENAI_API_KEY");
  auto err = [&](const std::string& llm) {
    auto t = load(llm);
    return t ? std::string{"loaded"} : describe(t.error());
  };
  const std::string base = "base_url = \"http://x/v1\"\nmodel = \"m\"\n";
  EXPECT_NE(err(base + "temprature = 1\n").find("llm.temprature: unknown key"), std::string::npos);
  EXPECT_NE(err(base + "temperature = 3.0\n").find("llm.temperature: expected a number in [0"),
            std::string::npos);
  EXPECT_NE(err(base + "timeout_s = 0\n").find("llm.timeout_s: expected a number in (0"),
            std::string::npos);
  EXPECT_NE(err(base + "max_calls = \"5\"\n")
                .find("llm.max_calls: expected an integer in [1, "
                      "1000], got string \"5\""),
            std::string::npos);
  EXPECT_NE(err(base + "retries = 11\n").find("llm.retries"), std::string::npos);
  EXPECT_NE(err(base + "api_key_env = \"sk-abc 123\"\n").find("llm.api_key_env: expected the NAME"),
            std::string::npos);
  EXPECT_NE(err("base_url = \"ftp://x\"\nmodel = \"m\"\n").find("llm.base_url: expected an http"),
            std::string::npos);
  EXPECT_NE(err("base_url = \"http://x\"\n").find("llm.model: missing"), std::string::npos);
  EXPECT_NE(err(base + "max_response_bytes = 10\n").find("llm.max_response_bytes"),
            std::string::npos);
  EXPECT_NE(err(base).find("loaded"), std::string::npos);
  EXPECT_NE(
      err("base_url = \"https://u:sk-1@x/v1\"\nmodel = \"m\"\n").find("without user:password@"),
      std::string::npos);
  EXPECT_NE(err("base_url = \"https://x/v1?key=sk-1\"\nmodel = \"m\"\n").find("or a query"),
            std::string::npos);
  // Errors name the file and the line.
  EXPECT_NE(err(base + "retries = -1\n").find("t.toml:"), std::string::npos);
}

} // namespace
} // namespace infrarsi::decide
