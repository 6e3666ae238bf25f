#include "runtime/tune.hpp"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/actors.hpp"
#include "actors/decisions.hpp"
#include "adapters/environment.hpp"
#include "runtime/node_bridge.hpp"
#include "runtime/store_paths.hpp"
#include "runtime/task_file.hpp"
#include "store/rocksdb_event_log.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::runtime {

namespace fs = std::filesystem;

namespace {

std::string utc_stamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

std::string default_knowledge_dir(const std::string& task_source) {
  auto beside = fs::path{task_source}.parent_path().parent_path() / "knowledge";
  if (fs::is_directory(beside))
    return beside.string();
  return "config/knowledge";
}

} // namespace

int run_tune(const tune_options& o, std::ostream& out, std::ostream& err) {
  auto task = load_task_file(o.task_path);
  if (!task) {
    err << "infrarsi tune: " << describe(task.error()) << '\n';
    return 1;
  }
  auto store_dir = o.store_dir.empty()
                     ? (fs::path{task->source}.parent_path() / ".infrarsi").string()
                     : o.store_dir;
  std::error_code ec;
  fs::create_directories(store_dir, ec);
  if (ec) {
    err << "infrarsi tune: cannot create store '" << store_dir << "': " << ec.message() << '\n';
    return 1;
  }
  store::rocksdb_event_log_options log_opts;
  log_opts.sync_writes = true;
  auto log = store::rocksdb_event_log::open(store_dir + "/events", log_opts);
  if (!log) {
    err << "infrarsi tune: " << describe(log.error()) << '\n';
    return 1;
  }
  if (const auto& rec = (*log)->recovery(); rec.tail_dropped)
    err << "infrarsi tune: recovered the event log: a torn tail was dropped (" << rec.dropped_bytes
        << " bytes; RocksDB: " << rec.message << "); " << rec.head
        << " events survived, the last at global position "
        << (rec.head > 0 ? std::to_string(rec.head - 1) : std::string{"(none)"}) << '\n';
  auto bank = store::experience_bank::open(store_dir + "/experience");
  if (!bank) {
    err << "infrarsi tune: " << describe(bank.error()) << '\n';
    return 1;
  }
  std::string run_id = o.run_id.empty() ? task->name + "-" + utc_stamp() : o.run_id;
  if (auto bad = store::validate_run_id(run_id)) {
    err << "infrarsi tune: " << describe(bad) << '\n';
    return 1;
  }
  std::uint64_t seed = o.seed.value_or(task->budget.seed);
  if (!o.run_id.empty()) {
    auto state = store::load_run(**log, run_id);
    if (!state) {
      err << "infrarsi tune: " << describe(state.error()) << '\n';
      return 1;
    }
    if (state->events == 0) {
      err << "infrarsi tune: run '" << run_id << "' not found in '" << store_dir
          << "/events'; omit --run to start a new run\n";
      return 1;
    }
    seed = state->seed;
    // The run's contract was locked at init: a resume must use the same task and contract.
    if (state->contract_doc) {
      const auto& locked = *state->contract_doc;
      auto sig = locked.value("workload_signature", std::string{});
      auto locked_task = sig.substr(0, sig.find(':'));
      if (!locked_task.empty() && locked_task != task->name) {
        err << "infrarsi tune: run '" << run_id << "' belongs to task '" << locked_task << "', not '"
            << task->name << "' (" << task->source << "); resume it with its own task file ("
            << state->task_path << ")\n";
        return 1;
      }
      auto now = actors::contract_json(*task);
      if (adapters::sha256_hex(now.dump()) != locked.value("contract_hash", std::string{})) {
        auto keys = actors::contract_changes(locked.value("contract", nlohmann::json::object()),
                                             *task);
        err << "infrarsi tune: " << task->source << ": the contract differs from the one run '"
            << run_id << "' locked at init: " << (keys.empty() ? "its hash differs" : keys)
            << "; a locked contract cannot change (start a new run)\n";
        return 1;
      }
      if (locked.contains("memory_capacity_bytes")
          && locked.value("memory_capacity_bytes", std::uint64_t{0})
               != actors::memory_capacity_bytes(*task)) {
        err << "infrarsi tune: " << task->source << ": the memory capacity (limits."
            << (task->limits.device_memory_bytes > 0 ? "device_memory_bytes" : "memory_cap_bytes")
            << " = " << actors::memory_capacity_bytes(*task) << " bytes) differs from the "
            << locked.value("memory_capacity_bytes", std::uint64_t{0}) << " bytes run '" << run_id
            << "' locked at init; the planner's memory model depends on it (start a new run)\n";
        return 1;
      }
      std::vector<std::string> knobs_then;
      for (const auto& k : locked.value("knobs", nlohmann::json::array()))
        knobs_then.push_back(k.value("name", ""));
      std::vector<std::string> knobs_now;
      for (const auto& k : task->knobs)
        knobs_now.push_back(k.name);
      std::vector<std::string> patches_then;
      const auto patches_doc = locked.value("patches", nlohmann::json::object());
      for (auto it = patches_doc.begin(); it != patches_doc.end(); ++it)
        patches_then.push_back(it.key());
      std::vector<std::string> patches_now;
      for (const auto& p : task->patches)
        patches_now.push_back(p.name);
      std::sort(patches_then.begin(), patches_then.end());
      std::sort(patches_now.begin(), patches_now.end());
      if (knobs_then != knobs_now || patches_then != patches_now) {
        err << "infrarsi tune: " << task->source << ": its knobs or patches differ from those run '"
            << run_id << "' locked at init (knobs then: " << nlohmann::json(knobs_then).dump()
            << ", now: " << nlohmann::json(knobs_now).dump() << "; patches then: "
            << nlohmann::json(patches_then).dump() << ", now: "
            << nlohmann::json(patches_now).dump() << "); start a new run\n";
        return 1;
      }
    }
    err << "infrarsi tune: continuing run " << run_id << " (" << state->events << " events)\n";
  }
  auto run_dir = store_dir + "/runs/" + run_id;
  fs::create_directories(run_dir, ec);

  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::infrarsi>();
  caf::actor_system sys{cfg};
  zmq::context_t zctx;
  auto endpoint = "inproc://infrarsi-node-" + run_id;
  node_server node{zctx, endpoint, *task, run_dir + "/trials", "local"};
  if (auto e = node.start()) {
    err << "infrarsi tune: " << describe(e) << '\n';
    return 1;
  }
  actors::supervisor_options so;
  so.task = &*task;
  so.log = log->get();
  so.bank = bank->get();
  so.zmq_context = &zctx;
  so.node_endpoint = endpoint;
  so.run_id = run_id;
  so.run_dir = run_dir;
  so.knowledge_dir = o.knowledge_dir.empty() ? default_knowledge_dir(task->source)
                                             : o.knowledge_dir;
  so.seed = seed;
  so.trials = o.trials;
  so.until = o.until;
  so.progress = o.quiet ? nullptr : &err;
  std::ofstream trace;
  if (!o.trace_appends.empty()) {
    trace.open(o.trace_appends, std::ios::app);
    if (!trace) {
      err << "infrarsi tune: cannot open --trace-appends file '" << o.trace_appends << "'\n";
      return 1;
    }
    so.append_trace = &trace;
  }
  if (!o.quiet)
    err << "infrarsi tune: run " << run_id << ", task " << task->name << ", store " << store_dir
        << '\n';
  int status = 1;
  {
    caf::scoped_actor self{sys};
    self->spawn<caf::detached>(actors::supervisor, so, caf::actor{self});
    self->receive([&](std::string& summary, int code) {
      (code == 0 ? out : err) << (code == 0 ? "" : "infrarsi tune: ") << summary << '\n';
      status = code;
    });
  }
  node.stop();
  return status;
}

int run_status(const std::string& store_dir, std::ostream& out, std::ostream& err) {
  store::rocksdb_event_log_options opts;
  opts.read_only = true;
  auto log = store::rocksdb_event_log::open(events_dir_of(store_dir), opts);
  if (!log) {
    err << "infrarsi status: " << describe(log.error()) << '\n';
    return 1;
  }
  warn_if_damaged(**log, events_dir_of(store_dir), "infrarsi status", err);
  auto runs = (*log)->list_runs();
  if (!runs) {
    err << "infrarsi status: " << describe(runs.error()) << '\n';
    return 1;
  }
  for (const auto& r : *runs) {
    auto loaded = store::load_run_with_snapshot(**log, r.run_id); // snapshot + tail
    if (!loaded) {
      out << r.run_id << ": " << describe(loaded.error()) << '\n';
      continue;
    }
    const auto* state = &loaded->state;
    std::string stage = state->stages_completed.empty() ? "created" : state->stages_completed.back();
    if (state->stages_started.size() > state->stages_completed.size())
      stage = state->stages_started.back() + " (in progress or interrupted)";
    out << r.run_id << ": " << r.event_count << " events, " << state->trials.size()
        << " trials, stage " << stage;
    if (state->promotion) {
      if (state->promotion->value("promoted", false))
        out << ", promoted " << state->promotion->value("change", "") << " ("
            << state->promotion->value("speedup", 1.0) << "x)";
      else
        out << ", nothing promoted";
    }
    out << '\n';
  }
  if (runs->empty())
    err << "infrarsi status: no runs in '" << store_dir << "'\n";
  return 0;
}

} // namespace infrarsi::runtime
