// Writes the seed corpus of fuzz_node_frame (tests/data/fuzz/node_frame/): one sealed envelope
// of every message kind (and a few variants the protocol sends: the daemon's empty heartbeat, a
// refusal, a failed reply), packed with realistic values and sealed with messages::seal exactly
// as the daemon, a node-runner and a client send them. Each is checked with read_node_frame
// before it is written. Usage: node_frame_seeds DIR (docs/testing.md, Fuzzing).

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "messages/node_frames.hpp"
#include "messages/node_protocol.hpp"

using namespace infrarsi;
namespace m = infrarsi::messages;

namespace {

std::string out_dir;
int failures = 0;

template <class Table>
void write(const std::string& name, const m::message<Table>& msg, const std::string& run_id,
           const std::string& sender, std::uint64_t sequence) {
  auto env = m::seal(msg, run_id, sender, sequence);
  if (!env) {
    std::cerr << name << ": " << describe(env.error()) << '\n';
    ++failures;
    return;
  }
  const auto& b = env->bytes();
  m::verify_limits limits;
  limits.max_bytes = std::size_t{16} << 20; // the broker's
  auto back = m::read_node_frame(b.data(), b.size(), limits);
  if (!back || back->kind != m::message_kind_of<Table>()) {
    std::cerr << name << ": does not read back"
              << (back ? std::string{} : ": " + describe(back.error())) << '\n';
    ++failures;
    return;
  }
  std::ofstream f{out_dir + "/" + name, std::ios::binary};
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) {
    std::cerr << name << ": cannot write\n";
    ++failures;
  }
}

std::unique_ptr<wire::AttemptRefT> attempt(const std::string& run, std::uint64_t trial,
                                           std::uint32_t att, std::uint32_t slot) {
  auto a = std::make_unique<wire::AttemptRefT>();
  a->run_id = run;
  a->trial_id = trial;
  a->attempt = att;
  a->slot = slot;
  return a;
}

std::unique_ptr<wire::FileHashT> file_hash(const std::string& path, const std::string& sha) {
  auto h = std::make_unique<wire::FileHashT>();
  h->path = path;
  h->sha256 = sha;
  return h;
}

std::unique_ptr<wire::KnobAssignmentT> knob(const std::string& name, wire::KnobValueUnion v) {
  auto k = std::make_unique<wire::KnobAssignmentT>();
  k->name = name;
  k->value = std::move(v);
  return k;
}

const char* run = "20261201T204500Z-torch-gpt-3f9a";
const char* sha_train = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
const char* sha_model = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";
const char* task_toml = R"(name = "torch_gpt"
[workload]
workdir = "."
argv = ["python3", "train.py", "--micro-batch", "{micro_batch}"]
world_size = "1"
[[knobs]]
name = "micro_batch"
type = "int"
values = [1, 2, 4, 8]
default = 2
)";

m::trial_spec_msg spec() {
  wire::TrialSpecT s;
  s.trial_id = 12;
  s.attempt = 1;
  wire::KnobValueUnion i;
  wire::IntKnobT iv;
  iv.value = 4;
  i.Set(iv);
  wire::KnobValueUnion r;
  wire::RealKnobT rv;
  rv.value = 0.5;
  r.Set(rv);
  wire::KnobValueUnion b;
  wire::BoolKnobT bv;
  bv.value = true;
  b.Set(bv);
  wire::KnobValueUnion t;
  wire::TextKnobT tv;
  tv.value = "sdpa";
  t.Set(tv);
  s.knobs.push_back(knob("micro_batch", std::move(i)));
  s.knobs.push_back(knob("grad_clip", std::move(r)));
  s.knobs.push_back(knob("compile", std::move(b)));
  s.knobs.push_back(knob("attention", std::move(t)));
  s.patches = {"fused_qkv", "pinned_loader"};
  s.timeout_s = 600;
  s.memory_cap_bytes = std::uint64_t{8} << 30;
  s.purpose = "verify-candidate";
  s.scope_lock.push_back(file_hash("train.py", sha_train));
  s.scope_lock.push_back(file_hash("model.py", sha_model));
  s.purpose_kind = wire::Purpose::VerifyCandidate;
  s.candidate_trial = 7;
  s.round = 1;
  return m::trial_spec_msg::pack(s);
}

m::trial_result_msg result() {
  wire::TrialResultT r;
  r.trial_id = 12;
  r.attempt = 1;
  r.outcome = wire::Outcome::Ok;
  for (std::uint32_t i = 0; i < 4; ++i) {
    auto st = std::make_unique<wire::StepMetricsT>();
    st->step = i;
    st->loss = 4.1 - 0.2 * i;
    st->tokens = 65536;
    st->step_time_s = 0.31 + 0.01 * i;
    st->forward_s = 0.1;
    st->backward_s = 0.18;
    st->peak_memory_bytes = std::uint64_t{6} << 30;
    st->warmup = i == 0;
    st->observed_at_s = 1.5 + 0.32 * i;
    if (i == 3)
      st->eval_loss = 3.6;
    r.steps.push_back(std::move(st));
  }
  r.peak_memory_bytes = std::uint64_t{6} << 30;
  r.wall_time_s = 42.5;
  r.device_seconds = 42.5;
  r.exit_code = 0;
  r.detail = "";
  r.final_report = R"({"event": "final", "global_batch": 64, "timed_steps": 3})";
  r.node = "gpu-07";
  return m::trial_result_msg::pack(r);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: node_frame_seeds DIR\n";
    return 2;
  }
  out_dir = argv[1];

  { // node -> daemon: hello with two slots and one attempt still running (a reconnect)
    wire::NodeHelloT h;
    h.node = "gpu-07";
    h.hardware = R"({"cpus": 32, "gpus": [{"name": "NVIDIA H100", "memory": 85899345920}]})";
    h.fingerprint = "c0ffee12";
    auto s0 = std::make_unique<wire::NodeSlotInfoT>();
    s0->name = "gpu0-3";
    s0->env = {"CUDA_VISIBLE_DEVICES=0,1,2,3"};
    s0->cpus = "0-15";
    auto s1 = std::make_unique<wire::NodeSlotInfoT>();
    s1->name = "gpu4-7";
    s1->env = {"CUDA_VISIBLE_DEVICES=4,5,6,7", "NCCL_P2P_DISABLE=1"};
    s1->cpus = "16-31";
    h.slots.push_back(std::move(s0));
    h.slots.push_back(std::move(s1));
    h.running.push_back(attempt(run, 11, 0, 1));
    h.tool_version = m::tool_version;
    h.protocol = m::node_protocol_version;
    write("node_hello", m::node_hello_msg::pack(h), "", "node:gpu-07", 0);
  }
  { // node -> daemon heartbeat, and the daemon's empty one
    wire::HeartbeatT hb;
    hb.running.push_back(attempt(run, 12, 1, 0));
    write("heartbeat", m::heartbeat_msg::pack(hb), "", "node:gpu-07", 41);
    write("heartbeat_daemon", m::heartbeat_msg::pack(wire::HeartbeatT{}), "", "daemon", 7);
  }
  { // daemon -> node
    wire::TrialAssignmentT a;
    a.slot = 0;
    a.task_toml = task_toml;
    a.task_path = "/home/ml/torch_gpt/task.toml";
    auto packed = spec();
    const auto& b = packed.bytes();
    a.spec.assign(b.data(), b.data() + b.size());
    write("trial_assignment", m::trial_assignment_msg::pack(a), run, "daemon", 8);
  }
  { // node -> daemon
    wire::TrialRefusedT r;
    r.trial_id = 12;
    r.attempt = 1;
    r.reason = "node-runner gpu-07: locked file 'train.py' differs from the run's scope lock";
    write("trial_refused", m::trial_refused_msg::pack(r), run, "node:gpu-07", 42);
  }
  { // daemon -> node: welcome, and a cancel
    wire::NodeControlT c;
    c.command = "welcome";
    c.detail = "node gpu-07";
    write("node_control", m::node_control_msg::pack(c), "", "daemon", 9);
    wire::NodeControlT x;
    x.command = "cancel";
    x.trial_id = 12;
    x.attempt = 1;
    write("node_control_cancel", m::node_control_msg::pack(x), run, "daemon", 10);
  }
  { // client -> daemon
    wire::SubmitTaskT s;
    s.task_toml = task_toml;
    s.task_path = "/home/ml/torch_gpt/task.toml";
    s.scope.push_back(file_hash("train.py", sha_train));
    s.scope.push_back(file_hash("model.py", sha_model));
    s.seed = flatbuffers::Optional<std::uint64_t>{1234};
    s.trials = flatbuffers::Optional<std::uint32_t>{24};
    s.max_slots = 2;
    write("submit_task", m::submit_task_msg::pack(s), "", "client", 0);
  }
  { // client -> daemon
    wire::ClientRequestT r;
    r.command = "status";
    write("client_request", m::client_request_msg::pack(r), "", "client", 0);
  }
  { // daemon -> client: a run id, and a refusal
    wire::ClientReplyT r;
    r.ok = true;
    r.json = std::string{R"({"run_id": ")"} + run + "\"}";
    write("client_reply", m::client_reply_msg::pack(r), "", "daemon", 11);
    wire::ClientReplyT e;
    e.ok = false;
    e.error = "task.toml: [workload] argv: missing";
    write("client_reply_error", m::client_reply_msg::pack(e), "", "daemon", 12);
  }
  // node -> daemon: a result; and the kinds the protocol does not send alone (ignored there)
  write("trial_result", result(), run, "node:gpu-07", 43);
  write("trial_spec", spec(), run, "planner", 3);
  {
    auto payload = spec();
    wire::EventRecordT e;
    e.kind = static_cast<std::uint16_t>(wire::EventKind::TrialDispatched);
    e.run_id = run;
    e.sequence = 17;
    e.global_position = 230;
    e.recorded_at_ns = 1'796'157'900'000'000'000;
    e.payload.assign(payload.bytes().data(), payload.bytes().data() + payload.bytes().size());
    e.payload_crc32 = m::crc32_of(payload.bytes().view());
    write("event_record", m::event_record_msg::pack(e), run, "store", 230);
  }
  if (failures != 0)
    return 1;
  std::cout << "node_frame_seeds: wrote the seeds to " << out_dir << '\n';
  return 0;
}
