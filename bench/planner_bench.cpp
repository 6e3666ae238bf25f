// Google Benchmark of one proposal step of the search policies (issue 6): policy.plan(in, 1) on
// the simulator task config/tasks/sim-dense-1node.toml (13 knobs, 6 patches: 331,776
// configurations; the default policy enumerates none of them: it scores the neighbourhoods of the
// baseline and of the fastest measured configurations, 400 seeded random ones and 16 Thompson
// draws, then climbs by coordinate ascent, docs/planner.md) with a history of N finished,
// verified trials at N = 100, 1,000 and 10,000. The history is made by the in-process simulator evaluator (bench/sim_evaluator.hpp):
// 3 baselines, then random candidates (about a third run out of memory, a few break the
// contract), so the time model, the censored memory model and the history rules all work on
// real-looking data.
//
//   build-release/bin/infrarsi_planner_bench [--task=FILE] [Google Benchmark flags]
//   build-release/bin/infrarsi_planner_bench [--task=FILE] --dump-proposals=POLICY
//
// Reported: wall time per proposal step (ms); the counter "trials" is N. --dump-proposals
// instead prints what POLICY proposes at N = 100, 1,000 and 10,000 (batches of 1 and 4: each
// proposal's configuration, predicted speedup, P(OOM) and reason, the blamed settings and the
// stop reason), so that a speed change can be checked to keep the proposals byte for byte
// (diff two dumps); --dump-proposals=POLICY-late with the "-late" benchmarks' budget.

#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "adapters/task_file.hpp"
#include "bench/sim_evaluator.hpp"
#include "messages/errc.hpp"
#include "tuning/planner.hpp"
#include "tuning/search_space.hpp"

namespace {

using namespace infrarsi;

std::string g_task = std::string{INFRARSI_SOURCE_DIR} + "/config/tasks/sim-dense-1node.toml";
std::unique_ptr<bench::sim_evaluator> g_eval;
std::map<std::size_t, std::vector<tuning::trial_record>> g_histories;
tuning::prior_set g_priors;

const std::vector<tuning::trial_record>& history(std::size_t n) {
  auto it = g_histories.find(n);
  if (it != g_histories.end())
    return it->second;
  auto& h = g_histories[n];
  const auto& task = g_eval->task();
  g_eval->begin_run(1);
  auto base = tuning::baseline_configuration(task);
  std::uint64_t id = 1;
  for (int i = 0; i < 3; ++i)
    h.push_back(g_eval->measure(base, id++, 0, "baseline"));
  auto candidates = tuning::enumerate_candidates(task, 1);
  tuning::splitmix64 rng{42};
  while (h.size() < n)
    h.push_back(g_eval->measure(candidates[rng.below(candidates.size())], id++, 0, "explore"));
  return h;
}

tuning::planner_input input_at(std::size_t n, bool late = false) {
  const auto& task = g_eval->task();
  tuning::planner_input in;
  in.task = &task;
  in.priors = &g_priors;
  in.history = history(n);
  in.seed = 1;
  in.noise_log_sd = 0.01;
  in.min_detectable_speedup = 0.0; // no stopping rule: every step proposes
  // A budget twice the history: bayes_ei/3, /5 and /6 are outside their end game (which costs no
  // extra work: it scales the sd inside EI), and bayes_ei/5 and /6 have not narrowed their
  // interaction prior (n - 3 of 2n spent; narrowing changes a prior variance, not the work).
  // `late` (the "-late" benchmarks): a budget of n, so that bayes_ei/6 and /7 are in their late
  // phase, where the memory model has pairwise interactions (more work: the sparse EP over them).
  in.search_budget = late ? n : 2 * n;
  in.memory_capacity_bytes = g_eval->memory_capacity_bytes();
  in.incompatible_patches = g_eval->incompatible_patches();
  return in;
}

/// One proposal step at state.range(0) trials. `cached`: with the run's encoding cache
/// (tuning::encoding_cache, as the planner actor keeps it), where each step has one trial the
/// cache has not seen: the last trial gets a new trial id every iteration (its configuration
/// and outcome stay), as in a run where a proposal follows each trial.
void proposal_step(benchmark::State& state, const std::string& policy_name, bool late,
                   bool cached) {
  auto n = static_cast<std::size_t>(state.range(0));
  auto in = input_at(n, late);
  auto policy = tuning::make_policy(policy_name);
  tuning::encoding_cache cache;
  if (cached)
    in.encodings = &cache;
  std::size_t proposed = 0;
  std::size_t encoded = 0;
  std::uint64_t next_id = in.history.back().trial_id + 1;
  for (auto _ : state) {
    if (cached)
      in.history.back().trial_id = next_id++;
    auto batch = policy->plan(in, 1);
    proposed += batch.proposals.size();
    encoded += cache.last_encoded();
    benchmark::DoNotOptimize(batch);
  }
  state.counters["trials"] = static_cast<double>(n);
  state.counters["proposals"] =
      static_cast<double>(proposed) / static_cast<double>(state.iterations());
  if (cached) // 1 but the first step's n
    state.counters["encoded"] =
      static_cast<double>(encoded) / static_cast<double>(state.iterations());
}

/// --dump-proposals: the proposals of `policy_name` at each N, as text ("NAME-late": with the
/// budget of the "-late" benchmarks, input_at's `late`).
int dump_proposals(std::string policy_name) {
  const bool late =
    policy_name.size() > 5 && policy_name.compare(policy_name.size() - 5, 5, "-late") == 0;
  if (late)
    policy_name.resize(policy_name.size() - 5);
  auto policy = tuning::make_policy(policy_name);
  if (!policy) {
    std::cerr << "infrarsi_planner_bench: --dump-proposals: unknown policy " << policy_name << "\n";
    return 2;
  }
  char buf[64];
  auto num = [&](double v) {
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return std::string{buf};
  };
  for (std::size_t n : {100, 1000, 10000}) {
    auto in = input_at(n, late);
    for (std::size_t batch : {1, 4}) {
      auto out = policy->plan(in, batch);
      std::cout << "== " << policy_name << (late ? " late" : "") << " trials=" << n
                << " batch=" << batch << "\n";
      for (const auto& p : out.proposals)
        std::cout << p.config.key() << "\n  speedup " << num(p.predicted_speedup) << " prior "
                  << (p.prior_speedup ? num(*p.prior_speedup) : "-") << " p_oom "
                  << (p.p_oom ? num(*p.p_oom) : "-") << "\n  " << p.reason << "\n";
      for (const auto& b : out.blamed)
        std::cout << "  blamed: " << b << "\n";
      std::cout << "  stop: " << out.stop_reason << "\n";
    }
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  std::string dump;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--task=", 7) == 0)
      g_task = argv[i] + 7;
    else if (std::strncmp(argv[i], "--dump-proposals=", 17) == 0)
      dump = argv[i] + 17;
    else
      args.push_back(argv[i]);
  }
  auto task = adapters::load_task_file(g_task);
  if (!task) {
    std::cerr << "infrarsi_planner_bench: " << g_task << ": " << infrarsi::describe(task.error())
              << "\n";
    return 2;
  }
  std::string why;
  g_eval = bench::sim_evaluator::create(*task, why);
  if (!g_eval) {
    std::cerr << "infrarsi_planner_bench: " << g_task << ": " << why << "\n";
    return 2;
  }
  if (!dump.empty()) {
    int rc = dump_proposals(dump);
    g_eval.reset();
    return rc;
  }
  // "plan/bayes_ei/7-late": the default policy in the second half of a run (input_at's `late`);
  // "-cached": with the run's encoding cache, as `infrarsi tune`'s planner actor calls it.
  struct variant {
    const char* name;
    bool late;
    bool cached;
  };
  for (const auto& v : std::vector<variant>{{"bayes_ei/7", false, false},
                                            {"bayes_ei/7", true, false},
                                            {"bayes_ei/7", false, true},
                                            {"bayes_ei/7", true, true},
                                            {"bayes_ei/6", false, false},
                                            {"bayes_ei/6", true, false},
                                            {"bayes_ei/5", false, false},
                                            {"bayes_ei/4", false, false},
                                            {"bayes_ei/3", false, false},
                                            {"bayes_ei/2", false, false},
                                            {"bayes_ei/1", false, false},
                                            {"random/1", false, false},
                                            {"seeded_local_search/1", false, false}}) {
    std::string label = std::string{"plan/"} + v.name + (v.late ? "-late" : "")
                        + (v.cached ? "-cached" : "");
    benchmark::RegisterBenchmark(label.c_str(), [v](benchmark::State& s) {
      proposal_step(s, v.name, v.late, v.cached);
    })
        ->Arg(100)
        ->Arg(1000)
        ->Arg(10000)
        ->Unit(benchmark::kMillisecond)
        ->MinTime(2.0);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_eval.reset();
  return 0;
}
