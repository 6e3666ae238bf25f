// Tests for adapters/trial_copy.cpp and its use by the trial launcher, on real files: unchanged
// files of a trial's copy are hard links (same inode, more than one link), editable, writable and
// patched files are copies of their own, a patch never reaches the original, `.git` and a store
// inside the workload stay out, a write through a link is caught, and removing old copies keeps
// the logs.

#include "adapters/trial_copy.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "adapters/environment.hpp"
#include "adapters/trial_launcher.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

namespace fs = std::filesystem;

struct stat stat_of(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    ADD_FAILURE() << "cannot stat " << path;
  return st;
}

std::string text_of(const std::string& path) {
  std::ifstream in{path};
  return {std::istreambuf_iterator<char>{in}, {}};
}

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path{path}.parent_path());
  std::ofstream{path} << text;
}

/// A workload directory: train.py (editable), lib/model.py and data/tokens.bin (neither),
/// out/last.log (written at run time), a .git directory and a link.
class TrialCopyTest : public ::testing::Test {
protected:
  static constexpr std::size_t tokens_bytes = 1536 * 1024;
  void SetUp() override {
    work = dir.sub("work");
    write(work + "/train.py", "print('train')\n");
    write(work + "/lib/model.py", "layers = 2\n");
    // Above copy_rules::link_min_bytes (1 MiB): linked by default; the small files are copied
    // unless a test sets link_min_bytes = 0.
    write(work + "/data/tokens.bin", std::string(tokens_bytes, 't'));
    write(work + "/out/last.log", "old\n");
    write(work + "/.git/HEAD", "ref: refs/heads/main\n");
    write(work + "/.git/objects/ab/cdef", std::string(50000, 'g'));
    fs::create_symlink("lib/model.py", work + "/model_link.py");
  }
  test::temp_dir dir;
  std::string work;
};

TEST_F(TrialCopyTest, UnchangedFilesAreHardLinksOwnFilesAreCopies) {
  copy_rules rules;
  rules.own_globs = {"train.py", "out/*"}; // editable + writable
  rules.reflink = false;
  rules.link_min_bytes = 0; // link the small files of this fixture
  auto dest = dir.sub("trial/workdir");
  auto made = copy_workload(work, dest, rules);
  ASSERT_TRUE(made) << describe(made.error());
  // Not a full copy: the same inode as the original, linked more than once.
  for (const char* rel : {"lib/model.py", "data/tokens.bin"}) {
    auto orig = stat_of(work + "/" + rel);
    auto copy = stat_of(dest + "/" + rel);
    EXPECT_EQ(copy.st_ino, orig.st_ino) << rel;
    EXPECT_EQ(copy.st_dev, orig.st_dev) << rel;
    EXPECT_GE(copy.st_nlink, 2u) << rel;
  }
  // Own bytes for the editable and the writable file: other inodes, one link, same content.
  for (const char* rel : {"train.py", "out/last.log"}) {
    auto copy = stat_of(dest + "/" + rel);
    EXPECT_NE(copy.st_ino, stat_of(work + "/" + rel).st_ino) << rel;
    EXPECT_EQ(copy.st_nlink, 1u) << rel;
    EXPECT_EQ(text_of(dest + "/" + rel), text_of(work + "/" + rel)) << rel;
  }
  EXPECT_EQ(made->files_linked, 2u);
  EXPECT_EQ(made->files_copied, 2u);
  EXPECT_EQ(made->bytes_copied, std::string{"print('train')\n"}.size() + 4);
  ASSERT_EQ(made->linked.size(), 2u);
  // The repository stays out; the link is a link with its target.
  EXPECT_FALSE(fs::exists(dest + "/.git"));
  EXPECT_EQ(made->symlinks, 1u);
  EXPECT_TRUE(fs::is_symlink(dest + "/model_link.py"));
  EXPECT_EQ(fs::read_symlink(dest + "/model_link.py"), fs::path{"lib/model.py"});
  EXPECT_EQ(written_through(*made, dest), "");
}

TEST_F(TrialCopyTest, SmallFilesAreCopiedOnlyLargeOnesAreHardLinks) {
  copy_rules rules; // link_min_bytes: 1 MiB
  rules.reflink = false;
  auto dest = dir.sub("trial/workdir");
  auto made = copy_workload(work, dest, rules);
  ASSERT_TRUE(made) << describe(made.error());
  // The 1.5 MiB data file is shared; the 11-byte module is the copy's own.
  EXPECT_EQ(stat_of(dest + "/data/tokens.bin").st_ino, stat_of(work + "/data/tokens.bin").st_ino);
  EXPECT_NE(stat_of(dest + "/lib/model.py").st_ino, stat_of(work + "/lib/model.py").st_ino);
  EXPECT_EQ(stat_of(dest + "/lib/model.py").st_nlink, 1u);
  EXPECT_EQ(made->files_linked, 1u);
  EXPECT_EQ(made->files_copied, 3u); // train.py, lib/model.py, out/last.log
  ASSERT_EQ(made->linked.size(), 1u);
  EXPECT_EQ(made->linked[0].path, "data/tokens.bin");
}

TEST_F(TrialCopyTest, DefaultRulesShareEveryUnchangedFile) {
  // With reflinks allowed, a file is either cloned (another inode, copy-on-write) or linked.
  auto dest = dir.sub("trial/workdir");
  copy_rules rules;
  rules.link_min_bytes = 0;
  auto made = copy_workload(work, dest, rules);
  ASSERT_TRUE(made) << describe(made.error());
  EXPECT_EQ(made->files_copied, 0u);
  EXPECT_EQ(made->files_linked + made->files_reflinked, 4u);
  if (made->files_reflinked == 0) {
    EXPECT_EQ(stat_of(dest + "/data/tokens.bin").st_ino, stat_of(work + "/data/tokens.bin").st_ino);
  }
}

TEST_F(TrialCopyTest, AStoreInsideTheWorkloadIsLeftOut) {
  auto dest = work + "/.infrarsi/runs/r/trials/trial-0-0/workdir";
  write(work + "/.infrarsi/runs/r/trials/trial-0-0/rank-0.stdout", "log\n");
  auto made = copy_workload(work, dest, copy_rules{});
  ASSERT_TRUE(made) << describe(made.error());
  EXPECT_FALSE(fs::exists(dest + "/.infrarsi"));
  EXPECT_TRUE(fs::exists(dest + "/lib/model.py"));
}

TEST_F(TrialCopyTest, AWriteThroughALinkIsCaughtAndARenameIsNot) {
  copy_rules rules;
  rules.reflink = false;
  rules.link_min_bytes = 0; // link the small files of this fixture
  auto dest = dir.sub("trial/workdir");
  auto made = copy_workload(work, dest, rules);
  ASSERT_TRUE(made) << describe(made.error());
  ASSERT_GT(made->files_linked, 0u);
  // Replacing a linked file (write a new one, rename over it) leaves the original alone.
  write(dest + "/lib/model.py.tmp", "layers = 4\n");
  fs::rename(dest + "/lib/model.py.tmp", dest + "/lib/model.py");
  EXPECT_EQ(text_of(work + "/lib/model.py"), "layers = 2\n");
  EXPECT_EQ(written_through(*made, dest), "");
  // Appending in place writes the original through the link: reported, naming the file.
  std::ofstream{dest + "/out/last.log", std::ios::app} << "new\n";
  EXPECT_EQ(text_of(work + "/out/last.log"), "old\nnew\n"); // why writable files are copied
  auto why = written_through(*made, dest);
  EXPECT_NE(why.find("'out/last.log' changed while the trial ran (size 4 -> 8 bytes)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("workload.writable"), std::string::npos) << why;
}

TEST_F(TrialCopyTest, RemovingOldCopiesKeepsTheLogs) {
  auto trials = dir.sub("trials");
  for (std::uint32_t id : {0u, 1u, 2u}) {
    auto t = trials + "/" + trial_dir_name(id, 0);
    write(t + "/rank-0.stdout", "step 1\n");
    write(t + "/rank-0.stderr", "");
    copy_rules rules;
    rules.own_globs = {"train.py"};
    rules.reflink = false;
    rules.link_min_bytes = 0; // link the small files of this fixture
    ASSERT_TRUE(copy_workload(work, t + "/workdir", rules));
  }
  auto removed = remove_trial_copies(trials, {{0, 0}, {2, 0}, {7, 0}}); // 7: no such trial
  EXPECT_EQ(removed.error, "");
  EXPECT_EQ(removed.copies, 2u);
  EXPECT_EQ(removed.bytes, 2 * std::string{"print('train')\n"}.size()); // the linked files free 0
  for (std::uint32_t id : {0u, 2u}) {
    auto t = trials + "/" + trial_dir_name(id, 0);
    EXPECT_FALSE(fs::exists(t + "/workdir")) << t;
    EXPECT_EQ(text_of(t + "/rank-0.stdout"), "step 1\n") << t;
    EXPECT_TRUE(fs::exists(t + "/rank-0.stderr")) << t;
  }
  EXPECT_TRUE(fs::exists(trials + "/trial-1-0/workdir/lib/model.py"));
  // The originals of the removed links are intact.
  EXPECT_EQ(text_of(work + "/lib/model.py"), "layers = 2\n");
  EXPECT_EQ(stat_of(work + "/data/tokens.bin").st_size, static_cast<off_t>(tokens_bytes));
}

// An attempt interrupted during its smoke probe left the probe's copies: they go with it.
TEST_F(TrialCopyTest, RemovingACopyAlsoRemovesTheSmokeProbesCopies) {
  auto trials = dir.sub("trials");
  auto t = trials + "/" + trial_dir_name(4, 1);
  copy_rules rules;
  rules.reflink = false;
  for (const char* sub : {"/smoke-unpatched", "/smoke-patched"}) {
    write(t + sub + "/rank-0.stdout", "step 0\n");
    ASSERT_TRUE(copy_workload(work, t + sub + "/workdir", rules));
  }
  auto removed = remove_trial_copies(trials, {{4, 1}});
  EXPECT_EQ(removed.error, "");
  EXPECT_EQ(removed.copies, 2u);
  for (const char* sub : {"/smoke-unpatched", "/smoke-patched"}) {
    EXPECT_FALSE(fs::exists(t + sub + "/workdir")) << sub;
    EXPECT_EQ(text_of(t + sub + "/rank-0.stdout"), "step 0\n") << sub;
  }
  EXPECT_EQ(text_of(work + "/lib/model.py"), "layers = 2\n");
}

/// Through the launcher: a patched file is a separate copy with the patch applied, the original
/// workload is unchanged, and the unpatched files are links.
TEST_F(TrialCopyTest, APatchedFileIsACopyAndTheOriginalIsUnchanged) {
  write(dir.sub("layers.patch"), "--- a/lib/model.py\n+++ b/lib/model.py\n@@ -1 +1 @@\n"
                                 "-layers = 2\n+layers = 4\n");
  tuning::task_spec task;
  task.name = "copy";
  task.workload.workdir = work;
  task.workload.launcher = tuning::launcher_kind::command;
  task.workload.argv = {"/bin/sh", "-c", "cat lib/model.py"};
  task.limits.timeout_s = 30;
  task.scope.editable = {"lib/*.py"};
  task.patches.push_back({"layers", dir.sub("layers.patch"), ""});
  const auto before = *sha256_file(work + "/lib/model.py");
  trial_request req;
  req.task = &task;
  req.patches = {"layers"};
  req.trial_dir = dir.sub("patched");
  auto r = run_trial(req);
  ASSERT_TRUE(r) << describe(r.error());
  const auto copy = dir.sub("patched/workdir");
  ASSERT_EQ(r->workdir, copy);
  EXPECT_EQ(text_of(copy + "/lib/model.py"), "layers = 4\n");
  EXPECT_EQ(text_of(dir.sub("patched/rank-0.stdout")), "layers = 4\n"); // the trial saw it
  EXPECT_NE(stat_of(copy + "/lib/model.py").st_ino, stat_of(work + "/lib/model.py").st_ino);
  EXPECT_EQ(*sha256_file(work + "/lib/model.py"), before);
  EXPECT_EQ(text_of(work + "/lib/model.py"), "layers = 2\n");
  // Files the patch does not touch and the scope does not make editable: links (or clones).
  auto data = stat_of(copy + "/data/tokens.bin");
  if (data.st_ino == stat_of(work + "/data/tokens.bin").st_ino) {
    EXPECT_GE(data.st_nlink, 2u);
  }
  EXPECT_FALSE(fs::exists(copy + "/.git"));
}

/// Through the launcher: a workload that appends to a file of its directory. Undeclared, the
/// write reaches the original through the link and the trial ends as contract_violation naming
/// the file; declared in workload.writable, the trial has its own copy and the original stays.
TEST_F(TrialCopyTest, AWorkloadWritingInPlaceMustDeclareTheFile) {
  // A log of 2 MiB (over link_min_bytes, so linked unless declared) that the job appends to.
  const std::string old_log = "old\n" + std::string(2 << 20, '.') + "\n";
  write(work + "/out/last.log", old_log);
  tuning::task_spec task;
  task.name = "writer";
  task.workload.workdir = work;
  task.workload.launcher = tuning::launcher_kind::command;
  task.workload.argv = {"/bin/sh", "-c", "echo run >> out/last.log"};
  task.limits.timeout_s = 30;
  task.scope.editable = {"train.py"};
  trial_request req;
  req.task = &task;
  req.scope_lock["train.py"] = *sha256_file(work + "/train.py");
  req.trial_dir = dir.sub("declared");
  task.workload.writable = {"out/*"};
  auto ok = run_trial(req);
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_EQ(text_of(work + "/out/last.log"), old_log);
  EXPECT_EQ(text_of(dir.sub("declared/workdir/out/last.log")), old_log + "run\n");
  EXPECT_EQ(ok->result->detail()->str().find("changed while the trial ran"), std::string::npos);

  task.workload.writable.clear();
  req.trial_dir = dir.sub("undeclared");
  auto caught = run_trial(req);
  ASSERT_TRUE(caught) << describe(caught.error());
  if (stat_of(dir.sub("undeclared/workdir/out/last.log")).st_ino !=
      stat_of(work + "/out/last.log").st_ino) {
    // A filesystem with copy-on-write clones: the copy was a clone, the original is safe.
    EXPECT_EQ(text_of(work + "/out/last.log"), old_log);
    return;
  }
  EXPECT_EQ(text_of(work + "/out/last.log"), old_log + "run\n");
  EXPECT_EQ(caught->result->outcome(), wire::Outcome::ContractViolation);
  EXPECT_NE(caught->result->detail()->str().find("'out/last.log' changed while the trial ran"),
            std::string::npos)
      << caught->result->detail()->str();
}

} // namespace
} // namespace infrarsi::adapters
