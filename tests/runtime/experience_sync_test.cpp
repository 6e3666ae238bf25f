// Issue 16, item 4: the pieces of experience sync between daemons, on real RocksDB stores on
// disk and real Ed25519 keys (runtime/experience_sync.hpp): what a pull request carries, what a
// pack holds for an asker that already has some findings, what a sync appends, which packs are
// refused, and the daemon config's [experience] table. The two-daemon sync over ZeroMQ with CURVE
// is tests/durability/daemon_test.cpp (Daemon.TwoDaemonsOnOtherHardwareSync...).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "adapters/cluster_identity.hpp"
#include "messages/errc.hpp"
#include "messages/experience_pack.hpp"
#include "runtime/daemon.hpp"
#include "runtime/experience_sync.hpp"
#include "store/experience_bank.hpp"
#include "store/rocksdb_event_log.hpp"
#include "test_util.hpp"

namespace infrarsi {
namespace {

/// A store on disk: an identity, a RocksDB event log and its experience bank.
struct disk_store {
  explicit disk_store(const std::string& dir) {
    std::filesystem::create_directories(dir);
    auto me = adapters::load_cluster_identity(dir + "/cluster.key", true);
    if (!me)
      throw std::runtime_error{describe(me.error())};
    identity = std::move(*me);
    auto opened = store::rocksdb_event_log::open(dir + "/events", {});
    if (!opened)
      throw std::runtime_error{describe(opened.error())};
    log = std::move(*opened);
    auto b = store::experience_bank::open(dir + "/experience", *log, identity.cluster_id);
    if (!b)
      throw std::runtime_error{describe(b.error())};
    bank = std::move(*b);
  }
  adapters::cluster_identity identity;
  std::unique_ptr<store::rocksdb_event_log> log;
  std::unique_ptr<store::experience_bank> bank;
};

/// A finding document of `speedup` on `hardware`.
nlohmann::json finding(const std::string& hardware, double speedup) {
  return {{"format", "experience/1"}, {"hardware", hardware},      {"workload", "llama3-8b"},
          {"speedup", speedup},       {"config", {{"tp", "2"}}}, {"ci_low", speedup - 0.01}};
}

/// A pack signed by `signer` holding `findings` of origin `origin` at positions 1, 2, ...
std::string pack_of(const adapters::cluster_identity& signer, const std::string& origin,
                    const std::vector<nlohmann::json>& findings) {
  messages::experience_pack_body body;
  body.cluster_id = signer.cluster_id;
  body.public_key = signer.public_key;
  std::uint64_t position = 0;
  for (const auto& f : findings)
    body.findings.push_back({origin, ++position, f.dump()});
  auto bytes = messages::encode_pack_body(body);
  return messages::encode_pack(bytes, signer.sign(bytes));
}

runtime::trust_set trusting(const adapters::cluster_identity& peer) {
  runtime::trust_set t;
  t.trusted.push_back({"lab-b", peer.public_key, peer.cluster_id, "test"});
  t.label = "'test trust list'";
  return t;
}

TEST(ExperienceSync, APullRequestListsWhatTheAskerHasAndReadsBack) {
  const std::string a(32, 'a');
  const std::string b(32, 'b');
  std::set<runtime::finding_key> have{{a, 3}, {a, 17}, {b, 0}};
  auto text = runtime::pull_request_argument(have, 4096);
  EXPECT_EQ(text, "{\"have\":{\"" + a + "\":[3,17],\"" + b + "\":[0]},\"max_bytes\":4096}");
  auto back = runtime::parse_pull_request(text);
  ASSERT_TRUE(back) << describe(back.error());
  EXPECT_EQ(back->have, have);
  EXPECT_EQ(back->max_bytes, 4096u);
  // No argument: nothing held, the default answer size; a larger one is capped.
  auto empty = runtime::parse_pull_request("");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->have.empty());
  EXPECT_EQ(empty->max_bytes, runtime::max_reply_bytes);
  auto capped = runtime::parse_pull_request("{\"max_bytes\": 1000000000000}");
  ASSERT_TRUE(capped);
  EXPECT_EQ(capped->max_bytes, runtime::max_reply_bytes);
  // Malformed arguments are named.
  for (const auto& [arg, why] : std::vector<std::pair<std::string, std::string>>{
         {"[1]", "the argument is not a JSON object"},
         {"{\"have\": 3}", "have: expected an object"},
         {"{\"have\": {\"xyz\": [1]}}", "'xyz' is not a cluster id"},
         {"{\"have\": {\"" + a + "\": [-1]}}", "expected non-negative integer positions"},
         {"{\"have\": {\"" + a + "\": 5}}", "expected an array of positions"},
         {"{\"max_bytes\": \"big\"}", "max_bytes: expected a non-negative integer"}}) {
    auto r = runtime::parse_pull_request(arg);
    ASSERT_FALSE(r) << arg;
    EXPECT_EQ(code_of(r.error()), errc::invalid_argument);
    EXPECT_NE(describe(r.error()).find(why), std::string::npos) << describe(r.error());
  }
}

TEST(ExperienceSync, APeerSendsOnlyWhatTheAskerLacksAndASecondPullBringsNothing) {
  test::temp_dir dir;
  disk_store origin{dir.sub("origin")}; // the cluster that found them (never opened further)
  disk_store peer{dir.sub("peer")};
  disk_store asker{dir.sub("asker")};
  // The peer holds three findings of `origin` (imported from its signed pack).
  std::vector<nlohmann::json> found{finding("H100-80GB", 1.20), finding("A100-80GB", 1.10),
                                    finding("H200-141GB", 1.30)};
  auto peer_trust = trusting(origin.identity);
  auto first = runtime::verify_pack(pack_of(origin.identity, origin.identity.cluster_id, found),
                                    peer.identity.cluster_id, peer_trust);
  ASSERT_TRUE(first) << describe(first.error());
  auto appended = runtime::append_pack(std::move(*first), *peer.log, *peer.bank);
  ASSERT_TRUE(appended) << describe(appended.error());
  EXPECT_EQ(appended->imported, 3u);
  // The asker already has position 2: the peer's pack for it holds 1 and 3, signed by the peer.
  std::set<runtime::finding_key> have{{origin.identity.cluster_id, 2}};
  auto pack = runtime::make_pack(*peer.bank, peer.identity, 0, have);
  ASSERT_TRUE(pack) << describe(pack.error());
  EXPECT_TRUE(pack->complete);
  EXPECT_EQ(pack->local, 0u);
  EXPECT_EQ(pack->imported, 2u);
  auto opened = messages::open_pack(pack->bytes);
  ASSERT_TRUE(opened);
  ASSERT_EQ(opened->decoded.findings.size(), 2u);
  EXPECT_EQ(opened->decoded.findings[0].origin_position, 1u);
  EXPECT_EQ(opened->decoded.findings[1].origin_position, 3u);
  EXPECT_EQ(opened->decoded.cluster_id, peer.identity.cluster_id);
  // The asker trusts the peer (not the origin): the peer vouches for what it forwards.
  auto asker_trust = trusting(peer.identity);
  auto verified = runtime::verify_pack(pack->bytes, asker.identity.cluster_id, asker_trust);
  ASSERT_TRUE(verified) << describe(verified.error());
  EXPECT_EQ(verified->signer, peer.identity.cluster_id);
  EXPECT_EQ(verified->signer_name, "lab-b");
  auto counts = runtime::append_pack(std::move(*verified), *asker.log, *asker.bank);
  ASSERT_TRUE(counts) << describe(counts.error());
  EXPECT_EQ(counts->offered, 2u);
  EXPECT_EQ(counts->imported, 2u);
  auto head = asker.log->head();
  EXPECT_EQ(head, 2u);
  // Asked again with everything the asker holds (and position 2, which it said it had): an
  // empty pack, and nothing appended.
  auto held = runtime::held_findings(*asker.bank);
  ASSERT_TRUE(held);
  EXPECT_EQ(held->size(), 2u);
  held->insert(have.begin(), have.end());
  auto again = runtime::make_pack(*peer.bank, peer.identity, 0, *held);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->local + again->imported, 0u);
  auto nothing = runtime::verify_pack(again->bytes, asker.identity.cluster_id, asker_trust);
  ASSERT_TRUE(nothing);
  auto none = runtime::append_pack(std::move(*nothing), *asker.log, *asker.bank);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->imported, 0u);
  EXPECT_EQ(asker.log->head(), head);
  // The asker's findings come back to the peer as present, never appended twice.
  auto back = runtime::make_pack(*asker.bank, asker.identity, 0);
  ASSERT_TRUE(back);
  auto back_verified =
    runtime::verify_pack(back->bytes, peer.identity.cluster_id, trusting(asker.identity));
  ASSERT_TRUE(back_verified);
  auto peer_head = peer.log->head();
  auto back_counts = runtime::append_pack(std::move(*back_verified), *peer.log, *peer.bank);
  ASSERT_TRUE(back_counts);
  EXPECT_EQ(back_counts->present, 2u);
  EXPECT_EQ(back_counts->imported, 0u);
  EXPECT_EQ(peer.log->head(), peer_head);
}

TEST(ExperienceSync, ALargeAnswerComesInPartsThatTogetherHoldEveryFinding) {
  test::temp_dir dir;
  disk_store origin{dir.sub("origin")};
  disk_store peer{dir.sub("peer")};
  std::vector<nlohmann::json> found;
  for (int i = 0; i < 10; ++i)
    found.push_back(finding("H100-80GB", 1.0 + i / 100.0));
  auto v = runtime::verify_pack(pack_of(origin.identity, origin.identity.cluster_id, found),
                                peer.identity.cluster_id, trusting(origin.identity));
  ASSERT_TRUE(v);
  ASSERT_TRUE(runtime::append_pack(std::move(*v), *peer.log, *peer.bank));
  std::size_t one = 0; // the largest finding
  for (const auto& f : found)
    one = std::max(one, store::experience_finding_of(f).dump().size());
  std::set<runtime::finding_key> have;
  std::size_t rounds = 0;
  for (bool complete = false; !complete && rounds < 20; ++rounds) {
    // Room for three findings per answer.
    auto part = runtime::make_pack(*peer.bank, peer.identity, 0, have, 3 * one + 2);
    ASSERT_TRUE(part);
    complete = part->complete;
    auto opened = messages::open_pack(part->bytes);
    ASSERT_TRUE(opened);
    EXPECT_LE(opened->decoded.findings.size(), 3u);
    EXPECT_GE(opened->decoded.findings.size(), 1u);
    for (const auto& f : opened->decoded.findings)
      EXPECT_TRUE(have.emplace(f.origin, f.origin_position).second) << "sent twice";
  }
  EXPECT_EQ(rounds, 4u);
  EXPECT_EQ(have.size(), 10u);
}

TEST(ExperienceSync, APackFromAnUntrustedOrTamperedSignerIsRefusedWithTheReason) {
  test::temp_dir dir;
  disk_store origin{dir.sub("origin")};
  disk_store stranger{dir.sub("stranger")};
  disk_store asker{dir.sub("asker")};
  auto bytes = pack_of(origin.identity, origin.identity.cluster_id,
                       {finding("H100-80GB", 1.2)});
  // Signed by a cluster the asker does not trust.
  auto untrusted = runtime::verify_pack(bytes, asker.identity.cluster_id,
                                        trusting(stranger.identity));
  ASSERT_FALSE(untrusted);
  EXPECT_EQ(code_of(untrusted.error()), errc::not_permitted);
  EXPECT_NE(describe(untrusted.error()).find("signer not trusted: cluster "
                                             + origin.identity.cluster_id),
            std::string::npos)
    << describe(untrusted.error());
  EXPECT_NE(describe(untrusted.error()).find("'test trust list'"), std::string::npos);
  // One byte of a finding changed after signing.
  auto at = bytes.find("H100-80GB");
  ASSERT_NE(at, std::string::npos);
  auto tampered = bytes;
  tampered[at] = 'X';
  auto refused = runtime::verify_pack(tampered, asker.identity.cluster_id,
                                      trusting(origin.identity));
  ASSERT_FALSE(refused);
  EXPECT_NE(describe(refused.error()).find("the signature does not verify"), std::string::npos)
    << describe(refused.error());
  EXPECT_EQ(asker.log->head(), 0u);
  // A missing trust list that is required is an error naming the file; an optional one trusts
  // nobody else.
  auto required = runtime::load_trust(dir.sub("absent.toml"), true);
  ASSERT_FALSE(required);
  EXPECT_NE(describe(required.error()).find("absent.toml"), std::string::npos);
  auto optional = runtime::load_trust(dir.sub("absent.toml"), false);
  ASSERT_TRUE(optional);
  EXPECT_TRUE(optional->trusted.empty());
  EXPECT_NE(optional->label.find("only this store's own cluster is trusted"), std::string::npos);
}

TEST(ExperienceSync, APeerThatDoesNotAnswerIsNamedWithTheKeysToCheck) {
  test::temp_dir dir;
  disk_store asker{dir.sub("asker")};
  runtime::experience_peer peer;
  peer.name = "lab-b";
  peer.endpoint = "tcp://127.0.0.1:9"; // nothing listens on the discard port here
  peer.timeout_s = 1;
  peer.configured_at = "d.toml: experience.peers[1]";
  auto pulled = runtime::pull_from_peer(peer, *asker.log, *asker.bank, runtime::trust_set{});
  ASSERT_FALSE(pulled);
  EXPECT_EQ(code_of(pulled.error()), errc::not_found);
  const auto why = describe(pulled.error());
  EXPECT_NE(why.find("no answer from peer 'lab-b' at tcp://127.0.0.1:9 within 1 s"),
            std::string::npos)
    << why;
  EXPECT_NE(why.find("without CURVE (d.toml: experience.peers[1].server_key and .key not set)"),
            std::string::npos)
    << why;
  EXPECT_EQ(asker.log->head(), 0u);
  // Cancelled (a draining daemon): given up within a few hundred ms, not after timeout_s.
  std::atomic<bool> cancel{true};
  peer.timeout_s = 30;
  peer.cancelled = &cancel;
  auto started = std::chrono::steady_clock::now();
  auto stopped = runtime::pull_from_peer(peer, *asker.log, *asker.bank, runtime::trust_set{});
  auto took = std::chrono::steady_clock::now() - started;
  ASSERT_FALSE(stopped);
  EXPECT_EQ(code_of(stopped.error()), errc::interrupted) << describe(stopped.error());
  EXPECT_LT(took, std::chrono::seconds(5));
}

/// load_daemon_config's error text for a config holding `body` ("" when it loads).
std::string config_error(const test::temp_dir& dir, const std::string& body) {
  auto path = dir.sub("d.toml");
  std::ofstream{path} << body;
  auto c = runtime::load_daemon_config(path);
  return c ? std::string{} : describe(c.error());
}

TEST(ExperienceSync, TheDaemonConfigsPeersAreCheckedAndNamed) {
  test::temp_dir dir;
  auto path = dir.sub("d.toml");
  const std::string security = "[security]\nsecret_key = \"keys/d.key\"\nallow = \"keys/allowed\"\n";
  std::ofstream{path} << security
                      << "[experience]\nsync_interval_s = 0\ntrust = \"trust.toml\"\n"
                         "[[experience.peers]]\nname = \"lab-b\"\nendpoint = \"tcp://10.0.0.2:5556\"\n"
                         "server_key = \"keys/lab-b.pub\"\n";
  auto c = runtime::load_daemon_config(path);
  ASSERT_TRUE(c) << describe(c.error());
  ASSERT_EQ(c->experience_peers.size(), 1u);
  const auto& p = c->experience_peers[0];
  EXPECT_EQ(p.name, "lab-b");
  EXPECT_EQ(p.endpoint, "tcp://10.0.0.2:5556");
  EXPECT_EQ(p.server_key, dir.path() + "/keys/lab-b.pub");
  EXPECT_EQ(p.key, dir.path() + "/keys/d.key") << "the daemon's own CURVE key by default";
  EXPECT_EQ(p.timeout_s, 30.0);
  EXPECT_EQ(c->experience_sync_interval_s, 0.0);
  EXPECT_EQ(c->experience_trust, dir.path() + "/trust.toml");
  // Defaults: no peers, a sync every 300 s when there are.
  std::ofstream{path} << "";
  auto defaults = runtime::load_daemon_config(path);
  ASSERT_TRUE(defaults);
  EXPECT_TRUE(defaults->experience_peers.empty());
  EXPECT_EQ(defaults->experience_sync_interval_s, 300.0);
  const std::string peer = "[[experience.peers]]\nname = \"lab-b\"\nendpoint = \"tcp://h:1\"\n";
  for (const auto& [body, why] : std::vector<std::pair<std::string, std::string>>{
         {"[experience]\nsync = 1\n", "experience.sync: unknown key"},
         {"[experience]\nsync_interval_s = -1\n", "experience.sync_interval_s: got -1"},
         {"[experience]\npeers = 3\n", "experience.peers: expected an array of tables"},
         {"[[experience.peers]]\nname = \"lab b\"\nendpoint = \"tcp://h:1\"\n",
          "experience.peers[1].name: 'lab b': expected 1 to 64 letters"},
         {"[[experience.peers]]\nendpoint = \"tcp://h:1\"\n", "experience.peers[1].name: missing"},
         {"[[experience.peers]]\nname = \"x\"\n", "experience.peers[1].endpoint: missing"},
         {peer + "[[experience.peers]]\nname = \"y\"\nendpoint = \"tcp://h:1\"\n",
          "experience.peers[2].endpoint: 'tcp://h:1' is peer 'lab-b''s endpoint too"},
         {"[[experience.peers]]\nname = \"x\"\nendpoint = \"http://h\"\n",
          "experience.peers[1].endpoint: 'http://h' is not a tcp:// or ipc:// endpoint"},
         {"[[experience.peers]]\nname = \"x\"\nendpoint = \"tcp://h:1\"\nport = 1\n",
          "experience.peers[1].port: unknown key"},
         {"[[experience.peers]]\nname = \"x\"\nendpoint = \"tcp://h:1\"\ntimeout_s = 0\n",
          "experience.peers[1].timeout_s: got 0, expected a value in [0.1, 3600]"},
         {peer + peer, "experience.peers[2].name: 'lab-b' names an earlier peer too"},
         {peer + "server_key = \"b.pub\"\n",
          "experience.peers[1].key: the peer's server_key needs this daemon's CURVE key"},
         {peer + "key = \"me.key\"\n",
          "experience.peers[1].server_key: a client key without the peer's server_key"}}) {
    auto e = config_error(dir, body);
    EXPECT_NE(e.find(path + ": " + why), std::string::npos) << body << "\n-> " << e;
  }
  // The shipped example loads, with no peers.
  auto shipped =
    runtime::load_daemon_config(std::string{INFRARSI_SOURCE_DIR} + "/config/daemon.toml");
  ASSERT_TRUE(shipped) << describe(shipped.error());
  EXPECT_TRUE(shipped->experience_peers.empty());
  EXPECT_EQ(shipped->experience_sync_interval_s, 300.0);
}

} // namespace
} // namespace infrarsi
