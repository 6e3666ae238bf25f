#pragma once
// Seeded synthetic trials for the decide/ tests that drive whole runs through the benchmark's run
// driver (measurement_test.cpp, minimal_change_test.cpp): a deterministic random source, a
// finished, verified trial whose step times are log-normal around a level, and the driver's
// options for a task's budget.

#include <cmath>
#include <cstdint>
#include <string>

#include "bench/run_driver.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/task.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::test {

/// splitmix64 (Steele, Lea and Flood 2014): the tests' own deterministic random source.
inline std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// A standard normal draw (Box-Muller).
inline double normal(std::uint64_t& state) {
  double u1 = (static_cast<double>(splitmix(state) >> 11) + 0.5) * 0x1.0p-53;
  double u2 = (static_cast<double>(splitmix(state) >> 11) + 0.5) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// A trial of `config` that ended ok and was verified: `contract.steps` steps of loss 2.0 whose
/// step times are `level_s` x exp(step_cv x N(0, 1)) (draws from `state`), wall time their sum x
/// `wall_factor`, device-seconds the wall time, timed step time from the contract's window.
inline tuning::trial_record noisy_trial(const tuning::contract_spec& contract,
                                        const tuning::configuration& config, std::uint64_t trial_id,
                                        std::uint32_t attempt, const std::string& purpose,
                                        double level_s, double step_cv, std::uint64_t& state,
                                        double wall_factor = 1.0) {
  tuning::trial_record rec;
  rec.trial_id = trial_id;
  rec.attempt = attempt;
  rec.purpose = purpose;
  rec.config = config;
  rec.dispatched = rec.finished = rec.verified = true;
  rec.outcome = tuning::trial_outcome::ok;
  double sum = 0;
  for (std::uint32_t s = 0; s < contract.steps; ++s) {
    tuning::step_point p;
    p.step = s;
    p.loss = 2.0;
    p.step_time_s = level_s * std::exp(step_cv * normal(state));
    sum += p.step_time_s;
    rec.steps.push_back(p);
  }
  rec.wall_time_s = sum * wall_factor;
  rec.device_seconds = rec.wall_time_s;
  rec.timed_step_time_s = tuning::timed_step_time(contract, rec.steps);
  return rec;
}

/// The run driver's options for `task`'s budget (search trials, baseline repeats, candidates,
/// pairs per round), `policy` and `seed`.
inline bench::driver_options budget_options(const tuning::task_spec& task, std::uint64_t seed,
                                            const std::string& policy = "random/1") {
  bench::driver_options o;
  o.trials = task.budget.trials;
  o.baseline_repeats = task.budget.baseline_repeats;
  o.verify_top = task.budget.verify_top;
  o.verify_repeats = task.budget.verify_repeats;
  o.policy_name = policy;
  o.seed = seed;
  return o;
}

} // namespace infrarsi::test
