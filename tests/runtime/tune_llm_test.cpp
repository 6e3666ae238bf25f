// `infrarsi tune` with an [llm] table against a real OpenAI-compatible server on 127.0.0.1 with
// scripted answers (tests/llm_server.hpp), on tests/data/tasks/fake_tune.toml (real processes).
// Each scenario: the run (or its init) completes, the reason is in the log (LlmResponded,
// LlmAnswerParsed) and the progress output, no proposed diff escapes its checks; replay of the
// log with the server stopped reproduces every decision and makes no connection.

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "adapters/node_bridge.hpp"
#include "adapters/task_file.hpp"
#include "decide/llm.hpp"
#include "llm_server.hpp"
#include "messages/codec.hpp"
#include "runtime/daemon.hpp"
#include "runtime/replay.hpp"
#include "runtime/tune.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"

namespace infrarsi::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* good_diff =
    "--- a/fake_train.py\n+++ b/fake_train.py\n@@ -1,3 +1,4 @@\n #!/usr/bin/env python3\n"
    "+# tuned by the scripted LLM\n \"\"\"A stand-in training job for launcher tests (no torch): "
    "speaks the INFRARSI_METRICS protocol.\n \n";
const char* stale_diff =
    "--- a/fake_train.py\n+++ b/fake_train.py\n@@ -1,2 +1,3 @@\n #!/usr/bin/env python2\n"
    "+# never applies\n import nothing\n";

std::string patches_answer() {
  json p = {
      {"patches",
       json::array(
           {{{"name", "add_comment"}, {"rationale", "harmless"}, {"diff", good_diff}},
            {{"name", "touch_frozen"},
             {"rationale", "edits the frozen file"},
             {"diff", "--- a/regex_train.py\n+++ b/regex_train.py\n@@ -1 +1 @@\n-a\n+b\n"}},
            {{"name", "escape"},
             {"rationale", "climbs out"},
             {"diff", "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"}},
            {{"name", "stale"}, {"rationale", "wrong context"}, {"diff", stale_diff}}})}};
  return p.dump();
}

std::string priors_answer() {
  json p = {{"settings", json::array({{{"knob", "step_time"},
                                       {"value", 0.03},
                                       {"speedup", 2.5},
                                       {"memory_bytes", 0},
                                       {"confidence", 1.0}},
                                      {{"knob", "step_time"},
                                       {"value", "0.05"},
                                       {"speedup", 1.6},
                                       {"memory_bytes", 0},
                                       {"confidence", 0.5}},
                                      {{"knob", "alloc_mb"},
                                       {"value", 300},
                                       {"speedup", 1.0},
                                       {"memory_bytes", 3e8},
                                       {"confidence", 0.9}},
                                      {{"knob", "no_such_knob"},
                                       {"value", 1},
                                       {"speedup", 9.0},
                                       {"memory_bytes", 0},
                                       {"confidence", 1.0}}})},
            {"patches", json::array({{{"patch", "add_comment"},
                                      {"speedup", 1.01},
                                      {"memory_bytes", 0},
                                      {"confidence", 0.2}}})}};
  return p.dump();
}

/// The question of a request: "patches" or "priors" (its response_format's schema name).
std::string question(const httplib::Request& req) {
  auto j = json::parse(req.body);
  auto name = j["response_format"]["json_schema"]["name"].get<std::string>();
  return name.substr(std::string{"infrarsi_"}.size());
}

struct tune_run {
  int status = -1;
  std::string err;
  std::string run_id;
  std::string store;
  std::string task;
  std::vector<std::pair<wire::EventKind, json>> events;
  store::run_state state;
};

class TuneLlm : public ::testing::Test {
protected:
  void SetUp() override {
    fs::copy(std::string{INFRARSI_TEST_DATA_DIR} + "/workloads", dir_.sub("workloads"),
             fs::copy_options::recursive);
    fs::create_directories(dir_.sub("tasks"));
    fs::create_directories(dir_.sub("knowledge"));
  }

  /// Writes tasks/fake_tune.toml with an [llm] table for `base_url` (plus `extra` keys).
  std::string write_task(const std::string& base_url, const std::string& extra,
                         double timeout_s = 5) {
    auto path = dir_.sub("tasks/fake_tune.toml");
    std::ifstream in{std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake_tune.toml"};
    std::stringstream text;
    text << in.rdbuf();
    text << "\n[llm]\nbase_url = \"" << base_url << "\"\nmodel = \"scripted\"\n"
         << "timeout_s = " << timeout_s
         << "\nconnect_timeout_s = 1\nretries = 1\nanswer_retries = 1\n"
         << extra;
    std::ofstream{path} << text.str();
    return path;
  }

  tune_run tune(const std::string& base_url, const std::string& until,
                const std::string& extra = "", const std::string& store = "",
                const std::string& resume = "") {
    tune_run r;
    r.task = resume.empty() ? write_task(base_url, extra) : dir_.sub("tasks/fake_tune.toml");
    r.store = store.empty() ? dir_.sub("store-" + until + std::to_string(counter_++)) : store;
    tune_options o;
    o.task_path = r.task;
    o.store_dir = r.store;
    o.until = until;
    o.run_id = resume;
    o.knowledge_dir = dir_.sub("knowledge");
    std::ostringstream out;
    std::ostringstream err;
    r.status = run_tune(o, out, err);
    r.err = err.str();
    store::rocksdb_event_log_options ro;
    ro.read_only = true;
    auto log = store::rocksdb_event_log::open(r.store + "/events", ro);
    EXPECT_TRUE(log);
    if (!log)
      return r;
    auto runs = (*log)->list_runs();
    EXPECT_TRUE(runs && runs->size() == 1);
    if (!runs || runs->empty())
      return r;
    r.run_id = runs->front().run_id;
    store::run_projection fold{r.run_id};
    EXPECT_FALSE((*log)->for_each_in_stream(r.run_id, 0, [&](const store::recorded_event& ev) {
      fold.apply(ev);
      auto doc = messages::document_msg::decode(ev.payload);
      json j;
      if (doc && (*doc)->json() != nullptr)
        j = json::parse((*doc)->json()->str(), nullptr, false);
      r.events.emplace_back(static_cast<wire::EventKind>(ev.kind), j);
      return true;
    }));
    r.state = fold.state();
    return r;
  }

  static std::vector<json> of_kind(const tune_run& r, wire::EventKind k) {
    std::vector<json> out;
    for (const auto& [kind, j] : r.events)
      if (kind == k)
        out.push_back(j);
    return out;
  }

  static replay_result replay(const tune_run& r) {
    store::rocksdb_event_log_options ro;
    ro.read_only = true;
    auto log = store::rocksdb_event_log::open(r.store + "/events", ro);
    EXPECT_TRUE(log);
    auto task = adapters::load_task_file(r.task);
    EXPECT_TRUE(task);
    auto res = replay_run(**log, r.run_id, *task);
    EXPECT_TRUE(res);
    return *res;
  }

  test::temp_dir dir_;
  int counter_ = 0;
};

TEST_F(TuneLlm, GoodAnswersBecomePriorsAndCheckedPatchesThenTheRunCompletesAndReplays) {
  test::llm_server server{[](const httplib::Request& req, httplib::Response& res, int) {
    auto q = question(req);
    res.set_content(
        test::chat_answer(q == "patches" ? patches_answer() : priors_answer(), 1000, 200),
        "application/json");
  }};
  auto r = tune(server.base_url(), "report");
  ASSERT_EQ(r.status, 0) << r.err;
  // Asked twice: patches, then priors; no key was sent.
  auto got = server.received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].authorization, "");
  auto first = json::parse(got[0].body);
  EXPECT_EQ(first["model"], "scripted");
  // The patch prompt quotes the editable file, not the frozen one.
  auto prompt = first["messages"][1]["content"].get<std::string>();
  EXPECT_NE(prompt.find("INFRARSI_METRICS protocol"), std::string::npos);
  EXPECT_EQ(prompt.find("regex_train.py\": \""), std::string::npos);
  // Every exchange logged: request before response before parse.
  auto requests = of_kind(r, wire::EventKind::LlmRequested);
  auto responses = of_kind(r, wire::EventKind::LlmResponded);
  auto parsed = of_kind(r, wire::EventKind::LlmAnswerParsed);
  ASSERT_EQ(requests.size(), 2u);
  ASSERT_EQ(responses.size(), 2u);
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_EQ(requests[0]["body"].dump(), first.dump()); // the logged request is what was sent
  EXPECT_EQ(parsed[0]["purpose"], "patches");
  ASSERT_TRUE(parsed[0]["valid"].get<bool>());
  // Patches: the frozen one and the escaping one refused by the textual checks, the stale one
  // by git apply --check on the locked tree, the good one kept.
  ASSERT_EQ(parsed[0]["patches"].size(), 2u);
  EXPECT_EQ(parsed[0]["patches"][0]["name"], "add_comment");
  EXPECT_EQ(parsed[0]["patches"][0]["apply_error"], "");
  EXPECT_EQ(parsed[0]["patches"][1]["name"], "stale");
  EXPECT_NE(parsed[0]["patches"][1]["apply_error"].get<std::string>().find("does not apply"),
            std::string::npos);
  ASSERT_EQ(parsed[0]["rejected"].size(), 2u);
  EXPECT_EQ(parsed[0]["rejected"][0]["name"], "touch_frozen");
  EXPECT_NE(parsed[0]["rejected"][0]["why"].get<std::string>().find("not editable"),
            std::string::npos);
  EXPECT_EQ(parsed[0]["rejected"][1]["name"], "escape");
  EXPECT_NE(parsed[0]["rejected"][1]["why"].get<std::string>().find("'..'"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_.sub("workloads/fake_train.py")));
  // Priors: three settings and the accepted patch; the unknown knob rejected.
  ASSERT_TRUE(parsed[1]["valid"].get<bool>());
  EXPECT_EQ(parsed[1]["rejected"].size(), 1u);
  ASSERT_TRUE(r.state.priors_loaded);
  ASSERT_EQ(r.state.priors.settings.size(), 3u);
  EXPECT_EQ(r.state.priors.settings[0].source, "llm:scripted");
  EXPECT_DOUBLE_EQ(r.state.priors.settings[0].speedup, 2.5);
  EXPECT_NEAR(r.state.priors.settings[1].speedup, std::sqrt(1.6), 1e-12); // confidence 0.5
  ASSERT_EQ(r.state.priors.patches.size(), 1u);
  EXPECT_EQ(r.state.priors.patches[0].patch, "add_comment");
  auto usage = decide::llm_usage_of(r.state);
  EXPECT_EQ(usage.calls, 2u);
  EXPECT_EQ(usage.prompt_tokens, 2000u);
  EXPECT_EQ(usage.completion_tokens, 400u);
  // The run went on to measure and report.
  EXPECT_TRUE(r.state.stage_done("report"));
  EXPECT_GE(r.state.trials.size(), 5u);
  EXPECT_NE(r.err.find("init: llm patch 'stale' rejected: does not apply"), std::string::npos)
      << r.err;
  // The report shows the usage and what became of each proposed patch.
  ASSERT_TRUE(r.state.report.has_value());
  std::ifstream md_in{r.store + "/runs/" + r.run_id + "/report.md"};
  std::string md{std::istreambuf_iterator<char>{md_in}, {}};
  EXPECT_NE(md.find("## LLM proposer"), std::string::npos) << md;
  EXPECT_NE(md.find("2 requests, 2 HTTP calls, 2000 prompt + 400 completion tokens, 0 invalid "
                    "answers. Priors used: llm:scripted."),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("- patch `escape`: rejected: line 1: path '../../etc/passwd'"),
            std::string::npos)
      << md;

  // Replay with the server stopped: every decision reproduced, no request reaches anything.
  server.stop();
  auto rep = replay(r);
  EXPECT_FALSE(rep.diverged) << rep.decision << "\nlogged:     " << rep.logged
                             << "\nrecomputed: " << rep.recomputed;
  EXPECT_GE(rep.reproduced, 10u);
  EXPECT_EQ(server.received().size(), 2u);
}

TEST_F(TuneLlm, MalformedAnswersAreLoggedRetriedThenTheKnowledgeBaseIsUsed) {
  std::ofstream{dir_.sub("knowledge/fake_tune.toml")}
      << "[[setting]]\nknob = \"step_time\"\nvalue = 0.05\nspeedup = 1.2\n";
  test::llm_server server{[](const httplib::Request&, httplib::Response& res, int) {
    res.set_content(test::chat_answer("{\"settings\": [ not json"), "application/json");
  }};
  auto r = tune(server.base_url(), "init");
  ASSERT_EQ(r.status, 0) << r.err;
  // Each question asked 1 + answer_retries times.
  EXPECT_EQ(server.received().size(), 4u);
  auto parsed = of_kind(r, wire::EventKind::LlmAnswerParsed);
  ASSERT_EQ(parsed.size(), 4u);
  for (const auto& p : parsed) {
    EXPECT_FALSE(p["valid"].get<bool>());
    EXPECT_EQ(p["error"], "the content is not JSON");
  }
  // The raw text is in the log.
  auto responses = of_kind(r, wire::EventKind::LlmResponded);
  ASSERT_EQ(responses.size(), 4u);
  EXPECT_NE(responses[0]["body"].get<std::string>().find("not json"), std::string::npos);
  ASSERT_TRUE(r.state.priors_loaded);
  ASSERT_EQ(r.state.priors.settings.size(), 1u);
  EXPECT_EQ(r.state.priors.settings[0].source.rfind("knowledge:", 0), 0u);
  EXPECT_NE(r.err.find("answer not valid: the content is not JSON"), std::string::npos) << r.err;
  EXPECT_TRUE(r.state.stage_done("init"));
  auto rep = replay(r);
  EXPECT_FALSE(rep.diverged) << rep.decision << ": " << rep.logged << " vs " << rep.recomputed;
}

TEST_F(TuneLlm, ServerDownTheInitCompletesWithTheReasonLogged) {
  auto url = "http://127.0.0.1:" + std::to_string(test::closed_port()) + "/v1";
  auto r = tune(url, "init", "patches = false\n");
  ASSERT_EQ(r.status, 0) << r.err;
  auto responses = of_kind(r, wire::EventKind::LlmResponded);
  ASSERT_EQ(responses.size(), 2u); // asked, re-asked (answer_retries = 1)
  for (const auto& x : responses) {
    EXPECT_FALSE(x["ok"].get<bool>());
    EXPECT_EQ(x["attempts"].size(), 2u); // 1 + retries
    EXPECT_NE(x["error"].get<std::string>().find("connect"), std::string::npos) << x.dump();
  }
  EXPECT_TRUE(r.state.priors_loaded);
  EXPECT_TRUE(r.state.priors.settings.empty());
  EXPECT_TRUE(r.state.stage_done("init"));
  EXPECT_NE(r.err.find("no valid priors from the LLM"), std::string::npos) << r.err;
}

TEST_F(TuneLlm, TheKeyComesFromTheEnvironmentAndIsNeverLogged) {
  ::setenv("INFRARSI_TEST_LLM_KEY", "sk-never-in-the-log-42", 1);
  test::llm_server server{[](const httplib::Request&, httplib::Response& res, int) {
    res.set_content(test::chat_answer(priors_answer()), "application/json");
  }};
  auto r =
      tune(server.base_url(), "init", "patches = false\napi_key_env = \"INFRARSI_TEST_LLM_KEY\"\n");
  ::unsetenv("INFRARSI_TEST_LLM_KEY");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(server.received().size(), 1u);
  EXPECT_EQ(server.received()[0].authorization, "Bearer sk-never-in-the-log-42");
  for (const auto& [kind, j] : r.events)
    EXPECT_EQ(j.dump().find("sk-never"), std::string::npos);
  EXPECT_EQ(r.err.find("sk-never"), std::string::npos);
  // Nothing under the store holds it either (the event log's files, the run directory).
  for (const auto& e : fs::recursive_directory_iterator{r.store}) {
    if (!e.is_regular_file())
      continue;
    std::ifstream in{e.path(), std::ios::binary};
    std::string bytes{std::istreambuf_iterator<char>{in}, {}};
    EXPECT_EQ(bytes.find("sk-never-in-the-log"), std::string::npos) << e.path();
  }
}

TEST_F(TuneLlm, AnExplicitKnowledgeDirectoryThatIsMissingOrBrokenIsAnError) {
  tune_options o;
  o.task_path = std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake_tune.toml";
  o.store_dir = dir_.sub("store-k");
  o.until = "init";
  o.knowledge_dir = dir_.sub("no-such-dir");
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(run_tune(o, out, err), 2);
  EXPECT_NE(err.str().find("--knowledge '" + dir_.sub("no-such-dir") + "': no such directory"),
            std::string::npos)
      << err.str();
  std::ofstream{dir_.sub("knowledge/fake_tune.toml")} << "[[setting]\nknob = \n";
  o.knowledge_dir = dir_.sub("knowledge");
  std::ostringstream err2;
  EXPECT_EQ(run_tune(o, out, err2), 1);
  EXPECT_NE(err2.str().find(dir_.sub("knowledge/fake_tune.toml") + ":1:"), std::string::npos)
      << err2.str();
  EXPECT_NE(err2.str().find("TOML syntax error"), std::string::npos) << err2.str();
}

TEST_F(TuneLlm, ACrashMidRequestIsResumedByReSendingTheLoggedRequest) {
  std::atomic<bool> release{false};
  test::llm_server server{[&release](const httplib::Request&, httplib::Response& res, int call) {
    // The first request hangs until the test lets it go (its client is killed meanwhile).
    for (int i = 0; call == 0 && !release && i < 400; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    res.set_content(test::chat_answer(priors_answer()), "application/json");
  }};
  auto task = write_task(server.base_url(), "patches = false\n", 30);
  auto store = dir_.sub("store-crash");
  pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* f = std::freopen(dir_.sub("crash.log").c_str(), "a", stderr);
    static_cast<void>(f);
    std::string bin = INFRARSI_CLI_PATH;
    std::vector<std::string> args = {bin,       "tune",        task,
                                     "--store", store,         "--until",
                                     "init",    "--knowledge", dir_.sub("knowledge")};
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  for (int i = 0; server.received().empty() && i < 600; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(server.received().size(), 1u) << "the first request never arrived";
  ::kill(pid, SIGKILL); // mid-request: LlmRequested is logged, no answer is
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  release = true;

  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  std::string run_id;
  {
    auto log = store::rocksdb_event_log::open(store + "/events", ro);
    ASSERT_TRUE(log);
    run_id = (*log)->list_runs()->front().run_id;
  }
  auto r = tune("", "init", "", store, run_id);
  ASSERT_EQ(r.status, 0) << r.err;
  auto got = server.received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].body, got[0].body); // re-sent byte for byte
  auto requests = of_kind(r, wire::EventKind::LlmRequested);
  ASSERT_EQ(requests.size(), 1u); // not asked anew
  EXPECT_EQ(requests[0]["body"].dump(), got[0].body);
  EXPECT_EQ(of_kind(r, wire::EventKind::LlmResponded).size(), 1u);
  EXPECT_NE(r.err.find("re-sending the logged request"), std::string::npos) << r.err;
  ASSERT_EQ(r.state.priors.settings.size(), 3u);
  EXPECT_EQ(r.state.priors.settings[0].source, "llm:scripted");
  auto rep = replay(r);
  EXPECT_FALSE(rep.diverged) << rep.decision << ": " << rep.logged << " vs " << rep.recomputed;
}

/// A node-runner applies a patch that travels as text (an accepted LLM patch) to the trial's
/// copy only, under the same checks as a task patch: an unsafe name, or a diff that edits a
/// frozen file, never runs.
TEST_F(TuneLlm, ANodeAppliesAPatchSentAsTextToTheTrialsCopyUnderTheScopeChecks) {
  auto loaded = adapters::load_task_file(write_task("http://127.0.0.1:1/v1", "patches = false\n"));
  ASSERT_TRUE(loaded) << describe(loaded.error());
  const auto& task = *loaded;
  auto run_one = [&](std::uint64_t id, const std::string& name, const std::string& diff) {
    wire::TrialSpecT spec;
    spec.trial_id = id;
    spec.purpose = "explore";
    spec.patches = {name};
    auto text = std::make_unique<wire::PatchTextT>();
    text->name = name;
    text->diff = diff;
    spec.patch_texts.push_back(std::move(text));
    return adapters::run_node_trial(task, messages::trial_spec_msg::pack(spec),
                                    dir_.sub("trials"), "node-a", 0, nullptr);
  };
  auto ok = run_one(1, "add_comment", good_diff);
  EXPECT_EQ(ok->outcome(), wire::Outcome::Ok) << ok->detail()->str();
  std::ifstream copy_in{dir_.sub("trials/trial-1-0/workdir/fake_train.py")};
  std::string copy{std::istreambuf_iterator<char>{copy_in}, {}};
  EXPECT_NE(copy.find("# tuned by the scripted LLM"), std::string::npos);
  std::ifstream orig_in{dir_.sub("workloads/fake_train.py")};
  std::string orig{std::istreambuf_iterator<char>{orig_in}, {}};
  EXPECT_EQ(orig.find("# tuned by the scripted LLM"), std::string::npos); // never the workload
  auto unsafe = run_one(2, "../evil", good_diff);
  EXPECT_EQ(unsafe->outcome(), wire::Outcome::LaunchError);
  EXPECT_NE(unsafe->detail()->str().find("not a safe name"), std::string::npos)
    << unsafe->detail()->str();
  EXPECT_FALSE(fs::exists(dir_.sub("trials/evil.patch")));
  auto frozen = run_one(3, "touch_frozen",
                        "--- a/regex_train.py\n+++ b/regex_train.py\n@@ -1 +1 @@\n-a\n+b\n");
  EXPECT_EQ(frozen->outcome(), wire::Outcome::ContractViolation);
  EXPECT_NE(frozen->detail()->str().find("regex_train.py"), std::string::npos)
    << frozen->detail()->str();
  EXPECT_TRUE(frozen->steps() == nullptr || frozen->steps()->size() == 0); // never launched
}

TEST_F(TuneLlm, ANamedApiKeyVariableThatIsUnsetFailsAtStartNamingIt) {
  test::llm_server server{[](const httplib::Request&, httplib::Response& res, int) {
    res.set_content(test::chat_answer(priors_answer()), "application/json");
  }};
  ::unsetenv("INFRARSI_TEST_KEY_NEVER_SET");
  tune_options o;
  o.task_path = write_task(server.base_url(),
                           "patches = false\napi_key_env = \"INFRARSI_TEST_KEY_NEVER_SET\"\n");
  o.store_dir = dir_.sub("store-nokey");
  o.until = "init";
  o.knowledge_dir = dir_.sub("knowledge");
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(run_tune(o, out, err), 1);
  // FILE:LINE:COLUMN of the key, the key, the variable; nothing sent, no run created.
  EXPECT_NE(err.str().find(o.task_path + ":"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find(": llm.api_key_env: the environment variable "
                           "INFRARSI_TEST_KEY_NEVER_SET is not set"),
            std::string::npos)
    << err.str();
  EXPECT_TRUE(server.received().empty());
  EXPECT_FALSE(fs::exists(o.store_dir + "/events"));
  // Set but empty: the same refusal.
  ::setenv("INFRARSI_TEST_KEY_NEVER_SET", "", 1);
  std::ostringstream err2;
  EXPECT_EQ(run_tune(o, out, err2), 1);
  EXPECT_NE(err2.str().find("INFRARSI_TEST_KEY_NEVER_SET is empty"), std::string::npos)
    << err2.str();
  ::unsetenv("INFRARSI_TEST_KEY_NEVER_SET");
  EXPECT_TRUE(server.received().empty());
}

/// The daemon config's [llm]: checked like a task's, its key variable checked at start.
TEST(DaemonConfigLlm, IsReadCheckedAndRefusedWhenItsKeyVariableIsUnset) {
  test::temp_dir dir;
  auto write = [&](const std::string& body) {
    auto path = dir.sub("daemon.toml");
    std::ofstream{path} << "[daemon]\nstore = \"store\"\n\n" << body;
    return path;
  };
  auto ok = load_daemon_config(write("[llm]\nbase_url = \"http://127.0.0.1:8000/v1/\"\n"
                                     "model = \"qwen\"\nmax_calls = 4\n"));
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_TRUE(ok->llm.enabled);
  EXPECT_EQ(ok->llm.base_url, "http://127.0.0.1:8000/v1");
  EXPECT_EQ(ok->llm.max_calls, 4u);
  // The table as appended to a task without [llm]: it loads as that task's [llm].
  EXPECT_EQ(ok->llm_toml.rfind("[llm]", 0), 0u) << ok->llm_toml;
  std::ifstream task_in{std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake_tune.toml"};
  std::string task_text{std::istreambuf_iterator<char>{task_in}, {}};
  auto task = adapters::load_task_text(task_text + "\n" + ok->llm_toml,
                                       std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/x.toml");
  ASSERT_TRUE(task) << describe(task.error());
  EXPECT_EQ(task->llm.model, "qwen");
  EXPECT_EQ(task->llm.max_calls, 4u);
  // A bad value names the file, the line and the key.
  auto bad = load_daemon_config(write("[llm]\nbase_url = \"ftp://x\"\nmodel = \"m\"\n"));
  ASSERT_FALSE(bad);
  EXPECT_NE(describe(bad.error()).find(dir.sub("daemon.toml") + ":5:"), std::string::npos)
    << describe(bad.error());
  EXPECT_NE(describe(bad.error()).find("llm.base_url"), std::string::npos);
  // A named key variable that is unset: the daemon does not start.
  ::unsetenv("INFRARSI_TEST_DAEMON_KEY_UNSET");
  auto nokey = load_daemon_config(write("[llm]\nbase_url = \"https://api.example.com/v1\"\n"
                                        "model = \"m\"\napi_key_env = "
                                        "\"INFRARSI_TEST_DAEMON_KEY_UNSET\"\n"));
  ASSERT_FALSE(nokey);
  EXPECT_NE(describe(nokey.error()).find("llm.api_key_env: the environment variable "
                                         "INFRARSI_TEST_DAEMON_KEY_UNSET is not set in the "
                                         "daemon's environment"),
            std::string::npos)
    << describe(nokey.error());
}

} // namespace
} // namespace infrarsi::runtime
