#pragma once
/// @file headless_chromium.hpp
/// Headless Chromium for tests of pages (report.html, the daemon's dashboard): runs Debian's
/// `chromium` on one URL with its own temporary profile (--user-data-dir, removed afterwards),
/// no sandbox, no GPU, and returns the DOM after the page's scripts ran (--dump-dom) or writes
/// a screenshot (--screenshot). Chromium runs in its own process group, which is killed with
/// SIGKILL when it outlives the timeout and after it exits (its helpers too: zygote, crashpad).
/// Network: pages are file:// or http://127.0.0.1 only in this project's tests.
///
/// Header-only; POSIX (fork, execvp, setpgid, waitpid).

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace infrarsi::test {

/// The Chromium binary: $INFRARSI_CHROMIUM, else the first of chromium, chromium-browser,
/// google-chrome found executable on PATH. nullopt: none (a test then fails naming the Debian
/// package `chromium`; scripts/setup installs it).
inline std::optional<std::string> find_chromium() {
  if (const char* env = std::getenv("INFRARSI_CHROMIUM"); env != nullptr && *env != '\0')
    return std::string{env};
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    std::size_t start = 0;
    while (start <= dirs.size()) {
      auto end = dirs.find(':', start);
      if (end == std::string::npos)
        end = dirs.size();
      auto candidate = dirs.substr(start, end - start) + "/" + name;
      if (end > start && ::access(candidate.c_str(), X_OK) == 0)
        return candidate;
      start = end + 1;
    }
  }
  return std::nullopt;
}

/// What one Chromium run gave.
struct chromium_run {
  /// Exit status (-1: killed on timeout or by a signal, or it could not start).
  int exit_code = -1;
  bool timed_out = false;
  /// Its stdout (the DOM with --dump-dom) and stderr (Chromium's own log lines).
  std::string out;
  std::string err;
  /// Wall seconds it ran.
  double seconds = 0.0;
};

struct chromium_options {
  /// Chromium is killed (its whole process group) after this many seconds.
  double timeout_s = 60.0;
  /// Page scripts get this much virtual time before the DOM is dumped / the screenshot taken
  /// (--virtual-time-budget, milliseconds).
  int virtual_time_budget_ms = 5000;
  /// Viewport, pixels (--window-size).
  int width = 1280;
  int height = 4000;
  /// Extra switches.
  std::vector<std::string> extra_args;
};

/// Runs Chromium headless on `url` with `mode_args` (e.g. {"--dump-dom"} or
/// {"--screenshot=/path.png"}). Never throws; a start failure is exit_code -1 with the reason
/// in `err`.
inline chromium_run run_chromium(const std::string& url, const std::vector<std::string>& mode_args,
                                 const chromium_options& o = {}) {
  namespace fs = std::filesystem;
  chromium_run r;
  auto binary = find_chromium();
  if (!binary) {
    r.err = "chromium not found (install Debian's chromium, or set INFRARSI_CHROMIUM)";
    return r;
  }
  std::string tmpl = (fs::temp_directory_path() / "infrarsi-chromium-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    r.err = "mkdtemp failed";
    return r;
  }
  const std::string dir = buf.data();
  const std::string out_path = dir + "/stdout.txt";
  const std::string err_path = dir + "/stderr.txt";
  std::vector<std::string> args = {*binary,
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--disable-dev-shm-usage",
                                   "--no-first-run",
                                   "--no-default-browser-check",
                                   "--disable-extensions",
                                   "--disable-background-networking",
                                   "--disable-component-update",
                                   "--disable-sync",
                                   "--hide-scrollbars",
                                   "--user-data-dir=" + dir + "/profile",
                                   "--window-size=" + std::to_string(o.width) + ","
                                     + std::to_string(o.height),
                                   "--virtual-time-budget="
                                     + std::to_string(o.virtual_time_budget_ms)};
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  args.insert(args.end(), mode_args.begin(), mode_args.end());
  args.push_back(url);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid < 0) {
    r.err = "fork failed";
    fs::remove_all(dir);
    return r;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (out_fd < 0 || err_fd < 0 || null_fd < 0)
      ::_exit(126);
    ::dup2(null_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid); // both sides, so the group exists before any kill below
  int status = 0;
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid)
      break;
    if (w < 0 && errno != EINTR)
      break;
    double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > o.timeout_s) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid, SIGKILL); // helpers that outlived the browser process (ESRCH when none)
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!r.timed_out && WIFEXITED(status))
    r.exit_code = WEXITSTATUS(status);
  auto slurp = [](const std::string& path) {
    std::ifstream in{path, std::ios::binary};
    return std::string{std::istreambuf_iterator<char>{in}, {}};
  };
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return r;
}

/// The DOM of `url` after its scripts ran (--dump-dom); with `screenshot_png`, the same load
/// also writes a PNG screenshot of the viewport there (one Chromium start for both).
inline chromium_run chromium_dump_dom(const std::string& url, const chromium_options& o = {},
                                      const std::string& screenshot_png = {}) {
  if (screenshot_png.empty())
    return run_chromium(url, {"--dump-dom"}, o);
  return run_chromium(url, {"--dump-dom", "--screenshot=" + screenshot_png}, o);
}

/// Writes a PNG screenshot of `url` (viewport o.width x o.height) to `png_path`.
inline chromium_run chromium_screenshot(const std::string& url, const std::string& png_path,
                                        const chromium_options& o = {}) {
  return run_chromium(url, {"--screenshot=" + png_path}, o);
}

/// file:// URL of an absolute path (percent-encodes what a URL path may not hold).
inline std::string file_url(const std::string& absolute_path) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "file://";
  for (unsigned char c : absolute_path) {
    if (std::isalnum(c) != 0 || c == '/' || c == '-' || c == '_' || c == '.' || c == '~')
      out += static_cast<char>(c);
    else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

} // namespace infrarsi::test
