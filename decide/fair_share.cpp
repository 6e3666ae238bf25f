#include "decide/fair_share.hpp"

#include <algorithm>

namespace infrarsi::decide {

std::vector<std::uint32_t> fair_share(std::uint32_t slots,
                                      const std::vector<std::uint32_t>& limits) {
  std::vector<std::uint32_t> share(limits.size(), 0);
  if (limits.empty())
    return share;
  auto open = [&](std::size_t i) { return limits[i] == 0 || share[i] < limits[i]; };
  // Whole rounds first (each open run gets the same number), then one slot each in order.
  while (slots > 0) {
    std::size_t open_runs = 0;
    std::uint32_t room = UINT32_MAX; // slots every open run can still take
    for (std::size_t i = 0; i < limits.size(); ++i)
      if (open(i)) {
        ++open_runs;
        if (limits[i] != 0)
          room = std::min(room, limits[i] - share[i]);
      }
    if (open_runs == 0)
      break;
    auto per_run = static_cast<std::uint32_t>(slots / open_runs);
    if (per_run == 0) { // fewer slots than open runs: one each, in order
      for (std::size_t i = 0; i < limits.size() && slots > 0; ++i)
        if (open(i)) {
          ++share[i];
          --slots;
        }
      break;
    }
    per_run = std::min(per_run, room);
    for (std::size_t i = 0; i < limits.size(); ++i)
      if (open(i)) {
        share[i] += per_run;
        slots -= per_run;
      }
  }
  return share;
}

} // namespace infrarsi::decide
