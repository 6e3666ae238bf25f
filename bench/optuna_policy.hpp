#pragma once
/// @file optuna_policy.hpp
/// Optuna's TPE sampler (Bergstra et al. 2011, "Algorithms for Hyper-Parameter Optimization",
/// NeurIPS; Optuna: Akiba et al. 2019, KDD) as a planner_policy, for benchmarks only. The
/// policy is stateless like every planner_policy: each call sends the whole history to one
/// long-lived `/usr/bin/python3 bench/optuna_tpe.py` process, which rebuilds an in-memory study
/// from it (every finished trial told with its log step time; OOM, crash and contract-violating
/// trials told as failed) and asks TPE for the next configuration with a sampler seeded from
/// (seed, history length), so the same history and seed give the same proposal.
/// Protocol: one JSON object per line each way (bench/optuna_tpe.py documents it).

#include <memory>
#include <string>

#include "tuning/planner.hpp"

namespace infrarsi::bench {

/// Creates the policy. `script` is the path of bench/optuna_tpe.py, `python` the interpreter
/// that has optuna (Debian: /usr/bin/python3 with python3-optuna). The child is started on the
/// first call and ended with the policy. Errors (interpreter or optuna missing, protocol error)
/// are thrown as std::runtime_error naming the script and what it said on stderr.
std::unique_ptr<tuning::planner_policy> make_optuna_policy(const std::string& script,
                                                           const std::string& python
                                                           = "/usr/bin/python3");

} // namespace infrarsi::bench
