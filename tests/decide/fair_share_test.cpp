// decide/fair_share: how the daemon shares its node slots between runs.

#include <gtest/gtest.h>

#include <numeric>

#include "decide/fair_share.hpp"

namespace infrarsi::decide {
namespace {

std::uint32_t sum(const std::vector<std::uint32_t>& v) {
  return std::accumulate(v.begin(), v.end(), 0u);
}

TEST(FairShare, EqualSplitWithTheRemainderToTheEarliestRuns) {
  EXPECT_EQ(fair_share(7, {0, 0, 0}), (std::vector<std::uint32_t>{3, 2, 2}));
  EXPECT_EQ(fair_share(6, {0, 0, 0}), (std::vector<std::uint32_t>{2, 2, 2}));
  EXPECT_EQ(fair_share(1000, {0, 0}), (std::vector<std::uint32_t>{500, 500}));
}

TEST(FairShare, ACappedRunLeavesItsSlotsToTheOthers) {
  EXPECT_EQ(fair_share(10, {2, 0, 0}), (std::vector<std::uint32_t>{2, 4, 4}));
  EXPECT_EQ(fair_share(10, {2, 3, 0}), (std::vector<std::uint32_t>{2, 3, 5}));
  EXPECT_EQ(fair_share(9, {1, 1, 1}), (std::vector<std::uint32_t>{1, 1, 1}))
    << "slots nobody may use stay unused";
}

TEST(FairShare, FewerSlotsThanRunsGoOneEachInOrder) {
  EXPECT_EQ(fair_share(2, {0, 0, 0}), (std::vector<std::uint32_t>{1, 1, 0}));
  EXPECT_EQ(fair_share(0, {0, 0}), (std::vector<std::uint32_t>{0, 0}));
  EXPECT_TRUE(fair_share(5, {}).empty());
}

TEST(FairShare, SharesSumToWhatCanBeUsedAndUncappedOnesDifferByAtMostOne) {
  for (std::uint32_t slots = 0; slots < 60; ++slots)
    for (const auto& limits : std::vector<std::vector<std::uint32_t>>{
           {0}, {0, 0}, {3, 0, 0}, {1, 2, 3, 0}, {5, 5}, {0, 7, 0, 2, 0}}) {
      auto s = fair_share(slots, limits);
      ASSERT_EQ(s.size(), limits.size());
      std::uint32_t usable = 0;
      bool unlimited = false;
      for (auto l : limits) {
        usable += l;
        unlimited = unlimited || l == 0;
      }
      EXPECT_EQ(sum(s), unlimited ? slots : std::min(slots, usable)) << slots;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (limits[i] != 0) {
          EXPECT_LE(s[i], limits[i]);
        }
        for (std::size_t j = 0; j < s.size(); ++j) {
          if (limits[i] == 0 && limits[j] == 0) {
            EXPECT_LE(s[i], s[j] + 1) << "run " << i << " vs " << j << " at " << slots;
          }
        }
      }
    }
}

} // namespace
} // namespace infrarsi::decide
