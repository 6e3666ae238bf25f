// Tests for `infrarsi keys generate` and `infrarsi keys show-public` through the real binary
// (stdout and stderr captured apart) and in-process (--help, bad command lines).

#include "runtime/cli.hpp"
#include "runtime/keys.hpp"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "adapters/curve.hpp"
#include "messages/errc.hpp"
#include "test_util.hpp"

namespace infrarsi::runtime {
namespace {

struct binary_result {
  int status = -1;
  std::string out;
  std::string err;
};

std::string read_text(const std::string& path) {
  std::ifstream in{path};
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// Runs the infrarsi binary with `args` (each single-quoted), stdout and stderr into files.
binary_result run_binary(const test::temp_dir& dir, const std::vector<std::string>& args) {
  std::string cmd = INFRARSI_CLI_PATH;
  for (const auto& a : args)
    cmd += " '" + a + "'";
  cmd += " >'" + dir.sub("stdout") + "' 2>'" + dir.sub("stderr") + "'";
  int raw = std::system(cmd.c_str());
  binary_result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_text(dir.sub("stdout"));
  r.err = read_text(dir.sub("stderr"));
  return r;
}

binary_result run_in_process(std::vector<std::string> args) {
  args.insert(args.begin(), "infrarsi");
  std::vector<const char*> argv;
  for (const auto& a : args)
    argv.push_back(a.c_str());
  std::ostringstream out;
  std::ostringstream err;
  binary_result r;
  r.status = run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

unsigned mode_of(const std::string& path) {
  struct ::stat st{};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<unsigned>(st.st_mode & 07777);
}

TEST(KeysCli, GenerateWritesBothFilesAndNeverPrintsTheSecret) {
  test::temp_dir io;
  test::temp_dir dir;
  auto out_dir = dir.sub("keys");
  auto r = run_binary(io, {"keys", "generate", "--out", out_dir, "--name", "node-a"});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  auto base = std::filesystem::absolute(out_dir + "/node-a").lexically_normal().string();
  EXPECT_EQ(mode_of(base + ".key"), 0600u);
  EXPECT_EQ(mode_of(base + ".pub"), 0644u);
  auto keys = adapters::load_secret_key_file(base + ".key");
  ASSERT_TRUE(keys) << describe(keys.error());
  auto pub = adapters::load_public_key_file(base + ".pub");
  ASSERT_TRUE(pub) << describe(pub.error());
  EXPECT_EQ(*pub, keys->public_key);
  EXPECT_EQ(r.out, "public key: " + keys->public_key + "\nsecret key file: " + base
                     + ".key (mode 0600: keep it on this machine)\npublic key file: " + base
                     + ".pub (copy it into the allow-list directory of the daemon that should "
                       "admit this peer)\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.find(keys->secret_key), std::string::npos);

  // Again without --force: refused, the files unchanged, the hint on stderr.
  auto again = run_binary(io, {"keys", "generate", "--out", out_dir, "--name", "node-a"});
  EXPECT_EQ(again.status, exit_failure);
  EXPECT_EQ(again.out, "");
  EXPECT_NE(again.err.find("infrarsi keys generate: not_permitted: '" + out_dir
                           + "/node-a.key' already exists"),
            std::string::npos)
    << again.err;
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
  auto kept = adapters::load_secret_key_file(base + ".key");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->secret_key, keys->secret_key);

  // With --force: a new pair.
  auto forced =
    run_binary(io, {"keys", "generate", "--out", out_dir, "--name", "node-a", "--force"});
  ASSERT_EQ(forced.status, exit_ok) << forced.err;
  auto replaced = adapters::load_secret_key_file(base + ".key");
  ASSERT_TRUE(replaced) << describe(replaced.error());
  EXPECT_NE(replaced->secret_key, keys->secret_key);
  EXPECT_EQ(forced.out.rfind("public key: " + replaced->public_key + "\n", 0), 0u) << forced.out;
  for (const auto& text : {forced.out, forced.err, again.err}) {
    EXPECT_EQ(text.find(replaced->secret_key), std::string::npos);
    EXPECT_EQ(text.find(keys->secret_key), std::string::npos);
  }

  // show-public on the .key (checked) and on the .pub file.
  auto shown = run_binary(io, {"keys", "show-public", base + ".key"});
  ASSERT_EQ(shown.status, exit_ok) << shown.err;
  EXPECT_EQ(shown.out, replaced->public_key + "\n");
  EXPECT_EQ(shown.err, "");
  auto shown_pub = run_binary(io, {"keys", "show-public", base + ".pub"});
  ASSERT_EQ(shown_pub.status, exit_ok) << shown_pub.err;
  EXPECT_EQ(shown_pub.out, replaced->public_key + "\n");
  ASSERT_EQ(::chmod((base + ".key").c_str(), 0644), 0);
  auto exposed = run_binary(io, {"keys", "show-public", base + ".key"});
  EXPECT_EQ(exposed.status, exit_failure);
  EXPECT_EQ(exposed.out, "");
  EXPECT_EQ(exposed.err, "infrarsi keys show-public: not_permitted: " + base + ".key: mode 0644: "
                         "a secret key file must not be accessible to group or others (expected "
                         "mode 0600: chmod 600 '" + base + ".key')\n");
}

TEST(KeysCli, DefaultNameIsTheHostName) {
  test::temp_dir io;
  test::temp_dir dir;
  auto name = default_key_name();
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  std::string expected = host[0] != '\0' ? host : "node";
  for (auto& c : expected)
    if (!(std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-'))
      c = '-';
  EXPECT_EQ(name, expected.substr(0, 64));
  auto r = run_binary(io, {"keys", "generate", "--out", dir.path()});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  EXPECT_EQ(mode_of(dir.sub(name + ".key")), 0600u);
  EXPECT_TRUE(adapters::load_public_key_file(dir.sub(name + ".pub")));
}

TEST(KeysCli, BadCommandLinesExitTwo) {
  test::temp_dir dir;
  EXPECT_EQ(run_in_process({"keys"}).status, exit_usage);
  EXPECT_EQ(run_in_process({"keys", "generate"}).status, exit_usage) << "--out is required";
  auto bad_name = run_in_process({"keys", "generate", "--out", dir.path(), "--name", "a/b"});
  EXPECT_EQ(bad_name.status, exit_usage);
  EXPECT_EQ(bad_name.err, "infrarsi keys generate: invalid_argument: key name 'a/b': expected "
                          "letters, digits, '.', '_' or '-' only\n");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  auto missing = run_in_process({"keys", "show-public", dir.sub("none.key")});
  EXPECT_EQ(missing.status, exit_failure);
  EXPECT_EQ(missing.err, "infrarsi keys show-public: not_found: secret key file '"
                           + dir.sub("none.key") + "': no such file\n");
  auto help = run_in_process({"keys", "generate", "--help"});
  EXPECT_EQ(help.status, exit_ok);
  EXPECT_NE(help.out.find("Usage: infrarsi keys generate"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("the secret key is never printed"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--force"), std::string::npos) << help.out;
}

} // namespace
} // namespace infrarsi::runtime
