#include "messages/codec.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include <flatbuffers/flatbuffers.h>
#include <zlib.h>

namespace infrarsi::messages {

namespace {

using flatbuffers::uoffset_t;

std::string bytes_text(std::size_t n) {
  return std::to_string(n) + (n == 1 ? " byte" : " bytes");
}

/// The error of an expected, or no error (caf::expected::error() is undefined on success).
template <class T>
caf::error error_of(caf::expected<T>&& x) {
  if (x)
    return caf::none;
  return std::move(x.error());
}

caf::error corrupt(const char* what, std::string detail) {
  return make_error(errc::corrupt_data, std::string{what} + ": " + std::move(detail));
}

// -- structural verification --------------------------------------------------------------------

template <class Table>
caf::error verify_structure(const std::uint8_t* data, std::size_t size,
                            const verify_limits& limits) {
  using traits = table_traits<Table>;
  if (size > limits.max_bytes)
    return corrupt(traits::name, bytes_text(size) + " exceed the limit of "
                                   + bytes_text(limits.max_bytes));
  if (size < 2 * sizeof(uoffset_t))
    return corrupt(traits::name, "truncated: " + bytes_text(size)
                                   + " cannot hold a size-prefixed FlatBuffer (minimum 8)");
  auto declared = std::size_t{flatbuffers::ReadScalar<uoffset_t>(data)} + sizeof(uoffset_t);
  if (declared > size)
    return corrupt(traits::name, "truncated: the size prefix declares " + bytes_text(declared)
                                   + " but only " + bytes_text(size) + " are present");
  if (declared < size)
    return corrupt(traits::name, "the size prefix declares " + bytes_text(declared) + " but "
                                   + bytes_text(size) + " are present (trailing bytes)");
  // BufferHasIdentifier reads the 4 identifier bytes after the two offsets unchecked.
  if (traits::identifier != nullptr
      && size < 2 * sizeof(uoffset_t) + flatbuffers::kFileIdentifierLength)
    return corrupt(traits::name, "truncated: " + bytes_text(size)
                                   + " cannot hold a size-prefixed FlatBuffer with a file "
                                     "identifier (minimum 12)");
  if (traits::identifier != nullptr
      && !flatbuffers::BufferHasIdentifier(data, traits::identifier, true)) {
    std::string found(reinterpret_cast<const char*>(data) + 2 * sizeof(uoffset_t),
                      flatbuffers::kFileIdentifierLength);
    for (auto& c : found)
      if (!std::isprint(static_cast<unsigned char>(c)))
        c = '?';
    return corrupt(traits::name, std::string{"wrong file identifier '"} + found + "', expected '"
                                   + traits::identifier + "' (not a " + traits::name
                                   + " buffer, or corrupted)");
  }
  flatbuffers::Verifier verifier(data, size, limits.max_depth, limits.max_tables);
  if (!verifier.VerifySizePrefixedBuffer<Table>(traits::identifier))
    return corrupt(traits::name, bytes_text(size)
                                   + " failed FlatBuffers verification (corrupted or bit-flipped; "
                                     "limits: depth "
                                   + std::to_string(limits.max_depth) + ", tables "
                                   + std::to_string(limits.max_tables) + ")");
  return caf::none;
}

// -- semantic checks per table ------------------------------------------------------------------

std::string_view sv(const flatbuffers::String* s) {
  return s == nullptr ? std::string_view{} : std::string_view{s->c_str(), s->size()};
}

std::string_view sv(const flatbuffers::Vector<std::uint8_t>* v) {
  return v == nullptr ? std::string_view{}
                      : std::string_view{reinterpret_cast<const char*>(v->data()), v->size()};
}

caf::error check(const wire::TrialSpec& spec, const verify_limits&) {
  if (const auto* knobs = spec.knobs()) {
    for (uoffset_t i = 0; i < knobs->size(); ++i) {
      const auto* k = knobs->Get(i);
      // The verifier accepts a union type without its table; readers (configuration_of,
      // to_json) read the table of the type unconditionally.
      if (k->value_type() == wire::KnobValue::NONE || k->value() == nullptr)
        return corrupt("TrialSpec", "knob '" + std::string{sv(k->name())} + "' has no value");
      if (i > 0 && !(sv(knobs->Get(i - 1)->name()) < sv(k->name())))
        return corrupt("TrialSpec", "knob names not strictly sorted at '"
                                      + std::string{sv(k->name())} + "' (duplicate or unsorted)");
    }
  }
  return caf::none;
}

caf::error check(const wire::TrialResult&, const verify_limits&) {
  // Outcome values only grow: a value this build does not know is kept (shown as outcome_N),
  // never treated as corruption.
  return caf::none;
}

caf::error check(const wire::RunCreated&, const verify_limits&) {
  return caf::none;
}

caf::error check(const wire::StageEvent&, const verify_limits&) {
  return caf::none;
}

caf::error check(const wire::Document& doc, const verify_limits&) {
  if (doc.schema() == nullptr || doc.schema()->size() == 0)
    return corrupt("Document", "missing schema name");
  return caf::none;
}

caf::error check(const wire::NodeHello& hello, const verify_limits&) {
  if (hello.node() == nullptr || hello.node()->size() == 0)
    return corrupt("NodeHello", "missing node name");
  return caf::none;
}

caf::error check(const wire::Heartbeat&, const verify_limits&) {
  return caf::none;
}

caf::error check(const wire::TrialAssignment& a, const verify_limits& limits) {
  auto spec = sv(a.spec());
  if (spec.empty())
    return corrupt("TrialAssignment", "missing TrialSpec");
  if (auto err = error_of(trial_spec_msg::decode(spec.data(), spec.size(), limits)))
    return corrupt("TrialAssignment", "its TrialSpec: " + describe(err));
  return caf::none;
}

caf::error check(const wire::TrialRefused&, const verify_limits&) {
  return caf::none;
}

caf::error check(const wire::NodeControl& c, const verify_limits&) {
  if (c.command() == nullptr || c.command()->size() == 0)
    return corrupt("NodeControl", "missing command");
  return caf::none;
}

caf::error check(const wire::SubmitTask& t, const verify_limits&) {
  if (t.task_toml() == nullptr || t.task_toml()->size() == 0)
    return corrupt("SubmitTask", "missing task text");
  return caf::none;
}

caf::error check(const wire::ClientRequest& r, const verify_limits&) {
  if (r.command() == nullptr || r.command()->size() == 0)
    return corrupt("ClientRequest", "missing command");
  return caf::none;
}

caf::error check(const wire::ClientReply& r, const verify_limits&) {
  // A client reads the answer of an ok reply unconditionally (runtime/daemon.cpp).
  if (r.ok() && r.json() == nullptr)
    return corrupt("ClientReply", "an ok reply without its JSON answer");
  return caf::none;
}

caf::error check(const wire::EventRecord& rec, const verify_limits& limits) {
  auto payload = sv(rec.payload());
  auto crc = crc32_of(payload);
  if (crc != rec.payload_crc32())
    return corrupt("EventRecord", "payload checksum mismatch (stored "
                                    + std::to_string(rec.payload_crc32()) + ", computed "
                                    + std::to_string(crc) + ")");
  (void) limits;
  return verify_event_payload(rec.kind(), payload.data(), payload.size());
}

caf::error check(const wire::Envelope& env, const verify_limits& limits) {
  if (env.schema_version() == 0 || env.schema_version() > schema_version)
    return make_error(errc::unsupported_format,
                      "Envelope: schema version " + std::to_string(env.schema_version())
                        + " is not supported (this build reads 1.."
                        + std::to_string(schema_version) + ")");
  auto payload = sv(env.payload());
  auto sum = envelope_checksum(env.schema_version(), env.kind(), sv(env.run_id()),
                               sv(env.sender()), env.sequence(), payload);
  if (sum != env.checksum())
    return corrupt("Envelope", "checksum mismatch (stored " + std::to_string(env.checksum())
                                 + ", computed " + std::to_string(sum) + ")");
  switch (env.kind()) {
    case wire::MessageKind::TrialSpec:
      return error_of(trial_spec_msg::decode(payload.data(), payload.size(), limits));
    case wire::MessageKind::TrialResult:
      return error_of(trial_result_msg::decode(payload.data(), payload.size(), limits));
    case wire::MessageKind::EventRecord:
      return error_of(event_record_msg::decode(payload.data(), payload.size(), limits));
    case wire::MessageKind::NodeHello:
      return error_of(node_hello_msg::decode(payload.data(), payload.size(), limits));
    case wire::MessageKind::Heartbeat:
      return error_of(heartbeat_msg::decode(payload.data(), payload.size(), limits));
    case wire::MessageKind::TrialAssignment:
      return error_of(trial_assignment_msg::decode(payload.data(), payload.size(), limits));
    case wire::MessageKind::TrialRefused:
      return error_of(trial_refused_msg::decode(payload.data(), payload.size(), limits));
    case wire::MessageKind::NodeControl:
      return error_of(node_control_msg::decode(payload.data(), payload.size(), limits));
    case wire::MessageKind::SubmitTask:
      return error_of(submit_task_msg::decode(payload.data(), payload.size(), limits));
    case wire::MessageKind::ClientRequest:
      return error_of(client_request_msg::decode(payload.data(), payload.size(), limits));
    case wire::MessageKind::ClientReply:
      return error_of(client_reply_msg::decode(payload.data(), payload.size(), limits));
    default:
      return make_error(errc::unknown_kind,
                        "Envelope: message kind " + std::to_string(static_cast<int>(env.kind()))
                          + " is unknown to this build");
  }
}

// -- normalisation before packing ---------------------------------------------------------------

template <class Native>
const Native& normalized(const Native& value, Native&) {
  return value;
}

const wire::TrialSpecT& normalized(const wire::TrialSpecT& value, wire::TrialSpecT& scratch) {
  auto by_name = [](const auto& a, const auto& b) { return a->name < b->name; };
  if (std::is_sorted(value.knobs.begin(), value.knobs.end(), by_name))
    return value;
  scratch = value;
  std::sort(scratch.knobs.begin(), scratch.knobs.end(), by_name);
  return scratch;
}

} // namespace

// -- message<Table> -----------------------------------------------------------------------------

template <class Table>
caf::expected<message<Table>> message<Table>::decode(const byte_buffer& bytes,
                                                     const verify_limits& limits) {
  if (auto err = verify_structure<Table>(bytes.data(), bytes.size(), limits))
    return err;
  auto* root = flatbuffers::GetSizePrefixedRoot<Table>(bytes.data());
  if (auto err = check(*root, limits))
    return err;
  return message{bytes};
}

template <class Table>
caf::expected<message<Table>> message<Table>::decode(const void* data, std::size_t size,
                                                     const verify_limits& limits) {
  if (size > limits.max_bytes) // do not copy what will be rejected anyway
    return corrupt(table_traits<Table>::name, bytes_text(size) + " exceed the limit of "
                                                + bytes_text(limits.max_bytes));
  return decode(byte_buffer::copy_of(data, size), limits);
}

template <class Table>
message<Table> message<Table>::pack(const native_type& value) {
  native_type scratch;
  const auto& v = normalized(value, scratch);
  flatbuffers::FlatBufferBuilder fbb(256);
  auto root = Table::Pack(fbb, &v);
  fbb.FinishSizePrefixed(root, table_traits<Table>::identifier);
  return message{byte_buffer::copy_of(fbb.GetBufferPointer(), fbb.GetSize())};
}

template <class Table>
const Table* message<Table>::get() const noexcept {
  return bytes_.empty() ? nullptr : flatbuffers::GetSizePrefixedRoot<Table>(bytes_.data());
}

template <class Table>
std::unique_ptr<typename message<Table>::native_type> message<Table>::unpack() const {
  if (bytes_.empty())
    return nullptr;
  return std::unique_ptr<native_type>(get()->UnPack());
}

template class message<wire::Envelope>;
template class message<wire::TrialSpec>;
template class message<wire::TrialResult>;
template class message<wire::EventRecord>;
template class message<wire::RunCreated>;
template class message<wire::StageEvent>;
template class message<wire::Document>;
template class message<wire::NodeHello>;
template class message<wire::Heartbeat>;
template class message<wire::TrialAssignment>;
template class message<wire::TrialRefused>;
template class message<wire::NodeControl>;
template class message<wire::SubmitTask>;
template class message<wire::ClientRequest>;
template class message<wire::ClientReply>;

document_msg make_document(std::string_view schema, std::string_view json) {
  wire::DocumentT d;
  d.schema = std::string{schema};
  d.json = std::string{json};
  return document_msg::pack(d);
}

// -- free functions -----------------------------------------------------------------------------

namespace {

template <class T>
std::uint32_t crc_le(std::uint32_t crc, T value) noexcept {
  unsigned char buf[sizeof(T)];
  for (std::size_t i = 0; i < sizeof(T); ++i)
    buf[i] = static_cast<unsigned char>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xFF);
  return static_cast<std::uint32_t>(::crc32(crc, buf, sizeof(T)));
}

std::uint32_t crc_str(std::uint32_t crc, std::string_view s) noexcept {
  crc = crc_le(crc, static_cast<std::uint32_t>(s.size()));
  // zlib's crc32 takes a uInt length; our buffers are bounded far below 4 GiB (verify_limits).
  return static_cast<std::uint32_t>(
    ::crc32(crc, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

} // namespace

std::uint32_t envelope_checksum(std::uint16_t version, wire::MessageKind kind,
                                std::string_view run_id, std::string_view sender,
                                std::uint64_t sequence, std::string_view payload) noexcept {
  auto crc = static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0));
  crc = crc_le(crc, version);
  crc = crc_le(crc, static_cast<std::uint16_t>(kind));
  crc = crc_str(crc, run_id);
  crc = crc_str(crc, sender);
  crc = crc_le(crc, sequence);
  return crc_str(crc, payload);
}

std::uint32_t crc32_of(std::string_view bytes) noexcept {
  auto crc = ::crc32(0L, Z_NULL, 0);
  return static_cast<std::uint32_t>(
    ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

caf::expected<envelope_msg> seal(wire::MessageKind kind, const byte_buffer& payload,
                                 std::string_view run_id, std::string_view sender,
                                 std::uint64_t sequence) {
  if (kind == wire::MessageKind::Unknown)
    return make_error(errc::invalid_argument, "seal: message kind Unknown cannot be sent");
  if (payload.empty())
    return make_error(errc::invalid_argument, "seal: empty payload");
  flatbuffers::FlatBufferBuilder fbb(payload.size() + 128);
  auto run = fbb.CreateString(run_id.data(), run_id.size());
  auto snd = fbb.CreateString(sender.data(), sender.size());
  // Align the payload vector to 8 bytes so nested buffers could be read in place.
  fbb.ForceVectorAlignment(payload.size(), 1, 8);
  auto pl = fbb.CreateVector(payload.data(), payload.size());
  auto sum = envelope_checksum(schema_version, kind, run_id, sender, sequence, payload.view());
  auto root = wire::CreateEnvelope(fbb, schema_version, kind, run, snd, sequence, pl, sum);
  fbb.FinishSizePrefixed(root, table_traits<wire::Envelope>::identifier);
  return envelope_msg::decode(fbb.GetBufferPointer(), fbb.GetSize());
}

event_payload event_payload_of(std::uint16_t kind) noexcept {
  switch (static_cast<wire::EventKind>(kind)) {
    case wire::EventKind::RunCreated: return event_payload::run_created;
    case wire::EventKind::StageStarted:
    case wire::EventKind::StageCompleted: return event_payload::stage_event;
    case wire::EventKind::TrialProposed:
    case wire::EventKind::TrialDispatched:
    case wire::EventKind::TrialLost: return event_payload::trial_spec;
    case wire::EventKind::TrialCompleted:
    case wire::EventKind::TrialResultStale: return event_payload::trial_result;
    case wire::EventKind::ContractLocked:
    case wire::EventKind::PriorsLoaded:
    case wire::EventKind::ExperienceSeeded:
    case wire::EventKind::ExperienceRecorded:
    case wire::EventKind::ExperienceImported:
    case wire::EventKind::BaselineCalibrated:
    case wire::EventKind::TrialVerified:
    case wire::EventKind::CandidateReverified:
    case wire::EventKind::CandidatePromoted:
    case wire::EventKind::ReportWritten:
    case wire::EventKind::ChangesApplied:
    case wire::EventKind::ProposalsMade:
    case wire::EventKind::SearchStopped:
    case wire::EventKind::RunInterrupted:
    case wire::EventKind::ApplyStarted: return event_payload::document;
    default: return event_payload::none;
  }
}

caf::error verify_event_payload(std::uint16_t kind, const void* payload, std::size_t size) {
  if (size == 0)
    return caf::none;
  switch (event_payload_of(kind)) {
    case event_payload::run_created: return error_of(run_created_msg::decode(payload, size));
    case event_payload::stage_event: return error_of(stage_event_msg::decode(payload, size));
    case event_payload::trial_spec: return error_of(trial_spec_msg::decode(payload, size));
    case event_payload::trial_result: return error_of(trial_result_msg::decode(payload, size));
    case event_payload::document: return error_of(document_msg::decode(payload, size));
    case event_payload::none: break;
  }
  return caf::none; // unknown kinds are skipped and counted by readers, not rejected here
}

bool is_known_event_kind(std::uint16_t kind) noexcept {
  for (auto k : wire::EnumValuesEventKind())
    if (k != wire::EventKind::Unknown && static_cast<std::uint16_t>(k) == kind)
      return true;
  return false;
}

namespace {

std::string snake_case(std::string_view camel) {
  std::string out;
  for (std::size_t i = 0; i < camel.size(); ++i) {
    auto c = static_cast<unsigned char>(camel[i]);
    if (std::isupper(c)) {
      if (i > 0)
        out += '_';
      out += static_cast<char>(std::tolower(c));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

} // namespace

std::string event_kind_name(std::uint16_t kind) {
  if (!is_known_event_kind(kind))
    return "unknown";
  return snake_case(wire::EnumNameEventKind(static_cast<wire::EventKind>(kind)));
}

caf::expected<std::uint16_t> event_kind_from_name(std::string_view name) {
  for (auto k : wire::EnumValuesEventKind()) {
    if (k == wire::EventKind::Unknown)
      continue;
    std::string_view camel = wire::EnumNameEventKind(k);
    if (name == camel || name == snake_case(camel))
      return static_cast<std::uint16_t>(k);
  }
  return make_error(errc::unknown_kind, "no event kind named '" + std::string{name} + "'");
}

} // namespace infrarsi::messages
