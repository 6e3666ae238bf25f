#pragma once
/// @file event_log.hpp
/// The append-only event log: the single source of truth of the system (docs/event-log.md). An
/// event_log is a persistent, totally ordered sequence of events.
/// Every event belongs to one *stream* — one run, named by its run id — and has two positions:
/// its `sequence` within the stream (0, 1, 2, ... without gaps) and its `global_position`
/// across all streams (0, 1, 2, ... without gaps, in append order). Events are never changed or
/// removed once an append has returned success.
///
/// Implementations: memory_event_log (tests) and rocksdb_event_log (store/FORMAT.md). Both pass
/// the same test suite (tests/store/event_log_test.cpp).

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/byte_buffer.hpp"
#include "messages/codec.hpp"

namespace infrarsi::store {

/// Event kind as stored: a wire::EventKind value. Kept as an integer so that kinds written by a
/// newer build survive reading by an older one (readers skip and count them, see fold()).
using event_kind_t = std::uint16_t;

/// Pass as `expected_version` to append without the optimistic-concurrency check.
inline constexpr std::uint64_t any_version = std::numeric_limits<std::uint64_t>::max();

/// Longest accepted run id, in bytes.
inline constexpr std::size_t max_run_id_length = 128;

/// An event to append: its kind and its payload (a FlatBuffer of the type the kind names,
/// see messages/event.fbs, or empty).
struct new_event {
  event_kind_t kind = 0;
  messages::byte_buffer payload;

  /// Convenience: an event of a known kind whose payload is a verified message.
  template <class Table>
  static new_event of(wire::EventKind k, const messages::message<Table>& body) {
    return {static_cast<event_kind_t>(k), body.bytes()};
  }
};

/// An event as read back from the log.
struct recorded_event {
  /// wire::EventKind value; may be a kind unknown to this build.
  event_kind_t kind = 0;
  std::string run_id;
  /// Position within the run's stream, from 0.
  std::uint64_t sequence = 0;
  /// Position in the log's global order, from 0.
  std::uint64_t global_position = 0;
  /// Wall-clock time of the append in ns since the Unix epoch. Never an input to a decision;
  /// display, and the wall time a lost attempt is charged (store::run_state::in_flight).
  std::int64_t recorded_at_ns = 0;
  /// Payload bytes (verified against the kind's schema when the kind is known).
  messages::byte_buffer payload;

  /// True if this build knows the kind.
  [[nodiscard]] bool known_kind() const noexcept {
    return messages::is_known_event_kind(kind);
  }
};

/// What a successful append did.
struct append_result {
  /// Stream sequence of the first appended event (= the expected version when one was given).
  std::uint64_t first_sequence = 0;
  /// Global position of the first appended event; the rest follow contiguously.
  std::uint64_t first_global_position = 0;
  /// The stream's version after the append (number of events in the stream).
  std::uint64_t version = 0;
};

/// Summary of one run's stream.
struct run_info {
  std::string run_id;
  /// Number of events in the stream (= its version).
  std::uint64_t event_count = 0;
  /// Global positions of the stream's first and last events.
  std::uint64_t first_global_position = 0;
  std::uint64_t last_global_position = 0;
};

/// A stored snapshot of a projection of one run's stream (see event_log::write_snapshot).
struct snapshot_record {
  /// Number of stream events the snapshot covers: it is the fold of sequences 0..covered-1, and
  /// the tail to fold on top of it starts at sequence `covered`.
  std::uint64_t covered = 0;
  /// Format tag of `bytes`, e.g. "infrarsi-run-state/1" (1..255 bytes). A reader ignores a
  /// snapshot whose format it does not know: it folds the whole stream instead.
  std::string format;
  /// The serialized projection; opaque to the log.
  std::string bytes;
};

/// Longest accepted snapshot format tag, in bytes.
inline constexpr std::size_t max_snapshot_format_length = 255;

/// Called for each event in order; return false to stop early.
using event_visitor = std::function<bool(const recorded_event&)>;

/// Append-only, per-run-stream event log with a global order. Thread-safe: any number of
/// threads may call any member concurrently; appends are serialized.
class event_log {
public:
  virtual ~event_log() = default;

  /// Appends `events` to the end of `run_id`'s stream as one atomic unit: afterwards either all
  /// of them are in the log (contiguous sequences and global positions) or none is.
  /// Optimistic concurrency: succeeds only if the stream currently holds exactly
  /// `expected_version` events (0 for a new run); pass any_version to skip the check.
  /// Errors: errc::version_conflict (stale writer; nothing is written), errc::invalid_argument
  /// (bad run id, empty batch, payload that fails its kind's verification),
  /// errc::not_permitted (read-only log), errc::io_error.
  [[nodiscard]] virtual caf::expected<append_result>
  append(std::string_view run_id, std::uint64_t expected_version,
         const std::vector<new_event>& events) = 0;

  /// Number of events in `run_id`'s stream (0 for a run that does not exist).
  /// Error: errc::invalid_argument for an invalid run id (validate_run_id).
  [[nodiscard]] virtual caf::expected<std::uint64_t> version(std::string_view run_id) const = 0;

  /// Visits the events of `run_id`'s stream with sequence >= `from_sequence`, in order.
  /// A run that does not exist has no events (not an error); an invalid run id is
  /// errc::invalid_argument.
  /// Errors: errc::corrupt_data (naming the position), errc::io_error.
  [[nodiscard]] virtual caf::error for_each_in_stream(std::string_view run_id,
                                                      std::uint64_t from_sequence,
                                                      const event_visitor& visit) const = 0;

  /// Visits all events with global position >= `from_position`, in global order.
  /// Errors as for_each_in_stream.
  [[nodiscard]] virtual caf::error for_each(std::uint64_t from_position,
                                            const event_visitor& visit) const = 0;

  /// All runs, sorted by run id.
  [[nodiscard]] virtual caf::expected<std::vector<run_info>> list_runs() const = 0;

  /// The global position the next appended event will get (= number of events in the log).
  [[nodiscard]] virtual std::uint64_t head() const = 0;

  /// Stores `bytes` (of format `format`) as the snapshot of `run_id`'s stream covering its first
  /// `covered` events, replacing any earlier snapshot of that run (one snapshot per run).
  /// Snapshots are derived data, not events: they are outside the global order, are not fsynced
  /// (a crash may lose the latest one, never an event), and may be dropped at any time; readers
  /// validate them and fold the whole stream when one is missing or not trusted.
  /// Errors: errc::invalid_argument (bad run id; format empty or longer than
  /// max_snapshot_format_length; `covered` greater than the stream's version), errc::not_permitted
  /// (read-only log), errc::io_error.
  [[nodiscard]] virtual caf::error write_snapshot(std::string_view run_id, std::uint64_t covered,
                                                  std::string_view format,
                                                  std::string_view bytes) = 0;

  /// The stored snapshot of `run_id`'s stream, or std::nullopt when there is none.
  /// Errors: errc::invalid_argument (bad run id), errc::corrupt_data (the stored value is
  /// malformed or fails its checksum; the message names the run), errc::io_error.
  [[nodiscard]] virtual caf::expected<std::optional<snapshot_record>>
  read_snapshot(std::string_view run_id) const = 0;

  /// Reads events [from_sequence, from_sequence + max_count) of a stream into a vector.
  [[nodiscard]] caf::expected<std::vector<recorded_event>>
  read_stream(std::string_view run_id, std::uint64_t from_sequence = 0,
              std::uint64_t max_count = std::numeric_limits<std::uint64_t>::max()) const;
};

/// Checks a run id: 1..max_run_id_length bytes of [A-Za-z0-9._:-], not starting with '.'.
/// Error: errc::invalid_argument naming the id and the rule it breaks.
[[nodiscard]] caf::error validate_run_id(std::string_view run_id);

/// Checks a batch before it is appended: non-empty, each payload verifies as its kind.
/// Errors: errc::invalid_argument.
[[nodiscard]] caf::error validate_batch(std::string_view run_id,
                                        const std::vector<new_event>& events);

/// Checks an append's expected version against the stream's `current` version.
/// Error: errc::version_conflict naming the run and both versions.
[[nodiscard]] caf::error check_expected_version(std::string_view run_id,
                                                std::uint64_t expected_version,
                                                std::uint64_t current);

/// Checks write_snapshot's run id and format tag (1..max_snapshot_format_length bytes).
/// Error: errc::invalid_argument naming the run.
[[nodiscard]] caf::error validate_snapshot(std::string_view run_id, std::string_view format);

/// Checks that a snapshot covering `covered` events fits a stream of `current` events.
/// Error: errc::invalid_argument naming the run and both numbers.
[[nodiscard]] caf::error check_snapshot_covered(std::string_view run_id, std::uint64_t covered,
                                                std::uint64_t current);

/// Wall-clock time for EventRecord.recorded_at_ns: ns since the Unix epoch (display only).
[[nodiscard]] std::int64_t wall_clock_ns() noexcept;

/// A projection: state folded from events (apply never fails and does no I/O).
/// It records how far it has read, so it can be advanced with a later fold.
class projection {
public:
  virtual ~projection() = default;

  /// Folds one event of a known kind into the state. Must not fail or do I/O.
  virtual void apply(const recorded_event& event) = 0;

  /// The next position (global, or stream sequence for stream folds) this projection needs.
  [[nodiscard]] std::uint64_t next_position() const noexcept { return next_position_; }

  /// Events of kinds unknown to this build that the folds skipped.
  [[nodiscard]] std::uint64_t unknown_kinds_skipped() const noexcept { return unknown_skipped_; }

  /// Events applied.
  [[nodiscard]] std::uint64_t events_applied() const noexcept { return applied_; }

protected:
  /// Sets the fold counters, for a projection restored from a snapshot: it continues at
  /// `next_position` as if it had applied `applied` events and skipped `unknown_skipped`.
  void restore_position(std::uint64_t next_position, std::uint64_t applied,
                        std::uint64_t unknown_skipped) noexcept {
    next_position_ = next_position;
    applied_ = applied;
    unknown_skipped_ = unknown_skipped;
  }

private:
  friend caf::error fold(const event_log&, projection&);
  friend caf::error fold_stream(const event_log&, std::string_view, projection&,
                                std::optional<std::uint64_t>);
  void consume(const recorded_event& event, std::uint64_t next);
  std::uint64_t next_position_ = 0;
  std::uint64_t unknown_skipped_ = 0;
  std::uint64_t applied_ = 0;
};

/// Folds every event from `proj.next_position()` (a global position) into `proj`; events of
/// unknown kinds are skipped and counted. Errors from the log are passed through.
[[nodiscard]] caf::error fold(const event_log& log, projection& proj);

/// Folds `run_id`'s stream from `proj.next_position()` (a stream sequence) into `proj`, up to
/// (not including) sequence `upto` when given.
[[nodiscard]] caf::error fold_stream(const event_log& log, std::string_view run_id,
                                     projection& proj, std::optional<std::uint64_t> upto = {});

} // namespace infrarsi::store
