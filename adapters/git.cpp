#include "adapters/git.hpp"

#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "adapters/environment.hpp"
#include "messages/errc.hpp"

namespace infrarsi::adapters {

namespace {

namespace fs = std::filesystem;

/// Outcome of one git command: `ok` when it ran and exited 0; otherwise `reason` is
/// "<step>: <its stderr>" (or why it could not run).
struct git_result {
  bool ok = false;
  std::string out;
  std::string reason;
};

std::string trim(std::string s) {
  auto end = s.find_last_not_of(" \t\r\n");
  s.erase(end == std::string::npos ? 0 : end + 1);
  auto begin = s.find_first_not_of(" \t\r\n");
  return begin == std::string::npos ? std::string{} : s.substr(begin);
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

git_result git(std::vector<std::string> args, const std::string& cwd, const std::string& step) {
  args.insert(args.begin(), "git");
  auto r = run_command(args, cwd);
  if (!r)
    return {false, {}, step + ": " + describe(r.error())};
  if (r->exit_status != 0) {
    auto detail = trim(r->err.empty() ? r->out : r->err);
    return {false, std::move(r->out),
            step + ": " +
                (detail.empty() ? "exit status " + std::to_string(r->exit_status) : detail)};
  }
  return {true, std::move(r->out), {}};
}

/// Removes the worktree at `tree` however a crashed attempt left it: registered or not, present
/// or not. Failures are swallowed: what remains is pruned on the next call.
void remove_worktree(const std::string& root, const std::string& tree) {
  static_cast<void>(
      git({"worktree", "remove", "--force", "--force", tree}, root, "worktree remove"));
  std::error_code ec;
  fs::remove_all(tree, ec);
  static_cast<void>(git({"worktree", "prune"}, root, "worktree prune"));
}

nlohmann::json refused(const promotion_commit& c, const std::string& reason) {
  return {{"committed", false},
          {"branch", c.branch},
          {"commit", ""},
          {"already", false},
          {"reason", reason}};
}

} // namespace

nlohmann::json commit_promotion(const promotion_commit& c) {
  auto where = git({"rev-parse", "--show-toplevel", "--show-prefix"}, c.workdir, "git rev-parse");
  if (!where.ok)
    return refused(c, "the workload is not in a git repository");
  auto newline = where.out.find('\n');
  std::string root = where.out.substr(0, newline);
  std::string prefix =
      newline == std::string::npos ? std::string{} : first_line(where.out.substr(newline + 1));
  while (!prefix.empty() && prefix.back() == '/')
    prefix.pop_back();
  std::string subdir = prefix.empty() ? "." : prefix;

  if (c.branch.empty() || !git({"check-ref-format", "--branch", c.branch}, root, "").ok)
    return refused(c, "invalid branch name '" + c.branch + "'");
  if (c.scratch_dir.empty())
    return refused(c, "no scratch directory for the temporary worktree");

  std::error_code ec;
  auto scratch = fs::absolute(c.scratch_dir, ec).lexically_normal();
  fs::create_directories(scratch, ec);
  if (ec)
    return refused(c, "cannot create the scratch directory '" + scratch.string() +
                          "': " + ec.message());
  auto tree = (scratch / "promotion-worktree").string();
  remove_worktree(root, tree);

  // An existing branch is checked, not moved: its content is rebuilt on the parent of its tip.
  auto ref = "refs/heads/" + c.branch;
  auto tip = git({"rev-parse", "--verify", "--quiet", ref + "^{commit}"}, root, "");
  std::string base;
  if (tip.ok) {
    tip.out = first_line(tip.out);
    if (auto parent = git({"rev-parse", "--verify", "--quiet", tip.out + "^1"}, root, "");
        parent.ok)
      base = first_line(parent.out);
  }
  if (base.empty()) {
    auto head = git({"rev-parse", "--verify", "HEAD^{commit}"}, root, "git rev-parse HEAD");
    if (!head.ok)
      return refused(c, head.reason);
    base = first_line(head.out);
  }

  auto fail = [&](const std::string& reason) {
    remove_worktree(root, tree);
    return refused(c, reason);
  };
  if (auto r = git({"worktree", "add", "--detach", tree, base}, root, "git worktree add"); !r.ok)
    return fail(r.reason);
  for (const auto& file : c.patch_files) {
    auto patch = fs::absolute(file, ec).string();
    std::vector<std::string> args{"apply"};
    if (subdir != ".")
      args.push_back("--directory=" + subdir);
    args.push_back(patch);
    if (auto r = git(args, tree, "git apply " + patch); !r.ok)
      return fail(r.reason);
  }
  auto launch_rel = (subdir == "." ? std::string{} : subdir + "/") + "promoted/launch.json";
  {
    auto launch_path = fs::path{tree} / launch_rel;
    fs::create_directories(launch_path.parent_path(), ec);
    std::ofstream out{launch_path, std::ios::binary | std::ios::trunc};
    out << c.launch_json;
    out.close();
    if (!out)
      return fail("cannot write '" + launch_path.string() + "'");
  }
  if (auto r = git({"add", "-A", "--", subdir}, tree, "git add"); !r.ok)
    return fail(r.reason);
  if (auto r = git({"add", "-f", "--", launch_rel}, tree, "git add " + launch_rel); !r.ok)
    return fail(r.reason);
  auto written = git({"write-tree"}, tree, "git write-tree");
  if (!written.ok)
    return fail(written.reason);
  auto new_tree = first_line(written.out);

  if (tip.ok) {
    auto tip_tree = git({"rev-parse", tip.out + "^{tree}"}, root, "git rev-parse");
    remove_worktree(root, tree);
    if (!tip_tree.ok)
      return refused(c, tip_tree.reason);
    if (first_line(tip_tree.out) != new_tree)
      return refused(c, "branch " + c.branch + " already exists with other content (commit " +
                            tip.out + ")");
    return {{"committed", true}, {"branch", c.branch}, {"commit", tip.out}, {"already", true}};
  }

  auto commit = git({"-c", "user.name=infrarsi", "-c", "user.email=infrarsi@localhost",
                     "commit-tree", new_tree, "-p", base, "-m",
                     c.message.empty() ? std::string{"infrarsi: promotion"} : c.message},
                    tree, "git commit-tree");
  remove_worktree(root, tree);
  if (!commit.ok)
    return refused(c, commit.reason);
  auto hash = first_line(commit.out);
  if (auto r = git({"branch", "--no-track", c.branch, hash}, root, "git branch"); !r.ok)
    return refused(c, r.reason);
  return {{"committed", true}, {"branch", c.branch}, {"commit", hash}, {"already", false}};
}

} // namespace infrarsi::adapters
