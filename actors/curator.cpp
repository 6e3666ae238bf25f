#include "actors/actors.hpp"

namespace infrarsi::actors {

curator_actor::behavior_type curator(curator_actor::pointer, store::experience_bank* bank) {
  return {
    [bank](seeds_atom, const std::string& hardware,
           const std::string& workload) -> caf::result<std::string> {
      nlohmann::json seeds = nlohmann::json::array();
      if (bank != nullptr) {
        if (auto err = bank->catch_up())
          return err;
        auto found = bank->find(hardware, workload);
        if (!found)
          return std::move(found.error());
        for (const auto& f : *found)
          seeds.push_back({{"config", f.value("config", nlohmann::json::object())},
                           {"speedup", f.value("speedup", 1.0)},
                           {"run", f.value("run", "")},
                           {"position", f.value("position", std::uint64_t{0})}});
      }
      return nlohmann::json{{"hardware", hardware}, {"workload", workload}, {"seeds", seeds},
                            {"serving", "propose-or-explain/1"}}
        .dump();
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
