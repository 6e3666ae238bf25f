#include "store/experience_bank.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "messages/errc.hpp"

namespace infrarsi::store {

namespace {

// Key layout (store/FORMAT.md, "Experience bank"):
//   "m\0format"   -> experience_index_format
//   "m\0cluster"  -> the store's own cluster id the index was folded under
//   "m\0position" -> next global log position to fold, decimal
//   "m\0skipped"  -> ExperienceRecorded/ExperienceImported events whose document was unreadable
//   "r\0" hardware "\0" workload "\0" origin "\0" origin position (20 decimal digits) -> record
//   "o\0" origin "\0" origin position (20 decimal digits) -> the "r" key of that finding
const std::string format_key{"m\0format", 8};
const std::string cluster_key{"m\0cluster", 9};
const std::string position_key{"m\0position", 10};
const std::string skipped_key{"m\0skipped", 9};
const std::string record_prefix{"r\0", 2};
const std::string origin_prefix{"o\0", 2};

std::string record_key(const std::string& hardware, const std::string& workload,
                       const std::string& origin, std::uint64_t position) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(position));
  return record_prefix + hardware + '\0' + workload + '\0' + origin + '\0' + digits;
}

/// The origin index: "o\0" origin "\0" origin position (20 digits) -> the record's key.
std::string origin_key(const std::string& origin, std::uint64_t position) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(position));
  return origin_prefix + origin + '\0' + digits;
}

/// A key part: a non-empty string without NUL (the key separator).
bool key_part(const nlohmann::json& j, const char* field) {
  if (!j.contains(field) || !j[field].is_string())
    return false;
  const auto& s = j[field].get_ref<const std::string&>();
  return !s.empty() && s.find('\0') == std::string::npos;
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

experience_bank::experience_bank(std::string dir, rocksdb::DB* db, const event_log& log,
                                 std::string cluster_id)
  : dir_(std::move(dir)), cluster_id_(std::move(cluster_id)), db_(db), log_(log) {}

experience_bank::~experience_bank() {
  if (db_)
    static_cast<void>(db_->Close()); // swallowed: writes are synced, and the index is derived
}

caf::expected<std::unique_ptr<experience_bank>>
experience_bank::open(const std::string& dir, const event_log& log, const std::string& cluster_id) {
  if (cluster_id.empty() || cluster_id.find('\0') != std::string::npos)
    return make_error(errc::invalid_argument,
                      "experience bank '" + dir + "': the cluster id must be a non-empty string "
                                                  "without NUL bytes");
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
  std::string folded_for;
  auto got = raw->Get(rocksdb::ReadOptions{}, format_key, &format);
  auto got_cluster = raw->Get(rocksdb::ReadOptions{}, cluster_key, &folded_for);
  if (!got.ok() || format != experience_index_format || !got_cluster.ok()
      || folded_for != cluster_id) {
    // Not an index of this format (a bank of direct puts from before issue 16, one keyed by
    // local positions, or a newer format) or one folded under another cluster id: derived
    // data, rebuilt from the log.
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
    rocksdb::WriteBatch meta;
    meta.Put(format_key, experience_index_format);
    meta.Put(cluster_key, cluster_id);
    if (auto p = raw->Write(wo, &meta); !p.ok()) {
      delete raw;
      return io(dir, p);
    }
  }
  std::unique_ptr<experience_bank> bank{new experience_bank(dir, raw, log, cluster_id)};
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
  std::set<std::string> in_batch; // imported keys put by this catch-up (not yet in the index)
  auto finding_of = [](const recorded_event& ev) {
    nlohmann::json j;
    if (auto doc = messages::document_msg::decode(ev.payload); doc && (*doc)->json() != nullptr)
      j = nlohmann::json::parse((*doc)->json()->str(), nullptr, false);
    return j;
  };
  auto err = log_.for_each(from, [&](const recorded_event& ev) {
    next = ev.global_position + 1;
    if (ev.kind == static_cast<event_kind_t>(wire::EventKind::ExperienceRecorded)) {
      auto rec = finding_of(ev);
      if (!rec.is_object() || !key_part(rec, "hardware") || !key_part(rec, "workload")) {
        ++skipped;
        return true;
      }
      rec["position"] = ev.global_position;
      rec["sequence"] = ev.sequence;
      rec["origin"] = cluster_id_;
      rec["origin_position"] = ev.global_position;
      rec["imported"] = false;
      if (!rec.contains("run"))
        rec["run"] = ev.run_id;
      auto key = record_key(rec["hardware"].get<std::string>(),
                            rec["workload"].get<std::string>(), cluster_id_, ev.global_position);
      batch.Put(key, rec.dump());
      batch.Put(origin_key(cluster_id_, ev.global_position), key);
      return true;
    }
    if (ev.kind != static_cast<event_kind_t>(wire::EventKind::ExperienceImported))
      return true;
    auto doc = finding_of(ev);
    if (!doc.is_object() || !key_part(doc, "origin") || !doc.contains("origin_position")
        || !doc["origin_position"].is_number_unsigned() || !doc.contains("finding")
        || !doc["finding"].is_object() || !key_part(doc["finding"], "hardware")
        || !key_part(doc["finding"], "workload")) {
      ++skipped;
      return true;
    }
    auto origin = doc["origin"].get<std::string>();
    if (origin == cluster_id_)
      return true; // this store's own finding came back through a peer: it has it already
    auto origin_position = doc["origin_position"].get<std::uint64_t>();
    auto rec = std::move(doc["finding"]);
    auto key = record_key(rec["hardware"].get<std::string>(), rec["workload"].get<std::string>(),
                          origin, origin_position);
    auto by_origin = origin_key(origin, origin_position);
    std::string existing;
    if (in_batch.count(by_origin) > 0
        || db_->Get(rocksdb::ReadOptions{}, by_origin, &existing).ok())
      return true; // one record per (origin, origin position): the first in log order wins
    rec["origin"] = origin;
    rec["origin_position"] = origin_position;
    rec["imported"] = true;
    for (const char* local : {"position", "sequence"})
      rec.erase(local); // a peer's local fields are not part of a finding
    batch.Put(key, rec.dump());
    batch.Put(by_origin, key);
    in_batch.insert(by_origin);
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

caf::expected<std::optional<nlohmann::json>>
experience_bank::lookup(const std::string& origin, std::uint64_t origin_position) const {
  std::string key;
  auto st = db_->Get(rocksdb::ReadOptions{}, origin_key(origin, origin_position), &key);
  if (st.IsNotFound())
    return std::optional<nlohmann::json>{};
  std::string value;
  if (st.ok())
    st = db_->Get(rocksdb::ReadOptions{}, key, &value);
  if (!st.ok())
    return io(dir_, st);
  auto j = nlohmann::json::parse(value, nullptr, false);
  if (j.is_discarded())
    return make_error(errc::corrupt_data,
                      "experience bank '" + dir_ + "': the record of origin " + origin
                        + " position " + std::to_string(origin_position) + " is not JSON");
  return std::optional<nlohmann::json>{std::move(j)};
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

caf::expected<std::unique_ptr<experience_bank>>
rebuild_experience_bank(const std::string& dir, const event_log& log,
                        const std::string& cluster_id) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec))
    if (auto d = rocksdb::DestroyDB(dir, rocksdb::Options{}); !d.ok())
      return io(dir, d);
  return experience_bank::open(dir, log, cluster_id);
}

nlohmann::json experience_finding_of(const nlohmann::json& record) {
  auto out = record;
  if (out.is_object())
    for (const char* field : experience_provenance_fields)
      out.erase(field);
  return out;
}

} // namespace infrarsi::store
