#include "actors/actors.hpp"
#include "decide/decisions.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::actors {

caf::expected<const store::run_state*> fold_state::catch_up(const store::event_log& log,
                                                            const std::string& run_id,
                                                            std::optional<std::uint64_t> upto) {
  if (!fold || fold->state().run_id != run_id || (upto && fold->next_position() > *upto)) {
    fold.emplace(run_id);
    encodings = tuning::encoding_cache{};
  }
  if (auto err = store::fold_stream(log, run_id, *fold, upto))
    return err;
  return &fold->state();
}

planner_actor::behavior_type planner(planner_actor::stateful_pointer<fold_state> self,
                                     const store::event_log* log, const tuning::task_spec* task) {
  return {
    [self, log, task](propose_atom, const std::string& run_id, std::uint32_t n,
                      std::uint64_t version) -> caf::result<std::string> {
      auto state = self->state.catch_up(*log, run_id, version);
      if (!state)
        return std::move(state.error());
      return decide::proposal_doc(*task, **state, n, &self->state.encodings);
    }};
}

} // namespace infrarsi::actors
