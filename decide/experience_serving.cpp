#include "decide/experience_serving.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include "adapters/environment.hpp"
#include "tuning/search_space.hpp"

namespace infrarsi::decide {

namespace {

std::string lower(std::string s) {
  for (auto& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains(const std::string& haystack, const char* needle) {
  return haystack.find(needle) != std::string::npos;
}

std::uint64_t u64(const nlohmann::json& doc, const char* key) {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_number_integer())
    return 0;
  auto v = doc[key].get<std::int64_t>();
  return doc[key].is_number_unsigned() ? doc[key].get<std::uint64_t>()
                                       : static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0));
}

std::string str(const nlohmann::json& doc, const char* key) {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_string())
    return {};
  return doc[key].get<std::string>();
}

double num(const nlohmann::json& doc, const char* key, double fallback) {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_number())
    return fallback;
  return doc[key].get<double>();
}

/// Memory class: the larger memory at most twice the smaller (unknown memory: same class).
bool same_memory_class(std::uint64_t a, std::uint64_t b) {
  if (a == 0 || b == 0)
    return true;
  auto lo = std::min(a, b);
  auto hi = std::max(a, b);
  return hi <= 2 * lo;
}

} // namespace

const char* to_string(hardware_match m) {
  switch (m) {
  case hardware_match::same_model:
    return "same GPU model";
  case hardware_match::same_family_memory:
    return "same family and memory class";
  case hardware_match::other:
    break;
  }
  return "other hardware";
}

const char* to_string(experience_mode m) {
  switch (m) {
  case experience_mode::filtered:
    return "filtered";
  case experience_mode::all:
    return "all";
  case experience_mode::none:
    break;
  }
  return "none";
}

std::optional<experience_mode> parse_experience_mode(const std::string& text) {
  for (auto m : {experience_mode::filtered, experience_mode::all, experience_mode::none})
    if (text == to_string(m))
      return m;
  return std::nullopt;
}

std::string gpu_family(const std::string& gpu) {
  auto g = lower(gpu);
  // Longer, more specific names first (GH200 before H200, GB200 before B200).
  static const std::pair<const char*, const char*> table[] = {
    {"gh200", "hopper"}, {"gb200", "blackwell"}, {"h100", "hopper"},     {"h200", "hopper"},
    {"h800", "hopper"},  {"h20", "hopper"},      {"b100", "blackwell"},  {"b200", "blackwell"},
    {"a100", "ampere"},  {"a800", "ampere"},     {"a6000", "ampere"},    {"a40", "ampere"},
    {"a30", "ampere"},   {"a10", "ampere"},      {"rtx 30", "ampere"},   {"l40", "ada"},
    {"l4", "ada"},       {"rtx 40", "ada"},      {"v100", "volta"},      {"mi300", "cdna3"},
    {"mi250", "cdna2"},
  };
  for (const auto& [needle, family] : table)
    if (contains(g, needle))
      return family;
  return g;
}

nlohmann::json hardware_identity(const tuning::task_spec& task, const nlohmann::json& node) {
  const auto& hw = task.hardware;
  nlohmann::json software = nlohmann::json::object();
  for (const auto& [k, v] : hw.software)
    software[k] = v;
  auto memory = hw.gpu_memory_bytes != 0 ? hw.gpu_memory_bytes : task.limits.device_memory_bytes;
  if (hw.declared)
    return {{"declared", true},
            {"gpu", hw.gpu},
            {"gpu_family", gpu_family(hw.gpu)},
            {"gpu_memory_bytes", memory},
            {"gpus_per_node", hw.gpus_per_node},
            {"nodes", hw.nodes},
            {"interconnect", hw.interconnect},
            {"cpu", hw.cpu},
            {"simulated", hw.simulated},
            {"software", software}};
  std::string gpu;
  std::uint32_t gpus = 0;
  if (node.is_object() && node.contains("gpus") && node["gpus"].is_array())
    for (const auto& g : node["gpus"])
      if (g.is_string()) {
        if (gpu.empty())
          gpu = g.get<std::string>();
        ++gpus;
      }
  // A model name as the driver prints it has leading blanks ("Model:\t\t NVIDIA H100 ...").
  auto first = gpu.find_first_not_of(" \t");
  gpu = first == std::string::npos ? std::string{} : gpu.substr(first);
  auto cpu = str(node, "cpu");
  if (gpu.empty())
    gpu = "cpu:" + cpu;
  return {{"declared", false},
          {"gpu", gpu},
          {"gpu_family", gpu_family(gpu)},
          {"gpu_memory_bytes", memory},
          {"gpus_per_node", std::max<std::uint32_t>(gpus, 1)},
          {"nodes", std::uint32_t{1}},
          {"interconnect", ""},
          {"cpu", cpu},
          {"simulated", false},
          {"software", software}};
}

std::string declared_hardware_fingerprint(const nlohmann::json& identity) {
  nlohmann::json key = {{"gpu", str(identity, "gpu")},
                        {"gpu_memory_bytes", u64(identity, "gpu_memory_bytes")},
                        {"gpus_per_node", u64(identity, "gpus_per_node")},
                        {"nodes", u64(identity, "nodes")},
                        {"interconnect", str(identity, "interconnect")}};
  return adapters::sha256_hex(key.dump()).substr(0, 16);
}

std::string run_hardware_fingerprint(const tuning::task_spec& task, const nlohmann::json& node) {
  if (task.hardware.declared)
    return declared_hardware_fingerprint(hardware_identity(task, node));
  return adapters::hardware_fingerprint(node);
}

nlohmann::json workload_identity(const tuning::task_spec& task) {
  nlohmann::json shape = nlohmann::json::object();
  for (const auto& [k, v] : task.model.shape)
    shape[k] = v;
  std::vector<std::string> layout;
  for (const auto& k : task.knobs)
    if (std::find(k.tags.begin(), k.tags.end(), "parallelism") != k.tags.end())
      layout.push_back(k.name);
  std::sort(layout.begin(), layout.end());
  nlohmann::json doc = {{"model", task.model.declared ? task.model.name : "task:" + task.name},
                        {"architecture", task.model.architecture},
                        {"shape", shape},
                        {"layout", layout}};
  doc["class"] = adapters::sha256_hex(doc.dump()).substr(0, 16);
  return doc;
}

hardware_match match_hardware(const nlohmann::json& finding, const nlohmann::json& run) {
  auto gpu = lower(str(finding, "gpu"));
  if (!gpu.empty() && gpu == lower(str(run, "gpu"))
      && u64(finding, "gpu_memory_bytes") == u64(run, "gpu_memory_bytes")
      && u64(finding, "gpus_per_node") == u64(run, "gpus_per_node")
      && u64(finding, "nodes") == u64(run, "nodes"))
    return hardware_match::same_model;
  auto family = str(finding, "gpu_family");
  if (!family.empty() && family == str(run, "gpu_family")
      && same_memory_class(u64(finding, "gpu_memory_bytes"), u64(run, "gpu_memory_bytes")))
    return hardware_match::same_family_memory;
  return hardware_match::other;
}

nlohmann::json experience_pack(const std::vector<nlohmann::json>& records,
                               const serving_request& request) {
  struct candidate {
    const nlohmann::json* record;
    hardware_match match;
    bool same_workload;
    double speedup;
    std::uint64_t position;
  };
  std::vector<candidate> served;
  std::uint64_t other_workload = 0;
  const auto run_class = str(request.workload_identity, "class");
  if (request.mode != experience_mode::none)
    for (const auto& r : records) {
      // A local finding's global position; an imported one has its origin's position instead.
      auto position = r.contains("position") ? u64(r, "position") : u64(r, "origin_position");
      candidate c{&r, hardware_match::other, false, num(r, "speedup", 1.0), position};
      if (r.contains("hardware_identity") && request.hardware_identity.is_object()
          && !request.hardware_identity.empty())
        c.match = match_hardware(r["hardware_identity"], request.hardware_identity);
      else if (str(r, "hardware") == request.hardware_fingerprint)
        c.match = hardware_match::same_model;
      if (r.contains("workload_identity") && !run_class.empty())
        c.same_workload = str(r["workload_identity"], "class") == run_class;
      else
        c.same_workload = str(r, "workload") == request.workload_signature;
      if (request.mode == experience_mode::filtered && !c.same_workload) {
        ++other_workload;
        continue;
      }
      served.push_back(c);
    }
  const bool by_match = request.mode == experience_mode::filtered;
  std::stable_sort(served.begin(), served.end(), [by_match](const candidate& a, const candidate& b) {
    if (by_match && a.match != b.match)
      return a.match < b.match;
    if (a.speedup != b.speedup)
      return a.speedup > b.speedup;
    return a.position < b.position;
  });
  nlohmann::json seeds = nlohmann::json::array();
  nlohmann::json by_rank = {{to_string(hardware_match::same_model), 0},
                            {to_string(hardware_match::same_family_memory), 0},
                            {to_string(hardware_match::other), 0}};
  std::set<std::string> configs;
  for (const auto& c : served) {
    const auto& r = *c.record;
    auto config = r.contains("config") ? r["config"] : nlohmann::json::object();
    if (!configs.insert(config.dump()).second)
      continue;
    std::string origin = r.contains("hardware_identity") ? str(r["hardware_identity"], "gpu")
                                                         : str(r, "hardware");
    seeds.push_back({{"config", config},
                     {"speedup", c.speedup},
                     {"ci_low", num(r, "ci_low", c.speedup)},
                     {"run", str(r, "run")},
                     {"position", c.position},
                     {"origin_hardware", origin},
                     {"match", to_string(c.match)},
                     {"same_workload", c.same_workload}});
    if (r.contains("peak_memory_bytes"))
      seeds.back()["peak_memory_bytes"] = r["peak_memory_bytes"];
    if (r.contains("origin")) // the cluster that found it (docs/experience.md, "Federation")
      seeds.back()["origin"] = r["origin"];
    by_rank[to_string(c.match)] = by_rank[to_string(c.match)].get<std::uint64_t>() + 1;
  }
  nlohmann::json pack = {{"hardware", request.hardware_fingerprint},
                         {"workload", request.workload_signature},
                         {"hardware_identity", request.hardware_identity},
                         {"workload_identity", request.workload_identity},
                         {"mode", to_string(request.mode)},
                         {"seeds", seeds},
                         {"served_by_match", by_rank},
                         {"not_served", {{"other_workload", other_workload}}},
                         {"serving", "propose-or-explain/1"}};
  // What the models of the best finding of this workload on the same GPU model learnt: the next
  // run's priors (experience_priors). Not from the same family: measured in the transfer
  // experiment, H200 findings' effects as an H100 run's priors ended at 0.972 of the optimum
  // against 0.989 with the seeds alone (bench/README.md, "Transfer").
  for (const auto& c : served) {
    const auto& r = *c.record;
    if (!c.same_workload || c.match != hardware_match::same_model || !r.contains("effects")
        || !r["effects"].is_array() || r["effects"].empty())
      continue;
    nlohmann::json effects = nlohmann::json::array();
    for (const auto& e : r["effects"])
      if (e.is_object() && e.contains("feature") && e["feature"].is_string())
        effects.push_back({{"feature", e["feature"]},
                           {"speedup", num(e, "posterior_speedup", 1.0)},
                           {"log_sd", num(e, "posterior_log_sd", 0.0)},
                           {"trials", u64(e, "trials")}});
    nlohmann::json memory = nlohmann::json::array();
    if (r.contains("memory") && r["memory"].is_object() && r["memory"].value("fitted", false)
        && r["memory"].contains("prices") && r["memory"]["prices"].is_array())
      for (const auto& m : r["memory"]["prices"])
        if (m.is_object() && m.contains("feature") && m["feature"].is_string())
          memory.push_back({{"feature", m["feature"]}, {"bytes", num(m, "bytes", 0.0)}});
    nlohmann::json adjustment = {{"run", str(r, "run")},
                                 {"origin_hardware", r.contains("hardware_identity")
                                                       ? str(r["hardware_identity"], "gpu")
                                                       : str(r, "hardware")},
                                 {"match", to_string(c.match)},
                                 {"effects", effects},
                                 {"memory", memory}};
    if (r.contains("origin"))
      adjustment["origin"] = r["origin"];
    pack["prior_adjustment"] = adjustment;
    break;
  }
  return pack;
}

std::optional<tuning::prior_set> experience_priors(const tuning::task_spec& task,
                                                   const tuning::prior_set& priors,
                                                   const nlohmann::json& pack) {
  if (!pack.is_object() || !pack.contains("prior_adjustment")
      || !pack["prior_adjustment"].is_object())
    return std::nullopt;
  const auto& adj = pack["prior_adjustment"];
  const std::string source = "experience:" + str(adj, "run") + " (" + str(adj, "origin_hardware")
                             + ", " + str(adj, "match") + ")";
  std::map<std::string, double> memory;
  if (adj.contains("memory") && adj["memory"].is_array())
    for (const auto& m : adj["memory"])
      if (m.is_object() && m.contains("feature") && m["feature"].is_string())
        memory[m["feature"].get<std::string>()] = num(m, "bytes", 0.0);
  const tuning::feature_space fs{task, nullptr};
  tuning::prior_set out = priors;
  bool changed = false;
  auto set = [&](auto& prior, double speedup, const std::string& feature) {
    auto bytes = memory.find(feature);
    double memory_bytes = bytes != memory.end() ? bytes->second : prior.memory_bytes;
    if (prior.speedup == speedup && prior.memory_bytes == memory_bytes)
      return;
    prior.speedup = speedup;
    prior.memory_bytes = memory_bytes;
    prior.source = source;
    changed = true;
  };
  if (!adj.contains("effects") || !adj["effects"].is_array())
    return std::nullopt;
  for (const auto& e : adj["effects"]) {
    if (!e.is_object() || !e.contains("feature") || !e["feature"].is_string())
      continue;
    const auto feature = e["feature"].get<std::string>();
    const double speedup = num(e, "speedup", 0.0);
    auto at = fs.index.find(feature);
    if (at == fs.index.end() || !std::isfinite(speedup) || speedup <= 0)
      continue; // a setting or patch this task does not have
    const int knob = fs.knob_of[at->second];
    if (knob < 0) {
      const auto name = feature.substr(1);
      auto it = std::find_if(out.patches.begin(), out.patches.end(),
                             [&](const tuning::patch_prior& p) { return p.patch == name; });
      if (it == out.patches.end()) {
        out.patches.push_back({name, 1.0, 0.0, source});
        it = std::prev(out.patches.end());
      }
      set(*it, speedup, feature);
      continue;
    }
    const auto ki = static_cast<std::size_t>(knob);
    for (const auto& [value, index] : fs.value_feature[ki]) {
      if (static_cast<std::size_t>(index) != at->second)
        continue;
      const auto& name = task.knobs[ki].name;
      auto it = std::find_if(out.settings.begin(), out.settings.end(),
                             [&](const tuning::setting_prior& p) {
                               return p.knob == name && p.value == value;
                             });
      if (it == out.settings.end()) {
        out.settings.push_back({name, value, 1.0, 0.0, source});
        it = std::prev(out.settings.end());
      }
      set(*it, speedup, feature);
    }
  }
  if (!changed)
    return std::nullopt;
  return out;
}

std::string experience_pack_text(const nlohmann::json& pack) {
  // A pack lists its seeds; the report's summary counts them ("served").
  std::size_t served = pack.contains("seeds") && pack["seeds"].is_array()
                         ? pack["seeds"].size()
                         : pack.value("served", std::size_t{0});
  std::string out = std::to_string(served) + " seed(s) served";
  std::string ranks;
  if (pack.contains("served_by_match") && pack["served_by_match"].is_object())
    for (auto m : {hardware_match::same_model, hardware_match::same_family_memory,
                   hardware_match::other}) {
      auto n = pack["served_by_match"].value(to_string(m), std::uint64_t{0});
      if (n > 0)
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(n) + " " + to_string(m);
    }
  if (!ranks.empty())
    out += " (" + ranks + ")";
  std::uint64_t other = 0;
  if (pack.contains("not_served") && pack["not_served"].is_object())
    other = pack["not_served"].value("other_workload", std::uint64_t{0});
  if (other > 0)
    out += "; " + std::to_string(other) + " finding(s) of other workloads not served";
  return out;
}

} // namespace infrarsi::decide
