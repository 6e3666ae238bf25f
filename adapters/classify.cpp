#include "adapters/classify.hpp"

#include <algorithm>
#include <cstring>

namespace infrarsi::adapters {

namespace {

using kind = trial_cause::kind_t;

std::string rank_text(int rank) {
  return rank < 0 ? std::string{} : "rank " + std::to_string(rank) + ": ";
}

/// The start-up phase: before the reporting rank's first metrics line. Phase, not the clock: a
/// start-up that takes 2 s on an idle machine and 6 s on a loaded one fails the same way.
bool at_start(const trial_cause& c, const trial_observation& obs) {
  return obs.first_metrics_at_s < 0 || obs.first_metrics_at_s > c.at_s;
}

/// "; stderr: ..." quoting the tail of `rank`'s stderr, or "" when there is none.
std::string stderr_quote(const trial_observation& obs, int rank) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= obs.stderr_tails.size()
      || obs.stderr_tails[static_cast<std::size_t>(rank)].empty())
    return {};
  return "; stderr: " + obs.stderr_tails[static_cast<std::size_t>(rank)];
}

trial_verdict verdict_for(const trial_cause& c, const trial_observation& obs) {
  trial_verdict v;
  v.detail = rank_text(c.rank) + c.detail;
  switch (c.kind) {
    case kind::exec_failed: v.outcome = wire::Outcome::LaunchError; break;
    case kind::memory_cap:
    case kind::oom_text: v.outcome = wire::Outcome::Oom; break;
    case kind::timeout: v.outcome = wire::Outcome::Timeout; break;
    case kind::collective_text: {
      // A failed collective is a crash of the job (not of one setting's memory), named as such;
      // before the first metrics line it is a failed start (rendezvous).
      v.outcome = at_start(c, obs) ? wire::Outcome::LaunchError : wire::Outcome::Crash;
      v.detail = "collective communication failed: " + v.detail;
      break;
    }
    case kind::stop_requested: v.outcome = wire::Outcome::Preempted; break;
    case kind::contract_violation: v.outcome = wire::Outcome::ContractViolation; break;
    case kind::exit_nonzero:
    case kind::killed_by_signal: {
      v.exit_code = c.kind == kind::exit_nonzero ? c.code : -c.code;
      bool oom_code = c.kind == kind::exit_nonzero
                      && std::find(obs.oom_exit_codes.begin(), obs.oom_exit_codes.end(), c.code)
                           != obs.oom_exit_codes.end();
      if (oom_code)
        v.outcome = wire::Outcome::Oom;
      else if (at_start(c, obs))
        v.outcome = wire::Outcome::LaunchError;
      else
        v.outcome = wire::Outcome::Crash;
      break;
    }
  }
  // Why the rank failed, in its own words (a Python traceback's last lines); an OOM's detail
  // already quotes its line.
  if (v.outcome == wire::Outcome::LaunchError || v.outcome == wire::Outcome::Crash)
    v.detail += stderr_quote(obs, c.rank);
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
  // Collective text alone (every rank exited 0 and nothing else went wrong) decides nothing.
  const trial_cause* first = nullptr;
  bool failure = false;
  for (const auto& c : obs.causes) {
    if (obs.stop_began_at_s >= 0 && c.at_s > obs.stop_began_at_s)
      continue;
    failure = failure || c.kind != kind::collective_text;
    if (first == nullptr || c.at_s < first->at_s)
      first = &c;
  }
  // Collective text is what a rank prints when a peer is gone: a rank that printed none and
  // died by a signal or exited non-zero before the stop is the cause, although its peers' text
  // was read first (a rank's output is read as it is written, its death seen when it is reaped).
  if (first != nullptr && first->kind == kind::collective_text) {
    auto printed_collective = [&](int rank) {
      return std::any_of(obs.causes.begin(), obs.causes.end(), [&](const trial_cause& c) {
        return c.kind == kind::collective_text && c.rank == rank;
      });
    };
    const trial_cause* peer = nullptr;
    for (const auto& c : obs.causes) {
      if (obs.stop_began_at_s >= 0 && c.at_s > obs.stop_began_at_s)
        continue;
      if ((c.kind == kind::killed_by_signal || c.kind == kind::exit_nonzero) && c.rank >= 0
          && !printed_collective(c.rank) && (peer == nullptr || c.at_s < peer->at_s))
        peer = &c;
    }
    if (peer != nullptr)
      first = peer;
  }
  if (first != nullptr && (failure || !obs.all_exited_zero)) {
    auto v = verdict_for(*first, obs);
    // The exit status of the failing rank is evidence even when OOM or collective text came
    // first; for text of the whole trial, the first rank that failed.
    if (v.exit_code == 0) {
      const trial_cause* exit = nullptr;
      for (const auto& c : obs.causes) {
        bool status = c.kind == kind::exit_nonzero || c.kind == kind::killed_by_signal;
        if (status && (c.rank == first->rank || first->rank < 0)
            && (exit == nullptr || c.at_s < exit->at_s))
          exit = &c;
      }
      if (exit != nullptr)
        v.exit_code = exit->kind == kind::exit_nonzero ? exit->code : -exit->code;
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

const std::vector<collective_pattern>& collective_failure_patterns() {
  // Messages of PyTorch's c10d (ProcessGroupNCCL, ProcessGroupGloo, TCPStore), of NCCL and of
  // gloo's TCP transport, as they print them. Keep docs/node-runner.md's table in step.
  static const std::vector<collective_pattern> patterns = {
    {"Watchdog caught collective operation timeout", "NCCL watchdog: collective timed out"},
    {"ProcessGroupNCCL's watchdog got stuck", "NCCL watchdog stuck"},
    {"Some NCCL operations have failed or timed out", "NCCL operations failed or timed out"},
    {"NCCL error", "NCCL error"},
    {"NCCL communicator was aborted", "NCCL communicator aborted"},
    {"ncclInternalError", "NCCL internal error"},
    {"ncclSystemError", "NCCL system error"},
    {"ncclRemoteError", "NCCL remote error"},
    {"ncclUnhandledCudaError", "NCCL unhandled CUDA error"},
    {"DistBackendError", "distributed backend error"},
    {"DistNetworkError", "distributed network error"},
    {"DistStoreError", "rendezvous store error"},
    {"Connection closed by peer", "gloo: connection closed by peer"},
    {"Connection reset by peer", "connection reset by peer"},
    {"Gloo connectFullMesh failed", "gloo: connecting the ranks failed"},
    {"for recv operation to complete", "gloo: receive timed out"},
    {"for send operation to complete", "gloo: send timed out"},
  };
  return patterns;
}

const collective_pattern* find_collective_pattern(std::string_view line) {
  for (const auto& p : collective_failure_patterns())
    if (line.find(p.text) != std::string_view::npos)
      return &p;
  return nullptr;
}

void stderr_tail::add(std::string_view line) {
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  auto begin = line.find_first_not_of(" \t");
  if (begin == std::string_view::npos)
    return; // blank
  line.remove_prefix(begin);
  if (lines_.size() == max_lines)
    lines_.erase(lines_.begin());
  lines_.emplace_back(line.substr(0, max_chars));
}

std::string stderr_tail::text() const {
  // The newest lines that fit in max_chars (the exception line is the last one); each line was
  // cut to max_chars when added, so the newest always fits.
  std::size_t first = lines_.size();
  std::size_t chars = 0;
  while (first > 0 && chars + lines_[first - 1].size() <= max_chars) {
    chars += lines_[first - 1].size();
    --first;
  }
  std::string out;
  for (std::size_t i = first; i < lines_.size(); ++i)
    out += (out.empty() ? "" : " | ") + lines_[i];
  return out;
}

} // namespace infrarsi::adapters
