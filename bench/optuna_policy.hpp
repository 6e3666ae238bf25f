#pragma once
/// @file optuna_policy.hpp
/// Optuna's TPE sampler (Bergstra et al. 2011, "Algorithms for Hyper-Parameter Optimization",
/// NeurIPS; Optuna: Akiba et al. 2019, KDD) as a planner_policy, for benchmarks only. The
/// policy is stateless like every planner_policy: each call sends the whole history to one
/// long-lived `/usr/bin/python3 bench/optuna_tpe.py` process, which rebuilds an in-memory study
/// from it (every finished trial told with its log step time; OOM, crash and contract-violating
/// trials told as failed) and asks TPE for the next configuration with a sampler seeded from
/// the seed and the history (SHA-256 of both), so the same history and seed give the same
/// proposal and every other history an independent draw.
/// Protocol: one JSON object per line each way (bench/optuna_tpe.py documents it).
///
/// The space is the planner's: every knob at its search values (tuning/planner.cpp) as an Optuna
/// categorical, every non-excluded patch as a categorical [false, true]. Only finished baseline
/// and explore trials are told (lost and preempted ones are not; verification runs are not).
/// One proposal per request; a proposal that breaks a task constraint or pairs incompatible
/// patches is told back as pruned (not a trial; Optuna's advice for infeasible combinations,
/// optuna/optuna#566: TPE ignores failed trials and would propose it again) and asked again,
/// at most 200 times per proposal, after which plan() returns what it has with a stop reason.
/// Duplicates of tried configurations are proposed as TPE gives them (TPE's own behaviour; they
/// count as trials). Note that Optuna's TPE learns only from complete (and pruned) trials:
/// failed ones, OOMs included, change nothing but the seed, so TPE may propose an OOM
/// configuration again.
/// A proposal's reason starts with "optuna TPE start-up (random)" while fewer than 10 complete
/// and pruned trials are told (TPE's default n_startup_trials), else with "optuna TPE model".
/// Name: "optuna_tpe/1". Calls are serialized on one child per policy object (thread-safe).

#include <memory>
#include <string>

#include "tuning/planner.hpp"

namespace infrarsi::bench {

/// Creates the policy. `script` is the path of bench/optuna_tpe.py, `python` the interpreter
/// that has optuna (Debian: /usr/bin/python3 with python3-optuna; looked up on PATH when it has
/// no '/'). The child is started on the first call and ended with the policy. Errors
/// (interpreter or optuna missing, protocol error, no response within 300 s) are thrown by
/// propose()/plan() as std::runtime_error naming the script and interpreter, how the child
/// ended and the tail of its stderr; the next call then starts a fresh child.
/// How failed trials (OOM, crash, timeout, launch error, contract violation) are told to TPE.
enum class optuna_failures {
  /// "optuna_tpe/1": as FAIL; TPE ignores them.
  fail,
  /// "optuna_tpe_fair/1": as PRUNED; TPE ranks them below every complete trial and moves away.
  pruned,
  /// "optuna_tpe_constrained/1": TPESampler with Optuna's constraints_func; a failed trial is a
  /// COMPLETE trial whose constraint is violated (bench/optuna_tpe.py "constraints"), so TPE
  /// ranks every feasible trial above it and it counts towards the start-up trials.
  constraint,
};

/// The policy's name for each way ("optuna_tpe/1", "optuna_tpe_fair/1",
/// "optuna_tpe_constrained/1").
const char* optuna_policy_name(optuna_failures failures);

/// Optuna's TPE as a policy, telling failed trials as `failures` says.
std::unique_ptr<tuning::planner_policy>
make_optuna_policy(const std::string& script, const std::string& python = "/usr/bin/python3",
                   optuna_failures failures = optuna_failures::fail);

} // namespace infrarsi::bench
