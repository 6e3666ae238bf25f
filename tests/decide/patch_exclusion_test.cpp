// Tests for decide/patch_exclusion.cpp with real git and real files: init's scope lock checks
// every patch alone (adapters::lock_scope); a patch that does not apply to the unpatched workload
// is excluded with git's message as its evidence, never proposed, and listed in the report.

#include "decide/patch_exclusion.hpp"

#include <fstream>

#include <gtest/gtest.h>

#include "adapters/scope.hpp"
#include "adapters/task_file.hpp"
#include "decide/decisions.hpp"
#include "decide/report.hpp"
#include "test_util.hpp"
#include "tuning/planner.hpp"

namespace infrarsi::decide {
namespace {

class PatchExclusionTest : public ::testing::Test {
protected:
  test::temp_dir dir;

  /// A workload of one file, a patch that applies to it ("good") and one written against other
  /// text ("stale"), and a task offering `patches` of them.
  tuning::task_spec task(const std::vector<std::string>& patches) {
    std::filesystem::create_directories(dir.sub("work"));
    std::ofstream{dir.sub("work/train.py")} << "line one\nline two\n";
    std::ofstream{dir.sub("good.patch")} << "--- a/train.py\n+++ b/train.py\n@@ -1,2 +1,2 @@\n"
                                            " line one\n-line two\n+line 2\n";
    std::ofstream{dir.sub("stale.patch")} << "--- a/train.py\n+++ b/train.py\n@@ -1,2 +1,2 @@\n"
                                             " line one\n-line three\n+line 3\n";
    std::string text = "name = \"t\"\n[workload]\nworkdir = \"work\"\nargv = [\"true\"]\n"
                       "[[knobs]]\nname = \"fast\"\ntype = \"bool\"\ndefault = false\n"
                       "[scope]\neditable = [\"*.py\"]\n";
    for (const auto& p : patches)
      text += "[[patches]]\nname = \"" + p + "\"\nfile = \"" + p + ".patch\"\n";
    std::ofstream{dir.sub("task.toml")} << text;
    auto t = adapters::load_task_file(dir.sub("task.toml"));
    if (!t)
      throw std::runtime_error(describe(t.error()));
    return std::move(*t);
  }
};

TEST_F(PatchExclusionTest, APatchThatDoesNotApplyAloneIsExcludedWithGitsReason) {
  auto t = task({"good", "stale"});
  auto lock = adapters::lock_scope(t, dir.sub("scratch"));
  ASSERT_TRUE(lock) << describe(lock.error());
  const auto& patches = (*lock)["patches"];
  EXPECT_TRUE(patches["good"]["applies_alone"].get<bool>());
  EXPECT_EQ(patches["good"]["apply_error"], "");
  EXPECT_FALSE(patches["stale"]["applies_alone"].get<bool>());
  auto why = patches["stale"]["apply_error"].get<std::string>();
  EXPECT_NE(why.find("patch does not apply"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why; // one line in the log and the progress

  auto excluded = excluded_patches(patches);
  ASSERT_EQ(excluded.size(), 1u);
  EXPECT_EQ(excluded[0].patch, "stale");
  EXPECT_EQ(excluded[0].reason, "does-not-apply");
  EXPECT_EQ(excluded[0].evidence, why);

  // From the logged ContractLocked document: the planner never proposes it, alone or paired.
  store::run_state run;
  run.contract_doc =
      nlohmann::json{{"patches", patches}, {"patch_conflicts", (*lock)["patch_conflicts"]}};
  auto in = planner_input_for(t, run);
  EXPECT_EQ(in.excluded_patches, std::vector<std::string>{"stale"});
  auto policy = tuning::make_policy(tuning::default_policy_name);
  ASSERT_NE(policy, nullptr);
  in.initial_design = 8;
  auto batch = policy->plan(in, 8);
  ASSERT_FALSE(batch.proposals.empty()) << batch.stop_reason;
  bool good_proposed = false;
  for (const auto& p : batch.proposals) {
    for (const auto& name : p.config.patches)
      EXPECT_NE(name, "stale") << p.config.key();
    good_proposed = good_proposed || !p.config.patches.empty();
  }
  EXPECT_TRUE(good_proposed); // the patch that applies is still searched
  // The space without "stale": 2 values of the knob x {no patch, good}.
  EXPECT_LE(batch.proposals.size(), 4u);

  // The report lists it among the rejected, with its reason and evidence.
  auto report = make_report(t, run);
  bool listed = false;
  for (const auto& r : report["rejected"])
    if (r.value("patch", "") == "stale") {
      listed = true;
      EXPECT_EQ(r["reasons"], nlohmann::json::array({"does-not-apply"}));
      EXPECT_EQ(r["evidence"], nlohmann::json::array({why}));
      EXPECT_EQ(r["outcome"], "excluded at init, never run");
    }
  EXPECT_TRUE(listed) << report["rejected"].dump();
  EXPECT_NE(render_markdown(report).find("stale"), std::string::npos);
}

TEST_F(PatchExclusionTest, ASinglePatchIsCheckedAloneToo) {
  auto t = task({"stale"});
  auto lock = adapters::lock_scope(t, dir.sub("scratch"));
  ASSERT_TRUE(lock) << describe(lock.error());
  auto excluded = excluded_patches((*lock)["patches"]);
  ASSERT_EQ(excluded.size(), 1u);
  EXPECT_EQ(excluded[0].patch, "stale");
  EXPECT_EQ(excluded[0].reason, "does-not-apply");
}

TEST(PatchExclusion, ScopeFirstAndOldLogsWithoutTheKeysExcludeNothingForIt) {
  auto patches = nlohmann::json::parse(R"({
    "a": {"in_scope": false, "violation": "touches frozen x.cpp", "applies_alone": false},
    "b": {"in_scope": true, "violation": ""},
    "c": {"in_scope": true, "applies_alone": false, "apply_error": "error: y: does not exist"},
    "d": "not an object"})");
  auto excluded = excluded_patches(patches);
  ASSERT_EQ(excluded.size(), 2u);
  EXPECT_EQ(excluded[0].patch, "a");
  EXPECT_EQ(excluded[0].reason, "scope");
  EXPECT_EQ(excluded[0].evidence, "touches frozen x.cpp");
  EXPECT_EQ(excluded[1].patch, "c");
  EXPECT_EQ(excluded[1].reason, "does-not-apply");
  EXPECT_EQ(excluded[1].evidence, "error: y: does not exist");
  EXPECT_TRUE(excluded_patches(nlohmann::json::array()).empty());
  EXPECT_TRUE(excluded_patches(store::run_state{}).empty());
}

} // namespace
} // namespace infrarsi::decide
