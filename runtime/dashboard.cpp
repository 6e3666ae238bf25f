// The daemon's dashboard over HTTP (runtime/dashboard.hpp, docs/daemon.md "Dashboard").

#include "runtime/dashboard.hpp"

#include <arpa/inet.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "messages/errc.hpp"
#include "store/event_log.hpp"

namespace infrarsi::runtime {

namespace fs = std::filesystem;

bool is_loopback_address(const std::string& host) {
  if (host == "localhost")
    return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6))
      return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

namespace {

std::array<unsigned char, 32> sha256(std::string_view bytes) {
  std::array<unsigned char, 32> out{};
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), out.data(), &n, EVP_sha256(), nullptr);
  return out;
}

} // namespace

bool same_token(std::string_view expected, std::string_view given) {
  if (given.empty() || expected.empty())
    return false;
  // Equal-length digests: the comparison's time depends on neither token's content or length.
  auto a = sha256(expected);
  auto b = sha256(given);
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

caf::expected<std::string> load_dashboard_token(const dashboard_config& c,
                                                const std::string& source) {
  std::string token;
  std::string where;
  if (!c.token_file.empty()) {
    where = source + ": dashboard.token_file '" + c.token_file + "'";
    std::ifstream in{c.token_file, std::ios::binary};
    if (!in)
      return make_error(errc::invalid_argument, where + ": cannot be read");
    token.assign(std::istreambuf_iterator<char>{in}, {});
  } else if (!c.token_env.empty()) {
    where = source + ": dashboard.token_env: the environment variable " + c.token_env;
    const char* v = std::getenv(c.token_env.c_str());
    if (v == nullptr || *v == '\0')
      return make_error(errc::invalid_argument, where + " is not set or empty");
    token = v;
  } else {
    return std::string{};
  }
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back())))
    token.pop_back();
  if (token.size() < 16)
    return make_error(errc::invalid_argument,
                      where + ": the token has " + std::to_string(token.size())
                        + " characters, expected at least 16 (e.g. `openssl rand -hex 32`)");
  for (char ch : token)
    if (!std::isgraph(static_cast<unsigned char>(ch)))
      return make_error(errc::invalid_argument,
                        where + ": the token must be printable ASCII without spaces");
  return token;
}

namespace {

// The page: a table of runs and one of nodes, filled by dashboard.js from /api/state.
constexpr const char* index_html = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>infrarsi daemon</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .2em; }
h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: .25em .7em; border-bottom: 1px solid #ddd; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
#status { color: #555; }
#error { color: #b00; font-weight: bold; }
.active { color: #060; }
progress { width: 6em; vertical-align: middle; }
</style>
</head>
<body>
<h1>infrarsi daemon</h1>
<div id="status">loading…</div>
<div id="error"></div>
<h2>Runs (<span id="run-count">0</span>)</h2>
<table id="runs">
<thead><tr><th>run</th><th>task</th><th>state</th><th>stage</th><th>search trials</th>
<th>in flight</th><th>best measured</th><th>best verified (95% interval)</th><th>promoted</th></tr></thead>
<tbody></tbody>
</table>
<h2>Nodes (<span id="node-count">0</span>)</h2>
<table id="nodes">
<thead><tr><th>node</th><th>last heartbeat</th><th>slots busy</th><th>current trials</th>
<th>trials assigned</th></tr></thead>
<tbody></tbody>
</table>
<p id="totals"></p>
<script src="/dashboard.js"></script>
</body>
</html>
)html";

// Every value from the daemon goes into the page as text (textContent), never as markup: run ids,
// task and node names come from submitters and peers.
constexpr const char* dashboard_js = R"js("use strict";
const token = new URLSearchParams(location.search).get("token");
const query = token ? "?token=" + encodeURIComponent(token) : "";
const $ = (id) => document.getElementById(id);

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
const speedup = (v) => (typeof v === "number" ? v.toFixed(3) + "x" : "–");

function renderRuns(runs) {
  const body = document.querySelector("#runs tbody");
  body.replaceChildren();
  for (const r of runs) {
    const p = r.progress || {};
    const tr = document.createElement("tr");
    tr.className = "run";
    tr.dataset.run = r.run_id;
    const link = document.createElement("a");
    link.href = "/runs/" + encodeURIComponent(r.run_id) + "/" + query;
    link.textContent = r.run_id;
    cell(tr, "").appendChild(link);
    cell(tr, r.task || "");
    cell(tr, r.active ? "active"
             : r.status === undefined ? "ended"
             : r.status === 0 ? "finished" : "ended (exit status " + r.status + ")",
         r.active ? "active" : "");
    cell(tr, p.stage || r.stage || "");
    const done = p.search_trials_done || 0;
    const budget = p.search_trials_budget;
    const t = cell(tr, done + "/" + (budget === null || budget === undefined ? "?" : budget),
                   "num trials");
    t.dataset.done = String(done);
    if (typeof budget === "number" && budget > 0) {
      const bar = document.createElement("progress");
      bar.max = budget;
      bar.value = Math.min(done, budget);
      t.append(" ", bar);
    }
    cell(tr, String(p.attempts_in_flight || 0), "num");
    cell(tr, speedup(p.best_measured_speedup), "num");
    cell(tr, typeof p.best_verified_speedup === "number"
               ? speedup(p.best_verified_speedup) + " [" + p.best_verified_ci[0].toFixed(3) + ", "
                   + p.best_verified_ci[1].toFixed(3) + "]"
               : "–", "num");
    cell(tr, p.promoted === undefined ? "" : (p.promoted ? "yes" : "no"));
    body.appendChild(tr);
  }
  $("run-count").textContent = String(runs.length);
}

function renderNodes(nodes) {
  const body = document.querySelector("#nodes tbody");
  body.replaceChildren();
  for (const n of nodes) {
    const tr = document.createElement("tr");
    tr.className = "node";
    tr.dataset.node = n.name;
    cell(tr, n.name);
    cell(tr, typeof n.heard_s_ago === "number" ? n.heard_s_ago.toFixed(1) + " s ago" : "?", "num");
    const slots = n.slots || [];
    const busy = slots.filter((s) => s.busy);
    cell(tr, busy.length + "/" + slots.length, "num");
    cell(tr, busy.map((s) => "slot " + s.name + ": " + s.running.run_id + " trial "
                              + s.running.trial_id + "#" + s.running.attempt).join("\n") || "idle");
    cell(tr, String(n.trials_assigned || 0), "num");
    body.appendChild(tr);
  }
  $("node-count").textContent = String(nodes.length);
}

function render(doc) {
  renderRuns(doc.daemon_runs || []);
  renderNodes(doc.nodes || []);
  $("status").textContent = "store " + doc.store + (doc.draining ? " (draining)" : "")
                            + " · updated " + new Date().toLocaleTimeString();
  $("totals").textContent = "trials in flight " + doc.in_flight + ", queued " + doc.queued
                            + ", lost " + doc.lost_attempts + ", stale results " + doc.stale_results;
}

async function poll() {
  try {
    const res = await fetch("/api/state", {
      cache: "no-store",
      headers: token ? { Authorization: "Bearer " + token } : {},
    });
    if (!res.ok) throw new Error(res.status + " " + (await res.text()).trim());
    render(await res.json());
    $("error").textContent = "";
  } catch (e) {
    $("error").textContent = "cannot read the daemon's state: " + e.message;
  } finally {
    setTimeout(poll, 1500);
  }
}
poll();
)js";

// The page needs its own script and fetches /api/state; nothing else, from nowhere else.
constexpr const char* index_csp = "default-src 'none'; script-src 'self'; "
                                  "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; "
                                  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
// A report.html is one self-contained file (inline scripts and styles, data: images): it may
// run what it carries and load nothing.
constexpr const char* report_csp = "default-src 'none'; script-src 'unsafe-inline'; "
                                   "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
                                   "form-action 'none'; frame-ancestors 'none'";

/// The whole of a file, or nothing.
std::optional<std::string> read_file(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec))
    return std::nullopt;
  std::ifstream in{p, std::ios::binary};
  if (!in)
    return std::nullopt;
  return std::string{std::istreambuf_iterator<char>{in}, {}};
}

void short_error(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_content(text + "\n", "text/plain; charset=utf-8");
}

} // namespace

struct dashboard_server::impl {
  httplib::Server server;
  dashboard_config config;
  std::string token;
  int port = 0;
  dashboard_source source;
  std::thread thread;
  std::mutex stop_mutex;
  bool stopped = false;
  // The status document, shared by the requests of 0.5 s.
  std::mutex cache_mutex;
  std::chrono::steady_clock::time_point cached_at{};
  std::string cached;

  caf::expected<std::string> status() {
    std::lock_guard<std::mutex> lock{cache_mutex};
    auto now = std::chrono::steady_clock::now();
    if (!cached.empty() && now - cached_at < std::chrono::milliseconds(500))
      return cached;
    auto doc = source.status();
    if (!doc)
      return doc;
    cached = *doc;
    cached_at = now;
    return cached;
  }

  bool authorized(const httplib::Request& req) const {
    if (token.empty())
      return true;
    auto header = req.get_header_value("Authorization");
    const std::string bearer = "Bearer ";
    if (header.size() > bearer.size() && header.compare(0, bearer.size(), bearer) == 0)
      return same_token(token, std::string_view{header}.substr(bearer.size()));
    return req.has_param("token") && same_token(token, req.get_param_value("token"));
  }

  void serve_report(const httplib::Request& req, httplib::Response& res, const std::string& run,
                    const std::string& file) {
    if (auto bad = store::validate_run_id(run))
      return short_error(res, 404, "not found: not a run id");
    auto doc = status();
    if (!doc)
      return short_error(res, 503, "the daemon did not answer: " + describe(doc.error()));
    auto j = nlohmann::json::parse(*doc, nullptr, false);
    bool known = false;
    std::string stage;
    if (j.is_object() && j["daemon_runs"].is_array())
      for (const auto& r : j["daemon_runs"])
        if (r.value("run_id", "") == run) {
          known = true;
          stage = r.value("stage", "");
        }
    if (!known)
      return short_error(res, 404, "not found: no run '" + run + "' in this daemon's store");
    // run passed validate_run_id ([A-Za-z0-9._:-], not starting with '.') and is a run of the
    // store: the path stays inside STORE/runs/.
    auto dir = fs::path{source.store_dir} / "runs" / run;
    struct kind {
      const char* name;
      const char* type;
    };
    static const kind kinds[] = {{"report.html", "text/html; charset=utf-8"},
                                 {"report.md", "text/plain; charset=utf-8"},
                                 {"report.json", "application/json"}};
    for (const auto& k : kinds) {
      if (!file.empty() && file != k.name)
        continue;
      if (auto text = read_file(dir / k.name)) {
        if (std::string{k.name} == "report.html")
          res.set_header("Content-Security-Policy", report_csp);
        res.set_content(*text, k.type);
        return;
      }
    }
    (void) req;
    short_error(res, 404,
                "not found: run '" + run + "' has no " + (file.empty() ? "report" : file)
                  + " yet (stage " + stage + "); it is written when the run reaches its report "
                                             "stage");
  }

  void routes() {
    server.set_payload_max_length(64 * 1024);
    server.set_read_timeout(5, 0);
    server.set_write_timeout(5, 0);
    // Short: at stop, a worker waits out an idle keep-alive connection (the page polls each 1.5 s).
    server.set_keep_alive_timeout(2);
    server.new_task_queue = [] { return new httplib::ThreadPool(4); };
    server.set_default_headers({{"Cache-Control", "no-store"},
                                {"X-Content-Type-Options", "nosniff"},
                                {"Referrer-Policy", "no-referrer"},
                                {"X-Frame-Options", "DENY"}});
    server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.method != "GET" && req.method != "HEAD") {
        res.set_header("Allow", "GET, HEAD");
        short_error(res, 405, "method not allowed: this dashboard is read-only (GET)");
        return httplib::Server::HandlerResponse::Handled;
      }
      // The script holds no data; everything else needs the token when one is set.
      if (req.path != "/dashboard.js" && !authorized(req)) {
        res.set_header("WWW-Authenticate", "Bearer");
        short_error(res, 401,
                    "unauthorized: send the dashboard token (Authorization: Bearer TOKEN, or "
                    "?token=TOKEN)");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy", index_csp);
      res.set_content(index_html, "text/html; charset=utf-8");
    });
    server.Get("/dashboard.js", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(dashboard_js, "text/javascript; charset=utf-8");
    });
    server.Get("/api/state", [this](const httplib::Request&, httplib::Response& res) {
      auto doc = status();
      if (!doc)
        return short_error(res, 503, "the daemon did not answer: " + describe(doc.error()));
      res.set_content(*doc, "application/json");
    });
    server.Get(R"(/runs/([^/]+)/?)", [this](const httplib::Request& req, httplib::Response& res) {
      serve_report(req, res, req.matches[1].str(), "");
    });
    server.Get(R"(/runs/([^/]+)/(report\.(?:html|md|json)))",
               [this](const httplib::Request& req, httplib::Response& res) {
                 serve_report(req, res, req.matches[1].str(), req.matches[2].str());
               });
    // Unrouted paths get a short body (handlers that set their own keep it).
    server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty())
        short_error(res, res.status, res.status == 404 ? "not found" : "error");
    });
    server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        short_error(res, 500, "internal error");
      });
  }
};

dashboard_server::dashboard_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

caf::expected<std::unique_ptr<dashboard_server>> dashboard_server::bind(const dashboard_config& c,
                                                                        std::string token) {
  if (token.empty() && !is_loopback_address(c.bind))
    return make_error(errc::invalid_argument,
                      "dashboard.bind '" + c.bind
                        + "' is not a loopback address: a token is required "
                          "(dashboard.token_file or dashboard.token_env)");
  auto p = std::make_unique<impl>();
  p->config = c;
  p->token = std::move(token);
  p->routes();
  if (c.port == 0) {
    p->port = p->server.bind_to_any_port(c.bind);
  } else {
    p->port = p->server.bind_to_port(c.bind, c.port) ? c.port : -1;
  }
  if (p->port <= 0)
    return make_error(errc::io_error, "dashboard: cannot listen on " + c.bind + ":"
                                        + std::to_string(c.port)
                                        + " (address in use, or not an address of this host)");
  return std::unique_ptr<dashboard_server>{new dashboard_server{std::move(p)}};
}

void dashboard_server::serve(dashboard_source source) {
  impl_->source = std::move(source);
  impl_->thread = std::thread{[p = impl_.get()] { p->server.listen_after_bind(); }};
  // httplib's stop() does nothing before the listening loop has started: wait for it, so that a
  // stop() soon after serve() cannot be lost.
  for (int i = 0; i < 500 && !impl_->server.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

std::string dashboard_server::url() const {
  auto host = impl_->config.bind;
  if (host.find(':') != std::string::npos)
    host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(impl_->port) + "/";
}

void dashboard_server::stop() {
  std::lock_guard<std::mutex> lock{impl_->stop_mutex};
  if (impl_->stopped)
    return;
  impl_->stopped = true;
  impl_->server.stop();
  if (impl_->thread.joinable())
    impl_->thread.join();
}

dashboard_server::~dashboard_server() {
  if (impl_)
    stop();
}

} // namespace infrarsi::runtime
