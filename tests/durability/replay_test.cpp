// Issue 8's replay audit: a simulator run replays with every decision reproduced; one hand-edited
// measurement makes the replay report the divergence at the first decision that depends on it;
// the committed golden logs (tests/data/golden/) still replay on this build.

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "messages/codec.hpp"
#include "runtime/replay.hpp"
#include "adapters/task_file.hpp"
#include "runtime/tune.hpp"
#include "store/memory_event_log.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"
#include "sim_task.hpp"
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

/// A simulator task file with an absolute workdir (written into `dir`).
std::string sim_task(const test::temp_dir& dir, const std::string& name) {
  auto text = test::sim_task_text(dir, name);
  auto path = dir.sub(name + ".toml");
  std::ofstream{path} << text;
  return path;
}

struct finished_run {
  std::string store;
  std::string run_id;
  std::string task_path;
};

finished_run tune_sim(const test::temp_dir& dir, std::uint32_t nodes = 1) {
  finished_run f;
  f.task_path = sim_task(dir, "sim-dense-1node");
  f.store = dir.sub("store");
  tune_options o;
  o.task_path = f.task_path;
  o.store_dir = f.store;
  o.trials = 10;
  o.nodes = nodes;
  o.quiet = true;
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(run_tune(o, out, err), 0) << err.str();
  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  auto log = store::rocksdb_event_log::open(f.store + "/events", ro);
  f.run_id = (*log)->list_runs()->front().run_id;
  return f;
}

TEST(Replay, SimulatorRunReproducesEveryDecision) {
  test::temp_dir dir;
  auto run = tune_sim(dir);
  replay_options o;
  o.run_id = run.run_id;
  o.store_dir = run.store;
  std::ostringstream out;
  std::ostringstream err;
  ASSERT_EQ(run_replay(o, out, err), 0) << out.str() << err.str();
  // 10 proposals + 3 baselines + verification pairs, their verdicts, the calibration, the
  // contract, the re-verifications and the promotion.
  auto text = out.str();
  auto n = std::stoul(text.substr(0, text.find(' ')));
  EXPECT_GE(n, 10u + 3 + 10 + 3 + 1 + 1 + 1) << text;
  EXPECT_NE(text.find(" decisions reproduced ("), std::string::npos) << text;
  // The supervisor snapshotted the run at each completed stage: snapshot + tail equals the
  // full fold of the real run.
  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  auto log = store::rocksdb_event_log::open(run.store + "/events", ro);
  ASSERT_TRUE(log);
  auto full = store::load_run(**log, run.run_id);
  auto fast = store::load_run_with_snapshot(**log, run.run_id);
  ASSERT_TRUE(full && fast);
  EXPECT_TRUE(fast->used_snapshot) << fast->reason;
  EXPECT_EQ(store::serialize_run_state(fast->state), store::serialize_run_state(*full));
}

TEST(Replay, AFourSlotRunReplaysWithItsTaskFileDeleted) {
  test::temp_dir dir;
  auto run = tune_sim(dir, 4);
  ASSERT_TRUE(fs::remove(run.task_path));
  replay_options o;
  o.run_id = run.run_id;
  o.store_dir = run.store;
  std::ostringstream out;
  std::ostringstream err;
  ASSERT_EQ(run_replay(o, out, err), 0) << out.str() << err.str();
  auto text = out.str();
  EXPECT_GE(std::stoul(text.substr(0, text.find(' '))), 30u) << text;
  // The batches were logged with what the planner saw, and at least one held several proposals.
  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  auto log = store::rocksdb_event_log::open(run.store + "/events", ro);
  ASSERT_TRUE(log);
  std::size_t batches = 0;
  std::size_t largest = 0;
  ASSERT_FALSE((*log)->for_each_in_stream(run.run_id, 0, [&](const store::recorded_event& ev) {
    if (static_cast<wire::EventKind>(ev.kind) != wire::EventKind::ProposalsMade)
      return true;
    auto doc = messages::document_msg::decode(ev.payload);
    auto j = nlohmann::json::parse((*doc)->json()->str());
    ++batches;
    largest = std::max(largest, j["planner"]["proposals"].size());
    EXPECT_LE(j["at"].get<std::uint64_t>(), ev.sequence);
    return true;
  }));
  EXPECT_GE(batches, 3u);
  EXPECT_GT(largest, 1u);
}

TEST(Replay, AHandEditedMeasurementIsReportedWhereItChangesADecision) {
  test::temp_dir dir;
  auto run = tune_sim(dir);
  auto task = load_task_file(run.task_path);
  ASSERT_TRUE(task) << describe(task.error());
  store::rocksdb_event_log_options ro;
  ro.read_only = true;
  auto log = store::rocksdb_event_log::open(run.store + "/events", ro);
  ASSERT_TRUE(log);
  // Copy the run into an in-memory log, halving the step times of the third ok explore trial.
  store::memory_event_log copy;
  std::uint64_t version = 0;
  std::uint64_t edited_trial = 0;
  std::uint64_t edited_at = 0;
  int explore_seen = 0;
  std::map<std::uint64_t, std::string> purpose;
  auto err = (*log)->for_each_in_stream(run.run_id, 0, [&](const store::recorded_event& ev) {
    auto payload = ev.payload;
    auto kind = static_cast<wire::EventKind>(ev.kind);
    if (kind == wire::EventKind::TrialProposed)
      if (auto spec = messages::trial_spec_msg::decode(ev.payload))
        purpose[(*spec)->trial_id()] = (*spec)->purpose()->str();
    if (kind == wire::EventKind::TrialCompleted && edited_trial == 0) {
      auto r = messages::trial_result_msg::decode(ev.payload);
      // The third explore trial that ended ok (some explore trials run out of memory).
      if (r && purpose[(*r)->trial_id()] == "explore" && (*r)->outcome() == wire::Outcome::Ok
          && ++explore_seen == 3) {
        auto t = r->unpack();
        // The trial's measured step times halved: its median moves whatever the policy chose
        // (one step of eight equal ones would not move it).
        for (auto& step : t->steps)
          step->step_time_s *= 0.5;
        payload = messages::trial_result_msg::pack(*t).bytes();
        edited_trial = t->trial_id;
        edited_at = ev.sequence;
      }
    }
    auto a = copy.append(run.run_id, version, {store::new_event{ev.kind, payload}});
    EXPECT_TRUE(a);
    version = a->version;
    return true;
  });
  ASSERT_FALSE(err);
  ASSERT_NE(edited_trial, 0u) << "no ok explore trial to edit";
  auto r = replay_run(copy, run.run_id, *task);
  ASSERT_TRUE(r) << describe(r.error());
  ASSERT_TRUE(r->diverged);
  // The first decision that reads the edited measurement is that trial's verdict, logged right
  // after its result; everything before it reproduced.
  EXPECT_EQ(r->sequence, edited_at + 1) << r->decision << "\n" << r->logged << "\n" << r->recomputed;
  EXPECT_EQ(r->decision, "verdict (TrialVerified)");
  EXPECT_NE(r->logged, r->recomputed);
  EXPECT_NE(r->logged.find("\"trial_id\":" + std::to_string(edited_trial)), std::string::npos)
    << r->logged;
  // And the unedited copy reproduces.
  auto clean = replay_run(**log, run.run_id, *task);
  ASSERT_TRUE(clean);
  EXPECT_FALSE(clean->diverged);
  EXPECT_GT(clean->events, r->sequence); // the divergence was not at the end of the run
  EXPECT_GT(clean->reproduced, r->reproduced);
}

TEST(Replay, ADamagedLogIsRefusedNamingThePosition) {
  test::temp_dir dir;
  auto run = tune_sim(dir);
  // The run's events are in the write-ahead log: cut its last record short.
  std::string wal;
  for (const auto& e : fs::directory_iterator{run.store + "/events"})
    if (e.path().extension() == ".log" && fs::file_size(e.path()) > 0)
      wal = e.path().string();
  ASSERT_FALSE(wal.empty());
  fs::resize_file(wal, fs::file_size(wal) - 5);
  replay_options o;
  o.run_id = run.run_id;
  o.store_dir = run.store;
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(run_replay(o, out, err), 3) << out.str();
  EXPECT_NE(err.str().find("is damaged: its tail after global position "), std::string::npos)
    << err.str();
  EXPECT_NE(err.str().find("Refusing to replay"), std::string::npos) << err.str();
}

/// Logs committed by earlier builds replay on this one: a format change that breaks old logs
/// fails here. tests/data/golden/README.md says how each was made.
TEST(Replay, GoldenLogsStillReplay) {
  const std::string golden = std::string{INFRARSI_SOURCE_DIR} + "/tests/data/golden";
  auto manifest = nlohmann::json::parse(std::ifstream{golden + "/golden.json"});
  ASSERT_FALSE(manifest["logs"].empty());
  for (const auto& g : manifest["logs"]) {
    SCOPED_TRACE(g.dump());
    test::temp_dir dir;
    // A copy: opening a RocksDB directory may touch its files.
    fs::copy(golden + "/" + g["store"].get<std::string>(), dir.sub("store"),
             fs::copy_options::recursive);
    replay_options o;
    o.run_id = g["run"].get<std::string>();
    o.store_dir = dir.sub("store");
    if (g["task"].is_string()) // logs written before the task text was logged
      o.task_path = std::string{INFRARSI_SOURCE_DIR} + "/" + g["task"].get<std::string>();
    std::ostringstream out;
    std::ostringstream err;
    EXPECT_EQ(run_replay(o, out, err), 0) << out.str() << err.str();
    EXPECT_EQ(out.str().rfind(std::to_string(g["decisions"].get<int>()) + " decisions reproduced", 0),
              0u)
      << out.str();
  }
}

} // namespace
} // namespace infrarsi::runtime
