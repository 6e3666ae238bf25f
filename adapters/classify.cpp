#include "adapters/classify.hpp"

#include <algorithm>
#include <cstring>

namespace infrarsi::adapters {

namespace {

using kind = trial_cause::kind_t;

std::string rank_text(int rank) {
  return rank < 0 ? std::string{} : "rank " + std::to_string(rank) + ": ";
}

trial_verdict verdict_for(const trial_cause& c, const trial_observation& obs) {
  trial_verdict v;
  v.detail = rank_text(c.rank) + c.detail;
  switch (c.kind) {
    case kind::exec_failed: v.outcome = wire::Outcome::LaunchError; break;
    case kind::memory_cap:
    case kind::oom_text: v.outcome = wire::Outcome::Oom; break;
    case kind::timeout: v.outcome = wire::Outcome::Timeout; break;
    case kind::stop_requested: v.outcome = wire::Outcome::Preempted; break;
    case kind::exit_nonzero:
    case kind::killed_by_signal: {
      v.exit_code = c.kind == kind::exit_nonzero ? c.code : -c.code;
      bool oom_code = c.kind == kind::exit_nonzero
                      && std::find(obs.oom_exit_codes.begin(), obs.oom_exit_codes.end(), c.code)
                           != obs.oom_exit_codes.end();
      bool early = c.at_s <= obs.launch_window_s
                   && (obs.first_metrics_at_s < 0 || obs.first_metrics_at_s > c.at_s);
      if (oom_code)
        v.outcome = wire::Outcome::Oom;
      else if (early)
        v.outcome = wire::Outcome::LaunchError;
      else
        v.outcome = wire::Outcome::Crash;
      break;
    }
  }
  return v;
}

} // namespace

trial_verdict classify(const trial_observation& obs) {
  // Rule 1: could not start at all.
  for (const auto& c : obs.causes)
    if (c.kind == kind::exec_failed)
      return verdict_for(c, obs);
  // Rule 2: the earliest cause before the launcher began stopping the trial. Causes the launcher
  // itself triggers (memory cap, timeout, stop request) are recorded before it stops anything.
  const trial_cause* first = nullptr;
  for (const auto& c : obs.causes) {
    if (obs.stop_began_at_s >= 0 && c.at_s > obs.stop_began_at_s)
      continue;
    if (first == nullptr || c.at_s < first->at_s)
      first = &c;
  }
  if (first != nullptr) {
    auto v = verdict_for(*first, obs);
    // The exit status of the failing rank is evidence even when OOM text came first.
    if (v.exit_code == 0)
      for (const auto& c : obs.causes)
        if (c.kind == kind::exit_nonzero && c.rank == first->rank) {
          v.exit_code = c.code;
          break;
        }
    return v;
  }
  // Rule 3: everyone exited 0.
  trial_verdict v;
  if (!obs.all_exited_zero) {
    v.outcome = wire::Outcome::Crash;
    v.detail = "ranks ended without a recorded cause";
  } else if (obs.final_line_required && !obs.final_line_seen) {
    v.outcome = wire::Outcome::Crash;
    v.detail = "exited 0 without the final metrics line";
  } else if (obs.final_line_seen && !obs.final_line_ok) {
    v.outcome = wire::Outcome::Crash;
    v.detail = "the final metrics line reports a status other than ok";
  } else {
    v.outcome = wire::Outcome::Ok;
    v.detail = "completed";
  }
  return v;
}

} // namespace infrarsi::adapters
