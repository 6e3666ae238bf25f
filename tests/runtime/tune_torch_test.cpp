// `infrarsi tune` end to end on the real PyTorch workload's smoke task (a copy of the project's
// config/ and workloads/torch_gpt outside any git repository): the report holds the baseline and
// verified trials, the planted patches never pass, and the log replays into the same state.

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "decide/report.hpp"
#include "adapters/task_file.hpp"
#include "runtime/tune.hpp"
#include "store/memory_event_log.hpp"
#include "store/rocksdb_event_log.hpp"
#include "test_util.hpp"

#include "adapters/node_bridge.hpp"
#include "adapters/task_file.hpp"
#include "decide/report.hpp"

namespace infrarsi::runtime {

using adapters::load_task_file;
using adapters::node_client;
using adapters::node_server;
using decide::make_report;
using decide::render_markdown;
namespace {

namespace fs = std::filesystem;

TEST(TuneTorchSmoke, ReportHasTheBaselineAndVerifiedTrialsAndCheatsNeverPass) {
  test::temp_dir dir;
  const std::string src = INFRARSI_SOURCE_DIR;
  fs::create_directories(dir.sub("config"));
  fs::create_directories(dir.sub("workloads"));
  fs::copy(src + "/config/tasks", dir.sub("config/tasks"), fs::copy_options::recursive);
  fs::copy(src + "/config/knowledge", dir.sub("config/knowledge"), fs::copy_options::recursive);
  fs::copy(src + "/workloads/torch_gpt", dir.sub("workloads/torch_gpt"),
           fs::copy_options::recursive);
  tune_options o;
  o.task_path = dir.sub("config/tasks/torch_gpt_smoke.toml");
  o.store_dir = dir.sub("store");
  o.trials = 6;
  std::ostringstream out;
  std::ostringstream err;
  ASSERT_EQ(run_tune(o, out, err), 0) << err.str();

  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  auto log = store::rocksdb_event_log::open(dir.sub("store/events"), ro);
  ASSERT_TRUE(log);
  auto run_id = (*log)->list_runs()->front().run_id;
  std::ifstream in{dir.sub("store/runs/" + run_id + "/report.json")};
  ASSERT_TRUE(in.good()) << err.str();
  auto report = nlohmann::json::parse(in);
  EXPECT_GT(report["baseline"]["step_time_s"].get<double>(), 0.0);
  EXPECT_EQ(report["baseline"]["noise"]["runs"], 2);
  EXPECT_FALSE(report["baseline"]["phases_s"].empty()); // forward/backward/optimizer reported
  std::size_t verified = 0;
  for (const auto& t : report["trials"]) {
    if (t["outcome"] == "ok" && t["violations"].empty() && t["purpose"] == "explore")
      ++verified;
    // A planted patch never passes the contract (or never runs, for the frozen-file one).
    for (const auto& p : t["config"]["patches"]) {
      if (p.get<std::string>().rfind("cheat_", 0) == 0) {
        EXPECT_NE(t["outcome"], "ok") << t.dump();
      }
    }
  }
  EXPECT_GE(verified, 1u) << err.str();
  if (report["promoted"].is_object()) {
    for (const auto& p : report["promoted"]["config"]["patches"]) {
      EXPECT_NE(p.get<std::string>().rfind("cheat_", 0), 0u);
    }
  }

  // Replay: the same state from a copy of the events in another log implementation.
  auto task = load_task_file(o.task_path);
  ASSERT_TRUE(task);
  store::memory_event_log copy;
  ASSERT_FALSE((*log)->for_each(0, [&](const store::recorded_event& ev) {
    EXPECT_TRUE(copy.append(ev.run_id, ev.sequence, {store::new_event{ev.kind, ev.payload}}));
    return true;
  }));
  auto a = store::load_run(**log, run_id);
  auto b = store::load_run(copy, run_id);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(make_report(*task, *a).dump(), make_report(*task, *b).dump());
}

} // namespace
} // namespace infrarsi::runtime
