#pragma once
// The two event_log backends every typed store suite runs against: in memory, and RocksDB on
// disk in a fresh temporary directory (unsynced: durability has its own tests).

#include <memory>
#include <stdexcept>

#include "store/memory_event_log.hpp"
#include "store/rocksdb_event_log.hpp"
#include "test_util.hpp"

namespace infrarsi::store::test_backends {

struct memory_backend {
  std::unique_ptr<event_log> open() { return std::make_unique<memory_event_log>(); }
};

struct rocksdb_backend {
  test::temp_dir dir;
  std::unique_ptr<event_log> open() {
    rocksdb_event_log_options opts;
    opts.sync_writes = false; // durability is tested in rocksdb_event_log_test.cpp
    auto log = rocksdb_event_log::open(dir.sub("events"), opts);
    if (!log)
      throw std::runtime_error(describe(log.error()));
    return std::move(*log);
  }
};

} // namespace infrarsi::store::test_backends
