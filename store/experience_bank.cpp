#include "store/experience_bank.hpp"

#include <algorithm>

#include <rocksdb/db.h>

#include "messages/errc.hpp"

namespace infrarsi::store {

experience_bank::experience_bank(std::string dir, rocksdb::DB* db) : dir_(std::move(dir)), db_(db) {}

experience_bank::~experience_bank() {
  if (db_)
    static_cast<void>(db_->Close()); // swallowed: writes are already durable
}

caf::expected<std::unique_ptr<experience_bank>> experience_bank::open(const std::string& dir) {
  rocksdb::Options o;
  o.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  auto st = rocksdb::DB::Open(o, dir, &raw);
  if (!st.ok())
    return make_error(st.ToString().find("lock") != std::string::npos ? errc::store_locked
                                                                       : errc::io_error,
                      "experience bank '" + dir + "': " + st.ToString());
  return std::unique_ptr<experience_bank>{new experience_bank(dir, raw)};
}

caf::error experience_bank::put(const nlohmann::json& finding) {
  for (const char* key : {"hardware", "workload", "run"})
    if (!finding.contains(key) || !finding[key].is_string())
      return make_error(errc::invalid_argument,
                        std::string{"experience finding without '"} + key + "'");
  std::string k = finding["hardware"].get<std::string>() + '\0'
                  + finding["workload"].get<std::string>() + '\0'
                  + finding["run"].get<std::string>();
  rocksdb::WriteOptions wo;
  wo.sync = true;
  auto st = db_->Put(wo, k, finding.dump());
  if (!st.ok())
    return make_error(errc::io_error, "experience bank '" + dir_ + "': " + st.ToString());
  return caf::none;
}

caf::expected<std::vector<nlohmann::json>>
experience_bank::find(const std::string& hardware, const std::string& workload) const {
  std::string prefix = hardware + '\0' + workload + '\0';
  std::vector<nlohmann::json> out;
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(rocksdb::ReadOptions{})};
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    auto j = nlohmann::json::parse(it->value().ToString(), nullptr, false);
    if (!j.is_discarded())
      out.push_back(std::move(j));
  }
  if (!it->status().ok())
    return make_error(errc::io_error, "experience bank '" + dir_ + "': " + it->status().ToString());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.value("speedup", 0.0) > b.value("speedup", 0.0);
  });
  return out;
}

} // namespace infrarsi::store
