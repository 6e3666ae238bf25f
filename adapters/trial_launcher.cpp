#include "adapters/trial_launcher.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "adapters/classify.hpp"
#include "adapters/cluster_launch.hpp"
#include "adapters/descendants.hpp"
#include "adapters/device_memory.hpp"
#include "adapters/environment.hpp"
#include "adapters/process.hpp"
#include "adapters/trial_copy.hpp"
#include "messages/errc.hpp"
#include "store/run_projection.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/planner.hpp"

namespace infrarsi::adapters {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

caf::expected<tuning::knob_assignment> complete_assignment(const tuning::task_spec& task,
                                                           const tuning::knob_assignment& knobs) {
  auto result = task.default_assignment();
  for (const auto& [name, value] : knobs) {
    const auto* knob = task.find_knob(name);
    if (knob == nullptr) {
      std::string names;
      for (const auto& k : task.knobs)
        names += (names.empty() ? "" : ", ") + k.name;
      return make_error(errc::invalid_argument, "task '" + task.name + "' has no knob '" + name
                                                  + "' (knobs: " + names + ")");
    }
    std::string why;
    if (!tuning::in_domain(*knob, value, why))
      return make_error(errc::invalid_argument, "knob '" + name + "': expected " + why
                                                  + ", got " + tuning::to_string(value));
    result[name] = value;
  }
  return result;
}

messages::trial_spec_msg make_trial_spec(const trial_request& req, const std::string& purpose) {
  wire::TrialSpecT spec;
  spec.trial_id = req.trial_id;
  spec.attempt = req.attempt;
  for (const auto& [name, value] : req.knobs) {
    auto k = std::make_unique<wire::KnobAssignmentT>();
    k->name = name;
    std::visit(
      [&k](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::int64_t>) {
          wire::IntKnobT x;
          x.value = v;
          k->value.Set(std::move(x));
        } else if constexpr (std::is_same_v<T, double>) {
          wire::RealKnobT x;
          x.value = v;
          k->value.Set(std::move(x));
        } else if constexpr (std::is_same_v<T, bool>) {
          wire::BoolKnobT x;
          x.value = v;
          k->value.Set(std::move(x));
        } else {
          wire::TextKnobT x;
          x.value = v;
          k->value.Set(std::move(x));
        }
      },
      value);
    spec.knobs.push_back(std::move(k));
  }
  for (const auto& [path, sha] : req.scope_lock) {
    auto h = std::make_unique<wire::FileHashT>();
    h->path = path;
    h->sha256 = sha;
    spec.scope_lock.push_back(std::move(h));
  }
  spec.patches = req.patches;
  for (const auto& [name, diff] : req.patch_texts) {
    auto t = std::make_unique<wire::PatchTextT>();
    t->name = name;
    t->diff = diff;
    spec.patch_texts.push_back(std::move(t));
  }
  spec.timeout_s = req.timeout_s;
  spec.memory_cap_bytes = req.memory_cap_bytes;
  spec.purpose = purpose;
  spec.smoke_patches = req.smoke_patches;
  if (req.loss_reference) {
    const auto& ref = *req.loss_reference;
    auto lr = std::make_unique<wire::LossReferenceT>();
    auto spread = [](const std::map<std::uint32_t, double>& m, std::uint32_t step) {
      auto it = m.find(step);
      return it == m.end() ? 0.0 : it->second;
    };
    for (const auto& [step, loss] : ref.loss)
      lr->steps.emplace_back(step, loss, spread(ref.spread, step));
    for (const auto& w : ref.windows)
      lr->windows.emplace_back(w.first, w.last, w.mean, w.within_var, w.between_var, w.runs);
    for (const auto& [step, loss] : ref.eval_loss)
      lr->eval.emplace_back(step, loss, spread(ref.eval_spread, step));
    spec.loss_reference = std::move(lr);
  }
  return messages::trial_spec_msg::pack(spec);
}

std::optional<tuning::loss_reference> loss_reference_of(const wire::TrialSpec& spec) {
  const auto* lr = spec.loss_reference();
  if (lr == nullptr)
    return std::nullopt;
  tuning::loss_reference ref;
  if (lr->steps() != nullptr)
    for (const auto* p : *lr->steps()) {
      ref.loss[p->step()] = p->loss();
      ref.spread[p->step()] = p->spread();
    }
  if (lr->windows() != nullptr)
    for (const auto* w : *lr->windows())
      ref.windows.push_back({w->first(), w->last(), w->mean(), w->within_var(), w->between_var(),
                             w->runs()});
  if (lr->eval() != nullptr)
    for (const auto* p : *lr->eval()) {
      ref.eval_loss[p->step()] = p->loss();
      ref.eval_spread[p->step()] = p->spread();
    }
  return ref;
}

namespace {

std::string gib_text(std::uint64_t bytes) {
  std::ostringstream os;
  os.precision(3);
  os << static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return os.str();
}

/// One output stream of one rank: pipe, log file, partial line. A labelled stream (srun's or
/// torchrun's) carries the lines of every rank, each with its rank's label.
struct stream_state {
  int fd = -1;
  int rank = 0;
  bool is_stdout = true;
  bool labelled = false;
  std::ofstream log;
  std::string partial;
};

/// Runs a short helper command (scancel) to its end, at most `limit_s` seconds (then SIGKILL);
/// its output is discarded. Returns its exit status, or -1 when it could not run or was killed.
int run_helper(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               double limit_s) {
  auto child = spawn(spawn_request{argv, env, fs::current_path().string()});
  if (!child)
    return -1;
  auto deadline = clock_type::now()
                  + std::chrono::duration_cast<clock_type::duration>(
                    std::chrono::duration<double>(limit_s));
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0 && clock_type::now() < deadline) {
    pollfd fds[2] = {{child->stdout_fd, POLLIN, 0}, {child->stderr_fd, POLLIN, 0}};
    ::poll(fds, 2, 50);
    for (auto& f : fds)
      if (f.fd >= 0 && f.revents != 0) {
        auto n = ::read(f.fd, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          (f.fd == child->stdout_fd ? child->stdout_fd : child->stderr_fd) = -1;
          ::close(f.fd);
          --open_fds;
        }
      }
  }
  int status = 0;
  pid_t got = 0;
  // Its output ended (it exits now) or its time is up; it gets at least 1 s more to exit.
  auto exit_deadline = std::max(deadline, clock_type::now()
                                             + std::chrono::duration_cast<clock_type::duration>(
                                               std::chrono::seconds(1)));
  while ((got = reap_child(child->pid, status, WNOHANG)) == 0 && clock_type::now() < exit_deadline)
    ::usleep(10'000);
  if (got == 0) {
    signal_group(child->pid, SIGKILL);
    reap_child(child->pid, status, 0);
    status = -1;
  }
  for (int fd : {child->stdout_fd, child->stderr_fd})
    if (fd >= 0)
      ::close(fd);
  return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// The device memory of a trial's processes, from nvidia-smi (docs/node-runner.md "Device
/// memory"): one query at a time, started at most every `interval_s` and read without blocking
/// from the supervision loop, so a slow driver never delays reading the ranks' output. Off (no
/// process, no cost) when nvidia-smi is not on PATH.
struct device_sampler {
  /// Absolute path of nvidia-smi; empty: sampling is off.
  std::string program;
  /// The environment the query runs with (the harness's own).
  std::map<std::string, std::string> env;
  /// Seconds between the starts of two queries.
  static constexpr double interval_s = 1.0;
  /// Seconds a query may take before it is killed (and counted as failed).
  static constexpr double query_limit_s = 10.0;
  /// The query in flight: pid and output pipes (-1: none).
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  std::string out;
  clock_type::time_point started{};
  clock_type::time_point next_at{};
  /// Largest device memory of the most loaded rank seen so far, bytes.
  std::uint64_t peak = 0;
  /// Queries answered and parsed, and failed (exit status, output that does not parse, killed).
  std::size_t samples = 0;
  std::size_t failures = 0;

  bool on() const { return !program.empty(); }

  /// Reads what the pipes hold; true once stdout reached its end.
  bool read_output() {
    char buf[4096];
    for (int* fd : {&out_fd, &err_fd}) {
      while (*fd >= 0) {
        auto n = ::read(*fd, buf, sizeof buf);
        if (n > 0) {
          if (fd == &out_fd && out.size() < (1u << 20)) // a list of processes, never megabytes
            out.append(buf, static_cast<std::size_t>(n));
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
          break;
        ::close(*fd); // end of output or a read error
        *fd = -1;
      }
    }
    return out_fd < 0;
  }

  /// Ends the query in flight without reading it (the trial is over, or it took too long).
  void abandon() {
    if (pid < 0)
      return;
    signal_group(pid, SIGKILL);
    int status = 0;
    reap_child(pid, status, 0);
    for (int* fd : {&out_fd, &err_fd})
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
    pid = -1;
    out.clear();
  }

  /// One step of the sampler at `now`: finishes a query whose output ended (its rows summed per
  /// rank over `table` with most_loaded_rank_device_bytes) and starts the next one when due.
  void step(clock_type::time_point now, const std::vector<process_entry>& table,
            const std::vector<pid_t>& roots, bool ranks_are_children) {
    if (!on())
      return;
    if (pid >= 0) {
      bool ended = read_output();
      int status = 0;
      if (ended && reap_child(pid, status, WNOHANG) == pid) {
        pid = -1;
        if (err_fd >= 0) {
          ::close(err_fd);
          err_fd = -1;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
          if (auto rows = parse_compute_apps(out)) {
            ++samples;
            peak = std::max(peak, most_loaded_rank_device_bytes(*rows, table, roots,
                                                                ranks_are_children));
          } else {
            ++failures;
          }
        } else {
          ++failures;
        }
        out.clear();
      } else if (std::chrono::duration<double>(now - started).count() > query_limit_s) {
        abandon();
        ++failures;
      }
      return;
    }
    if (now < next_at)
      return;
    next_at = now + std::chrono::duration_cast<clock_type::duration>(
                      std::chrono::duration<double>(interval_s));
    auto child = spawn(spawn_request{compute_apps_query(program), env, "/"});
    if (!child) {
      ++failures;
      return;
    }
    pid = child->pid;
    out_fd = child->stdout_fd;
    err_fd = child->stderr_fd;
    started = now;
  }
};

/// One rank (or the command's single process).
struct rank_state {
  pid_t pid = -1;
  bool running = false;
  int wait_status = 0;
  std::uint64_t peak_rss = 0;
};

/// Everything the supervision loop tracks.
struct supervisor {
  const trial_request& req;
  const tuning::task_spec& task;
  double timeout_s;
  std::uint64_t cap;
  clock_type::time_point start = clock_type::now();
  std::vector<rank_state> ranks;
  std::vector<stream_state> streams;
  metrics_parser parser;
  trial_observation obs;
  bool stopping = false;
  clock_type::time_point stop_time;
  bool sent_kill = false;
  /// Harness-clock second at which a rank that printed OOM text is stopped; -1: none printed.
  double oom_stop_at_s = -1;
  /// How long a rank that printed OOM text may take to exit by itself before it is stopped (s).
  static constexpr double oom_exit_grace_s = 2.0;
  /// Seconds since launch at which each parsed step's metrics line was read (index-aligned
  /// with parser.steps()).
  std::vector<double> observed_at;
  /// The parsed steps as the contract check takes them (index-aligned with parser.steps()), kept
  /// only when req.loss_reference is set (the early stop).
  std::vector<tuning::step_point> points;
  /// The step at which the early stop stopped the trial; nullopt: it did not.
  std::optional<std::uint32_t> stopped_at_step;
  /// Every process of the trial, also those that left their rank's group or session.
  trial_descendants tree;
  /// The last lines of each rank's stderr, for the detail of a failure (index: rank).
  std::vector<stderr_tail> tails;
  /// The device memory of the trial's processes (nvidia-smi), when it is on PATH.
  device_sampler device;

  // Launchers that start the ranks through the cluster's engine (slurm: srun; torchrun): one
  // process whose stdout and stderr carry every rank's lines with a label.
  tuning::launcher_kind launcher = tuning::launcher_kind::ranks;
  /// Ranks of a labelled launcher (labels outside 0..labelled_ranks-1 are the launcher's own).
  int labelled_ranks = 0;
  /// Per-rank logs of a labelled launcher: rank-N.stdout at 2N, rank-N.stderr at 2N+1.
  std::vector<std::ofstream> rank_logs;
  /// The launcher's own lines (srun's, torchrun's): stdout at 0, stderr at 1.
  std::ofstream launcher_logs[2];
  /// The last lines of the launcher's own stderr (its error messages).
  stderr_tail launcher_tail;
  /// slurm: the job step ("JOBID.STEPID") task 0 reported; empty until it did.
  std::string slurm_step;
  /// slurm: the environment scancel runs with (SLURM_CONF and the rest of infrarsi's).
  std::map<std::string, std::string> helper_env;
  /// slurm: whether the step was already told to end by force (scancel KILL, SIGTERM to srun).
  bool sent_step_kill = false;
  /// slurm: seconds a forced step end may take before srun itself is killed.
  static constexpr double step_kill_wait_s = 10.0;

  supervisor(const trial_request& r, double timeout, std::uint64_t memory_cap)
    : req(r), task(*r.task), timeout_s(timeout), cap(memory_cap), parser(r.task->metrics),
      tree(r.allow_cgroup) {}

  bool labelled() const {
    return launcher == tuning::launcher_kind::slurm || launcher == tuning::launcher_kind::torchrun;
  }

  /// Sends `signal` ("TERM", "KILL") to every task of the trial's Slurm step (scancel).
  void signal_step(const char* signal) {
    if (!slurm_step.empty())
      run_helper({"scancel", std::string{"--signal="} + signal, slurm_step}, helper_env, 5.0);
  }

  double now_s() const {
    return std::chrono::duration<double>(clock_type::now() - start).count();
  }

  void add_cause(trial_cause::kind_t kind, int rank, int code, std::string detail) {
    obs.causes.push_back({kind, now_s(), rank, code, std::move(detail)});
  }

  void begin_stop() {
    if (stopping)
      return;
    stopping = true;
    stop_time = clock_type::now();
    obs.stop_began_at_s = now_s();
    std::set<pid_t> signalled;
    if (launcher == tuning::launcher_kind::slurm && !slurm_step.empty()) {
      // Every task gets SIGTERM from Slurm, as the ranks launcher's ranks do; SIGTERM to srun
      // would SIGKILL them at once ("forcing job termination"), so srun is left to end with
      // its step.
      signal_step("TERM");
      for (auto& r : ranks)
        signalled.insert(r.pid);
    }
    for (auto& r : ranks)
      if (r.running && signalled.count(r.pid) == 0) {
        signal_group(r.pid, SIGTERM);
        signalled.insert(r.pid);
      }
    tree.signal_all(SIGTERM, signalled); // the rest: other groups and sessions, once each
  }

  bool seen_cause(trial_cause::kind_t kind, int rank) const {
    for (const auto& c : obs.causes)
      if (c.kind == kind && c.rank == rank)
        return true;
    return false;
  }

  /// A line of a labelled stream: the rank's line goes to its log and on_rank_line; the
  /// launcher's own line (srun's task reports, torchrun's failure line) to the launcher's log.
  void on_labelled_line(const stream_state& s, std::string_view line) {
    bool slurm = launcher == tuning::launcher_kind::slurm;
    auto label = slurm ? parse_srun_label(line) : parse_torchrun_label(line);
    if (label && label->rank < labelled_ranks) {
      if (slurm && label->rank == 0 && !s.is_stdout && slurm_step.empty()
          && label->text.rfind(slurm_step_marker, 0) == 0) {
        slurm_step = std::string{label->text.substr(slurm_step_marker.size())};
        launcher_logs[1] << "infrarsi: job step " << slurm_step << '\n';
        launcher_logs[1].flush();
        if (stopping) // asked to stop before the step was known: it ends now
          signal_step("TERM");
        return;
      }
      auto& log = rank_logs[static_cast<std::size_t>(2 * label->rank + (s.is_stdout ? 0 : 1))];
      log << label->text << '\n';
      log.flush();
      on_rank_line(label->rank, s.is_stdout, label->text);
      return;
    }
    auto& log = launcher_logs[s.is_stdout ? 0 : 1];
    log << line << '\n';
    log.flush();
    if (s.is_stdout)
      return;
    launcher_tail.add(line);
    if (slurm) {
      auto report = parse_srun_task_report(line);
      if (!report)
        return;
      using kind = srun_task_report::kind_t;
      for (int rank : report->ranks) {
        if (rank >= labelled_ranks)
          continue;
        if (report->kind == kind::exited && report->code != 0)
          add_cause(trial_cause::kind_t::exit_nonzero, rank, report->code,
                    "exited with status " + std::to_string(report->code) + " (srun)");
        else if (report->kind == kind::signalled)
          add_cause(trial_cause::kind_t::killed_by_signal, rank, report->code,
                    "killed by signal " + std::to_string(report->code) + " (" + report->what
                      + "; srun)");
        else if (report->kind == kind::oom)
          add_cause(trial_cause::kind_t::oom_text, rank, 0,
                    "out of memory (Slurm: '" + report->what + "')");
        else
          continue;
        begin_stop(); // the step's other tasks end too (also --kill-on-bad-exit)
      }
    } else if (auto failure = parse_torchrun_failure(line);
               failure && failure->rank < labelled_ranks) {
      if (failure->exit_code > 0)
        add_cause(trial_cause::kind_t::exit_nonzero, failure->rank, failure->exit_code,
                  "exited with status " + std::to_string(failure->exit_code) + " (torchrun)");
      else if (failure->exit_code < 0)
        add_cause(trial_cause::kind_t::killed_by_signal, failure->rank, -failure->exit_code,
                  "killed by signal " + std::to_string(-failure->exit_code) + " (torchrun)");
      begin_stop();
    }
  }

  /// The early stop: the steps read from index `from` on, against the run's loss reference
  /// (tuning::early_violation); a violation is the trial's cause and stops it now.
  void early_stop_check(std::size_t from) {
    if (!req.loss_reference || stopping)
      return;
    const auto& steps = parser.steps();
    for (std::size_t i = points.size(); i < steps.size(); ++i) {
      tuning::step_point p;
      p.step = steps[i].step;
      p.loss = steps[i].loss;
      p.tokens = steps[i].tokens;
      p.step_time_s = steps[i].step_time_s;
      p.warmup = steps[i].warmup;
      p.eval_loss = steps[i].eval_loss;
      points.push_back(p);
    }
    auto violation = tuning::early_violation(task.contract, *req.loss_reference, points, from);
    if (!violation)
      return;
    add_cause(trial_cause::kind_t::contract_violation, -1, 0,
              tuning::early_stop_detail(*violation, points.back().step, task.contract.steps));
    stopped_at_step = points.back().step;
    begin_stop();
  }

  void on_line(stream_state& s, std::string_view line) {
    if (s.labelled)
      on_labelled_line(s, line);
    else
      on_rank_line(s.rank, s.is_stdout, line);
  }

  void on_rank_line(int rank, bool is_stdout, std::string_view line) {
    if (!is_stdout) {
      if (tails.size() <= static_cast<std::size_t>(rank))
        tails.resize(static_cast<std::size_t>(rank) + 1);
      tails[static_cast<std::size_t>(rank)].add(line);
    }
    if (is_stdout && rank == task.metrics.reporting_rank) {
      auto before = parser.steps().size();
      parser.feed(line);
      while (observed_at.size() < parser.steps().size())
        observed_at.push_back(now_s()); // the harness clock of each step's line
      if (parser.steps().size() > before) {
        if (obs.first_metrics_at_s < 0)
          obs.first_metrics_at_s = now_s();
        if (req.on_step)
          req.on_step(parser.steps().back());
        early_stop_check(before);
      }
    }
    if (const auto* pattern = find_oom_pattern(task.metrics, line)) {
      if (!seen_cause(trial_cause::kind_t::oom_text, rank)) {
        add_cause(trial_cause::kind_t::oom_text, rank, 0,
                  "out of memory ('" + *pattern + "'): " + std::string{line.substr(0, 300)});
        // The OOM is the cause, whatever the rank does next (exit, or hang in a collective):
        // the trial ends soon, not at its wall-clock limit. The rank gets oom_exit_grace_s to
        // exit on its own first, so its exit status (a workload's OOM exit code) is recorded.
        if (oom_stop_at_s < 0)
          oom_stop_at_s = now_s() + oom_exit_grace_s;
      }
    } else if (const auto* collective = find_collective_pattern(line)) {
      if (!seen_cause(trial_cause::kind_t::collective_text, rank))
        add_cause(trial_cause::kind_t::collective_text, rank, 0,
                  std::string{collective->what} + ": " + std::string{line.substr(0, 300)});
    }
  }

  /// Reads what is available; returns false at EOF.
  bool drain(stream_state& s) {
    char buf[65536];
    for (;;) {
      auto n = ::read(s.fd, buf, sizeof buf);
      if (n > 0) {
        // Written as read, so a trial killed with the harness (kill -9) keeps its evidence.
        if (s.log.is_open()) {
          s.log.write(buf, n);
          s.log.flush();
        }
        s.partial.append(buf, static_cast<std::size_t>(n));
        std::size_t begin = 0;
        for (auto nl = s.partial.find('\n'); nl != std::string::npos;
             nl = s.partial.find('\n', begin)) {
          on_line(s, std::string_view{s.partial}.substr(begin, nl - begin));
          begin = nl + 1;
        }
        s.partial.erase(0, begin);
        if (s.partial.size() > (1u << 20)) { // a runaway line without newline
          on_line(s, s.partial);
          s.partial.clear();
        }
        continue;
      }
      if (n == 0) {
        if (!s.partial.empty())
          on_line(s, s.partial);
        s.partial.clear();
        s.log.flush();
        return false;
      }
      if (errno == EINTR)
        continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }

  void reap() {
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      auto& r = ranks[i];
      if (!r.running)
        continue;
      int status = 0;
      auto got = reap_child(r.pid, status, WNOHANG);
      if (got != r.pid)
        continue;
      r.running = false;
      r.wait_status = status;
      int rank = static_cast<int>(i);
      // What was written before the exit was seen is read first: the rank's own last lines (an
      // OOM message, a collective error), and every other rank's lines already in their pipes
      // (the reporting rank's metrics line that a peer's crash followed decides whether the
      // trial had started; it must not depend on which pipe poll() happened to return first).
      for (auto& s : streams)
        if (s.fd >= 0 && !drain(s)) {
          ::close(s.fd);
          s.fd = -1;
        }
      if (labelled()) {
        // srun's (torchrun's) exit: the ranks' own exits were reported by it, line by line; a
        // failure it did not attribute to a rank (no step could be created, a bad srun option,
        // torchrun's own error) is the trial's, with its own last words.
        bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        bool attributed = false;
        for (const auto& c : obs.causes)
          attributed = attributed || (c.rank >= 0
                                      && (c.kind == trial_cause::kind_t::exit_nonzero
                                          || c.kind == trial_cause::kind_t::killed_by_signal
                                          || c.kind == trial_cause::kind_t::oom_text));
        if (failed && !attributed && !stopping) {
          auto tail = launcher_tail.text();
          std::string what = WIFEXITED(status)
                               ? "exited with status " + std::to_string(WEXITSTATUS(status))
                               : "killed by signal " + std::to_string(WTERMSIG(status));
          add_cause(WIFEXITED(status) ? trial_cause::kind_t::exit_nonzero
                                      : trial_cause::kind_t::killed_by_signal,
                    -1, WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                    std::string{tuning::to_string(launcher)} + " launcher: "
                      + (launcher == tuning::launcher_kind::slurm ? "srun " : "torchrun ") + what
                      + (tail.empty() ? "" : ": " + tail));
        }
        if (failed)
          begin_stop();
        continue;
      }
      if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        add_cause(trial_cause::kind_t::exit_nonzero, rank, WEXITSTATUS(status),
                  "exited with status " + std::to_string(WEXITSTATUS(status)));
      } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        add_cause(trial_cause::kind_t::killed_by_signal, rank, sig,
                  std::string{"killed by signal "} + std::to_string(sig) + " (" + strsignal(sig)
                    + (sig == SIGKILL ? "; possibly the kernel's OOM killer" : "") + ")");
      }
      // Any rank that ends while others still run: stop the rest at once, so nobody waits in
      // a collective for a peer that is gone. A clean exit of one rank is not a failure, but
      // the job cannot continue without it either.
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        begin_stop();
    }
    // Processes the rank left behind in its group (e.g. a data-loader worker) are stopped too.
  }

  void sample_memory(const std::vector<process_entry>& table) {
    static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    if (labelled())
      return; // the ranks are Slurm's (maybe on other nodes) or torchrun's: see the task's cap
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      auto& r = ranks[i];
      if (!r.running)
        continue;
      std::uint64_t rss = 0; // the rank's process group, from one table for all ranks
      for (const auto& e : table)
        if (e.pgrp == r.pid && e.state != 'Z') {
          std::ifstream statm{"/proc/" + std::to_string(e.pid) + "/statm"};
          std::uint64_t size = 0;
          std::uint64_t resident = 0;
          if (statm >> size >> resident)
            rss += resident * page;
        }
      r.peak_rss = std::max(r.peak_rss, rss);
      if (cap > 0 && rss > cap && !stopping) {
        add_cause(trial_cause::kind_t::memory_cap, static_cast<int>(i), 0,
                  "resident memory " + gib_text(rss) + " exceeded the per-rank cap of "
                    + gib_text(cap) + " (" + std::to_string(rss) + " > " + std::to_string(cap)
                    + " bytes)");
        begin_stop();
      }
    }
  }

  /// The device sampler's step over the ranks (the ranks launcher: each rank's tree; a command
  /// or torchrun: one process whose children are the ranks). Not for Slurm: its tasks are
  /// slurmstepd's children, maybe on other nodes.
  void sample_device_memory(clock_type::time_point now, const std::vector<process_entry>& table) {
    if (!device.on() || launcher == tuning::launcher_kind::slurm)
      return;
    std::vector<pid_t> roots;
    for (const auto& r : ranks)
      roots.push_back(r.pid);
    device.step(now, table, roots, launcher != tuning::launcher_kind::ranks);
  }

  bool any_running() const {
    for (const auto& r : ranks)
      if (r.running)
        return true;
    return false;
  }

  void loop() {
    auto last_sample = clock_type::time_point{};
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<stream_state*> owners;
      for (auto& s : streams)
        if (s.fd >= 0) {
          fds.push_back({s.fd, POLLIN, 0});
          owners.push_back(&s);
        }
      if (fds.empty() && !any_running())
        break;
      if (!fds.empty()) {
        ::poll(fds.data(), fds.size(), 50);
        for (std::size_t i = 0; i < fds.size(); ++i)
          if (fds[i].revents != 0 && !drain(*owners[i])) {
            ::close(owners[i]->fd);
            owners[i]->fd = -1;
          }
      } else {
        ::usleep(20'000);
      }
      reap();
      auto now = clock_type::now();
      if (now - last_sample >= std::chrono::milliseconds(100)) {
        auto table = process_table(); // one walk of /proc for everything sampled
        tree.observe(table);
        sample_memory(table);
        sample_device_memory(now, table);
        reap_adopted_zombies(table);
        last_sample = now;
      }
      if (!stopping && now_s() > timeout_s) {
        add_cause(trial_cause::kind_t::timeout, -1, 0,
                  "wall-clock limit of " + tuning::to_string(tuning::knob_value{timeout_s})
                    + " s passed");
        begin_stop();
      }
      if (!stopping && oom_stop_at_s >= 0 && now_s() >= oom_stop_at_s)
        begin_stop(); // the OOM text is already the cause
      if (!stopping && req.stop != nullptr && req.stop->load()) {
        add_cause(trial_cause::kind_t::stop_requested, -1, 0, "stop requested (preempted)");
        begin_stop();
      }
      double since_stop = stopping ? std::chrono::duration<double>(now - stop_time).count() : 0;
      if (stopping && launcher == tuning::launcher_kind::slurm && !sent_step_kill
          && since_stop >= task.limits.kill_grace_s) {
        // The step's tasks did not end by SIGTERM: SIGKILL through Slurm, and SIGTERM to srun
        // (it SIGKILLs every task and waits for the step to end). srun itself is SIGKILLed
        // only step_kill_wait_s later, should the step not end.
        signal_step("KILL");
        for (auto& r : ranks)
          if (r.running)
            signal_group(r.pid, SIGTERM);
        sent_step_kill = true;
      }
      if (stopping && !sent_kill
          && since_stop >= task.limits.kill_grace_s
                             + (launcher == tuning::launcher_kind::slurm ? step_kill_wait_s : 0)) {
        for (auto& r : ranks)
          signal_group(r.pid, SIGKILL);
        tree.signal_all(SIGKILL);
        sent_kill = true;
      }
      // Once every rank has exited, the outcome is decided by their exits; what is left of the
      // trial (a data-loader worker, a `setsid` child holding stdout open) is stopped like a
      // rank (SIGTERM, SIGKILL after kill_grace_s), and once none is left what the pipes hold
      // is read without waiting for an EOF that a process outside the trial could withhold.
      if (!any_running()) {
        auto table = process_table();
        tree.observe(table);
        reap_adopted_zombies(table);
        // A process that outlives SIGKILL by 5 s (uninterruptible in a driver call) is left to
        // the final sweep below rather than holding the trial open for ever.
        bool unkillable = sent_kill
                          && std::chrono::duration<double>(now - stop_time).count()
                               > task.limits.kill_grace_s + 5.0;
        if (!unkillable && !tree.live(table).empty()) {
          begin_stop();
          if (sent_kill)
            tree.signal_all(SIGKILL);
        } else {
          for (auto& s : streams)
            if (s.fd >= 0) {
              drain(s);
              if (!s.partial.empty())
                on_line(s, s.partial);
              s.partial.clear();
              ::close(s.fd);
              s.fd = -1;
            }
          break;
        }
      }
    }
    // Nothing of the trial may survive it (a descendant that closed its output is found here).
    for (int attempt = 0; attempt < 100; ++attempt) {
      auto table = process_table();
      tree.observe(table);
      reap_adopted_zombies(table);
      // An adopted process inside execve (its environment, hence its marker, unreadable for a
      // moment) is waited for: up to the 100 walks of this loop (~2 s), then left undecided.
      if (tree.live(table).empty() && !tree.has_undecided())
        break;
      tree.signal_all(SIGKILL);
      ::usleep(20'000);
    }
    reap_adopted_zombies(process_table()); // the descendants just killed, adopted by us
    device.abandon(); // a query still in flight describes processes that are gone
    // Every leader is reaped here; a group with no member left leaves the registry of live
    // trial groups (one that still has an unkillable member stays until it is gone).
    for (auto& r : ranks)
      if (!r.running && group_members(r.pid).empty())
        unregister_group(r.pid);
  }
};

} // namespace

bool git_apply(const std::string& patch_file, const std::string& dir, bool check_only,
               std::string& err_text) {
  // Inside an enclosing git work tree (a store under the project), `git apply` would read
  // the patch's paths relative to that repository and silently skip files outside the current
  // directory; stop repository discovery at the copy, so it applies as a plain patch tool.
  auto env = current_environment();
  env["GIT_CEILING_DIRECTORIES"] = fs::path{dir}.parent_path().string();
  env.erase("GIT_DIR");
  env.erase("GIT_WORK_TREE");
  std::vector<std::string> argv = {"git", "apply", "--whitespace=nowarn"};
  if (check_only)
    argv.push_back("--check");
  argv.push_back(patch_file);
  auto child = spawn(spawn_request{argv, env, dir});
  if (!child) {
    err_text = "cannot run git apply: " + describe(child.error());
    return false;
  }
  char buf[4096];
  for (;;) {
    pollfd pfd{child->stderr_fd, POLLIN, 0};
    ::poll(&pfd, 1, 1000);
    auto n = ::read(child->stderr_fd, buf, sizeof buf);
    if (n > 0)
      err_text.append(buf, static_cast<std::size_t>(n));
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
      break;
  }
  ::close(child->stdout_fd);
  ::close(child->stderr_fd);
  int status = 0;
  reap_child(child->pid, status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

namespace {

/// "" if the copy at `dest` matches the scope lock, else the first difference ("scope: ...").
std::string check_lock(const std::map<std::string, std::string>& lock, const std::string& dest) {
  for (const auto& [rel, sha] : lock) {
    auto now = sha256_file(dest + "/" + rel);
    if (!now)
      return "scope: '" + rel + "' was locked at init and is gone from the workload";
    if (*now != sha)
      return "scope: '" + rel + "' changed since the scope was locked at init (sha256 "
             + sha.substr(0, 12) + "... -> " + now->substr(0, 12) + "...)";
  }
  return {};
}

/// The copy rules of a trial of `task` that applies the patches `patches` (names): own bytes
/// for the editable scope, workload.writable and every path the patches name (trial_copy.hpp).
copy_rules trial_copy_rules(const tuning::task_spec& task,
                            const std::vector<std::string>& patches) {
  copy_rules rules;
  rules.own_globs = task.scope.editable;
  rules.own_globs.insert(rules.own_globs.end(), task.workload.writable.begin(),
                         task.workload.writable.end());
  std::vector<std::string> files;
  for (const auto& name : patches)
    if (const auto* p = task.find_patch(name))
      files.push_back(p->file);
  rules.own_paths = paths_of_patch_files(files);
  return rules;
}

/// Copies the workload to `dest`, checks it against the scope lock, applies the patches and
/// checks what they changed. A scope breach sets `violation`; a patch that does not apply sets
/// `failure`; errors are the tool's own (copy failed; a partial copy is removed).
caf::error copy_and_patch(const tuning::task_spec& task, const std::vector<std::string>& patches,
                          const std::map<std::string, std::string>& lock, const std::string& dest,
                          std::string& failure, std::string& violation, workload_copy& made) {
  auto copied = copy_workload(task.workload.workdir, dest, trial_copy_rules(task, patches));
  if (!copied) {
    std::error_code ignored; // a partial copy (e.g. ENOSPC) would keep the disk full
    fs::remove_all(dest, ignored);
    return std::move(copied.error());
  }
  made = std::move(*copied);
  // Before any patch: the copy is what was locked at init (nobody edited the workload since).
  violation = check_lock(lock, dest);
  if (!violation.empty())
    return caf::none;
  // Every path a patch names must be editable and not frozen; checked before applying any.
  for (const auto& name : patches) {
    if (task.find_patch(name) == nullptr) {
      failure = "unknown patch '" + name + "'";
      return caf::none;
    }
    violation = patch_scope_violation(task, name);
    if (!violation.empty())
      return caf::none;
  }
  for (const auto& name : patches) {
    std::string err_text;
    if (!git_apply(task.find_patch(name)->file, dest, false, err_text)) {
      failure = "patch '" + name + "' does not apply: " + err_text.substr(0, 500);
      return caf::none;
    }
  }
  // After the patches: no locked frozen file differs (whatever the patch tool did).
  if (!patches.empty()) {
    std::map<std::string, std::string> frozen;
    for (const auto& [rel, sha] : lock)
      if (path_in_scope(rel, task.scope.frozen))
        frozen[rel] = sha;
    auto v = check_lock(frozen, dest);
    if (!v.empty())
      violation = v + " after the patches were applied (a frozen file)";
  }
  return caf::none;
}

/// The device-seconds of a trial whose step times are simulated (contract.simulated_time): the
/// figure its final line reports ("device_seconds", a finite number >= 0: workloads/sim's
/// simulated start-up plus steps, times its GPUs; docs/simulator.md "Output and exit status"),
/// or nullopt when it reports none (then wall time x world size). A trial the early stop stopped
/// after step `stopped_at` is charged the part of it that ran, as the benchmark's simulated trial
/// (bench/sim_evaluator.cpp): the figure x (simulated_wall_s - the step times after `stopped_at`)
/// / simulated_wall_s, when the final line gives a positive "simulated_wall_s".
std::optional<double> simulated_device_seconds(const tuning::task_spec& task,
                                               const metrics_parser& parser,
                                               std::optional<std::uint32_t> stopped_at) {
  if (!task.contract.simulated_time || !parser.final_line())
    return std::nullopt;
  const auto& fin = *parser.final_line();
  const auto it = fin.find("device_seconds");
  if (it == fin.end() || !it->is_number())
    return std::nullopt;
  const double device_s = it->get<double>();
  if (!std::isfinite(device_s) || device_s < 0)
    return std::nullopt;
  if (!stopped_at)
    return device_s;
  const auto wall = fin.find("simulated_wall_s");
  if (wall == fin.end() || !wall->is_number() || !(wall->get<double>() > 0)
      || !std::isfinite(wall->get<double>()))
    return device_s;
  const double full_s = wall->get<double>();
  double unrun_s = 0; // simulated seconds of the steps after the stop
  for (const auto& st : parser.steps())
    if (st.step > *stopped_at && std::isfinite(st.step_time_s) && st.step_time_s > 0)
      unrun_s += st.step_time_s;
  return device_s * std::max(0.0, full_s - unrun_s) / full_s;
}

messages::trial_result_msg make_result(const trial_request& req, const trial_verdict& verdict,
                                       const metrics_parser& parser,
                                       const std::vector<double>& observed_at,
                                       std::uint64_t peak_rss, std::uint64_t device_peak,
                                       double wall_s, int world_size,
                                       std::optional<std::uint32_t> stopped_at) {
  wire::TrialResultT r;
  r.trial_id = req.trial_id;
  r.attempt = req.attempt;
  r.outcome = verdict.outcome;
  std::optional<std::uint64_t> workload_peak;
  for (std::size_t i = 0; i < parser.steps().size(); ++i) {
    const auto& s = parser.steps()[i];
    auto m = std::make_unique<wire::StepMetricsT>();
    m->warmup = s.warmup;
    if (i < observed_at.size())
      m->observed_at_s = observed_at[i];
    m->step = s.step;
    m->loss = s.loss;
    m->tokens = s.tokens;
    m->step_time_s = s.step_time_s;
    if (s.data_s)
      m->data_s = *s.data_s;
    if (s.forward_s)
      m->forward_s = *s.forward_s;
    if (s.backward_s)
      m->backward_s = *s.backward_s;
    if (s.optimizer_s)
      m->optimizer_s = *s.optimizer_s;
    if (s.communication_s)
      m->communication_s = *s.communication_s;
    if (s.eval_loss)
      m->eval_loss = *s.eval_loss;
    if (s.peak_memory_bytes) {
      m->peak_memory_bytes = *s.peak_memory_bytes;
      workload_peak = std::max(workload_peak.value_or(0), *s.peak_memory_bytes);
    }
    r.steps.push_back(std::move(m));
  }
  // Host resident memory never stands in for device memory (tuning::choose_peak_memory).
  auto memory = tuning::choose_peak_memory(tuning::declares_device_memory(*req.task),
                                           workload_peak, device_peak, peak_rss);
  r.peak_memory_bytes = memory.peak_bytes;
  r.memory_source = static_cast<wire::MemorySource>(memory.source);
  r.host_peak_bytes = peak_rss;
  r.device_sampled_peak_bytes = device_peak;
  r.wall_time_s = wall_s;
  r.device_seconds = wall_s * world_size;
  if (auto simulated = simulated_device_seconds(*req.task, parser, stopped_at))
    r.device_seconds = *simulated;
  r.exit_code = verdict.exit_code;
  r.detail = verdict.detail;
  if (parser.final_line()) {
    r.final_report = parser.final_line()->dump();
    if (r.final_report.size() > (64u << 10)) // not evidence anyone reads at that size
      r.final_report.clear();
  }
  if (parser.malformed_lines() > 0)
    r.detail += " [" + std::to_string(parser.malformed_lines())
                + " malformed metrics line(s); first: " + parser.first_malformed() + "]";
  return messages::trial_result_msg::pack(r);
}

} // namespace

const std::vector<std::string>& torchrun_env_names() {
  static const std::vector<std::string> names = {"RANK",           "LOCAL_RANK",
                                                 "WORLD_SIZE",     "LOCAL_WORLD_SIZE",
                                                 "MASTER_ADDR",    "MASTER_PORT"};
  return names;
}

caf::expected<trial_report> run_trial(const trial_request& req) {
  if (req.task == nullptr)
    return make_error(errc::invalid_argument, "run_trial: no task");
  const auto& task = *req.task;
  auto knobs = complete_assignment(task, req.knobs);
  if (!knobs)
    return std::move(knobs.error());
  for (const auto& p : req.patches)
    if (task.find_patch(p) == nullptr) {
      std::string names;
      for (const auto& x : task.patches)
        names += (names.empty() ? "" : ", ") + x.name;
      return make_error(errc::invalid_argument, "task '" + task.name + "' has no patch '" + p
                                                  + "' (patches: "
                                                  + (names.empty() ? "none" : names) + ")");
    }
  std::error_code ec;
  fs::create_directories(req.trial_dir, ec);
  if (ec)
    return make_error(errc::io_error,
                      "trial directory '" + req.trial_dir + "': " + ec.message());
  auto trial_dir = fs::absolute(req.trial_dir).lexically_normal().string();
  double timeout_s = req.timeout_s > 0 ? req.timeout_s : task.limits.timeout_s;
  std::uint64_t cap = req.memory_cap_bytes > 0 ? req.memory_cap_bytes
                                                : task.limits.memory_cap_bytes;

  // Render world size first (it may come from a knob), then everything else.
  std::string why;
  std::map<std::string, std::string> builtins{{"trial_id", std::to_string(req.trial_id)},
                                              {"attempt", std::to_string(req.attempt)},
                                              {"trial_dir", trial_dir},
                                              {"memory_cap_bytes", std::to_string(cap)}};
  auto ws = tuning::world_size_of(task, *knobs, builtins, why);
  if (!ws)
    return make_error(errc::invalid_argument, why);
  const long world_size = *ws;
  auto vars = tuning::template_vars(task, *knobs, builtins);
  vars.emplace("world_size", std::to_string(world_size));
  const auto launcher = task.workload.launcher;
  bool ranks_launcher = launcher == tuning::launcher_kind::ranks;
  // slurm and torchrun: one process (srun, torchrun) starts the ranks and labels their lines.
  bool labelled = launcher == tuning::launcher_kind::slurm
                  || launcher == tuning::launcher_kind::torchrun;
  int processes = ranks_launcher ? static_cast<int>(world_size) : 1;

  trial_report report;
  report.world_size = static_cast<int>(world_size);
  report.workdir = task.workload.workdir;
  supervisor sup{req, timeout_s, cap};
  sup.launcher = launcher;
  sup.labelled_ranks = labelled ? static_cast<int>(world_size) : 0;
  sup.obs.final_line_required = task.metrics.require_final_line
                                && task.metrics.format
                                     == tuning::metrics_spec::format_kind::json_lines;
  sup.obs.launch_window_s = task.limits.launch_window_s;
  sup.obs.oom_exit_codes = task.metrics.oom_exit_codes;
  if (!sup.parser.config_error().empty())
    return make_error(errc::invalid_argument, task.source + ": " + sup.parser.config_error());

  // Device-seconds of the smoke probe's launches (below), charged to the trial.
  double smoke_device_s = 0;
  // Set when the probe could not judge because of its reference run (a [smoke] problem): every
  // result of the full launch then says so (tuning::smoke_inconclusive_detail, or
  // tuning::smoke_vacuous_detail when its loss does not fall).
  std::string smoke_note;
  auto finish = [&](const trial_verdict& verdict) {
    // A trial that ended before any rank started (a patch that does not apply, no Slurm
    // allocation, a constraint): its directory still says why.
    if (sup.ranks.empty() && report.log_files.empty() && !verdict.detail.empty()) {
      std::ofstream{trial_dir + "/launch.stderr", std::ios::binary | std::ios::trunc}
        << "infrarsi: the trial was not launched: " << verdict.detail << '\n';
    }
    double wall = sup.now_s();
    std::uint64_t peak = 0;
    for (const auto& r : sup.ranks)
      peak = std::max(peak, r.peak_rss);
    report.result = make_result(req, verdict, sup.parser, sup.observed_at, peak, sup.device.peak,
                                wall,
                                report.world_size, sup.stopped_at_step);
    if (smoke_device_s > 0 || !smoke_note.empty()) {
      auto r = report.result.unpack();
      r->device_seconds += smoke_device_s;
      if (!smoke_note.empty())
        r->detail += (r->detail.empty() ? "" : "; ") + smoke_note;
      report.result = messages::trial_result_msg::pack(*r);
    }
    return report;
  };

  // The search space's constraints hold before anything is copied or launched.
  {
    tuning::configuration config;
    config.knobs = *knobs;
    auto v = tuning::constraint_violation(task, config);
    if (!v.empty()) // "constraint 'EXPR' is false for a=1, b=2"
      return finish({wire::Outcome::ContractViolation, 0,
                     "constraint: " + v.substr(std::string{"constraint "}.size())});
  }
  // The smoke probe of untested patches (trial_request::smoke_patches): the task's [smoke]
  // launch unpatched, then patched, before anything of the full launch.
  if (!req.smoke_patches.empty() && task.smoke && !req.patches.empty()) {
    const auto small = tuning::smoke_task(task);
    std::array<tuning::trial_record, 2> runs;
    std::optional<std::string> reference_problem;
    std::optional<std::string> vacuous; // a usable reference whose loss does not fall
    double smoke_wall_s = 0;
    std::string names;
    for (const auto& p : req.smoke_patches)
      names += (names.empty() ? "" : ", ") + p;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      trial_request sreq = req;
      sreq.task = &small;
      sreq.smoke_patches.clear();
      sreq.loss_reference.reset();
      sreq.on_step = {};
      if (i == 0) {
        sreq.patches.clear();
        sreq.patch_texts.clear();
      }
      sreq.trial_dir = trial_dir + (i == 0 ? "/smoke-unpatched" : "/smoke-patched");
      sreq.timeout_s = task.smoke->timeout_s > 0 ? task.smoke->timeout_s : task.limits.timeout_s;
      auto r = run_trial(sreq);
      if (r) {
        store::apply_result(runs[i], *r->result);
      } else { // the smoke launch cannot be started here (a template that does not render)
        runs[i].finished = true;
        runs[i].outcome = tuning::trial_outcome::launch_error;
        runs[i].detail = describe(r.error());
      }
      smoke_wall_s += runs[i].wall_time_s;
      smoke_device_s += runs[i].device_seconds;
      if (req.stop != nullptr && req.stop->load())
        return finish({wire::Outcome::Preempted, 0, "stopped during the smoke probe"});
      // An unusable reference ends the probe: the patched launch could not be judged. Nor could
      // its numerics when the unpatched loss does not fall (a vacuous probe).
      if (i == 0 && (reference_problem = tuning::smoke_reference_problem(small.contract, runs[0])))
        break;
      if (i == 0 && (vacuous = tuning::smoke_vacuous(small.contract, runs[0])))
        break;
    }
    const bool one_launch = reference_problem || vacuous;
    auto violation = one_launch ? std::nullopt
                                : tuning::smoke_violation(small.contract, runs[0], runs[1]);
    std::string verdict =
      violation ? "violation: " + *violation
      : reference_problem ? "inconclusive: " + *reference_problem
      : vacuous ? "vacuous: " + *vacuous
      : runs[1].outcome != tuning::trial_outcome::ok
        ? std::string{"inconclusive: the patched smoke run ended "} + tuning::to_string(runs[1].outcome)
            + (runs[1].detail.empty() ? "" : " (" + runs[1].detail + ")")
        : "passed";
    std::ofstream{trial_dir + "/smoke.txt"} << "smoke probe of " << names << ": " << verdict
                                            << (one_launch ? " (1 launch, " : " (2 launches, ")
                                            << smoke_device_s
                                            << " device-seconds)\n";
    // The probe's workload copies are done with (their logs stay).
    for (const char* d : {"/smoke-unpatched/workdir", "/smoke-patched/workdir"}) {
      std::error_code rm;
      fs::remove_all(trial_dir + d, rm);
    }
    if (violation) {
      // Ends here: the full launch never starts. The trial cost the two smoke launches.
      wire::TrialResultT r;
      r.trial_id = req.trial_id;
      r.attempt = req.attempt;
      r.outcome = wire::Outcome::ContractViolation;
      r.wall_time_s = smoke_wall_s;
      r.device_seconds = smoke_device_s;
      r.detail = tuning::smoke_probe_detail(*violation, req.smoke_patches);
      report.result = messages::trial_result_msg::pack(r);
      for (const char* d : {"/smoke-unpatched", "/smoke-patched"})
        for (const char* f : {"/rank-0.stdout", "/rank-0.stderr"})
          if (fs::exists(trial_dir + d + f))
            report.log_files.push_back(trial_dir + d + f);
      return report;
    }
    if (reference_problem)
      smoke_note = tuning::smoke_inconclusive_detail(*reference_problem);
    else if (vacuous)
      smoke_note = tuning::smoke_vacuous_detail(*vacuous);
    // The full launch's own clock (its wall time, timeout and harness-clock checks) starts now:
    // the probe is charged in device-seconds only.
    sup.start = decltype(sup.start)::clock::now();
  }
  auto base_env = current_environment();
  // Device memory is sampled where the driver's tool is installed (and costs nothing elsewhere).
  if (launcher != tuning::launcher_kind::slurm) {
    auto path = base_env.find("PATH");
    if (auto smi = find_on_path("nvidia-smi", path != base_env.end() ? path->second : "")) {
      sup.device.program = *smi;
      sup.device.env = base_env;
    }
  }
  // A Slurm trial is a job step of the allocation infrarsi runs in; it never asks Slurm for an
  // allocation of its own (that would queue, and the queue's wait would count as its time).
  if (launcher == tuning::launcher_kind::slurm && base_env.count("SLURM_JOB_ID") == 0)
    return finish({wire::Outcome::LaunchError, 0,
                   "workload.launcher = \"slurm\" runs the ranks as a job step (srun) of the "
                   "Slurm allocation infrarsi runs in, and SLURM_JOB_ID is not set: run infrarsi "
                   "inside one (salloc -n N infrarsi ..., or in an sbatch script)"});
  workload_copy copy; // the trial's copy of the workload, when it runs in one
  if (!req.patches.empty() || !req.scope_lock.empty()) {
    std::string failure;
    std::string violation;
    auto dest = trial_dir + "/workdir";
    if (auto err =
          copy_and_patch(task, req.patches, req.scope_lock, dest, failure, violation, copy))
      return err;
    if (!violation.empty())
      return finish({wire::Outcome::ContractViolation, 0, violation});
    if (!failure.empty())
      return finish({wire::Outcome::LaunchError, 0, failure});
    report.workdir = dest;
  }

  // The torchrun environment contract: every rank, or (distributed_env = multi_rank) only a
  // trial of more than one rank; a plain process gets none of it, inherited variables included.
  const bool distributed =
    ranks_launcher && (task.workload.distributed_env == tuning::distributed_env_kind::always
                       || world_size > 1);
  std::set<std::string> unset;
  if (ranks_launcher && !distributed)
    unset.insert(torchrun_env_names().begin(), torchrun_env_names().end());
  int port = 0;
  if (distributed || labelled) {
    auto p = free_tcp_port();
    if (!p)
      return std::move(p.error());
    port = *p;
  }
  for (const auto& name : unset)
    base_env.erase(name);
  base_env.emplace("PYTHONUNBUFFERED", "1"); // line-timely output from Python workloads
  for (int rank = 0; rank < processes; ++rank) {
    auto rank_vars = vars;
    if (ranks_launcher)
      rank_vars["rank"] = std::to_string(rank);
    spawn_request sreq;
    sreq.workdir = report.workdir;
    sreq.register_group = true; // signal_all_groups() reaches it; unregistered by loop()
    for (const auto& a : task.workload.argv) {
      auto rendered = tuning::render_template(a, rank_vars, why);
      if (!rendered)
        return make_error(errc::invalid_argument, "workload.argv: " + why);
      sreq.argv.push_back(*rendered);
    }
    sreq.env = base_env;
    for (const auto& [k, v] : task.workload.env) {
      // An env knob set to "unset": the variable is left out, also when inherited.
      if (const auto* knob = tuning::sole_knob_of(task, v);
          knob != nullptr && tuning::may_be_unset(*knob)) {
        const auto* text = std::get_if<std::string>(&knobs->at(knob->name));
        if (text != nullptr && *text == tuning::unset_env_value) {
          sreq.env.erase(k);
          if (rank == 0 && std::find(report.env_unset.begin(), report.env_unset.end(), k)
                             == report.env_unset.end())
            report.env_unset.push_back(k);
          continue;
        }
      }
      auto rendered = tuning::render_template(v, rank_vars, why);
      if (!rendered)
        return make_error(errc::invalid_argument, "workload.env." + k + ": " + why);
      sreq.env[k] = *rendered;
      if (rank == 0)
        report.env[k] = *rendered;
    }
    if (launcher == tuning::launcher_kind::slurm) {
      // Each task derives RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and MASTER_ADDR from
      // Slurm's variables (slurm_rank_script); the port is the launcher's.
      for (const auto& name : torchrun_env_names())
        sreq.env.erase(name);
      sreq.env["MASTER_PORT"] = std::to_string(port);
    } else if (launcher == tuning::launcher_kind::torchrun) {
      for (const auto& name : torchrun_env_names()) // torchrun sets them for every rank
        sreq.env.erase(name);
    }
    if (distributed) {
      sreq.env["RANK"] = std::to_string(rank);
      sreq.env["LOCAL_RANK"] = std::to_string(rank);
      sreq.env["WORLD_SIZE"] = std::to_string(world_size);
      sreq.env["LOCAL_WORLD_SIZE"] = std::to_string(world_size);
      sreq.env["MASTER_ADDR"] = "127.0.0.1";
      sreq.env["MASTER_PORT"] = std::to_string(port);
    }
    sreq.env["INFRARSI_TRIAL_ID"] = std::to_string(req.trial_id);
    sreq.env["INFRARSI_ATTEMPT"] = std::to_string(req.attempt);
    sreq.env["INFRARSI_TRIAL_DIR"] = trial_dir;
    sreq.env[trial_descendants::marker_name] = sup.tree.marker_value();
    sreq.cgroup_procs = sup.tree.cgroup_procs_file();
    if (cap > 0)
      sreq.env["INFRARSI_MEMORY_CAP_BYTES"] = std::to_string(cap);
    // A relative program path ("../../build/bin/x", ".bin/x") means relative to the task's
    // workload directory, also when the trial runs in a patched copy elsewhere.
    if (!sreq.argv.empty() && sreq.argv[0].find('/') != std::string::npos
        && sreq.argv[0].front() != '/')
      sreq.argv[0] = (fs::path{task.workload.workdir} / sreq.argv[0]).lexically_normal().string();
    if (launcher == tuning::launcher_kind::slurm) {
      srun_plan plan;
      plan.world_size = static_cast<int>(world_size);
      plan.workdir = report.workdir;
      plan.step_name =
        "infrarsi-trial-" + std::to_string(req.trial_id) + "-" + std::to_string(req.attempt);
      for (const auto& a : task.workload.srun_args) {
        auto rendered = tuning::render_template(a, rank_vars, why);
        if (!rendered)
          return make_error(errc::invalid_argument, "workload.srun_args: " + why);
        plan.extra_args.push_back(*rendered);
      }
      plan.argv = std::move(sreq.argv);
      sreq.argv = srun_command(plan);
      sup.helper_env = sreq.env;
    } else if (launcher == tuning::launcher_kind::torchrun) {
      torchrun_plan plan;
      plan.program = task.workload.torchrun_program;
      plan.world_size = static_cast<int>(world_size);
      plan.port = port;
      plan.rdzv_id =
        "infrarsi-" + std::to_string(req.trial_id) + "-" + std::to_string(req.attempt);
      plan.log_dir = trial_dir + "/torchrun";
      for (const auto& a : task.workload.torchrun_args) {
        auto rendered = tuning::render_template(a, rank_vars, why);
        if (!rendered)
          return make_error(errc::invalid_argument, "workload.torchrun_args: " + why);
        plan.extra_args.push_back(*rendered);
      }
      plan.argv = std::move(sreq.argv);
      sreq.argv = torchrun_command(plan);
    }
    if (rank == 0)
      report.argv = sreq.argv;

    auto child = spawn(sreq);
    if (!child) {
      if (code_of(child.error()) == errc::not_found) {
        // The rank never started: its logs say why, as a rank that failed to exec would.
        if (!labelled)
          for (bool is_out : {true, false}) {
            auto path =
              trial_dir + "/rank-" + std::to_string(rank) + (is_out ? ".stdout" : ".stderr");
            std::ofstream log{path, std::ios::binary | std::ios::trunc};
            if (!is_out)
              log << "infrarsi: rank " << rank << " was not started: " << describe(child.error())
                  << '\n';
            report.log_files.push_back(path);
          }
        sup.add_cause(trial_cause::kind_t::exec_failed, rank, 127, describe(child.error()));
        sup.begin_stop();
        break;
      }
      sup.begin_stop();
      sup.loop();
      return std::move(child.error());
    }
    sup.ranks.push_back({child->pid, true, 0, 0});
    sup.tree.add_rank(child->pid);
    for (bool is_out : {true, false}) {
      stream_state s;
      s.fd = is_out ? child->stdout_fd : child->stderr_fd;
      s.rank = rank;
      s.is_stdout = is_out;
      s.labelled = labelled;
      if (!labelled) {
        auto path =
          trial_dir + "/rank-" + std::to_string(rank) + (is_out ? ".stdout" : ".stderr");
        s.log.open(path, std::ios::binary | std::ios::trunc);
        report.log_files.push_back(path);
      }
      sup.streams.push_back(std::move(s));
    }
    if (labelled) {
      // Every rank's lines, demultiplexed by their labels, in rank-N.stdout / rank-N.stderr as
      // for the ranks launcher; srun's (torchrun's) own lines in srun.* (torchrun.*).
      for (int r = 0; r < world_size; ++r)
        for (bool is_out : {true, false}) {
          auto path = trial_dir + "/rank-" + std::to_string(r) + (is_out ? ".stdout" : ".stderr");
          sup.rank_logs.emplace_back(path, std::ios::binary | std::ios::trunc);
          report.log_files.push_back(path);
        }
      std::string name = launcher == tuning::launcher_kind::slurm ? "srun" : "torchrun";
      for (int i = 0; i < 2; ++i) {
        auto path = trial_dir + "/" + name + (i == 0 ? ".stdout" : ".stderr");
        sup.launcher_logs[i].open(path, std::ios::binary | std::ios::trunc);
        report.log_files.push_back(path);
      }
    }
  }
  sup.loop();
  if (launcher == tuning::launcher_kind::slurm && !sup.slurm_step.empty() && !sup.ranks.empty()
      && WIFSIGNALED(sup.ranks.front().wait_status))
    sup.signal_step("KILL"); // srun was killed before its step ended: nothing may outlive it
  for (const auto& name : unset) // a variable the task's own env sets again is not removed
    if (report.env.count(name) == 0
        && std::find(report.env_unset.begin(), report.env_unset.end(), name)
             == report.env_unset.end())
      report.env_unset.push_back(name);
  std::sort(report.env_unset.begin(), report.env_unset.end());
  report.descendants = sup.tree.description();
  // How to tell which mechanism ended this trial's descendants (docs/node-runner.md).
  std::ofstream{trial_dir + "/descendants.txt"} << report.descendants << '\n';

  bool all_zero = !sup.ranks.empty();
  for (const auto& r : sup.ranks)
    all_zero = all_zero && WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0;
  sup.obs.all_exited_zero = all_zero && static_cast<int>(sup.ranks.size()) == processes;
  sup.obs.final_line_seen = sup.parser.final_seen();
  if (sup.parser.final_seen()) {
    const auto& f = *sup.parser.final_line();
    auto st = f.find("status");
    sup.obs.final_line_ok = st == f.end() || (st->is_string() && st->get<std::string>() == "ok");
  }
  for (const auto& t : sup.tails)
    sup.obs.stderr_tails.push_back(t.text());
  auto verdict = classify(sup.obs);
  // A file the workload wrote in place through a hard link of its copy changed the original.
  if (auto through = written_through(copy, report.workdir); !through.empty())
    verdict = {wire::Outcome::ContractViolation, verdict.exit_code, "scope: " + through};
  return finish(verdict);
}

caf::expected<std::vector<std::pair<std::string, std::string>>>
patch_conflicts(const tuning::task_spec& task, const std::vector<std::string>& names,
                const std::string& scratch_dir, std::map<std::string, std::string>* not_alone) {
  std::vector<std::pair<std::string, std::string>> conflicts;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto* first = task.find_patch(names[i]);
    if (first == nullptr)
      return make_error(errc::invalid_argument, "no patch '" + names[i] + "'");
    auto dest = scratch_dir + "/" + std::to_string(i);
    std::error_code ec;
    // Own bytes for every path these patches name: each is applied to this copy.
    const std::vector<std::string> these{names.begin() + static_cast<std::ptrdiff_t>(i),
                                           names.end()};
    if (auto copied = copy_workload(task.workload.workdir, dest, trial_copy_rules(task, these));
        !copied)
      return std::move(copied.error());
    std::string err_text;
    bool applied = git_apply(first->file, dest, false, err_text);
    if (!applied && not_alone != nullptr)
      (*not_alone)[names[i]] = err_text.empty() ? "git apply failed" : err_text;
    for (std::size_t j = i + 1; j < names.size(); ++j) {
      std::string why;
      if (!applied || !git_apply(task.find_patch(names[j])->file, dest, true, why))
        conflicts.emplace_back(names[i], names[j]);
    }
    fs::remove_all(dest, ec);
  }
  return conflicts;
}

bool patch_applies(const std::string& patch_file, const std::string& dir, std::string& why) {
  return git_apply(patch_file, dir, true, why);
}

} // namespace infrarsi::adapters
