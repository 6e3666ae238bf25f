// Issue 16, item 4: federation of the experience bank. Two stores tuned by real `infrarsi tune`
// runs of two simulator tasks (sim-dense-1node and sim-moe-1node) export signed experience packs;
// fresh stores import them in every order, with repeats and through a third cluster, and end with
// the same bank hash; a changed byte, an unknown signer, an unsigned, truncated or foreign file
// are refused and append nothing; `experience rebuild` after an import gives the same hash.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rocksdb/db.h>

#include "adapters/environment.hpp"
#include "messages/experience_pack.hpp"
#include "sim_task.hpp"
#include "store/experience_bank.hpp"
#include "store/rocksdb_event_log.hpp"
#include "test_util.hpp"
#include "tune_process.hpp"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;

class ExperienceFederation : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir_ = new test::temp_dir;
    for (const auto& [store, task] : {std::pair{std::string{"a"}, std::string{"sim-dense-1node"}},
                                      std::pair{std::string{"b"}, std::string{"sim-moe-1node"}}}) {
      std::string text = test::sim_task_text(*dir_, task);
      // The policy is named: the test needs each 6-trial run to promote something (a finding to
      // share), which depends on the planner's trials; bayes_ei/2's do on both tasks (bayes_ei/3's
      // last trial changes sim-moe-1node's to nothing promoted).
      text += "\n[budget]\ntrials = 6\nbaseline_repeats = 3\nverify_top = 1\nverify_repeats = 3\n"
              "policy = \"bayes_ei/2\"\n";
      auto path = dir_->sub(task + ".toml");
      std::ofstream{path} << text;
      tune_status_[store] = test::run_cli({"tune", path, "--store", dir_->sub(store), "--quiet"},
                                          dir_->sub(store + ".tune-output"));
    }
    // Each cluster's pack, and a trust list naming both.
    a_pack_ = dir_->sub("a.pack");
    b_pack_ = dir_->sub("b.pack");
    export_rc_["a"] =
        cli({"experience", "export", "--store", dir_->sub("a"), "--out", a_pack_}).first;
    export_rc_["b"] =
        cli({"experience", "export", "--store", dir_->sub("b"), "--out", b_pack_}).first;
    trust_ = dir_->sub("trust-ab.toml");
    std::ofstream{trust_} << "# clusters a and b\n[[trusted]]\nname = \"lab-a\"\npublic_key = \""
                          << public_key_of(dir_->sub("a")) << "\"\n\n[[trusted]]\nname = "
                          << "\"lab-b\"\npublic_key = \"" << public_key_of(dir_->sub("b"))
                          << "\"\n";
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    ASSERT_EQ(tune_status_["a"], 0) << test::file_text(dir_->sub("a.tune-output"));
    ASSERT_EQ(tune_status_["b"], 0) << test::file_text(dir_->sub("b.tune-output"));
    ASSERT_EQ(export_rc_["a"], 0);
    ASSERT_EQ(export_rc_["b"], 0);
    // Each tuned store holds at least one finding of its own (else nothing would be shown).
    ASSERT_GE(records_of(dir_->sub("a")).size(), 1u);
    ASSERT_GE(records_of(dir_->sub("b")).size(), 1u);
  }

  /// `infrarsi ARGS...`: exit code and stdout+stderr.
  static std::pair<int, std::string> cli(const std::vector<std::string>& args) {
    static int n = 0;
    auto out = dir_->sub("cli-" + std::to_string(++n));
    int rc = test::run_cli(args, out);
    return {rc, test::file_text(out)};
  }

  /// The public key line of `infrarsi experience identity`.
  static std::string public_key_of(const std::string& store) {
    auto [rc, out] = cli({"experience", "identity", "--store", store});
    auto at = out.find("public key: ");
    return rc == 0 && at != std::string::npos ? out.substr(at + 12, 64) : std::string{};
  }
  static std::string cluster_id_of(const std::string& store) {
    auto [rc, out] = cli({"experience", "identity", "--store", store});
    auto at = out.find("cluster id: ");
    return rc == 0 && at != std::string::npos ? out.substr(at + 12, 32) : std::string{};
  }

  static std::string hash_of(const std::string& store) {
    auto [rc, out] = cli({"experience", "hash", "--store", store});
    return rc == 0 && out.size() == 65 ? out.substr(0, 64) : "error: " + out;
  }

  static std::vector<nlohmann::json> records_of(const std::string& store) {
    auto [rc, out] = cli({"experience", "list", "--json", "--store", store});
    std::vector<nlohmann::json> records;
    if (rc != 0)
      return records;
    std::istringstream lines{out};
    for (std::string line; std::getline(lines, line);)
      records.push_back(nlohmann::json::parse(line));
    return records;
  }

  /// The event log's head (number of events) of `store`, read-only.
  static std::uint64_t head_of(const std::string& store) {
    store::rocksdb_event_log_options o;
    o.read_only = true;
    auto log = store::rocksdb_event_log::open(store + "/events", o);
    return log ? (*log)->head() : 0;
  }

  /// A fresh store that trusts a and b (its identity made by `experience identity`).
  static std::string importer(const std::string& name) {
    auto store = dir_->sub(name);
    auto [rc, out] = cli({"experience", "identity", "--store", store});
    EXPECT_EQ(rc, 0) << out;
    fs::copy_file(trust_, store + "/trust.toml");
    return store;
  }

  static std::pair<int, std::string> import(const std::string& pack, const std::string& store) {
    return cli({"experience", "import", pack, "--store", store});
  }

  static std::string bytes_of(const std::string& path) {
    std::ifstream in{path, std::ios::binary};
    return {std::istreambuf_iterator<char>{in}, {}};
  }
  static void write(const std::string& path, const std::string& bytes) {
    std::ofstream{path, std::ios::binary} << bytes;
  }

  static test::temp_dir* dir_;
  static std::map<std::string, int> tune_status_;
  static std::map<std::string, int> export_rc_;
  static std::string a_pack_, b_pack_, trust_;
};

test::temp_dir* ExperienceFederation::dir_ = nullptr;
std::map<std::string, int> ExperienceFederation::tune_status_;
std::map<std::string, int> ExperienceFederation::export_rc_;
std::string ExperienceFederation::a_pack_;
std::string ExperienceFederation::b_pack_;
std::string ExperienceFederation::trust_;

TEST_F(ExperienceFederation, APackHoldsEveryFindingWithItsOriginAndIsSigned) {
  auto pack = messages::open_pack(bytes_of(a_pack_));
  ASSERT_TRUE(pack) << describe(pack.error());
  const auto a_id = cluster_id_of(dir_->sub("a"));
  ASSERT_EQ(a_id.size(), 32u);
  EXPECT_EQ(pack->decoded.cluster_id, a_id);
  EXPECT_EQ(pack->decoded.public_key.size(), 32u);
  EXPECT_EQ(pack->signature.size(), 64u);
  auto local = records_of(dir_->sub("a"));
  ASSERT_EQ(pack->decoded.findings.size(), local.size());
  for (std::size_t i = 0; i < local.size(); ++i) {
    const auto& f = pack->decoded.findings[i];
    EXPECT_EQ(f.origin, a_id);
    EXPECT_EQ(local[i].value("origin", ""), a_id);
    EXPECT_FALSE(local[i].value("imported", true));
    EXPECT_EQ(f.origin_position, local[i].value("position", std::uint64_t{1} << 60));
    auto doc = nlohmann::json::parse(f.document);
    // The finding's own fields, unchanged; no provenance of the exporter's log.
    EXPECT_EQ(doc["config"], local[i]["config"]);
    EXPECT_EQ(doc["speedup"], local[i]["speedup"]);
    EXPECT_EQ(doc["hardware"], local[i]["hardware"]);
    EXPECT_FALSE(doc.contains("position"));
    EXPECT_FALSE(doc.contains("origin"));
  }
  // Beside a process that holds the bank's index (as a running tune or daemon does): export
  // folds its own copy from the log, and signs the same bytes (Ed25519 is deterministic).
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options{}, dir_->sub("a") + "/experience", &raw).ok());
    std::unique_ptr<rocksdb::DB> held{raw};
    auto beside = dir_->sub("a-beside.pack");
    auto [held_rc, held_out] =
        cli({"experience", "export", "--store", dir_->sub("a"), "--out", beside});
    ASSERT_EQ(held_rc, 0) << held_out;
    EXPECT_EQ(bytes_of(beside), bytes_of(a_pack_));
  }
  // --since past the last finding: none of the store's own.
  auto last = local.back().value("position", std::uint64_t{0});
  auto later = dir_->sub("a-later.pack");
  auto [rc, out] = cli({"experience", "export", "--store", dir_->sub("a"), "--since",
                        std::to_string(last + 1), "--out", later});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(
      out.find("exported 0 findings (0 of this cluster from position " + std::to_string(last + 1)),
      std::string::npos)
      << out;
  auto none = messages::open_pack(bytes_of(later));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->decoded.findings.empty());
  EXPECT_EQ(none->decoded.since, last + 1);
}

TEST_F(ExperienceFederation, ImportsInAnyOrderAndWithRepeatsGiveTheSameBank) {
  const auto n_a = records_of(dir_->sub("a")).size();
  const auto n_b = records_of(dir_->sub("b")).size();
  auto ab = importer("import-ab");
  auto ba = importer("import-ba");
  auto aab = importer("import-aab");
  for (const auto& [store, packs] :
       {std::pair{ab, std::vector{a_pack_, b_pack_}}, std::pair{ba, std::vector{b_pack_, a_pack_}},
        std::pair{aab, std::vector{a_pack_, a_pack_, b_pack_}}})
    for (const auto& p : packs) {
      auto [rc, out] = import(p, store);
      ASSERT_EQ(rc, 0) << store << " " << p << ": " << out;
    }
  // The repeat appended nothing and said so.
  auto [again_rc, again] = import(a_pack_, aab);
  ASSERT_EQ(again_rc, 0) << again;
  EXPECT_NE(again.find("imported 0 of " + std::to_string(n_a) + " findings"), std::string::npos)
      << again;
  EXPECT_NE(again.find(std::to_string(n_a) + " already present"), std::string::npos) << again;

  const auto h = hash_of(ab);
  ASSERT_EQ(h.size(), 64u) << h;
  EXPECT_EQ(hash_of(ba), h);
  EXPECT_EQ(hash_of(aab), h);
  auto records = records_of(ab);
  EXPECT_EQ(records.size(), n_a + n_b);
  EXPECT_EQ(records_of(ba), records);
  EXPECT_EQ(records_of(aab), records);
  // Each import is one batch: the same events whatever the order or the repeats.
  EXPECT_EQ(head_of(ab), n_a + n_b);
  EXPECT_EQ(head_of(ba), n_a + n_b);
  EXPECT_EQ(head_of(aab), n_a + n_b);
  const std::set<std::string> origins = {cluster_id_of(dir_->sub("a")),
                                         cluster_id_of(dir_->sub("b"))};
  for (const auto& r : records) {
    EXPECT_TRUE(r.value("imported", false)) << r.dump();
    EXPECT_EQ(origins.count(r.value("origin", "")), 1u) << r.dump();
    EXPECT_FALSE(r.contains("position")) << r.dump(); // no local position of the importer
  }
  // `list` shows the provenance and the counts per hardware and workload.
  auto [list_rc, listed] = cli({"experience", "list", "--store", ab});
  ASSERT_EQ(list_rc, 0) << listed;
  EXPECT_NE(listed.find("imported from " + cluster_id_of(dir_->sub("a")).substr(0, 12)),
            std::string::npos)
      << listed;
  EXPECT_NE(listed.find("(0 local, " + std::to_string(n_b) + " imported)"), std::string::npos)
      << listed;
  EXPECT_NE(listed.find(std::to_string(n_a + n_b) + " records"), std::string::npos) << listed;

  // Deleted and rebuilt from the log: the same bank.
  auto [rb_rc, rebuilt] = cli({"experience", "rebuild", "--store", ba});
  ASSERT_EQ(rb_rc, 0) << rebuilt;
  EXPECT_NE(rebuilt.find("hash " + h), std::string::npos) << rebuilt;
  fs::remove_all(aab + "/experience");
  EXPECT_EQ(hash_of(aab), h);
}

TEST_F(ExperienceFederation, AFindingForwardedThroughAnotherClusterIsTheSameFinding) {
  // c imports a and b, then exports: its pack carries a's and b's findings with their origins.
  auto c = importer("forwarder");
  ASSERT_EQ(import(a_pack_, c).first, 0);
  ASSERT_EQ(import(b_pack_, c).first, 0);
  auto c_pack = dir_->sub("c.pack");
  auto [rc, out] = cli({"experience", "export", "--store", c, "--out", c_pack});
  ASSERT_EQ(rc, 0) << out;
  const auto n_a = records_of(dir_->sub("a")).size();
  const auto n_b = records_of(dir_->sub("b")).size();
  EXPECT_NE(
      out.find("(0 of this cluster from position 0, " + std::to_string(n_a + n_b) + " imported)"),
      std::string::npos)
      << out;
  // d trusts c only, e trusts a and b: the same bank.
  auto d = dir_->sub("via-c");
  ASSERT_EQ(cli({"experience", "identity", "--store", d}).first, 0);
  std::ofstream{d + "/trust.toml"} << "[[trusted]]\nname = \"lab-c\"\npublic_key = \""
                                   << public_key_of(c) << "\"\n";
  auto [d_rc, d_out] = import(c_pack, d);
  ASSERT_EQ(d_rc, 0) << d_out;
  EXPECT_NE(d_out.find("signed by cluster " + cluster_id_of(c) + ", lab-c"), std::string::npos)
      << d_out;
  auto e = importer("direct");
  ASSERT_EQ(import(b_pack_, e).first, 0);
  ASSERT_EQ(import(a_pack_, e).first, 0);
  EXPECT_EQ(hash_of(d), hash_of(e));
  EXPECT_EQ(records_of(d), records_of(e));

  // b, importing c's pack, keeps its own findings as they are and gains a's.
  auto b2 = dir_->sub("b-copy");
  fs::copy(dir_->sub("b"), b2, fs::copy_options::recursive);
  std::ofstream{b2 + "/trust.toml"} << "[[trusted]]\nname = \"lab-c\"\npublic_key = \""
                                    << public_key_of(c) << "\"\n";
  const auto before = records_of(b2);
  auto [b_rc, b_out] = import(c_pack, b2);
  ASSERT_EQ(b_rc, 0) << b_out;
  EXPECT_NE(b_out.find("imported " + std::to_string(n_a) + " of " + std::to_string(n_a + n_b)),
            std::string::npos)
      << b_out;
  EXPECT_NE(b_out.find(std::to_string(n_b) + " of this cluster"), std::string::npos) << b_out;
  auto after = records_of(b2);
  EXPECT_EQ(after.size(), n_a + n_b);
  std::size_t local = 0;
  for (const auto& r : after)
    if (!r.value("imported", true)) {
      ++local;
      EXPECT_NE(std::find(before.begin(), before.end(), r), before.end()) << r.dump();
    }
  EXPECT_EQ(local, n_b);
}

TEST_F(ExperienceFederation, ARefusedPackAppendsNothing) {
  auto store = importer("refusing");
  ASSERT_EQ(import(a_pack_, store).first, 0);
  const auto head = head_of(store);
  const auto hash = hash_of(store);
  ASSERT_GT(head, 0u);
  auto refused = [&](const std::string& pack, const std::string& why) {
    auto [rc, out] = import(pack, store);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("infrarsi experience import: " + pack + ": refused: "), std::string::npos)
        << out;
    EXPECT_NE(out.find(why), std::string::npos) << out;
    EXPECT_EQ(head_of(store), head) << out;
    EXPECT_EQ(hash_of(store), hash) << out;
  };
  const auto good = bytes_of(b_pack_);

  // One byte of a finding changed (a digit of its speedup): the signature does not verify.
  auto at = good.find("\"speedup\":");
  ASSERT_NE(at, std::string::npos);
  auto digit = good.find_first_of("0123456789", at + 10);
  ASSERT_NE(digit, std::string::npos);
  auto tampered = good;
  tampered[digit] = tampered[digit] == '9' ? '8' : static_cast<char>(tampered[digit] + 1);
  write(dir_->sub("tampered.pack"), tampered);
  refused(dir_->sub("tampered.pack"), "the signature does not verify");

  // Signed by a cluster nobody trusts: a copy of b with a new identity.
  auto stranger = dir_->sub("stranger");
  fs::copy(dir_->sub("b"), stranger, fs::copy_options::recursive);
  fs::remove(stranger + "/cluster.key");
  fs::remove(stranger + "/cluster.pub");
  auto stranger_pack = dir_->sub("stranger.pack");
  ASSERT_EQ(cli({"experience", "export", "--store", stranger, "--out", stranger_pack}).first, 0);
  refused(stranger_pack, "signer not trusted: cluster " + cluster_id_of(stranger));

  // The same body without its signature.
  auto opened = messages::open_pack(good);
  ASSERT_TRUE(opened);
  write(dir_->sub("unsigned.pack"), messages::encode_pack(opened->body, ""));
  refused(dir_->sub("unsigned.pack"), "unsigned");

  // Cut short, and not a pack at all.
  write(dir_->sub("truncated.pack"), good.substr(0, good.size() / 2));
  refused(dir_->sub("truncated.pack"), "truncated");
  write(dir_->sub("notes.txt"), "these are not the findings you are looking for\n");
  refused(dir_->sub("notes.txt"), "not an experience pack");
  refused(dir_->sub("missing.pack"), "no such file");

  // Refused before the store is touched: a store that did not exist is not made.
  auto nowhere = dir_->sub("never-made");
  auto [n_rc, n_out] = import(dir_->sub("tampered.pack"), nowhere);
  EXPECT_EQ(n_rc, 1) << n_out;
  EXPECT_FALSE(fs::exists(nowhere)) << n_out;

  // The untampered pack is still accepted.
  auto [rc, out] = import(b_pack_, store);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_GT(head_of(store), head);
}

TEST_F(ExperienceFederation, ABadTrustListNamesTheFileAndTheKey) {
  auto store = importer("bad-trust");
  auto trust = dir_->sub("bad-trust.toml");
  std::ofstream{trust} << "[[trusted]]\nname = \"lab-b\"\npublic_key = \"not-hex\"\n";
  auto [rc, out] = cli({"experience", "import", b_pack_, "--store", store, "--trust", trust});
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find(trust + ":3:"), std::string::npos) << out;
  EXPECT_NE(out.find("trusted[1].public_key 'not-hex'"), std::string::npos) << out;
  EXPECT_EQ(head_of(store), 0u);
  auto [missing_rc, missing] =
      cli({"experience", "import", b_pack_, "--store", store, "--trust", trust + ".absent"});
  EXPECT_EQ(missing_rc, 1);
  EXPECT_NE(missing.find(trust + ".absent': no such file"), std::string::npos) << missing;
}

TEST_F(ExperienceFederation, TheSecretKeyFileIsPrivateAndNeverPrinted) {
  auto key = dir_->sub("a") + "/cluster.key";
  auto perms = fs::status(key).permissions();
  EXPECT_EQ(perms & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  auto text = test::file_text(key);
  auto at = text.find("secret_seed = \"");
  ASSERT_NE(at, std::string::npos);
  auto secret = text.substr(at + 15, 64);
  auto [rc, out] = cli({"experience", "identity", "--store", dir_->sub("a")});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find(secret), std::string::npos);
  // A key file others can read is refused, naming the file.
  auto loose = dir_->sub("loose");
  ASSERT_EQ(cli({"experience", "identity", "--store", loose}).first, 0);
  fs::permissions(loose + "/cluster.key", fs::perms::group_read, fs::perm_options::add);
  auto [loose_rc, loose_out] = cli({"experience", "identity", "--store", loose});
  EXPECT_EQ(loose_rc, 1);
  EXPECT_NE(loose_out.find(loose + "/cluster.key: mode 0640"), std::string::npos) << loose_out;
}

TEST_F(ExperienceFederation, AFreshClusterThatImportsAPackProposesItsWinnerFirst) {
  // A new store (another cluster) on the same hardware and workload as a: nothing of its own,
  // a's pack imported, then a tune of a's task.
  auto fresh = importer("fresh");
  auto [rc, out] = import(a_pack_, fresh);
  ASSERT_EQ(rc, 0) << out;
  auto a_records = records_of(dir_->sub("a"));
  ASSERT_FALSE(a_records.empty());
  auto best =
      *std::max_element(a_records.begin(), a_records.end(), [](const auto& x, const auto& y) {
        return x.value("speedup", 0.0) < y.value("speedup", 0.0);
      });
  auto winner = store::configuration_from_json(best["config"]);
  ASSERT_TRUE(winner);
  ASSERT_EQ(test::run_cli({"tune", dir_->sub("sim-dense-1node.toml"), "--store", fresh, "--quiet"},
                          fresh + ".tune-output"),
            0)
      << test::file_text(fresh + ".tune-output");
  store::rocksdb_event_log_options o;
  o.read_only = true;
  std::string run;
  {
    auto log = store::rocksdb_event_log::open(fresh + "/events", o);
    ASSERT_TRUE(log);
    auto runs = (*log)->list_runs();
    ASSERT_TRUE(runs);
    for (const auto& r : *runs)
      if (r.run_id != store::imported_experience_stream)
        run = r.run_id;
  }
  auto r = test::read_logged_run(fresh, run);
  ASSERT_TRUE(r);
  auto seeded = r->of(wire::EventKind::ExperienceSeeded);
  ASSERT_EQ(seeded.size(), 1u);
  ASSERT_GE(seeded[0]->doc["seeds"].size(), 1u) << seeded[0]->doc.dump();
  std::string first;
  for (const auto* e : r->of(wire::EventKind::TrialProposed))
    if (e->purpose == wire::Purpose::Explore) {
      first = e->config;
      break;
    }
  EXPECT_EQ(first, winner->key());
  // The seed says which pack it came through: the pack's SHA-256 and its signer, in the logged
  // pack and in the report.
  const auto a_id = cluster_id_of(dir_->sub("a"));
  const auto sha = adapters::sha256_hex(bytes_of(a_pack_));
  EXPECT_EQ(seeded[0]->doc["seeds"][0].value("pack_sha256", ""), sha) << seeded[0]->doc.dump();
  EXPECT_EQ(seeded[0]->doc["seeds"][0].value("via", ""), a_id);
  auto report = nlohmann::json::parse(
    test::file_text(fresh + "/runs/" + run + "/report.json"), nullptr, false);
  ASSERT_TRUE(report.is_object());
  ASSERT_GE(report["experience_seeds"].size(), 1u);
  EXPECT_EQ(report["experience_seeds"][0].value("pack_sha256", ""), sha);
  EXPECT_EQ(report["experience_seeds"][0].value("origin", ""), a_id);
  auto md = test::file_text(fresh + "/runs/" + run + "/report.md");
  EXPECT_NE(md.find("imported from cluster " + a_id.substr(0, 12) + " through pack "
                    + sha.substr(0, 12) + " signed by cluster " + a_id.substr(0, 12)),
            std::string::npos)
    << md;
  // Its own finding joins the imported one; both stay, each with its provenance.
  auto records = records_of(fresh);
  std::size_t imported = 0;
  for (const auto& rec : records)
    imported += rec.value("imported", false) ? 1 : 0;
  EXPECT_EQ(imported, a_records.size());
}

TEST_F(ExperienceFederation, AnIndexOfTheFormerFormatIsRebuiltFromTheLog) {
  // A bank index as a build before federation wrote it (format /1, keyed by local position):
  // discarded at open and folded again from the log, to the same hash as a fresh fold.
  auto copy = dir_->sub("a-old-index");
  fs::copy(dir_->sub("a"), copy, fs::copy_options::recursive);
  const auto h = hash_of(copy);
  ASSERT_EQ(h.size(), 64u) << h;
  fs::remove_all(copy + "/experience");
  {
    rocksdb::Options opts;
    opts.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(opts, copy + "/experience", &raw).ok());
    std::unique_ptr<rocksdb::DB> db{raw};
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions{}, std::string{"m\0format", 8}, "infrarsi-experience-index/1")
            .ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions{}, std::string{"m\0position", 10}, "999999").ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions{},
                        std::string{"r\0hw\0wl\0", 8} + "00000000000000000001", "{}")
                    .ok());
  }
  EXPECT_EQ(hash_of(copy), h);
  EXPECT_EQ(records_of(copy), records_of(dir_->sub("a")));
}

} // namespace
} // namespace infrarsi
