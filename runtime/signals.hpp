#pragma once
/// @file signals.hpp
/// SIGINT and SIGTERM for the long-running commands (tune, daemon, node).

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <ostream>
#include <string>
#include <thread>

#include "adapters/process.hpp"

namespace infrarsi::runtime {

/// SIGINT and SIGTERM, blocked in every thread while a run is in progress and taken by one
/// thread with sigtimedwait: the first is sent to the supervisor, a second kills every trial's
/// process group and exits at once.
class signal_guard {
public:
  signal_guard() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~signal_guard() {
    stop_ = true;
    if (thread_.joinable())
      thread_.join();
    // A signal that arrived after the run ended is dropped, not delivered on unblocking.
    timespec zero{0, 0};
    while (sigtimedwait(&set_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  signal_guard(const signal_guard&) = delete;
  signal_guard& operator=(const signal_guard&) = delete;

  /// Starts the waiting thread; `on_first(signal)` runs on it for the first signal.
  void start(std::string command, std::function<void(int)> on_first, std::ostream& err) {
    thread_ = std::thread{[this, command, on_first = std::move(on_first), &err] {
      int seen = 0;
      while (!stop_) {
        timespec tick{0, 200'000'000};
        int sig = sigtimedwait(&set_, nullptr, &tick);
        if (sig <= 0)
          continue;
        if (++seen == 1) {
          err << "\n" << command << ": " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
              << ": stopping — no new trials, ending the running ones (a second signal exits at "
                 "once)"
              << std::endl;
          on_first(sig);
        } else {
          auto killed = adapters::signal_all_groups(SIGKILL);
          err << "\n" << command << ": second signal: killed " << killed
              << " trial process group(s); exiting now" << std::endl;
          std::_Exit(128 + sig);
        }
      }
    }};
  }

private:
  sigset_t set_{};
  sigset_t old_{};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};


} // namespace infrarsi::runtime
