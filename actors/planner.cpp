#include "actors/actors.hpp"
#include "store/run_projection.hpp"
#include "tuning/planner.hpp"

namespace infrarsi::actors {

tuning::planner_input planner_input_for(const tuning::task_spec& task, const store::run_state& run) {
  tuning::planner_input in;
  in.task = &task;
  in.priors = &run.priors;
  in.history = run.trials;
  in.experience_seeds = run.experience_seeds;
  in.excluded_patches = run.out_of_scope_patches;
  in.noise_log_sd = run.noise ? run.noise->log_sd : 0.02;
  in.seed = run.seed;
  in.initial_design = std::min<std::size_t>(4, std::max<std::size_t>(1, task.budget.trials / 3));
  return in;
}

planner_actor::behavior_type planner(planner_actor::pointer, const store::event_log* log,
                                     const tuning::task_spec* task) {
  return {
    [log, task](propose_atom, const std::string& run_id,
                std::uint32_t n) -> caf::result<std::string> {
      auto state = store::load_run(*log, run_id);
      if (!state)
        return std::move(state.error());
      auto in = planner_input_for(*task, *state);
      tuning::seeded_local_search policy;
      auto proposals = policy.propose(in, n);
      nlohmann::json list = nlohmann::json::array();
      for (const auto& p : proposals)
        list.push_back({{"config", store::to_json(p.config)},
                        {"predicted_speedup", p.predicted_speedup},
                        {"reason", p.reason}});
      return nlohmann::json{{"policy", policy.name()}, {"proposals", list}}.dump();
    }};
}

} // namespace infrarsi::actors
