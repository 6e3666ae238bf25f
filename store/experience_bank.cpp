#include "store/experience_bank.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "messages/errc.hpp"

namespace infrarsi::store {

namespace {

// Key layout (store/FORMAT.md, "Experience bank"):
//   "m\0format"   -> experience_index_format
//   "m\0position" -> next global log position to fold, decimal
//   "m\0skipped"  -> ExperienceRecorded events whose document was unreadable, decimal
//   "r\0" hardware "\0" workload "\0" global position (20 decimal digits) -> record JSON
const std::string format_key{"m\0format", 8};
const std::string position_key{"m\0position", 10};
const std::string skipped_key{"m\0skipped", 9};
const std::string record_prefix{"r\0", 2};

std::string record_key(const std::string& hardware, const std::string& workload,
                       std::uint64_t position) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(position));
  return record_prefix + hardware + '\0' + workload + '\0' + digits;
}

caf::error io(const std::string& dir, const rocksdb::Status& st) {
  return make_error(errc::io_error, "experience bank '" + dir + "': " + st.ToString());
}

std::uint64_t read_number(rocksdb::DB& db, const std::string& key) {
  std::string v;
  if (!db.Get(rocksdb::ReadOptions{}, key, &v).ok())
    return 0;
  return std::strtoull(v.c_str(), nullptr, 10);
}

} // namespace

experience_bank::experience_bank(std::string dir, rocksdb::DB* db, const event_log& log)
  : dir_(std::move(dir)), db_(db), log_(log) {}

experience_bank::~experience_bank() {
  if (db_)
    static_cast<void>(db_->Close()); // swallowed: writes are synced, and the index is derived
}

caf::expected<std::unique_ptr<experience_bank>> experience_bank::open(const std::string& dir,
                                                                      const event_log& log) {
  auto open_db = [&](rocksdb::DB** raw) {
    rocksdb::Options o;
    o.create_if_missing = true;
    return rocksdb::DB::Open(o, dir, raw);
  };
  rocksdb::DB* raw = nullptr;
  auto st = open_db(&raw);
  if (!st.ok())
    return make_error(st.ToString().find("lock") != std::string::npos ? errc::store_locked
                                                                      : errc::io_error,
                      "experience bank '" + dir + "': " + st.ToString());
  std::string format;
  auto got = raw->Get(rocksdb::ReadOptions{}, format_key, &format);
  if (!got.ok() || format != experience_index_format) {
    // Not an index of this format (a bank of direct puts from before issue 16, or a newer
    // format): derived data, rebuilt from the log.
    bool empty = true;
    {
      std::unique_ptr<rocksdb::Iterator> it{raw->NewIterator(rocksdb::ReadOptions{})};
      it->SeekToFirst();
      empty = !it->Valid();
    }
    if (!empty) {
      static_cast<void>(raw->Close());
      delete raw;
      raw = nullptr;
      if (auto d = rocksdb::DestroyDB(dir, rocksdb::Options{}); !d.ok())
        return io(dir, d);
      if (st = open_db(&raw); !st.ok())
        return io(dir, st);
    }
    rocksdb::WriteOptions wo;
    wo.sync = true;
    if (auto p = raw->Put(wo, format_key, experience_index_format); !p.ok()) {
      delete raw;
      return io(dir, p);
    }
  }
  std::unique_ptr<experience_bank> bank{new experience_bank(dir, raw, log)};
  if (auto err = bank->catch_up())
    return err;
  return bank;
}

caf::error experience_bank::catch_up() {
  std::lock_guard<std::mutex> guard{mutex_};
  std::uint64_t from = read_number(*db_, position_key);
  std::uint64_t skipped = read_number(*db_, skipped_key);
  std::uint64_t next = from;
  rocksdb::WriteBatch batch;
  auto err = log_.for_each(from, [&](const recorded_event& ev) {
    next = ev.global_position + 1;
    if (ev.kind != static_cast<event_kind_t>(wire::EventKind::ExperienceRecorded))
      return true;
    nlohmann::json rec;
    if (auto doc = messages::document_msg::decode(ev.payload); doc && (*doc)->json() != nullptr)
      rec = nlohmann::json::parse((*doc)->json()->str(), nullptr, false);
    if (!rec.is_object() || !rec.contains("hardware") || !rec["hardware"].is_string() ||
        !rec.contains("workload") || !rec["workload"].is_string()) {
      ++skipped;
      return true;
    }
    rec["position"] = ev.global_position;
    rec["sequence"] = ev.sequence;
    if (!rec.contains("run"))
      rec["run"] = ev.run_id;
    batch.Put(record_key(rec["hardware"].get<std::string>(), rec["workload"].get<std::string>(),
                         ev.global_position),
              rec.dump());
    return true;
  });
  if (err)
    return err;
  if (next == from)
    return caf::none;
  batch.Put(position_key, std::to_string(next));
  batch.Put(skipped_key, std::to_string(skipped));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  if (auto st = db_->Write(wo, &batch); !st.ok())
    return io(dir_, st);
  return caf::none;
}

std::uint64_t experience_bank::position() const {
  return read_number(*db_, position_key);
}

caf::expected<std::vector<nlohmann::json>>
experience_bank::find(const std::string& hardware, const std::string& workload) const {
  std::string prefix = record_prefix + hardware + '\0' + workload + '\0';
  std::vector<nlohmann::json> out;
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(rocksdb::ReadOptions{})};
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    auto j = nlohmann::json::parse(it->value().ToString(), nullptr, false);
    if (!j.is_discarded())
      out.push_back(std::move(j));
  }
  if (!it->status().ok())
    return io(dir_, it->status());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    auto speedup = [](const nlohmann::json& j) {
      return j.contains("speedup") && j["speedup"].is_number() ? j["speedup"].get<double>() : 0.0;
    };
    return speedup(a) > speedup(b);
  });
  return out;
}

caf::expected<std::vector<nlohmann::json>> experience_bank::records() const {
  std::vector<nlohmann::json> out;
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(rocksdb::ReadOptions{})};
  for (it->Seek(record_prefix); it->Valid() && it->key().starts_with(record_prefix); it->Next()) {
    auto j = nlohmann::json::parse(it->value().ToString(), nullptr, false);
    if (!j.is_discarded())
      out.push_back(std::move(j));
  }
  if (!it->status().ok())
    return io(dir_, it->status());
  return out;
}

caf::expected<std::string> experience_bank::content() const {
  std::string out;
  std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(rocksdb::ReadOptions{})};
  for (it->Seek(record_prefix); it->Valid() && it->key().starts_with(record_prefix); it->Next()) {
    out += std::to_string(it->key().size()) + ':' + it->key().ToString();
    out += std::to_string(it->value().size()) + ':' + it->value().ToString() + '\n';
  }
  if (!it->status().ok())
    return io(dir_, it->status());
  return out;
}

caf::expected<std::unique_ptr<experience_bank>> rebuild_experience_bank(const std::string& dir,
                                                                        const event_log& log) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec))
    if (auto d = rocksdb::DestroyDB(dir, rocksdb::Options{}); !d.ok())
      return io(dir, d);
  return experience_bank::open(dir, log);
}

} // namespace infrarsi::store
