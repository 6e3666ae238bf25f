#pragma once
/// @file memory_event_log.hpp
/// In-memory event_log for tests and tools that need no durability. Same semantics as
/// rocksdb_event_log (both pass tests/store/event_log_test.cpp); nothing survives the object.

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "store/event_log.hpp"

namespace infrarsi::store {

/// An event_log held in memory. Thread-safe. Visitors see a consistent snapshot taken when the
/// iteration starts and may append to the same log.
class memory_event_log final : public event_log {
public:
  memory_event_log() = default;

  [[nodiscard]] caf::expected<append_result> append(std::string_view run_id,
                                                    std::uint64_t expected_version,
                                                    const std::vector<new_event>& events) override;
  [[nodiscard]] caf::expected<std::uint64_t> version(std::string_view run_id) const override;
  [[nodiscard]] caf::error for_each_in_stream(std::string_view run_id, std::uint64_t from_sequence,
                                              const event_visitor& visit) const override;
  [[nodiscard]] caf::error for_each(std::uint64_t from_position,
                                    const event_visitor& visit) const override;
  [[nodiscard]] caf::expected<std::vector<run_info>> list_runs() const override;
  [[nodiscard]] std::uint64_t head() const override;
  [[nodiscard]] caf::error write_snapshot(std::string_view run_id, std::uint64_t covered,
                                          std::string_view format,
                                          std::string_view bytes) override;
  [[nodiscard]] caf::expected<std::optional<snapshot_record>>
  read_snapshot(std::string_view run_id) const override;

private:
  mutable std::mutex mtx_;
  std::vector<recorded_event> events_;                              // by global position
  std::map<std::string, std::vector<std::uint64_t>, std::less<>> streams_; // run -> positions
  std::map<std::string, snapshot_record, std::less<>> snapshots_;          // run -> snapshot
};

} // namespace infrarsi::store
