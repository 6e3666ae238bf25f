#pragma once
/// @file actors.hpp
/// Behaviours of the six actors (interfaces.hpp) and the supervisor's options. Actors are thin:
/// they fold what they need from the event log, call tuning/, store/ or adapters/, and reply.

#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include <caf/actor.hpp>
#include <caf/all.hpp>
#include <zmq.hpp>

#include "actors/decisions.hpp"
#include "actors/interfaces.hpp"
#include "store/event_log.hpp"
#include "store/experience_bank.hpp"
#include "store/run_projection.hpp"
#include "tuning/planner.hpp"
#include "tuning/task.hpp"

namespace infrarsi::actors {


/// planner: folds the run and calls tuning::seeded_local_search.
planner_actor::behavior_type planner(planner_actor::pointer self, const store::event_log* log,
                                     const tuning::task_spec* task);

/// The offline knowledge base's priors for `task`: `dir`/<task knowledge>.toml, else
/// `dir`/default.toml, else none; values typed by the task's knobs, entries naming unknown knobs,
/// values of the wrong type or unknown patches skipped, an unparsable file gives no priors.
tuning::prior_set load_knowledge(const tuning::task_spec& task, const std::string& dir);

/// llm-proposer, offline backend: priors from `knowledge_dir`/<task knowledge>.toml, else
/// `knowledge_dir`/default.toml, else none (every prior neutral).
llm_proposer_actor::behavior_type llm_proposer(llm_proposer_actor::pointer self,
                                               const tuning::task_spec* task,
                                               std::string knowledge_dir);

/// verifier: contract checks, noise calibration and the promotion test.
verifier_actor::behavior_type verifier(verifier_actor::pointer self, const store::event_log* log,
                                       const tuning::task_spec* task);

/// node-runner client: the ZeroMQ DEALER end of the bridge (runtime/node_bridge.hpp). Spawn
/// detached: the socket stays on the actor's own thread. Stale replies (for an attempt other
/// than the one awaited) go to `stale_to` as (stale_atom, trial_result_msg).
node_runner_actor::behavior_type node_runner(node_runner_actor::pointer self,
                                             zmq::context_t* ctx, std::string endpoint,
                                             std::string run_id, caf::actor stale_to);

/// experience-curator over an experience_bank.
curator_actor::behavior_type curator(curator_actor::pointer self, store::experience_bank* bank);

/// What the supervisor needs to run one tuning run.
struct supervisor_options {
  const tuning::task_spec* task = nullptr;
  store::event_log* log = nullptr;
  store::experience_bank* bank = nullptr;
  zmq::context_t* zmq_context = nullptr;
  /// Endpoint of the node-runner (inproc://... in embedded mode).
  std::string node_endpoint;
  std::string run_id;
  /// Directory for the run's files (report, applied changes).
  std::string run_dir;
  std::string knowledge_dir;
  std::uint64_t seed = 0;
  /// Overrides budget.trials (and the budget logged at init, on a resumed run) when set.
  std::optional<std::uint32_t> trials;
  /// Last stage to run ("apply" = all).
  std::string until = "apply";
  /// Progress lines (one per trial) go here.
  std::ostream* progress = nullptr;
  /// When set, "SEQUENCE KIND\n" is written and flushed here after every acknowledged append.
  std::ostream* append_trace = nullptr;
};

/// The supervisor: the run's stage machine init -> doctor -> run -> report -> apply. Runs on its
/// own thread (spawn detached); spawns, monitors and restarts the other actors; appends every
/// event before acting on it. Sends (std::string summary, int exit status) to `reply_to` at the
/// end.
void supervisor(caf::blocking_actor* self, supervisor_options opts, caf::actor reply_to);

} // namespace infrarsi::actors
