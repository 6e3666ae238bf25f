#include "runtime/experience_sync.hpp"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "adapters/environment.hpp"
#include "messages/errc.hpp"
#include "messages/experience_pack.hpp"
#include "messages/codec.hpp"
#include "runtime/daemon.hpp"

namespace infrarsi::runtime {

namespace {

namespace fs = std::filesystem;

/// An error's message without describe()'s "code: " prefix (for a message that adds its own
/// context around it).
std::string message_of(const caf::error& e) {
  auto text = describe(e);
  const std::string prefix = std::string{to_string(code_of(e))} + ": ";
  return text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : text;
}

bool is_cluster_id(const std::string& s) {
  return s.size() == adapters::cluster_id_hex_digits
         && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

} // namespace

caf::expected<built_pack> make_pack(const store::experience_bank& bank,
                                    const adapters::cluster_identity& me, std::uint64_t since,
                                    const std::set<finding_key>& exclude, std::size_t max_bytes) {
  auto records = bank.records();
  if (!records)
    return std::move(records.error());
  struct entry {
    messages::experience_finding finding;
    bool imported;
  };
  std::vector<entry> eligible;
  for (const auto& r : *records) {
    bool imported = r.value("imported", false);
    finding_key key{r.value("origin", ""), r.value("origin_position", std::uint64_t{0})};
    if ((!imported && key.second < since) || exclude.count(key) != 0)
      continue;
    eligible.push_back({{key.first, key.second, store::experience_finding_of(r).dump()}, imported});
  }
  std::sort(eligible.begin(), eligible.end(), [](const entry& a, const entry& b) {
    return std::tie(a.finding.origin, a.finding.origin_position)
           < std::tie(b.finding.origin, b.finding.origin_position);
  });
  built_pack built;
  messages::experience_pack_body body;
  body.cluster_id = me.cluster_id;
  body.public_key = me.public_key;
  body.since = since;
  std::size_t bytes = 0;
  for (auto& e : eligible) {
    if (max_bytes != 0 && !body.findings.empty() && bytes + e.finding.document.size() > max_bytes) {
      built.complete = false;
      break;
    }
    bytes += e.finding.document.size();
    ++(e.imported ? built.imported : built.local);
    body.findings.push_back(std::move(e.finding));
  }
  auto signed_bytes = messages::encode_pack_body(body);
  built.bytes = messages::encode_pack(signed_bytes, me.sign(signed_bytes));
  return built;
}

caf::expected<std::set<finding_key>> held_findings(const store::experience_bank& bank) {
  auto records = bank.records();
  if (!records)
    return std::move(records.error());
  std::set<finding_key> keys;
  for (const auto& r : *records)
    keys.emplace(r.value("origin", ""), r.value("origin_position", std::uint64_t{0}));
  return keys;
}

caf::expected<trust_set> load_trust(const std::string& file, bool required) {
  trust_set t;
  std::error_code ec;
  if (!required && !fs::exists(file, ec)) {
    t.label = "(no '" + file + "': only this store's own cluster is trusted)";
    return t;
  }
  auto list = adapters::load_trust_list(file);
  if (!list)
    return std::move(list.error());
  t.trusted = std::move(*list);
  t.label = "'" + file + "'";
  return t;
}

caf::expected<verified_pack> verify_pack(std::string_view bytes,
                                         const std::string& own_cluster_id,
                                         const trust_set& trust) {
  auto pack = messages::open_pack(bytes, messages::verify_limits{});
  if (!pack)
    return std::move(pack.error());
  const auto& body = pack->decoded;
  if (!adapters::verify_signature(body.public_key, pack->body, pack->signature))
    return make_error(errc::not_permitted,
                      "the signature does not verify: the pack was changed after it was signed "
                      "(tampered or damaged), or was not signed by the key it names (public key "
                        + adapters::to_hex(body.public_key) + ")");
  verified_pack v;
  v.signer = adapters::cluster_id_of(body.public_key);
  if (body.cluster_id != v.signer)
    return make_error(errc::not_permitted, "the pack names cluster id '" + body.cluster_id
                                             + "' but its public key's cluster id is "
                                             + v.signer);
  if (v.signer == own_cluster_id) {
    v.signer_name = "this cluster";
  } else {
    for (const auto& t : trust.trusted)
      if (t.public_key == body.public_key)
        v.signer_name = t.name;
    if (v.signer_name.empty())
      return make_error(errc::not_permitted,
                        "signer not trusted: cluster " + v.signer + " (public key "
                          + adapters::to_hex(body.public_key) + ") is not in the trust list "
                          + trust.label
                          + "; add it as [[trusted]] name = \"...\" public_key = \"...\"");
  }
  std::set<finding_key> seen;
  for (std::size_t i = 0; i < body.findings.size(); ++i) {
    const auto& f = body.findings[i];
    const auto label = "finding " + std::to_string(i + 1) + " (origin '" + f.origin
                       + "', origin position " + std::to_string(f.origin_position) + ")";
    if (!is_cluster_id(f.origin))
      return make_error(errc::corrupt_data,
                        label + ": the origin is not a cluster id (32 lower-case hex digits)");
    if (!seen.emplace(f.origin, f.origin_position).second)
      return make_error(errc::corrupt_data,
                        label + ": the same origin and position as an earlier finding");
    auto doc = nlohmann::json::parse(f.document, nullptr, false);
    auto text_field = [&](const char* k) {
      return doc.contains(k) && doc[k].is_string() && !doc[k].get<std::string>().empty()
             && doc[k].get<std::string>().find('\0') == std::string::npos;
    };
    if (!doc.is_object() || !text_field("hardware") || !text_field("workload"))
      return make_error(errc::corrupt_data,
                        label + ": the document is not an experience/1 JSON object with "
                                "non-empty hardware and workload strings");
    v.findings.push_back({f.origin, f.origin_position, store::experience_finding_of(doc)});
  }
  v.sha256 = adapters::sha256_hex(bytes);
  return v;
}

caf::expected<import_counts> append_pack(verified_pack pack, store::event_log& log,
                                         store::experience_bank& bank) {
  import_counts counts;
  counts.offered = pack.findings.size();
  std::vector<store::new_event> events;
  for (auto& f : pack.findings) {
    if (f.origin == bank.cluster_id()) {
      ++counts.own;
      continue;
    }
    auto have = bank.lookup(f.origin, f.position);
    if (!have)
      return std::move(have.error());
    if (*have) {
      ++counts.present;
      if (store::experience_finding_of(**have) != f.document)
        ++counts.conflicting;
      continue;
    }
    nlohmann::json doc = {{"origin", f.origin},
                          {"origin_position", f.position},
                          {"finding", std::move(f.document)},
                          {"via", pack.signer},
                          {"pack_sha256", pack.sha256}};
    events.push_back(store::new_event::of(
      wire::EventKind::ExperienceImported,
      messages::make_document("experience_import/1", doc.dump())));
  }
  counts.imported = events.size();
  if (events.empty())
    return counts;
  auto version = log.version(store::imported_experience_stream);
  if (!version)
    return std::move(version.error());
  // One atomic batch: all the pack's new findings, or none.
  auto appended = log.append(store::imported_experience_stream, *version, events);
  if (!appended)
    return std::move(appended.error());
  if (auto caught = bank.catch_up())
    return caught;
  return counts;
}

caf::expected<bank_summary> summarize(const store::experience_bank& bank) {
  auto records = bank.records();
  if (!records)
    return std::move(records.error());
  auto content = bank.content();
  if (!content)
    return std::move(content.error());
  bank_summary s;
  s.records = records->size();
  for (const auto& r : *records)
    s.imported += r.value("imported", false) ? 1 : 0;
  s.position = bank.position();
  s.hash = adapters::sha256_hex(*content);
  return s;
}

nlohmann::json pull_entry(const caf::expected<pull_result>& pulled) {
  nlohmann::json entry = {{"ok", static_cast<bool>(pulled)}};
  if (!pulled) {
    entry["error"] = describe(pulled.error());
    return entry;
  }
  entry["pulled"] = pulled->counts.imported;
  entry["offered"] = pulled->counts.offered;
  entry["present"] = pulled->counts.present;
  entry["conflicting"] = pulled->counts.conflicting;
  entry["own"] = pulled->counts.own;
  entry["rounds"] = pulled->rounds;
  entry["signer"] = pulled->signer;
  entry["signer_name"] = pulled->signer_name;
  return entry;
}

nlohmann::json bank_entry(const bank_summary& summary) {
  return {{"records", summary.records},
          {"imported", summary.imported},
          {"position", summary.position},
          {"hash", summary.hash}};
}

std::string pull_request_argument(const std::set<finding_key>& have, std::size_t max_bytes) {
  nlohmann::json by_origin = nlohmann::json::object();
  for (const auto& [origin, position] : have)
    by_origin[origin].push_back(position);
  return nlohmann::json{{"have", by_origin}, {"max_bytes", max_bytes}}.dump();
}

caf::expected<pull_request> parse_pull_request(std::string_view argument) {
  pull_request r;
  if (argument.empty())
    return r;
  auto doc = nlohmann::json::parse(argument, nullptr, false);
  auto bad = [](const std::string& what) {
    return make_error(errc::invalid_argument, "experience-pull: " + what);
  };
  if (!doc.is_object())
    return bad("the argument is not a JSON object");
  if (doc.contains("max_bytes")) {
    if (!doc["max_bytes"].is_number_unsigned())
      return bad("max_bytes: expected a non-negative integer");
    auto n = doc["max_bytes"].get<std::uint64_t>();
    if (n != 0)
      r.max_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(n, max_reply_bytes));
  }
  if (!doc.contains("have"))
    return r;
  if (!doc["have"].is_object())
    return bad("have: expected an object of origin cluster id -> positions");
  for (const auto& [origin, positions] : doc["have"].items()) {
    if (!is_cluster_id(origin))
      return bad("have: '" + origin.substr(0, 64) + "' is not a cluster id (32 hex digits)");
    if (!positions.is_array())
      return bad("have." + origin + ": expected an array of positions");
    for (const auto& p : positions) {
      if (!p.is_number_unsigned())
        return bad("have." + origin + ": expected non-negative integer positions");
      r.have.emplace(origin, p.get<std::uint64_t>());
    }
  }
  return r;
}

caf::expected<pull_result> pull_from_peer(const experience_peer& peer, store::event_log& log,
                                          store::experience_bank& bank, const trust_set& trust) {
  pull_result result;
  result.peer = peer.name;
  client_options client;
  client.endpoint = peer.endpoint;
  client.server_key = peer.server_key;
  client.key = peer.key;
  client.timeout_s = peer.timeout_s;
  client.cancelled = peer.cancelled;
  for (int round = 0; round < 64; ++round) {
    if (auto caught = bank.catch_up())
      return caught;
    auto have = held_findings(bank);
    if (!have)
      return std::move(have.error());
    wire::ClientRequestT request;
    request.command = "experience-pull";
    request.argument = pull_request_argument(*have, max_reply_bytes);
    auto env = messages::seal(messages::client_request_msg::pack(request), "", "experience-sync",
                              static_cast<std::uint64_t>(round));
    if (!env)
      return std::move(env.error());
    auto answer = ask_daemon(client, *env);
    if (!answer && code_of(answer.error()) == errc::not_found) {
      // No answer: the peer is down, or the CURVE handshake failed (which ZeroMQ does not
      // report to the client): say which keys were used and where they are set.
      const std::string keys_at = peer.configured_at.empty()
                                    ? std::string{"--server-key and --key"}
                                    : peer.configured_at + ".server_key and .key";
      std::string why = "no answer from peer '" + peer.name + "' at " + peer.endpoint
                        + " within " + std::to_string(static_cast<long>(peer.timeout_s))
                        + " s: is its daemon running and listening there?";
      if (peer.server_key.empty())
        why += " This side connects without CURVE (" + keys_at
               + " not set): a peer with [security] keys answers only CURVE clients.";
      else
        why += " With CURVE: is " + peer.server_key + " the peer daemon's public key, and is "
               "the public key of " + peer.key + " on the peer's security.allow_clients (or "
               "allow) list? (" + keys_at + "; the peer's log names a refused key.)";
      return make_error(errc::not_found, why);
    }
    if (!answer)
      return std::move(answer.error());
    ++result.rounds;
    const auto& reply = **answer;
    if (!reply.ok())
      return make_error(errc::invalid_argument,
                        "peer '" + peer.name + "' (" + peer.endpoint + ") refused the pull: "
                          + (reply.error() != nullptr ? reply.error()->str() : std::string{}));
    auto info = nlohmann::json::parse(reply.json()->str(), nullptr, false);
    if (reply.data() == nullptr || reply.data()->size() == 0)
      return make_error(errc::corrupt_data, "peer '" + peer.name + "' (" + peer.endpoint
                                              + ") answered the pull without a pack");
    std::string_view bytes{reinterpret_cast<const char*>(reply.data()->data()),
                           reply.data()->size()};
    auto verified = verify_pack(bytes, bank.cluster_id(), trust);
    if (!verified)
      return make_error(code_of(verified.error()),
                        "peer '" + peer.name + "' (" + peer.endpoint
                          + "): its pack was refused: " + message_of(verified.error()));
    result.signer = verified->signer;
    result.signer_name = verified->signer_name;
    auto counts = append_pack(std::move(*verified), log, bank);
    if (!counts)
      return std::move(counts.error());
    result.counts.offered += counts->offered;
    result.counts.imported += counts->imported;
    result.counts.present += counts->present;
    result.counts.conflicting += counts->conflicting;
    result.counts.own += counts->own;
    // Complete, or nothing new came in (a peer that keeps offering what we hold is not asked
    // forever).
    if (info.value("complete", true) || counts->imported == 0)
      break;
  }
  return result;
}

} // namespace infrarsi::runtime
