#include "actors/actors.hpp"
#include "actors/decisions.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::actors {

verifier_actor::behavior_type verifier(verifier_actor::pointer, const store::event_log* log,
                                       const tuning::task_spec* task) {
  return {
    [log, task](calibrate_atom, const std::string& run_id) -> caf::result<std::string> {
      auto run = store::load_run(*log, run_id);
      if (!run)
        return std::move(run.error());
      return calibrate_doc(*task, *run);
    },
    [log, task](check_atom, const std::string& run_id, std::uint64_t trial_id,
                std::uint32_t attempt) -> caf::result<std::string> {
      auto run = store::load_run(*log, run_id);
      if (!run)
        return std::move(run.error());
      auto doc = check_doc(*task, *run, trial_id, attempt);
      if (!doc)
        return std::move(doc.error());
      return std::move(*doc);
    },
    [log](reverify_atom, const std::string& run_id,
          std::uint64_t candidate) -> caf::result<std::string> {
      auto run = store::load_run(*log, run_id);
      if (!run)
        return std::move(run.error());
      auto doc = reverify_doc(*run, candidate);
      if (!doc)
        return std::move(doc.error());
      return std::move(*doc);
    }};
}

} // namespace infrarsi::actors
