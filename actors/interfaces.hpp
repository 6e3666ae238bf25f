#pragma once
/// @file interfaces.hpp
/// Every actor interface of InfraRSI in one place. Decisions travel as canonical
/// JSON documents (the same bytes the supervisor appends to the event log, so replay can
/// byte-compare them); trials travel as FlatBuffers messages (messages/type_ids.hpp).
/// Actors hold no state that is not derivable from the event log: each request names the run,
/// and the actor folds what it needs from the log — incrementally, each event once (a
/// store::run_projection that records how far it has read).

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "messages/type_ids.hpp"

namespace infrarsi::actors {

using propose_atom = caf::atom_constant<caf::atom("propose")>;
using priors_atom = caf::atom_constant<caf::atom("priors")>;
using check_atom = caf::atom_constant<caf::atom("check")>;
using calibrate_atom = caf::atom_constant<caf::atom("calibrate")>;
using reverify_atom = caf::atom_constant<caf::atom("reverify")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using seeds_atom = caf::atom_constant<caf::atom("seeds")>;
using ingest_atom = caf::atom_constant<caf::atom("ingest")>;
using stale_atom = caf::atom_constant<caf::atom("stale")>;
using advance_atom = caf::atom_constant<caf::atom("advance")>;
using interrupt_atom = caf::atom_constant<caf::atom("interrupt")>;
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using node_atom = caf::atom_constant<caf::atom("node")>;
using gone_atom = caf::atom_constant<caf::atom("gone")>;
using sendfail_atom = caf::atom_constant<caf::atom("sendfail")>;
using slots_atom = caf::atom_constant<caf::atom("slots")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using chat_atom = caf::atom_constant<caf::atom("chat")>;
constexpr join_atom join_atom_v{};
constexpr leave_atom leave_atom_v{};
constexpr node_atom node_atom_v{};
constexpr gone_atom gone_atom_v{};
constexpr sendfail_atom sendfail_atom_v{};
constexpr slots_atom slots_atom_v{};
constexpr drain_atom drain_atom_v{};
constexpr status_atom status_atom_v{};
constexpr chat_atom chat_atom_v{};
constexpr propose_atom propose_atom_v{};
constexpr priors_atom priors_atom_v{};
constexpr check_atom check_atom_v{};
constexpr calibrate_atom calibrate_atom_v{};
constexpr reverify_atom reverify_atom_v{};
constexpr run_atom run_atom_v{};
constexpr seeds_atom seeds_atom_v{};
constexpr ingest_atom ingest_atom_v{};
constexpr stale_atom stale_atom_v{};
constexpr advance_atom advance_atom_v{};
constexpr interrupt_atom interrupt_atom_v{};
constexpr deadline_atom deadline_atom_v{};

/// planner: the search.
using planner_actor = caf::typed_actor<
  /// (run id, n, version) -> proposals document {"policy", "proposals": [{config,
  /// predicted_speedup, reason}]} from the run's first `version` events exactly (events appended
  /// while it plans are not seen; ProposalsMade records the version, so replay recomputes it).
  caf::replies_to<propose_atom, std::string, std::uint32_t, std::uint64_t>::with<std::string>>;

/// llm-proposer: priors per setting and patch from the offline knowledge base, and the HTTP
/// exchanges with an OpenAI-compatible endpoint (blocking: spawned detached).
using llm_proposer_actor = caf::typed_actor<
  /// (task name) -> priors document (store/run_projection.hpp: to_json(prior_set)).
  caf::replies_to<priors_atom, std::string>::with<std::string>,
  /// (request body, calls left, jitter seed) -> the exchange as JSON (adapters::to_json of
  /// adapters::post_chat, to the task's [llm] endpoint with the key from its api_key_env).
  caf::replies_to<chat_atom, std::string, std::uint64_t, std::uint64_t>::with<std::string>>;

/// verifier: the contract and the statistics.
using verifier_actor = caf::typed_actor<
  /// (run id) -> doctor document {"noise", "reference", "phases"} from the baseline runs.
  caf::replies_to<calibrate_atom, std::string>::with<std::string>,
  /// (run id, trial id, attempt) -> verdict document {"trial_id", "attempt", "violations",
  /// "timed_step_time_s"}.
  caf::replies_to<check_atom, std::string, std::uint64_t, std::uint32_t>::with<std::string>,
  /// (run id, candidate trial id) -> reverification document from the interleaved runs.
  caf::replies_to<reverify_atom, std::string, std::uint64_t>::with<std::string>>;

/// node-runner (client end of the ZeroMQ bridge): runs one trial. A reply that arrives for
/// another attempt than the one awaited (one already given up as lost) is never returned as this
/// trial's result: the node-runner sends it to the supervisor as (stale_atom, result), which
/// logs it as TrialResultStale.
using node_runner_actor = caf::typed_actor<
  /// (spec) -> result; errors: the node vanished (trial lost) or the bridge failed.
  caf::replies_to<run_atom, messages::trial_spec_msg>::with<messages::trial_result_msg>>;

/// supervisor: one run's stage machine over N node-runners (actors/supervisor.cpp). It starts by
/// itself when spawned and sends (std::string summary, int exit status) to its `reply_to` when
/// the run ends, fails or is interrupted.
using supervisor_actor = caf::typed_actor<
  /// (advance): take every step decide::next_step allows now (sent to itself).
  caf::reacts_to<advance_atom>,
  /// (interrupt, signal number): stop dispatching, log RunInterrupted, end with 128 + signal.
  caf::reacts_to<interrupt_atom, int>,
  /// (deadline): the search stage's wall-clock limit has passed (a delayed message to itself).
  caf::reacts_to<deadline_atom>,
  /// (stale, result): a late result for an attempt already given up (logged TrialResultStale).
  caf::reacts_to<stale_atom, messages::trial_result_msg>,
  /// (slots, n): the node pool's share for this run changed to n trials in flight (daemon).
  caf::reacts_to<slots_atom, std::uint32_t>,
  /// (drain): dispatch nothing more; end (status 0, resumable) once no trial is in flight.
  caf::reacts_to<drain_atom>>;

/// node pool (actors/node_pool.cpp): the daemon's registry of remote node-runners and their
/// slots, fed by the ZeroMQ broker (adapters/node_broker.hpp), shared fairly by the runs it serves.
using node_pool_actor = caf::typed_actor<
  /// (run, run id, spec) -> result: runs the attempt on a free slot of a live node (queued until
  /// one is free); error errc::not_found: lost (its node died, refused it or was unreachable).
  caf::replies_to<run_atom, std::string, messages::trial_spec_msg>::with<
    messages::trial_result_msg>,
  /// (join, run id, max slots or 0, task text, task path, supervisor): the run takes part in the
  /// fair share; its supervisor receives (slots, n) whenever its share changes.
  caf::reacts_to<join_atom, std::string, std::uint32_t, std::string, std::string, caf::actor>,
  /// (leave, run id): the run ended; its share goes to the others.
  caf::reacts_to<leave_atom, std::string>,
  /// (node, identity, envelope): a verified message from a node-runner (from the broker).
  caf::reacts_to<node_atom, std::string, messages::envelope_msg>,
  /// (gone, identity, why): a node-runner went silent (from the broker).
  caf::reacts_to<gone_atom, std::string, std::string>,
  /// (sendfail, identity, envelope, why): a message to a node could not be sent (from the broker).
  caf::reacts_to<sendfail_atom, std::string, messages::envelope_msg, std::string>,
  /// (status) -> JSON {"nodes": [...], "queued": n, "runs": [...]}.
  caf::replies_to<status_atom>::with<std::string>>;

/// experience-curator: the experience bank.
using curator_actor = caf::typed_actor<
  /// (request JSON {"hardware_identity", "workload_identity", "hardware", "workload", "mode"})
  /// -> the pack to log as ExperienceSeeded (decide::experience_pack).
  caf::replies_to<seeds_atom, std::string>::with<std::string>,
  /// (run id) -> the index has folded the log's new ExperienceRecorded events (that run's finding).
  caf::replies_to<ingest_atom, std::string>::with<bool>>;

} // namespace infrarsi::actors
