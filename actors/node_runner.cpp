#include <memory>

#include "actors/actors.hpp"
#include "adapters/node_bridge.hpp"

namespace infrarsi::actors {

node_runner_actor::behavior_type node_runner(node_runner_actor::pointer, zmq::context_t* ctx,
                                             std::string endpoint, std::string run_id,
                                             caf::actor stale_to,
                                             const std::atomic<bool>* cancel) {
  auto client = std::make_shared<adapters::node_client>(*ctx, endpoint, run_id, "supervisor");
  return {[client, stale_to, cancel](run_atom, const messages::trial_spec_msg& spec)
            -> caf::result<messages::trial_result_msg> {
    // Wait for the trial's own limit plus a margin for start-up and teardown.
    double limit = spec->timeout_s() > 0 ? spec->timeout_s() : 3600.0;
    auto result = client->run(
      spec, limit + 120.0,
      [stale_to](const auto& stale) {
        if (stale_to)
          caf::anon_send(stale_to, stale_atom_v, stale);
      },
      cancel);
    if (!result)
      return std::move(result.error());
    return std::move(*result);
  }};
}

} // namespace infrarsi::actors
