#include "actors/actors.hpp"

namespace infrarsi::actors {

curator_actor::behavior_type curator(curator_actor::pointer, store::experience_bank* bank) {
  return {
    [bank](seeds_atom, const std::string& request_text) -> caf::result<std::string> {
      auto request = nlohmann::json::parse(request_text, nullptr, false);
      if (!request.is_object())
        return caf::make_error(caf::sec::invalid_argument, "experience request is not JSON");
      decide::serving_request req;
      req.hardware_identity = request.value("hardware_identity", nlohmann::json::object());
      req.workload_identity = request.value("workload_identity", nlohmann::json::object());
      req.hardware_fingerprint = request.value("hardware", "");
      req.workload_signature = request.value("workload", "");
      req.mode = decide::parse_experience_mode(request.value("mode", "filtered"))
                   .value_or(decide::experience_mode::filtered);
      std::vector<nlohmann::json> records;
      if (bank != nullptr && req.mode != decide::experience_mode::none) {
        if (auto err = bank->catch_up())
          return err;
        auto all = bank->records();
        if (!all)
          return std::move(all.error());
        records = std::move(*all);
      }
      return decide::experience_pack(records, req).dump();
    },
    [bank](ingest_atom, const std::string&) -> caf::result<bool> {
      // The finding is an ExperienceRecorded event already in the log: fold it into the index.
      if (bank == nullptr)
        return false;
      if (auto err = bank->catch_up())
        return err;
      return true;
    }};
}

} // namespace infrarsi::actors
