#pragma once
/// @file experience_bank.hpp
/// The experience bank: verified findings (a configuration and its verified speedup), keyed by a
/// hardware fingerprint and a workload signature, in their own RocksDB database (one writer:
/// the experience-curator). Key: hardware \0 workload \0 run id; value: the finding's JSON.

#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

namespace rocksdb {
class DB;
}

namespace infrarsi::store {

class experience_bank {
public:
  /// Opens (creating if missing) the bank in `dir`. Errors: errc::store_locked, errc::io_error.
  [[nodiscard]] static caf::expected<std::unique_ptr<experience_bank>> open(const std::string& dir);
  ~experience_bank();

  /// Stores a finding; `finding` must hold "hardware", "workload" and "run" strings.
  /// Errors: errc::invalid_argument (missing keys), errc::io_error.
  [[nodiscard]] caf::error put(const nlohmann::json& finding);

  /// Findings for this hardware and workload, best verified speedup first (ties: run id).
  [[nodiscard]] caf::expected<std::vector<nlohmann::json>> find(const std::string& hardware,
                                                                const std::string& workload) const;

private:
  experience_bank(std::string dir, rocksdb::DB* db);
  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
};

} // namespace infrarsi::store
