// kill -9 with four trials in flight: `infrarsi tune --nodes 4` on a simulator task is SIGKILLed
// (its whole process group) at least 20 times in one run, most kills landing while four trials
// run, and resumed with `--run ID --nodes 4` until it finishes. Then: every event the log
// acknowledged (--trace-appends) survived with its kind; every proposed attempt has exactly one
// terminal event (TrialCompleted or TrialLost); every lost attempt was re-queued exactly once as
// the next attempt; the search ran its budget of 16 distinct trials (or stopped by its policy's
// stop rule before, as logged) and logged why it stopped;
// the run ends with ChangesApplied; `infrarsi replay` reproduces it; and it promotes what an
// uninterrupted `--nodes 4` run with the same seed promotes, by the simulator's noise-free step
// time (`infrarsi-sim --enumerate`). With four trials in flight the arrival order, and so the
// proposals, differ from run to run, and the minimal-change step may give up a change worth less
// than the promotion margin (about 1 %): two runs that both work can promote different
// configurations of the small search space (tests/durability/sim_task.hpp) within about 1 % of
// each other and of its optimum (seen on 2026-12-03: runs 0.5 % and 0.8 % behind it). So the
// check is the promoted configuration's true step time: within 2 % of the uninterrupted run's,
// which is itself within 2 % of the optimum. A resume that lost progress or miscounted the
// budget ends further away (most of the 72 configurations are more than 2 % behind).

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sim_task.hpp"
#include "test_util.hpp"
#include "tune_process.hpp"

namespace infrarsi {
namespace {

constexpr unsigned k_dispatched = static_cast<unsigned>(wire::EventKind::TrialDispatched);
constexpr unsigned k_completed = static_cast<unsigned>(wire::EventKind::TrialCompleted);
constexpr unsigned k_lost = static_cast<unsigned>(wire::EventKind::TrialLost);
constexpr unsigned k_search_stopped = static_cast<unsigned>(wire::EventKind::SearchStopped);

/// What a --trace-appends file says so far.
struct trace_state {
  std::vector<std::pair<std::uint64_t, unsigned>> lines; // (sequence, kind)
  /// Attempts dispatched and not yet ended, by the acknowledged events.
  int in_flight = 0;
  int completed = 0;
  bool search_stopped = false;
  unsigned last_kind = 0;
};

trace_state read_trace(const std::string& file) {
  trace_state t;
  std::ifstream in{file};
  std::uint64_t seq = 0;
  unsigned kind = 0;
  while (in >> seq >> kind) {
    t.lines.emplace_back(seq, kind);
    t.in_flight += kind == k_dispatched ? 1 : 0;
    t.in_flight -= kind == k_completed || kind == k_lost ? 1 : 0;
    t.completed += kind == k_completed ? 1 : 0;
    t.search_stopped = t.search_stopped || kind == k_search_stopped;
    t.last_kind = kind;
  }
  return t;
}

/// The trials' program: the simulator after 0.3 s, so that four trials really are in flight at
/// once.
const std::string script = "sleep 0.3 && exec \"$0\" \"$@\"";

std::string write_task(const test::temp_dir& dir) {
  auto path = dir.sub("sim-nodes-crash.toml");
  std::ofstream{path} << test::small_sim_task_text(
    dir, script,
    "\n[budget]\ntrials = 16\nbaseline_repeats = 4\nverify_top = 2\nverify_repeats = 5\n");
  return path;
}

/// The simulator's noise-free step time (seconds) of every configuration of the task, by its
/// knobs as plain JSON ({"tp":2,...}): `infrarsi-sim --enumerate` on the task with the /bin/sh
/// wrapper of small_sim_task_text taken out of its argv.
std::map<std::string, double> true_step_times(const test::temp_dir& dir) {
  auto text = test::small_sim_task_text(dir, script, "");
  test::replace_first(text, "\"/bin/sh\", \"-c\", '" + script + "', ", "");
  const auto task = dir.sub("enumerate.toml");
  const auto out = dir.sub("enumerate.jsonl");
  std::ofstream{task} << text;
  const std::string sim = std::string{INFRARSI_SOURCE_DIR} + "/workloads/sim/.bin/infrarsi-sim";
  const std::string command =
    "'" + sim + "' --enumerate --task '" + task + "' --patches none > '" + out + "' 2>&1";
  std::map<std::string, double> times;
  if (std::system(command.c_str()) != 0)
    return times;
  std::ifstream in{out};
  for (std::string line; std::getline(in, line);) {
    auto row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_object() && row.contains("knobs") && row.value("valid", false)
        && !row.value("oom", true))
      times[row["knobs"].dump()] = row.value("step_time_s", 0.0);
  }
  return times;
}

/// The promoted configuration's knobs as plain JSON ({"tp":2,...}; the event's values are
/// typed: {"tp":{"int":2}}), or "" when nothing was promoted.
std::string promoted_knobs(const test::logged_run& run) {
  auto promoted = run.of(wire::EventKind::CandidatePromoted);
  if (promoted.size() != 1 || !promoted.front()->doc.value("promoted", false))
    return "";
  nlohmann::json plain = nlohmann::json::object();
  for (const auto& [name, typed] : promoted.front()->doc["config"]["knobs"].items())
    for (const auto& [type, value] : typed.items())
      plain[name] = value;
  return plain.dump();
}

std::string promoted_config(const test::logged_run& run) {
  auto promoted = run.of(wire::EventKind::CandidatePromoted);
  if (promoted.size() != 1)
    return "(" + std::to_string(promoted.size()) + " CandidatePromoted events)";
  const auto& doc = promoted.front()->doc;
  if (!doc.value("promoted", false))
    return "(nothing promoted: " + doc.value("reason", "") + ")";
  return doc.value("config", nlohmann::json{}).dump();
}

TEST(NodesCrash, FourInFlightKilledTwentyTimesLosesNothingAndPromotesWhatAnUninterruptedRunDoes) {
  test::temp_dir dir;
  auto task = write_task(dir);
  const std::string seed = "31";
  const auto store = dir.sub("killed");
  const auto trace = dir.sub("trace");
  const auto output = dir.sub("output-killed");
  const int target = 20;
  std::mt19937_64 rng{20261201};
  int kills = 0;
  int kills_four_in_flight = 0;
  bool finished = false;
  int four_kills = 0;
  int carried = 0; // attempts the log shows dispatched and unfinished after the last kill
  std::string run_id;
  std::string history; // one line per launch, for a failure message
  for (int launch = 0; launch < 120 && !finished; ++launch) {
    std::vector<std::string> args = {"tune",  task,     "--store", store, "--seed", seed,
                                     "--nodes", "4",      "--trace-appends", trace, "--quiet"};
    if (run_id.empty())
      args.insert(args.end(), {"--trials", "16"});
    else
      args.insert(args.end(), {"--run", run_id});
    const auto before = read_trace(trace);
    pid_t pid = test::start_cli(args, output);
    ASSERT_GT(pid, 0);
    // While the search runs (after two launches killed during init), every launch dies with four
    // trials in flight, right after the log acknowledged the dispatch that made it four: four
    // times in a row at once (the four re-queued attempts are lost again), then once only after
    // this life saw them and at least four trials end, so that the run moves on and no trial is
    // lost max_attempts times. Before and after the search, at a random moment once this life
    // has appended a few events and the attempts re-queued at its start have ended: init,
    // verdicts, re-verification, report, apply.
    const bool four_mode = !before.search_stopped && launch >= 2;
    const bool want_progress = four_mode && four_kills++ % 5 == 4;
    const int requeued = carried; // lost and re-queued by this life
    // In flight now: what the log left unfinished plus this life's dispatches less its ends (the
    // trace alone can miss the tail of a batch a kill cut short: its lines are written after
    // the append, one by one).
    auto in_flight = [&](const trace_state& now) { return carried + now.in_flight - before.in_flight; };
    const std::size_t lines_wanted = std::uniform_int_distribution<std::size_t>{1, 3}(rng);
    const auto extra_ms = std::uniform_int_distribution<int>{0, four_mode ? 60 : 150}(rng);
    const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(four_mode ? 3 : 6);
    int status = 0;
    bool exited = false;
    bool fire = false;
    while (!fire && std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        break;
      }
      auto now = read_trace(trace);
      auto new_lines = now.lines.size() - before.lines.size();
      auto ended = now.completed - before.completed;
      if (four_mode)
        fire = new_lines > 0 && in_flight(now) == 4 && now.last_kind == k_dispatched
               && (!want_progress || ended >= std::max(4, requeued));
      else
        fire = new_lines >= lines_wanted && ended >= requeued;
      if (!fire)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!exited) {
      std::this_thread::sleep_for(std::chrono::milliseconds(extra_ms));
      if (::waitpid(pid, &status, WNOHANG) == pid)
        exited = true;
    }
    auto at_end = read_trace(trace);
    if (!exited) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ++kills;
      kills_four_in_flight += in_flight(at_end) == 4 ? 1 : 0;
    }
    history += "launch " + std::to_string(launch) + ": "
               + (four_mode ? (want_progress ? "four after progress" : "four at once")
                            : "random")
               + (exited ? ", exited" : fire ? ", killed" : ", killed at the deadline") + " with "
               + std::to_string(in_flight(at_end)) + " in flight after "
               + std::to_string(at_end.lines.size() - before.lines.size()) + " events ("
               + std::to_string(at_end.completed - before.completed) + " ended)\n";
    // Every acknowledged event survived, with its kind.
    auto logged = test::read_logged_run(store, run_id);
    if (logged) {
      run_id = logged->run_id;
      std::map<std::uint64_t, unsigned> kinds;
      std::set<std::pair<std::uint64_t, std::uint32_t>> unfinished;
      for (const auto& e : logged->events) {
        kinds[e.sequence] = e.kind;
        if (e.is(wire::EventKind::TrialDispatched))
          unfinished.insert({e.trial, e.attempt});
        else if (e.is(wire::EventKind::TrialCompleted) || e.is(wire::EventKind::TrialLost))
          unfinished.erase({e.trial, e.attempt});
      }
      carried = static_cast<int>(unfinished.size());
      for (const auto& [seq, kind] : read_trace(trace).lines) {
        ASSERT_EQ(kinds.count(seq), 1u) << "acknowledged event " << seq << " is gone (launch "
                                        << launch << ")";
        ASSERT_EQ(kinds[seq], kind) << "event " << seq;
      }
    }
    if (exited) {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "tune failed (launch " << launch << "); output:\n" << test::file_text(output);
      finished = true;
    }
  }
  ASSERT_TRUE(finished) << "the run never finished; output:\n" << test::file_text(output);
  EXPECT_GE(kills, target) << "the run finished before it was killed " << target << " times:\n"
                           << history;
  EXPECT_GE(kills_four_in_flight, 8) << history;

  auto run = test::read_logged_run(store, run_id);
  ASSERT_TRUE(run);
  // Every proposed attempt ended exactly once: completed or lost; nothing else ended.
  std::map<std::pair<std::uint64_t, std::uint32_t>, int> proposed;
  std::map<std::pair<std::uint64_t, std::uint32_t>, int> terminal;
  std::set<std::uint64_t> explore;
  for (const auto* e : run->of(wire::EventKind::TrialProposed)) {
    ++proposed[{e->trial, e->attempt}];
    if (e->purpose == wire::Purpose::Explore)
      explore.insert(e->trial);
  }
  for (const auto* e : run->of(wire::EventKind::TrialCompleted))
    ++terminal[{e->trial, e->attempt}];
  for (const auto* e : run->of(wire::EventKind::TrialLost))
    ++terminal[{e->trial, e->attempt}];
  for (const auto& [a, n] : proposed) {
    EXPECT_EQ(n, 1) << "trial " << a.first << " attempt " << a.second << " proposed " << n
                    << " times";
    EXPECT_EQ(terminal[a], 1) << "trial " << a.first << " attempt " << a.second << " has "
                              << terminal[a] << " terminal events";
  }
  for (const auto& [a, n] : terminal)
    EXPECT_EQ(proposed.count(a), 1u) << "trial " << a.first << " attempt " << a.second
                                     << " ended without being proposed";
  // Every lost attempt was re-queued exactly once as the next attempt, and only those were.
  const auto lost = run->of(wire::EventKind::TrialLost);
  for (const auto* e : lost)
    EXPECT_EQ(proposed.count({e->trial, e->attempt + 1}), 1u)
      << "lost trial " << e->trial << " attempt " << e->attempt << " was not re-queued";
  std::set<std::pair<std::uint64_t, std::uint32_t>> lost_attempts;
  for (const auto* e : lost)
    lost_attempts.insert({e->trial, e->attempt});
  for (const auto& [a, n] : proposed) {
    if (a.second > 0) {
      EXPECT_EQ(lost_attempts.count({a.first, a.second - 1}), 1u)
        << "trial " << a.first << " attempt " << a.second << " re-queued without a lost attempt";
    }
  }
  EXPECT_GE(lost.size(), 8u) << "the kills did not land inside trials";
  // The search ran exactly what it logged: its budget of 16, or fewer when the policy's stop
  // rule ended it (bayes_ei/1 stops once nothing left is expected to beat the minimum detectable
  // speedup: on this small space that can come before 16) — never more, never a trial twice.
  auto stopped = run->of(wire::EventKind::SearchStopped);
  ASSERT_EQ(stopped.size(), 1u);
  const auto reason = stopped.front()->doc.value("reason", "");
  EXPECT_EQ(stopped.front()->doc.value("search_trials", 0u), explore.size())
    << stopped.front()->doc.dump();
  if (reason == "budget")
    EXPECT_EQ(explore.size(), 16u);
  else
    EXPECT_EQ(reason, "policy") << stopped.front()->doc.dump();
  EXPECT_LE(explore.size(), 16u);
  EXPECT_GE(explore.size(), 8u);
  // It ends with ChangesApplied (only stage bookkeeping after it).
  auto applied = run->of(wire::EventKind::ChangesApplied);
  ASSERT_EQ(applied.size(), 1u);
  for (const auto& e : run->events) {
    if (e.sequence > applied.front()->sequence) {
      EXPECT_TRUE(e.is(wire::EventKind::StageCompleted))
        << "event " << e.sequence << " (kind " << e.kind << ") after ChangesApplied";
    }
  }
  // replay reproduces every decision of the resumed run (no task file: it is in the log).
  EXPECT_EQ(test::run_cli({"replay", run_id, "--store", store}, dir.sub("output-replay")), 0)
    << test::file_text(dir.sub("output-replay"));

  // The same seed, never interrupted.
  const auto ref_store = dir.sub("uninterrupted");
  ASSERT_EQ(test::run_cli({"tune", task, "--store", ref_store, "--seed", seed, "--nodes", "4",
                           "--trials", "16", "--quiet"},
                          dir.sub("output-ref")),
            0)
    << test::file_text(dir.sub("output-ref"));
  auto ref = test::read_logged_run(ref_store);
  ASSERT_TRUE(ref);
  const auto truth = true_step_times(dir);
  ASSERT_EQ(truth.size(), 72u) << "infrarsi-sim --enumerate: "
                               << test::file_text(dir.sub("enumerate.jsonl"));
  double optimum = truth.begin()->second;
  for (const auto& [knobs, t] : truth)
    optimum = std::min(optimum, t);
  const auto resumed_knobs = promoted_knobs(*run);
  const auto ref_knobs = promoted_knobs(*ref);
  ASSERT_EQ(truth.count(ref_knobs), 1u) << "the uninterrupted run: " << promoted_config(*ref);
  ASSERT_EQ(truth.count(resumed_knobs), 1u) << "the resumed run: " << promoted_config(*run);
  const double t_ref = truth.at(ref_knobs);
  const double t_resumed = truth.at(resumed_knobs);
  std::cout << "true step time (s): optimum " << optimum << ", uninterrupted " << t_ref << " ("
            << ref_knobs << "), resumed " << t_resumed << " (" << resumed_knobs << ")\n";
  EXPECT_LE(t_ref, 1.02 * optimum) << ref_knobs;
  EXPECT_LE(t_resumed, 1.02 * t_ref)
    << "the resumed run promoted a slower configuration than the uninterrupted one: "
    << resumed_knobs << " against " << ref_knobs
    << "; stores kept only with INFRARSI_KEEP_CRASH_DIR";
  if (::testing::Test::HasFailure() && std::getenv("INFRARSI_KEEP_CRASH_DIR") != nullptr) {
    std::error_code ec;
    std::filesystem::copy(dir.path(), "/tmp/nodes-crash-kept",
                          std::filesystem::copy_options::recursive, ec);
  }
  std::cout << history << kills << " kills (" << kills_four_in_flight << " with 4 trials in flight), "
            << lost.size() << " attempts lost and re-queued, promoted " << promoted_config(*run)
            << '\n';
}

} // namespace
} // namespace infrarsi
