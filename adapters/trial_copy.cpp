#include "adapters/trial_copy.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "adapters/environment.hpp"
#include "messages/errc.hpp"

namespace infrarsi::adapters {

namespace fs = std::filesystem;

namespace {

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

/// A copy-on-write clone of `from` at `to` (FICLONE); false when the filesystem cannot (then
/// nothing is left at `to`). `unsupported` is set when no clone will work on this filesystem.
bool reflink(const fs::path& from, const fs::path& to, mode_t mode, bool& unsupported) {
#ifdef FICLONE
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return false;
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777);
  if (out < 0) {
    ::close(in);
    return false;
  }
  int rc = ::ioctl(out, FICLONE, in);
  int err = errno;
  ::close(in);
  ::close(out);
  if (rc == 0)
    return true;
  ::unlink(to.c_str());
  unsupported =
      err == EOPNOTSUPP || err == ENOTTY || err == EINVAL || err == EXDEV || err == ENOSYS;
  return false;
#else
  (void)from;
  (void)to;
  (void)mode;
  unsupported = true;
  return false;
#endif
}

caf::error io_error(const std::string& what, const std::string& path, const std::string& why) {
  return make_error(errc::io_error, what + " '" + path + "': " + why);
}

} // namespace

caf::expected<workload_copy> copy_workload(const std::string& src, const std::string& dest,
                                           const copy_rules& rules) {
  workload_copy made;
  std::error_code ec;
  fs::remove_all(dest, ec);
  if (ec)
    return io_error("trial copy: cannot remove", dest, ec.message());
  fs::create_directories(dest, ec);
  if (ec)
    return io_error("trial copy: cannot create", dest, ec.message());
  const auto root = fs::canonical(src, ec);
  if (ec)
    return io_error("trial copy: workload directory", src, ec.message());
  const auto dest_abs = fs::canonical(dest, ec);
  bool try_reflink = rules.reflink;
  auto it = fs::recursive_directory_iterator{root, ec};
  if (ec)
    return io_error("trial copy: cannot read", src, ec.message());
  for (; it != fs::recursive_directory_iterator{}; it.increment(ec)) {
    if (ec)
      return io_error("trial copy: cannot read", it->path().string(), ec.message());
    const auto& from = it->path();
    const auto rel = from.lexically_relative(root).string(); // never through a link
    const auto to = fs::path{dest} / rel;
    // The repository's metadata is no part of a trial (a `.git` file is a worktree's link).
    if (from.filename() == ".git") {
      if (it->is_directory(ec))
        it.disable_recursion_pending();
      continue;
    }
    struct stat st {};
    if (::lstat(from.c_str(), &st) != 0)
      return io_error("trial copy: cannot stat", from.string(), std::strerror(errno));
    if (S_ISDIR(st.st_mode)) {
      // The directory holding this very copy (a store inside the workload) is left out.
      std::error_code e2;
      auto canon = fs::canonical(from, e2);
      if (!e2 && !dest_abs.empty()) {
        auto d = dest_abs.string();
        auto c = canon.string();
        if (d == c || d.rfind(c + "/", 0) == 0) {
          it.disable_recursion_pending();
          continue;
        }
      }
      fs::create_directory(to, ec);
      if (ec)
        return io_error("trial copy: cannot create", to.string(), ec.message());
      // The original's permission bits, plus what it takes to fill it (a read-only directory).
      ::chmod(to.c_str(), (st.st_mode & 07777) | S_IRWXU);
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      auto target = fs::read_symlink(from, ec);
      if (!ec)
        fs::create_symlink(target, to, ec);
      if (ec)
        return io_error("trial copy: cannot copy the link", from.string(), ec.message());
      ++made.symlinks;
      continue;
    }
    if (!S_ISREG(st.st_mode))
      continue; // sockets, FIFOs, devices: no part of a copy
    bool own = rules.own_paths.count(rel) != 0 || path_in_scope(rel, rules.own_globs);
    if (try_reflink) {
      bool unsupported = false;
      if (reflink(from, to, st.st_mode, unsupported)) {
        ++made.files_reflinked;
        continue;
      }
      if (unsupported)
        try_reflink = false; // this filesystem has no clones: stop asking
    }
    if (!own && static_cast<std::uint64_t>(st.st_size) >= rules.link_min_bytes
        && ::link(from.c_str(), to.c_str()) == 0) {
      made.linked.push_back({rel, static_cast<std::uint64_t>(st.st_size), mtime_ns(st)});
      ++made.files_linked;
      continue;
    }
    // Own bytes (or a link that failed: another filesystem, EMLINK, protected hard links).
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return io_error("trial copy: cannot copy", from.string(), ec.message());
    ++made.files_copied;
    made.bytes_copied += static_cast<std::uint64_t>(st.st_size);
  }
  return made;
}

std::set<std::string> paths_of_patch_files(const std::vector<std::string>& patch_files) {
  std::set<std::string> out;
  for (const auto& file : patch_files) {
    std::ifstream in{file};
    std::string text{std::istreambuf_iterator<char>{in}, {}};
    for (const auto& p : patch_paths(text))
      out.insert(p);
  }
  return out;
}

std::string written_through(const workload_copy& copy, const std::string& dest) {
  for (const auto& f : copy.linked) {
    struct stat st {};
    auto path = (fs::path{dest} / f.path).string();
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink < 2)
      continue; // removed, replaced or renamed over: the original was not written
    auto size = static_cast<std::uint64_t>(st.st_size);
    if (size == f.size && mtime_ns(st) == f.mtime_ns)
      continue;
    std::string change =
        size != f.size ? "size " + std::to_string(f.size) + " -> " + std::to_string(size) + " bytes"
                       : "modification time changed";
    return "workload file '" + f.path + "' changed while the trial ran (" + change +
           "); it is a hard link to the original, so the original changed too: list it under "
           "workload.writable";
  }
  return {};
}

std::string trial_dir_name(std::uint64_t trial_id, std::uint32_t attempt) {
  return "trial-" + std::to_string(trial_id) + "-" + std::to_string(attempt);
}

removed_copies
remove_trial_copies(const std::string& trials_dir,
                    const std::vector<std::pair<std::uint64_t, std::uint32_t>>& attempts) {
  removed_copies out;
  for (const auto& [id, attempt] : attempts)
    for (const char* sub : {"workdir", "smoke-unpatched/workdir", "smoke-patched/workdir"}) {
      auto dir = fs::path{trials_dir} / trial_dir_name(id, attempt) / sub;
      std::error_code ec;
      if (!fs::is_directory(fs::symlink_status(dir, ec)))
        continue;
      std::uint64_t own = 0;
      for (auto it = fs::recursive_directory_iterator{dir, ec};
           !ec && it != fs::recursive_directory_iterator{}; it.increment(ec)) {
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1)
          own += static_cast<std::uint64_t>(st.st_size);
      }
      ec.clear();
      fs::remove_all(dir, ec);
      if (ec) {
        if (out.error.empty())
          out.error = trial_dir_name(id, attempt) + "/" + sub + ": " + ec.message();
        continue;
      }
      ++out.copies;
      out.bytes += own;
    }
  return out;
}

} // namespace infrarsi::adapters
