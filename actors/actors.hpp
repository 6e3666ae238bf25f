#pragma once
/// @file actors.hpp
/// Behaviours of the six actors (interfaces.hpp) and the supervisor's options. Actors are thin:
/// they fold what they need from the event log, call tuning/, store/ or adapters/, and reply.

#include <chrono>
#include <atomic>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include <caf/actor.hpp>
#include <caf/all.hpp>
#include <zmq.hpp>

#include "decide/experience_serving.hpp"
#include "decide/decisions.hpp"
#include "decide/next_step.hpp"
#include "decide/resources.hpp"
#include "actors/interfaces.hpp"
#include "store/event_log.hpp"
#include "store/experience_bank.hpp"
#include "store/run_projection.hpp"
#include "tuning/planner.hpp"
#include "tuning/search_space.hpp"
#include "tuning/task.hpp"

namespace infrarsi::actors {

struct fold_state;
struct supervisor_state;


/// planner: folds the run incrementally and calls the run's policy (decide::proposal_doc).
planner_actor::behavior_type planner(planner_actor::stateful_pointer<fold_state> self,
                                     const store::event_log* log, const tuning::task_spec* task);

/// The offline knowledge base's priors for `task`: `dir`/<task knowledge>.toml, else
/// `dir`/default.toml, else none; values typed by the task's knobs, entries naming unknown knobs,
/// values of the wrong type or unknown patches skipped. Error: errc::invalid_argument
/// "FILE:LINE:COLUMN: knowledge base: TOML syntax error: ..." when the file does not parse (a
/// broken knowledge base is never silently neutral).
caf::expected<tuning::prior_set> load_knowledge(const tuning::task_spec& task,
                                                const std::string& dir);

/// llm-proposer, offline backend: priors from `knowledge_dir`/<task knowledge>.toml, else
/// `knowledge_dir`/default.toml, else none (every prior neutral).
llm_proposer_actor::behavior_type llm_proposer(llm_proposer_actor::pointer self,
                                               const tuning::task_spec* task,
                                               std::string knowledge_dir);

/// verifier: contract checks, noise calibration and the promotion test, over an incremental fold.
verifier_actor::behavior_type verifier(verifier_actor::stateful_pointer<fold_state> self,
                                       const store::event_log* log,
                                       const tuning::task_spec* task);

/// node-runner client: the ZeroMQ DEALER end of the bridge (adapters/node_bridge.hpp). Spawn
/// detached: the socket stays on the actor's own thread. Stale replies (for an attempt other
/// than the one awaited) go to `stale_to` as (stale_atom, trial_result_msg). A wait ends early
/// (errc::interrupted) once `cancel` is set.
node_runner_actor::behavior_type node_runner(node_runner_actor::pointer self,
                                             zmq::context_t* ctx, std::string endpoint,
                                             std::string run_id, caf::actor stale_to,
                                             const std::atomic<bool>* cancel);

/// experience-curator over an experience_bank.
curator_actor::behavior_type curator(curator_actor::pointer self, store::experience_bank* bank);

/// A run projection that catches up with the log on every request (each event folded once).
struct fold_state {
  static inline const char* name = "fold";
  std::optional<store::run_projection> fold;
  /// The run's trial encodings from one proposal to the next (the planner's; a time saving only,
  /// the proposals are the same without it). Emptied when the fold starts again.
  tuning::encoding_cache encodings;
  /// Folds the events of `run_id` not yet seen, up to the first `upto` events of the stream
  /// (all of them when unset). Errors from the log pass through.
  caf::expected<const store::run_state*> catch_up(const store::event_log& log,
                                                  const std::string& run_id,
                                                  std::optional<std::uint64_t> upto = {});
};

/// What the supervisor needs to run one tuning run.
struct supervisor_options {
  /// The run's task: parsed from the file for a new run, from the log's ContractLocked
  /// "task_toml" for a resumed one (runtime/tune.cpp).
  const tuning::task_spec* task = nullptr;
  store::event_log* log = nullptr;
  store::experience_bank* bank = nullptr;
  zmq::context_t* zmq_context = nullptr;
  /// Endpoints of the node-runners, one per node slot (tcp://127.0.0.1:PORT or ipc://... in
  /// embedded mode; the same bridge a remote node uses).
  std::vector<std::string> node_endpoints;
  std::string run_id;
  /// Directory for the run's files (report, applied changes).
  std::string run_dir;
  /// Where the local node slots keep their trial directories (run_dir/trials; "" when the
  /// supervisor does not manage them): the copies of the workload there are pruned by
  /// decide::removable_trial_copies after every verdict and when the run ends.
  std::string trials_dir;
  /// Ended attempts that keep their copy besides the kept trials (`tune --keep-trial-copies`).
  std::uint32_t keep_trial_copies = decide::default_keep_trial_copies;
  std::string knowledge_dir;
  std::uint64_t seed = 0;
  /// Search trials of a new run (logged at init; a resume keeps the logged budget).
  std::optional<std::uint32_t> trials;
  /// What the experience curator serves at init (`tune --experience`; logged in the pack).
  decide::experience_mode experience = decide::experience_mode::filtered;
  /// The task file's text, logged at init (ContractLocked "task_toml") so the log is
  /// self-contained.
  std::string task_text;
  /// Last stage to run ("apply" = all).
  std::string until = "apply";
  /// Progress lines (a header per stage, one short line per trial) go here.
  std::ostream* progress = nullptr;
  /// Only errors and their causes go to `progress` (tune --quiet).
  bool quiet = false;
  /// Long reasons too: every violation or failure detail of a trial, the planner's reason for
  /// each proposal, the re-verification's reason (tune --verbose); lines are not shortened.
  bool verbose = false;
  /// `progress` is a terminal: a live status line (stage, trials, best, elapsed, ETA) is kept
  /// below the progress lines, redrawn with "\r\033[K".
  bool live_status = false;
  /// Progress lines longer than this are shortened at a word boundary (not with verbose).
  std::size_t line_width = 120;
  /// When set, "SEQUENCE KIND\n" is written and flushed here after every acknowledged append.
  std::ostream* append_trace = nullptr;
  /// Directories whose free space is checked against `disk_reserve_bytes` before every stage
  /// and every trial dispatch (the store's events/ and the run's trials/ directory): below it
  /// the run ends with status 1 and an errc::io_error naming the directory, the free bytes and
  /// the reserve, before anything is dispatched (adapters/disk_space.hpp).
  std::vector<std::string> space_dirs;
  /// Bytes that must stay free in each of `space_dirs` (0: no check). Default 0; `infrarsi
  /// tune` passes --disk-reserve (default adapters::default_disk_reserve_bytes).
  std::uint64_t disk_reserve_bytes = 0;
  /// Set by the runtime when the run is interrupted: node-runner waits end at once.
  const std::atomic<bool>* cancel = nullptr;
  /// Receives (std::string summary, int exit status) when the run ends.
  caf::actor reply_to;
  /// Daemon mode: trials go to this node pool (actors/node_pool.hpp) instead of
  /// `node_endpoints`; the run's trials in flight are its share (slots_atom), at most
  /// `pool_slots`.
  node_pool_actor pool;
  /// Daemon mode: most trials of this run in flight at once. Default 64.
  std::uint32_t pool_slots = 64;
};

/// The supervisor: the run's stage machine init -> doctor -> run -> report -> apply, as an
/// event-based actor over one node-runner per endpoint. Each handler appends its events, folds
/// them into its projection, calls decide::next_step and acts with request(...).then(...).
supervisor_actor::behavior_type supervisor(
  supervisor_actor::stateful_pointer<supervisor_state> self, supervisor_options opts);

/// One node slot of the supervisor: a node-runner client and the attempt it runs.
struct node_slot {
  node_runner_actor handle;
  std::string endpoint;
  bool busy = false;
  decide::attempt_id running{0, 0};
};

/// The supervisor's state: nothing that is not derivable from the log except what it has
/// asked for and not yet been answered (decide::outstanding) and its node slots.
struct supervisor_state {
  static inline const char* name = "supervisor";
  supervisor_options o;
  /// The run folded up to the log's version (each appended event folded once).
  std::optional<store::run_projection> fold;
  std::uint64_t version = 0;
  decide::outstanding busy;
  std::vector<node_slot> nodes;
  bool wall_clock_expired = false;
  /// Daemon mode: the pool's current share for this run (trials in flight).
  std::uint32_t pool_share = 0;
  /// Draining: nothing more is dispatched; the run ends once nothing is in flight.
  bool draining = false;
  /// The run has ended (reply sent); later answers are dropped.
  bool ended = false;
  /// A trial's smoke probe was inconclusive because of the [smoke] launch itself
  /// (tuning::is_smoke_inconclusive): said once per supervisor.
  bool smoke_warned = false;
  /// A trial's smoke probe was vacuous: the unpatched smoke loss does not fall
  /// (tuning::is_smoke_vacuous): said once per supervisor.
  bool smoke_vacuous_warned = false;
  /// When this supervisor started (elapsed time and ETA of the progress lines).
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  /// The task the run searches (decide::with_llm_patches: the task's patches and the accepted
  /// LLM-proposed ones, their diffs written under RUN_DIR/llm-patches), recomputed when the
  /// number of LLM events folded (`search_task_at`) changes.
  tuning::task_spec search_task;
  std::size_t search_task_at = static_cast<std::size_t>(-1);
  planner_actor planner;
  verifier_actor verifier;
  llm_proposer_actor llm;
  curator_actor curator;
};

} // namespace infrarsi::actors
