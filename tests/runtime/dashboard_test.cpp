// The daemon's live dashboard (runtime/dashboard.hpp, issue 17): its [dashboard] config, the
// token rule, plain HTTP against a real `infrarsi daemon` process on 127.0.0.1, and the page in a
// real headless Chromium while two sim runs progress over two real node-runners.

#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "durability/daemon_cluster.hpp"
#include "durability/sim_task.hpp"
#include "durability/tune_process.hpp"
#include "runtime/daemon.hpp"
#include "runtime/dashboard.hpp"
#include "headless_chromium.hpp"
#include "test_util.hpp"

namespace infrarsi {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::file_contains;
using test::file_text;

// -- headless Chromium ------------------------------------------------------------------------

/// The DOM of `url` after Chromium ran its scripts for `virtual_ms` of virtual time (pending
/// fetches hold virtual time back, so the page's first /api/state answer is in it), through
/// tests/headless_chromium.hpp (own temporary profile, process group killed after 90 s).
/// Returns "" when Chromium could not be run or timed out; `log` receives its stderr. `mode`:
/// what Chromium does with the page (--dump-dom, or --screenshot=FILE); `width` x `height`: the
/// window.
std::string chromium_dom(const std::string& url, int virtual_ms, std::string* log = nullptr,
                         const std::vector<std::string>& mode = {"--dump-dom"}, int width = 1280,
                         int height = 4000) {
  test::chromium_options o;
  o.timeout_s = 90.0;
  o.virtual_time_budget_ms = virtual_ms;
  o.width = width;
  o.height = height;
  auto r = test::run_chromium(url, mode, o);
  if (log != nullptr)
    *log = r.err;
  if (r.exit_code != 0)
    return {};
  return r.out;
}

/// The rows the page rendered: run id -> search trials done (the `data-done` of its row).
std::map<std::string, int> dom_runs(const std::string& dom) {
  std::map<std::string, int> runs;
  std::regex row{R"re(<tr class="run" data-run="([^"]+)">(.*?)</tr>)re"};
  std::regex done{R"re(data-done="(\d+)")re"};
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), row); it != std::sregex_iterator();
       ++it) {
    std::string cells = (*it)[2];
    std::smatch m;
    runs[(*it)[1]] = std::regex_search(cells, m, done) ? std::stoi(m[1]) : -1;
  }
  return runs;
}

/// The node names the page rendered.
std::vector<std::string> dom_nodes(const std::string& dom) {
  std::vector<std::string> nodes;
  std::regex row{R"re(<tr class="node" data-node="([^"]+)">)re"};
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), row); it != std::sregex_iterator();
       ++it)
    nodes.push_back((*it)[1]);
  return nodes;
}

// -- a daemon with its dashboard ----------------------------------------------------------------

/// What the daemon printed after `what ` ("clients", "nodes", "dashboard") once it did.
std::string printed(const std::string& output, const std::string& what) {
  std::string found;
  eventually(30s, [&] {
    std::smatch m;
    auto text = file_text(output);
    if (std::regex_search(text, m, std::regex{"(^|\\n)" + what + " ((tcp|http)://[^\\s]+)"})) {
      found = m[2];
      return true;
    }
    return false;
  });
  return found;
}

/// The port of a printed http://127.0.0.1:PORT/ URL (0 when there is none).
int port_of(const std::string& url) {
  std::smatch m;
  return std::regex_search(url, m, std::regex{R"(:(\d+)/$)"}) ? std::stoi(m[1]) : 0;
}

/// A small sim task (every trial sleeps `sleep_s` first) with `trials` search trials.
std::string write_sim_task(const test::temp_dir& dir, const std::string& name, double sleep_s,
                           int trials) {
  auto text = test::small_sim_task_text(
    dir, "sleep " + std::to_string(sleep_s) + " && exec \"$0\" \"$@\"",
    "\n[budget]\ntrials = " + std::to_string(trials)
      + "\nbaseline_repeats = 3\nverify_top = 1\nverify_repeats = 2\n");
  auto path = dir.sub(name + ".toml");
  std::ofstream{path} << text;
  return path;
}

std::string submit(const std::string& client, const std::string& task, const test::temp_dir& dir) {
  auto [rc, text] = test::run_capture({}, {"submit", task, "--daemon", client},
                                      dir.sub("submit.out"));
  EXPECT_EQ(rc, 0) << text;
  return text.substr(0, text.find('\n'));
}

/// A daemon on 127.0.0.1 (system-chosen ports) with its dashboard on.
struct daemon_with_dashboard {
  daemon_with_dashboard(test::temp_dir& d, test::process_set& p, const std::string& dashboard)
    : dir(d), procs(p) {
    config = test::write_daemon_config(dir, "daemon", "tcp://127.0.0.1:0", "tcp://127.0.0.1:0",
                                       "\n[dashboard]\nenabled = true\nport = 0\n" + dashboard);
    pid = procs.add(test::start_in({}, {"daemon", "--config", config}, out));
    clients = printed(out, "clients");
    url = printed(out, "dashboard");
    port = port_of(url);
  }
  test::temp_dir& dir;
  test::process_set& procs;
  std::string config;
  std::string out = dir.sub("daemon.out");
  pid_t pid = -1;
  std::string clients;
  std::string url;
  int port = 0;

  std::string nodes_endpoint() const { return printed(out, "nodes"); }
  /// SIGTERM (drain); the exit code.
  int drain() {
    auto rc = test::terminate(pid, 60s);
    procs.reaped(pid);
    return rc;
  }
};

// -- the configuration ------------------------------------------------------------------------

/// load_daemon_config's error text for a config holding `body` ("" when it loads).
std::string config_error(const test::temp_dir& dir, const std::string& body) {
  auto path = dir.sub("d.toml");
  std::ofstream{path} << body;
  auto c = runtime::load_daemon_config(path);
  return c ? std::string{} : describe(c.error());
}

TEST(DashboardConfig, EveryKeyIsCheckedAndNamedWithItsFile) {
  test::temp_dir dir;
  EXPECT_EQ(config_error(dir, "[dashboard]\nenabled = true\nport = 0\n"), "");
  auto path = dir.sub("d.toml");
  auto e = config_error(dir, "[dashboard]\nenabeld = true\n");
  EXPECT_NE(e.find(path + ": dashboard.enabeld: unknown key"), std::string::npos) << e;
  e = config_error(dir, "[dashboard]\nenabled = \"yes\"\n");
  EXPECT_NE(e.find("dashboard.enabled: expected true or false"), std::string::npos) << e;
  e = config_error(dir, "[dashboard]\nport = 70000\n");
  EXPECT_NE(e.find("dashboard.port: got 70000, expected a value in [0, 65535]"), std::string::npos)
    << e;
  e = config_error(dir, "[dashboard]\nport = 80.5\n");
  EXPECT_NE(e.find("dashboard.port: expected an integer"), std::string::npos) << e;
  e = config_error(dir, "[dashboard]\nbind = 127\n");
  EXPECT_NE(e.find("dashboard.bind: expected a string"), std::string::npos) << e;
  e = config_error(dir, "[dashboard]\ntoken_file = \"t\"\ntoken_env = \"T\"\n");
  EXPECT_NE(e.find("dashboard.token_file: set dashboard.token_file or dashboard.token_env, not "
                   "both"),
            std::string::npos)
    << e;
  e = config_error(dir, "[dashboard]\ntoken_env = \"1TOKEN\"\n");
  EXPECT_NE(e.find("dashboard.token_env: '1TOKEN' is not an environment variable name"),
            std::string::npos)
    << e;
  e = config_error(dir, "[dashbord]\n");
  EXPECT_NE(e.find("dashbord: unknown table"), std::string::npos) << e;
  // Defaults, and a relative token file resolved against the config's directory.
  std::ofstream{path} << "[dashboard]\ntoken_file = \"secret/token\"\n";
  auto c = runtime::load_daemon_config(path);
  ASSERT_TRUE(c) << describe(c.error());
  EXPECT_FALSE(c->dashboard.enabled);
  EXPECT_EQ(c->dashboard.bind, "127.0.0.1");
  EXPECT_EQ(c->dashboard.port, 5580);
  EXPECT_EQ(c->dashboard.token_file, dir.path() + "/secret/token");
  // The shipped example loads, with the documented defaults.
  auto shipped =
    runtime::load_daemon_config(std::string{INFRARSI_SOURCE_DIR} + "/config/daemon.toml");
  ASSERT_TRUE(shipped) << describe(shipped.error());
  EXPECT_FALSE(shipped->dashboard.enabled);
  EXPECT_EQ(shipped->dashboard.bind, "127.0.0.1");
  EXPECT_EQ(shipped->dashboard.port, 5580);
  EXPECT_TRUE(shipped->dashboard.token_file.empty());
  EXPECT_TRUE(shipped->dashboard.token_env.empty());
}

TEST(DashboardConfig, OffLoopbackATokenIsRequired) {
  test::temp_dir dir;
  for (const std::string addr : {"0.0.0.0", "::", "10.1.2.3", "head.example"}) {
    auto e = config_error(dir, "[dashboard]\nenabled = true\nbind = \"" + addr + "\"\n");
    EXPECT_NE(e.find("dashboard.bind: '" + addr + "' is not a loopback address: a token is "
                                                  "required"),
              std::string::npos)
      << e;
    EXPECT_EQ(config_error(dir, "[dashboard]\nenabled = true\nbind = \"" + addr
                                  + "\"\ntoken_env = \"DASH_TOKEN\"\n"),
              "");
  }
  EXPECT_EQ(config_error(dir, "[dashboard]\nenabled = true\nbind = \"127.0.0.2\"\n"), "");
  // The server refuses it too, whoever calls it.
  runtime::dashboard_config d;
  d.bind = "0.0.0.0";
  d.port = 0;
  auto s = runtime::dashboard_server::bind(d, "");
  ASSERT_FALSE(s);
  EXPECT_NE(describe(s.error()).find("a token is required"), std::string::npos);
}

TEST(DashboardConfig, LoopbackAddressesAndTokens) {
  EXPECT_TRUE(runtime::is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(runtime::is_loopback_address("127.255.0.9"));
  EXPECT_TRUE(runtime::is_loopback_address("::1"));
  EXPECT_TRUE(runtime::is_loopback_address("::ffff:127.0.0.1"));
  EXPECT_TRUE(runtime::is_loopback_address("localhost"));
  EXPECT_FALSE(runtime::is_loopback_address("0.0.0.0"));
  EXPECT_FALSE(runtime::is_loopback_address("::"));
  EXPECT_FALSE(runtime::is_loopback_address("128.0.0.1"));
  EXPECT_FALSE(runtime::is_loopback_address("::ffff:10.0.0.1"));
  EXPECT_FALSE(runtime::is_loopback_address("127.0.0.1.example"));
  EXPECT_TRUE(runtime::same_token("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(runtime::same_token("0123456789abcdef", "0123456789abcdeF"));
  EXPECT_FALSE(runtime::same_token("0123456789abcdef", "0123456789abcdef0"));
  EXPECT_FALSE(runtime::same_token("0123456789abcdef", ""));

  test::temp_dir dir;
  runtime::dashboard_config d;
  d.token_file = dir.sub("token");
  auto t = runtime::load_dashboard_token(d, "cfg.toml");
  ASSERT_FALSE(t);
  EXPECT_NE(describe(t.error()).find("cfg.toml: dashboard.token_file '" + d.token_file
                                     + "': cannot be read"),
            std::string::npos)
    << describe(t.error());
  std::ofstream{d.token_file} << "short\n";
  t = runtime::load_dashboard_token(d, "cfg.toml");
  ASSERT_FALSE(t);
  EXPECT_NE(describe(t.error()).find("the token has 5 characters, expected at least 16"),
            std::string::npos)
    << describe(t.error());
  std::ofstream{d.token_file} << "0123456789abcdef0123\n";
  t = runtime::load_dashboard_token(d, "cfg.toml");
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(*t, "0123456789abcdef0123"); // the newline dropped
  d.token_file.clear();
  d.token_env = "INFRARSI_DASHBOARD_TEST_TOKEN_UNSET";
  ::unsetenv(d.token_env.c_str());
  t = runtime::load_dashboard_token(d, "cfg.toml");
  ASSERT_FALSE(t);
  EXPECT_NE(describe(t.error()).find("environment variable INFRARSI_DASHBOARD_TEST_TOKEN_UNSET "
                                     "is not set or empty"),
            std::string::npos)
    << describe(t.error());
}

TEST(DashboardDaemon, RefusesToStartOffLoopbackWithoutATokenOrWithABadOne) {
  test::temp_dir dir;
  // Nothing is bound: the config is refused first.
  auto config = test::write_daemon_config(dir, "open", "tcp://127.0.0.1:0", "tcp://127.0.0.1:0",
                                          "\n[dashboard]\nenabled = true\nbind = \"0.0.0.0\"\n");
  auto [rc, text] = test::run_capture({}, {"daemon", "--config", config}, dir.sub("open.out"));
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find(config + ": dashboard.bind: '0.0.0.0' is not a loopback address: a token "
                               "is required"),
            std::string::npos)
    << text;
  EXPECT_EQ(text.find("\nnodes tcp://"), std::string::npos) << text;
  // A token too short: refused at start, naming the file.
  std::ofstream{dir.sub("token")} << "abc\n";
  config = test::write_daemon_config(dir, "short", "tcp://127.0.0.1:0", "tcp://127.0.0.1:0",
                                     "\n[dashboard]\nenabled = true\nport = 0\ntoken_file = \""
                                       + dir.sub("token") + "\"\n");
  std::tie(rc, text) = test::run_capture({}, {"daemon", "--config", config}, dir.sub("short.out"));
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("dashboard.token_file '" + dir.sub("token")
                      + "': the token has 3 characters, expected at least 16"),
            std::string::npos)
    << text;
  EXPECT_EQ(text.find("dashboard http://"), std::string::npos) << text;
}

// -- plain HTTP against a real daemon ---------------------------------------------------------

TEST(DashboardDaemon, TokenMethodsUnknownRunsAndNoTraversal) {
  test::temp_dir dir;
  test::process_set procs;
  const std::string token = "s3cret-0123456789abcdef";
  std::ofstream{dir.sub("token")} << token << "\n";
  daemon_with_dashboard d{dir, procs, "token_file = \"" + dir.sub("token") + "\"\n"};
  ASSERT_GT(d.port, 0) << file_text(d.out);
  EXPECT_TRUE(file_contains(d.out, "(token required)")) << file_text(d.out);
  // One run, waiting for nodes: known to the store, no report yet.
  auto run = submit(d.clients, write_sim_task(dir, "waiting", 0.1, 4), dir);
  ASSERT_FALSE(run.empty());

  httplib::Client http{"127.0.0.1", d.port};
  http.set_read_timeout(20, 0);
  const httplib::Headers bearer{{"Authorization", "Bearer " + token}};
  // 401 without the token, with a wrong one, with a wrong scheme; the body says how.
  for (const auto& h : {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer nope"}},
                        httplib::Headers{{"Authorization", "Basic " + token}}}) {
    auto r = http.Get("/api/state", h);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
    EXPECT_NE(r->body.find("Authorization: Bearer TOKEN"), std::string::npos) << r->body;
    EXPECT_EQ(r->body.find(run), std::string::npos);
  }
  auto r = http.Get("/?token=wrong-token-0123456789");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  // The page with ?token= (the browser), the state with the header.
  r = http.Get("/?token=" + token);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("<script src=\"/dashboard.js\">"), std::string::npos);
  EXPECT_NE(r->get_header_value("Content-Security-Policy").find("script-src 'self'"),
            std::string::npos);
  // Without nodes the run stops in its doctor stage (nothing can run): a state that holds still.
  ASSERT_TRUE(eventually(30s, [&] {
    r = http.Get("/api/state", bearer);
    return r && r->status == 200 && r->body.find("\"stage\":\"doctor\"") != std::string::npos;
  })) << (r ? r->body : httplib::to_string(r.error()));
  EXPECT_EQ(r->get_header_value("Cache-Control"), "no-store");
  auto doc = nlohmann::json::parse(r->body);
  ASSERT_EQ(doc["daemon_runs"].size(), 1u) << r->body;
  EXPECT_EQ(doc["daemon_runs"][0]["run_id"], run);
  EXPECT_EQ(doc["daemon_runs"][0]["progress"]["search_trials_budget"], 4) << r->body;
  EXPECT_EQ(doc["daemon_runs"][0]["progress"]["search_trials_done"], 0) << r->body;
  EXPECT_EQ(doc["nodes"].size(), 0u);
  // The same document `daemon status --json` prints (the same path, not a second bookkeeping).
  auto [src, status] = test::run_capture({}, {"daemon", "status", "--daemon", d.clients, "--json"},
                                         dir.sub("status.out"));
  ASSERT_EQ(src, 0) << status;
  auto cli = nlohmann::json::parse(status);
  EXPECT_EQ(cli["daemon_runs"], doc["daemon_runs"]);
  EXPECT_EQ(cli["store"], doc["store"]);
  // The script holds no data and loads without a token.
  r = http.Get("/dashboard.js");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("/api/state"), std::string::npos);
  // Read-only: every other method is 405, with or without the token.
  for (const auto& h : {httplib::Headers{}, bearer}) {
    auto p = http.Post("/api/state", h, "{}", "application/json");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->status, 405);
    EXPECT_EQ(p->get_header_value("Allow"), "GET, HEAD");
    auto del = http.Delete("/runs/" + run + "/", h);
    ASSERT_TRUE(del);
    EXPECT_EQ(del->status, 405);
  }
  // Unknown paths and runs: 404 with a short body.
  r = http.Get("/nothing-here", bearer);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, "not found\n");
  r = http.Get("/runs/no-such-run/", bearer);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("no run 'no-such-run'"), std::string::npos) << r->body;
  // A known run without a report yet.
  r = http.Get("/runs/" + run + "/", bearer);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("has no report yet"), std::string::npos) << r->body;
  // Traversal: a file outside the store that a path could reach if it were joined unchecked.
  std::ofstream{dir.sub("daemon-store/runs/report.md")} << "outside any run";
  std::ofstream{dir.sub("daemon-store/report.md")} << "outside any run";
  std::ofstream{dir.sub("secret.txt")} << "top secret";
  for (const std::string& path : std::vector<std::string>{
         "/runs/../report.md", "/runs/./report.md", "/runs/%2e/report.md",
         "/runs/%2e%2e/report.md", "/runs/..%2f..%2fsecret.txt/",
         "/runs/" + run + "/../../../secret.txt", "/runs/" + run + "%2f..%2f..%2f..%2fsecret.txt",
         "/runs/.hidden/report.md", "/runs/" + run + "/report.txt", "/runs//report.md",
         "/runs/%00/report.md", "/../secret.txt"}) {
    r = http.Get(path, bearer);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path << ": " << r->body;
    EXPECT_EQ(r->body.find("outside any run"), std::string::npos) << path;
    EXPECT_EQ(r->body.find("top secret"), std::string::npos) << path;
  }
  // A browser with ?token= sees the run (the page sends the token on with its requests), and its
  // link to the report carries the token.
  std::string log;
  auto dom = chromium_dom(d.url + "?token=" + token, 2000, &log);
  ASSERT_FALSE(dom.empty()) << log;
  EXPECT_EQ(dom_runs(dom).count(run), 1u) << dom;
  EXPECT_NE(dom.find("href=\"/runs/" + run + "/?token=" + token + "\""), std::string::npos) << dom;
  EXPECT_EQ(dom.find("cannot read the daemon's state"), std::string::npos) << dom;
  dom = chromium_dom(d.url, 1000, &log);
  EXPECT_NE(dom.find("unauthorized"), std::string::npos) << dom;
  EXPECT_TRUE(dom_runs(dom).empty()) << dom;
  // SIGTERM: the daemon drains and exits 0; the dashboard stops with it.
  EXPECT_EQ(d.drain(), 0) << file_text(d.out);
  httplib::Client after{"127.0.0.1", d.port};
  after.set_connection_timeout(2, 0);
  EXPECT_FALSE(after.Get("/dashboard.js"));
}

// -- the page in a real browser, while two runs progress ---------------------------------------

TEST(DashboardDaemon, ChromiumSeesBothRunsTheNodesAndTheTrialCountRise) {
  test::temp_dir dir;
  test::process_set procs;
  daemon_with_dashboard d{dir, procs, ""};
  ASSERT_GT(d.port, 0) << file_text(d.out);
  EXPECT_TRUE(file_contains(d.out, "(no token: loopback only)")) << file_text(d.out);
  auto ep = d.nodes_endpoint();
  ASSERT_FALSE(ep.empty()) << file_text(d.out);
  for (const std::string name : {"node-a", "node-b"})
    procs.add(test::start_in({}, {"node", "--connect", ep, "--workdir", dir.sub(name), "--name",
                                  name},
                             dir.sub(name + ".out")));
  ASSERT_TRUE(eventually(30s, [&] {
    return file_contains(d.out, "node node-a joined") && file_contains(d.out, "node node-b joined");
  })) << file_text(d.out);
  const int budget = 10;
  auto run_a = submit(d.clients, write_sim_task(dir, "sim-a", 1.0, budget), dir);
  auto run_b = submit(d.clients, write_sim_task(dir, "sim-b", 1.0, budget), dir);
  ASSERT_FALSE(run_a.empty());
  ASSERT_FALSE(run_b.empty());

  // First load: both runs and both nodes, the runs not yet done with their search.
  std::string log;
  auto dom = chromium_dom(d.url, 4000, &log);
  ASSERT_FALSE(dom.empty()) << "chromium --headless --dump-dom " << d.url
                            << " failed (is Debian's chromium installed? scripts/setup installs "
                               "it): "
                            << log;
  auto runs = dom_runs(dom);
  ASSERT_EQ(runs.size(), 2u) << dom;
  ASSERT_TRUE(runs.count(run_a) == 1 && runs.count(run_b) == 1) << dom;
  auto nodes = dom_nodes(dom);
  std::sort(nodes.begin(), nodes.end());
  EXPECT_EQ(nodes, (std::vector<std::string>{"node-a", "node-b"})) << dom;
  EXPECT_NE(dom.find("<span id=\"node-count\">2</span>"), std::string::npos) << dom;
  EXPECT_NE(dom.find("/" + std::to_string(budget)), std::string::npos) << dom;
  EXPECT_EQ(dom.find("cannot read the daemon's state"), std::string::npos) << dom;
  const int first = runs[run_a] + runs[run_b];
  ASSERT_GE(runs[run_a], 0);
  ASSERT_GE(runs[run_b], 0);
  ASSERT_LT(first, 2 * budget) << "both searches ended before the first load: " << dom;

  // Later loads: the count rises while the runs progress.
  int later = first;
  std::string later_dom;
  auto deadline = std::chrono::steady_clock::now() + 180s;
  while (later <= first && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(2s);
    later_dom = chromium_dom(d.url, 3000, &log);
    auto again = dom_runs(later_dom);
    if (again.size() == 2)
      later = again[run_a] + again[run_b];
  }
  EXPECT_GT(later, first) << "first " << first << "; last page: " << later_dom << log;
  // INFRARSI_DASHBOARD_SCREENSHOT=FILE.png keeps a picture of the page (docs/img/dashboard.png).
  if (const char* shot = std::getenv("INFRARSI_DASHBOARD_SCREENSHOT"); shot != nullptr) {
    chromium_dom(d.url, 3000, &log, {std::string{"--screenshot="} + shot}, 1500, 560);
    EXPECT_TRUE(std::filesystem::exists(shot)) << log;
  }
  std::cout << "dashboard page: search trials done " << first << ", then " << later << " of "
            << 2 * budget << '\n';

  // When a run has written its report, its page serves report.html (the report stage writes it
  // beside report.md and report.json), and the browser renders it.
  auto store = dir.sub("daemon-store");
  ASSERT_TRUE(eventually(300s, [&] {
    return std::filesystem::exists(store + "/runs/" + run_a + "/report.html");
  })) << file_text(d.out);
  httplib::Client http{"127.0.0.1", d.port};
  http.set_read_timeout(20, 0);
  auto r = http.Get("/runs/" + run_a + "/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(r->body, file_text(store + "/runs/" + run_a + "/report.html"));
  r = http.Get("/runs/" + run_a + "/report.md");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, file_text(store + "/runs/" + run_a + "/report.md"));
  r = http.Get("/runs/" + run_a + "/report.json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, file_text(store + "/runs/" + run_a + "/report.json"));
  auto report_dom = chromium_dom("http://127.0.0.1:" + std::to_string(d.port) + "/runs/" + run_a
                                   + "/",
                                 3000, &log);
  EXPECT_NE(report_dom.find(run_a), std::string::npos) << report_dom << log;
  EXPECT_NE(report_dom.find("render-status"), std::string::npos) << report_dom << log;
  EXPECT_EQ(d.drain(), 0) << file_text(d.out);
}

} // namespace
} // namespace infrarsi
