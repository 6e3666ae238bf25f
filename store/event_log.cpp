#include "store/event_log.hpp"

#include <cctype>
#include <chrono>

namespace infrarsi::store {

caf::expected<std::vector<recorded_event>>
event_log::read_stream(std::string_view run_id, std::uint64_t from_sequence,
                       std::uint64_t max_count) const {
  std::vector<recorded_event> result;
  if (max_count == 0)
    return result;
  auto err = for_each_in_stream(run_id, from_sequence, [&](const recorded_event& ev) {
    result.push_back(ev);
    return result.size() < max_count;
  });
  if (err)
    return err;
  return result;
}

caf::error validate_run_id(std::string_view run_id) {
  auto bad = [&](const std::string& why) {
    return make_error(errc::invalid_argument, "run id '" + std::string{run_id} + "': " + why);
  };
  if (run_id.empty())
    return bad("must not be empty");
  if (run_id.size() > max_run_id_length)
    return bad("longer than " + std::to_string(max_run_id_length) + " bytes");
  if (run_id.front() == '.')
    return bad("must not start with '.'");
  for (char c : run_id) {
    auto u = static_cast<unsigned char>(c);
    if (!(std::isalnum(u) || c == '.' || c == '_' || c == '-' || c == ':'))
      return bad("character '" + std::string(1, std::isprint(u) ? c : '?')
                 + "' not allowed (use A-Z a-z 0-9 . _ - :)");
  }
  return caf::none;
}

caf::error validate_batch(std::string_view run_id, const std::vector<new_event>& events) {
  if (auto err = validate_run_id(run_id))
    return err;
  if (events.empty())
    return make_error(errc::invalid_argument,
                      "append to run '" + std::string{run_id} + "': empty batch");
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& ev = events[i];
    if (auto err = messages::verify_event_payload(ev.kind, ev.payload.data(), ev.payload.size()))
      return make_error(errc::invalid_argument,
                        "append to run '" + std::string{run_id} + "': event " + std::to_string(i)
                          + " (" + messages::event_kind_name(ev.kind)
                          + ") payload rejected: " + describe(err));
  }
  return caf::none;
}

caf::error check_expected_version(std::string_view run_id, std::uint64_t expected_version,
                                  std::uint64_t current) {
  if (expected_version == any_version || expected_version == current)
    return caf::none;
  return make_error(errc::version_conflict,
                    "run '" + std::string{run_id} + "': expected version "
                      + std::to_string(expected_version) + ", stream is at version "
                      + std::to_string(current));
}

caf::error validate_snapshot(std::string_view run_id, std::string_view format) {
  if (auto err = validate_run_id(run_id))
    return err;
  if (format.empty() || format.size() > max_snapshot_format_length)
    return make_error(errc::invalid_argument,
                      "snapshot of run '" + std::string{run_id} + "': format tag of "
                        + std::to_string(format.size()) + " bytes (must be 1.."
                        + std::to_string(max_snapshot_format_length) + ")");
  return caf::none;
}

caf::error check_snapshot_covered(std::string_view run_id, std::uint64_t covered,
                                  std::uint64_t current) {
  if (covered <= current)
    return caf::none;
  return make_error(errc::invalid_argument,
                    "snapshot of run '" + std::string{run_id} + "': covers "
                      + std::to_string(covered) + " events but the stream holds "
                      + std::to_string(current));
}

std::int64_t wall_clock_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

void projection::consume(const recorded_event& event, std::uint64_t next) {
  if (event.known_kind()) {
    apply(event);
    ++applied_;
  } else {
    ++unknown_skipped_;
  }
  next_position_ = next;
}

caf::error fold(const event_log& log, projection& proj) {
  return log.for_each(proj.next_position(), [&proj](const recorded_event& ev) {
    proj.consume(ev, ev.global_position + 1);
    return true;
  });
}

caf::error fold_stream(const event_log& log, std::string_view run_id, projection& proj,
                       std::optional<std::uint64_t> upto) {
  if (upto && proj.next_position() >= *upto)
    return caf::none;
  return log.for_each_in_stream(run_id, proj.next_position(),
                                [&proj, upto](const recorded_event& ev) {
                                  if (upto && ev.sequence >= *upto)
                                    return false;
                                  proj.consume(ev, ev.sequence + 1);
                                  return !upto || ev.sequence + 1 < *upto;
                                });
}

} // namespace infrarsi::store
