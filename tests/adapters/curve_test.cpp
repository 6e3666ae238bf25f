// Tests for adapters/curve.cpp: CURVE keys, key files, allow-lists, and real ZeroMQ sockets over
// tcp://127.0.0.1 (ephemeral ports) behind the ZAP handler: who gets an answer and who does not.

#include "adapters/curve.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "messages/errc.hpp"
#include "test_util.hpp"

namespace infrarsi::adapters {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// How long a peer that must not be answered is waited for.
constexpr auto refused_wait = 1500ms;
/// How long an admitted peer's answer may take (a loaded 2-core machine).
constexpr auto admitted_wait = 10s;

curve_keypair fresh_keys() {
  auto keys = generate_curve_keypair();
  EXPECT_TRUE(keys) << describe(keys.error());
  return keys ? *keys : curve_keypair{};
}

unsigned mode_of(const std::string& path) {
  struct ::stat st{};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<unsigned>(st.st_mode & 07777);
}

std::string read_text(const std::string& path) {
  std::ifstream in{path};
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_text(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream{path} << text;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0);
}

// -- keys ---------------------------------------------------------------------------------------

TEST(CurveKeys, GeneratedKeysAreFortyCharacterZ85AndDifferEachCall) {
  auto a = fresh_keys();
  auto b = fresh_keys();
  for (const auto* key : {&a.public_key, &a.secret_key, &b.public_key, &b.secret_key}) {
    EXPECT_EQ(key->size(), 40u);
    EXPECT_EQ(curve_key_problem(*key), "");
  }
  EXPECT_NE(a.public_key, b.public_key);
  EXPECT_NE(a.secret_key, b.secret_key);
  EXPECT_NE(a.public_key, a.secret_key);
  auto derived = curve_public_of(a.secret_key);
  ASSERT_TRUE(derived) << describe(derived.error());
  EXPECT_EQ(*derived, a.public_key);
}

TEST(CurveKeys, KeyProblemsAreNamedWithoutQuotingTheKey) {
  EXPECT_EQ(curve_key_problem("abc"), "expected 40 Z85 characters, got 3");
  auto key = fresh_keys().public_key;
  auto bad = key;
  bad[6] = '"';
  EXPECT_EQ(curve_key_problem(bad), "character 7 is not a Z85 character");
  bad[6] = ' ';
  EXPECT_EQ(curve_key_problem(bad), "character 7 is not a Z85 character");
  auto secret = curve_public_of(key.substr(0, 39) + "~");
  ASSERT_FALSE(secret);
  EXPECT_EQ(code_of(secret.error()), errc::invalid_argument);
  EXPECT_EQ(describe(secret.error()).find(key.substr(0, 39)), std::string::npos)
    << describe(secret.error());
}

// -- key files ----------------------------------------------------------------------------------

TEST(CurveKeyFiles, RoundTripWithModes0600And0644) {
  test::temp_dir dir;
  auto keys = fresh_keys();
  auto out = dir.sub("keys"); // created by write_key_files
  ASSERT_FALSE(write_key_files(out, "node-a", keys, false));
  EXPECT_EQ(mode_of(out) & 077, 0u) << "a created key directory is private";
  EXPECT_EQ(mode_of(out + "/node-a.key"), 0600u);
  EXPECT_EQ(mode_of(out + "/node-a.pub"), 0644u);
  auto loaded = load_secret_key_file(out + "/node-a.key");
  ASSERT_TRUE(loaded) << describe(loaded.error());
  EXPECT_EQ(loaded->public_key, keys.public_key);
  EXPECT_EQ(loaded->secret_key, keys.secret_key);
  auto pub = load_public_key_file(out + "/node-a.pub");
  ASSERT_TRUE(pub) << describe(pub.error());
  EXPECT_EQ(*pub, keys.public_key);
  auto pub_text = read_text(out + "/node-a.pub");
  EXPECT_NE(pub_text.find("public = \"" + keys.public_key + "\"\n"), std::string::npos);
  EXPECT_EQ(pub_text.find(keys.secret_key), std::string::npos);
  EXPECT_NE(read_text(out + "/node-a.key").find("secret = \"" + keys.secret_key + "\"\n"),
            std::string::npos);
  // Leftover temporary files: none.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator{out})
    ++files;
  EXPECT_EQ(files, 2u);
}

TEST(CurveKeyFiles, RefusesToOverwriteUnlessAsked) {
  test::temp_dir dir;
  auto first = fresh_keys();
  auto second = fresh_keys();
  ASSERT_FALSE(write_key_files(dir.path(), "n", first, false));
  auto again = write_key_files(dir.path(), "n", second, false);
  EXPECT_EQ(code_of(again), errc::not_permitted);
  EXPECT_NE(describe(again).find(dir.sub("n.key")), std::string::npos) << describe(again);
  auto kept = load_secret_key_file(dir.sub("n.key"));
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->secret_key, first.secret_key);
  // Only the .pub file exists: still refused, and no .key file is written.
  fs::remove(dir.sub("n.key"));
  EXPECT_EQ(code_of(write_key_files(dir.path(), "n", second, false)), errc::not_permitted);
  EXPECT_FALSE(fs::exists(dir.sub("n.key")));
  ASSERT_FALSE(write_key_files(dir.path(), "n", second, true));
  auto replaced = load_secret_key_file(dir.sub("n.key"));
  ASSERT_TRUE(replaced) << describe(replaced.error());
  EXPECT_EQ(replaced->secret_key, second.secret_key);
  EXPECT_EQ(mode_of(dir.sub("n.key")), 0600u);
  EXPECT_EQ(*load_public_key_file(dir.sub("n.pub")), second.public_key);
}

TEST(CurveKeyFiles, BadNamesAndMismatchedPairsAreNotWritten) {
  test::temp_dir dir;
  auto keys = fresh_keys();
  for (const char* name : {"", "../x", "a b", ".hidden", "a/b"}) {
    auto bad = write_key_files(dir.path(), name, keys, false);
    EXPECT_EQ(code_of(bad), errc::invalid_argument) << name;
  }
  auto other = fresh_keys();
  auto mixed = write_key_files(dir.path(), "m", {keys.public_key, other.secret_key}, false);
  EXPECT_EQ(code_of(mixed), errc::invalid_argument);
  EXPECT_EQ(describe(mixed).find(other.secret_key), std::string::npos);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(CurveKeyFiles, GroupOrWorldReadableSecretFileIsRefused) {
  test::temp_dir dir;
  ASSERT_FALSE(write_key_files(dir.path(), "n", fresh_keys(), false));
  auto path = dir.sub("n.key");
  for (mode_t mode : {0644, 0640, 0604, 0660}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    auto keys = load_secret_key_file(path);
    ASSERT_FALSE(keys) << std::oct << mode;
    EXPECT_EQ(code_of(keys.error()), errc::not_permitted);
    auto text = describe(keys.error());
    char mode_text[8];
    std::snprintf(mode_text, sizeof mode_text, "%04o", static_cast<unsigned>(mode));
    EXPECT_EQ(text, "not_permitted: " + path + ": mode " + mode_text
                      + ": a secret key file must not be accessible to group or others (expected "
                        "mode 0600: chmod 600 '"
                      + path + "')");
  }
  ASSERT_EQ(::chmod(path.c_str(), 0400), 0);
  EXPECT_TRUE(load_secret_key_file(path)) << "read-only by its owner is fine";
}

TEST(CurveKeyFiles, GarbageFilesAreRefusedNamingTheFile) {
  test::temp_dir dir;
  auto keys = fresh_keys();
  auto other = fresh_keys();
  struct bad_file {
    std::string text;
    std::string expected; // a part of the error after the path
  };
  std::vector<bad_file> cases{
    {"hello world\n", ":1:7: not a secret key file"},
    {"", ": missing public = \"<40 Z85 characters>\""},
    {"public = \"" + keys.public_key + "\"\n", ": missing secret = \"<40 Z85 characters>\""},
    {"public = \"" + keys.public_key + "\"\nsecret = 42\n",
     ":2:10: secret: expected a string of 40 Z85 characters"},
    {"public = \"" + keys.public_key + "\"\nsecret = \"" + keys.secret_key.substr(1) + "\"\n",
     ":2:10: secret key: expected 40 Z85 characters, got 39"},
    {"public = \"" + keys.public_key + "\"\nsecret = \"" + keys.secret_key + "\"\nname = \"x\"\n",
     ":3:8: unexpected key 'name'"},
    {"public = \"" + other.public_key + "\"\nsecret = \"" + keys.secret_key + "\"\n",
     ": the public key does not belong to the secret key (expected " + keys.public_key + ")"},
    // An unterminated string: toml++'s description is not shown, it could quote the secret.
    {"public = \"" + keys.public_key + "\"\nsecret = \"" + keys.secret_key + "\n",
     ": not a secret key file (expected TOML lines public = \"...\" and secret = \"...\")"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    auto path = dir.sub("bad" + std::to_string(i) + ".key");
    write_text(path, cases[i].text);
    auto loaded = load_secret_key_file(path);
    ASSERT_FALSE(loaded) << cases[i].text;
    EXPECT_EQ(code_of(loaded.error()), errc::invalid_argument) << describe(loaded.error());
    auto text = describe(loaded.error());
    EXPECT_EQ(text.rfind("invalid_argument: " + path, 0), 0u) << text;
    EXPECT_NE(text.find(cases[i].expected), std::string::npos) << text;
    EXPECT_EQ(text.find(keys.secret_key.substr(1, 20)), std::string::npos) << text;
  }
  auto missing = load_secret_key_file(dir.sub("nope.key"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(code_of(missing.error()), errc::not_found);
  EXPECT_NE(describe(missing.error()).find(dir.sub("nope.key")), std::string::npos);
  EXPECT_EQ(code_of(load_secret_key_file(dir.path()).error()), errc::invalid_argument);
  auto big = dir.sub("big.key");
  write_text(big, std::string(5000, '#'));
  auto too_big = load_secret_key_file(big);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(describe(too_big.error()), "invalid_argument: " + big
                                         + ": 5000 bytes, more than the limit of 4096 bytes for "
                                           "a secret key file");
}

TEST(CurveKeyFiles, PublicFileWithASecretOrABadKeyIsRefused) {
  test::temp_dir dir;
  auto keys = fresh_keys();
  ASSERT_FALSE(write_key_files(dir.path(), "n", keys, false));
  auto pub = load_public_key_file(dir.sub("n.key")); // the secret file given as a public one
  ASSERT_FALSE(pub);
  EXPECT_EQ(code_of(pub.error()), errc::not_permitted);
  EXPECT_NE(describe(pub.error()).find(dir.sub("n.key") + ":4:10: a public key file holds a "
                                                          "secret key"),
            std::string::npos)
    << describe(pub.error());
  EXPECT_EQ(describe(pub.error()).find(keys.secret_key), std::string::npos);
  write_text(dir.sub("short.pub"), "public = \"abc\"\n", 0644);
  auto bad = load_public_key_file(dir.sub("short.pub"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(describe(bad.error()), "invalid_argument: " + dir.sub("short.pub")
                                     + ":1:10: public key: expected 40 Z85 characters, got 3");
}

// -- allow-lists --------------------------------------------------------------------------------

TEST(CurveAllowList, DirectoryOfPubFiles) {
  test::temp_dir dir;
  auto a = fresh_keys();
  auto b = fresh_keys();
  ASSERT_FALSE(write_key_files(dir.sub("keys"), "node-a", a, false));
  ASSERT_FALSE(write_key_files(dir.sub("keys"), "node-b", b, false));
  auto allow = dir.sub("allow");
  fs::create_directories(allow);
  fs::copy_file(dir.sub("keys/node-a.pub"), allow + "/node-a.pub");
  fs::copy_file(dir.sub("keys/node-b.pub"), allow + "/client.b.pub");
  write_text(allow + "/README", "not a key\n", 0644);
  auto list = load_allow_list(allow);
  ASSERT_TRUE(list) << describe(list.error());
  EXPECT_EQ(*list, (curve_allow_list{{a.public_key, "node-a"}, {b.public_key, "client.b"}}));

  fs::copy_file(dir.sub("keys/node-a.pub"), allow + "/again.pub");
  auto twice = load_allow_list(allow);
  ASSERT_FALSE(twice);
  EXPECT_EQ(describe(twice.error()), "invalid_argument: " + allow + "/node-a.pub: the same public "
                                       "key as " + allow + "/again.pub (one file per key)");
  fs::remove(allow + "/again.pub");

  write_text(allow + "/broken.pub", "public = \"" + a.public_key.substr(2) + "\"\n", 0644);
  auto broken = load_allow_list(allow);
  ASSERT_FALSE(broken);
  EXPECT_EQ(describe(broken.error()), "invalid_argument: " + allow
                                        + "/broken.pub:1:10: public key: expected 40 Z85 "
                                          "characters, got 38");
  fs::remove(allow + "/broken.pub");

  fs::copy_file(dir.sub("keys/node-a.key"), allow + "/secret.pub");
  auto secret = load_allow_list(allow);
  ASSERT_FALSE(secret);
  EXPECT_EQ(code_of(secret.error()), errc::not_permitted);
  EXPECT_NE(describe(secret.error()).find(allow + "/secret.pub"), std::string::npos);
  fs::remove(allow + "/secret.pub");

  fs::create_directories(dir.sub("empty"));
  auto empty = load_allow_list(dir.sub("empty"));
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST(CurveAllowList, TextFileWithCommentsAndNames) {
  test::temp_dir dir;
  auto a = fresh_keys().public_key;
  auto b = fresh_keys().public_key;
  auto path = dir.sub("allow.txt");
  write_text(path, "# nodes of rack 3\n\n  " + a + "   node-a  # the first\n" + b + "\n#" + a
                     + " (commented out)\n",
             0644);
  auto list = load_allow_list(path);
  ASSERT_TRUE(list) << describe(list.error());
  EXPECT_EQ(*list, (curve_allow_list{{a, "node-a"}, {b, ""}}));

  struct bad_text {
    std::string text;
    std::string error;
  };
  std::vector<bad_text> cases{
    {"# ok\n" + a + "\nnotakey\n", ":3: expected a Z85 CURVE public key: expected 40 Z85 "
                                   "characters, got 7"},
    {a + " node a\n", ":1: expected KEY or KEY NAME (and an optional # comment), got 3 fields"},
    {a + " no/slash\n", ":1: name 'no/slash': expected letters, digits, '.', '_' or '-' only"},
    {a + "\n\n" + a + " again\n", ":3: the same key as line 1"},
    {a.substr(0, 20) + "~" + a.substr(21) + "\n",
     ":1: expected a Z85 CURVE public key: character 21 is not a Z85 character"},
  };
  for (const auto& c : cases) {
    write_text(path, c.text, 0644);
    auto bad = load_allow_list(path);
    ASSERT_FALSE(bad) << c.text;
    EXPECT_EQ(describe(bad.error()), "invalid_argument: " + path + c.error);
  }
  auto missing = load_allow_list(dir.sub("none"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(code_of(missing.error()), errc::not_found);
  EXPECT_NE(describe(missing.error()).find(dir.sub("none")), std::string::npos);
}

// -- real sockets behind the ZAP handler ---------------------------------------------------------

/// What the echo server received from one peer.
struct received {
  std::string body;
  std::string user_id;
  std::string peer_name;
};

/// A ROUTER that answers every [identity, body] with [identity, "echo:" + body], on its own
/// thread (the only one that touches the socket after start()).
class echo_server {
public:
  /// `socket` is configured (CURVE or not) and not yet bound.
  explicit echo_server(std::unique_ptr<zmq::socket_t> socket) : socket_(std::move(socket)) {
    socket_->set(zmq::sockopt::linger, 0);
    socket_->bind("tcp://127.0.0.1:*");
    endpoint_ = socket_->get(zmq::sockopt::last_endpoint);
  }
  ~echo_server() { stop(); }

  void start() {
    thread_ = std::thread{[this] { serve(); }};
  }
  void stop() {
    stop_ = true;
    if (thread_.joinable())
      thread_.join();
    socket_.reset();
  }
  [[nodiscard]] const std::string& endpoint() const { return endpoint_; }
  [[nodiscard]] std::vector<received> messages() const {
    std::lock_guard<std::mutex> guard{mutex_};
    return received_;
  }
  [[nodiscard]] zmq::socket_t& socket() { return *socket_; }

private:
  void serve() {
    while (!stop_) {
      zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      if ((item.revents & ZMQ_POLLIN) == 0)
        continue;
      zmq::message_t identity;
      zmq::message_t body;
      if (!socket_->recv(identity) || !identity.more() || !socket_->recv(body))
        continue;
      received r;
      r.body = body.to_string();
      // Properties of the connection (ZAP user id and metadata); absent on a NULL socket.
      try {
        r.user_id = body.gets("User-Id");
      } catch (const zmq::error_t&) {
      }
      try {
        r.peer_name = body.gets("X-Peer-Name");
      } catch (const zmq::error_t&) {
      }
      {
        std::lock_guard<std::mutex> guard{mutex_};
        received_.push_back(r);
      }
      socket_->send(identity, zmq::send_flags::sndmore);
      socket_->send(zmq::buffer("echo:" + r.body), zmq::send_flags::none);
    }
  }

  std::unique_ptr<zmq::socket_t> socket_;
  std::string endpoint_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<received> received_;
};

/// Sends `body` on `client` and waits up to `wait` for one reply.
std::optional<std::string> request(zmq::socket_t& client, const std::string& body,
                                   std::chrono::milliseconds wait) {
  client.send(zmq::buffer(body), zmq::send_flags::dontwait); // queued until the handshake
  zmq::pollitem_t item{client.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, wait);
  if ((item.revents & ZMQ_POLLIN) == 0)
    return std::nullopt;
  zmq::message_t reply;
  if (!client.recv(reply))
    return std::nullopt;
  return reply.to_string();
}

/// The daemon's side: a context, a ZAP handler for domain "nodes", a CURVE ROUTER behind it.
class CurveSockets : public ::testing::Test {
protected:
  zmq::context_t ctx;
  curve_keypair server_keys = fresh_keys();
  curve_keypair node_a = fresh_keys();
  curve_keypair stranger = fresh_keys();
  std::mutex refusals_mutex;
  std::condition_variable refusals_cv;
  std::vector<zap_refusal> refusals;
  zap_handler zap{ctx, {{"nodes", {{node_a.public_key, "node-a"}}}},
                  [this](const zap_refusal& r) {
                    std::lock_guard<std::mutex> guard{refusals_mutex};
                    refusals.push_back(r);
                    refusals_cv.notify_all();
                  }};
  std::unique_ptr<echo_server> server;

  void SetUp() override {
    ASSERT_FALSE(zap.start());
    auto socket = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
    ASSERT_FALSE(make_curve_server(*socket, server_keys, zap, "nodes"));
    server = std::make_unique<echo_server>(std::move(socket));
    server->start();
  }
  void TearDown() override {
    server.reset(); // server sockets close before the handler stops
    zap.stop();
  }

  std::unique_ptr<zmq::socket_t> curve_client(const curve_keypair& keys,
                                              const std::string& server_public) {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    EXPECT_FALSE(make_curve_client(*s, keys, server_public));
    s->connect(server->endpoint());
    return s;
  }

  /// Waits up to `wait` for at least `n` refusals and returns them all.
  std::vector<zap_refusal> refusals_after(std::size_t n, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock{refusals_mutex};
    refusals_cv.wait_for(lock, wait, [&] { return refusals.size() >= n; });
    return refusals;
  }
};

TEST_F(CurveSockets, AnAllowedClientGetsAReplyAndIsKnownByItsKey) {
  auto client = curve_client(node_a, server_keys.public_key);
  auto reply = request(*client, "ping", admitted_wait);
  ASSERT_TRUE(reply) << "the allowed client got no reply";
  EXPECT_EQ(*reply, "echo:ping");
  auto got = server->messages();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, "ping");
  EXPECT_EQ(got[0].user_id, node_a.public_key);
  EXPECT_EQ(got[0].peer_name, "node-a");
  EXPECT_EQ(zap.admitted(), 1u);
  EXPECT_EQ(zap.refused(), 0u);
  EXPECT_TRUE(refusals_after(0, 0ms).empty());
}

TEST_F(CurveSockets, AClientNotOnTheAllowListGetsNothingAndIsReported) {
  auto client = curve_client(stranger, server_keys.public_key);
  EXPECT_FALSE(request(*client, "let me in", refused_wait));
  EXPECT_TRUE(server->messages().empty());
  auto seen = refusals_after(1, 5000ms);
  ASSERT_GE(seen.size(), 1u);
  EXPECT_EQ(seen[0].domain, "nodes");
  EXPECT_EQ(seen[0].mechanism, "CURVE");
  EXPECT_EQ(seen[0].address, "127.0.0.1");
  EXPECT_EQ(seen[0].public_key, stranger.public_key);
  EXPECT_EQ(seen[0].reason, "public key not on the allow-list of domain 'nodes'");
  for (const auto& r : seen)
    for (const auto* field : {&r.domain, &r.address, &r.mechanism, &r.public_key, &r.reason}) {
      EXPECT_EQ(field->find(stranger.secret_key), std::string::npos);
      EXPECT_EQ(field->find(server_keys.secret_key), std::string::npos);
    }
  EXPECT_EQ(zap.admitted(), 0u);
  EXPECT_GE(zap.refused(), 1u);
}

/// Handshake events of a socket, through zmq_socket_monitor.
std::vector<std::uint16_t> handshake_events(zmq::socket_t& monitor, std::chrono::milliseconds wait) {
  std::vector<std::uint16_t> events;
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    zmq::pollitem_t item{monitor.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(50));
    if ((item.revents & ZMQ_POLLIN) == 0)
      continue;
    zmq::message_t head;
    zmq::message_t address;
    if (!monitor.recv(head) || !monitor.recv(address) || head.size() < 6)
      continue;
    std::uint16_t event = 0;
    std::memcpy(&event, head.data(), sizeof event);
    events.push_back(event);
  }
  return events;
}

TEST(CurvePlainText, APlainTextClientFailsTheHandshakeAndIsNeverHeard) {
  zmq::context_t ctx;
  std::vector<zap_refusal> refusals;
  std::mutex refusals_mutex;
  auto server_keys = fresh_keys();
  zap_handler zap{ctx, {{"nodes", {}}}, [&](const zap_refusal& r) {
                    std::lock_guard<std::mutex> guard{refusals_mutex};
                    refusals.push_back(r);
                  }};
  ASSERT_FALSE(zap.start());
  auto socket = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
  ASSERT_FALSE(make_curve_server(*socket, server_keys, zap, "nodes"));
  // Watch the server's handshakes (set up before its thread owns the socket).
  ASSERT_EQ(zmq_socket_monitor(socket->handle(), "inproc://curve-test-monitor",
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                 | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH),
            0);
  zmq::socket_t monitor{ctx, zmq::socket_type::pair};
  monitor.set(zmq::sockopt::linger, 0);
  monitor.connect("inproc://curve-test-monitor");
  {
    echo_server server{std::move(socket)};
    server.start();
    zmq::socket_t client{ctx, zmq::socket_type::dealer};
    client.set(zmq::sockopt::linger, 0);
    client.connect(server.endpoint());
    EXPECT_FALSE(request(client, "hello in plain text", refused_wait));
    EXPECT_TRUE(server.messages().empty());
    auto events = handshake_events(monitor, 500ms);
    ASSERT_FALSE(events.empty()) << "the server saw no handshake";
    for (auto e : events)
      EXPECT_EQ(e, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) << "a mechanism mismatch, never ZAP";
  }
  // The mechanisms differ (NULL against CURVE): the handshake fails before ZAP is asked.
  EXPECT_EQ(zap.admitted(), 0u);
  EXPECT_EQ(zap.refused(), 0u);
  std::lock_guard<std::mutex> guard{refusals_mutex};
  EXPECT_TRUE(refusals.empty());
}

TEST(CurvePlainText, ANullSocketWithAZapDomainIsRefusedByTheHandler) {
  // A plain-text (NULL) server socket that names a ZAP domain: ZeroMQ asks the handler, which
  // refuses NULL in every domain.
  zmq::context_t ctx;
  std::vector<zap_refusal> refusals;
  std::mutex refusals_mutex;
  std::condition_variable cv;
  zap_handler zap{ctx, {{"nodes", {}}}, [&](const zap_refusal& r) {
                    std::lock_guard<std::mutex> guard{refusals_mutex};
                    refusals.push_back(r);
                    cv.notify_all();
                  }};
  ASSERT_FALSE(zap.start());
  auto socket = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
  socket->set(zmq::sockopt::zap_domain, "nodes");
  echo_server server{std::move(socket)};
  server.start();
  zmq::socket_t client{ctx, zmq::socket_type::dealer};
  client.set(zmq::sockopt::linger, 0);
  client.connect(server.endpoint());
  EXPECT_FALSE(request(client, "plain", refused_wait));
  EXPECT_TRUE(server.messages().empty());
  std::unique_lock<std::mutex> lock{refusals_mutex};
  cv.wait_for(lock, 5s, [&] { return !refusals.empty(); });
  ASSERT_FALSE(refusals.empty());
  EXPECT_EQ(refusals[0].mechanism, "NULL");
  EXPECT_EQ(refusals[0].domain, "nodes");
  EXPECT_EQ(refusals[0].address, "127.0.0.1");
  EXPECT_EQ(refusals[0].public_key, "");
  EXPECT_EQ(refusals[0].reason, "mechanism NULL refused: CURVE is required");
  lock.unlock();
  server.stop();
  zap.stop();
}

TEST_F(CurveSockets, AClientWithTheWrongServerKeyGetsNothing) {
  // node_a is allowed, but it expects another server (an impostor's or a stale key): its HELLO
  // cannot be opened by this server, so the handshake fails before ZAP.
  auto client = curve_client(node_a, stranger.public_key);
  EXPECT_FALSE(request(*client, "ping", refused_wait));
  EXPECT_TRUE(server->messages().empty());
  EXPECT_EQ(zap.admitted(), 0u);
  EXPECT_EQ(zap.refused(), 0u);
}

TEST_F(CurveSockets, ReplacingTheAllowListAtRunTimeAdmitsANewKey) {
  auto before = curve_client(stranger, server_keys.public_key);
  EXPECT_FALSE(request(*before, "first", refused_wait));
  ASSERT_EQ(refusals_after(1, 5000ms).size(), 1u);
  before.reset(); // its queued "first" must not slip in once its key is allowed
  auto connected = curve_client(node_a, server_keys.public_key);
  ASSERT_EQ(request(*connected, "a1", admitted_wait), std::optional<std::string>{"echo:a1"});

  // Rotation: the stranger's key in, node-a's out.
  zap.set_allow_list("nodes", {{stranger.public_key, "node-b"}});
  auto after = curve_client(stranger, server_keys.public_key);
  ASSERT_EQ(request(*after, "second", admitted_wait), std::optional<std::string>{"echo:second"});
  auto got = server->messages();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].user_id, stranger.public_key);
  EXPECT_EQ(got[1].peer_name, "node-b");
  // ZAP is asked at the handshake only: node-a's open connection stays; a new one is refused.
  EXPECT_EQ(request(*connected, "a2", admitted_wait), std::optional<std::string>{"echo:a2"});
  auto reconnect = curve_client(node_a, server_keys.public_key);
  EXPECT_FALSE(request(*reconnect, "a3", refused_wait));
  auto seen = refusals_after(2, 5000ms);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].public_key, node_a.public_key);
  EXPECT_EQ(server->messages().size(), 3u); // a1, second, a2
}

TEST_F(CurveSockets, AStoppedHandlerAdmitsNobody) {
  // Fail closed: the server socket enforces ZAP, so without a handler no handshake succeeds.
  zap.stop();
  auto client = curve_client(node_a, server_keys.public_key);
  EXPECT_FALSE(request(*client, "ping", refused_wait));
  EXPECT_TRUE(server->messages().empty());
}

TEST(CurveServer, IsOnlyMadeBehindARunningHandlerThatServesTheDomain) {
  zmq::context_t ctx;
  auto keys = fresh_keys();
  zap_handler zap{ctx, {{"nodes", {}}}};
  zmq::socket_t socket{ctx, zmq::socket_type::router};
  auto not_running = make_curve_server(socket, keys, zap, "nodes");
  EXPECT_EQ(code_of(not_running), errc::not_permitted);
  EXPECT_NE(describe(not_running).find("ZAP handler is not running"), std::string::npos);
  ASSERT_FALSE(zap.start());
  EXPECT_EQ(code_of(zap.start()), errc::not_permitted) << "already running";
  zap_handler second{ctx, {{"nodes", {}}}};
  auto taken = second.start();
  EXPECT_EQ(code_of(taken), errc::io_error);
  EXPECT_NE(describe(taken).find("inproc://zeromq.zap.01"), std::string::npos);
  auto unserved = make_curve_server(socket, keys, zap, "clients");
  EXPECT_EQ(code_of(unserved), errc::invalid_argument);
  EXPECT_EQ(describe(unserved), "invalid_argument: CURVE server: the ZAP handler has no "
                                "allow-list for domain 'clients'");
  auto other = fresh_keys();
  auto mixed = make_curve_server(socket, {keys.public_key, other.secret_key}, zap, "nodes");
  EXPECT_EQ(code_of(mixed), errc::invalid_argument);
  EXPECT_EQ(describe(mixed).find(other.secret_key), std::string::npos);
  EXPECT_EQ(socket.get(zmq::sockopt::curve_server), 0) << "nothing set on a refused socket";
  zap.set_allow_list("clients", {});
  EXPECT_TRUE(zap.serves("clients"));
  ASSERT_FALSE(make_curve_server(socket, keys, zap, "clients"));
  EXPECT_EQ(socket.get(zmq::sockopt::curve_server), 1);
  EXPECT_EQ(socket.get(zmq::sockopt::zap_domain), "clients");
  socket.close();
  zap.stop();
  EXPECT_FALSE(zap.running());
}

} // namespace
} // namespace infrarsi::adapters
