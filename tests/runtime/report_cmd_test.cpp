// runtime/report_cmd.cpp: `infrarsi report RUN --store DIR` regenerates report.json, report.md
// and report.html from the event log alone, on the committed golden logs (issue 17).

#include "runtime/report_cmd.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "adapters/launch_config.hpp"
#include "adapters/task_file.hpp"
#include "runtime/cli.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"

namespace infrarsi::runtime {
namespace {

namespace fs = std::filesystem;

const std::string golden_dir = std::string{INFRARSI_TEST_DATA_DIR} + "/golden";
const std::string source_dir = std::string{INFRARSI_TEST_DATA_DIR} + "/../..";

std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return std::string{std::istreambuf_iterator<char>{in}, {}};
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

int cli(std::vector<std::string> args, std::string& out, std::string& err) {
  args.insert(args.begin(), "infrarsi");
  std::vector<const char*> argv;
  for (const auto& a : args)
    argv.push_back(a.c_str());
  std::ostringstream o;
  std::ostringstream e;
  int rc = run_cli(static_cast<int>(argv.size()), argv.data(), o, e);
  out = o.str();
  err = e.str();
  return rc;
}

/// The run as the log holds it (read-only open of the copy).
store::run_state load(const std::string& store_dir, const std::string& run) {
  store::rocksdb_event_log_options opts;
  opts.read_only = true;
  auto log = store::rocksdb_event_log::open(store_dir + "/events", opts);
  EXPECT_TRUE(log) << store_dir;
  auto state = store::load_run(**log, run);
  EXPECT_TRUE(state);
  return *state;
}

TEST(ReportCommand, RegeneratesTheReportsOfEveryGoldenLogFromTheLog) {
  auto manifest = nlohmann::json::parse(std::ifstream{golden_dir + "/golden.json"});
  ASSERT_EQ(manifest["logs"].size(), 3u);
  int without_task_file = 0;
  for (const auto& g : manifest["logs"]) {
    SCOPED_TRACE(g.dump());
    test::temp_dir dir;
    fs::copy(golden_dir + "/" + g["store"].get<std::string>(), dir.sub("store"),
             fs::copy_options::recursive);
    const auto run = g["run"].get<std::string>();
    std::vector<std::string> args = {"report", run, "--store", dir.sub("store")};
    if (g["task"].is_string()) // logged before the task text was: the one task file it needs
      args.insert(args.end(), {"--task", source_dir + "/" + g["task"].get<std::string>()});
    else
      ++without_task_file;
    std::string out;
    std::string err;
    ASSERT_EQ(cli(args, out, err), 0) << out << err;
    const auto run_dir = dir.sub("store") + "/runs/" + run;
    EXPECT_EQ(out, run_dir + "/report.json\n" + run_dir + "/report.md\n" + run_dir
                     + "/report.html\n");

    auto state = load(dir.sub("store"), run);
    auto report = nlohmann::json::parse(slurp(run_dir + "/report.json"));
    EXPECT_EQ(report["run"], run);
    ASSERT_FALSE(state.trials.empty());
    EXPECT_EQ(report["trials"].size(), state.trials.size());
    std::size_t finished = 0;
    for (const auto& t : state.trials)
      finished += t.finished ? 1 : 0;
    EXPECT_EQ(report["search_progress"].size(), finished);
    ASSERT_TRUE(state.promotion.has_value());
    EXPECT_EQ(report["promotion_decision"], *state.promotion);
    if (state.promotion->value("promoted", false)) {
      EXPECT_EQ(report["promoted"]["speedup"], (*state.promotion)["speedup"]);
      EXPECT_FALSE(report["promoted"]["attribution"]["parts"].empty());
    }
    // Best so far never falls and ends at the fastest usable trial's speedup.
    double best = 0.0;
    double last = 0.0;
    for (const auto& p : report["search_progress"]) {
      if (p["speedup"].is_number())
        best = std::max(best, p["speedup"].get<double>());
      if (p["best_so_far"].is_number()) {
        EXPECT_GE(p["best_so_far"].get<double>(), last);
        last = p["best_so_far"].get<double>();
      }
    }
    EXPECT_GT(best, 0.0);
    EXPECT_DOUBLE_EQ(last, best);
    EXPECT_FALSE(report["top_configurations"].empty());
    EXPECT_LE(report["top_configurations"].size(), 10u);

    auto md = slurp(run_dir + "/report.md");
    EXPECT_EQ(md.rfind("# InfraRSI report: ", 0), 0u);
    auto html = slurp(run_dir + "/report.html");
    // Self-contained: the document and Chart.js inline, nothing fetched.
    EXPECT_NE(html.find("<script type=\"application/json\" id=\"report-data\">"), std::string::npos);
    EXPECT_NE(html.find("Chart.js v"), std::string::npos);
    EXPECT_EQ(html.find(" src="), std::string::npos);
    EXPECT_EQ(html.find("<link"), std::string::npos);
  }
  EXPECT_EQ(without_task_file, 1);
}

TEST(ReportCommand, FormatWritesOneFileWhereOutSays) {
  test::temp_dir dir;
  fs::copy(golden_dir + "/sim_dense_1node_nodes4", dir.sub("store"), fs::copy_options::recursive);
  std::string out;
  std::string err;
  ASSERT_EQ(cli({"report", "sim-dense-1node-20261201-130610-9d59", "--store",
                 dir.sub("store") + "/events", "--format", "md", "--out", dir.sub("elsewhere")},
                out, err),
            0)
    << err;
  EXPECT_EQ(out, dir.sub("elsewhere") + "/report.md\n");
  EXPECT_TRUE(fs::exists(dir.sub("elsewhere/report.md")));
  EXPECT_FALSE(fs::exists(dir.sub("elsewhere/report.json")));
  EXPECT_FALSE(fs::exists(dir.sub("elsewhere/report.html")));
  EXPECT_FALSE(fs::exists(dir.sub("store/runs")));

  EXPECT_EQ(cli({"report", "x", "--store", dir.sub("store"), "--format", "pdf"}, out, err), 2);
  EXPECT_NE(err.find("pdf"), std::string::npos) << err;
}

TEST(ReportCommand, NamesTheMissingRunAndTheMissingStore) {
  test::temp_dir dir;
  fs::copy(golden_dir + "/sim_dense_1node_nodes4", dir.sub("store"), fs::copy_options::recursive);
  std::string out;
  std::string err;
  EXPECT_EQ(cli({"report", "no-such-run", "--store", dir.sub("store")}, out, err), 1);
  EXPECT_NE(err.find("run 'no-such-run' not found in '" + dir.sub("store") + "/events'"),
            std::string::npos)
    << err;
  EXPECT_EQ(cli({"report", "r", "--store", dir.sub("nothing")}, out, err), 1);
  EXPECT_NE(err.find("no event log at '" + dir.sub("nothing") + "/events'"), std::string::npos)
    << err;
}

TEST(ReportCommand, WithoutChartJsTheOtherFilesAreWrittenAndTheErrorSaysWhatToInstall) {
  test::temp_dir dir;
  fs::copy(golden_dir + "/sim_dense_1node_nodes4", dir.sub("store"), fs::copy_options::recursive);
  ::setenv("INFRARSI_CHART_JS", dir.sub("absent/chart.min.js").c_str(), 1);
  std::string out;
  std::string err;
  int rc = cli({"report", "sim-dense-1node-20261201-130610-9d59", "--store", dir.sub("store")},
               out, err);
  ::unsetenv("INFRARSI_CHART_JS");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("Chart.js not found (tried " + dir.sub("absent/chart.min.js") + ")"),
            std::string::npos)
    << err;
  EXPECT_NE(err.find("libjs-chart.js"), std::string::npos) << err;
  const auto run_dir = dir.sub("store/runs/sim-dense-1node-20261201-130610-9d59");
  EXPECT_TRUE(fs::exists(run_dir + "/report.json"));
  EXPECT_TRUE(fs::exists(run_dir + "/report.md"));
  EXPECT_FALSE(fs::exists(run_dir + "/report.html"));
}

/// promoted/launch.json's command line runs: the golden simulator run's promotion, rendered for
/// the repository's simulator task, started with /bin/sh as a user would, finishes its 10 steps
/// with the promoted settings (the simulator checks and echoes them).
TEST(LaunchJson, TheGoldenPromotionsCommandLineRunsAsWritten) {
  test::temp_dir dir;
  fs::copy(golden_dir + "/sim_dense_1node_nodes4", dir.sub("store"), fs::copy_options::recursive);
  auto state = load(dir.sub("store"), "sim-dense-1node-20261201-130610-9d59");
  ASSERT_TRUE(state.promotion.has_value());
  auto config = store::configuration_from_json((*state.promotion)["config"]);
  ASSERT_TRUE(config);
  auto task = adapters::load_task_file(source_dir + "/config/tasks/sim-dense-1node.toml");
  ASSERT_TRUE(task);
  auto j = adapters::launch_config(*task, *config, 1.112, 1.091);
  const auto workdir = task->workload.workdir;
  EXPECT_EQ(j["command"],
            "cd " + workdir
              + " && .bin/infrarsi-sim --model llama3-8b --gpu H100-80GB --gpus 8 --seq-len 4096 "
                "--global-batch 256 --steps 10 --warmup-steps 2 --launch-id 0 --attempt 0 --tp 8 "
                "--pp 1 --vpp 1 --micro-batch 4 --recompute selective --sequence-parallel 1 "
                "--distributed-optimizer 1 --overlap-grad-reduce 1 --overlap-param-gather 1 "
                "--bucket-mb 160 --cuda-graphs 0");
  EXPECT_EQ(j["apply_patches"], nlohmann::json::array(
                                  {"patch -p1 -d " + workdir
                                   + " < patches/flash3_attention.patch"}));
  ASSERT_TRUE(fs::exists(workdir + "/.bin/infrarsi-sim")) << "build infrarsi-sim-link";
  // Run it (without the patch: the simulator reads kernels.conf, which the patch edits; the
  // launch settings alone must run).
  const auto log = dir.sub("run.log");
  int rc = std::system(("{ " + j["command"].get<std::string>() + "; } > " + log + " 2>&1").c_str());
  ASSERT_EQ(rc, 0) << slurp(log);
  auto text = slurp(log);
  EXPECT_EQ(count_of(text, "\"step\":"), 10u) << text.substr(0, 2000);
  EXPECT_NE(text.find("\"status\":\"ok\""), std::string::npos) << text.substr(text.size() > 2000 ? text.size() - 2000 : 0);
}

} // namespace
} // namespace infrarsi::runtime
