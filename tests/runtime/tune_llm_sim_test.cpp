// Issue 15's must-show: a simulator task tuned with LLM-proposed patches (a real
// OpenAI-compatible server on 127.0.0.1, tests/llm_server.hpp, proposes the simulator's patch
// set as diffs) reaches the same promotion as with the task's fixed [[patches]] list. Both runs
// are real `infrarsi tune` runs of config/tasks/sim-dense-1node.toml on a copy of workloads/sim
// outside git (tests/durability/sim_task.hpp); the accepted diffs travel to the node-runner in
// the TrialSpec and are verified like every patch (scope, work, loss, timing).

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "adapters/task_file.hpp"
#include "decide/llm.hpp"
#include "durability/sim_task.hpp"
#include "llm_server.hpp"
#include "messages/codec.hpp"
#include "runtime/replay.hpp"
#include "runtime/tune.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"

namespace infrarsi::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// The simulator's patches in the order of the task's [[patches]] (config/tasks/sim-dense-1node).
const char* const sim_patches[] = {"fused_rmsnorm",     "fused_swiglu",          "fused_rope",
                                   "flash3_attention",  "bf16_optimizer_states", "fast_dataloader"};

std::string read_text(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

struct sim_run {
  int status = -1;
  std::string err;
  std::string store;
  std::string run_id;
  store::run_state state;
};

sim_run tune_sim(const std::string& task, const std::string& store, const std::string& knowledge) {
  sim_run r;
  r.store = store;
  tune_options o;
  o.task_path = task;
  o.store_dir = store;
  o.until = "report";
  o.knowledge_dir = knowledge;
  std::ostringstream out;
  std::ostringstream err;
  r.status = run_tune(o, out, err);
  r.err = err.str();
  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  auto log = store::rocksdb_event_log::open(store + "/events", ro);
  EXPECT_TRUE(log);
  if (!log)
    return r;
  auto runs = (*log)->list_runs();
  EXPECT_TRUE(runs && runs->size() == 1);
  if (!runs || runs->empty())
    return r;
  r.run_id = runs->front().run_id;
  auto state = store::load_run(**log, r.run_id);
  EXPECT_TRUE(state);
  if (state)
    r.state = *state;
  return r;
}

/// "id purpose config outcome" of every explore trial, in order.
std::vector<std::string> explore_trials(const store::run_state& s) {
  std::vector<std::string> out;
  for (const auto& t : s.trials)
    if (t.kind == tuning::purpose_kind::explore)
      out.push_back(std::to_string(t.trial_id) + " " + t.config.key() + " " +
                    tuning::to_string(t.outcome) + (t.usable() ? " usable" : " not-usable"));
  return out;
}

TEST(TuneLlmSim, LlmProposedPatchesReachTheSamePromotionAsTheTaskPatchList) {
  test::temp_dir dir;
  std::string text = test::sim_task_text(dir, "sim-dense-1node");
  // A shorter search than the shipped task's default (20 trials, 2 candidates re-verified).
  text.insert(text.find("\n[[patches]]"), "\n[budget]\ntrials = 8\nverify_top = 1\n");
  const std::string workload = dir.sub("sim-workload");
  fs::create_directories(dir.sub("tasks"));
  fs::create_directories(dir.sub("knowledge")); // empty: neutral priors for both runs
  // The fixed list: the task as shipped (its patch files in the copy).
  const auto fixed_task = dir.sub("tasks/fixed.toml");
  std::ofstream{fixed_task} << text;
  // The LLM's: no [[patches]] at all; the scripted server proposes the same diffs.
  auto cut = text.find("\n[[patches]]");
  ASSERT_NE(cut, std::string::npos);
  test::llm_server server{[&workload](const httplib::Request& req, httplib::Response& res, int) {
    auto body = json::parse(req.body);
    auto name = body["response_format"]["json_schema"]["name"].get<std::string>();
    json answer;
    if (name == "infrarsi_patches") {
      answer["patches"] = json::array();
      for (const char* p : sim_patches)
        answer["patches"].push_back(
          {{"name", p},
           {"rationale", "proposed by the scripted model"},
           {"diff", read_text(workload + "/patches/" + std::string{p} + ".patch")}});
    } else {
      answer = {{"settings", json::array()}, {"patches", json::array()}}; // neutral, as the
    }                                                                     // empty knowledge base
    res.set_content(test::chat_answer(answer.dump()), "application/json");
  }};
  const auto llm_task = dir.sub("tasks/llm.toml");
  std::ofstream{llm_task} << text.substr(0, cut) << "\n\n[llm]\nbase_url = \""
                          << server.base_url() << "\"\nmodel = \"scripted\"\n";

  auto fixed = tune_sim(fixed_task, dir.sub("store-fixed"), dir.sub("knowledge"));
  ASSERT_EQ(fixed.status, 0) << fixed.err;
  auto llm = tune_sim(llm_task, dir.sub("store-llm"), dir.sub("knowledge"));
  ASSERT_EQ(llm.status, 0) << llm.err;
  ASSERT_EQ(server.received().size(), 2u); // patches, then priors

  // Every proposed diff passed the checks and became a candidate.
  auto accepted = decide::llm_accepted_patches(llm.state);
  ASSERT_EQ(accepted.size(), 6u) << llm.err;
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_EQ(accepted[i]["name"], sim_patches[i]);
  EXPECT_TRUE(fs::is_regular_file(llm.store + "/runs/" + llm.run_id +
                                  "/llm-patches/fused_rmsnorm.patch"));

  // The same search: the same explore trials, configurations and outcomes, in the same order.
  auto a = explore_trials(fixed.state);
  auto b = explore_trials(llm.state);
  ASSERT_EQ(a.size(), 8u);
  EXPECT_EQ(a, b);
  // LLM patches were searched, measured and verified: at least one usable trial with a genuine
  // one; a planted cheat that ran is caught by the contract check, like the task's own.
  std::size_t patched_usable = 0;
  std::size_t cheats_ran = 0;
  for (const auto& t : llm.state.trials) {
    if (t.kind != tuning::purpose_kind::explore || t.config.patches.empty())
      continue;
    bool cheat = false;
    for (const auto& p : t.config.patches)
      cheat = cheat || p == "fast_dataloader" || p == "bf16_optimizer_states";
    if (cheat) {
      EXPECT_FALSE(t.usable()) << t.config.key();
      if (t.outcome == tuning::trial_outcome::ok) {
        ++cheats_ran;
        EXPECT_FALSE(t.violations.empty()) << t.config.key();
      }
    } else if (t.usable()) {
      ++patched_usable;
    }
  }
  EXPECT_GE(patched_usable, 1u);
  std::cerr << "[ info ] " << a.size() << " search trials, " << patched_usable
            << " usable with a proposed patch, " << cheats_ran << " with a planted cheat ran\n";

  // The same promotion.
  ASSERT_TRUE(fixed.state.promotion.has_value());
  ASSERT_TRUE(llm.state.promotion.has_value());
  ASSERT_TRUE(fixed.state.promotion->value("promoted", false)) << fixed.state.promotion->dump();
  EXPECT_EQ((*llm.state.promotion)["config"].dump(), (*fixed.state.promotion)["config"].dump());
  EXPECT_DOUBLE_EQ(llm.state.promotion->value("speedup", 0.0),
                   fixed.state.promotion->value("speedup", 1.0));
  EXPECT_EQ(llm.state.promotion->value("change", ""), fixed.state.promotion->value("change", ""));
  std::cerr << "[ info ] promoted " << llm.state.promotion->value("change", "") << ": "
            << llm.state.promotion->value("speedup", 0.0) << "x\n";

  // The report says what became of each proposed patch.
  auto md = read_text(llm.store + "/runs/" + llm.run_id + "/report.md");
  EXPECT_NE(md.find("- patch `fused_rmsnorm`: passed every check; a search candidate in"),
            std::string::npos)
    << md;

  // Replay with the server stopped: every decision reproduced, nothing sent.
  server.stop();
  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  auto log = store::rocksdb_event_log::open(llm.store + "/events", ro);
  ASSERT_TRUE(log);
  auto task = adapters::load_task_file(llm_task);
  ASSERT_TRUE(task);
  auto rep = replay_run(**log, llm.run_id, *task);
  ASSERT_TRUE(rep);
  EXPECT_FALSE(rep->diverged) << rep->decision << "\nlogged:     " << rep->logged
                              << "\nrecomputed: " << rep->recomputed;
  EXPECT_GE(rep->reproduced, a.size());
  EXPECT_EQ(server.received().size(), 2u);
}

} // namespace
} // namespace infrarsi::runtime
