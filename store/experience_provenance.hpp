#pragma once
/// @file experience_provenance.hpp
/// Where an imported finding came from: the ExperienceImported event that brought it into this
/// store (the stream store::imported_experience_stream), with the cluster that signed the pack
/// or sync answer ("via") and that pack's SHA-256. The bank's records leave these out on purpose
/// (its hash must not depend on the order of imports); the curator adds them to the seeds it
/// serves, so that a run's log and report say which pack each imported seed came through
/// (docs/experience.md, "Serving").

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "store/event_log.hpp"

namespace infrarsi::store {

/// Per (origin cluster id, origin position): {"via" (the signer's cluster id), "pack_sha256",
/// "imported_at" (the global log position of its ExperienceImported event)}; the first import of
/// a finding counts (the bank keeps the first too). Unreadable events are skipped.
/// Errors: the log's.
[[nodiscard]] caf::expected<std::map<std::pair<std::string, std::uint64_t>, nlohmann::json>>
import_provenance(const event_log& log);

/// Adds to each seed of `pack` (decide::experience_pack's document) that has an "origin" and was
/// imported (`provenance` has its (origin, position)) the fields "via", "pack_sha256" and
/// "imported_at". Seeds of this store's own findings are left as they are.
void add_import_provenance(
  nlohmann::json& pack,
  const std::map<std::pair<std::string, std::uint64_t>, nlohmann::json>& provenance);

} // namespace infrarsi::store
