#pragma once
// Helpers shared by the test suites: a real temporary directory and sample wire messages.

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "messages/codec.hpp"

namespace infrarsi::test {

/// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class temp_dir {
public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string{base != nullptr ? base : "/tmp"} + "/infrarsi-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      std::abort();
    path_ = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }
  /// A path inside the directory (not created).
  [[nodiscard]] std::string sub(const std::string& name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

/// A TrialSpec with one knob of each type; knobs deliberately unsorted.
inline messages::trial_spec_msg sample_spec(std::uint64_t trial_id, std::uint32_t attempt = 0) {
  wire::TrialSpecT spec;
  spec.trial_id = trial_id;
  spec.attempt = attempt;
  auto knob = [&spec](const std::string& name, auto value) {
    auto k = std::make_unique<wire::KnobAssignmentT>();
    k->name = name;
    k->value.Set(std::move(value));
    spec.knobs.push_back(std::move(k));
  };
  wire::IntKnobT world_size;
  world_size.value = 2;
  wire::IntKnobT micro_batch;
  micro_batch.value = 4 + static_cast<std::int64_t>(trial_id % 4);
  wire::TextKnobT attention;
  attention.value = "sdpa";
  wire::BoolKnobT ckpt;
  ckpt.value = (trial_id % 2) == 0;
  wire::RealKnobT bucket_scale;
  bucket_scale.value = 0.5;
  knob("world_size", world_size);
  knob("micro_batch", micro_batch);
  knob("attention", attention);
  knob("activation_checkpointing", ckpt);
  knob("bucket_scale", bucket_scale);
  spec.patches = {"fused_qkv", "foreach_adamw"};
  spec.timeout_s = 120.0;
  spec.memory_cap_bytes = std::uint64_t{3} << 30;
  return messages::trial_spec_msg::pack(spec);
}

/// A TrialResult with `steps` steps; every second step reports phase times.
inline messages::trial_result_msg sample_result(std::uint64_t trial_id, std::uint32_t steps = 4,
                                                wire::Outcome outcome = wire::Outcome::Ok) {
  wire::TrialResultT r;
  r.trial_id = trial_id;
  r.attempt = 0;
  r.outcome = outcome;
  for (std::uint32_t i = 0; i < steps; ++i) {
    auto s = std::make_unique<wire::StepMetricsT>();
    s->step = i;
    s->loss = 5.0 - 0.01 * i;
    s->tokens = 16384;
    s->step_time_s = 0.25 + 0.001 * i;
    if (i % 2 == 0) {
      s->forward_s = 0.08;
      s->backward_s = 0.15;
      s->optimizer_s = 0.02;
      s->peak_memory_bytes = std::uint64_t{900} << 20;
    }
    r.steps.push_back(std::move(s));
  }
  r.peak_memory_bytes = std::uint64_t{950} << 20;
  r.wall_time_s = 3.5;
  r.device_seconds = 7.0;
  r.exit_code = 0;
  r.detail = "completed";
  return messages::trial_result_msg::pack(r);
}

} // namespace infrarsi::test
