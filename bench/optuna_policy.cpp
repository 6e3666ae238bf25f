// Optuna's TPE sampler as a planner_policy (bench/optuna_policy.hpp), for benchmarks only.
//
// The search space sent to bench/optuna_tpe.py: every knob with its search values (the same
// discretization as tuning/planner.cpp: explicit lists; booleans false, true; integer ranges of
// at most 64 values in full, else 8 evenly spaced points; real ranges at 5 evenly spaced
// points; the default always included), and every patch of the task that is not excluded.
//
// The history sent: baseline and explore trials that have finished, in log order, except lost
// and preempted ones (they say nothing about the configuration); a usable trial (ok and passed
// the contract) as "ok" with value ln(timed_step_time_s), every other one (OOM, crash, timeout,
// launch error, contract violation) as "fail" (which TPE ignores: it may propose an OOM
// configuration again and again; with this task's synthetic objective in the check, one seed
// spent 14 of 40 trials repeating one OOM configuration). Trials whose configuration lies outside
// the space (a knob value off the grid, an excluded patch) cannot be told to a study over that
// space and are left out.
//
// One proposal per request: each accepted proposal of a batch goes back as "pending" before the
// next request, and a proposal that violates a task constraint or pairs incompatible patches is
// sent back as "pruned" (marked invalid) and asked again (not a trial; at most max_reasks times
// per proposal, then the batch ends with a stop reason). Pruned, not failed: Optuna's samplers
// ignore failed trials, and once TPE has left its random start-up its choice is in effect
// determined by the complete trials, so a rejected proposal told as failed comes back on every
// re-ask (measured on sim-dense-1node: 201 rejections in a row). TPE ranks pruned trials below
// complete ones and moves away from them, which is the Optuna maintainers' advice for infeasible
// combinations (optuna/optuna#566). Duplicates of tried configurations are proposed as TPE
// gives them.
//
// The child: `python script` started with posix_spawnp on the first call (`python` is looked up
// on PATH when it has no '/'), with PYTHONHASHSEED=0; its stdin and stdout are both one end of a
// Unix socketpair (sends use MSG_NOSIGNAL, so a dead child is an error, not a SIGPIPE), its
// stderr an unlinked temporary file whose tail is quoted when something goes wrong. It ends
// when the policy does (EOF on its stdin; SIGKILL after 2 s).

#include "bench/optuna_policy.hpp"

#include "tuning/search_space.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <stdexcept>
#include <utility>

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

extern char** environ;

namespace infrarsi::bench {
namespace {

using nlohmann::json;
using tuning::configuration;
using tuning::knob_spec;
using tuning::knob_type;
using tuning::knob_value;

/// Re-asks allowed per proposal when the proposal breaks a constraint.
constexpr int max_reasks = 200;
/// Longest wait for one response, milliseconds (a stuck interpreter must not hang a benchmark).
constexpr int response_timeout_ms = 300'000;
/// Bytes of the child's stderr quoted in an error message (its tail).
constexpr off_t stderr_quote_bytes = 4096;

/// A knob value as plain JSON (integer, float, bool, string: the variant's own type).
json value_to_json(const knob_value& v) {
  return std::visit([](const auto& x) { return json(x); }, v);
}

/// A JSON value as a value of the knob's type, or nullopt when the JSON type does not fit.
std::optional<knob_value> value_from_json(const knob_spec& k, const json& j) {
  switch (k.type) {
  case knob_type::integer:
    if (j.is_number_integer())
      return knob_value{j.get<std::int64_t>()};
    return std::nullopt;
  case knob_type::real:
    if (j.is_number())
      return knob_value{j.get<double>()};
    return std::nullopt;
  case knob_type::boolean:
    if (j.is_boolean())
      return knob_value{j.get<bool>()};
    return std::nullopt;
  case knob_type::choice:
    if (j.is_string())
      return knob_value{j.get<std::string>()};
    return std::nullopt;
  }
  return std::nullopt;
}

/// The search space: knobs with their values, and the proposable patches (sorted).
struct search_space {
  std::vector<std::pair<const knob_spec*, std::vector<knob_value>>> knobs;
  std::vector<std::string> patches;

  search_space(const tuning::task_spec& task, const std::vector<std::string>& excluded) {
    for (const auto& k : task.knobs)
      knobs.emplace_back(&k, tuning::search_values(k));
    for (const auto& p : task.patches)
      if (std::find(excluded.begin(), excluded.end(), p.name) == excluded.end())
        patches.push_back(p.name);
    std::sort(patches.begin(), patches.end());
  }

  [[nodiscard]] json to_json() const {
    json ks = json::array();
    for (const auto& [k, values] : knobs) {
      json vs = json::array();
      for (const auto& v : values)
        vs.push_back(value_to_json(v));
      ks.push_back({{"name", k->name}, {"values", std::move(vs)}});
    }
    return {{"knobs", std::move(ks)}, {"patches", patches}};
  }

  /// Whether the configuration is a point of this space (every knob on its grid, no other
  /// knob, only proposable patches).
  [[nodiscard]] bool contains(const configuration& c) const {
    if (c.knobs.size() != knobs.size())
      return false;
    for (const auto& [k, values] : knobs) {
      auto it = c.knobs.find(k->name);
      if (it == c.knobs.end() ||
          std::find(values.begin(), values.end(), it->second) == values.end())
        return false;
    }
    return std::all_of(c.patches.begin(), c.patches.end(), [&](const std::string& p) {
      return std::binary_search(patches.begin(), patches.end(), p);
    });
  }

  /// A proposal of the script as a configuration; throws when it is not a point of the space.
  [[nodiscard]] configuration from_json(const json& j, const std::string& who) const {
    auto bad = [&](const std::string& what) {
      return std::runtime_error(who + ": protocol error: proposal " + what + ": " + j.dump());
    };
    if (!j.is_object() || !j.contains("knobs") || !j["knobs"].is_object() ||
        !j.contains("patches") || !j["patches"].is_array())
      throw bad("is not {\"knobs\": {...}, \"patches\": [...]}");
    configuration c;
    for (const auto& [k, values] : knobs) {
      auto it = j["knobs"].find(k->name);
      if (it == j["knobs"].end())
        throw bad("lacks knob " + k->name);
      auto v = value_from_json(*k, *it);
      if (!v || std::find(values.begin(), values.end(), *v) == values.end())
        throw bad("has " + k->name + " = " + it->dump() + ", not one of its values");
      c.knobs.emplace(k->name, std::move(*v));
    }
    if (j["knobs"].size() != knobs.size())
      throw bad("has a knob that is not in the space");
    for (const auto& p : j["patches"]) {
      if (!p.is_string() ||
          !std::binary_search(patches.begin(), patches.end(), p.get<std::string>()))
        throw bad("has a patch that is not in the space");
      c.patches.push_back(p.get<std::string>());
    }
    std::sort(c.patches.begin(), c.patches.end());
    if (std::adjacent_find(c.patches.begin(), c.patches.end()) != c.patches.end())
      throw bad("repeats a patch");
    return c;
  }
};

json config_to_json(const configuration& c) {
  json knobs = json::object();
  for (const auto& [name, v] : c.knobs)
    knobs[name] = value_to_json(v);
  return {{"knobs", std::move(knobs)}, {"patches", c.patches}};
}

/// One history entry of the protocol: state "ok" (value: ln seconds), "fail", "pruned" or
/// "pending".
json history_entry(const configuration& c, const char* state, std::optional<double> value,
                   bool invalid = false) {
  json h = {{"config", config_to_json(c)}, {"state", state}, {"value", nullptr}};
  if (value)
    h["value"] = *value;
  if (invalid)
    h["invalid"] = true;
  return h;
}

/// Why the configuration may not be proposed ("" if it may): a task constraint, or two patches
/// that do not apply together.
std::string rejection(const tuning::planner_input& in, const configuration& c) {
  auto why = tuning::constraint_violation(*in.task, c);
  if (!why.empty())
    return why;
  auto has = [&](const std::string& p) {
    return std::binary_search(c.patches.begin(), c.patches.end(), p);
  };
  for (const auto& [a, b] : in.incompatible_patches)
    if (has(a) && has(b))
      return "patches " + a + " and " + b + " do not apply together";
  return "";
}

/// The Python child: one JSON line out, one JSON line back. Not thread-safe (the policy locks).
class child_process {
public:
  child_process(const std::string& python, const std::string& script)
    : who_(script + " (" + python + ")") {
    if (::access(script.c_str(), R_OK) != 0)
      throw std::runtime_error(who_ + ": cannot read the script: " + std::strerror(errno));
    stderr_file_ = std::tmpfile();
    if (stderr_file_ == nullptr)
      throw std::runtime_error(who_ + ": cannot create a file for stderr: " + std::strerror(errno));
    std::array<int, 2> fds{};
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds.data()) != 0) {
      auto err = errno;
      std::fclose(stderr_file_);
      throw std::runtime_error(who_ + ": socketpair: " + std::strerror(err));
    }
    fd_ = fds[0];
    int child_end = fds[1];

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, child_end, STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, child_end, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, ::fileno(stderr_file_), STDERR_FILENO);
    // The environment as inherited, with a fixed hash seed (determinism) and no .pyc writes.
    std::vector<std::string> env_text = {"PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1"};
    for (char** e = environ; e != nullptr && *e != nullptr; ++e)
      if (std::strncmp(*e, "PYTHONHASHSEED=", 15) != 0 &&
          std::strncmp(*e, "PYTHONDONTWRITEBYTECODE=", 24) != 0)
        env_text.emplace_back(*e);
    std::vector<char*> env;
    for (auto& s : env_text)
      env.push_back(s.data());
    env.push_back(nullptr);
    std::string arg0 = python, arg1 = script;
    std::array<char*, 3> argv{arg0.data(), arg1.data(), nullptr};
    int rc = ::posix_spawnp(&pid_, python.c_str(), &actions, nullptr, argv.data(), env.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(child_end);
    if (rc != 0) {
      ::close(fd_);
      std::fclose(stderr_file_);
      throw std::runtime_error(who_ + ": cannot start the interpreter: " + std::strerror(rc));
    }
  }

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// Ends the child: EOF on its stdin (it exits 0), SIGKILL if it has not exited within 2 s.
  ~child_process() {
    ::close(fd_);
    if (pid_ > 0 && !reap(2000)) {
      ::kill(pid_, SIGKILL);
      reap(-1);
    }
    std::fclose(stderr_file_);
  }

  /// Sends one request line and returns the response line (without '\n'). Throws
  /// std::runtime_error when the child has died, closed its output or timed out; the child is
  /// then unusable.
  std::string exchange(const std::string& request) {
    std::string line = request + "\n";
    std::size_t sent = 0;
    while (sent < line.size()) {
      auto w = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0)
        throw failure(std::string("cannot send the request: ") + std::strerror(errno));
      sent += static_cast<std::size_t>(w);
    }
    for (;;) {
      auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string response = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return response;
      }
      pollfd p{fd_, POLLIN, 0};
      int ready = ::poll(&p, 1, response_timeout_ms);
      if (ready < 0 && errno == EINTR)
        continue;
      if (ready < 0)
        throw failure(std::string("poll: ") + std::strerror(errno));
      if (ready == 0)
        throw failure("no response within " + std::to_string(response_timeout_ms / 1000) + " s");
      std::array<char, 65536> chunk{};
      auto r = ::read(fd_, chunk.data(), chunk.size());
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        throw failure(std::string("cannot read the response: ") + std::strerror(errno));
      if (r == 0)
        throw failure("closed its output");
      buffer_.append(chunk.data(), static_cast<std::size_t>(r));
    }
  }

  [[nodiscard]] const std::string& who() const { return who_; }

private:
  /// Waits for the child to exit, at most `ms` milliseconds (< 0: forever). True when reaped.
  bool reap(int ms) {
    for (int waited = 0;; waited += 10) {
      int status = 0;
      auto r = ::waitpid(pid_, &status, ms < 0 ? 0 : WNOHANG);
      if (r < 0 && errno == EINTR)
        continue;
      if (r == pid_) {
        exit_status_ = status;
        pid_ = -1;
        return true;
      }
      if (r < 0 || ms < 0) { // not our child any more (or reaped elsewhere): nothing to wait for
        pid_ = -1;
        return true;
      }
      if (waited >= ms)
        return false;
      timespec ts{0, 10'000'000};
      ::nanosleep(&ts, nullptr);
    }
  }

  /// The error for `what`, with how the child ended and the tail of its stderr.
  std::runtime_error failure(const std::string& what) {
    std::string msg = who_ + ": " + what;
    if (pid_ > 0 && !reap(500)) {
      ::kill(pid_, SIGKILL);
      reap(-1);
    }
    if (exit_status_ && WIFEXITED(*exit_status_))
      msg += "; exited with status " + std::to_string(WEXITSTATUS(*exit_status_));
    else if (exit_status_ && WIFSIGNALED(*exit_status_))
      msg += "; killed by signal " + std::to_string(WTERMSIG(*exit_status_));
    struct stat st {};
    if (::fstat(::fileno(stderr_file_), &st) == 0 && st.st_size > 0) {
      off_t from = std::max<off_t>(0, st.st_size - stderr_quote_bytes);
      std::string text(static_cast<std::size_t>(st.st_size - from), '\0');
      auto r = ::pread(::fileno(stderr_file_), text.data(), text.size(), from);
      text.resize(r > 0 ? static_cast<std::size_t>(r) : 0);
      while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
        text.pop_back();
      msg += "; stderr" + std::string(from > 0 ? " (tail)" : "") + ":\n" + text;
    } else {
      msg += "; nothing on stderr";
    }
    return std::runtime_error(msg);
  }

  std::string who_;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::FILE* stderr_file_ = nullptr;
  std::string buffer_;
  std::optional<int> exit_status_;
};

class optuna_tpe_policy final : public tuning::planner_policy {
public:
  optuna_tpe_policy(std::string script, std::string python, optuna_failures failures)
    : script_(std::move(script)), python_(std::move(python)), failures_(failures) {}

  [[nodiscard]] std::string name() const override { return optuna_policy_name(failures_); }

  [[nodiscard]] std::vector<tuning::proposal> propose(const tuning::planner_input& in,
                                                      std::size_t n) const override {
    return plan(in, n).proposals;
  }

  [[nodiscard]] tuning::proposal_batch plan(const tuning::planner_input& in,
                                            std::size_t n) const override {
    if (in.task == nullptr)
      throw std::invalid_argument(name() + ": planner_input.task is null");
    tuning::proposal_batch out;
    if (n == 0)
      return out;
    search_space space(*in.task, in.excluded_patches);
    json history = json::array();
    std::size_t complete = 0;
    for (const auto& t : in.history) {
      if ((t.purpose != "baseline" && t.purpose != "explore") || !t.finished ||
          t.outcome == tuning::trial_outcome::lost ||
          t.outcome == tuning::trial_outcome::preempted || !space.contains(t.config))
        continue;
      if (t.usable()) {
        history.push_back(history_entry(t.config, "ok", std::log(t.timed_step_time_s)));
        ++complete;
      } else {
        // optuna_tpe_fair/1: pruned, so TPE ranks the failed configuration below every complete
        // one and moves away from it (as it does for a rejected proposal);
        // optuna_tpe_constrained/1: a complete trial that violates the constraint.
        const char* state = failures_ == optuna_failures::pruned       ? "pruned"
                            : failures_ == optuna_failures::constraint ? "infeasible"
                                                                       : "fail";
        history.push_back(history_entry(t.config, state, std::nullopt));
      }
    }
    json request = {
        {"space", space.to_json()}, {"history", std::move(history)}, {"seed", in.seed}, {"n", 1}};
    if (failures_ == optuna_failures::constraint)
      request["constraints"] = true;

    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t pruned = 0; // rejected proposals told so far in this batch
    while (out.proposals.size() < n) {
      int rejected = 0;
      std::string last_rejection;
      for (;;) {
        auto [config, startup] = ask(space, request);
        auto why = rejection(in, config);
        if (why.empty()) {
          tuning::proposal p;
          p.reason = std::string(startup ? "optuna TPE start-up (random)" : "optuna TPE model") +
                     ": " + std::to_string(complete) + " complete trials and " +
                     std::to_string(pruned) + " rejected proposals told";
          request["history"].push_back(history_entry(config, "pending", std::nullopt));
          p.config = std::move(config);
          out.proposals.push_back(std::move(p));
          break;
        }
        request["history"].push_back(history_entry(config, "pruned", std::nullopt, true));
        ++pruned;
        last_rejection = why;
        if (++rejected > max_reasks) {
          out.stop_reason = name() + ": " + std::to_string(max_reasks + 1) +
                            " proposals in a row broke constraints (last: " + last_rejection + ")";
          return out;
        }
      }
    }
    return out;
  }

private:
  /// One request/response round trip: the proposal, and whether it is a random start-up
  /// sample. Starts the child on first use, drops it on I/O errors (the next call starts a
  /// fresh one). Caller holds mutex_.
  std::pair<configuration, bool> ask(const search_space& space, const json& request) const {
    if (!child_)
      child_ = std::make_unique<child_process>(python_, script_);
    std::string line;
    try {
      line = child_->exchange(request.dump());
    } catch (...) {
      child_.reset();
      throw;
    }
    const std::string who = child_->who();
    json response = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (response.is_object() && response.contains("error")) // a bad request; the child serves on
      throw std::runtime_error(who + ": " + response["error"].dump());
    try {
      if (response.is_discarded())
        throw std::runtime_error(who + ": protocol error: not JSON: " + line.substr(0, 500));
      if (!response.is_object() || !response.contains("proposals") ||
          !response["proposals"].is_array() || response["proposals"].size() != 1 ||
          !response.contains("startup") || !response["startup"].is_array() ||
          response["startup"].size() != 1 || !response["startup"][0].is_boolean())
        throw std::runtime_error(who +
                                 ": protocol error: expected one proposal: " + line.substr(0, 500));
      return {space.from_json(response["proposals"][0], who), response["startup"][0].get<bool>()};
    } catch (...) {
      child_.reset(); // out of step with the protocol: the next call starts a fresh child
      throw;
    }
  }

  std::string script_;
  std::string python_;
  optuna_failures failures_ = optuna_failures::fail;
  mutable std::mutex mutex_;
  mutable std::unique_ptr<child_process> child_;
};

} // namespace

const char* optuna_policy_name(optuna_failures failures) {
  switch (failures) {
    case optuna_failures::pruned: return "optuna_tpe_fair/1";
    case optuna_failures::constraint: return "optuna_tpe_constrained/1";
    case optuna_failures::fail: break;
  }
  return "optuna_tpe/1";
}

std::unique_ptr<tuning::planner_policy> make_optuna_policy(const std::string& script,
                                                           const std::string& python,
                                                           optuna_failures failures) {
  return std::make_unique<optuna_tpe_policy>(script, python, failures);
}

} // namespace infrarsi::bench
