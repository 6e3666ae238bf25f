#pragma once
/// @file fair_share.hpp
/// How the daemon shares its node pool between the runs it serves (docs/daemon.md "Fair
/// share"): a pure function, so the pool actor, its tests and the bench use the same rule.

#include <cstdint>
#include <vector>

namespace infrarsi::decide {

/// Max-min fair shares of `slots` live node slots among runs, in the order given (the daemon
/// passes them in the order they were admitted). `limits[i]` is run i's most trials in flight
/// (0: no limit). Rule (progressive filling, Bertsekas & Gallager, "Data Networks", 6.5.2):
/// every run not yet at its limit gets one slot per round, in order, while slots remain; so the
/// shares differ by at most one between uncapped runs, earlier runs get the remainder, and slots a
/// capped run cannot use go to the others. Returns one share per run (same order); the shares sum
/// to min(slots, sum of the limits) (every limit 0 counts as unlimited). O(runs x slots) at
/// worst; runs and slots are in the thousands at most.
std::vector<std::uint32_t> fair_share(std::uint32_t slots, const std::vector<std::uint32_t>& limits);

} // namespace infrarsi::decide
