// One suite, run against every event_log implementation (typed tests): the in-memory log and the
// RocksDB log on a real directory.

#include "store/event_log.hpp"

#include <atomic>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "store/memory_event_log.hpp"
#include "store/rocksdb_event_log.hpp"
#include "test_util.hpp"
#include "log_backends.hpp"

namespace infrarsi::store {
namespace {

using test::sample_result;
using test::sample_spec;

constexpr auto k_run_created = static_cast<event_kind_t>(wire::EventKind::RunCreated);
constexpr auto k_proposed = static_cast<event_kind_t>(wire::EventKind::TrialProposed);
constexpr auto k_completed = static_cast<event_kind_t>(wire::EventKind::TrialCompleted);

using test_backends::memory_backend;
using test_backends::rocksdb_backend;

new_event proposed(std::uint64_t trial) {
  return new_event::of(wire::EventKind::TrialProposed, sample_spec(trial));
}

new_event completed(std::uint64_t trial) {
  return new_event::of(wire::EventKind::TrialCompleted, sample_result(trial));
}

new_event run_created(std::uint64_t seed) {
  wire::RunCreatedT rc;
  rc.task = "config/tasks/smoke.toml";
  rc.seed = seed;
  rc.tool_version = "0.1.0";
  return new_event::of(wire::EventKind::RunCreated, messages::run_created_msg::pack(rc));
}

std::uint64_t trial_of(const recorded_event& ev) {
  if (ev.kind == k_completed)
    return (*messages::trial_result_msg::decode(ev.payload))->trial_id();
  return (*messages::trial_spec_msg::decode(ev.payload))->trial_id();
}

template <class Backend>
class EventLogTest : public ::testing::Test {
protected:
  Backend backend;
  std::unique_ptr<event_log> log = backend.open();
};

using Backends = ::testing::Types<memory_backend, rocksdb_backend>;
struct backend_names {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, memory_backend> ? "memory" : "rocksdb";
  }
};
TYPED_TEST_SUITE(EventLogTest, Backends, backend_names);

TYPED_TEST(EventLogTest, EmptyLogHasNoRunsAndNoEvents) {
  EXPECT_EQ(this->log->head(), 0u);
  auto runs = this->log->list_runs();
  ASSERT_TRUE(runs);
  EXPECT_TRUE(runs->empty());
  EXPECT_EQ(*this->log->version("nothing"), 0u);
  auto events = this->log->read_stream("nothing");
  ASSERT_TRUE(events);
  EXPECT_TRUE(events->empty());
}

TYPED_TEST(EventLogTest, AppendAssignsContiguousSequencesFromZero) {
  auto r1 = this->log->append("run-1", 0, {run_created(7), proposed(0), proposed(1)});
  ASSERT_TRUE(r1) << describe(r1.error());
  EXPECT_EQ(r1->first_sequence, 0u);
  EXPECT_EQ(r1->first_global_position, 0u);
  EXPECT_EQ(r1->version, 3u);
  auto r2 = this->log->append("run-1", 3, {completed(0), completed(1)});
  ASSERT_TRUE(r2) << describe(r2.error());
  EXPECT_EQ(r2->first_sequence, 3u);
  EXPECT_EQ(r2->first_global_position, 3u);
  EXPECT_EQ(r2->version, 5u);
  EXPECT_EQ(*this->log->version("run-1"), 5u);
  EXPECT_EQ(this->log->head(), 5u);

  auto events = this->log->read_stream("run-1");
  ASSERT_TRUE(events) << describe(events.error());
  ASSERT_EQ(events->size(), 5u);
  std::vector<event_kind_t> kinds;
  for (std::size_t i = 0; i < events->size(); ++i) {
    EXPECT_EQ((*events)[i].sequence, i);
    EXPECT_EQ((*events)[i].global_position, i);
    EXPECT_EQ((*events)[i].run_id, "run-1");
    EXPECT_GT((*events)[i].recorded_at_ns, 0);
    kinds.push_back((*events)[i].kind);
  }
  EXPECT_EQ(kinds, (std::vector<event_kind_t>{k_run_created, k_proposed, k_proposed, k_completed,
                                              k_completed}));
  EXPECT_EQ((*events)[4].payload, sample_result(1).bytes()); // bytes come back unchanged
  EXPECT_EQ(trial_of((*events)[2]), 1u);
}

TYPED_TEST(EventLogTest, GlobalOrderInterleavesRunsInAppendOrder) {
  ASSERT_TRUE(this->log->append("a", 0, {proposed(0), proposed(1)}));
  ASSERT_TRUE(this->log->append("b", 0, {proposed(10)}));
  ASSERT_TRUE(this->log->append("a", 2, {completed(0)}));
  ASSERT_TRUE(this->log->append("b", 1, {completed(10), proposed(11)}));
  std::vector<std::pair<std::string, std::uint64_t>> seen;
  std::uint64_t expected_pos = 0;
  auto err = this->log->for_each(0, [&](const recorded_event& ev) {
    EXPECT_EQ(ev.global_position, expected_pos++);
    seen.emplace_back(ev.run_id, ev.sequence);
    return true;
  });
  ASSERT_FALSE(err) << describe(err);
  using p = std::pair<std::string, std::uint64_t>;
  EXPECT_EQ(seen, (std::vector<p>{p{"a", 0}, p{"a", 1}, p{"b", 0}, p{"a", 2}, p{"b", 1},
                                  p{"b", 2}}));
  auto runs = this->log->list_runs();
  ASSERT_TRUE(runs);
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].run_id, "a");
  EXPECT_EQ((*runs)[0].event_count, 3u);
  EXPECT_EQ((*runs)[0].first_global_position, 0u);
  EXPECT_EQ((*runs)[0].last_global_position, 3u);
  EXPECT_EQ((*runs)[1].run_id, "b");
  EXPECT_EQ((*runs)[1].event_count, 3u);
  EXPECT_EQ((*runs)[1].first_global_position, 2u);
  EXPECT_EQ((*runs)[1].last_global_position, 5u);
}

TYPED_TEST(EventLogTest, IterateFromAPositionAndStopEarly) {
  std::vector<new_event> batch;
  for (std::uint64_t i = 0; i < 10; ++i)
    batch.push_back(proposed(i));
  ASSERT_TRUE(this->log->append("r", 0, batch));
  std::vector<std::uint64_t> positions;
  ASSERT_FALSE(this->log->for_each(6, [&](const recorded_event& ev) {
    positions.push_back(ev.global_position);
    return true;
  }));
  EXPECT_EQ(positions, (std::vector<std::uint64_t>{6, 7, 8, 9}));
  positions.clear();
  ASSERT_FALSE(this->log->for_each(2, [&](const recorded_event& ev) {
    positions.push_back(ev.global_position);
    return positions.size() < 3;
  }));
  EXPECT_EQ(positions, (std::vector<std::uint64_t>{2, 3, 4}));
  positions.clear();
  ASSERT_FALSE(this->log->for_each(10, [&](const recorded_event& ev) {
    positions.push_back(ev.global_position);
    return true;
  }));
  EXPECT_TRUE(positions.empty());
}

TYPED_TEST(EventLogTest, ReadARangeOfAStream) {
  ASSERT_TRUE(this->log->append("other", 0, {proposed(100)}));
  std::vector<new_event> batch;
  for (std::uint64_t i = 0; i < 6; ++i)
    batch.push_back(proposed(i));
  ASSERT_TRUE(this->log->append("r", 0, batch));
  auto range = this->log->read_stream("r", 2, 3);
  ASSERT_TRUE(range);
  ASSERT_EQ(range->size(), 3u);
  EXPECT_EQ((*range)[0].sequence, 2u);
  EXPECT_EQ((*range)[0].global_position, 3u); // "other" took position 0
  EXPECT_EQ(trial_of((*range)[2]), 4u);
  auto tail = this->log->read_stream("r", 5);
  ASSERT_TRUE(tail);
  ASSERT_EQ(tail->size(), 1u);
  EXPECT_EQ(tail->front().sequence, 5u);
  EXPECT_TRUE(this->log->read_stream("r", 6)->empty());
}

TYPED_TEST(EventLogTest, StaleWriterGetsAConflictAndNothingOfItIsStored) {
  ASSERT_TRUE(this->log->append("r", 0, {proposed(1)}));
  auto stale = this->log->append("r", 0, {proposed(2), proposed(3)});
  ASSERT_FALSE(stale);
  EXPECT_EQ(code_of(stale.error()), errc::version_conflict);
  EXPECT_NE(describe(stale.error()).find("expected version 0, stream is at version 1"),
            std::string::npos)
    << describe(stale.error());
  auto ahead = this->log->append("r", 5, {proposed(2)});
  ASSERT_FALSE(ahead);
  EXPECT_EQ(code_of(ahead.error()), errc::version_conflict);
  EXPECT_EQ(*this->log->version("r"), 1u);
  EXPECT_EQ(this->log->head(), 1u);
  auto events = this->log->read_stream("r");
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(trial_of(events->front()), 1u);
}

TYPED_TEST(EventLogTest, AnyVersionAppendsWithoutTheCheck) {
  ASSERT_TRUE(this->log->append("r", any_version, {proposed(1)}));
  auto r = this->log->append("r", any_version, {proposed(2)});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first_sequence, 1u);
  EXPECT_EQ(r->version, 2u);
}

// Two writers race with the same expected version: exactly one wins, the loser's events are
// nowhere in the log. Repeated to give the race many chances.
TYPED_TEST(EventLogTest, TwoWritersWithTheSameExpectedVersionExactlyOneWins) {
  constexpr int rounds = 40;
  for (int round = 0; round < rounds; ++round) {
    auto run = "race-" + std::to_string(round);
    std::atomic<int> ready{0};
    std::atomic<int> wins{0};
    std::atomic<int> conflicts{0};
    auto writer = [&](std::uint64_t base) {
      std::vector<new_event> batch{proposed(base), proposed(base + 1), proposed(base + 2)};
      ++ready; // start both appends as close together as possible
      while (ready.load() < 2)
        std::this_thread::yield();
      auto r = this->log->append(run, 0, batch);
      if (r)
        ++wins;
      else if (code_of(r.error()) == errc::version_conflict)
        ++conflicts;
    };
    std::thread a{writer, 1000};
    std::thread b{writer, 2000};
    a.join();
    b.join();
    ASSERT_EQ(wins.load(), 1) << "round " << round;
    ASSERT_EQ(conflicts.load(), 1) << "round " << round;
    auto events = this->log->read_stream(run);
    ASSERT_TRUE(events);
    ASSERT_EQ(events->size(), 3u);
    auto base = trial_of((*events)[0]);
    ASSERT_TRUE(base == 1000 || base == 2000);
    for (std::uint64_t i = 0; i < 3; ++i)
      EXPECT_EQ(trial_of((*events)[i]), base + i); // all three from the same writer
  }
  EXPECT_EQ(this->log->head(), std::uint64_t{3} * rounds);
}

TYPED_TEST(EventLogTest, ABatchWithOneBadPayloadIsRejectedWhole) {
  auto garbage = messages::byte_buffer::copy_of("definitely not a TrialResult");
  auto r = this->log->append("r", 0, {proposed(1), new_event{k_completed, garbage}, proposed(2)});
  ASSERT_FALSE(r);
  EXPECT_EQ(code_of(r.error()), errc::invalid_argument);
  EXPECT_NE(describe(r.error()).find("event 1 (trial_completed) payload rejected"),
            std::string::npos)
    << describe(r.error());
  EXPECT_EQ(this->log->head(), 0u);
  EXPECT_EQ(*this->log->version("r"), 0u);
  EXPECT_TRUE(this->log->list_runs()->empty());
}

TYPED_TEST(EventLogTest, BadRunIdsAndEmptyBatchesAreRejected) {
  for (std::string bad : {std::string{}, std::string{"has space"}, std::string{"nul\0byte", 8},
                          std::string(200, 'x'), std::string{".hidden"}, std::string{"a/b"}}) {
    auto r = this->log->append(bad, 0, {proposed(1)});
    ASSERT_FALSE(r) << "accepted run id '" << bad << "'";
    EXPECT_EQ(code_of(r.error()), errc::invalid_argument);
  }
  auto empty = this->log->append("r", 0, {});
  ASSERT_FALSE(empty);
  EXPECT_NE(describe(empty.error()).find("empty batch"), std::string::npos);
  EXPECT_EQ(this->log->head(), 0u);
}

// A projection that counts what it was given (used to check fold()).
struct counting_projection : projection {
  std::map<event_kind_t, int> by_kind;
  std::vector<std::uint64_t> trials;
  void apply(const recorded_event& ev) override {
    ++by_kind[ev.kind];
    if (ev.kind == k_proposed || ev.kind == k_completed)
      trials.push_back(trial_of(ev));
  }
};

TYPED_TEST(EventLogTest, UnknownEventKindIsSkippedAndCounted) {
  constexpr event_kind_t from_the_future = 4242;
  ASSERT_FALSE(messages::is_known_event_kind(from_the_future));
  ASSERT_TRUE(this->log->append(
    "r", 0,
    {run_created(1), new_event{from_the_future, messages::byte_buffer::copy_of("v2 payload")},
     proposed(5)}));
  counting_projection all;
  ASSERT_FALSE(fold(*this->log, all));
  EXPECT_EQ(all.events_applied(), 2u);
  EXPECT_EQ(all.unknown_kinds_skipped(), 1u);
  EXPECT_EQ(all.next_position(), 3u);
  EXPECT_EQ(all.by_kind.count(from_the_future), 0u);
  EXPECT_EQ(all.trials, (std::vector<std::uint64_t>{5}));

  // The raw event is still readable (nothing lost), its kind preserved.
  auto events = this->log->read_stream("r");
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[1].kind, from_the_future);
  EXPECT_FALSE((*events)[1].known_kind());
  EXPECT_EQ((*events)[1].payload.view(), "v2 payload");

  // Folds resume from where they stopped.
  ASSERT_TRUE(this->log->append("other", 0, {proposed(6)}));
  ASSERT_TRUE(this->log->append("r", 3, {completed(5), new_event{from_the_future, {}}}));
  ASSERT_FALSE(fold(*this->log, all));
  EXPECT_EQ(all.next_position(), 6u);
  EXPECT_EQ(all.events_applied(), 4u);
  EXPECT_EQ(all.unknown_kinds_skipped(), 2u);
  EXPECT_EQ(all.trials, (std::vector<std::uint64_t>{5, 6, 5}));

  counting_projection stream;
  ASSERT_FALSE(fold_stream(*this->log, "r", stream));
  EXPECT_EQ(stream.next_position(), 5u); // stream sequence, not global position
  EXPECT_EQ(stream.events_applied(), 3u);
  EXPECT_EQ(stream.unknown_kinds_skipped(), 2u);
}

TYPED_TEST(EventLogTest, LargePayloadsRoundTrip) {
  auto big = sample_result(1, 20000); // ~1.5 MB
  ASSERT_TRUE(this->log->append("r", 0, {new_event::of(wire::EventKind::TrialCompleted, big)}));
  auto events = this->log->read_stream("r");
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->front().payload, big.bytes());
}

} // namespace
} // namespace infrarsi::store
