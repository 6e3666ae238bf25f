// decide/llm.cpp (pure): the diff checks, the strict answer parsing, what to do next (resume
// re-sends the logged request; bounded re-asks; budgets), and the [llm] task-file table.

#include "decide/llm.hpp"

#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>

#include "adapters/llm_client.hpp"
#include "adapters/task_file.hpp"
#include "decide/decisions.hpp"
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

/// A finished, verified search trial taking `step_time_s` (0: an OOM).
tuning::trial_record explore_trial(std::uint64_t id, double step_time_s) {
  tuning::trial_record t;
  t.trial_id = id;
  t.kind = tuning::purpose_kind::explore;
  t.dispatched = true;
  t.finished = true;
  t.verified = true;
  t.outcome = step_time_s > 0 ? tuning::trial_outcome::ok : tuning::trial_outcome::oom;
  t.timed_step_time_s = step_time_s;
  t.config.knobs["micro_batch"] = std::int64_t{1};
  return t;
}

TEST(LlmRounds, DueEveryKTrialsOrOnAStallAndNeverPastTheirLimits) {
  auto t = task();
  t.llm.patches = false;
  store::run_state run;
  run.noise = tuning::noise_estimate{};
  run.noise->mean_step_time_s = 1.0;
  // Off unless configured.
  for (int i = 0; i < 5; ++i)
    run.trials.push_back(explore_trial(i, 1.0 / (1 + i)));
  EXPECT_FALSE(llm_round_due(t, run).ask);
  t.llm.rounds_every = 3;
  auto plan = llm_round_due(t, run);
  ASSERT_TRUE(plan.ask);
  EXPECT_EQ(plan.round, 1u);
  EXPECT_EQ(plan.why, "5 search trials ended since round 0 (llm.rounds_every = 3)");
  // Round 1 asked after 5 trials and not answered yet: in progress (a resume re-sends).
  run.llm.push_back({{"event", "request"}, {"purpose", "priors"}, {"attempt", 0}, {"round", 1},
                     {"explored", 5}, {"body", json::object()}});
  plan = llm_round_due(t, run);
  ASSERT_TRUE(plan.ask);
  EXPECT_EQ(plan.round, 1u);
  EXPECT_EQ(llm_current_round(run), 1u);
  auto resp = response("{\"settings\": [], \"patches\": []}");
  resp["event"] = "response";
  resp["purpose"] = "priors";
  resp["round"] = 1;
  run.llm.push_back(resp);
  auto parsed = llm_parsed_doc(t, run, llm_priors, 0, resp);
  ASSERT_TRUE(parsed["valid"].get<bool>());
  parsed["event"] = "parsed";
  parsed["round"] = 1;
  run.llm.push_back(parsed);
  // Settled: the next round is due 3 ended trials after round 1 began, not before.
  EXPECT_FALSE(llm_round_due(t, run).ask);
  run.trials.push_back(explore_trial(5, 0.5));
  run.trials.push_back(explore_trial(6, 0.5));
  EXPECT_FALSE(llm_round_due(t, run).ask);
  run.trials.push_back(explore_trial(7, 0.5));
  plan = llm_round_due(t, run);
  ASSERT_TRUE(plan.ask);
  EXPECT_EQ(plan.round, 2u);
  // max_rounds caps the rounds.
  t.llm.max_rounds = 1;
  EXPECT_FALSE(llm_round_due(t, run).ask);
  // A stall: the last 3 ended trials found nothing above the best before them (1/5 s = 5x).
  t.llm.max_rounds = 3;
  t.llm.rounds_every = 0;
  t.llm.rounds_on_stall = 3;
  plan = llm_round_due(t, run);
  ASSERT_TRUE(plan.ask);
  EXPECT_NE(plan.why.find("stalled: the last 3 search trials"), std::string::npos) << plan.why;
  // ... unless one of them did better; an OOM (unusable) is no improvement.
  run.trials.back() = explore_trial(7, 0.1);
  EXPECT_FALSE(llm_round_due(t, run).ask);
  run.trials.back() = explore_trial(7, 0.0);
  EXPECT_TRUE(llm_round_due(t, run).ask);
  // Never once the tokens are spent (one answer used 7 + 3).
  t.llm.max_tokens_per_run = 10;
  EXPECT_FALSE(llm_round_due(t, run).ask);
  // The next round's request carries the round and the priors in use.
  auto body = llm_request(t, run, llm_priors, {}, 2);
  auto prompt = body["messages"][1]["content"].get<std::string>();
  EXPECT_NE(prompt.find("This is round 2"), std::string::npos);
  EXPECT_NE(prompt.find("\"priors_now\""), std::string::npos);
  EXPECT_EQ(llm_request(t, run, llm_priors, {}).dump().find("priors_now"), std::string::npos);
}

TEST(LlmPatches, AcceptedOnesJoinTheSearchTaskWithTheirTextsAndConflicts) {
  auto t = task();
  store::run_state run;
  const std::string diff = "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-a\n+b\n";
  json parsed = {{"event", "parsed"},
                 {"purpose", "patches"},
                 {"valid", true},
                 {"patches", json::array({{{"name", "fuse"},
                                           {"rationale", "fewer kernels"},
                                           {"diff", diff},
                                           {"paths", {"train.py"}},
                                           {"apply_error", ""}},
                                          {{"name", "stale"},
                                           {"rationale", "r"},
                                           {"diff", diff},
                                           {"paths", {"train.py"}},
                                           {"apply_error", "does not apply"}}})},
                 {"conflicts", json::array({json::array({"fuse", "other"})})},
                 {"rejected", json::array()}};
  run.llm.push_back(parsed);
  auto search = with_llm_patches(t, run, "/run/llm-patches");
  ASSERT_EQ(search.patches.size(), 1u); // "stale" did not pass git apply --check
  EXPECT_EQ(search.patches[0].name, "fuse");
  EXPECT_EQ(search.patches[0].file, "/run/llm-patches/fuse.patch");
  EXPECT_EQ(search.patches[0].description, "fewer kernels");
  EXPECT_EQ(with_llm_patches(t, run, "").patches[0].file, "");
  auto texts = llm_patch_texts(run, {"fuse", "not-an-llm-patch"});
  ASSERT_EQ(texts.size(), 1u);
  EXPECT_EQ(texts["fuse"], diff);
  EXPECT_TRUE(llm_patch_texts(run, {}).empty());
  auto pairs = llm_patch_conflicts(run);
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0], (std::pair<std::string, std::string>{"fuse", "other"}));
  // The planner's input has the pair; proposals are made over the search task.
  auto in = planner_input_for(search, run);
  EXPECT_EQ(in.task->patches.size(), 1u);
  EXPECT_NE(std::find(in.incompatible_patches.begin(), in.incompatible_patches.end(),
                      std::pair<std::string, std::string>{"fuse", "other"}),
            in.incompatible_patches.end());
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
