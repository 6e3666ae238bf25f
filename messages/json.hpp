#pragma once
/// @file json.hpp
/// JSON views of wire messages for humans and tools (`infrarsi log dump --json`). One-way:
/// JSON is never read back as an event; the FlatBuffers bytes stay the record.

#include <cstdint>

#include <nlohmann/json.hpp>

#include "messages/codec.hpp"

namespace infrarsi::messages {

/// {"trial_id", "attempt", "knobs": {name: value}, "patches": [...], "timeout_s",
///  "memory_cap_bytes"}
nlohmann::json to_json(const wire::TrialSpec& spec);

/// {"trial_id", "attempt", "outcome": "ok"|"oom"|..., "steps": [{"step", "loss", "tokens",
///  "step_time_s", optional phase times and "peak_memory_bytes"}], "peak_memory_bytes",
///  "memory_source" ("unknown", "unobserved", "workload", "device_sampled", "host_rss"),
///  "host_peak_bytes", "device_sampled_peak_bytes", "wall_time_s", "device_seconds",
///  "exit_code", "detail"}
nlohmann::json to_json(const wire::TrialResult& result);

/// {"task", "seed", "tool_version"}
nlohmann::json to_json(const wire::RunCreated& run);

/// {"stage": "init"|"doctor"|..., "detail"}
nlohmann::json to_json(const wire::StageEvent& stage);

/// The payload of an event of `kind` as JSON. Kinds unknown to this build give
/// {"unknown_kind": kind, "bytes": size}; a payload that fails verification gives
/// {"error": "<why>"} (it never throws or crashes on bad bytes).
nlohmann::json event_payload_json(std::uint16_t kind, const byte_buffer& payload);

/// snake_case name of an outcome ("launch_error").
std::string outcome_name(wire::Outcome outcome);

} // namespace infrarsi::messages
