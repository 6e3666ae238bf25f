#include "adapters/disk_space.hpp"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "messages/errc.hpp"

namespace infrarsi::adapters {

caf::expected<std::uint64_t> free_bytes(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path p = fs::absolute(fs::path{dir.empty() ? "." : dir}).lexically_normal();
  std::error_code ec;
  while (!fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p)
    p = p.parent_path();
  struct statvfs st{};
  if (::statvfs(p.c_str(), &st) != 0)
    return make_error(errc::io_error, "directory '" + dir + "': cannot read its free space ("
                                        + p.string() + "): " + std::strerror(errno));
  return static_cast<std::uint64_t>(st.f_bavail) * static_cast<std::uint64_t>(st.f_frsize);
}

caf::error check_free_space(const std::vector<std::string>& dirs, std::uint64_t reserve_bytes) {
  if (reserve_bytes == 0)
    return caf::none;
  for (const auto& dir : dirs) {
    auto free = free_bytes(dir);
    if (!free)
      return std::move(free.error());
    if (*free < reserve_bytes)
      return make_error(errc::io_error,
                        "no space: directory '" + dir + "' has " + std::to_string(*free)
                          + " bytes free, below the reserve of " + std::to_string(reserve_bytes)
                          + " bytes (infrarsi tune --disk-reserve)");
  }
  return caf::none;
}

std::string free_space_note(const std::string& dir, std::uint64_t reserve_bytes) {
  auto free = free_bytes(dir);
  if (!free)
    return describe(free.error());
  return "directory '" + dir + "': " + std::to_string(*free) + " bytes free, reserve "
         + std::to_string(reserve_bytes) + " bytes";
}

} // namespace infrarsi::adapters
