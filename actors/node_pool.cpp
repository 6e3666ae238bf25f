// The node pool: remote node-runners, their slots, and which attempt runs where. Thin: it matches
// requests to free slots, forwards through the broker, and answers each request with the node's
// result or a loss. The share of each run is decide::fair_share.

#include "actors/node_pool.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "decide/fair_share.hpp"
#include "messages/errc.hpp"
#include "messages/node_protocol.hpp"

namespace infrarsi::actors {

namespace {

using self_ptr = node_pool_actor::stateful_pointer<node_pool_state>;
using state = node_pool_state;

void note(self_ptr self, const std::string& line) {
  if (self->state.o.log != nullptr)
    *self->state.o.log << "infrarsi daemon: " << line << std::endl;
}

std::string key_text(const pool_key& k) {
  return "trial " + std::to_string(std::get<1>(k)) + " attempt " + std::to_string(std::get<2>(k))
         + " of run " + std::get<0>(k);
}

template <class Table>
void send_node(self_ptr self, const std::string& identity, const messages::message<Table>& msg,
               const std::string& run_id) {
  auto env = messages::seal(msg, run_id, "daemon", self->state.sequence++);
  if (env)
    self->state.o.broker->send_to_node(identity, std::move(*env));
}

void control(self_ptr self, const std::string& identity, const std::string& command,
             const std::string& detail, std::uint64_t trial = 0, std::uint32_t attempt = 0,
             const std::string& run_id = {}) {
  wire::NodeControlT c;
  c.command = command;
  c.detail = detail;
  c.trial_id = trial;
  c.attempt = attempt;
  send_node(self, identity, messages::node_control_msg::pack(c), run_id);
}

/// Recomputes every run's share; tells each supervisor whose share changed.
void reshare(self_ptr self) {
  auto& st = self->state;
  std::uint32_t slots = 0;
  for (const auto& [id, n] : st.nodes)
    slots += static_cast<std::uint32_t>(n.slots.size());
  std::vector<std::uint32_t> limits;
  for (const auto& r : st.run_order)
    limits.push_back(st.runs[r].max_slots);
  auto shares = decide::fair_share(slots, limits);
  for (std::size_t i = 0; i < st.run_order.size(); ++i) {
    auto& r = st.runs[st.run_order[i]];
    if (r.share != shares[i]) {
      r.share = shares[i];
      if (r.supervisor)
        caf::anon_send(caf::actor_cast<supervisor_actor>(r.supervisor), slots_atom_v, r.share);
    }
  }
}

/// Answers the request of `k` with a loss and forgets it.
void lose(self_ptr self, const pool_key& k, const std::string& why) {
  auto& st = self->state;
  auto it = st.attempts.find(k);
  if (it == st.attempts.end())
    return;
  ++st.lost_attempts;
  note(self, key_text(k) + " lost: " + why);
  it->second.promise.deliver(make_error(errc::not_found, why));
  st.attempts.erase(it);
}

/// Assigns queued attempts to free slots, oldest first: the live node with the most free slots
/// (ties: by name), that has not refused the run.
void assign(self_ptr self) {
  auto& st = self->state;
  for (auto q = st.queue.begin(); q != st.queue.end();) {
    auto it = st.attempts.find(*q);
    if (it == st.attempts.end()) {
      q = st.queue.erase(q);
      continue;
    }
    const auto& run_id = std::get<0>(*q);
    auto run = st.runs.find(run_id);
    state::node* best = nullptr;
    std::size_t best_free = 0;
    for (auto& [name, identity] : st.by_name) {
      auto& n = st.nodes[identity];
      if (run != st.runs.end() && run->second.refused_by.count(n.name) != 0)
        continue;
      std::size_t free = 0;
      for (const auto& s : n.slots)
        free += s.busy ? 0 : 1;
      if (free > best_free) {
        best = &n;
        best_free = free;
      }
    }
    if (best == nullptr) {
      ++q;
      continue;
    }
    std::uint32_t slot = 0;
    while (best->slots[slot].busy)
      ++slot;
    auto& s = best->slots[slot];
    s.busy = true;
    s.foreign = false;
    s.running = *q;
    it->second.identity = best->identity;
    it->second.slot = slot;
    ++best->trials_assigned;
    wire::TrialAssignmentT a;
    a.slot = slot;
    if (run != st.runs.end()) {
      a.task_toml = run->second.task_toml;
      a.task_path = run->second.task_path;
    }
    const auto& bytes = it->second.spec.bytes();
    a.spec.assign(bytes.data(), bytes.data() + bytes.size());
    send_node(self, best->identity, messages::trial_assignment_msg::pack(a), run_id);
    q = st.queue.erase(q);
  }
}

/// Frees the slot that runs `k` on any node.
void free_slot(self_ptr self, const pool_key& k) {
  for (auto& [id, n] : self->state.nodes)
    for (auto& s : n.slots)
      if (s.busy && s.running == k) {
        s.busy = false;
        s.foreign = false;
        s.running = {};
      }
}

/// Removes node `identity`: every attempt it ran is lost.
void remove_node(self_ptr self, const std::string& identity, const std::string& why) {
  auto& st = self->state;
  auto it = st.nodes.find(identity);
  if (it == st.nodes.end())
    return;
  auto name = it->second.name;
  std::vector<pool_key> lost;
  for (const auto& s : it->second.slots)
    if (s.busy && !s.foreign)
      lost.push_back(s.running);
  st.nodes.erase(it);
  if (auto n = st.by_name.find(name); n != st.by_name.end() && n->second == identity)
    st.by_name.erase(n);
  note(self, "node " + name + " is gone: " + why + "; " + std::to_string(lost.size())
               + " attempt(s) lost");
  for (const auto& k : lost)
    lose(self, k, "node " + name + " " + why);
  reshare(self);
}

void on_hello(self_ptr self, const std::string& identity, const messages::node_hello_msg& h) {
  auto& st = self->state;
  auto name = h->node()->str();
  if (h->protocol() != st.o.protocol) {
    note(self, "node " + name + " refused: protocol " + std::to_string(h->protocol())
                 + ", this daemon speaks " + std::to_string(st.o.protocol));
    control(self, identity, "refused",
            "protocol " + std::to_string(h->protocol()) + " is not this daemon's "
              + std::to_string(st.o.protocol) + "; run the same infrarsi version");
    st.o.broker->forget_node(identity);
    return;
  }
  // The name appears in logs, status and results: printable ASCII, 1-128 characters.
  if (!messages::valid_node_name(name)) {
    control(self, identity, "refused",
            "a node name must be 1-128 printable ASCII characters without spaces");
    st.o.broker->forget_node(identity);
    return;
  }
  if (h->slots() == nullptr || h->slots()->size() == 0 || h->slots()->size() > 4096) {
    control(self, identity, "refused", "a node must offer between 1 and 4096 slots");
    st.o.broker->forget_node(identity);
    return;
  }
  // Attempts still running there (a reconnect, or a restart of this daemon).
  std::map<std::uint32_t, pool_key> running;
  if (h->running() != nullptr)
    for (const auto* a : *h->running())
      running[a->slot()] = pool_key{a->run_id() != nullptr ? a->run_id()->str() : "",
                                    a->trial_id(), a->attempt()};
  // A name held by another connection that was heard from within two heartbeats is in use: the
  // newcomer is refused (two hosts with one name, or a second node-runner started by mistake).
  // An older holder is taken for a dead connection of the same node-runner, which reconnects.
  if (auto old = st.by_name.find(name); old != st.by_name.end() && old->second != identity) {
    const auto& holder = st.nodes[old->second];
    if (std::chrono::steady_clock::now() - holder.last_heard
        < 2 * std::chrono::milliseconds(st.o.heartbeat_ms)) {
      note(self, "node " + name + " refused: the name is in use by a live node-runner");
      control(self, identity, "refused",
              "the name '" + name + "' is in use by another live node-runner; give this one "
              "its own --name");
      st.o.broker->forget_node(identity);
      return;
    }
  }
  // A node that reconnects under a new identity replaces its old entry.
  if (auto old = st.by_name.find(name); old != st.by_name.end() && old->second != identity) {
    auto old_identity = old->second;
    auto& prev = st.nodes[old_identity];
    for (const auto& s : prev.slots) // attempts it still runs move with it, the others are lost
      if (s.busy && !s.foreign) {
        bool still = false;
        for (const auto& [slot, k] : running)
          still = still || k == s.running;
        if (!still)
          lose(self, s.running, "node " + name + " reconnected without it");
      }
    st.nodes.erase(old_identity);
    st.by_name.erase(old);
    st.o.broker->forget_node(old_identity);
  }
  auto& n = st.nodes[identity];
  bool fresh = n.slots.empty();
  n.last_heard = std::chrono::steady_clock::now();
  n.identity = identity;
  n.name = name;
  n.fingerprint = h->fingerprint() != nullptr ? h->fingerprint()->str() : "";
  n.hardware = h->hardware() != nullptr ? h->hardware()->str() : "";
  n.slots.assign(h->slots()->size(), {});
  for (std::uint32_t i = 0; i < h->slots()->size(); ++i) {
    const auto* info = h->slots()->Get(i);
    n.slots[i].name = info->name() != nullptr ? info->name()->str() : std::to_string(i);
    if (auto r = running.find(i); r != running.end()) {
      n.slots[i].busy = true;
      n.slots[i].running = r->second;
      auto p = st.attempts.find(r->second);
      n.slots[i].foreign = p == st.attempts.end();
      if (p != st.attempts.end()) {
        p->second.identity = identity;
        p->second.slot = i;
      }
    }
  }
  st.by_name[name] = identity;
  if (fresh)
    note(self, "node " + name + " joined with " + std::to_string(n.slots.size()) + " slot(s)"
                 + (running.empty() ? ""
                                    : ", " + std::to_string(running.size())
                                        + " attempt(s) still running"));
  control(self, identity, "welcome", "node " + name);
  reshare(self);
  assign(self);
}

void on_result(self_ptr self, const std::string& identity, const std::string& run_id,
               const messages::trial_result_msg& r) {
  auto& st = self->state;
  pool_key k{run_id, r->trial_id(), r->attempt()};
  free_slot(self, k);
  auto it = st.attempts.find(k);
  if (it != st.attempts.end()) {
    it->second.promise.deliver(r);
    st.attempts.erase(it);
  } else {
    // Nobody waits for it: the attempt was given up (its node went silent, or this daemon
    // restarted). Its run logs it as stale; it is never counted.
    ++st.stale_results;
    auto run = st.runs.find(run_id);
    note(self, "a late result for " + key_text(k) + " from node "
                 + (st.nodes.count(identity) != 0 ? st.nodes[identity].name : identity)
                 + (run != st.runs.end() ? ": logged as stale" : ": its run is not active"));
    if (run != st.runs.end() && run->second.supervisor)
      caf::anon_send(caf::actor_cast<supervisor_actor>(run->second.supervisor), stale_atom_v, r);
  }
  assign(self);
}

void on_node_message(self_ptr self, const std::string& identity,
                     const messages::envelope_msg& env) {
  auto& st = self->state;
  auto run_id = env->run_id() != nullptr ? env->run_id()->str() : std::string{};
  if (env->kind() == wire::MessageKind::NodeHello) {
    if (auto h = messages::open<wire::NodeHello>(env))
      on_hello(self, identity, *h);
    return;
  }
  auto known = st.nodes.find(identity);
  if (env->kind() == wire::MessageKind::TrialResult) {
    // A result is accepted from any peer (it is fenced by its attempt); a peer that did not say
    // hello is asked to.
    if (auto r = messages::open<wire::TrialResult>(env))
      on_result(self, identity, run_id, *r);
    if (known == st.nodes.end())
      control(self, identity, "hello", "say hello first");
    return;
  }
  if (known == st.nodes.end()) {
    control(self, identity, "hello", "unknown node: say hello");
    return;
  }
  known->second.last_heard = std::chrono::steady_clock::now();
  switch (env->kind()) {
    case wire::MessageKind::Heartbeat: break;
    case wire::MessageKind::NodeControl: {
      auto c = messages::open<wire::NodeControl>(env);
      if (c && (*c)->command()->str() == "bye") {
        remove_node(self, identity, "said goodbye (the node-runner is stopping)");
        st.o.broker->forget_node(identity);
        assign(self);
      }
      break;
    }
    case wire::MessageKind::TrialRefused: {
      auto r = messages::open<wire::TrialRefused>(env);
      if (!r)
        return;
      pool_key k{run_id, (*r)->trial_id(), (*r)->attempt()};
      free_slot(self, k);
      if (auto run = st.runs.find(run_id); run != st.runs.end())
        run->second.refused_by.insert(known->second.name);
      lose(self, k, "refused: " + ((*r)->reason() != nullptr ? (*r)->reason()->str() : ""));
      assign(self);
      break;
    }
    default: break; // a kind a daemon never receives from a node: ignored
  }
}

} // namespace

node_pool_actor::behavior_type node_pool(node_pool_actor::stateful_pointer<node_pool_state> self,
                                         node_pool_options options) {
  self->state.o = std::move(options);
  if (self->state.o.protocol == 0)
    self->state.o.protocol = messages::node_protocol_version;
  return {
    [self](run_atom, const std::string& run_id, const messages::trial_spec_msg& spec)
      -> caf::result<messages::trial_result_msg> {
      auto& st = self->state;
      pool_key k{run_id, spec->trial_id(), spec->attempt()};
      auto promise = self->make_response_promise<messages::trial_result_msg>();
      if (st.attempts.count(k) != 0) {
        promise.deliver(make_error(errc::invalid_argument, key_text(k) + " is already in the pool"));
        return promise;
      }
      st.attempts[k] = state::pending{spec, promise, {}, 0};
      st.queue.push_back(k);
      assign(self);
      return promise;
    },
    [self](join_atom, const std::string& run_id, std::uint32_t max_slots,
           const std::string& task_toml, const std::string& task_path, const caf::actor& sup) {
      auto& st = self->state;
      if (st.runs.count(run_id) == 0)
        st.run_order.push_back(run_id);
      auto& r = st.runs[run_id];
      r.max_slots = max_slots;
      r.task_toml = task_toml;
      r.task_path = task_path;
      r.supervisor = sup;
      r.share = UINT32_MAX; // always told its first share
      reshare(self);
    },
    [self](leave_atom, const std::string& run_id) {
      auto& st = self->state;
      st.runs.erase(run_id);
      st.run_order.erase(std::remove(st.run_order.begin(), st.run_order.end(), run_id),
                         st.run_order.end());
      // Its requests are answered (the supervisor has ended; nobody reads them), its queued
      // attempts dropped and its running ones cancelled; their results come back as stale.
      std::vector<pool_key> mine;
      for (const auto& [k, p] : st.attempts) {
        if (std::get<0>(k) != run_id)
          continue;
        mine.push_back(k);
        if (!p.identity.empty()) // running on a node: stopped there (its slot frees with the result)
          control(self, p.identity, "cancel", "the run left the pool", std::get<1>(k),
                  std::get<2>(k), run_id);
      }
      for (const auto& k : mine) {
        st.attempts[k].promise.deliver(make_error(errc::interrupted, "the run left the pool"));
        st.attempts.erase(k);
      }
      reshare(self);
    },
    [self](node_atom, const std::string& identity, const messages::envelope_msg& env) {
      on_node_message(self, identity, env);
    },
    [self](gone_atom, const std::string& identity, const std::string& why) {
      remove_node(self, identity, why);
      assign(self);
    },
    [self](sendfail_atom, const std::string& identity, const messages::envelope_msg& env,
           const std::string& why) {
      if (env->kind() != wire::MessageKind::TrialAssignment)
        return; // a heartbeat or control that did not go out: the liveness rule handles it
      auto a = messages::open<wire::TrialAssignment>(env);
      if (!a)
        return;
      auto spec = messages::trial_spec_msg::decode((*a)->spec()->data(), (*a)->spec()->size());
      if (!spec)
        return;
      pool_key k{env->run_id() != nullptr ? env->run_id()->str() : "", (*spec)->trial_id(),
                 (*spec)->attempt()};
      free_slot(self, k);
      lose(self, k, "the assignment could not be sent to its node: " + why);
      remove_node(self, identity, "unreachable (" + why + ")");
      assign(self);
    },
    [self](status_atom) -> std::string {
      auto& st = self->state;
      const auto now = std::chrono::steady_clock::now();
      nlohmann::json nodes = nlohmann::json::array();
      for (const auto& [name, identity] : st.by_name) {
        const auto& n = st.nodes.at(identity);
        nlohmann::json slots = nlohmann::json::array();
        for (const auto& s : n.slots) {
          nlohmann::json j = {{"name", s.name}, {"busy", s.busy}};
          if (s.busy)
            j["running"] = {{"run_id", std::get<0>(s.running)},
                            {"trial_id", std::get<1>(s.running)},
                            {"attempt", std::get<2>(s.running)},
                            {"foreign", s.foreign}};
          slots.push_back(std::move(j));
        }
        nodes.push_back({{"name", n.name},
                         {"fingerprint", n.fingerprint},
                         {"hardware", n.hardware},
                         // Seconds since the pool last heard from it (a heartbeat or any message).
                         {"heard_s_ago",
                          std::chrono::duration<double>(now - n.last_heard).count()},
                         {"slots", slots},
                         {"trials_assigned", n.trials_assigned}});
      }
      nlohmann::json runs = nlohmann::json::array();
      for (const auto& r : st.run_order)
        runs.push_back({{"run_id", r},
                        {"share", st.runs.at(r).share},
                        {"max_slots", st.runs.at(r).max_slots}});
      return nlohmann::json{{"nodes", nodes},
                            {"queued", st.queue.size()},
                            {"in_flight", st.attempts.size() - st.queue.size()},
                            {"runs", runs},
                            {"stale_results", st.stale_results},
                            {"lost_attempts", st.lost_attempts}}
        // Slot names, fingerprints and run ids come from peers: invalid UTF-8 is replaced,
        // never thrown.
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }};
}

} // namespace infrarsi::actors
