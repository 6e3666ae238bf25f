// libFuzzer target: one frame body of the daemon's protocol (messages/node.fbs) as the daemon's
// ROUTERs (adapters/node_broker.cpp) and a node-runner's DEALER (adapters/node_agent.cpp)
// receive it. The bytes go through messages::read_node_frame with the broker's limits (16 MiB,
// the verifier's depth and table limits): the envelope is verified, its checksum checked, its
// payload verified and opened by kind. What opens is then read field by field the way its
// receiver reads it: unconditionally where the receiver does (the decoder's checks must make
// that safe), with null checks where it has them. Any crash, sanitizer report or escaping
// exception is a finding.
//
// The envelope's CRC-32 would stop nearly every mutation of the payload, so each input is read
// twice: as it is (that path covers the checksum check), then, if its checksum field is present
// and wrong, with the correct checksum written into it (the same bytes a well-behaved sender
// would have sealed), so the fuzzer reaches the payload verifier and the readers.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <nlohmann/json.hpp>

#include "messages/json.hpp"
#include "messages/node_frames.hpp"
#include "store/run_projection.hpp"

using namespace infrarsi;
using messages::node_frame;

namespace {

/// The broker's limits (node_broker_options::max_frame_bytes; default verifier limits).
messages::verify_limits broker_limits() {
  messages::verify_limits limits;
  limits.max_bytes = std::size_t{16} << 20;
  return limits;
}

/// Where what is read goes, so that no read is optimised away.
std::size_t sink = 0;

void use(const std::string& s) {
  sink += s.size();
}

std::string str_or_empty(const flatbuffers::String* s) {
  return s != nullptr ? s->str() : std::string{};
}

/// AttemptRefs as the node pool reads them from a hello (and a heartbeat): slot -> key.
std::size_t read_running(const flatbuffers::Vector<flatbuffers::Offset<wire::AttemptRef>>* v) {
  std::map<std::uint32_t, std::tuple<std::string, std::uint64_t, std::uint32_t>> running;
  if (v != nullptr)
    for (const auto* a : *v)
      running[a->slot()] = {str_or_empty(a->run_id()), a->trial_id(), a->attempt()};
  return running.size();
}

/// actors/node_pool.cpp on_hello.
void read(const messages::node_hello_msg& h) {
  use(h->node()->str()); // unconditional there: the decoder requires a node name
  (void) h->protocol();
  (void) str_or_empty(h->tool_version());
  if (h->slots() == nullptr || h->slots()->size() == 0 || h->slots()->size() > 4096)
    return; // refused there
  (void) read_running(h->running());
  (void) str_or_empty(h->fingerprint());
  (void) str_or_empty(h->hardware());
  for (std::uint32_t i = 0; i < h->slots()->size(); ++i) {
    const auto* info = h->slots()->Get(i);
    use(info->name() != nullptr ? info->name()->str() : std::to_string(i));
    (void) str_or_empty(info->cpus());
    if (info->env() != nullptr)
      for (const auto* e : *info->env())
        (void) e->str();
  }
}

/// actors/node_pool.cpp on_node_message (a heartbeat is only liveness; its running list is read
/// as a hello's).
void read(const messages::heartbeat_msg& hb) {
  (void) read_running(hb->running());
}

/// A node-runner: adapters/node_agent.cpp on_assignment and scope_mismatch (the file reads
/// left out), then adapters/node_bridge.cpp run_node_trial.
void read(const messages::trial_assignment_msg& a) {
  auto spec = messages::assignment_spec(a);
  if (!spec)
    return; // counted as malformed there
  (void) (*spec)->trial_id();
  (void) (*spec)->attempt();
  (void) a->slot();
  (void) str_or_empty(a->task_toml());
  (void) str_or_empty(a->task_path());
  if ((*spec)->scope_lock() != nullptr)
    for (const auto* h : *(*spec)->scope_lock())
      use("/w/" + h->path()->str() + h->sha256()->str());
  auto config = store::configuration_of(**spec);
  use(config.key());
  if ((*spec)->patches() != nullptr)
    for (const auto* p : *(*spec)->patches())
      use(p->str());
  std::map<std::string, std::string> scope_lock;
  if ((*spec)->scope_lock() != nullptr)
    for (const auto* h : *(*spec)->scope_lock())
      scope_lock[h->path()->str()] = h->sha256()->str();
  sink += scope_lock.size();
  (void) (*spec)->timeout_s();
  (void) (*spec)->memory_cap_bytes();
  (void) messages::to_json(**spec); // how the spec is shown (log dump, status)
}

/// actors/node_pool.cpp on_node_message, TrialRefused.
void read(const messages::trial_refused_msg& r) {
  (void) r->trial_id();
  (void) r->attempt();
  use("refused: " + str_or_empty(r->reason()));
}

/// adapters/node_agent.cpp on_control.
void read(const messages::node_control_msg& c) {
  use(c->command()->str()); // unconditional there
  use(str_or_empty(c->detail()));
  (void) c->trial_id();
  (void) c->attempt();
}

/// runtime/daemon.cpp on_client and scope_differs (the task's load and the file reads left out:
/// fuzz_task_file covers the former).
void read(const messages::submit_task_msg& m) {
  const auto& s = *m;
  use(s.task_toml()->str()); // unconditional there
  use(s.task_path() != nullptr ? s.task_path()->str() : std::string{"submitted.toml"});
  if (s.scope() != nullptr)
    for (const auto* h : *s.scope())
      use("/w/" + h->path()->str() + h->sha256()->str());
  if (s.seed())
    (void) *s.seed();
  if (s.trials())
    (void) *s.trials();
  (void) s.max_slots();
}

/// runtime/daemon.cpp on_client, ClientRequest.
void read(const messages::client_request_msg& r) {
  use(r->command()->str()); // unconditional there
}

/// runtime/daemon.cpp run_submit and run_daemon_status: what a client reads from the daemon.
void read(const messages::client_reply_msg& r) {
  if (!r->ok()) {
    (void) str_or_empty(r->error());
    return;
  }
  auto doc = nlohmann::json::parse(r->json()->str(), nullptr, false); // unconditional there
  (void) doc.is_discarded();
}

/// actors/node_pool.cpp on_result (the key that fences the attempt), then the result as shown.
void read(const messages::trial_result_msg& r) {
  (void) r->trial_id();
  (void) r->attempt();
  (void) r->outcome();
  if (r->steps() != nullptr)
    for (const auto* s : *r->steps()) {
      (void) s->step();
      (void) s->loss();
      (void) s->step_time_s();
      (void) s->peak_memory_bytes();
      (void) s->observed_at_s();
      (void) s->eval_loss();
    }
  (void) str_or_empty(r->detail());
  (void) str_or_empty(r->final_report());
  (void) str_or_empty(r->node());
  (void) messages::to_json(*r);
}

/// Kinds neither the daemon nor a node receives (TrialSpec, EventRecord): ignored there.
template <class M>
void read(const M&) {}

void dispatch(const node_frame& f) {
  use(f.run_id);
  std::visit(
    [](const auto& m) {
      if constexpr (!std::is_same_v<std::decay_t<decltype(m)>, std::monostate>)
        read(m);
    },
    f.message);
}

/// The input with the Envelope's checksum field set to the checksum of its content; empty when
/// the input is not a structurally valid Envelope, has no checksum field, or is already right.
std::vector<std::uint64_t> resealed(const std::uint8_t* data, std::size_t size) {
  using flatbuffers::uoffset_t;
  if (size < 3 * sizeof(uoffset_t) || size > broker_limits().max_bytes)
    return {};
  std::vector<std::uint64_t> words((size + 7) / 8); // 8-byte aligned, as byte_buffer
  auto* bytes = reinterpret_cast<std::uint8_t*>(words.data());
  std::memcpy(bytes, data, size);
  if (std::size_t{flatbuffers::ReadScalar<uoffset_t>(bytes)} + sizeof(uoffset_t) != size)
    return {};
  flatbuffers::Verifier v(bytes, size);
  if (!v.VerifySizePrefixedBuffer<wire::Envelope>("IREN"))
    return {};
  const auto* env = flatbuffers::GetSizePrefixedRoot<wire::Envelope>(bytes);
  auto view = [](const auto* s) {
    return s == nullptr ? std::string_view{}
                        : std::string_view{reinterpret_cast<const char*>(s->data()), s->size()};
  };
  auto sum = messages::envelope_checksum(env->schema_version(), env->kind(), view(env->run_id()),
                                         view(env->sender()), env->sequence(),
                                         view(env->payload()));
  if (sum == env->checksum())
    return {};
  const auto* table = flatbuffers::GetSizePrefixedRoot<flatbuffers::Table>(bytes);
  const auto* field = table->GetAddressOf(wire::Envelope::VT_CHECKSUM);
  if (field == nullptr)
    return {};
  flatbuffers::WriteScalar<std::uint32_t>(const_cast<std::uint8_t*>(field), sum);
  return words;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto limits = broker_limits();
  if (auto f = messages::read_node_frame(data, size, limits))
    dispatch(*f);
  auto fixed = resealed(data, size);
  if (!fixed.empty())
    if (auto f = messages::read_node_frame(fixed.data(), size, limits))
      dispatch(*f);
  return 0;
}
