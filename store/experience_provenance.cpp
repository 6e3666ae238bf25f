#include "store/experience_provenance.hpp"

#include "messages/codec.hpp"
#include "store/experience_bank.hpp"

namespace infrarsi::store {

caf::expected<std::map<std::pair<std::string, std::uint64_t>, nlohmann::json>>
import_provenance(const event_log& log) {
  std::map<std::pair<std::string, std::uint64_t>, nlohmann::json> out;
  auto err = log.for_each_in_stream(imported_experience_stream, 0, [&](const recorded_event& ev) {
    if (ev.kind != static_cast<event_kind_t>(wire::EventKind::ExperienceImported))
      return true;
    auto doc = messages::document_msg::decode(ev.payload);
    if (!doc || (*doc)->json() == nullptr)
      return true;
    auto j = nlohmann::json::parse((*doc)->json()->str(), nullptr, false);
    if (!j.is_object() || !j.contains("origin") || !j["origin"].is_string()
        || !j.contains("origin_position") || !j["origin_position"].is_number_unsigned())
      return true;
    std::pair<std::string, std::uint64_t> key{j["origin"].get<std::string>(),
                                              j["origin_position"].get<std::uint64_t>()};
    if (out.count(key) == 0)
      out[key] = {{"via", j.value("via", "")},
                  {"pack_sha256", j.value("pack_sha256", "")},
                  {"imported_at", ev.global_position}};
    return true;
  });
  if (err)
    return err;
  return out;
}

void add_import_provenance(
  nlohmann::json& pack,
  const std::map<std::pair<std::string, std::uint64_t>, nlohmann::json>& provenance) {
  if (!pack.is_object() || !pack.contains("seeds") || !pack["seeds"].is_array())
    return;
  for (auto& seed : pack["seeds"]) {
    if (!seed.contains("origin") || !seed["origin"].is_string() || !seed.contains("position")
        || !seed["position"].is_number_unsigned())
      continue;
    auto it = provenance.find({seed["origin"].get<std::string>(),
                               seed["position"].get<std::uint64_t>()});
    if (it == provenance.end())
      continue;
    for (const auto& [k, v] : it->second.items())
      seed[k] = v;
  }
}

} // namespace infrarsi::store
