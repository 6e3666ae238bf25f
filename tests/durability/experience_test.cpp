// Issue 16, first slice: the experience bank is a projection of the event log. Real `infrarsi
// tune` runs of the simulator task sim-dense-1node (a copy of workloads/sim outside git, as
// sim_task.hpp makes it) on one store: the finding is an ExperienceRecorded event appended in the
// same batch as its CandidatePromoted; deleting experience/ and `infrarsi experience rebuild` give
// the same bank hash and the same next proposal; a second tune proposes the previous winner as
// its first trial after the baseline, and its report says so.

#include <filesystem>
#include <map>
#include <fstream>
#include <algorithm>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim_task.hpp"
#include "test_util.hpp"
#include "tune_process.hpp"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;

class ExperienceBank : public ::testing::Test {
protected:
  // One promoted run on `store`; the tests copy the store before they change it.
  static void SetUpTestSuite() {
    dir_ = new test::temp_dir;
    std::string text = test::sim_task_text(*dir_, "sim-dense-1node");
    text += "\n[budget]\ntrials = 6\nbaseline_repeats = 3\nverify_top = 1\nverify_repeats = 3\n";
    task_ = dir_->sub("sim-experience.toml");
    std::ofstream{task_} << text;
    first_status_ = tune(store());
    first_run_ = only_run(store());
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string store() { return dir_->sub("store"); }

  /// `infrarsi tune` of the task on `store` (the task's seed); its exit code.
  static int tune(const std::string& store_dir) {
    return test::run_cli({"tune", task_, "--store", store_dir, "--quiet"},
                         store_dir + ".tune-output");
  }

  /// `infrarsi experience ACTION --store DIR`: exit code and stdout+stderr.
  static std::pair<int, std::string> experience(const std::string& action,
                                                const std::string& store_dir) {
    static int n = 0;
    auto out = dir_->sub("experience-" + std::to_string(++n));
    int rc = test::run_cli({"experience", action, "--store", store_dir}, out);
    return {rc, test::file_text(out)};
  }

  /// The runs of a store, sorted by run id (= by start time: ids end in date-time-random).
  static std::vector<std::string> runs_of(const std::string& store_dir) {
    store::rocksdb_event_log_options o;
    o.read_only = true;
    auto log = store::rocksdb_event_log::open(store_dir + "/events", o);
    std::vector<std::string> out;
    if (log)
      if (auto runs = (*log)->list_runs())
        for (const auto& r : *runs)
          out.push_back(r.run_id);
    return out;
  }
  static std::string only_run(const std::string& store_dir) {
    auto runs = runs_of(store_dir);
    return runs.size() == 1 ? runs.front() : std::string{};
  }

  /// The configuration key of the run's first explore TrialProposed ("" when none).
  static std::string first_explore(const test::logged_run& r) {
    for (const auto* e : r.of(wire::EventKind::TrialProposed))
      if (e->purpose == wire::Purpose::Explore)
        return e->config;
    return {};
  }

  /// The run `store_dir` gained beside the first one.
  static std::string second_run(const std::string& store_dir) {
    for (const auto& id : runs_of(store_dir))
      if (id != first_run_)
        return id;
    return {};
  }

  static test::temp_dir* dir_;
  static std::string task_;
  static int first_status_;
  static std::string first_run_;
};

test::temp_dir* ExperienceBank::dir_ = nullptr;
std::string ExperienceBank::task_;
int ExperienceBank::first_status_ = -1;
std::string ExperienceBank::first_run_;

/// The hash line `infrarsi experience rebuild|list` prints ("" when none).
std::string hash_in(const std::string& output) {
  auto at = output.rfind("hash ");
  if (at == std::string::npos)
    return {};
  auto hash = output.substr(at + 5, 64);
  return hash.size() == 64 ? hash : std::string{};
}

TEST_F(ExperienceBank, TheFindingIsLoggedInTheSameBatchAsItsPromotion) {
  ASSERT_EQ(first_status_, 0) << test::file_text(store() + ".tune-output");
  auto r = test::read_logged_run(store(), first_run_);
  ASSERT_TRUE(r);
  auto promoted = r->of(wire::EventKind::CandidatePromoted);
  auto recorded = r->of(wire::EventKind::ExperienceRecorded);
  ASSERT_EQ(promoted.size(), 1u);
  ASSERT_TRUE(promoted[0]->doc.value("promoted", false)) << promoted[0]->doc.dump();
  ASSERT_EQ(recorded.size(), 1u);
  // Next in the stream, with the same append time: one atomic RocksDB batch (an append stamps
  // all its events with one wall-clock reading), so no kill -9 can keep one without the other.
  EXPECT_EQ(recorded[0]->sequence, promoted[0]->sequence + 1);
  EXPECT_EQ(recorded[0]->recorded_at_ns, promoted[0]->recorded_at_ns);
  const auto& rec = recorded[0]->doc;
  EXPECT_EQ(rec["config"], promoted[0]->doc["config"]);
  EXPECT_EQ(rec["speedup"], promoted[0]->doc["speedup"]);
  EXPECT_EQ(rec["ci_low"], promoted[0]->doc["ci_low"]);
  EXPECT_EQ(rec["ci_high"], promoted[0]->doc["ci_high"]);
  EXPECT_EQ(rec.value("run", ""), first_run_);
  EXPECT_EQ(rec.value("promotion_sequence", std::uint64_t{0}), promoted[0]->sequence);
  auto locked = r->of(wire::EventKind::ContractLocked);
  ASSERT_EQ(locked.size(), 1u);
  EXPECT_EQ(rec.value("hardware", "x"), locked[0]->doc.value("hardware_fingerprint", "y"));
  EXPECT_EQ(rec.value("workload", "x"), locked[0]->doc.value("workload_signature", "y"));
  // What the models learnt travels with the finding: each promoted setting's revised effect
  // with its interval, and the memory model's prices and OOM boundary, as the report has them.
  EXPECT_EQ(locked[0]->doc.value("experience_record", 0), 2);
  ASSERT_TRUE(rec.contains("effects")) << rec.dump();
  ASSERT_FALSE(rec["effects"].empty()) << rec.dump();
  auto report = nlohmann::json::parse(
    test::file_text(store() + "/runs/" + first_run_ + "/report.json"), nullptr, false);
  ASSERT_TRUE(report.is_object());
  std::map<std::string, nlohmann::json> in_report;
  for (const auto& e : report["prior_revision"]["effects"])
    in_report[e.value("feature", "")] = e;
  for (const auto& e : rec["effects"]) {
    EXPECT_GT(e.value("trials", 0), 0) << e.dump();
    EXPECT_LE(e.value("posterior_low", 0.0), e.value("posterior_speedup", -1.0)) << e.dump();
    EXPECT_GE(e.value("posterior_high", 0.0), e.value("posterior_speedup", 2.0)) << e.dump();
    EXPECT_EQ(e, in_report[e.value("feature", "")]) << "the report's effect, not a copy of it";
  }
  ASSERT_TRUE(rec.contains("memory")) << rec.dump();
  EXPECT_EQ(rec["memory"].value("fitted", false), report["memory_model"].value("fitted", true));
  if (rec["memory"].value("fitted", false)) {
    EXPECT_EQ(rec["memory"]["prices"], report["memory_model"]["prices"]);
    EXPECT_EQ(rec["memory"]["boundary"], report["memory_model"]["boundary"]);
  }
  // Replay recomputes the record from the promotion before it.
  auto out = dir_->sub("replay-output");
  EXPECT_EQ(test::run_cli({"replay", first_run_, "--store", store()}, out), 0)
      << test::file_text(out);
}

TEST_F(ExperienceBank, ARebuiltBankHasTheSameHashAndGivesTheSameNextProposal) {
  ASSERT_EQ(first_status_, 0);
  auto [list_rc, listed] = experience("list", store());
  ASSERT_EQ(list_rc, 0) << listed;
  EXPECT_NE(listed.find(first_run_), std::string::npos) << listed;
  EXPECT_NE(listed.find("1 records"), std::string::npos) << listed;
  auto before = hash_in(listed);
  ASSERT_FALSE(before.empty()) << listed;

  // Two copies of the store: one keeps its bank, the other loses it and rebuilds it.
  const auto kept = dir_->sub("kept");
  const auto rebuilt = dir_->sub("rebuilt");
  fs::copy(store(), kept, fs::copy_options::recursive);
  fs::copy(store(), rebuilt, fs::copy_options::recursive);
  fs::remove_all(rebuilt + "/experience");
  ASSERT_FALSE(fs::exists(rebuilt + "/experience"));
  auto [rc, out] = experience("rebuild", rebuilt);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("1 records"), std::string::npos) << out;
  EXPECT_EQ(hash_in(out), before) << out;
  auto [hash_rc, hash_out] = experience("hash", rebuilt);
  ASSERT_EQ(hash_rc, 0) << hash_out;
  EXPECT_EQ(hash_out, before + "\n");

  // The next tune on each proposes the same first trial from the same pack.
  ASSERT_EQ(tune(kept), 0) << test::file_text(kept + ".tune-output");
  ASSERT_EQ(tune(rebuilt), 0) << test::file_text(rebuilt + ".tune-output");
  auto a = test::read_logged_run(kept, second_run(kept));
  auto b = test::read_logged_run(rebuilt, second_run(rebuilt));
  ASSERT_TRUE(a && b);
  auto pack_a = a->of(wire::EventKind::ExperienceSeeded);
  auto pack_b = b->of(wire::EventKind::ExperienceSeeded);
  ASSERT_EQ(pack_a.size(), 1u);
  ASSERT_EQ(pack_b.size(), 1u);
  ASSERT_EQ(pack_a[0]->doc["seeds"].size(), 1u) << pack_a[0]->doc.dump();
  EXPECT_EQ(pack_a[0]->doc, pack_b[0]->doc);
  ASSERT_FALSE(first_explore(*a).empty());
  EXPECT_EQ(first_explore(*a), first_explore(*b));

  // A bank deleted and not rebuilt by hand catches up when it is next opened: same records.
  auto [two_rc, two] = experience("hash", kept);
  ASSERT_EQ(two_rc, 0) << two;
  EXPECT_NE(two, before + "\n"); // the second run's finding is in it too
  fs::remove_all(kept + "/experience");
  auto [again_rc, again] = experience("list", kept);
  ASSERT_EQ(again_rc, 0) << again;
  EXPECT_NE(again.find("2 records"), std::string::npos) << again;
  EXPECT_EQ(hash_in(again) + "\n", two);
}

TEST_F(ExperienceBank, ASecondTuneProposesThePreviousWinnerFirst) {
  ASSERT_EQ(first_status_, 0);
  auto first = test::read_logged_run(store(), first_run_);
  ASSERT_TRUE(first);
  auto promoted = first->of(wire::EventKind::CandidatePromoted);
  ASSERT_EQ(promoted.size(), 1u);
  auto winner = store::configuration_from_json(promoted[0]->doc["config"]);
  ASSERT_TRUE(winner);

  const auto second_store = dir_->sub("second");
  fs::copy(store(), second_store, fs::copy_options::recursive);
  ASSERT_EQ(tune(second_store), 0) << test::file_text(second_store + ".tune-output");
  auto id = second_run(second_store);
  auto r = test::read_logged_run(second_store, id);
  ASSERT_TRUE(r);
  // The first trial after the baseline repeats is the previous winner.
  EXPECT_EQ(first_explore(*r), winner->key());
  std::uint64_t seed_trial = 0;
  for (const auto* e : r->of(wire::EventKind::TrialProposed))
    if (e->purpose == wire::Purpose::Explore) {
      seed_trial = e->trial;
      break;
    }
  auto batches = r->of(wire::EventKind::ProposalsMade);
  ASSERT_FALSE(batches.empty());
  const auto& planner = batches.front()->doc["planner"];
  ASSERT_EQ(planner["experience_seeds"].size(), 1u) << planner.dump();
  EXPECT_TRUE(planner["experience_seeds"][0].value("proposed", false)) << planner.dump();
  EXPECT_EQ(planner["proposals"][0].value("reason", ""), "initial design: experience bank seed");

  // The report says what became of the seed.
  std::ifstream in{second_store + "/runs/" + id + "/report.json"};
  auto report = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(report.is_object());
  ASSERT_EQ(report["experience_seeds"].size(), 1u) << report["experience_seeds"].dump();
  EXPECT_EQ(report["experience_seeds"][0].value("trial", std::uint64_t{0}), seed_trial);
  EXPECT_EQ(report["experience_seeds"][0].value("outcome", ""), "ok");
  EXPECT_FALSE(report["experience_seeds"][0].contains("reason"));
  // Where the seed came from: the same simulated GPU (the task declares H100-80GB).
  EXPECT_EQ(report["experience_seeds"][0].value("origin_hardware", ""), "H100-80GB");
  EXPECT_EQ(report["experience_seeds"][0].value("match", ""), "same GPU model");
  EXPECT_EQ(report["experience_seeds"][0]["speedup_there"], promoted[0]->doc["speedup"]);
  ASSERT_TRUE(report["experience"].is_object()) << report.dump();
  EXPECT_EQ(report["experience"].value("mode", ""), "filtered");
  EXPECT_EQ(report["experience"].value("served", 0), 1);
  EXPECT_EQ(report["experience"].value("proposed", 0), 1);
  auto md = test::file_text(second_store + "/runs/" + id + "/report.md");
  EXPECT_NE(md.find("## Experience\n\nServed `filtered`"), std::string::npos) << md;
  EXPECT_NE(md.find("(from H100-80GB, same GPU model, "), std::string::npos) << md;
  EXPECT_NE(md.find("## Experience seeds"), std::string::npos);
  EXPECT_NE(md.find("proposed as trial " + std::to_string(seed_trial)), std::string::npos) << md;
  // What the first run's models learnt became this run's priors, in the pack's batch: the
  // event right after ExperienceSeeded is a PriorsLoaded whose settings come from that run.
  const test::logged_event* after_seeded = nullptr;
  for (std::size_t i = 0; i + 1 < r->events.size(); ++i)
    if (r->events[i].is(wire::EventKind::ExperienceSeeded))
      after_seeded = &r->events[i + 1];
  ASSERT_NE(after_seeded, nullptr);
  ASSERT_TRUE(after_seeded->is(wire::EventKind::PriorsLoaded));
  const auto from = "experience:" + first_run_ + " (H100-80GB, same GPU model)";
  std::size_t adjusted = 0;
  for (const auto& part : {"settings", "patches"})
    for (const auto& p : after_seeded->doc[part])
      adjusted += p.value("source", "") == from ? 1 : 0;
  EXPECT_GT(adjusted, 0u) << after_seeded->doc.dump();
  EXPECT_EQ(report["experience"]["prior_adjustment"].value("run", ""), first_run_)
    << report["experience"].dump();
  EXPECT_NE(md.find("came from run " + first_run_ + " on H100-80GB (same GPU model)"),
            std::string::npos)
    << md;
  // And replay reproduces every decision of the seeded run (the adjusted priors included).
  auto out = dir_->sub("replay-second");
  EXPECT_EQ(test::run_cli({"replay", id, "--store", second_store}, out), 0) << test::file_text(out);
}

// Issue 16, parts 2 and 3: findings are filed under the simulated hardware and model, and
// `tune --experience filtered|all|none` decides what a run on other hardware is served. One
// store holds a promoted run of the Yi-9B task on H200 and one on A100 (simulated); a run of the
// same job on H100 is then started (init only) in each mode on a copy.
class ExperienceServing : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir_ = new test::temp_dir;
    for (const char* name : {"sim-dense9b-h200", "sim-dense9b-a100", "sim-dense9b-h100"}) {
      std::string text = test::sim_task_text(*dir_, name);
      text += "\n[budget]\ntrials = 6\nbaseline_repeats = 3\nverify_top = 1\nverify_repeats = 3\n";
      std::ofstream{task(name)} << text;
    }
    for (const char* name : {"sim-dense9b-h200", "sim-dense9b-a100"})
      statuses_.push_back(test::run_cli({"tune", task(name), "--store", store(), "--quiet"},
                                        dir_->sub(std::string{name} + ".tune-output")));
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string store() { return dir_->sub("store"); }
  static std::string task(const std::string& name) { return dir_->sub(name + ".toml"); }

  /// The pack logged by `tune sim-dense9b-h100 --until init --experience MODE` on a copy of the
  /// store, and that tune's output.
  static std::pair<nlohmann::json, std::string> served(const std::string& mode) {
    auto copy = dir_->sub("store-" + mode);
    fs::copy(store(), copy, fs::copy_options::recursive);
    auto before = runs(copy);
    auto out = dir_->sub("h100-" + mode + ".output");
    int rc = test::run_cli({"tune", task("sim-dense9b-h100"), "--store", copy, "--until", "init",
                            "--experience", mode},
                           out);
    if (rc != 0)
      return {nlohmann::json{{"rc", rc}}, test::file_text(out)};
    for (const auto& id : runs(copy))
      if (std::find(before.begin(), before.end(), id) == before.end()) {
        auto r = test::read_logged_run(copy, id);
        if (r && !r->of(wire::EventKind::ExperienceSeeded).empty())
          return {r->of(wire::EventKind::ExperienceSeeded).front()->doc, test::file_text(out)};
      }
    return {nlohmann::json{}, test::file_text(out)};
  }

  static std::vector<std::string> runs(const std::string& store_dir) {
    store::rocksdb_event_log_options o;
    o.read_only = true;
    std::vector<std::string> out;
    if (auto log = store::rocksdb_event_log::open(store_dir + "/events", o))
      if (auto list = (*log)->list_runs())
        for (const auto& r : *list)
          out.push_back(r.run_id);
    return out;
  }

  /// The bank's records as `infrarsi experience list --json` prints them.
  static std::vector<nlohmann::json> records() {
    auto out = dir_->sub("list.json");
    test::run_cli({"experience", "list", "--json", "--store", store()}, out);
    std::vector<nlohmann::json> recs;
    std::istringstream in{test::file_text(out)};
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("config"))
        recs.push_back(std::move(j));
    }
    return recs;
  }

  static test::temp_dir* dir_;
  static std::vector<int> statuses_;
};

test::temp_dir* ExperienceServing::dir_ = nullptr;
std::vector<int> ExperienceServing::statuses_;

TEST_F(ExperienceServing, FindingsAreFiledUnderTheSimulatedHardwareAndTheModel) {
  ASSERT_EQ(statuses_, (std::vector<int>{0, 0}))
    << test::file_text(dir_->sub("sim-dense9b-h200.tune-output"))
    << test::file_text(dir_->sub("sim-dense9b-a100.tune-output"));
  auto recs = records();
  ASSERT_EQ(recs.size(), 2u) << "both runs promote a configuration";
  std::set<std::string> gpus;
  for (const auto& r : recs) {
    ASSERT_TRUE(r.contains("hardware_identity")) << r.dump();
    gpus.insert(r["hardware_identity"].value("gpu", ""));
    EXPECT_EQ(r["hardware_identity"].value("simulated", false), true);
    EXPECT_EQ(r["hardware_identity"].value("gpus_per_node", 0), 8);
    EXPECT_EQ(r["workload_identity"].value("model", ""), "yi-9b");
  }
  EXPECT_EQ(gpus, (std::set<std::string>{"A100-80GB", "H200-141GB"}));
  EXPECT_EQ(recs[0]["workload_identity"]["class"], recs[1]["workload_identity"]["class"]);
  EXPECT_NE(recs[0]["hardware"], recs[1]["hardware"]);
}

TEST_F(ExperienceServing, FilteredServesSimilarHardwareFirstAllEverythingNoneNothing) {
  ASSERT_EQ(statuses_, (std::vector<int>{0, 0}));
  auto [filtered, filtered_out] = served("filtered");
  ASSERT_TRUE(filtered.contains("seeds")) << filtered.dump() << filtered_out;
  EXPECT_EQ(filtered["mode"], "filtered");
  // The H200 finding (same family and memory class) first, then the A100 one (other hardware).
  ASSERT_EQ(filtered["seeds"].size(), 2u) << filtered.dump();
  EXPECT_EQ(filtered["seeds"][0]["origin_hardware"], "H200-141GB");
  EXPECT_EQ(filtered["seeds"][0]["match"], "same family and memory class");
  EXPECT_EQ(filtered["seeds"][1]["origin_hardware"], "A100-80GB");
  EXPECT_EQ(filtered["seeds"][1]["match"], "other hardware");
  EXPECT_EQ(filtered["hardware_identity"]["gpu"], "H100-80GB");
  EXPECT_NE(filtered_out.find("init: experience (filtered): 2 seed(s) served (1 same family and "
                              "memory class, 1 other hardware)\n"),
            std::string::npos)
    << filtered_out;
  EXPECT_NE(filtered_out.find("hardware H100-80GB "), std::string::npos) << filtered_out;

  auto [all, all_out] = served("all");
  ASSERT_TRUE(all.contains("seeds")) << all.dump() << all_out;
  ASSERT_EQ(all["seeds"].size(), 2u) << all.dump();
  // Best verified speedup first, whatever the hardware.
  EXPECT_GE(all["seeds"][0]["speedup"].get<double>(), all["seeds"][1]["speedup"].get<double>());
  std::set<std::string> origins{all["seeds"][0]["origin_hardware"].get<std::string>(),
                                all["seeds"][1]["origin_hardware"].get<std::string>()};
  EXPECT_EQ(origins, (std::set<std::string>{"A100-80GB", "H200-141GB"}));

  auto [none, none_out] = served("none");
  ASSERT_TRUE(none.contains("seeds")) << none.dump() << none_out;
  EXPECT_TRUE(none["seeds"].empty());
  EXPECT_EQ(none["mode"], "none");

  // A mode that does not exist is a usage error naming the choices.
  auto out = dir_->sub("bad-mode.output");
  EXPECT_EQ(test::run_cli({"tune", task("sim-dense9b-h100"), "--store", dir_->sub("unused"),
                           "--experience", "some"},
                          out),
            2);
  EXPECT_NE(test::file_text(out).find("--experience"), std::string::npos)
    << test::file_text(out);
}

} // namespace
} // namespace infrarsi
