#pragma once
/// @file codec.hpp
/// Encode and decode the wire format (messages/*.fbs). Every buffer is size-prefixed FlatBuffers
/// (4-byte little-endian length, then the buffer), checked by `flatbuffers::Verifier` under
/// explicit limits, plus semantic checks (checksums, known kinds) before any field is read.
/// A decoded buffer lives in 8-byte-aligned immutable storage (byte_buffer), so the same bytes
/// travel as CAF messages in-process and as ZeroMQ frames between machines.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include <caf/expected.hpp>

#include "messages/byte_buffer.hpp"
#include "messages/errc.hpp"
#include "messages/envelope_generated.h"
#include "messages/event_generated.h"
#include "messages/trial_result_generated.h"
#include "messages/trial_spec_generated.h"
#include "messages/node_generated.h"

namespace infrarsi::messages {

/// Wire schema version written into every Envelope. Decoders accept 1..schema_version.
constexpr std::uint16_t schema_version = 1;

/// Limits the verifier enforces on every inbound buffer. Defaults suit every message this
/// project sends; a peer exceeding them is rejected with errc::corrupt_data.
struct verify_limits {
  /// Deepest nesting of tables. Default 32 (the schemas nest at most 4 deep).
  std::uint32_t max_depth = 32;
  /// Most tables in one buffer. Default 1'000'000 (a 100k-step result has ~100k tables).
  std::uint32_t max_tables = 1'000'000;
  /// Largest accepted buffer in bytes, size prefix included. Default 64 MiB.
  std::size_t max_bytes = std::size_t{64} << 20;
};

/// Static facts about one root table type: its name in error messages and its file identifier
/// (nullptr for payload-only tables that have none).
template <class Table>
struct table_traits;

#define INFRARSI_TABLE_TRAITS(table, ident)                                                    \
  template <>                                                                                  \
  struct table_traits<wire::table> {                                                           \
    static constexpr const char* name = #table;                                                \
    static constexpr const char* identifier = ident;                                           \
  };
INFRARSI_TABLE_TRAITS(Envelope, "IREN")
INFRARSI_TABLE_TRAITS(TrialSpec, "IRTS")
INFRARSI_TABLE_TRAITS(TrialResult, "IRTR")
INFRARSI_TABLE_TRAITS(EventRecord, "IREV")
INFRARSI_TABLE_TRAITS(RunCreated, nullptr)
INFRARSI_TABLE_TRAITS(StageEvent, nullptr)
INFRARSI_TABLE_TRAITS(Document, nullptr)
INFRARSI_TABLE_TRAITS(NodeHello, nullptr)
INFRARSI_TABLE_TRAITS(Heartbeat, nullptr)
INFRARSI_TABLE_TRAITS(TrialAssignment, nullptr)
INFRARSI_TABLE_TRAITS(TrialRefused, nullptr)
INFRARSI_TABLE_TRAITS(NodeControl, nullptr)
INFRARSI_TABLE_TRAITS(SubmitTask, nullptr)
INFRARSI_TABLE_TRAITS(ClientRequest, nullptr)
INFRARSI_TABLE_TRAITS(ClientReply, nullptr)
#undef INFRARSI_TABLE_TRAITS

/// An immutable, size-prefixed FlatBuffer whose root is `Table`. One instantiation per message
/// kind (see the aliases below); each is a distinct CAF message type (type_ids.hpp).
/// Default-constructed messages are empty (get() == nullptr). A message from decode() passed the
/// verifier and the semantic checks of its kind; one from pack() is well-formed FlatBuffers but
/// is only as valid as the value packed (e.g. TrialSpec knob names must be unique and every knob
/// must have a value) — receivers always decode(), so an invalid one is rejected there.
template <class Table>
class message {
public:
  using table_type = Table;
  using native_type = typename Table::NativeTableType;

  message() noexcept = default;

  /// Verifies `size` bytes at `data` (any alignment; copied first) and wraps them.
  /// Errors: errc::corrupt_data (truncated, trailing bytes, failed verifier, bad checksum,
  /// wrong file identifier), errc::unsupported_format (newer schema), errc::unknown_kind.
  [[nodiscard]] static caf::expected<message> decode(const void* data, std::size_t size,
                                                     const verify_limits& limits = {});

  /// Verifies the bytes of `bytes` in place (no copy) and wraps them. Errors as above.
  [[nodiscard]] static caf::expected<message> decode(const byte_buffer& bytes,
                                                     const verify_limits& limits = {});

  /// Encodes a native (object-API) value. Knob assignments of a TrialSpec are sorted by name.
  /// Precondition for a result that decodes: the value satisfies the schema's comments.
  [[nodiscard]] static message pack(const native_type& value);

  /// The root table, or nullptr when empty. Valid as long as this message (or a copy) lives.
  [[nodiscard]] const Table* get() const noexcept;
  const Table* operator->() const noexcept { return get(); }
  /// The root table; the message must not be empty.
  const Table& operator*() const noexcept { return *get(); }

  /// A native (object-API) copy of the content, or nullptr when empty.
  [[nodiscard]] std::unique_ptr<native_type> unpack() const;

  /// The encoded bytes (size prefix included), exactly as sent or stored.
  [[nodiscard]] const byte_buffer& bytes() const noexcept { return bytes_; }

  [[nodiscard]] bool empty() const noexcept { return bytes_.empty(); }

  friend bool operator==(const message& a, const message& b) noexcept {
    return a.bytes_ == b.bytes_;
  }
  friend bool operator!=(const message& a, const message& b) noexcept { return !(a == b); }

private:
  explicit message(byte_buffer bytes) noexcept : bytes_(std::move(bytes)) {}
  byte_buffer bytes_;
};

using envelope_msg = message<wire::Envelope>;
using trial_spec_msg = message<wire::TrialSpec>;
using trial_result_msg = message<wire::TrialResult>;
using event_record_msg = message<wire::EventRecord>;
using run_created_msg = message<wire::RunCreated>;
using stage_event_msg = message<wire::StageEvent>;
using document_msg = message<wire::Document>;
// The daemon's protocol with node-runners and clients (node.fbs).
using node_hello_msg = message<wire::NodeHello>;
using heartbeat_msg = message<wire::Heartbeat>;
using trial_assignment_msg = message<wire::TrialAssignment>;
using trial_refused_msg = message<wire::TrialRefused>;
using node_control_msg = message<wire::NodeControl>;
using submit_task_msg = message<wire::SubmitTask>;
using client_request_msg = message<wire::ClientRequest>;
using client_reply_msg = message<wire::ClientReply>;

/// A Document message from a schema name and JSON text.
document_msg make_document(std::string_view schema, std::string_view json);

/// The envelope kind that carries `Table`.
template <class Table>
constexpr wire::MessageKind message_kind_of() noexcept {
  if constexpr (std::is_same_v<Table, wire::TrialSpec>)
    return wire::MessageKind::TrialSpec;
  else if constexpr (std::is_same_v<Table, wire::TrialResult>)
    return wire::MessageKind::TrialResult;
  else if constexpr (std::is_same_v<Table, wire::EventRecord>)
    return wire::MessageKind::EventRecord;
  else if constexpr (std::is_same_v<Table, wire::NodeHello>)
    return wire::MessageKind::NodeHello;
  else if constexpr (std::is_same_v<Table, wire::Heartbeat>)
    return wire::MessageKind::Heartbeat;
  else if constexpr (std::is_same_v<Table, wire::TrialAssignment>)
    return wire::MessageKind::TrialAssignment;
  else if constexpr (std::is_same_v<Table, wire::TrialRefused>)
    return wire::MessageKind::TrialRefused;
  else if constexpr (std::is_same_v<Table, wire::NodeControl>)
    return wire::MessageKind::NodeControl;
  else if constexpr (std::is_same_v<Table, wire::SubmitTask>)
    return wire::MessageKind::SubmitTask;
  else if constexpr (std::is_same_v<Table, wire::ClientRequest>)
    return wire::MessageKind::ClientRequest;
  else if constexpr (std::is_same_v<Table, wire::ClientReply>)
    return wire::MessageKind::ClientReply;
  else
    return wire::MessageKind::Unknown;
}

/// CRC-32 (zlib crc32, ISO-HDLC polynomial 0xEDB88320) of the envelope's canonical content:
/// schema_version (u16 LE), kind (u16 LE), then run_id, sender (each u32 LE length + bytes),
/// sequence (u64 LE), payload (u32 LE length + bytes).
std::uint32_t envelope_checksum(std::uint16_t version, wire::MessageKind kind,
                                std::string_view run_id, std::string_view sender,
                                std::uint64_t sequence, std::string_view payload) noexcept;

/// CRC-32 (zlib) of `bytes`, as stored in EventRecord.payload_crc32.
std::uint32_t crc32_of(std::string_view bytes) noexcept;

/// Wraps the verified bytes of `kind`'s payload in an Envelope with its checksum.
/// Error: errc::invalid_argument if `kind` is Unknown or `payload` is empty.
[[nodiscard]] caf::expected<envelope_msg> seal(wire::MessageKind kind, const byte_buffer& payload,
                                               std::string_view run_id, std::string_view sender,
                                               std::uint64_t sequence);

/// Seals a message of a kind that can travel alone (TrialSpec, TrialResult, EventRecord and the
/// node.fbs tables).
/// Error: errc::invalid_argument for an empty message.
template <class Table>
[[nodiscard]] caf::expected<envelope_msg> seal(const message<Table>& payload,
                                               std::string_view run_id, std::string_view sender,
                                               std::uint64_t sequence) {
  static_assert(message_kind_of<Table>() != wire::MessageKind::Unknown,
                "this table cannot travel in an envelope on its own");
  return seal(message_kind_of<Table>(), payload.bytes(), run_id, sender, sequence);
}

/// The payload of a verified envelope as a message of type Table, verified under `limits`.
/// Error: errc::unknown_kind if the envelope carries another kind (the message names both).
template <class Table>
[[nodiscard]] caf::expected<message<Table>> open(const envelope_msg& env,
                                                 const verify_limits& limits = {}) {
  if (env.empty())
    return make_error(errc::invalid_argument, "open: empty envelope");
  if (env->kind() != message_kind_of<Table>())
    return make_error(errc::unknown_kind,
                      std::string{"envelope carries "} + wire::EnumNameMessageKind(env->kind())
                        + ", expected " + table_traits<Table>::name);
  const auto* p = env->payload();
  return message<Table>::decode(p->data(), p->size(), limits);
}

/// The table an event kind's payload holds (EventKind comments in event.fbs).
enum class event_payload : std::uint8_t {
  none,         ///< a kind unknown to this build
  run_created,  ///< RunCreated
  stage_event,  ///< StageEvent
  trial_spec,   ///< TrialSpec
  trial_result, ///< TrialResult
  document,     ///< Document
};

/// The payload table of `kind`.
event_payload event_payload_of(std::uint16_t kind) noexcept;

/// Verifies `payload` as the table an event of `kind` carries (see EventKind in event.fbs).
/// Empty payloads and kinds unknown to this build pass (they are skipped by readers, not
/// rejected). Errors as message::decode.
[[nodiscard]] caf::error verify_event_payload(std::uint16_t kind, const void* payload,
                                              std::size_t size);

/// True if this build knows the event kind (a named value of wire::EventKind other than Unknown).
[[nodiscard]] bool is_known_event_kind(std::uint16_t kind) noexcept;

/// snake_case name of an event kind ("trial_completed"), or "unknown" for kinds this build
/// does not know.
[[nodiscard]] std::string event_kind_name(std::uint16_t kind);

/// The event kind for a snake_case or CamelCase name; errc::unknown_kind if none matches.
[[nodiscard]] caf::expected<std::uint16_t> event_kind_from_name(std::string_view name);

} // namespace infrarsi::messages
