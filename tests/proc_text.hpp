#pragma once
// Reading /proc files from tests without exceptions.
//
// A /proc/PID file whose process exits while it is read fails with ESRCH. Through
// std::istreambuf_iterator that error is an exception thrown by basic_filebuf::underflow, which
// no istream catches: a test that walked /proc while a trial ended aborted ("basic_filebuf::
// underflow error reading the file: No such process"). These helpers read with open/read and
// return what was read before any error.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace infrarsi::test {

/// The bytes of `path` (a /proc file or any other), "" when it cannot be opened; a read error
/// (ESRCH: the process is gone) ends the text where it happened. Never throws.
inline std::string proc_text(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return {};
  std::string out;
  char buf[4096];
  for (;;) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

} // namespace infrarsi::test
