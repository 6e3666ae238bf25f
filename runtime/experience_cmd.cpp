#include "runtime/experience_cmd.hpp"

#include <filesystem>
#include <iomanip>
#include <sstream>

#include "adapters/environment.hpp"
#include "messages/errc.hpp"
#include "runtime/store_paths.hpp"
#include "store/experience_bank.hpp"
#include "store/rocksdb_event_log.hpp"

namespace infrarsi::runtime {

int run_experience(const experience_options& o, std::ostream& out, std::ostream& err) {
  const std::string cmd = "infrarsi experience " + o.action;
  if (o.action != "list" && o.action != "rebuild" && o.action != "hash") {
    err << "infrarsi experience: '" << o.action << "': expected list, rebuild or hash\n";
    return 2;
  }
  if (auto why = missing_store(o.store_dir); !why.empty()) {
    err << cmd << ": " << why << '\n';
    return 1;
  }
  namespace fs = std::filesystem;
  auto events = events_dir_of(o.store_dir);
  fs::path store = o.store_dir;
  if (fs::path{events} == store)
    store = store.parent_path();
  auto bank_dir = (store / "experience").string();
  store::rocksdb_event_log_options opts;
  opts.read_only = true;
  auto log = store::rocksdb_event_log::open(events, opts);
  if (!log) {
    err << cmd << ": " << describe(log.error()) << '\n';
    return 1;
  }
  warn_if_damaged(**log, events, cmd.c_str(), err);
  auto bank = o.action == "rebuild" ? store::rebuild_experience_bank(bank_dir, **log)
                                    : store::experience_bank::open(bank_dir, **log);
  if (!bank) {
    err << cmd << ": " << describe(bank.error())
        << (code_of(bank.error()) == errc::store_locked
                ? " (a running `infrarsi tune` or daemon holds the bank; run this when it ends)"
                : "")
        << '\n';
    return 1;
  }
  auto records = (*bank)->records();
  auto content = (*bank)->content();
  if (!records || !content) {
    err << cmd << ": " << describe(!records ? records.error() : content.error()) << '\n';
    return 1;
  }
  auto hash = adapters::sha256_hex(*content);
  if (o.action == "hash") {
    out << hash << '\n';
    return 0;
  }
  if (o.action == "rebuild") {
    out << "rebuilt " << bank_dir << " from " << events << ": " << records->size()
        << " records, log read up to position " << (*bank)->position() << "\nhash " << hash << '\n';
    return 0;
  }
  if (o.json) {
    for (const auto& r : *records)
      out << r.dump() << '\n';
    return 0;
  }
  out << "hardware          workload          speedup  95% interval      run (position)  change\n";
  for (const auto& r : *records) {
    auto num = [&](const char* k) {
      return r.contains(k) && r[k].is_number() ? r[k].get<double>() : 0.0;
    };
    std::ostringstream interval;
    interval << std::fixed << std::setprecision(3) << '[' << num("ci_low") << ", "
             << (r.contains("ci_high") && r["ci_high"].is_number()
                     ? (std::ostringstream{} << std::fixed << std::setprecision(3)
                                             << num("ci_high"))
                           .str()
                     : std::string{"inf"})
             << ']';
    out << std::left << std::setw(17) << r.value("hardware", "").substr(0, 16) << ' '
        << std::setw(17) << r.value("workload", "").substr(0, 16) << ' ' << std::fixed
        << std::setprecision(3) << std::right << std::setw(7) << num("speedup") << "x " << std::left
        << std::setw(17) << interval.str() << ' ' << r.value("run", "") << " ("
        << r.value("position", 0ull) << ")  "
        << (r.contains("change") ? r["change"].dump() : r.value("config", nlohmann::json{}).dump())
        << '\n';
  }
  out << records->size() << " records, log read up to position " << (*bank)->position() << ", hash "
      << hash << '\n';
  return 0;
}

} // namespace infrarsi::runtime
