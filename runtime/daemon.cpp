// `infrarsi daemon`, `infrarsi submit`, `infrarsi daemon status` and `infrarsi node`: the tuning
// service across machines (docs/daemon.md). The daemon is a controller actor (the runs it serves)
// over the node pool (actors/node_pool.hpp) and the ZeroMQ broker (adapters/node_broker.hpp);
// each run is the same supervisor `infrarsi tune` uses, with the pool as its node slots.

#include "runtime/daemon.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <sstream>
#include <cstdlib>
#include <ctime>
#include <iterator>
#include <type_traits>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/all.hpp>
#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "actors/actors.hpp"
#include "actors/node_pool.hpp"
#include "adapters/cluster_identity.hpp"
#include "adapters/curve.hpp"
#include "adapters/environment.hpp"
#include "adapters/node_agent.hpp"
#include "adapters/node_broker.hpp"
#include "adapters/preflight.hpp"
#include "adapters/task_file.hpp"
#include "decide/decisions.hpp"
#include "decide/run_progress.hpp"
#include "messages/node_protocol.hpp"
#include "runtime/experience_sync.hpp"
#include "runtime/signals.hpp"
#include "runtime/store_paths.hpp"
#include "runtime/tune.hpp"
#include "store/experience_bank.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::runtime {

namespace fs = std::filesystem;

// -- configuration --------------------------------------------------------------------------------

namespace {

std::string resolve(const fs::path& base, const std::string& p) {
  if (p.empty() || fs::path{p}.is_absolute())
    return p;
  return (base / p).lexically_normal().string();
}

} // namespace

namespace {

/// Why `llm`'s API key cannot be read here ("" when it can, or when no variable is named): the
/// variable named by api_key_env is unset or empty in this process's environment.
std::string llm_key_problem(const tuning::llm_spec& llm) {
  if (!llm.enabled || llm.api_key_env.empty())
    return {};
  const char* v = std::getenv(llm.api_key_env.c_str());
  if (v != nullptr && *v != '\0')
    return {};
  return "the environment variable " + llm.api_key_env + (v == nullptr ? " is not set" : " is empty")
         + " in the daemon's environment: it must hold the API key of " + llm.base_url
         + " (export it before starting the daemon, or set api_key_env = \"\" for a server "
           "without a key)";
}

} // namespace

caf::expected<daemon_config> load_daemon_config(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return make_error(errc::not_found, "daemon config '" + path + "' does not exist");
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    return make_error(errc::invalid_argument, path + ":" + std::to_string(at.line) + ":"
                                                + std::to_string(at.column) + ": "
                                                + std::string{e.description()});
  }
  daemon_config c;
  c.source = path;
  auto base = fs::absolute(fs::path{path}).parent_path();
  auto bad = [&](const std::string& key, const std::string& what) {
    return make_error(errc::invalid_argument, path + ": " + key + ": " + what);
  };
  static const std::map<std::string, std::vector<std::string>> known = {
    {"daemon",
     {"store", "node_endpoint", "client_endpoint", "watch_dir", "watch_interval_s",
      "heartbeat_ms", "liveness", "drain_grace_s", "max_slots_per_run", "send_hwm",
      "knowledge_dir"}},
    {"security", {"secret_key", "allow", "allow_clients"}},
    {"dashboard", {"enabled", "bind", "port", "token_file", "token_env"}},
    {"experience", {"trust", "sync_interval_s", "peers"}}};
  for (const auto& [table, node] : doc) {
    auto t = std::string{table.str()};
    if (t == "llm")
      continue; // checked below, as a task's [llm] (adapters::load_llm_table)
    auto k = known.find(t);
    if (k == known.end())
      return bad(t, "unknown table (expected [daemon], [security], [dashboard], [experience] or "
                    "[llm])");
    if (!node.is_table())
      return bad(t, "expected a table");
    for (const auto& [key, value] : *node.as_table()) {
      (void) value;
      if (std::find(k->second.begin(), k->second.end(), std::string{key.str()})
          == k->second.end())
        return bad(t + "." + std::string{key.str()}, "unknown key");
    }
  }
  auto text = [&](const char* table, const char* key, std::string& out) -> caf::error {
    auto v = doc[table][key];
    if (!v)
      return caf::none;
    if (!v.is_string())
      return bad(std::string{table} + "." + key, "expected a string");
    out = v.value<std::string>().value_or("");
    return caf::none;
  };
  auto number = [&](const char* table, const char* key, double lo, double hi,
                    auto& out) -> caf::error {
    auto v = doc[table][key];
    if (!v)
      return caf::none;
    if (!v.is_number())
      return bad(std::string{table} + "." + key, "expected a number");
    auto x = v.value<double>().value_or(0.0);
    if (std::is_integral_v<std::decay_t<decltype(out)>> && !v.is_integer())
      return bad(std::string{table} + "." + key, "expected an integer");
    if (!(x >= lo && x <= hi)) {
      std::ostringstream os;
      os << "got " << x << ", expected a value in [" << lo << ", " << hi << "]";
      return bad(std::string{table} + "." + key, os.str());
    }
    out = static_cast<std::decay_t<decltype(out)>>(x);
    return caf::none;
  };
  auto flag = [&](const char* table, const char* key, bool& out) -> caf::error {
    auto v = doc[table][key];
    if (!v)
      return caf::none;
    if (!v.is_boolean())
      return bad(std::string{table} + "." + key, "expected true or false");
    out = v.value<bool>().value_or(false);
    return caf::none;
  };
  for (auto err : {text("daemon", "store", c.store_dir),
                   text("daemon", "node_endpoint", c.node_endpoint),
                   text("daemon", "client_endpoint", c.client_endpoint),
                   text("daemon", "watch_dir", c.watch_dir),
                   text("daemon", "knowledge_dir", c.knowledge_dir),
                   text("security", "secret_key", c.secret_key),
                   text("security", "allow", c.allow),
                   text("security", "allow_clients", c.allow_clients),
                   number("daemon", "watch_interval_s", 0.1, 3600.0, c.watch_interval_s),
                   number("daemon", "heartbeat_ms", 10.0, 60000.0, c.heartbeat_ms),
                   number("daemon", "liveness", 1.0, 100.0, c.liveness),
                   number("daemon", "drain_grace_s", 0.0, 86400.0, c.drain_grace_s),
                   number("daemon", "max_slots_per_run", 0.0, 4096.0, c.max_slots_per_run),
                   number("daemon", "send_hwm", 1.0, 1e7, c.send_hwm),
                   flag("dashboard", "enabled", c.dashboard.enabled),
                   text("dashboard", "bind", c.dashboard.bind),
                   number("dashboard", "port", 0.0, 65535.0, c.dashboard.port),
                   text("dashboard", "token_file", c.dashboard.token_file),
                   text("dashboard", "token_env", c.dashboard.token_env),
                   text("experience", "trust", c.experience_trust),
                   number("experience", "sync_interval_s", 0.0, 7.0 * 86400.0,
                          c.experience_sync_interval_s)})
    if (err)
      return err;
  if (auto peers = doc["experience"]["peers"]) {
    const auto* list = peers.as_array();
    if (list == nullptr)
      return bad("experience.peers", "expected an array of tables ([[experience.peers]])");
    std::set<std::string> names;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const auto at = "experience.peers[" + std::to_string(i + 1) + "]";
      const auto* t = list->get(i)->as_table();
      if (t == nullptr)
        return bad(at, "expected a table with name and endpoint");
      daemon_config::experience_peer_config p;
      for (const auto& [key, value] : *t) {
        const std::string k{key.str()};
        if (k == "timeout_s") {
          if (!value.is_number())
            return bad(at + ".timeout_s", "expected a number");
          p.timeout_s = value.value<double>().value_or(0.0);
          if (!(p.timeout_s >= 0.1 && p.timeout_s <= 3600.0)) {
            std::ostringstream os;
            os << "got " << p.timeout_s << ", expected a value in [0.1, 3600]";
            return bad(at + ".timeout_s", os.str());
          }
          continue;
        }
        std::string* field = k == "name"         ? &p.name
                             : k == "endpoint"   ? &p.endpoint
                             : k == "server_key" ? &p.server_key
                             : k == "key"        ? &p.key
                                                 : nullptr;
        if (field == nullptr)
          return bad(at + "." + k,
                     "unknown key (expected name, endpoint, server_key, key or timeout_s)");
        if (!value.is_string())
          return bad(at + "." + k, "expected a string");
        *field = value.value<std::string>().value_or("");
      }
      if (t->get("name") == nullptr)
        return bad(at + ".name", "missing (each peer needs a name and an endpoint)");
      if (t->get("endpoint") == nullptr)
        return bad(at + ".endpoint", "missing (the peer daemon's client endpoint, e.g. "
                                     "tcp://lab-b:5556)");
      bool name_ok = !p.name.empty() && p.name.size() <= 64;
      for (char ch : p.name)
        name_ok = name_ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.'
                              || ch == '_' || ch == '-');
      if (!name_ok)
        return bad(at + ".name", "'" + p.name
                                   + "': expected 1 to 64 letters, digits, '.', '_' or '-'");
      if (!names.insert(p.name).second)
        return bad(at + ".name", "'" + p.name + "' names an earlier peer too");
      for (const auto& earlier : c.experience_peers)
        if (earlier.endpoint == p.endpoint)
          return bad(at + ".endpoint", "'" + p.endpoint + "' is peer '" + earlier.name
                                         + "''s endpoint too");
      if (p.endpoint.rfind("tcp://", 0) != 0 && p.endpoint.rfind("ipc://", 0) != 0)
        return bad(at + ".endpoint", "'" + p.endpoint + "' is not a tcp:// or ipc:// endpoint");
      p.server_key = resolve(base, p.server_key);
      p.key = resolve(base, p.key);
      c.experience_peers.push_back(std::move(p));
    }
  }
  {
    const auto& d = c.dashboard;
    if (d.bind.empty())
      return bad("dashboard.bind", "expected an address to listen on, e.g. \"127.0.0.1\"");
    if (!d.token_file.empty() && !d.token_env.empty())
      return bad("dashboard.token_file",
                 "set dashboard.token_file or dashboard.token_env, not both");
    if (!d.token_env.empty()) {
      bool name = !std::isdigit(static_cast<unsigned char>(d.token_env.front()));
      for (char ch : d.token_env)
        name = name && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
      if (!name)
        return bad("dashboard.token_env", "'" + d.token_env
                                            + "' is not an environment variable name "
                                              "([A-Za-z_][A-Za-z0-9_]*)");
    }
    // Off loopback anyone who can reach the port could read the runs: a token is required.
    if (d.enabled && !is_loopback_address(d.bind) && d.token_file.empty() && d.token_env.empty())
      return bad("dashboard.bind", "'" + d.bind
                                     + "' is not a loopback address: a token is required (set "
                                       "dashboard.token_file or dashboard.token_env)");
  }
  for (const auto* ep : {&c.node_endpoint, &c.client_endpoint})
    if (ep->rfind("tcp://", 0) != 0 && ep->rfind("ipc://", 0) != 0)
      return bad(ep == &c.node_endpoint ? "daemon.node_endpoint" : "daemon.client_endpoint",
                 "'" + *ep + "' is not a tcp:// or ipc:// endpoint");
  if (c.secret_key.empty() != c.allow.empty())
    return bad(c.secret_key.empty() ? "security.secret_key" : "security.allow",
               "security.secret_key and security.allow go together (CURVE needs both)");
  c.store_dir = resolve(base, c.store_dir);
  c.watch_dir = resolve(base, c.watch_dir);
  c.knowledge_dir = resolve(base, c.knowledge_dir);
  c.secret_key = resolve(base, c.secret_key);
  c.allow = resolve(base, c.allow);
  c.allow_clients = resolve(base, c.allow_clients);
  c.dashboard.token_file = resolve(base, c.dashboard.token_file);
  c.experience_trust = resolve(base, c.experience_trust);
  for (std::size_t i = 0; i < c.experience_peers.size(); ++i) {
    auto& p = c.experience_peers[i];
    if (p.key.empty() && !p.server_key.empty())
      p.key = c.secret_key;
    if (p.server_key.empty() != p.key.empty())
      return bad("experience.peers[" + std::to_string(i + 1) + "]."
                   + (p.server_key.empty() ? "server_key" : "key"),
                 p.server_key.empty()
                   ? "a client key without the peer's server_key: CURVE needs both"
                   : "the peer's server_key needs this daemon's CURVE key: set "
                     "security.secret_key or this peer's key");
  }
  if (!c.allow_clients.empty() && c.secret_key.empty())
    return bad("security.allow_clients", "needs security.secret_key and security.allow");
  if (const auto* llm = doc.get("llm")) {
    std::ifstream in{path};
    std::string config_text{std::istreambuf_iterator<char>{in}, {}};
    auto spec = adapters::load_llm_table(config_text, path);
    if (!spec)
      return std::move(spec.error());
    if (auto why = llm_key_problem(*spec); !why.empty())
      return bad("llm.api_key_env", why);
    c.llm = *spec;
    std::ostringstream os;
    os << toml::table{{"llm", *llm->as_table()}};
    c.llm_toml = os.str();
  }
  return c;
}

// -- the daemon -----------------------------------------------------------------------------------

namespace {

using client_atom = caf::atom_constant<caf::atom("client")>;
using ended_atom = caf::atom_constant<caf::atom("ended")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using grace_atom = caf::atom_constant<caf::atom("grace")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
/// Experience sync: the worker's request ("" or a peer name) and the controller's timer.
using xsync_atom = caf::atom_constant<caf::atom("xsync")>;
using xsynctick_atom = caf::atom_constant<caf::atom("xsynctick")>;

/// Lines written whole, under one lock, each prefixed (progress of several runs in one log).
class line_log {
public:
  explicit line_log(std::ostream& out) : out_(out) {}
  void write(const std::string& prefix, const std::string& text) {
    std::lock_guard<std::mutex> lock{mutex_};
    out_ << prefix << text << std::flush;
  }

private:
  std::ostream& out_;
  std::mutex mutex_;
};

/// An ostream that hands complete lines to a line_log with a prefix.
class prefixed_stream : public std::ostream {
  class buf : public std::stringbuf {
  public:
    buf(line_log& log, std::string prefix) : log_(log), prefix_(std::move(prefix)) {}
    int sync() override {
      auto s = str();
      auto end = s.rfind('\n');
      if (end != std::string::npos) {
        std::string whole = s.substr(0, end + 1);
        std::string out;
        std::size_t at = 0;
        while (at < whole.size()) {
          auto nl = whole.find('\n', at);
          out += prefix_ + whole.substr(at, nl - at + 1);
          at = nl + 1;
        }
        log_.write("", out);
        str(s.substr(end + 1));
      }
      return 0;
    }
    ~buf() override { sync(); }

  private:
    line_log& log_;
    std::string prefix_;
  };

public:
  prefixed_stream(line_log& log, std::string prefix)
    : std::ostream(nullptr), b_(log, std::move(prefix)) {
    rdbuf(&b_);
    setf(std::ios::unitbuf); // sync after every insertion: whole lines go out as they complete
  }

private:
  buf b_;
};

/// One run the daemon serves.
struct daemon_run {
  std::unique_ptr<tuning::task_spec> task;
  std::string task_text;
  std::unique_ptr<prefixed_stream> progress;
  caf::actor supervisor;
  bool active = false;
  std::string summary;
  int status = -1;
  std::uint32_t max_slots = 0;
};

struct controller_state {
  static inline const char* name = "daemon";
  const daemon_config* config = nullptr;
  store::event_log* log = nullptr;
  store::experience_bank* bank = nullptr;
  /// The store's cluster identity: signs the packs this daemon serves to its peers.
  const adapters::cluster_identity* identity = nullptr;
  /// The experience sync worker (sync_worker): pulls from the configured peers.
  caf::actor syncer;
  /// The last sync with each peer, by name (the status document's experience.peers).
  nlohmann::json peer_status = nlohmann::json::object();
  /// The bank's summary (its content hash reads every record) and the position it was made at:
  /// status requests (the dashboard polls them) recompute it only after the bank moved.
  std::optional<bank_summary> bank_summary_cache;
  /// Set when the daemon drains: a sync waiting for a peer gives up within 100 ms.
  std::atomic<bool>* sync_cancel = nullptr;
  actors::node_pool_actor pool;
  adapters::node_broker* broker = nullptr;
  line_log* out = nullptr;
  caf::actor main;
  std::map<std::string, daemon_run> runs;
  bool draining = false;
  std::uint64_t sequence = 0;
  std::uint64_t submitted = 0;
};

using controller_ptr = caf::stateful_actor<controller_state>*;

void say(controller_ptr self, const std::string& line) {
  self->state.out->write("infrarsi daemon: ", line + "\n");
}

std::size_t active_runs(controller_ptr self) {
  std::size_t n = 0;
  for (const auto& [id, r] : self->state.runs)
    n += r.active ? 1 : 0;
  return n;
}

void maybe_finish(controller_ptr self) {
  if (self->state.draining && active_runs(self) == 0) {
    caf::anon_send(self->state.main, done_atom::value);
    self->quit();
  }
}

/// Starts (new: `resume_id` empty) or resumes a run; returns its id.
caf::expected<std::string> start_run(controller_ptr self, const std::string& task_text,
                                     const std::string& task_path,
                                     std::optional<std::uint64_t> seed,
                                     std::optional<std::uint32_t> trials, std::uint32_t max_slots,
                                     const std::string& resume_id,
                                     decide::experience_mode experience =
                                       decide::experience_mode::filtered) {
  auto& st = self->state;
  if (st.draining)
    return make_error(errc::interrupted, "the daemon is draining; it accepts no new runs");
  auto task = adapters::load_task_text(task_text, task_path);
  if (!task)
    return std::move(task.error());
  // A new run of a task without [llm]: the daemon's [llm], appended to the task's text (the
  // logged task then holds it: resume and replay need no daemon config).
  std::string text_with_llm;
  if (resume_id.empty() && !task->llm.enabled && !st.config->llm_toml.empty()) {
    text_with_llm = task_text + "\n\n# [llm] of the daemon config " + st.config->source + "\n"
                    + st.config->llm_toml + "\n";
    task = adapters::load_task_text(text_with_llm, task_path);
    if (!task)
      return std::move(task.error());
  }
  const std::string& run_text = text_with_llm.empty() ? task_text : text_with_llm;
  if (resume_id.empty())
    if (auto why = llm_key_problem(task->llm); !why.empty())
      return make_error(errc::invalid_argument, task->source + ": llm.api_key_env: " + why);
  std::string run_id = resume_id;
  std::uint64_t run_seed = seed.value_or(task->budget.seed);
  if (run_id.empty()) {
    auto fresh = new_run_id(*st.log, task->name);
    if (!fresh)
      return std::move(fresh.error());
    run_id = *fresh;
  }
  if (auto it = st.runs.find(run_id); it != st.runs.end() && it->second.active)
    return make_error(errc::invalid_argument, "run '" + run_id + "' is already running");
  auto run_dir = st.config->store_dir + "/runs/" + run_id;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  auto& r = st.runs[run_id];
  r.task = std::make_unique<tuning::task_spec>(std::move(*task));
  r.task_text = run_text;
  r.progress = std::make_unique<prefixed_stream>(*st.out, "[" + run_id + "] ");
  r.active = true;
  r.status = -1;
  r.summary.clear();
  r.max_slots = max_slots != 0 ? max_slots : st.config->max_slots_per_run;
  actors::supervisor_options so;
  so.task = r.task.get();
  so.log = st.log;
  so.bank = st.bank;
  so.experience = experience;
  so.run_id = run_id;
  so.run_dir = run_dir;
  so.knowledge_dir = st.config->knowledge_dir.empty()
                       ? default_knowledge_dir(r.task->source)
                       : st.config->knowledge_dir;
  so.seed = run_seed;
  so.trials = trials;
  so.task_text = run_text;
  so.progress = r.progress.get();
  so.space_dirs = {st.config->store_dir + "/events"};
  so.pool = st.pool;
  so.pool_slots = r.max_slots != 0 ? r.max_slots : 64;
  // The run's end comes back tagged with its id.
  auto ctl = caf::actor_cast<caf::actor>(self);
  // (What the relay needs travels as spawn arguments, not captures: CAF 0.17 dereferences a null
  // argument tuple for a function actor spawned without any, which UBSan reports.)
  so.reply_to = self->spawn(
    [](caf::event_based_actor* relay, caf::actor to, std::string id) -> caf::behavior {
      return {[=](std::string& summary, int status) {
        caf::anon_send(to, ended_atom::value, id, std::move(summary), status);
        relay->quit();
      }};
    },
    ctl, run_id);
  r.supervisor = caf::actor_cast<caf::actor>(self->spawn(actors::supervisor, std::move(so)));
  caf::anon_send(st.pool, actors::join_atom_v, run_id, r.max_slots, run_text, r.task->source,
                 r.supervisor);
  say(self, (resume_id.empty() ? "run " : "resuming run ") + run_id + " (task " + r.task->name
              + ", " + r.task->source + ")");
  return run_id;
}

/// Every run of the log that has not finished its apply stage, resumed.
void resume_unfinished(controller_ptr self) {
  auto& st = self->state;
  auto runs = st.log->list_runs();
  if (!runs) {
    say(self, "cannot list the runs of the store: " + describe(runs.error()));
    return;
  }
  for (const auto& info : *runs) {
    if (info.run_id == store::imported_experience_stream)
      continue; // imported findings (`infrarsi experience import`), not a run
    auto loaded = store::load_run_with_snapshot(*st.log, info.run_id);
    if (!loaded) {
      say(self, "run " + info.run_id + " not resumed: " + describe(loaded.error()));
      continue;
    }
    const auto& state = loaded->state;
    if (state.stage_done("apply"))
      continue;
    if (!state.contract_doc || !state.contract_doc->contains("task_toml")) {
      say(self, "run " + info.run_id
                  + " not resumed: it never locked its contract (no task in its log); submit "
                    "its task again");
      continue;
    }
    const auto& locked = *state.contract_doc;
    auto started = start_run(self, locked["task_toml"].get<std::string>(),
                             locked.value("task_path", state.task_path), state.seed, {}, 0,
                             info.run_id);
    if (!started)
      say(self, "run " + info.run_id + " not resumed: " + describe(started.error()));
  }
}

template <class Table>
void reply(controller_ptr self, const std::string& identity, const messages::message<Table>& m) {
  auto env = messages::seal(m, "", "daemon", self->state.sequence++);
  if (env)
    self->state.broker->send_to_client(identity, std::move(*env));
}

void reply_error(controller_ptr self, const std::string& identity, const std::string& why) {
  wire::ClientReplyT r;
  r.ok = false;
  r.error = why;
  reply(self, identity, messages::client_reply_msg::pack(r));
}

/// The status document (`infrarsi daemon status --json`, the dashboard's /api/state): the pool's
/// nodes and attempts, every run of the store with its progress (decide::progress_of), broker
/// counters. Handed to `done` once the pool has answered (or with the pool's error).
template <class Done>
void with_status(controller_ptr self, Done done_once) {
  auto done = std::make_shared<Done>(std::move(done_once));
  self->request(self->state.pool, std::chrono::seconds(5), actors::status_atom_v)
    .then(
      [self, done](std::string& pool_doc) {
        auto& s = self->state;
        auto doc = nlohmann::json::parse(pool_doc);
        nlohmann::json runs = nlohmann::json::array();
        // Every run of the store: those of earlier lives of the daemon too.
        std::vector<std::string> ids;
        if (auto listed = s.log->list_runs())
          for (const auto& info : *listed)
            if (info.run_id != store::imported_experience_stream) // not a run
              ids.push_back(info.run_id);
        for (const auto& id : ids) {
          auto here = s.runs.find(id);
          bool active = here != s.runs.end() && here->second.active;
          nlohmann::json j = {{"run_id", id}, {"active", active}};
          if (here != s.runs.end())
            j["task"] = here->second.task->name;
          if (auto loaded = store::load_run_with_snapshot(*s.log, id)) {
            const auto& state = loaded->state;
            j["trials"] = state.trials.size();
            auto progress = decide::progress_of(
              state, here != s.runs.end()
                       ? std::optional<std::uint32_t>{decide::budget_of(*here->second.task, state)
                                                        .trials}
                       : std::nullopt);
            j["stage"] = progress.stage;
            if (progress.promoted)
              j["promoted"] = *progress.promoted;
            j["progress"] = decide::to_json(progress);
          }
          if (here != s.runs.end() && !active) {
            j["status"] = here->second.status;
            j["summary"] = here->second.summary;
          }
          runs.push_back(std::move(j));
        }
        doc["daemon_runs"] = runs;
        doc["draining"] = s.draining;
        // The experience bank (docs/experience.md): records, the sync with each peer.
        if (auto caught = s.bank->catch_up(); !caught) {
          if (!s.bank_summary_cache || s.bank_summary_cache->position != s.bank->position())
            if (auto bank = summarize(*s.bank))
              s.bank_summary_cache = *bank;
          if (s.bank_summary_cache) {
            doc["experience"] = bank_entry(*s.bank_summary_cache);
            doc["experience"]["cluster_id"] = s.identity->cluster_id;
            doc["experience"]["peers"] = s.peer_status;
          }
        }
        doc["store"] = s.config->store_dir;
        auto stats = s.broker->stats();
        doc["broker"] = {{"frames_in", stats.frames_in},
                         {"frames_out", stats.frames_out},
                         {"malformed", stats.malformed},
                         {"send_failures", stats.send_failures},
                         {"nodes_gone", stats.nodes_gone}};
        (*done)(caf::expected<std::string>{
          doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
      },
      [done](caf::error& err) { (*done)(caf::expected<std::string>{std::move(err)}); });
}

// -- experience sync (docs/experience.md, "Sync between daemons") ------------------------------

/// A peer asks for the findings it lacks: a pack signed by this store's cluster key of every
/// finding of the bank (own and imported) whose (origin, position) it did not list, at most
/// max_bytes of findings per answer ("complete": false when more remain).
void serve_pull(controller_ptr self, const std::string& identity, const std::string& argument) {
  auto& st = self->state;
  auto request = parse_pull_request(argument);
  if (!request)
    return reply_error(self, identity, describe(request.error()));
  if (auto e = st.bank->catch_up())
    return reply_error(self, identity, "the experience bank: " + describe(e));
  auto pack = make_pack(*st.bank, *st.identity, 0, request->have, request->max_bytes);
  if (!pack)
    return reply_error(self, identity, "the experience bank: " + describe(pack.error()));
  wire::ClientReplyT r;
  r.ok = true;
  r.json = nlohmann::json{{"cluster_id", st.identity->cluster_id},
                          {"findings", pack->local + pack->imported},
                          {"local", pack->local},
                          {"imported", pack->imported},
                          {"complete", pack->complete}}
             .dump();
  r.data.assign(pack->bytes.begin(), pack->bytes.end());
  if (pack->local + pack->imported > 0)
    say(self, "experience: served " + std::to_string(pack->local + pack->imported)
                + " finding(s) to a peer's pull (" + std::to_string(pack->local) + " own, "
                + std::to_string(pack->imported) + " imported)");
  reply(self, identity, messages::client_reply_msg::pack(r));
}

/// One sync's answer: a line per peer for the daemon's log, and the peers' status entries.
/// `periodic`: a sync with a peer that brought nothing new is not logged (the status has it).
void note_sync(controller_ptr self, const std::string& result_text, bool periodic = false) {
  auto result = nlohmann::json::parse(result_text, nullptr, false);
  if (!result.is_object() || !result.contains("peers"))
    return;
  for (const auto& p : result["peers"]) {
    auto name = p.value("name", "");
    self->state.peer_status[name] = p;
    if (periodic && p.value("ok", false) && p.value("pulled", 0) == 0)
      continue;
    if (p.value("ok", false))
      say(self, "experience sync with peer " + name + ": pulled "
                  + std::to_string(p.value("pulled", 0)) + " new finding(s) of "
                  + std::to_string(p.value("offered", 0)) + " offered ("
                  + std::to_string(p.value("present", 0)) + " already here), signed by cluster "
                  + p.value("signer", "") + " (" + p.value("signer_name", "") + ")");
    else
      say(self, "experience sync with peer " + name + " failed: " + p.value("error", ""));
  }
}

/// A client asks for a sync now: with every configured peer, or the one named
/// ({"peer": NAME}); the answer is the sync's result document.
void request_sync(controller_ptr self, const std::string& identity, const std::string& argument) {
  auto& st = self->state;
  if (st.config->experience_peers.empty())
    return reply_error(self, identity, "this daemon has no peers: add [[experience.peers]] "
                                       "tables (name, endpoint, server_key) to its config "
                                         + st.config->source);
  std::string only;
  if (!argument.empty()) {
    auto doc = nlohmann::json::parse(argument, nullptr, false);
    if (!doc.is_object() || (doc.contains("peer") && !doc["peer"].is_string()))
      return reply_error(self, identity, "experience-sync: expected {\"peer\": NAME} or {}");
    only = doc.value("peer", "");
  }
  if (!only.empty()) {
    bool known = false;
    std::string names;
    for (const auto& p : st.config->experience_peers) {
      known = known || p.name == only || p.endpoint == only;
      names += (names.empty() ? "" : ", ") + p.name;
    }
    if (!known)
      return reply_error(self, identity, "no peer '" + only + "' in " + st.config->source
                                           + " (its peers: " + names + ")");
  }
  double budget = 10.0;
  for (const auto& p : st.config->experience_peers)
    budget += p.timeout_s * 4;
  self
    ->request(st.syncer, std::chrono::milliseconds(static_cast<long>(budget * 1000)),
              xsync_atom::value, only)
    .then(
      [self, identity](std::string& result) {
        note_sync(self, result);
        wire::ClientReplyT r;
        r.ok = true;
        r.json = std::move(result);
        reply(self, identity, messages::client_reply_msg::pack(r));
      },
      [self, identity](caf::error& e) { reply_error(self, identity, describe(e)); });
}

/// The wall-clock time as YYYY-MM-DDTHH:MM:SSZ (UTC): when a sync ran (status only; no decision
/// reads it).
std::string utc_now() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::ostringstream os;
  os << std::put_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  return os.str();
}

/// Pulls from the configured peers (all, or the one named or at the endpoint `only`), one after
/// the other; the result document {"peers": [...], "bank": {...}}. Runs on the sync worker's
/// own thread: a slow peer delays neither the runs nor the clients.
std::string sync_with_peers(const daemon_config& config, store::event_log& log,
                            store::experience_bank& bank, const std::string& only,
                            const std::atomic<bool>* cancel) {
  nlohmann::json peers = nlohmann::json::array();
  auto trust_file = config.experience_trust.empty() ? config.store_dir + "/trust.toml"
                                                    : config.experience_trust;
  auto trust = load_trust(trust_file, !config.experience_trust.empty());
  for (std::size_t i = 0; i < config.experience_peers.size(); ++i) {
    const auto& p = config.experience_peers[i];
    if (!only.empty() && p.name != only && p.endpoint != only)
      continue;
    if (cancel != nullptr && cancel->load())
      break;
    nlohmann::json entry = {{"name", p.name},
                            {"endpoint", p.endpoint},
                            {"at", utc_now()}};
    if (!trust) {
      entry["ok"] = false;
      entry["error"] = "trust list: " + describe(trust.error());
      peers.push_back(std::move(entry));
      continue;
    }
    experience_peer peer;
    peer.name = p.name;
    peer.endpoint = p.endpoint;
    peer.server_key = p.server_key;
    peer.key = p.key;
    peer.timeout_s = p.timeout_s;
    peer.cancelled = cancel;
    peer.configured_at = config.source + ": experience.peers[" + std::to_string(i + 1) + "]";
    entry.update(pull_entry(pull_from_peer(peer, log, bank, *trust)));
    entry["ended"] = utc_now();
    peers.push_back(std::move(entry));
  }
  nlohmann::json result = {{"peers", peers}};
  if (auto summary = summarize(bank))
    result["bank"] = bank_entry(*summary);
  return result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The sync worker: one sync at a time (its mailbox orders them), so two never append to the
/// imported stream at once.
caf::behavior sync_worker(caf::event_based_actor*, const daemon_config* config,
                          store::event_log* log, store::experience_bank* bank,
                          const std::atomic<bool>* cancel) {
  return {[=](xsync_atom, const std::string& only) -> std::string {
    return sync_with_peers(*config, *log, *bank, only, cancel);
  }};
}

void on_client(controller_ptr self, const std::string& identity,
               const messages::envelope_msg& env) {
  auto& st = self->state;
  if (env->kind() == wire::MessageKind::SubmitTask) {
    auto submit = messages::open<wire::SubmitTask>(env);
    if (!submit)
      return reply_error(self, identity, describe(submit.error()));
    const auto& s = **submit;
    auto text = s.task_toml()->str();
    auto path = s.task_path() != nullptr ? s.task_path()->str() : std::string{"submitted.toml"};
    auto task = adapters::load_task_text(text, path);
    if (!task)
      return reply_error(self, identity, describe(task.error()));
    // The submitter's view of the scope against the daemon's: the node-runner's check.
    if (auto differs = adapters::scope_mismatch(task->workload.workdir, s.scope());
        !differs.empty())
      return reply_error(self, identity, "the daemon's files differ from the submitting "
                                         "machine's: " + differs);
    std::optional<std::uint64_t> seed;
    if (s.seed())
      seed = *s.seed();
    std::optional<std::uint32_t> trials;
    if (s.trials())
      trials = *s.trials();
    auto experience = decide::experience_mode::filtered;
    if (s.experience() != nullptr && s.experience()->size() > 0) {
      auto mode = decide::parse_experience_mode(s.experience()->str());
      if (!mode)
        return reply_error(self, identity, "experience: '" + s.experience()->str()
                                             + "': expected filtered, all or none");
      experience = *mode;
    }
    auto run = start_run(self, text, path, seed, trials, s.max_slots(), {}, experience);
    if (!run)
      return reply_error(self, identity, describe(run.error()));
    ++st.submitted;
    wire::ClientReplyT r;
    r.ok = true;
    r.json = nlohmann::json{{"run_id", *run}}.dump();
    return reply(self, identity, messages::client_reply_msg::pack(r));
  }
  if (env->kind() != wire::MessageKind::ClientRequest)
    return reply_error(self, identity, "unexpected message kind");
  auto req = messages::open<wire::ClientRequest>(env);
  if (!req)
    return reply_error(self, identity, describe(req.error()));
  auto command = (*req)->command()->str();
  auto argument = (*req)->argument() != nullptr ? (*req)->argument()->str() : std::string{};
  if (command == "experience-pull")
    return serve_pull(self, identity, argument);
  if (command == "experience-sync")
    return request_sync(self, identity, argument);
  if (command != "status")
    return reply_error(self, identity, "unknown command '" + command
                                         + "' (expected status, experience-pull or "
                                           "experience-sync)");
  with_status(self, [self, identity](caf::expected<std::string> doc) {
    if (!doc)
      return reply_error(self, identity, describe(doc.error()));
    wire::ClientReplyT r;
    r.ok = true;
    r.json = std::move(*doc);
    reply(self, identity, messages::client_reply_msg::pack(r));
  });
}

/// Submits every *.toml of the watched directory, moving each to submitted/ or rejected/.
void scan_watch_dir(controller_ptr self) {
  auto& st = self->state;
  const auto& dir = st.config->watch_dir;
  std::error_code ec;
  std::vector<fs::path> files;
  // A file modified within the last two seconds may still be being written: taken next time.
  const auto settled = fs::file_time_type::clock::now() - std::chrono::seconds(2);
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".toml"
        && fs::last_write_time(e.path(), ec) < settled && !ec)
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in{f};
    std::string text{std::istreambuf_iterator<char>{in}, {}};
    auto run = start_run(self, text, f.string(), {}, {}, 0, {});
    auto dest_dir = fs::path{dir} / (run ? "submitted" : "rejected");
    fs::create_directories(dest_dir, ec);
    // Never replaces an earlier submission or rejection of a file of the same name.
    auto dest = dest_dir / (f.stem().string() + "." + (run ? *run : std::to_string(++st.submitted))
                            + ".toml");
    for (int n = 2; fs::exists(dest, ec); ++n)
      dest = dest_dir / (f.stem().string() + "." + std::to_string(st.submitted) + "-"
                         + std::to_string(n) + ".toml");
    fs::rename(f, dest, ec);
    if (run) {
      say(self, "watched directory: " + f.filename().string() + " submitted as run " + *run);
    } else {
      std::ofstream{dest.string() + ".error"} << describe(run.error()) << '\n';
      say(self, "watched directory: " + f.filename().string() + " rejected: "
                  + describe(run.error()));
    }
  }
}

caf::behavior controller(caf::stateful_actor<controller_state>* self) {
  resume_unfinished(self);
  if (!self->state.config->watch_dir.empty())
    self->send(self, tick_atom::value);
  if (!self->state.config->experience_peers.empty()
      && self->state.config->experience_sync_interval_s > 0)
    self->send(self, xsynctick_atom::value);
  return {
    [self](client_atom, const std::string& identity, const messages::envelope_msg& env) {
      on_client(self, identity, env);
    },
    // The dashboard's question (from its HTTP threads): the same document as `daemon status`.
    [self](actors::status_atom) -> caf::result<std::string> {
      auto rp = self->make_response_promise<std::string>();
      with_status(self, [rp](caf::expected<std::string> doc) mutable {
        if (doc)
          rp.deliver(std::move(*doc));
        else
          rp.deliver(std::move(doc.error()));
      });
      return rp;
    },
    [self](ended_atom, const std::string& run_id, const std::string& summary, int status) {
      auto& st = self->state;
      auto& r = st.runs[run_id];
      r.active = false;
      r.summary = summary;
      r.status = status;
      caf::anon_send(st.pool, actors::leave_atom_v, run_id);
      say(self, "run " + run_id + " ended (status " + std::to_string(status) + "): " + summary);
      maybe_finish(self);
    },
    [self](xsynctick_atom) {
      auto& st = self->state;
      if (st.draining)
        return;
      self->request(st.syncer, caf::infinite, xsync_atom::value, std::string{})
        .then([self](std::string& result) { note_sync(self, result, true); },
              [self](caf::error& e) { say(self, "experience sync: " + describe(e)); });
      self->delayed_send(self,
                         std::chrono::milliseconds(
                           static_cast<long>(st.config->experience_sync_interval_s * 1000)),
                         xsynctick_atom::value);
    },
    [self](tick_atom) {
      if (self->state.draining)
        return;
      scan_watch_dir(self);
      self->delayed_send(self,
                         std::chrono::milliseconds(
                           static_cast<long>(self->state.config->watch_interval_s * 1000)),
                         tick_atom::value);
    },
    [self](actors::drain_atom) {
      auto& st = self->state;
      if (st.draining)
        return;
      st.draining = true;
      if (st.sync_cancel != nullptr)
        st.sync_cancel->store(true);
      say(self, "draining: no new dispatch; " + std::to_string(active_runs(self))
                  + " run(s) finish their trials in flight (grace "
                  + std::to_string(static_cast<long>(st.config->drain_grace_s)) + " s)");
      for (auto& [id, r] : st.runs)
        if (r.active)
          caf::anon_send(caf::actor_cast<actors::supervisor_actor>(r.supervisor),
                         actors::drain_atom_v);
      self->delayed_send(self,
                         std::chrono::milliseconds(
                           static_cast<long>(st.config->drain_grace_s * 1000)),
                         grace_atom::value);
      maybe_finish(self);
    },
    [self](grace_atom) {
      for (auto& [id, r] : self->state.runs)
        if (r.active) {
          say(self, "run " + id + ": the drain grace period is over; its trials in flight are "
                                  "stopped and re-queued when it resumes");
          caf::anon_send(caf::actor_cast<actors::supervisor_actor>(r.supervisor),
                         actors::interrupt_atom_v, 15);
        }
    }};
}

} // namespace

caf::expected<messages::client_reply_msg> ask_daemon(const client_options& c,
                                                     const messages::envelope_msg& request) {
  zmq::context_t ctx;
  zmq::socket_t s{ctx, zmq::socket_type::dealer};
  s.set(zmq::sockopt::linger, 0);
  if (!c.server_key.empty() || !c.key.empty()) {
    if (c.server_key.empty() || c.key.empty())
      return make_error(errc::invalid_argument,
                        "--server-key and --key go together (CURVE needs both)");
    auto server = adapters::load_public_key_file(c.server_key);
    if (!server)
      return std::move(server.error());
    auto mine = adapters::load_secret_key_file(c.key);
    if (!mine)
      return std::move(mine.error());
    if (auto e = adapters::make_curve_client(s, *mine, *server))
      return e;
  }
  try {
    s.connect(c.endpoint);
    (void) s.send(zmq::buffer(request.bytes().data(), request.bytes().size()),
                  zmq::send_flags::dontwait);
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    // In slices of at most 100 ms when the caller may cancel (a draining daemon's sync).
    const auto deadline = std::chrono::steady_clock::now()
                          + std::chrono::milliseconds(static_cast<long>(c.timeout_s * 1000));
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      if (left.count() < 0)
        left = std::chrono::milliseconds{0};
      if (c.cancelled != nullptr && left > std::chrono::milliseconds{100})
        left = std::chrono::milliseconds{100};
      item.revents = 0;
      zmq::poll(&item, 1, left);
      if ((item.revents & ZMQ_POLLIN) != 0 || std::chrono::steady_clock::now() >= deadline)
        break;
      if (c.cancelled != nullptr && c.cancelled->load())
        return make_error(errc::interrupted, "the request to '" + c.endpoint
                                               + "' was cancelled: the daemon is stopping");
    }
    if ((item.revents & ZMQ_POLLIN) == 0)
      return make_error(errc::not_found,
                        "no answer from the daemon at '" + c.endpoint + "' within "
                          + std::to_string(static_cast<long>(c.timeout_s))
                          + " s (is it running? does it require CURVE keys: --server-key, --key?)");
    zmq::message_t frame;
    (void) s.recv(frame, zmq::recv_flags::none);
    auto env = messages::envelope_msg::decode(frame.data(), frame.size());
    if (!env)
      return std::move(env.error());
    return messages::open<wire::ClientReply>(*env);
  } catch (const zmq::error_t& e) {
    return make_error(errc::io_error, "daemon '" + c.endpoint + "': " + e.what());
  }
}

namespace {

/// Sends `request` and returns the JSON text of an ok answer. Errors: those of ask(), or
/// errc::invalid_argument "`refused`: the daemon's reason" for an answer that is not ok.
template <class Table>
caf::expected<std::string> ask_json(const client_options& c, const messages::message<Table>& request,
                                    const std::string& refused) {
  auto env = messages::seal(request, "", "client", 0);
  if (!env)
    return std::move(env.error());
  auto answer = ask_daemon(c, *env);
  if (!answer)
    return std::move(answer.error());
  if (!(*answer)->ok())
    return make_error(errc::invalid_argument,
                      refused + ": "
                        + ((*answer)->error() != nullptr ? (*answer)->error()->str() : ""));
  return (*answer)->json() != nullptr ? (*answer)->json()->str() : std::string{};
}

} // namespace

int run_daemon(const daemon_config& config, std::ostream& out, std::ostream& err) {
  signal_guard signals;
  // One descriptor per connected node-runner and client: the soft limit (often 1024) is raised
  // to the hard one.
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  line_log log_out{err};
  std::error_code ec;
  fs::create_directories(config.store_dir, ec);
  if (ec) {
    err << "infrarsi daemon: cannot create the store '" << config.store_dir
        << "': " << ec.message() << '\n';
    return 1;
  }
  store::rocksdb_event_log_options log_opts;
  log_opts.sync_writes = true;
  auto log = store::rocksdb_event_log::open(config.store_dir + "/events", log_opts);
  if (!log) {
    err << "infrarsi daemon: " << describe(log.error())
        << " (another daemon or `infrarsi tune` may hold this store; one writer per store)\n";
    return 1;
  }
  if (const auto& rec = (*log)->recovery(); rec.tail_dropped)
    err << "infrarsi daemon: recovered the event log: a torn tail was dropped ("
        << rec.dropped_bytes << " bytes); " << rec.head << " events survived\n";
  // The store's cluster identity (created on first use): the origin of its findings.
  auto identity =
    adapters::load_cluster_identity(adapters::cluster_key_path(config.store_dir), true);
  if (!identity) {
    err << "infrarsi daemon: " << describe(identity.error()) << '\n';
    return 1;
  }
  auto bank = store::experience_bank::open(config.store_dir + "/experience", **log,
                                           identity->cluster_id);
  if (!bank) {
    err << "infrarsi daemon: " << describe(bank.error()) << '\n';
    return 1;
  }
  // Each peer's CURVE key files must be readable now, not at the first sync.
  for (std::size_t i = 0; i < config.experience_peers.size(); ++i) {
    const auto& p = config.experience_peers[i];
    if (p.server_key.empty())
      continue;
    const auto at = config.source + ": experience.peers[" + std::to_string(i + 1) + "]";
    if (auto pub = adapters::load_public_key_file(p.server_key); !pub) {
      err << "infrarsi daemon: " << at << ".server_key: " << describe(pub.error())
          << " (expected the peer daemon's public key file, NAME.pub)\n";
      return 1;
    }
    if (auto mine = adapters::load_secret_key_file(p.key); !mine) {
      err << "infrarsi daemon: " << at << ".key (default security.secret_key): "
          << describe(mine.error()) << " (expected this daemon's key file, NAME.key)\n";
      return 1;
    }
  }
  std::atomic<bool> sync_cancel{false};
  // An explicit trust list must be readable now; STORE/trust.toml is read at each sync (a
  // missing one trusts only this store's own cluster).
  if (!config.experience_trust.empty())
    if (auto trust = load_trust(config.experience_trust, true); !trust) {
      err << "infrarsi daemon: " << config.source << ": experience.trust: "
          << describe(trust.error()) << '\n';
      return 1;
    }
  zmq::context_t zctx;
  adapters::node_broker_options bo;
  bo.node_endpoint = config.node_endpoint;
  bo.client_endpoint = config.client_endpoint;
  bo.heartbeat_ms = config.heartbeat_ms;
  bo.liveness = config.liveness;
  bo.send_hwm = config.send_hwm;
  std::unique_ptr<adapters::zap_handler> zap;
  if (!config.secret_key.empty()) {
    auto keys = adapters::load_secret_key_file(config.secret_key);
    if (!keys) {
      err << "infrarsi daemon: " << config.source << ": security.secret_key: "
          << describe(keys.error()) << '\n';
      return 1;
    }
    auto allow = adapters::load_allow_list(config.allow);
    if (!allow) {
      err << "infrarsi daemon: " << config.source << ": security.allow: "
          << describe(allow.error()) << '\n';
      return 1;
    }
    auto clients = config.allow_clients.empty() ? allow
                                                : adapters::load_allow_list(config.allow_clients);
    if (!clients) {
      err << "infrarsi daemon: " << config.source << ": security.allow_clients: "
          << describe(clients.error()) << '\n';
      return 1;
    }
    bo.keys = *keys;
    zap = std::make_unique<adapters::zap_handler>(
      zctx,
      std::map<std::string, adapters::curve_allow_list>{{bo.zap_domain, *allow},
                                                        {bo.client_zap_domain, *clients}},
      [&log_out](const adapters::zap_refusal& r) {
        // The public key identifies the peer; no secret ever reaches a refusal.
        log_out.write("infrarsi daemon: ", "refused a " + r.mechanism + " peer from "
                                             + r.address
                                             + (r.public_key.empty() ? std::string{}
                                                                     : " with key " + r.public_key)
                                             + ": " + r.reason + "\n");
      });
    if (auto e = zap->start()) {
      err << "infrarsi daemon: " << describe(e) << '\n';
      return 1;
    }
    bo.zap = zap.get();
    err << "infrarsi daemon: CURVE on, " << allow->size() << " allowed node key(s) from "
        << config.allow << ", " << clients->size() << " allowed client key(s) from "
        << (config.allow_clients.empty() ? config.allow : config.allow_clients) << '\n';
  } else {
    err << "infrarsi daemon: CURVE off (no [security] keys): plain TCP; keep the endpoints on "
           "127.0.0.1 or a trusted network\n";
  }
  // Outlives the actor system: the pool writes to it until it has quit.
  prefixed_stream pool_log{log_out, ""};
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::infrarsi>();
  caf::actor_system sys{cfg};
  actors::node_pool_actor pool;
  caf::actor ctl;
  adapters::node_broker_sink sink;
  sink.node_message = [&pool](const std::string& id, const messages::envelope_msg& env) {
    caf::anon_send(pool, actors::node_atom_v, id, env);
  };
  sink.node_gone = [&pool](const std::string& id, const std::string& why) {
    caf::anon_send(pool, actors::gone_atom_v, id, why);
  };
  sink.node_send_failed = [&pool](const std::string& id, const messages::envelope_msg& env,
                                  const std::string& why) {
    caf::anon_send(pool, actors::sendfail_atom_v, id, env, why);
  };
  sink.client_message = [&ctl](const std::string& id, const messages::envelope_msg& env) {
    caf::anon_send(ctl, client_atom::value, id, env);
  };
  adapters::node_broker broker{zctx, bo, sink};
  actors::node_pool_options po;
  po.broker = &broker;
  po.log = &pool_log;
  po.heartbeat_ms = config.heartbeat_ms;
  pool = sys.spawn(actors::node_pool, po);
  int status = 0;
  {
    caf::scoped_actor main{sys};
    if (auto e = broker.start()) {
      err << "infrarsi daemon: " << describe(e) << '\n';
      caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
      return 1;
    }
    // The dashboard binds before anything is served: a port in use or a missing token stops the
    // daemon here, naming the key.
    std::unique_ptr<dashboard_server> dashboard;
    if (config.dashboard.enabled) {
      auto token = load_dashboard_token(config.dashboard, config.source);
      auto bound = token ? dashboard_server::bind(config.dashboard, *token)
                         : caf::expected<std::unique_ptr<dashboard_server>>{token.error()};
      if (!bound) {
        err << "infrarsi daemon: " << describe(bound.error()) << '\n';
        broker.stop();
        caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
        return 1;
      }
      dashboard = std::move(*bound);
    }
    err << "infrarsi daemon: store " << config.store_dir << ", nodes on " << broker.node_endpoint()
        << ", clients on " << broker.client_endpoint() << ", protocol "
        << messages::node_protocol_version << std::endl;
    out << "nodes " << broker.node_endpoint() << "\nclients " << broker.client_endpoint()
        << std::endl;
    if (dashboard) {
      err << "infrarsi daemon: dashboard on " << dashboard->url()
          << (config.dashboard.token_file.empty() && config.dashboard.token_env.empty()
                ? " (no token: loopback only)"
                : " (token required)")
          << std::endl;
      out << "dashboard " << dashboard->url() << std::endl;
    }
    auto syncer =
      sys.spawn<caf::detached>(sync_worker, &config, log->get(), bank->get(), &sync_cancel);
    // The sync worker as a spawn argument: CAF 0.17 dereferences a null argument tuple for a
    // function actor spawned without any (undefined behaviour that UBSan aborts on).
    ctl = sys.spawn([&](caf::stateful_actor<controller_state>* self, caf::actor sync_actor) {
      self->state.config = &config;
      self->state.log = log->get();
      self->state.bank = bank->get();
      self->state.identity = &*identity;
      self->state.syncer = std::move(sync_actor);
      self->state.sync_cancel = &sync_cancel;
      self->state.pool = pool;
      self->state.broker = &broker;
      self->state.out = &log_out;
      self->state.main = caf::actor{main};
      return controller(self);
    }, syncer);
    if (dashboard)
      dashboard->serve(dashboard_source{
        // Asked of the controller like a client's status request; never on an actor's thread.
        [&sys, ctl]() -> caf::expected<std::string> {
          caf::scoped_actor asker{sys};
          caf::expected<std::string> doc = make_error(errc::io_error, "no answer");
          asker->request(ctl, std::chrono::seconds(10), actors::status_atom_v)
            .receive([&doc](std::string& text) { doc = std::move(text); },
                     [&doc](caf::error& e) { doc = std::move(e); });
          return doc;
        },
        config.store_dir});
    signals.start("infrarsi daemon",
                  [&ctl](int) { caf::anon_send(ctl, actors::drain_atom_v); }, err);
    main->receive([&](done_atom) {});
    // The dashboard answers until the runs have drained, then stops before the actor system.
    if (dashboard)
      dashboard->stop();
    err << "infrarsi daemon: drained; every run resumes where it stopped at the next start"
        << std::endl;
    caf::anon_send_exit(syncer, caf::exit_reason::user_shutdown);
  }
  broker.stop();
  caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
  if (zap)
    zap->stop();
  return status;
}

// -- clients --------------------------------------------------------------------------------------

int run_submit(const client_options& client, const std::string& task_path,
               std::optional<std::uint64_t> seed, std::optional<std::uint32_t> trials,
               std::uint32_t max_slots, const std::string& experience, std::ostream& out,
               std::ostream& err) {
  if (!experience.empty() && !decide::parse_experience_mode(experience)) {
    err << "infrarsi submit: --experience: '" << experience
        << "': expected filtered, all or none\n";
    return 2;
  }
  auto task = adapters::load_task_file(task_path);
  if (!task) {
    err << "infrarsi submit: " << describe(task.error()) << '\n';
    return 1;
  }
  // The pre-flight of `infrarsi check` and `tune`, before anything is sent: a task whose every
  // trial would fail before it starts creates no run on the daemon either.
  adapters::preflight_options pre;
  pre.check_api_key = false; // the daemon's environment holds the key: checked on receipt
  if (auto problems = adapters::preflight(*task, pre); !problems.empty()) {
    for (const auto& p : problems)
      err << "infrarsi submit: " << adapters::to_string(p) << '\n';
    err << "infrarsi submit: " << problems.size()
        << " pre-flight problem(s); nothing was sent and no run was created (`infrarsi check "
        << task_path << "` lists them)\n";
    return 1;
  }
  std::ifstream in{task->source};
  wire::SubmitTaskT s;
  s.task_toml.assign(std::istreambuf_iterator<char>{in}, {});
  s.task_path = fs::absolute(task->source).string();
  std::vector<std::string> globs = task->scope.editable;
  globs.insert(globs.end(), task->scope.frozen.begin(), task->scope.frozen.end());
  for (const auto& rel : adapters::match_scope(task->workload.workdir, globs)) {
    auto h = adapters::sha256_file(task->workload.workdir + "/" + rel);
    if (!h) {
      err << "infrarsi submit: " << describe(h.error()) << '\n';
      return 1;
    }
    auto fh = std::make_unique<wire::FileHashT>();
    fh->path = rel;
    fh->sha256 = *h;
    s.scope.push_back(std::move(fh));
  }
  s.seed = seed ? flatbuffers::Optional<std::uint64_t>{*seed} : flatbuffers::nullopt;
  s.trials = trials ? flatbuffers::Optional<std::uint32_t>{*trials} : flatbuffers::nullopt;
  s.max_slots = max_slots;
  s.experience = experience;
  auto answer = ask_json(client, messages::submit_task_msg::pack(s), "the daemon refused " + task_path);
  if (!answer) {
    err << "infrarsi submit: " << describe(answer.error()) << '\n';
    return 1;
  }
  auto doc = nlohmann::json::parse(*answer, nullptr, false);
  if (!doc.is_object() || !doc["run_id"].is_string()) {
    err << "infrarsi submit: the daemon's answer has no run id: " << *answer << '\n';
    return 1;
  }
  out << doc["run_id"].get<std::string>() << '\n';
  return 0;
}

int run_daemon_status(const client_options& client, bool json, std::ostream& out,
                      std::ostream& err) {
  wire::ClientRequestT request;
  request.command = "status";
  auto answer = ask_json(client, messages::client_request_msg::pack(request), "the daemon said");
  if (!answer) {
    err << "infrarsi daemon status: " << describe(answer.error()) << '\n';
    return 1;
  }
  auto doc = nlohmann::json::parse(*answer, nullptr, false);
  if (json || !doc.is_object() || !doc["daemon_runs"].is_array() || !doc["nodes"].is_array()) {
    out << *answer << '\n';
    return 0;
  }
  // A document of another shape (another version of the daemon) is printed as it is.
  std::ostringstream text;
  try {
    text << "store " << doc.value("store", "") << (doc.value("draining", false) ? " (draining)" : "")
        << "\n\nruns (" << doc["daemon_runs"].size() << "):\n";
    for (const auto& r : doc["daemon_runs"]) {
      text << "  " << std::left << std::setw(44) << r.value("run_id", "") << " "
          << std::setw(8) << (r.value("active", false) ? "active" : "ended") << " stage "
          << std::setw(8) << r.value("stage", "?") << " trials " << r.value("trials", 0);
      if (r.contains("promoted"))
        text << (r.value("promoted", false) ? ", promoted" : ", nothing promoted");
      text << '\n';
    }
    text << "\nnodes (" << doc["nodes"].size() << "):\n";
    for (const auto& n : doc["nodes"]) {
      std::size_t busy = 0;
      for (const auto& s : n.at("slots"))
        busy += s.value("busy", false) ? 1 : 0;
      text << "  " << std::left << std::setw(24) << n.value("name", "") << " slots " << busy << "/"
          << n.at("slots").size() << " busy, " << n.value("trials_assigned", 0)
          << " trials assigned\n";
      for (const auto& s : n.at("slots"))
        if (s.value("busy", false))
          text << "    slot " << s.value("name", "") << ": run "
              << s.at("running").value("run_id", "") << " trial "
              << s.at("running").value("trial_id", 0) << " attempt "
              << s.at("running").value("attempt", 0) << '\n';
    }
    text << "\ntrials in flight " << doc.value("in_flight", 0) << ", queued "
        << doc.value("queued", 0) << ", lost " << doc.value("lost_attempts", 0) << ", stale results "
        << doc.value("stale_results", 0) << '\n';
  } catch (const nlohmann::json::exception&) {
    out << *answer << '\n';
    return 0;
  }
  out << text.str();
  return 0;
}

// -- node-runner ----------------------------------------------------------------------------------

int run_node(const node_options& o, std::ostream& out, std::ostream& err) {
  signal_guard signals;
  (void) out;
  if (o.connect.rfind("tcp://", 0) != 0 && o.connect.rfind("ipc://", 0) != 0) {
    err << "infrarsi node: --connect '" << o.connect
        << "': expected the daemon's node endpoint, tcp://HOST:PORT (or ipc://PATH)\n";
    return 2;
  }
  if (!o.name.empty() && !messages::valid_node_name(o.name)) {
    err << "infrarsi node: --name: expected 1-128 printable ASCII characters without spaces\n";
    return 2;
  }
  adapters::node_agent_options a;
  a.connect = o.connect;
  a.workdir = fs::absolute(o.workdir).string();
  a.name = o.name;
  a.heartbeat_ms = o.heartbeat_ms;
  a.liveness = o.liveness;
  a.disk_reserve_bytes = o.disk_reserve_bytes;
  a.log = &err;
  auto n = std::max<std::uint32_t>(
    {o.slots, static_cast<std::uint32_t>(o.slot_env.size()),
     static_cast<std::uint32_t>(o.slot_cpus.size())});
  for (std::uint32_t i = 0; i < n; ++i) {
    adapters::node_slot_config s;
    s.name = std::to_string(i);
    if (i < o.slot_env.size()) {
      auto env = parse_slot_env(o.slot_env[i]);
      if (!env) {
        err << "infrarsi node: " << describe(env.error()) << '\n';
        return 2;
      }
      s.env = std::move(*env);
    }
    if (i < o.slot_cpus.size())
      if (auto why = cpu_list_error(o.slot_cpus[i]); !why.empty()) {
        err << "infrarsi node: --slot-cpus '" << o.slot_cpus[i] << "': " << why << '\n';
        return 2;
      }
    if (i < o.slot_cpus.size())
      s.cpus = o.slot_cpus[i];
    a.slots.push_back(std::move(s));
  }
  if (!o.server_key.empty() || !o.key.empty()) {
    if (o.server_key.empty() || o.key.empty()) {
      err << "infrarsi node: --server-key and --key go together (CURVE needs both)\n";
      return 2;
    }
    auto server = adapters::load_public_key_file(o.server_key);
    if (!server) {
      err << "infrarsi node: " << describe(server.error()) << '\n';
      return 1;
    }
    auto mine = adapters::load_secret_key_file(o.key);
    if (!mine) {
      err << "infrarsi node: " << describe(mine.error()) << '\n';
      return 1;
    }
    a.server_public_key = *server;
    a.public_key = mine->public_key;
    a.secret_key = mine->secret_key;
  }
  std::error_code ec;
  fs::create_directories(a.workdir, ec);
  if (ec) {
    err << "infrarsi node: cannot create --workdir '" << a.workdir << "': " << ec.message()
        << '\n';
    return 1;
  }
  zmq::context_t ctx;
  adapters::node_agent agent{ctx, a};
  std::atomic<bool> stop{false};
  signals.start("infrarsi node", [&stop](int) { stop = true; }, err);
  err << "infrarsi node: " << (a.name.empty() ? std::string{"(host name)"} : a.name)
      << " connecting to " << a.connect << " with " << a.slots.size() << " slot(s), trials under "
      << a.workdir << (a.server_public_key.empty() ? ", plain TCP" : ", CURVE") << std::endl;
  auto status = agent.run(stop);
  auto st = agent.stats();
  err << "infrarsi node: stopped (" << st.trials_run << " trial(s) run, " << st.trials_refused
      << " refused, " << st.malformed_frames << " malformed frame(s) dropped)" << std::endl;
  return status;
}

} // namespace infrarsi::runtime
