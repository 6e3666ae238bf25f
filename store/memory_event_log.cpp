#include "store/memory_event_log.hpp"


namespace infrarsi::store {

caf::expected<append_result> memory_event_log::append(std::string_view run_id,
                                                      std::uint64_t expected_version,
                                                      const std::vector<new_event>& events) {
  if (auto err = validate_batch(run_id, events))
    return err;
  auto now = wall_clock_ns();
  std::lock_guard<std::mutex> guard{mtx_};
  auto it = streams_.find(run_id);
  std::uint64_t current = it == streams_.end() ? 0 : it->second.size();
  if (auto err = check_expected_version(run_id, expected_version, current))
    return err;
  if (it == streams_.end())
    it = streams_.emplace(std::string{run_id}, std::vector<std::uint64_t>{}).first;
  append_result result{current, events_.size(), current + events.size()};
  for (std::size_t i = 0; i < events.size(); ++i) {
    recorded_event rec;
    rec.kind = events[i].kind;
    rec.run_id = std::string{run_id};
    rec.sequence = current + i;
    rec.global_position = events_.size();
    rec.recorded_at_ns = now;
    rec.payload = events[i].payload;
    it->second.push_back(rec.global_position);
    events_.push_back(std::move(rec));
  }
  return result;
}

caf::expected<std::uint64_t> memory_event_log::version(std::string_view run_id) const {
  if (auto err = validate_run_id(run_id))
    return err;
  std::lock_guard<std::mutex> guard{mtx_};
  auto it = streams_.find(run_id);
  return it == streams_.end() ? std::uint64_t{0} : std::uint64_t{it->second.size()};
}

caf::error memory_event_log::for_each_in_stream(std::string_view run_id,
                                                std::uint64_t from_sequence,
                                                const event_visitor& visit) const {
  if (auto err = validate_run_id(run_id))
    return err;
  std::vector<recorded_event> snapshot;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto it = streams_.find(run_id);
    if (it == streams_.end())
      return caf::none;
    for (auto seq = from_sequence; seq < it->second.size(); ++seq)
      snapshot.push_back(events_[it->second[seq]]);
  }
  for (const auto& ev : snapshot)
    if (!visit(ev))
      break;
  return caf::none;
}

caf::error memory_event_log::for_each(std::uint64_t from_position,
                                      const event_visitor& visit) const {
  std::vector<recorded_event> snapshot;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (from_position < events_.size())
      snapshot.assign(events_.begin() + static_cast<std::ptrdiff_t>(from_position),
                      events_.end());
  }
  for (const auto& ev : snapshot)
    if (!visit(ev))
      break;
  return caf::none;
}

caf::expected<std::vector<run_info>> memory_event_log::list_runs() const {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<run_info> result;
  for (const auto& [run, positions] : streams_)
    result.push_back({run, positions.size(), positions.front(), positions.back()});
  return result;
}

std::uint64_t memory_event_log::head() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return events_.size();
}

caf::error memory_event_log::write_snapshot(std::string_view run_id, std::uint64_t covered,
                                            std::string_view format, std::string_view bytes) {
  if (auto err = validate_snapshot(run_id, format))
    return err;
  std::lock_guard<std::mutex> guard{mtx_};
  auto it = streams_.find(run_id);
  std::uint64_t current = it == streams_.end() ? 0 : it->second.size();
  if (auto err = check_snapshot_covered(run_id, covered, current))
    return err;
  snapshots_[std::string{run_id}] = snapshot_record{covered, std::string{format},
                                                    std::string{bytes}};
  return caf::none;
}

caf::expected<std::optional<snapshot_record>>
memory_event_log::read_snapshot(std::string_view run_id) const {
  if (auto err = validate_run_id(run_id))
    return err;
  std::lock_guard<std::mutex> guard{mtx_};
  auto it = snapshots_.find(run_id);
  if (it == snapshots_.end())
    return std::optional<snapshot_record>{};
  return std::optional<snapshot_record>{it->second};
}

} // namespace infrarsi::store
