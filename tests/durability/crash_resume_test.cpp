// Issue 8's crash test: `infrarsi tune` on a simulator task is SIGKILLed at random points (at
// least 20 times) and resumed with --run each time. After every kill, every event the log had
// acknowledged (the --trace-appends file) is present with its kind; at the end no trial attempt
// has two terminal events and the sequence of proposals (and the promotion) equals that of an
// uninterrupted run with the same seed. The simulator reproduces a trial exactly from its launch
// id (the task passes --attempt 0), so a re-queued trial measures what the lost one would have.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "messages/codec.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"
#include "sim_task.hpp"
#include "sanitized.hpp"
#include "test_util.hpp"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;

/// sim-dense-1node with an absolute workdir, a small budget, and launches reproducible from the
/// trial id alone.
std::string write_task(const test::temp_dir& dir) {
  std::string text = test::sim_task_text(dir, "sim-dense-1node");
  auto replace = [&text](const std::string& from, const std::string& to) {
    auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  replace("\"--attempt\", \"{attempt}\"", "\"--attempt\", \"0\"");
  // Every trial takes at least 40 ms of wall time (the simulator itself takes a few), so that a
  // kill can land inside one: the program is sh, which sleeps and then execs the simulator with
  // the same argument vector (no shell parsing of the arguments).
  replace("argv = [\".bin/infrarsi-sim\",",
          "argv = [\"/bin/sh\", \"-c\", \"sleep 0.04 && exec \\\"$0\\\" \\\"$@\\\"\", \""
            + std::string{INFRARSI_SOURCE_DIR} + "/workloads/sim/.bin/infrarsi-sim\",");
  text += "\n[budget]\ntrials = 12\nbaseline_repeats = 3\nverify_top = 2\nverify_repeats = 3\n";
  auto path = dir.sub("sim-crash.toml");
  std::ofstream{path} << text;
  return path;
}

/// Starts `infrarsi tune` (own process group, output to a file); returns its pid.
pid_t start_tune(const std::vector<std::string>& args, const std::string& log_file) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    std::FILE* f = std::freopen(log_file.c_str(), "a", stderr);
    static_cast<void>(f);
    std::FILE* g = std::freopen(log_file.c_str(), "a", stdout);
    static_cast<void>(g);
    std::vector<char*> argv;
    std::string bin = INFRARSI_CLI_PATH;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  if (pid > 0)
    ::setpgid(pid, pid); // also from here: a kill(-pid) right after the fork reaches the child
  return pid;
}

std::size_t count_lines(const std::string& file) {
  std::ifstream in{file};
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);)
    ++n;
  return n;
}

/// The event kind on the last line of a --trace-appends file (0 if none).
unsigned last_kind(const std::string& file) {
  std::ifstream in{file};
  unsigned kind = 0;
  std::uint64_t seq = 0;
  unsigned k = 0;
  while (in >> seq >> k)
    kind = k;
  return kind;
}

/// Lines of kind `kind` in a --trace-appends file after its first `skip` lines.
std::size_t count_kind_after(const std::string& file, std::size_t skip, unsigned kind) {
  std::ifstream in{file};
  std::size_t line = 0;
  std::size_t n = 0;
  std::uint64_t seq = 0;
  unsigned k = 0;
  while (in >> seq >> k)
    if (line++ >= skip && k == kind)
      ++n;
  return n;
}

struct run_summary {
  std::string run_id;
  /// (trial id, purpose, configuration key) of every first-attempt TrialProposed, in order.
  std::vector<std::string> proposals;
  std::string promotion;
  /// (trial, attempt) -> terminal events (TrialCompleted, TrialLost).
  std::map<std::pair<std::uint64_t, std::uint32_t>, int> terminals;
  std::map<std::uint64_t, std::uint16_t> kinds; // sequence -> kind
  /// TrialLost events (in-flight trials found on a restart) and RunCreated/StageStarted counts.
  int lost = 0;
  bool finished = false;
};

std::optional<run_summary> read_run(const std::string& store, const std::string& run_id = "") {
  store::rocksdb_event_log_options o;
  o.read_only = true;
  auto log = store::rocksdb_event_log::open(store + "/events", o);
  if (!log)
    return std::nullopt;
  auto runs = (*log)->list_runs();
  if (!runs || runs->empty())
    return std::nullopt;
  run_summary s;
  s.run_id = run_id.empty() ? runs->front().run_id : run_id;
  std::map<std::uint64_t, bool> seen;
  auto err = (*log)->for_each_in_stream(s.run_id, 0, [&](const store::recorded_event& ev) {
    s.kinds[ev.sequence] = ev.kind;
    auto kind = static_cast<wire::EventKind>(ev.kind);
    if (kind == wire::EventKind::TrialProposed) {
      auto spec = messages::trial_spec_msg::decode(ev.payload);
      if (spec && !seen[(*spec)->trial_id()]) {
        seen[(*spec)->trial_id()] = true;
        s.proposals.push_back(std::to_string((*spec)->trial_id()) + " "
                              + (*spec)->purpose()->str() + " "
                              + store::configuration_of(**spec).key());
      }
    } else if (kind == wire::EventKind::TrialCompleted) {
      auto r = messages::trial_result_msg::decode(ev.payload);
      if (r)
        ++s.terminals[{(*r)->trial_id(), (*r)->attempt()}];
    } else if (kind == wire::EventKind::TrialLost) {
      auto spec = messages::trial_spec_msg::decode(ev.payload);
      if (spec)
        ++s.terminals[{(*spec)->trial_id(), (*spec)->attempt()}];
      ++s.lost;
    } else if (kind == wire::EventKind::CandidatePromoted) {
      auto doc = messages::document_msg::decode(ev.payload);
      if (doc)
        s.promotion = (*doc)->json()->str();
    } else if (kind == wire::EventKind::ChangesApplied) {
      s.finished = true;
    }
    return true;
  });
  if (err)
    return std::nullopt;
  return s;
}

/// Kills: 20 by default (6 under sanitizers, where each launch of the ASan binary to the end of
/// the run takes 2-4x longer and 20 kills plus their reference runs exceed the 900 s timeout;
/// docs/testing.md); the longer variant sets INFRARSI_CRASH_KILLS (e.g. 200) and optionally
/// INFRARSI_CRASH_SEED (docs/tune.md).
int wanted_kills() {
  const char* v = std::getenv("INFRARSI_CRASH_KILLS");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : (test::sanitized ? 6 : 20);
}

TEST(CrashResume, KilledTwentyTimesLosesNothingAndProposesWhatAnUninterruptedRunWould) {
  test::temp_dir dir;
  auto task = write_task(dir);
  const int target = wanted_kills();
  const char* seed_env = std::getenv("INFRARSI_CRASH_SEED");
  std::mt19937_64 rng{seed_env != nullptr ? std::strtoull(seed_env, nullptr, 10) : 20261130};
  int kills = 0;
  int runs = 0;
  int lost_total = 0;
  while (kills < target && runs < 6 + target / 4) {
    ++runs;
    auto seed = std::to_string(100 + runs);
    auto store = dir.sub("killed-" + seed);
    auto trace = dir.sub("trace-" + seed);
    auto output = dir.sub("output-" + seed);
    std::string run_id;
    for (int launch = 0; launch < 200; ++launch) {
      std::vector<std::string> args = {"tune", task, "--store", store, "--seed", seed,
                                       "--trace-appends", trace, "--quiet"};
      if (!run_id.empty())
        args.insert(args.end(), {"--run", run_id});
      auto pid = start_tune(args, output);
      ASSERT_GT(pid, 0);
      // Kill at a random point: most launches die somewhere in the run, some before the first
      // append (start-up), some never (the run ends first). Every other launch is killed while
      // a trial is in flight: right after the log acknowledged this launch's first, second or
      // third TrialDispatched (in turn). The first dispatch after a restart is the re-queued
      // attempt of the trial the previous kill lost; killing always there would lose that one
      // trial max_attempts times, which a run interrupted at random points does not do.
      std::uniform_int_distribution<int> delay_ms{5, 400};
      bool in_flight = launch % 2 == 1;
      std::size_t nth_dispatch = 1 + static_cast<std::size_t>(launch / 2) % 3;
      auto deadline = std::chrono::steady_clock::now()
                      + std::chrono::milliseconds(in_flight ? 5000 : delay_ms(rng));
      auto trace_lines_before = count_lines(trace);
      int status = 0;
      bool exited = false;
      while (std::chrono::steady_clock::now() < deadline) {
        if (::waitpid(pid, &status, WNOHANG) == pid) {
          exited = true;
          break;
        }
        if (in_flight
            && count_kind_after(trace, trace_lines_before,
                                static_cast<unsigned>(wire::EventKind::TrialDispatched))
                 >= nth_dispatch
            && last_kind(trace) == static_cast<unsigned>(wire::EventKind::TrialDispatched)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng) % 20));
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!exited && kills < target) {
        ::kill(-pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        ++kills;
      } else if (!exited) {
        ::waitpid(pid, &status, 0);
        exited = true;
      }
      // Every acknowledged event survived, with its kind.
      auto s = read_run(store, run_id);
      if (s) {
        run_id = s->run_id;
        std::ifstream t{trace};
        std::uint64_t seq = 0;
        unsigned kind = 0;
        while (t >> seq >> kind) {
          ASSERT_EQ(s->kinds.count(seq), 1u) << "acknowledged event " << seq << " is gone";
          EXPECT_EQ(s->kinds[seq], kind) << "event " << seq;
        }
      }
      if (exited) {
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "tune failed; output:\n"
          << std::ifstream{output}.rdbuf();
        break;
      }
    }
    auto killed = read_run(store, run_id);
    ASSERT_TRUE(killed);
    ASSERT_TRUE(killed->finished) << "the run never finished";
    lost_total += killed->lost;
    for (const auto& [trial, n] : killed->terminals)
      EXPECT_EQ(n, 1) << "trial " << trial.first << " attempt " << trial.second << " has " << n
                      << " terminal events";
    // The same seed, never interrupted.
    auto ref_store = dir.sub("uninterrupted-" + seed);
    auto pid = start_tune({"tune", task, "--store", ref_store, "--seed", seed, "--quiet"},
                          dir.sub("output-ref-" + seed));
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    auto ref = read_run(ref_store);
    ASSERT_TRUE(ref);
    for (std::size_t i = 0; i < std::max(killed->proposals.size(), ref->proposals.size()); ++i)
      if (i >= killed->proposals.size() || i >= ref->proposals.size()
          || killed->proposals[i] != ref->proposals[i]) {
        ADD_FAILURE() << "seed " << seed << ": proposal " << i << " differs\n  resumed:       "
                      << (i < killed->proposals.size() ? killed->proposals[i] : "(none)")
                      << "\n  uninterrupted: "
                      << (i < ref->proposals.size() ? ref->proposals[i] : "(none)")
                      << "\n  output: " << dir.sub("output-" + seed);
        break;
      }
    EXPECT_EQ(killed->promotion, ref->promotion) << "seed " << seed;
    if (::testing::Test::HasFailure() && std::getenv("INFRARSI_KEEP_CRASH_DIR") != nullptr) {
      std::error_code ec;
      fs::copy(dir.path(), "/tmp/crash-kept", fs::copy_options::recursive, ec);
    }
    EXPECT_GE(killed->proposals.size(), 12u);
  }
  EXPECT_GE(kills, target);
  // The kills did land inside trials: some in-flight trials were lost and re-queued.
  EXPECT_GE(lost_total, 1);
  std::cout << kills << " kills over " << runs << " run(s); " << lost_total
            << " in-flight trial attempts lost and re-queued\n";
}

} // namespace
} // namespace infrarsi
