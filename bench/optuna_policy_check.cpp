// Self-check of the Optuna TPE policy (bench/optuna_policy.hpp) on a real task file, kept out of
// the test suite because it starts Python (about a second) and needs python3-optuna.
//
//   build/bin/infrarsi_optuna_check [TASK.toml [optuna_tpe.py [PYTHON]]]
//
// Defaults: config/tasks/sim-dense-1node.toml and bench/optuna_tpe.py of the source tree,
// /usr/bin/python3. Runs a 12-proposal search three times against a synthetic objective (log
// step time = sum of a fixed pseudo-random effect per knob setting and per patch, in
// [-0.15, 0.15] each, around 2 s; out of memory when tp == 1 and micro_batch == 4, where the
// task has those knobs) and checks:
//   (a) every proposal satisfies the task's constraints;
//   (b) two policy objects with the same seed give byte-identical sequences, and one object
//       asked twice with the same input answers the same (statelessness);
//   (c) another seed gives another sequence;
//   (d) no repeats among TPE's random start-up proposals (those whose reason says so), which
//       would mean that two requests drew from the same sampler seed;
//   plus a batch of 3 from the final history, which must satisfy the constraints too.
// Prints a summary (proposals, OOMs, best step time, mean wall time per propose call) and exits
// 0 when all checks pass, 1 when one fails, 2 on an error (the message names the cause).

#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "bench/optuna_policy.hpp"
#include "messages/errc.hpp"
#include "adapters/task_file.hpp"
#include "tuning/planner.hpp"

namespace {

using namespace infrarsi;

constexpr std::size_t n_proposals = 12;

/// FNV-1a of a string: the seed of one setting's fixed effect.
std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

/// Fixed effect of one setting ("knob=value" or "+patch") on log step time, in [-0.15, 0.15].
double effect(const std::string& setting) {
  tuning::splitmix64 rng(fnv1a(setting));
  return (static_cast<double>(rng.next() >> 11) / 9007199254740992.0 - 0.5) * 0.3;
}

bool is_int(const tuning::configuration& c, const std::string& knob, std::int64_t v) {
  auto it = c.knobs.find(knob);
  return it != c.knobs.end() && it->second == tuning::knob_value{v};
}

/// The synthetic trial of a configuration (finished, verified; ok or OOM).
tuning::trial_record run_trial(const tuning::configuration& c, std::uint64_t id,
                               const std::string& purpose) {
  tuning::trial_record r;
  r.trial_id = id;
  r.purpose = purpose;
  r.config = c;
  r.dispatched = r.finished = true;
  if (is_int(c, "tp", 1) && is_int(c, "micro_batch", 4)) {
    r.outcome = tuning::trial_outcome::oom;
    return r;
  }
  double log_t = std::log(2.0);
  for (const auto& [k, v] : c.knobs)
    log_t += effect(k + "=" + tuning::to_string(v));
  for (const auto& p : c.patches)
    log_t += effect("+" + p);
  r.outcome = tuning::trial_outcome::ok;
  r.verified = true;
  r.timed_step_time_s = std::exp(log_t);
  return r;
}

struct search_result {
  std::vector<tuning::configuration> proposals;
  std::vector<std::string> startup_keys; ///< Keys of the random start-up proposals.
  std::string text; ///< One config key per line: the sequence, for byte comparison.
  tuning::planner_input final_input;
  std::size_t ooms = 0;
  std::size_t violations = 0;
  double best_s = 0;
  double propose_ms_total = 0;
  std::string stop_reason;
};

search_result search(const tuning::task_spec& task, const tuning::planner_policy& policy,
                     std::uint64_t seed) {
  search_result out;
  tuning::planner_input in;
  in.task = &task;
  in.seed = seed;
  in.history.push_back(run_trial(tuning::baseline_configuration(task), 0, "baseline"));
  out.best_s = in.history.back().timed_step_time_s;
  for (std::size_t i = 0; i < n_proposals; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto batch = policy.plan(in, 1);
    out.propose_ms_total +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (batch.proposals.empty()) {
      out.stop_reason = batch.stop_reason;
      break;
    }
    const auto& c = batch.proposals.front().config;
    auto why = tuning::constraint_violation(task, c);
    if (!why.empty()) {
      ++out.violations;
      std::cerr << "FAIL (a): proposal " << c.key() << " breaks a constraint: " << why << "\n";
    }
    out.proposals.push_back(c);
    if (batch.proposals.front().reason.rfind("optuna TPE start-up", 0) == 0)
      out.startup_keys.push_back(c.key());
    out.text += c.key() + "\n";
    in.history.push_back(run_trial(c, i + 1, "explore"));
    const auto& r = in.history.back();
    if (r.outcome == tuning::trial_outcome::oom)
      ++out.ooms;
    else
      out.best_s = std::min(out.best_s, r.timed_step_time_s);
  }
  out.final_input = std::move(in);
  return out;
}

int run(int argc, char** argv) {
  std::string task_path =
      argc > 1 ? argv[1] : INFRARSI_SOURCE_DIR "/config/tasks/sim-dense-1node.toml";
  std::string script = argc > 2 ? argv[2] : INFRARSI_SOURCE_DIR "/bench/optuna_tpe.py";
  std::string python = argc > 3 ? argv[3] : "/usr/bin/python3";
  auto loaded = adapters::load_task_file(task_path);
  if (!loaded) {
    std::cerr << "infrarsi_optuna_check: " << describe(loaded.error()) << "\n";
    return 2;
  }
  const auto& task = *loaded;
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    std::cout << (ok ? "ok    " : "FAIL  ") << what << "\n";
    failures += ok ? 0 : 1;
  };

  auto a_policy = bench::make_optuna_policy(script, python);
  auto b_policy = bench::make_optuna_policy(script, python);
  auto a = search(task, *a_policy, 7);
  auto b = search(task, *b_policy, 7);
  auto c = search(task, *a_policy, 8);

  std::cout << a_policy->name() << " on " << task.name << ", " << n_proposals
            << " proposals per search\n";
  for (const auto* r : {&a, &c}) {
    std::cout << "  seed " << (r == &a ? 7 : 8) << ": " << r->proposals.size() << " proposals, "
              << r->ooms << " OOM, best " << r->best_s << " s/step (baseline "
              << a.final_input.history.front().timed_step_time_s << "), "
              << r->propose_ms_total / std::max<std::size_t>(1, r->proposals.size())
              << " ms per propose call" << (r->stop_reason.empty() ? "" : "; stopped: ")
              << r->stop_reason << "\n";
  }

  check(a.proposals.size() == n_proposals && c.proposals.size() == n_proposals,
        "both searches made " + std::to_string(n_proposals) + " proposals");
  check(a.violations + b.violations + c.violations == 0,
        "(a) every proposal satisfies the task constraints");
  check(a.text == b.text && a.proposals == b.proposals,
        "(b) same seed, two policy objects: byte-identical sequences");
  auto again_1 = a_policy->propose(a.final_input, 1);
  auto again_2 = a_policy->propose(a.final_input, 1);
  check(!again_1.empty() && again_1.size() == again_2.size() &&
            again_1.front().config == again_2.front().config,
        "(b) same input twice to one object: the same proposal");
  check(a.text != c.text, "(c) seed 8 gives another sequence than seed 7");
  for (const auto* r : {&a, &c}) {
    std::set<std::string> distinct(r->startup_keys.begin(), r->startup_keys.end());
    check(!r->startup_keys.empty() && distinct.size() == r->startup_keys.size(),
          "(d) seed " + std::to_string(r == &a ? 7 : 8) + ": no repeats among the " +
              std::to_string(r->startup_keys.size()) + " random start-up proposals");
  }
  auto batch = a_policy->plan(a.final_input, 3);
  bool batch_ok = batch.proposals.size() == 3;
  for (const auto& p : batch.proposals)
    batch_ok = batch_ok && tuning::constraint_violation(task, p.config).empty();
  check(batch_ok, "a batch of 3 from the final history satisfies the constraints" +
                      (batch.stop_reason.empty() ? "" : " (stopped: " + batch.stop_reason + ")"));
  std::cout << "seed 7 sequence:\n" << a.text;
  std::cout << (failures == 0 ? "all checks passed\n" : "checks failed\n");
  return failures == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "infrarsi_optuna_check: " << e.what() << "\n";
    return 2;
  }
}
