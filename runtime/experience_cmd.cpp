#include "runtime/experience_cmd.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <unistd.h>

#include "adapters/cluster_identity.hpp"
#include "adapters/curve.hpp"
#include "adapters/environment.hpp"
#include "messages/errc.hpp"
#include "messages/experience_pack.hpp"
#include "runtime/store_paths.hpp"
#include "store/experience_bank.hpp"
#include "store/rocksdb_event_log.hpp"

namespace infrarsi::runtime {

namespace {

namespace fs = std::filesystem;

/// Where a store's parts are: `dir` may be the store or its events/ directory.
struct store_layout {
  std::string events;
  std::string root;
  std::string bank;
  std::string key_file;
  std::string trust_file;
};

store_layout layout_of(const std::string& dir) {
  store_layout l;
  l.events = events_dir_of(dir);
  fs::path store = dir;
  if (fs::path{l.events} == store)
    store = store.parent_path();
  l.root = store.string();
  l.bank = (store / "experience").string();
  l.key_file = adapters::cluster_key_path(l.root);
  l.trust_file = (store / "trust.toml").string();
  return l;
}

std::string locked_hint(const caf::error& e) {
  return code_of(e) == errc::store_locked
           ? " (a running `infrarsi tune` or daemon holds the store; run this when it ends)"
           : "";
}

std::string short_id(const std::string& id) {
  return id.substr(0, 12);
}

/// The bank's hash line and counts, as `list`, `rebuild` and `import` end.
struct bank_summary {
  std::size_t records = 0;
  std::uint64_t position = 0;
  std::string hash;
};

caf::expected<bank_summary> summary_of(const store::experience_bank& bank) {
  auto records = bank.records();
  if (!records)
    return std::move(records.error());
  auto content = bank.content();
  if (!content)
    return std::move(content.error());
  return bank_summary{records->size(), bank.position(), adapters::sha256_hex(*content)};
}

void print_table(const std::vector<nlohmann::json>& records, const std::string& own,
                 std::ostream& out) {
  out << "hardware          workload          speedup  95% interval      provenance"
         "                              change\n";
  // (hardware, workload) -> (local, imported)
  std::map<std::pair<std::string, std::string>, std::pair<std::size_t, std::size_t>> counts;
  for (const auto& r : records) {
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
    bool imported = r.value("imported", false);
    std::ostringstream provenance;
    if (imported)
      provenance << "imported from " << short_id(r.value("origin", "")) << " ("
                 << r.value("origin_position", std::uint64_t{0}) << ")";
    else
      provenance << "local " << r.value("run", "") << " (" << r.value("position", std::uint64_t{0})
                 << ")";
    // The GPU and model of findings filed with the structured identities (docs/experience.md,
    // "Identity"); the fingerprint and signature of older ones.
    auto hardware = r.contains("hardware_identity") && r["hardware_identity"].is_object()
                      ? r["hardware_identity"].value("gpu", r.value("hardware", ""))
                      : r.value("hardware", "");
    auto workload = r.contains("workload_identity") && r["workload_identity"].is_object()
                      ? r["workload_identity"].value("model", r.value("workload", ""))
                      : r.value("workload", "");
    out << std::left << std::setw(17) << hardware.substr(0, 16) << ' '
        << std::setw(17) << workload.substr(0, 16) << ' ' << std::fixed
        << std::setprecision(3) << std::right << std::setw(7) << num("speedup") << "x "
        << std::left << std::setw(17) << interval.str() << ' ' << std::setw(39)
        << provenance.str() << ' '
        << (r.contains("change") ? r["change"].dump() : r.value("config", nlohmann::json{}).dump())
        << '\n';
    auto& c = counts[{hardware, workload}];
    ++(imported ? c.second : c.first);
  }
  for (const auto& [hw_wl, c] : counts)
    out << "hardware " << hw_wl.first << ", workload " << hw_wl.second << ": "
        << c.first + c.second << " records (" << c.first << " local, " << c.second
        << " imported)\n";
  out << "cluster " << own << " (this store)\n";
}

/// A temporary directory under $TMPDIR (or /tmp), removed with its content on destruction;
/// `path` is empty when none could be made.
struct scratch_dir {
  std::string path;
  scratch_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string{base != nullptr ? base : "/tmp"} + "/infrarsi-export-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr)
      path = tmpl;
  }
  ~scratch_dir() {
    std::error_code ec;
    if (!path.empty())
      fs::remove_all(path, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
};

/// Reads a whole file of at most `limit` bytes. Errors name the file.
caf::expected<std::string> read_file(const std::string& path, std::size_t limit) {
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (!fs::exists(st))
    return make_error(errc::not_found, "no such file");
  if (!fs::is_regular_file(st))
    return make_error(errc::invalid_argument, "not a regular file");
  auto size = fs::file_size(path, ec);
  if (!ec && size > limit)
    return make_error(errc::corrupt_data, std::to_string(size) + " bytes, more than the limit of "
                                            + std::to_string(limit) + " bytes for a pack");
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return make_error(errc::io_error, "cannot be read");
  std::string bytes{std::istreambuf_iterator<char>{in}, {}};
  if (in.bad())
    return make_error(errc::io_error, "read error");
  return bytes;
}

int run_export(const experience_options& o, const store::experience_bank& bank,
               const adapters::cluster_identity& me, std::ostream& out, std::ostream& err) {
  const std::string cmd = "infrarsi experience export";
  auto records = bank.records();
  if (!records) {
    err << cmd << ": " << describe(records.error()) << '\n';
    return 1;
  }
  messages::experience_pack_body body;
  body.cluster_id = me.cluster_id;
  body.public_key = me.public_key;
  body.since = o.since;
  std::size_t local = 0;
  std::size_t imported = 0;
  for (const auto& r : *records) {
    bool is_imported = r.value("imported", false);
    auto origin = r.value("origin", "");
    auto position = r.value("origin_position", std::uint64_t{0});
    if (!is_imported && position < o.since)
      continue;
    ++(is_imported ? imported : local);
    body.findings.push_back({origin, position, store::experience_finding_of(r).dump()});
  }
  std::sort(body.findings.begin(), body.findings.end(), [](const auto& a, const auto& b) {
    return std::tie(a.origin, a.origin_position) < std::tie(b.origin, b.origin_position);
  });
  auto signed_bytes = messages::encode_pack_body(body);
  auto pack = messages::encode_pack(signed_bytes, me.sign(signed_bytes));
  std::ostringstream what;
  what << "exported " << body.findings.size() << " findings (" << local
       << " of this cluster from position " << o.since << ", " << imported
       << " imported) signed by cluster " << me.cluster_id << " to ";
  if (o.out_file.empty()) {
    out.write(pack.data(), static_cast<std::streamsize>(pack.size()));
    out.flush();
    err << what.str() << "stdout (" << pack.size() << " bytes)\n";
    return out ? 0 : 1;
  }
  if (auto bad = adapters::write_file_atomically(o.out_file, pack, 0644, true)) {
    err << cmd << ": " << describe(bad) << '\n';
    return 1;
  }
  out << what.str() << o.out_file << " (" << pack.size() << " bytes)\n";
  return 0;
}

/// The store's cluster identity, created on first use; with `make_store`, the store directory
/// is created first (a path that exists and is not a directory is an error). Errors are printed
/// after `cmd` and give nullopt.
std::optional<adapters::cluster_identity> store_identity(const store_layout& where,
                                                         bool make_store, const std::string& cmd,
                                                         std::ostream& err) {
  if (make_store) {
    std::error_code ec;
    if (fs::exists(where.root, ec) && !fs::is_directory(where.root, ec)) {
      err << cmd << ": store '" << where.root << "' is not a directory\n";
      return std::nullopt;
    }
    fs::create_directories(where.root, ec);
  }
  auto me = adapters::load_cluster_identity(where.key_file, true);
  if (!me) {
    err << cmd << ": " << describe(me.error()) << '\n';
    return std::nullopt;
  }
  return std::move(*me);
}

/// A refusal of `import`, naming the pack file.
int refuse(const experience_options& o, const std::string& why, std::ostream& err) {
  err << "infrarsi experience import: " << o.pack_file << ": refused: " << why
      << "; nothing imported\n";
  return 1;
}

int run_import(const experience_options& o, const store_layout& where, std::ostream& out,
               std::ostream& err) {
  const std::string cmd = "infrarsi experience import";
  // The store's own cluster id, when it has one already (a refused pack creates nothing).
  std::string own_id;
  if (auto existing = adapters::load_cluster_identity(where.key_file, false))
    own_id = existing->cluster_id;
  else if (code_of(existing.error()) != errc::not_found) {
    err << cmd << ": " << describe(existing.error()) << '\n';
    return 1;
  }
  // 1. The pack: structure, signature, signer, findings. Nothing is opened for writing before
  //    the pack is accepted.
  const messages::verify_limits limits;
  auto file = read_file(o.pack_file, limits.max_bytes);
  if (!file)
    return refuse(o, describe(file.error()), err);
  auto pack = messages::open_pack(*file, limits);
  if (!pack)
    return refuse(o, describe(pack.error()), err);
  const auto& body = pack->decoded;
  if (!adapters::verify_signature(body.public_key, pack->body, pack->signature))
    return refuse(o,
                  "the signature does not verify: the pack was changed after it was signed "
                  "(tampered or damaged), or was not signed by the key it names (public key "
                    + adapters::to_hex(body.public_key) + ")",
                  err);
  const auto signer = adapters::cluster_id_of(body.public_key);
  if (body.cluster_id != signer)
    return refuse(o, "the pack names cluster id '" + body.cluster_id
                       + "' but its public key's cluster id is " + signer,
                  err);
  std::string signer_name;
  if (signer == own_id) {
    signer_name = "this cluster";
  } else {
    std::string trust_path = o.trust_file;
    bool explicit_trust = !trust_path.empty();
    std::error_code ec;
    if (!explicit_trust)
      trust_path = where.trust_file;
    std::vector<adapters::trusted_cluster> trusted;
    if (explicit_trust || fs::exists(trust_path, ec)) {
      auto list = adapters::load_trust_list(trust_path);
      if (!list) {
        err << cmd << ": trust list: " << describe(list.error()) << '\n';
        return 1;
      }
      trusted = std::move(*list);
    }
    for (const auto& t : trusted)
      if (t.public_key == body.public_key)
        signer_name = t.name;
    if (signer_name.empty())
      return refuse(o, "signer not trusted: cluster " + signer + " (public key "
                         + adapters::to_hex(body.public_key) + ") is not in the trust list "
                         + (explicit_trust || fs::exists(trust_path, ec)
                              ? "'" + trust_path + "'"
                              : "(no '" + trust_path
                                  + "': only this store's own cluster is trusted)")
                         + "; add it as [[trusted]] name = \"...\" public_key = \"...\"",
                    err);
  }
  struct incoming {
    std::string origin;
    std::uint64_t position;
    nlohmann::json finding;
  };
  std::vector<incoming> findings;
  std::set<std::pair<std::string, std::uint64_t>> seen;
  for (std::size_t i = 0; i < body.findings.size(); ++i) {
    const auto& f = body.findings[i];
    const auto label = "finding " + std::to_string(i + 1) + " (origin '" + f.origin
                       + "', origin position " + std::to_string(f.origin_position) + ")";
    if (f.origin.size() != adapters::cluster_id_hex_digits
        || f.origin.find_first_not_of("0123456789abcdef") != std::string::npos)
      return refuse(o, label + ": the origin is not a cluster id (32 lower-case hex digits)",
                    err);
    if (!seen.insert({f.origin, f.origin_position}).second)
      return refuse(o, label + ": the same origin and position as an earlier finding", err);
    auto doc = nlohmann::json::parse(f.document, nullptr, false);
    auto text_field = [&](const char* k) {
      return doc.contains(k) && doc[k].is_string() && !doc[k].get<std::string>().empty()
             && doc[k].get<std::string>().find('\0') == std::string::npos;
    };
    if (!doc.is_object() || !text_field("hardware") || !text_field("workload"))
      return refuse(o, label + ": the document is not an experience/1 JSON object with "
                               "non-empty hardware and workload strings",
                    err);
    findings.push_back({f.origin, f.origin_position, store::experience_finding_of(doc)});
  }
  // 2. The store: its identity (created on first use), its log (written: the writer lock) and
  //    its bank.
  auto me = store_identity(where, true, cmd, err);
  if (!me)
    return 1;
  store::rocksdb_event_log_options opts;
  opts.sync_writes = true;
  auto log = store::rocksdb_event_log::open(where.events, opts);
  if (!log) {
    err << cmd << ": " << describe(log.error()) << locked_hint(log.error()) << '\n';
    return 1;
  }
  auto bank = store::experience_bank::open(where.bank, **log, me->cluster_id);
  if (!bank) {
    err << cmd << ": " << describe(bank.error()) << locked_hint(bank.error()) << '\n';
    return 1;
  }
  const auto pack_sha256 = adapters::sha256_hex(*file);
  std::vector<store::new_event> events;
  std::size_t present = 0;
  std::size_t own = 0;
  std::size_t conflicting = 0;
  for (auto& f : findings) {
    if (f.origin == me->cluster_id) {
      ++own;
      continue;
    }
    auto have = (*bank)->lookup(f.origin, f.position);
    if (!have) {
      err << cmd << ": " << describe(have.error()) << '\n';
      return 1;
    }
    if (*have) {
      ++present;
      if (store::experience_finding_of(**have) != f.finding)
        ++conflicting;
      continue;
    }
    nlohmann::json doc = {{"origin", f.origin},
                          {"origin_position", f.position},
                          {"finding", std::move(f.finding)},
                          {"via", signer},
                          {"pack_sha256", pack_sha256}};
    events.push_back(store::new_event::of(
      wire::EventKind::ExperienceImported,
      messages::make_document("experience_import/1", doc.dump())));
  }
  if (!events.empty()) {
    auto version = (*log)->version(store::imported_experience_stream);
    if (!version) {
      err << cmd << ": " << describe(version.error()) << '\n';
      return 1;
    }
    // One atomic batch: all the pack's new findings, or none.
    auto appended = (*log)->append(store::imported_experience_stream, *version, events);
    if (!appended) {
      err << cmd << ": " << describe(appended.error()) << '\n';
      return 1;
    }
    if (auto caught = (*bank)->catch_up()) {
      err << cmd << ": " << describe(caught) << '\n';
      return 1;
    }
  }
  auto summary = summary_of(**bank);
  if (!summary) {
    err << cmd << ": " << describe(summary.error()) << '\n';
    return 1;
  }
  out << "imported " << events.size() << " of " << findings.size() << " findings from "
      << o.pack_file << " (signed by cluster " << signer << ", " << signer_name << "): "
      << present << " already present";
  if (conflicting > 0)
    out << " (" << conflicting << " of them with other content: kept the first)";
  out << ", " << own << " of this cluster\n"
      << summary->records << " records, log read up to position " << summary->position
      << ", hash " << summary->hash << '\n';
  return 0;
}

} // namespace

int run_experience(const experience_options& o, std::ostream& out, std::ostream& err) {
  const std::string cmd = "infrarsi experience " + o.action;
  static const std::set<std::string> actions = {"list",     "rebuild", "hash",
                                                "identity", "export",  "import"};
  if (actions.count(o.action) == 0) {
    err << "infrarsi experience: '" << o.action
        << "': expected list, rebuild, hash, identity, export or import\n";
    return 2;
  }
  const auto where = layout_of(o.store_dir);
  if (o.action != "import" && o.action != "identity")
    if (auto why = missing_store(o.store_dir); !why.empty()) {
      err << cmd << ": " << why << '\n';
      return 1;
    }
  if (o.action == "import")
    return run_import(o, where, out, err);
  // The store's cluster identity, created on first use: the origin of its own findings.
  auto me = store_identity(where, o.action == "identity", cmd, err);
  if (!me)
    return 1;
  if (o.action == "identity") {
    out << "cluster id: " << me->cluster_id << '\n'
        << "public key: " << adapters::to_hex(me->public_key) << '\n'
        << "key file: " << where.key_file << " (mode 0600; the secret is never printed)\n"
        << "public key file: " << fs::path{where.key_file}.replace_extension(".pub").string()
        << "\n"
        << "trust entry for the stores that should accept this cluster's packs:\n"
        << "[[trusted]]\nname = \"NAME\"\npublic_key = \"" << adapters::to_hex(me->public_key)
        << "\"\n";
    return 0;
  }
  store::rocksdb_event_log_options opts;
  opts.read_only = true;
  auto log = store::rocksdb_event_log::open(where.events, opts);
  if (!log) {
    err << cmd << ": " << describe(log.error()) << '\n';
    return 1;
  }
  warn_if_damaged(**log, where.events, cmd.c_str(), err);
  std::optional<scratch_dir> scratch; // destroyed after the bank that may live in it
  auto bank = o.action == "rebuild"
                ? store::rebuild_experience_bank(where.bank, **log, me->cluster_id)
                : store::experience_bank::open(where.bank, **log, me->cluster_id);
  // A running tune or daemon holds the index: export folds its own copy from the log (the
  // log is the truth; the copy is deleted afterwards).
  if (!bank && o.action == "export" && code_of(bank.error()) == errc::store_locked) {
    scratch.emplace();
    if (!scratch->path.empty())
      bank = store::rebuild_experience_bank(scratch->path + "/experience", **log, me->cluster_id);
  }
  if (!bank) {
    err << cmd << ": " << describe(bank.error())
        << (code_of(bank.error()) == errc::store_locked
                ? " (a running `infrarsi tune` or daemon holds the bank; run this when it ends)"
                : "")
        << '\n';
    return 1;
  }
  if (o.action == "export")
    return run_export(o, **bank, *me, out, err);
  auto records = (*bank)->records();
  auto summary = summary_of(**bank);
  if (!records || !summary) {
    err << cmd << ": " << describe(!records ? records.error() : summary.error()) << '\n';
    return 1;
  }
  if (o.action == "hash") {
    out << summary->hash << '\n';
    return 0;
  }
  if (o.action == "rebuild") {
    out << "rebuilt " << where.bank << " from " << where.events << ": " << summary->records
        << " records, log read up to position " << summary->position << "\nhash "
        << summary->hash << '\n';
    return 0;
  }
  if (o.json) {
    for (const auto& r : *records)
      out << r.dump() << '\n';
    return 0;
  }
  print_table(*records, me->cluster_id, out);
  out << summary->records << " records, log read up to position " << summary->position
      << ", hash " << summary->hash << '\n';
  return 0;
}

} // namespace infrarsi::runtime
