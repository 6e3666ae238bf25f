#pragma once
/// @file git.hpp
/// Committing a promotion to the workload's git repository without touching the user's checkout:
/// the promoted patches and the launch configuration are applied in a temporary worktree and
/// committed on a new branch (docs/tune.md, the apply stage). Runs the `git` program.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace infrarsi::adapters {

/// One promotion to commit.
struct promotion_commit {
  /// The workload directory (may be a subdirectory of the repository).
  std::string workdir;
  /// Branch to create, e.g. "infrarsi/<run id>" (a valid branch name).
  std::string branch;
  /// Patch files to apply, in order (unified diffs with paths relative to the workload
  /// directory; relative file names are taken relative to the current directory).
  std::vector<std::string> patch_files;
  /// Exact content of promoted/launch.json (relative to the workload directory) to commit.
  std::string launch_json;
  /// Commit message ("infrarsi: promotion" when empty).
  std::string message;
  /// Directory in which the temporary worktree <scratch_dir>/promotion-worktree is created
  /// (created if missing; whatever a crashed earlier attempt left there is removed first).
  std::string scratch_dir;
};

/// Commits a promotion on a new branch of the workload's repository: a temporary worktree at HEAD
/// (detached), `git apply --directory=<subdir>` of each patch, <subdir>/promoted/launch.json
/// written (added even where .gitignore matches it), `git add -A -- <subdir>`, a commit by
/// infrarsi <infrarsi@localhost> with HEAD as parent (`git commit-tree`: no hooks run), then the
/// branch is created at that commit and the worktree removed. The user's working tree, index and
/// current branch are never touched. The branch only ever appears with the finished commit.
///
/// Idempotent: when the branch already exists, the same content is built on the parent of its
/// tip; an equal tree means the promotion is already committed (a resume after a crash).
///
/// Returns {"committed": bool, "branch": c.branch, "commit": full hash or "", "already": bool,
/// "reason": text (only when not committed)}:
/// - committed, !already: a new branch at a new commit;
/// - committed, already: the branch existed with exactly this content; commit is its tip;
/// - not committed, reason "the workload is not in a git repository", "branch B already exists
///   with other content (commit H)", "invalid branch name 'B'", or a failed git step with its
///   stderr, e.g. "git apply /p/fused.patch: error: patch failed: model.py:12".
/// Cost: one checkout of the repository's HEAD in the scratch directory.
nlohmann::json commit_promotion(const promotion_commit& c);

} // namespace infrarsi::adapters
