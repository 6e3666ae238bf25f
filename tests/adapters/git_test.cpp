// Tests for adapters/git.cpp with real git in a temporary repository (commit_promotion: knob-only
// and patch promotions, idempotence, refusal, crash leftovers, the user's checkout untouched) and
// for adapters/launch_config.cpp (launch.json rendering, patch paths against the scope).

#include "adapters/git.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <gtest/gtest.h>

#include "adapters/environment.hpp"
#include "adapters/launch_config.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path{path}.parent_path());
  std::ofstream out{path, std::ios::binary};
  out << text;
  if (!out)
    throw std::runtime_error("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

/// Runs git in `cwd`; throws unless it exits 0; returns stdout.
std::string git(const std::string& cwd, std::vector<std::string> args) {
  args.insert(args.begin(), "git");
  auto r = run_command(args, cwd);
  if (!r)
    throw std::runtime_error("cannot run git: " + describe(r.error()));
  if (r->exit_status != 0)
    throw std::runtime_error("git " + args[1] + " failed: " + r->err);
  return r->out;
}

std::string line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

const std::string model_py = "def scale():\n    return 1\n";
const std::string patched_model_py = "def scale():\n    return 2\n";
const std::string model_patch = "--- a/model.py\n"
                                "+++ b/model.py\n"
                                "@@ -1,2 +1,2 @@\n"
                                " def scale():\n"
                                "-    return 1\n"
                                "+    return 2\n";

/// A repository with the workload in `job/` and the user's own uncommitted work: a modified
/// tracked file and an untracked one.
class git_promotion : public ::testing::Test {
protected:
  void SetUp() override {
    fs::create_directories(repo_);
    git(repo_, {"init", "-q", "-b", "main"});
    git(repo_, {"config", "user.name", "Test User"});
    git(repo_, {"config", "user.email", "user@example.com"});
    git(repo_, {"config", "commit.gpgsign", "false"});
    write_file(repo_ + "/README.md", "the repository\n");
    write_file(workdir_ + "/model.py", model_py);
    write_file(workdir_ + "/train.py", "print('train')\n");
    git(repo_, {"add", "-A"});
    git(repo_, {"commit", "-q", "-m", "initial"});
    write_file(repo_ + "/README.md", "the repository, edited by the user\n");
    write_file(workdir_ + "/notes.txt", "untracked\n");
    write_file(dir_.sub("patches/scale.patch"), model_patch);
    head_ = line(git(repo_, {"rev-parse", "HEAD"}));
    status_ = git(repo_, {"status", "--porcelain"});
  }

  /// The user's checkout is as SetUp left it: same HEAD, same branch, same files and status, and
  /// no worktree besides the main one.
  void expect_checkout_untouched() {
    EXPECT_EQ(line(git(repo_, {"rev-parse", "HEAD"})), head_);
    EXPECT_EQ(line(git(repo_, {"symbolic-ref", "HEAD"})), "refs/heads/main");
    EXPECT_EQ(git(repo_, {"status", "--porcelain"}), status_);
    EXPECT_EQ(read_file(repo_ + "/README.md"), "the repository, edited by the user\n");
    EXPECT_EQ(read_file(workdir_ + "/model.py"), model_py);
    EXPECT_EQ(read_file(workdir_ + "/notes.txt"), "untracked\n");
    EXPECT_FALSE(fs::exists(workdir_ + "/promoted"));
    auto worktrees = git(repo_, {"worktree", "list", "--porcelain"});
    EXPECT_EQ(worktrees.find("worktree "), worktrees.rfind("worktree ")) << worktrees;
  }

  promotion_commit promotion(std::vector<std::string> patches = {}) {
    promotion_commit c;
    c.workdir = workdir_;
    c.branch = "infrarsi/run-1";
    c.patch_files = std::move(patches);
    c.launch_json = "{\n  \"config\": {\"knobs\": {\"threads\": {\"int\": 4}}}\n}\n";
    c.message = "infrarsi: promote threads 1->4\n\nRun run-1.\n";
    c.scratch_dir = dir_.sub("run-1");
    return c;
  }

  std::string show(const std::string& rev_path) { return git(repo_, {"show", rev_path}); }

  test::temp_dir dir_;
  std::string repo_ = dir_.sub("repo");
  std::string workdir_ = repo_ + "/job";
  std::string head_;
  std::string status_;
};

TEST_F(git_promotion, knob_only_promotion_commits_launch_json) {
  auto c = promotion();
  auto r = commit_promotion(c);
  ASSERT_TRUE(r.value("committed", false)) << r.dump();
  EXPECT_FALSE(r.value("already", true));
  EXPECT_EQ(r.value("branch", ""), "infrarsi/run-1");
  auto commit = r.value("commit", "");
  EXPECT_EQ(commit.size(), 40u);
  EXPECT_EQ(line(git(repo_, {"rev-parse", "infrarsi/run-1"})), commit);
  EXPECT_EQ(show("infrarsi/run-1:job/promoted/launch.json"), c.launch_json);
  // One commit on top of HEAD, by infrarsi, with the message, changing only launch.json.
  EXPECT_EQ(line(git(repo_, {"rev-parse", commit + "^"})), head_);
  EXPECT_EQ(git(repo_, {"log", "-1", "--format=%an <%ae>|%cn <%ce>", commit}),
            "infrarsi <infrarsi@localhost>|infrarsi <infrarsi@localhost>\n");
  EXPECT_EQ(git(repo_, {"log", "-1", "--format=%B", commit}), c.message + "\n");
  EXPECT_EQ(git(repo_, {"diff", "--name-only", head_, commit}), "job/promoted/launch.json\n");
  EXPECT_EQ(show("infrarsi/run-1:job/model.py"), model_py);
  expect_checkout_untouched();
}

TEST_F(git_promotion, patch_promotion_commits_patched_file_in_workload_subdirectory) {
  auto r = commit_promotion(promotion({dir_.sub("patches/scale.patch")}));
  ASSERT_TRUE(r.value("committed", false)) << r.dump();
  auto commit = r.value("commit", "");
  EXPECT_EQ(show(commit + ":job/model.py"), patched_model_py);
  EXPECT_EQ(show(commit + ":job/promoted/launch.json"), promotion().launch_json);
  EXPECT_EQ(git(repo_, {"diff", "--name-only", head_, commit}),
            "job/model.py\njob/promoted/launch.json\n");
  // The user's uncommitted edit and untracked file are not part of the commit.
  EXPECT_EQ(show(commit + ":README.md"), "the repository\n");
  EXPECT_EQ(git(repo_, {"ls-tree", "--name-only", commit, "job/"}),
            "job/model.py\njob/promoted\njob/train.py\n");
  expect_checkout_untouched();
}

TEST_F(git_promotion, workload_at_repository_root) {
  auto solo = dir_.sub("solo");
  write_file(solo + "/model.py", model_py);
  git(solo, {"init", "-q", "-b", "main"});
  git(solo, {"add", "model.py"});
  git(solo, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "solo"});
  auto c = promotion({dir_.sub("patches/scale.patch")});
  c.workdir = solo;
  auto r = commit_promotion(c);
  ASSERT_TRUE(r.value("committed", false)) << r.dump();
  auto commit = r.value("commit", "");
  EXPECT_EQ(git(solo, {"show", commit + ":model.py"}), patched_model_py);
  EXPECT_EQ(git(solo, {"show", commit + ":promoted/launch.json"}), c.launch_json);
  EXPECT_EQ(git(solo, {"diff", "--name-only", "main", commit}), "model.py\npromoted/launch.json\n");
  EXPECT_EQ(read_file(solo + "/model.py"), model_py);
  EXPECT_EQ(git(solo, {"status", "--porcelain"}), "");
}

TEST_F(git_promotion, second_call_is_already_committed_with_the_same_commit) {
  auto c = promotion({dir_.sub("patches/scale.patch")});
  auto first = commit_promotion(c);
  ASSERT_TRUE(first.value("committed", false)) << first.dump();
  c.message = "a resumed run words its message differently";
  auto second = commit_promotion(c);
  ASSERT_TRUE(second.value("committed", false)) << second.dump();
  EXPECT_TRUE(second.value("already", false));
  EXPECT_EQ(second.value("commit", ""), first.value("commit", "x"));
  EXPECT_EQ(line(git(repo_, {"rev-parse", "infrarsi/run-1"})), first.value("commit", "x"));
  // Still already committed after the user moved on: the content is rebuilt on the tip's parent.
  git(repo_, {"commit", "-q", "-a", "-m", "the user's next commit"});
  head_ = line(git(repo_, {"rev-parse", "HEAD"}));
  status_ = git(repo_, {"status", "--porcelain"});
  auto third = commit_promotion(c);
  EXPECT_TRUE(third.value("already", false)) << third.dump();
  EXPECT_EQ(third.value("commit", ""), first.value("commit", "x"));
  expect_checkout_untouched();
}

TEST_F(git_promotion, existing_branch_with_other_content_is_refused) {
  auto c = promotion();
  auto first = commit_promotion(c);
  ASSERT_TRUE(first.value("committed", false)) << first.dump();
  c.launch_json = "{\"config\": {\"knobs\": {\"threads\": {\"int\": 8}}}}\n";
  auto r = commit_promotion(c);
  EXPECT_FALSE(r.value("committed", true));
  EXPECT_EQ(r.value("reason", ""), "branch infrarsi/run-1 already exists with other content "
                                   "(commit " +
                                       first.value("commit", "") + ")");
  EXPECT_EQ(line(git(repo_, {"rev-parse", "infrarsi/run-1"})), first.value("commit", "x"));
  // Other patches on an existing branch: refused the same way.
  auto p = commit_promotion(promotion({dir_.sub("patches/scale.patch")}));
  EXPECT_FALSE(p.value("committed", true));
  EXPECT_NE(p.value("reason", "").find("already exists with other content"), std::string::npos)
      << p.dump();
  expect_checkout_untouched();
}

TEST_F(git_promotion, stale_registered_worktree_from_a_crash_is_removed) {
  auto c = promotion({dir_.sub("patches/scale.patch")});
  auto stale = c.scratch_dir + "/promotion-worktree";
  git(repo_, {"worktree", "add", "-q", "--detach", stale, "HEAD"});
  write_file(stale + "/job/model.py", "half-applied\n");
  write_file(stale + "/job/promoted/launch.json", "{}\n");
  auto r = commit_promotion(c);
  ASSERT_TRUE(r.value("committed", false)) << r.dump();
  EXPECT_EQ(show(r.value("commit", "") + ":job/model.py"), patched_model_py);
  EXPECT_FALSE(fs::exists(stale));
  expect_checkout_untouched();
}

TEST_F(git_promotion, stale_unregistered_directory_and_pruned_worktree_do_not_break_it) {
  auto c = promotion();
  // A worktree whose directory vanished (registration left behind) ...
  auto gone = dir_.sub("elsewhere");
  git(repo_, {"worktree", "add", "-q", "--detach", gone, "HEAD"});
  fs::remove_all(gone);
  // ... and a plain directory where the worktree goes.
  write_file(c.scratch_dir + "/promotion-worktree/junk.txt", "left over\n");
  auto r = commit_promotion(c);
  ASSERT_TRUE(r.value("committed", false)) << r.dump();
  EXPECT_EQ(show("infrarsi/run-1:job/promoted/launch.json"), c.launch_json);
  expect_checkout_untouched();
}

TEST_F(git_promotion, ignored_launch_json_is_committed_anyway) {
  write_file(workdir_ + "/.gitignore", "promoted/\n");
  git(repo_, {"add", "job/.gitignore"});
  git(repo_, {"commit", "-q", "-m", "ignore promoted"});
  head_ = line(git(repo_, {"rev-parse", "HEAD"}));
  status_ = git(repo_, {"status", "--porcelain"});
  auto c = promotion();
  auto r = commit_promotion(c);
  ASSERT_TRUE(r.value("committed", false)) << r.dump();
  EXPECT_EQ(show("infrarsi/run-1:job/promoted/launch.json"), c.launch_json);
  expect_checkout_untouched();
}

TEST_F(git_promotion, failing_patch_names_the_git_step_and_creates_no_branch) {
  write_file(dir_.sub("patches/bad.patch"), "--- a/model.py\n+++ b/model.py\n@@ -1,2 +1,2 @@\n"
                                            " def other():\n-    return 7\n+    return 8\n");
  auto r = commit_promotion(promotion({dir_.sub("patches/bad.patch")}));
  EXPECT_FALSE(r.value("committed", true));
  auto reason = r.value("reason", "");
  EXPECT_EQ(reason.rfind("git apply " + dir_.sub("patches/bad.patch") + ": ", 0), 0u) << reason;
  EXPECT_NE(reason.find("patch failed"), std::string::npos) << reason;
  EXPECT_EQ(git(repo_, {"branch", "--list", "infrarsi/*"}), "");
  expect_checkout_untouched();
}

TEST_F(git_promotion, invalid_branch_name_is_refused) {
  auto c = promotion();
  c.branch = "infrarsi/bad..name";
  auto r = commit_promotion(c);
  EXPECT_FALSE(r.value("committed", true));
  EXPECT_EQ(r.value("reason", ""), "invalid branch name 'infrarsi/bad..name'");
  expect_checkout_untouched();
}

TEST(git_promotion_outside_repo, not_a_repository) {
  test::temp_dir dir;
  write_file(dir.sub("job/model.py"), model_py);
  promotion_commit c;
  c.workdir = dir.sub("job");
  c.branch = "infrarsi/run-1";
  c.launch_json = "{}\n";
  c.scratch_dir = dir.sub("scratch");
  // Where $TMPDIR itself lies in a repository, git must not find that one.
  ::setenv("GIT_CEILING_DIRECTORIES", dir.path().c_str(), 1);
  auto r = commit_promotion(c);
  ::unsetenv("GIT_CEILING_DIRECTORIES");
  EXPECT_FALSE(r.value("committed", true));
  EXPECT_EQ(r.value("reason", ""), "the workload is not in a git repository");
  EXPECT_FALSE(fs::exists(dir.sub("job/promoted")));
  EXPECT_FALSE(fs::exists(dir.sub("job/.git")));
}

/// A task built in code: ranks launcher, every knob type, a constant, a bad placeholder.
tuning::task_spec small_task() {
  tuning::task_spec t;
  t.name = "small";
  t.workload.workdir = "/work/job";
  t.workload.argv = {"python3",
                     "train.py",
                     "--mb",
                     "{micro_batch}",
                     "--ckpt",
                     "{ckpt}",
                     "--lr-scale",
                     "{lr}",
                     "--attn={attention}",
                     "--dir",
                     "{trial_dir}/r{rank}",
                     "--gb",
                     "{global_batch}",
                     "--bad",
                     "{nope}"};
  t.workload.env = {{"OMP_NUM_THREADS", "{threads}"},
                    {"CAP", "{memory_cap_bytes}"},
                    {"TRIAL", "{trial_id}.{attempt}"}};
  t.workload.world_size = "{world_size}";
  t.limits.memory_cap_bytes = 1024;
  t.constants = {{"global_batch", std::int64_t{16}}};
  auto knob = [&t](std::string name, tuning::knob_type type, tuning::knob_value def) {
    tuning::knob_spec k;
    k.name = std::move(name);
    k.type = type;
    k.default_value = std::move(def);
    t.knobs.push_back(k);
    return &t.knobs.back();
  };
  knob("world_size", tuning::knob_type::integer, std::int64_t{1});
  knob("micro_batch", tuning::knob_type::integer, std::int64_t{1});
  knob("threads", tuning::knob_type::integer, std::int64_t{1});
  knob("lr", tuning::knob_type::real, 1.0);
  knob("attention", tuning::knob_type::choice, std::string{"eager"});
  auto* ckpt = knob("ckpt", tuning::knob_type::boolean, false);
  ckpt->true_text = "on";
  ckpt->false_text = "off";
  return t;
}

TEST(launch_config, renders_the_promoted_configuration_like_rank_zero) {
  auto task = small_task();
  tuning::configuration config;
  config.knobs = {{"attention", std::string{"sdpa"}},
                  {"ckpt", true},
                  {"lr", 0.5},
                  {"micro_batch", std::int64_t{4}},
                  {"threads", std::int64_t{2}},
                  {"world_size", std::int64_t{2}}};
  config.patches = {"fused_qkv"};
  auto j = launch_config(task, config, 1.25, 1.1);
  nlohmann::json expected = {
      {"config",
       {{"knobs",
         {{"attention", {{"text", "sdpa"}}},
          {"ckpt", {{"bool", true}}},
          {"lr", {{"real", 0.5}}},
          {"micro_batch", {{"int", 4}}},
          {"threads", {{"int", 2}}},
          {"world_size", {{"int", 2}}}}},
        {"patches", {"fused_qkv"}}}},
      {"workdir", "/work/job"},
      {"argv",
       {"python3", "train.py", "--mb", "4", "--ckpt", "on", "--lr-scale", "0.5", "--attn=sdpa",
        "--dir", "./r0", "--gb", "16", "--bad", "{nope}"}},
      {"env", {{"CAP", "1024"}, {"OMP_NUM_THREADS", "2"}, {"TRIAL", "0.0"}}},
      {"world_size", "2"},
      {"speedup", 1.25},
      {"ci_low", 1.1},
      {"patches", {{{"name", "fused_qkv"}, {"file", "patches/fused_qkv.patch"}, {"source", ""}}}},
      {"apply_patches", {"patch -p1 -d /work/job < patches/fused_qkv.patch"}},
      // One process per rank (the ranks launcher), argv rendered per rank ({rank} in --dir),
      // the torchrun variables as the node-runner sets them; an unrendered template is quoted.
      {"command",
       "cd /work/job && { env CAP=1024 OMP_NUM_THREADS=2 TRIAL=0.0 RANK=0 LOCAL_RANK=0 "
       "WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python3 "
       "train.py --mb 4 --ckpt on --lr-scale 0.5 --attn=sdpa --dir ./r0 --gb 16 --bad '{nope}' & "
       "env CAP=1024 OMP_NUM_THREADS=2 TRIAL=0.0 RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 "
       "LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python3 train.py --mb 4 "
       "--ckpt on --lr-scale 0.5 --attn=sdpa --dir ./r1 --gb 16 --bad '{nope}' & wait; }"}};
  EXPECT_EQ(j, expected) << j.dump(2);
}

TEST(launch_config, command_launcher_gives_one_shell_line_with_the_environment) {
  auto task = small_task();
  task.workload.launcher = tuning::launcher_kind::command;
  task.workload.workdir = "/work/my job";
  task.workload.env["NOTE"] = "it's";
  tuning::configuration config;
  // lr and attention are not in the configuration: their placeholders stay as written, quoted.
  config.knobs = {{"ckpt", false}, {"micro_batch", std::int64_t{2}}, {"threads", std::int64_t{3}}};
  auto j = launch_config(task, config, 1.1, 1.0);
  EXPECT_EQ(j["command"],
            "cd '/work/my job' && env CAP=1024 'NOTE=it'\\''s' OMP_NUM_THREADS=3 TRIAL=0.0 python3 "
            "train.py --mb 2 --ckpt off --lr-scale '{lr}' '--attn={attention}' --dir ./r0 --gb 16 "
            "--bad '{nope}'");
  EXPECT_EQ(j["apply_patches"], nlohmann::json::array());
}

TEST(launch_config, world_size_defaults_to_one_when_its_template_does_not_render) {
  auto task = small_task();
  task.workload.world_size = "{missing}";
  tuning::configuration config;
  config.knobs = {{"ckpt", false}, {"micro_batch", std::int64_t{1}}};
  auto j = launch_config(task, config, 1.0, 0.9);
  EXPECT_EQ(j["world_size"], "1");
  EXPECT_EQ(j["argv"][5], "off");
  EXPECT_EQ(j["config"]["patches"], nlohmann::json::array());
}

TEST(promoted_patch_paths, touched_and_outside_the_scope) {
  test::temp_dir dir;
  write_file(dir.sub("a.patch"), "--- a/model.py\n+++ b/model.py\n@@ -1 +1 @@\n-x\n+y\n"
                                 "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-x\n+y\n");
  write_file(dir.sub("b.patch"), "--- a/ops/attn.py\n+++ b/ops/attn.py\n@@ -1 +1 @@\n-x\n+y\n"
                                 "--- /dev/null\n+++ b/data/new.py\n@@ -0,0 +1 @@\n+y\n"
                                 "--- a/model.py\n+++ b/model.py\n@@ -1 +1 @@\n-x\n+y\n"
                                 "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-x\n+y\n");
  auto task = small_task();
  task.scope.editable = {"*.py", "ops/*.py"};
  task.scope.frozen = {"train.py"};
  task.patches = {{"a", dir.sub("a.patch"), ""}, {"b", dir.sub("b.patch"), ""}};
  tuning::configuration config;
  config.patches = {"a", "b", "unknown"};
  auto r = promoted_patch_paths(task, config);
  // Per patch sorted (patch_paths), then in order of first appearance; "*.py" matches new.py in
  // any directory, so only the frozen train.py is outside.
  EXPECT_EQ(r.touched,
            (std::vector<std::string>{"model.py", "train.py", "data/new.py", "ops/attn.py"}));
  EXPECT_EQ(r.outside, (std::vector<std::string>{"train.py"}));

  task.scope.editable = {"model.py", "ops/*.py"};
  r = promoted_patch_paths(task, config);
  EXPECT_EQ(r.outside, (std::vector<std::string>{"train.py", "data/new.py"}));

  config.patches = {};
  r = promoted_patch_paths(task, config);
  EXPECT_TRUE(r.touched.empty());
  EXPECT_TRUE(r.outside.empty());
}

} // namespace
} // namespace infrarsi::adapters
