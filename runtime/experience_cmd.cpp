#include "runtime/experience_cmd.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <map>
#include <memory>
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
#include "runtime/experience_sync.hpp"
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
  auto pack = make_pack(bank, me, o.since);
  if (!pack) {
    err << cmd << ": " << describe(pack.error()) << '\n';
    return 1;
  }
  std::ostringstream what;
  what << "exported " << pack->local + pack->imported << " findings (" << pack->local
       << " of this cluster from position " << o.since << ", " << pack->imported
       << " imported) signed by cluster " << me.cluster_id << " to ";
  if (o.out_file.empty()) {
    out.write(pack->bytes.data(), static_cast<std::streamsize>(pack->bytes.size()));
    out.flush();
    err << what.str() << "stdout (" << pack->bytes.size() << " bytes)\n";
    return out ? 0 : 1;
  }
  if (auto bad = adapters::write_file_atomically(o.out_file, pack->bytes, 0644, true)) {
    err << cmd << ": " << describe(bad) << '\n';
    return 1;
  }
  out << what.str() << o.out_file << " (" << pack->bytes.size() << " bytes)\n";
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

/// The store's own cluster id when it has one already ("" when not: a refused pack creates
/// nothing), or nullopt after printing why the key file cannot be read.
std::optional<std::string> existing_cluster_id(const store_layout& where, const std::string& cmd,
                                               std::ostream& err) {
  auto existing = adapters::load_cluster_identity(where.key_file, false);
  if (existing)
    return existing->cluster_id;
  if (code_of(existing.error()) == errc::not_found)
    return std::string{};
  err << cmd << ": " << describe(existing.error()) << '\n';
  return std::nullopt;
}

/// The trust list of `import` and `sync --store`: --trust, else STORE/trust.toml when it exists.
std::optional<trust_set> trust_of(const experience_options& o, const store_layout& where,
                                  const std::string& cmd, std::ostream& err) {
  auto trust = load_trust(o.trust_file.empty() ? where.trust_file : o.trust_file,
                          !o.trust_file.empty());
  if (!trust) {
    err << cmd << ": trust list: " << describe(trust.error()) << '\n';
    return std::nullopt;
  }
  return std::move(*trust);
}

/// The store opened for writing: its identity (created on first use), its event log (the
/// writer lock) and its bank. Errors are printed after `cmd`.
struct writable_store {
  adapters::cluster_identity me;
  std::unique_ptr<store::rocksdb_event_log> log;
  std::unique_ptr<store::experience_bank> bank;
};
std::optional<writable_store> open_writable(const store_layout& where, const std::string& cmd,
                                            std::ostream& err) {
  auto me = store_identity(where, true, cmd, err);
  if (!me)
    return std::nullopt;
  store::rocksdb_event_log_options opts;
  opts.sync_writes = true;
  auto log = store::rocksdb_event_log::open(where.events, opts);
  if (!log) {
    err << cmd << ": " << describe(log.error()) << locked_hint(log.error()) << '\n';
    return std::nullopt;
  }
  auto bank = store::experience_bank::open(where.bank, **log, me->cluster_id);
  if (!bank) {
    err << cmd << ": " << describe(bank.error()) << locked_hint(bank.error()) << '\n';
    return std::nullopt;
  }
  return writable_store{std::move(*me), std::move(*log), std::move(*bank)};
}

void print_summary(const bank_summary& s, std::ostream& out) {
  out << s.records << " records, log read up to position " << s.position << ", hash " << s.hash
      << '\n';
}

int run_import(const experience_options& o, const store_layout& where, std::ostream& out,
               std::ostream& err) {
  const std::string cmd = "infrarsi experience import";
  auto own_id = existing_cluster_id(where, cmd, err);
  if (!own_id)
    return 1;
  // 1. The pack: structure, signature, signer, findings. Nothing is opened for writing before
  //    the pack is accepted.
  const messages::verify_limits limits;
  auto file = read_file(o.pack_file, limits.max_bytes);
  if (!file)
    return refuse(o, describe(file.error()), err);
  auto trust = trust_of(o, where, cmd, err);
  if (!trust)
    return 1;
  auto verified = verify_pack(*file, *own_id, *trust);
  if (!verified)
    return refuse(o, describe(verified.error()), err);
  const auto signer = verified->signer;
  const auto signer_name = verified->signer_name;
  // 2. The store: its identity, its log (the writer lock) and its bank.
  auto store = open_writable(where, cmd, err);
  if (!store)
    return 1;
  auto counts = append_pack(std::move(*verified), *store->log, *store->bank);
  if (!counts) {
    err << cmd << ": " << describe(counts.error()) << '\n';
    return 1;
  }
  auto summary = summarize(*store->bank);
  if (!summary) {
    err << cmd << ": " << describe(summary.error()) << '\n';
    return 1;
  }
  out << "imported " << counts->imported << " of " << counts->offered << " findings from "
      << o.pack_file << " (signed by cluster " << signer << ", " << signer_name << "): "
      << counts->present << " already present";
  if (counts->conflicting > 0)
    out << " (" << counts->conflicting << " of them with other content: kept the first)";
  out << ", " << counts->own << " of this cluster\n";
  print_summary(*summary, out);
  return 0;
}

/// One peer's line of `sync`.
void print_pull(const nlohmann::json& p, std::ostream& out) {
  out << "peer " << p.value("name", "");
  if (p.value("endpoint", "") != p.value("name", ""))
    out << " (" << p.value("endpoint", "") << ")";
  out << ": ";
  if (!p.value("ok", false)) {
    out << "failed: " << p.value("error", "") << '\n';
    return;
  }
  out << "pulled " << p.value("pulled", 0) << " new finding(s) of " << p.value("offered", 0)
      << " offered, " << p.value("present", 0) << " already present";
  if (p.value("conflicting", 0) > 0)
    out << " (" << p.value("conflicting", 0) << " with other content: kept the first)";
  out << ", " << p.value("own", 0) << " of this cluster; signed by cluster "
      << p.value("signer", "") << " (" << p.value("signer_name", "") << ")\n";
}

/// `sync --daemon EP`: the daemon pulls from its peers; its result document printed.
int run_sync_daemon(const experience_options& o, std::ostream& out, std::ostream& err) {
  const std::string cmd = "infrarsi experience sync";
  wire::ClientRequestT request;
  request.command = "experience-sync";
  request.argument = o.peer.empty() ? "{}" : nlohmann::json{{"peer", o.peer}}.dump();
  auto env = messages::seal(messages::client_request_msg::pack(request), "", "client", 0);
  if (!env) {
    err << cmd << ": " << describe(env.error()) << '\n';
    return 1;
  }
  auto answer = ask_daemon(o.daemon, *env);
  if (!answer) {
    err << cmd << ": " << describe(answer.error()) << '\n';
    return 1;
  }
  if (!(**answer).ok()) {
    err << cmd << ": the daemon at " << o.daemon.endpoint << " said: "
        << ((**answer).error() != nullptr ? (**answer).error()->str() : std::string{}) << '\n';
    return 1;
  }
  auto doc = nlohmann::json::parse((**answer).json()->str(), nullptr, false);
  if (!doc.is_object() || !doc.contains("peers") || !doc["peers"].is_array()) {
    err << cmd << ": the daemon at " << o.daemon.endpoint << " answered no sync result\n";
    return 1;
  }
  bool all_ok = true;
  for (const auto& p : doc["peers"])
    all_ok = all_ok && p.value("ok", false);
  if (o.json) {
    out << doc.dump() << '\n';
    return all_ok ? 0 : 1;
  }
  for (const auto& p : doc["peers"])
    print_pull(p, out);
  if (doc.contains("bank")) {
    const auto& b = doc["bank"];
    out << "daemon " << o.daemon.endpoint << ": " << b.value("records", 0) << " records ("
        << b.value("imported", 0) << " imported), log read up to position "
        << b.value("position", 0) << ", hash " << b.value("hash", "") << '\n';
  }
  return all_ok ? 0 : 1;
}

/// `sync --store DIR --peer EP`: this store pulls from the peer daemon itself.
int run_sync_store(const experience_options& o, const store_layout& where, std::ostream& out,
                   std::ostream& err) {
  const std::string cmd = "infrarsi experience sync";
  // The store must have been made ready for federation (its identity, and a trust list naming
  // the peer): a typo or a failed pull then creates nothing.
  auto own_id = existing_cluster_id(where, cmd, err);
  if (!own_id)
    return 1;
  if (own_id->empty()) {
    err << cmd << ": no cluster identity at '" << where.key_file
        << "': make one with `infrarsi experience identity --store " << where.root
        << "` and list the peer's cluster key in " << where.trust_file
        << " (docs/experience.md, \"Trust\")\n";
    return 1;
  }
  auto trust = trust_of(o, where, cmd, err);
  if (!trust)
    return 1;
  auto store = open_writable(where, cmd, err);
  if (!store)
    return 1;
  experience_peer peer;
  peer.name = o.peer;
  peer.endpoint = o.peer;
  peer.server_key = o.daemon.server_key;
  peer.key = o.daemon.key;
  peer.timeout_s = o.daemon.timeout_s;
  auto pulled = pull_from_peer(peer, *store->log, *store->bank, *trust);
  nlohmann::json entry = {{"name", o.peer}, {"endpoint", o.peer}};
  entry.update(pull_entry(pulled));
  auto summary = summarize(*store->bank);
  if (o.json) {
    nlohmann::json doc = {{"peers", nlohmann::json::array({entry})}};
    if (summary)
      doc["bank"] = bank_entry(*summary);
    out << doc.dump() << '\n';
  } else {
    print_pull(entry, out);
    if (summary)
      print_summary(*summary, out);
  }
  if (!summary)
    err << cmd << ": " << describe(summary.error()) << '\n';
  return pulled && summary ? 0 : 1;
}

} // namespace

int run_experience(const experience_options& o, std::ostream& out, std::ostream& err) {
  const std::string cmd = "infrarsi experience " + o.action;
  static const std::set<std::string> actions = {"list",   "rebuild", "hash", "identity",
                                                "export", "import",  "sync"};
  if (actions.count(o.action) == 0) {
    err << "infrarsi experience: '" << o.action
        << "': expected list, rebuild, hash, identity, export, import or sync\n";
    return 2;
  }
  if (o.action == "sync") {
    if (!o.daemon.endpoint.empty() && !o.trust_file.empty()) {
      err << cmd << ": --trust is for the --store form: a daemon reads its own trust list "
                    "(its config's experience.trust, else STORE/trust.toml)\n";
      return 2;
    }
    if (!o.daemon.endpoint.empty())
      return run_sync_daemon(o, out, err);
    if (o.peer.empty()) {
      err << cmd << ": give --daemon EP (a running daemon pulls from its configured peers) or "
                    "--peer EP (this store pulls from that daemon)\n";
      return 2;
    }
    if (o.peer.rfind("tcp://", 0) != 0 && o.peer.rfind("ipc://", 0) != 0) {
      err << cmd << ": --peer '" << o.peer
          << "': without --daemon, expected the peer daemon's client endpoint (tcp:// or "
             "ipc://)\n";
      return 2;
    }
  }
  const auto where = layout_of(o.store_dir);
  if (o.action != "import" && o.action != "identity" && o.action != "sync")
    if (auto why = missing_store(o.store_dir); !why.empty()) {
      err << cmd << ": " << why << '\n';
      return 1;
    }
  if (o.action == "import")
    return run_import(o, where, out, err);
  if (o.action == "sync")
    return run_sync_store(o, where, out, err);
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
  auto summary = summarize(**bank);
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
  print_summary(*summary, out);
  return 0;
}

} // namespace infrarsi::runtime
