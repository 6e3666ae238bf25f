#include "actors/actors.hpp"
#include "decide/decisions.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::actors {

verifier_actor::behavior_type verifier(verifier_actor::stateful_pointer<fold_state> self,
                                       const store::event_log* log,
                                       const tuning::task_spec* task) {
  return {
    [self, log, task](calibrate_atom, const std::string& run_id) -> caf::result<std::string> {
      auto run = self->state.catch_up(*log, run_id);
      if (!run)
        return std::move(run.error());
      return decide::calibrate_doc(*task, **run);
    },
    [self, log, task](check_atom, const std::string& run_id, std::uint64_t trial_id,
                      std::uint32_t attempt) -> caf::result<std::string> {
      auto run = self->state.catch_up(*log, run_id);
      if (!run)
        return std::move(run.error());
      auto doc = decide::check_doc(*task, **run, trial_id, attempt);
      if (!doc)
        return std::move(doc.error());
      return std::move(*doc);
    },
    [self, log](reverify_atom, const std::string& run_id,
                std::uint64_t candidate) -> caf::result<std::string> {
      auto run = self->state.catch_up(*log, run_id);
      if (!run)
        return std::move(run.error());
      auto doc = decide::reverify_doc(**run, candidate);
      if (!doc)
        return std::move(doc.error());
      return std::move(*doc);
    }};
}

} // namespace infrarsi::actors
