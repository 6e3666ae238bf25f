#include "actors/actors.hpp"
#include "actors/decisions.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::actors {

planner_actor::behavior_type planner(planner_actor::pointer, const store::event_log* log,
                                     const tuning::task_spec* task) {
  return {
    [log, task](propose_atom, const std::string& run_id,
                std::uint32_t n) -> caf::result<std::string> {
      auto state = store::load_run(*log, run_id);
      if (!state)
        return std::move(state.error());
      return proposal_doc(*task, *state, n);
    }};
}

} // namespace infrarsi::actors
