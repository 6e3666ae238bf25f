// Event-log benchmarks on a real RocksDB directory (Google Benchmark).
//
//   build/bin/infrarsi_event_log_bench [--store-dir=DIR] [--keep-store] [benchmark flags]
//
// append/single   one event per append (a TrialResult of 8 steps, ~1 KB), sync off / on
// append/batch    64 events per append as one atomic WriteBatch, sync off / on
// fold/stream     fold a 100k-event run with a projection that decodes every TrialResult
// fold/global     the same fold over the global order (for_each from position 0)
// verify/stream   read back every event of that run as `status` / `runs` do (no fold)
// memory/*        the in-memory log, for comparison
// items_per_second is events/s. The store directory defaults to a fresh one under $TMPDIR
// (or /tmp), removed at exit unless --keep-store; it holds one log per configuration
// (single-sync, single-nosync, batch-sync, batch-nosync, fold), each with one run "bench-run" or
// "fold-run".

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include <benchmark/benchmark.h>

#include "runtime/store_paths.hpp"
#include "store/memory_event_log.hpp"
#include "store/rocksdb_event_log.hpp"

namespace {

using namespace infrarsi;
using store::new_event;

std::string g_root;  // directory holding one event log per benchmark configuration
bool g_keep = false; // --keep-store
/// Open logs by configuration name, kept across Google Benchmark's calibration runs and closed
/// in main() before static destruction (RocksDB's own statics must outlive them).
std::map<std::string, std::unique_ptr<store::rocksdb_event_log>> g_logs;

/// A TrialResult of `steps` steps with phase times: ~1 KB for 8 steps.
messages::trial_result_msg result_payload(std::uint64_t trial, std::uint32_t steps) {
  wire::TrialResultT r;
  r.trial_id = trial;
  r.outcome = wire::Outcome::Ok;
  for (std::uint32_t i = 0; i < steps; ++i) {
    auto s = std::make_unique<wire::StepMetricsT>();
    s->step = i;
    s->loss = 4.0 - 0.01 * i;
    s->tokens = 32768;
    s->step_time_s = 0.3;
    s->forward_s = 0.1;
    s->backward_s = 0.15;
    s->optimizer_s = 0.03;
    s->communication_s = 0.02;
    s->peak_memory_bytes = std::uint64_t{2} << 30;
    r.steps.push_back(std::move(s));
  }
  r.wall_time_s = 12.0;
  r.device_seconds = 24.0;
  r.detail = "ok";
  return messages::trial_result_msg::pack(r);
}

std::unique_ptr<store::rocksdb_event_log> open_log(const std::string& dir, bool sync) {
  store::rocksdb_event_log_options opts;
  opts.sync_writes = sync;
  auto log = store::rocksdb_event_log::open(dir, opts);
  if (!log) {
    std::cerr << "cannot open event log: " << describe(log.error()) << '\n';
    g_logs.clear(); // close open logs before static destruction
    std::exit(1);
  }
  return std::move(*log);
}

/// One open log per configuration name, kept across Google Benchmark's calibration runs.
store::event_log& log_for(const std::string& name, bool sync) {
  auto& slot = g_logs[name];
  if (!slot)
    slot = open_log(g_root + "/" + name, sync);
  return *slot;
}

void append_loop(benchmark::State& state, store::event_log& log, std::size_t batch_size) {
  auto payload = result_payload(1, 8);
  std::vector<new_event> batch(batch_size,
                               new_event::of(wire::EventKind::TrialCompleted, payload));
  std::uint64_t version = *log.version("bench-run");
  for (auto _ : state) {
    auto r = log.append("bench-run", version, batch);
    if (!r) {
      state.SkipWithError(describe(r.error()).c_str());
      break;
    }
    version = r->version;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch_size));
  state.SetBytesProcessed(
    static_cast<std::int64_t>(state.iterations() * batch_size * payload.bytes().size()));
}

void BM_append_single(benchmark::State& state) {
  bool sync = state.range(0) != 0;
  append_loop(state, log_for(sync ? "single-sync" : "single-nosync", sync), 1);
}
BENCHMARK(BM_append_single)->Name("append/single")->ArgName("sync")->Arg(0)->Arg(1)
  ->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_append_batch(benchmark::State& state) {
  bool sync = state.range(1) != 0;
  append_loop(state, log_for(sync ? "batch-sync" : "batch-nosync", sync),
              static_cast<std::size_t>(state.range(0)));
}
BENCHMARK(BM_append_batch)->Name("append/batch")->ArgNames({"events", "sync"})
  ->Args({64, 0})->Args({64, 1})->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_memory_append_single(benchmark::State& state) {
  store::memory_event_log log;
  append_loop(state, log, 1);
}
BENCHMARK(BM_memory_append_single)->Name("memory/append/single")->Unit(benchmark::kMicrosecond)->UseRealTime();

/// A projection that decodes every TrialResult and sums its tokens: what a real fold does.
struct token_projection : store::projection {
  std::uint64_t tokens = 0;
  void apply(const store::recorded_event& ev) override {
    auto r = messages::trial_result_msg::decode(ev.payload);
    if (r && (*r)->steps() != nullptr)
      for (const auto* s : *(*r)->steps())
        tokens += s->tokens();
  }
};

constexpr std::uint64_t fold_events = 100'000;

store::event_log& fold_log() {
  auto& slot = g_logs["fold"];
  if (!slot) {
    slot = open_log(g_root + "/fold", false);
    auto payload = result_payload(2, 8);
    std::vector<new_event> batch(1000, new_event::of(wire::EventKind::TrialCompleted, payload));
    // A kept store from an earlier run already holds the events.
    for (std::uint64_t v = *slot->version("fold-run"); v < fold_events; v += batch.size())
      if (auto r = slot->append("fold-run", v, batch); !r) {
        std::cerr << "cannot fill the fold log: " << describe(r.error()) << '\n';
        g_logs.clear();
        std::exit(1);
      }
  }
  return *slot;
}

void BM_fold_stream(benchmark::State& state) {
  auto& log = fold_log();
  for (auto _ : state) {
    token_projection p;
    if (auto err = store::fold_stream(log, "fold-run", p)) {
      state.SkipWithError(describe(err).c_str());
      break;
    }
    if (p.events_applied() < fold_events) {
      state.SkipWithError("fold saw the wrong events");
      break;
    }
    benchmark::DoNotOptimize(p.tokens);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * fold_events));
}
BENCHMARK(BM_fold_stream)->Name("fold/stream")->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_fold_global(benchmark::State& state) {
  auto& log = fold_log();
  for (auto _ : state) {
    token_projection p;
    if (auto err = store::fold(log, p)) {
      state.SkipWithError(describe(err).c_str());
      break;
    }
    benchmark::DoNotOptimize(p.tokens);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * fold_events));
}
BENCHMARK(BM_fold_global)->Name("fold/global")->Unit(benchmark::kMillisecond)->UseRealTime();

/// What `infrarsi status` and `infrarsi runs` pay to check that a run's events are still
/// readable and intact (runtime::verify_events: every event read back through the stream index,
/// checksums verified, decoded, nothing folded).
void BM_verify_stream(benchmark::State& state) {
  auto& log = fold_log();
  for (auto _ : state) {
    if (auto err = runtime::verify_events(log, "fold-run", fold_events)) {
      state.SkipWithError(describe(err).c_str());
      return;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * fold_events));
}
BENCHMARK(BM_verify_stream)->Name("verify/stream")->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

int main(int argc, char** argv) {
  // Our own flags first; the rest go to Google Benchmark.
  std::vector<char*> rest{argv[0]};
  std::string store_dir;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) {
      std::cout << "infrarsi_event_log_bench [--store-dir=DIR] [--keep-store] [Google Benchmark "
                   "flags]\n"
                   "  --store-dir=DIR  where the event logs are written (default: a fresh "
                   "directory under $TMPDIR, removed at exit)\n"
                   "  --keep-store     keep the logs after the run (a kept store is reused)\n\n";
      int n = 2;
      char* help_argv[] = {argv[0], argv[i], nullptr};
      benchmark::Initialize(&n, help_argv);
      return 0;
    }
    if (std::strncmp(argv[i], "--store-dir=", 12) == 0)
      store_dir = argv[i] + 12;
    else if (std::strcmp(argv[i], "--keep-store") == 0)
      g_keep = true;
    else
      rest.push_back(argv[i]);
  }
  bool made_temp = store_dir.empty();
  if (made_temp) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string{tmp != nullptr ? tmp : "/tmp"} + "/infrarsi-bench-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    store_dir = tmpl;
  } else {
    std::filesystem::create_directories(store_dir);
  }
  g_root = store_dir;
  std::cerr << "event logs under " << g_root
            << (g_keep || !made_temp ? " (kept)" : " (removed at exit)") << '\n';
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) {
    if (!g_keep && made_temp)
      std::filesystem::remove_all(g_root);
    return 2;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_logs.clear();
  if (!g_keep && made_temp)
    std::filesystem::remove_all(g_root);
  return 0;
}
