#include "decide/llm.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "adapters/environment.hpp"
#include "adapters/task_file.hpp"
#include "decide/decisions.hpp"
#include "tuning/prior_revision.hpp"
#include "tuning/search_space.hpp"
#include "tuning/stats.hpp"

namespace infrarsi::decide {

namespace {

using nlohmann::json;

json number_schema() {
  return {{"type", "number"}};
}

json object_schema(json properties) {
  json required = json::array();
  for (const auto& [k, v] : properties.items())
    required.push_back(k);
  return {{"type", "object"},
          {"additionalProperties", false},
          {"required", required},
          {"properties", std::move(properties)}};
}

json knob_json(const tuning::knob_spec& k) {
  json values = json::array();
  for (const auto& v : tuning::search_values(k))
    values.push_back(tuning::to_string(v));
  return {{"name", k.name},
          {"type", tuning::to_string(k.type)},
          {"default", tuning::to_string(k.default_value)},
          {"searched_values", values},
          {"tags", k.tags}};
}

/// The measured trials: usable ones with their speedup over the doctor's baseline mean, failed
/// ones with their outcome and first violation.
json trials_json(const store::run_state& run) {
  json out = json::array();
  double base = run.noise ? run.noise->mean_step_time_s : 0.0;
  for (const auto& t : run.trials) {
    if (!t.finished)
      continue;
    json j = {{"trial", t.trial_id},
              {"purpose", tuning::purpose_text(t)},
              {"config", store::to_json(t.config)},
              {"outcome", tuning::to_string(t.outcome)}};
    if (t.usable()) {
      j["step_time_s"] = t.timed_step_time_s;
      if (base > 0 && t.timed_step_time_s > 0)
        j["speedup"] = base / t.timed_step_time_s;
      j["peak_memory_bytes"] = t.peak_memory_bytes;
    } else if (!t.violations.empty()) {
      j["contract_violation"] = t.violations.front();
    } else if (!t.detail.empty()) {
      j["detail"] = t.detail.substr(0, 200);
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::optional<tuning::knob_value> knob_value_of(const tuning::knob_spec& k, const json& v) {
  switch (k.type) {
  case tuning::knob_type::integer:
    if (v.is_number_integer())
      return tuning::knob_value{v.get<std::int64_t>()};
    if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
        std::fabs(v.get<double>()) < 9e15)
      return tuning::knob_value{static_cast<std::int64_t>(v.get<double>())};
    break;
  case tuning::knob_type::real:
    if (v.is_number())
      return tuning::knob_value{v.get<double>()};
    break;
  case tuning::knob_type::boolean:
    if (v.is_boolean())
      return tuning::knob_value{v.get<bool>()};
    break;
  case tuning::knob_type::choice:
    if (v.is_string())
      return tuning::knob_value{v.get<std::string>()};
    break;
  }
  if (v.is_string()) { // "4", "true", "sdpa": the prompt gives values as text
    std::string why;
    return tuning::parse_knob_text(k, v.get<std::string>(), why);
  }
  return std::nullopt;
}

/// Checks `j` against an object schema of object_schema's form: every key required, no other,
/// each of its type. "" or why not.
std::string schema_error(const json& j, const json& schema, const std::string& at) {
  const auto type = schema.value("type", json{});
  auto is = [&](const std::string& t) {
    if (t == "object")
      return j.is_object();
    if (t == "array")
      return j.is_array();
    if (t == "string")
      return j.is_string();
    if (t == "number")
      return j.is_number();
    if (t == "boolean")
      return j.is_boolean();
    return false;
  };
  bool ok = false;
  if (type.is_array()) {
    for (const auto& t : type)
      ok = ok || is(t.get<std::string>());
  } else {
    ok = is(type.get<std::string>());
  }
  if (!ok)
    return at + ": expected " + type.dump() + ", got " + std::string{j.type_name()};
  if (j.is_object()) {
    const auto& props = schema["properties"];
    for (const auto& [k, v] : j.items())
      if (!props.contains(k))
        return at + "." + k + ": unknown key";
    for (const auto& [k, sub] : props.items()) {
      if (!j.contains(k))
        return at + "." + k + ": missing";
      if (auto e = schema_error(j[k], sub, at + "." + k); !e.empty())
        return e;
    }
  }
  if (j.is_array() && schema.contains("items"))
    for (std::size_t i = 0; i < j.size(); ++i)
      if (auto e = schema_error(j[i], schema["items"], at + "[" + std::to_string(i) + "]");
          !e.empty())
        return e;
  return {};
}

/// The content as JSON: the whole text, or the text inside one ```json ... ``` fence.
json content_json(const std::string& content) {
  auto j = json::parse(content, nullptr, false);
  if (!j.is_discarded())
    return j;
  auto open = content.find("```");
  auto close = content.rfind("```");
  if (open != std::string::npos && close != std::string::npos && close > open + 3) {
    auto inner = content.substr(open + 3, close - open - 3);
    if (inner.rfind("json", 0) == 0)
      inner = inner.substr(4);
    return json::parse(inner, nullptr, false);
  }
  return j;
}

std::string validate_effect(const json& e) {
  double speedup = e["speedup"].get<double>();
  double memory = e["memory_bytes"].get<double>();
  double confidence = e["confidence"].get<double>();
  if (!std::isfinite(speedup) || speedup <= 0 || speedup > 100)
    return "speedup " + e["speedup"].dump() + " outside (0, 100]";
  if (!std::isfinite(memory) || std::fabs(memory) > 1e15)
    return "memory_bytes " + e["memory_bytes"].dump() + " outside [-1e15, 1e15]";
  if (!std::isfinite(confidence) || confidence < 0 || confidence > 1)
    return "confidence " + e["confidence"].dump() + " outside [0, 1]";
  return {};
}

double shrunk(const json& e) {
  return std::exp(e["confidence"].get<double>() * std::log(e["speedup"].get<double>()));
}

bool safe_path(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.find('\\') != std::string::npos)
    return false;
  for (char c : p)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return false;
  std::stringstream ss{p};
  for (std::string part; std::getline(ss, part, '/');)
    if (part.empty() || part == "." || part == "..")
      return false;
  return true;
}

} // namespace

json llm_answer_schema(const std::string& purpose) {
  if (purpose == llm_patches)
    return object_schema({{"patches",
                           {{"type", "array"},
                            {"items", object_schema({{"name", {{"type", "string"}}},
                                                     {"rationale", {{"type", "string"}}},
                                                     {"diff", {{"type", "string"}}}})}}}});
  json effect = {{"speedup", number_schema()},
                 {"memory_bytes", number_schema()},
                 {"confidence", number_schema()}};
  json setting = effect;
  setting["knob"] = {{"type", "string"}};
  setting["value"] = {{"type", json::array({"string", "number", "boolean"})}};
  json patch = effect;
  patch["patch"] = {{"type", "string"}};
  return object_schema({{"settings", {{"type", "array"}, {"items", object_schema(setting)}}},
                        {"patches", {{"type", "array"}, {"items", object_schema(patch)}}}});
}

json llm_request(const tuning::task_spec& task, const store::run_state& run,
                 const std::string& purpose, const std::map<std::string, std::string>& files,
                 std::uint32_t round) {
  json knobs = json::array();
  for (const auto& k : task.knobs)
    knobs.push_back(knob_json(k));
  json patches = json::array();
  for (const auto& p : task.patches)
    patches.push_back({{"name", p.name}, {"description", p.description}, {"source", "task"}});
  for (const auto& p : llm_accepted_patches(run))
    patches.push_back({{"name", p["name"]}, {"description", p["rationale"]}, {"source", "llm"}});
  json context = {{"task", task.name},
                  {"contract", contract_json(task)},
                  {"knobs", knobs},
                  {"patches", patches},
                  {"doctor", run.doctor_doc ? *run.doctor_doc : json{}},
                  {"trials", trials_json(run)}};
  if (round > 0) {
    context["round"] = round;
    context["priors_now"] = store::to_json(run.priors);
  }
  std::string system =
      "You are a performance engineer tuning a training job without changing what it computes: "
      "the contract (steps, tokens, global batch, loss trajectory) is fixed and checked. Answer "
      "with one JSON object of the given schema and nothing else.";
  std::string user;
  if (purpose == llm_patches) {
    context["scope"] = {{"editable", task.scope.editable}, {"frozen", task.scope.frozen}};
    context["files"] = files;
    user = "Propose code patches that make one training step faster (or use less memory) "
           "without changing the contract. Each patch: a short name (letters, digits, '_', '-', "
           "'.'), a rationale, and a unified diff (git format, paths a/PATH and b/PATH relative "
           "to the workload directory) that edits only existing editable files. No new, deleted "
           "or renamed files, no mode changes, no binary hunks.\n\n";
  } else {
    user = "For each setting (knob=value other than its default) and each patch, estimate the "
           "step-time speedup over the baseline (1.3 = 30% faster, 0.8 = slower), the change of "
           "peak memory per rank in bytes (negative saves) and your confidence in [0, 1]. Give "
           "values as in searched_values.\n\n";
  }
  if (round > 0)
    user += "This is round " + std::to_string(round) +
            ": the trials measured so far are below (failures and contract violations "
            "included) with the priors in use (priors_now). Revise your estimates from them" +
            (purpose == llm_patches ? std::string{" and propose new patches (not one already in "
                                                  "patches)"}
                                    : std::string{}) +
            ".\n\n";
  user += context.dump(2);
  return {{"model", task.llm.model},
          {"temperature", task.llm.temperature},
          {"max_tokens", task.llm.max_tokens},
          {"messages", json::array({{{"role", "system"}, {"content", system}},
                                    {{"role", "user"}, {"content", user}}})},
          {"response_format",
           {{"type", "json_schema"},
            {"json_schema",
             {{"name", std::string{"infrarsi_"} + purpose},
              {"strict", true},
              {"schema", llm_answer_schema(purpose)}}}}}};
}

llm_answer read_llm_answer(const json& response_doc) {
  llm_answer a;
  if (!response_doc.value("ok", false)) {
    a.error = response_doc.value("error", std::string{"the request failed"});
    return a;
  }
  auto body = json::parse(response_doc.value("body", std::string{}), nullptr, false);
  if (!body.is_object()) {
    a.error = "the answer is not a JSON object";
    return a;
  }
  if (body.contains("usage") && body["usage"].is_object()) {
    const auto& u = body["usage"];
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_unsigned())
      a.prompt_tokens = u["prompt_tokens"].get<std::uint64_t>();
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_unsigned())
      a.completion_tokens = u["completion_tokens"].get<std::uint64_t>();
  }
  if (!body.contains("choices") || !body["choices"].is_array() || body["choices"].empty() ||
      !body["choices"][0].is_object() || !body["choices"][0].contains("message") ||
      !body["choices"][0]["message"].is_object() ||
      !body["choices"][0]["message"].contains("content") ||
      !body["choices"][0]["message"]["content"].is_string()) {
    a.error = "no choices[0].message.content string in the answer";
    return a;
  }
  a.content = body["choices"][0]["message"]["content"].get<std::string>();
  a.ok = true;
  return a;
}

std::string check_llm_diff(const tuning::task_spec& task, const std::string& diff,
                           std::uint64_t max_bytes, std::vector<std::string>& paths) {
  paths.clear();
  if (diff.size() > max_bytes)
    return "diff of " + std::to_string(diff.size()) + " bytes, more than llm.max_patch_bytes (" +
           std::to_string(max_bytes) + ")";
  if (diff.find('\0') != std::string::npos)
    return "a NUL byte (binary content)";
  static const char* refused[] = {"GIT binary patch", "Binary files ",    "old mode ",
                                  "new mode ",        "new file mode",    "deleted file mode",
                                  "rename from",      "rename to",        "copy from",
                                  "copy to",          "similarity index", "dissimilarity index"};
  std::set<std::string> touched;
  std::string minus;
  std::size_t hunks = 0;
  std::stringstream ss{diff};
  std::size_t line_no = 0;
  for (std::string line; std::getline(ss, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    auto where = "line " + std::to_string(line_no) + ": ";
    for (const char* r : refused)
      if (line.rfind(r, 0) == 0)
        return where + "'" + r + "' (only edits of existing regular files are accepted)";
    if (line.rfind("index ", 0) == 0 && line.find(" 120000") != std::string::npos)
      return where + "a symbolic link";
    if (line.rfind("@@ ", 0) == 0)
      ++hunks;
    bool old_side = line.rfind("--- ", 0) == 0;
    bool new_side = line.rfind("+++ ", 0) == 0;
    if (!old_side && !new_side)
      continue;
    auto p = line.substr(4);
    if (auto tab = p.find('\t'); tab != std::string::npos)
      p = p.substr(0, tab);
    if (p == "/dev/null")
      return where + "/dev/null (a new or deleted file)";
    if (p.rfind(old_side ? "a/" : "b/", 0) == 0)
      p = p.substr(2);
    if (!safe_path(p))
      return where + "path '" + p + "' is absolute, has a '..' or '.' component or odd characters";
    if (!adapters::path_in_scope(p, task.scope.editable))
      return where + "path '" + p + "' is not editable (scope.editable)";
    if (adapters::path_in_scope(p, task.scope.frozen))
      return where + "path '" + p + "' is frozen (scope.frozen)";
    if (old_side) {
      minus = p;
    } else {
      if (p != minus)
        return where + "'+++ " + p + "' does not match '--- " + minus + "'";
      touched.insert(p);
    }
  }
  if (touched.empty())
    return "no file in the diff ('--- a/PATH' and '+++ b/PATH' lines)";
  if (hunks == 0)
    return "no hunk ('@@ ... @@') in the diff";
  paths.assign(touched.begin(), touched.end());
  return {};
}

json llm_parsed_doc(const tuning::task_spec& task, const store::run_state& run,
                    const std::string& purpose, std::uint32_t attempt, const json& response_doc) {
  json doc = {{"purpose", purpose}, {"attempt", attempt}, {"valid", false}, {"error", ""}};
  auto answer = read_llm_answer(response_doc);
  doc["tokens"] = {{"prompt", answer.prompt_tokens}, {"completion", answer.completion_tokens}};
  if (!answer.ok) {
    doc["error"] = answer.error;
    return doc;
  }
  auto content = content_json(answer.content);
  if (content.is_discarded()) {
    doc["error"] = "the content is not JSON";
    return doc;
  }
  if (auto e = schema_error(content, llm_answer_schema(purpose), "answer"); !e.empty()) {
    doc["error"] = "the content does not fit the schema: " + e;
    return doc;
  }
  doc["valid"] = true;
  json rejected = json::array();
  if (purpose == llm_patches) {
    json kept = json::array();
    std::set<std::string> names;
    for (const auto& p : task.patches)
      names.insert(p.name);
    for (const auto& p : llm_accepted_patches(run))
      names.insert(p["name"].get<std::string>());
    for (const auto& p : content["patches"]) {
      auto name = p["name"].get<std::string>();
      std::vector<std::string> paths;
      std::string why;
      if (!adapters::is_safe_name(name))
        why = "unsafe name (letters, digits, '_', '.', '-'; no '..')";
      else if (names.count(name) != 0)
        why = "a patch of this name exists";
      else
        why = check_llm_diff(task, p["diff"].get<std::string>(), task.llm.max_patch_bytes, paths);
      if (!why.empty()) {
        rejected.push_back({{"name", name.substr(0, 200)}, {"why", why}});
        continue;
      }
      names.insert(name);
      kept.push_back({{"name", name},
                      {"rationale", p["rationale"].get<std::string>().substr(0, 2000)},
                      {"diff", p["diff"]},
                      {"paths", paths}});
    }
    doc["patches"] = kept;
  } else {
    tuning::prior_set priors;
    std::set<std::string> patch_names;
    for (const auto& p : task.patches)
      patch_names.insert(p.name);
    for (const auto& p : llm_accepted_patches(run))
      patch_names.insert(p["name"].get<std::string>());
    const auto source = "llm:" + task.llm.model;
    for (const auto& s : content["settings"]) {
      const auto* knob = task.find_knob(s["knob"].get<std::string>());
      std::string why;
      std::optional<tuning::knob_value> value;
      if (knob == nullptr)
        why = "unknown knob";
      else if (!(value = knob_value_of(*knob, s["value"])))
        why = std::string{"value does not fit the knob's type ("} + tuning::to_string(knob->type) +
              ")";
      else if (std::string d; !tuning::in_domain(*knob, *value, d))
        why = "value outside the domain: " + d;
      else if (priors.find(knob->name, *value) != nullptr)
        why = "duplicate setting";
      else
        why = validate_effect(s);
      if (!why.empty()) {
        rejected.push_back({{"entry", s}, {"why", why}});
        continue;
      }
      priors.settings.push_back(
          {knob->name, *value, shrunk(s), s["memory_bytes"].get<double>(), source});
    }
    for (const auto& p : content["patches"]) {
      auto name = p["patch"].get<std::string>();
      std::string why;
      if (patch_names.count(name) == 0)
        why = "unknown patch";
      else if (priors.find_patch(name) != nullptr)
        why = "duplicate patch";
      else
        why = validate_effect(p);
      if (!why.empty()) {
        rejected.push_back({{"entry", p}, {"why", why}});
        continue;
      }
      priors.patches.push_back({name, shrunk(p), p["memory_bytes"].get<double>(), source});
    }
    doc["priors"] = store::to_json(priors);
  }
  doc["rejected"] = rejected;
  return doc;
}

llm_usage llm_usage_of(const store::run_state& run) {
  llm_usage u;
  for (const auto& e : run.llm) {
    auto ev = e.value("event", "");
    if (ev == "request")
      ++u.requests;
    else if (ev == "response") {
      u.calls += e.contains("attempts") && e["attempts"].is_array() ? e["attempts"].size() : 0;
      auto a = read_llm_answer(e);
      u.prompt_tokens += a.prompt_tokens;
      u.completion_tokens += a.completion_tokens;
    } else if (ev == "parsed" && !e.value("valid", false))
      ++u.invalid_answers;
  }
  return u;
}

json llm_accepted_patches(const store::run_state& run) {
  json out = json::array();
  for (const auto& e : run.llm)
    if (e.value("event", "") == "parsed" && e.value("purpose", "") == llm_patches &&
        e.value("valid", false) && e.contains("patches"))
      for (const auto& p : e["patches"])
        if (p.value("apply_error", std::string{"not checked"}).empty())
          out.push_back({{"name", p["name"]},
                         {"rationale", p["rationale"]},
                         {"diff", p["diff"]},
                         {"paths", p["paths"]}});
  return out;
}

tuning::task_spec with_llm_patches(const tuning::task_spec& task, const store::run_state& run,
                                   const std::string& patch_dir) {
  tuning::task_spec out = task;
  for (const auto& p : llm_accepted_patches(run)) {
    auto name = p["name"].get<std::string>();
    if (out.find_patch(name) != nullptr)
      continue; // cannot happen: llm_parsed_doc rejects a name in use
    out.patches.push_back({name, patch_dir.empty() ? std::string{} : patch_dir + "/" + name + ".patch",
                           p["rationale"].get<std::string>()});
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> llm_patch_conflicts(const store::run_state& run) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : run.llm)
    if (e.value("event", "") == "parsed" && e.value("purpose", "") == llm_patches &&
        e.value("valid", false) && e.contains("conflicts") && e["conflicts"].is_array())
      for (const auto& pair : e["conflicts"])
        if (pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_string())
          out.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
  return out;
}

std::map<std::string, std::string> llm_patch_texts(const store::run_state& run,
                                                   const std::vector<std::string>& names) {
  std::map<std::string, std::string> out;
  if (names.empty())
    return out;
  for (const auto& p : llm_accepted_patches(run)) {
    auto name = p["name"].get<std::string>();
    if (std::find(names.begin(), names.end(), name) != names.end())
      out[name] = p["diff"].get<std::string>();
  }
  return out;
}

llm_step llm_next(const tuning::task_spec& task, const store::run_state& run,
                  const std::map<std::string, std::string>& files, std::uint32_t round) {
  llm_step step;
  std::vector<std::string> questions;
  if (task.llm.patches)
    questions.push_back(llm_patches);
  questions.push_back(llm_priors);
  std::string detail;
  auto note = [&](const std::string& s) { detail += (detail.empty() ? "" : "; ") + s; };
  const auto usage = llm_usage_of(run);
  for (const auto& q : questions) {
    const json* last = nullptr;
    std::uint32_t asked = 0;
    for (const auto& e : run.llm)
      if (e.value("purpose", "") == q && llm_round_of(e) == round) {
        last = &e;
        asked += e.value("event", "") == "request" ? 1 : 0;
      }
    auto ask = [&]() -> bool {
      if (usage.calls >= task.llm.max_calls) {
        note(q + ": not asked: llm.max_calls (" + std::to_string(task.llm.max_calls) + ") spent");
        return false;
      }
      if (usage.prompt_tokens + usage.completion_tokens >= task.llm.max_tokens_per_run) {
        note(q + ": not asked: llm.max_tokens_per_run (" +
             std::to_string(task.llm.max_tokens_per_run) + ") spent");
        return false;
      }
      step.k = llm_step::kind::request;
      step.purpose = q;
      step.attempt = asked;
      step.body = llm_request(task, run, q,
                              q == llm_patches ? files : std::map<std::string, std::string>{},
                              round);
      return true;
    };
    if (last == nullptr) {
      if (ask())
        return step;
      continue;
    }
    auto ev = last->value("event", "");
    if (ev == "request") {
      step.k = llm_step::kind::resend;
      step.purpose = q;
      step.attempt = last->value("attempt", 0u);
      step.body = last->value("body", json::object());
      return step;
    }
    if (ev == "response") {
      step.k = llm_step::kind::parse;
      step.purpose = q;
      step.attempt = last->value("attempt", 0u);
      step.response = *last;
      return step;
    }
    if (last->value("valid", false))
      continue;
    if (asked <= task.llm.answer_retries) {
      if (ask())
        return step;
      continue;
    }
    note(q + ": no valid answer in " + std::to_string(asked) +
         " asks (last: " + last->value("error", "") + ")");
  }
  step = llm_step{};
  step.k = llm_step::kind::finish;
  step.detail = detail;
  for (const auto& e : run.llm)
    if (e.value("event", "") == "parsed" && e.value("purpose", "") == llm_priors &&
        e.value("valid", false) && e.contains("priors") && llm_round_of(e) == round)
      step.priors = e["priors"];
  return step;
}

std::uint32_t llm_round_of(const json& event) {
  auto it = event.find("round");
  if (it == event.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0 ||
      it->get<std::int64_t>() > 1000000)
    return 0;
  return static_cast<std::uint32_t>(it->get<std::int64_t>());
}

std::uint32_t llm_current_round(const store::run_state& run) {
  std::uint32_t r = 0;
  for (const auto& e : run.llm)
    r = std::max(r, llm_round_of(e));
  return r;
}

namespace {

/// The ended search trials (latest attempts, not lost) in log order.
std::vector<const tuning::trial_record*> ended_explore(const store::run_state& run) {
  std::vector<const tuning::trial_record*> out;
  for (const auto* t : run.latest_attempts())
    if (t->kind == tuning::purpose_kind::explore && t->finished &&
        t->outcome != tuning::trial_outcome::lost)
      out.push_back(t);
  return out;
}

/// "explored" of the first request of round `round` (0 for round 0 or when absent).
std::uint32_t round_start(const store::run_state& run, std::uint32_t round) {
  if (round == 0)
    return 0;
  for (const auto& e : run.llm)
    if (llm_round_of(e) == round && e.value("event", "") == "request")
      return e.value("explored", 0u);
  return 0;
}

} // namespace

std::uint32_t ended_search_trials(const store::run_state& run) {
  return static_cast<std::uint32_t>(ended_explore(run).size());
}

llm_round_plan llm_round_due(const tuning::task_spec& task, const store::run_state& run) {
  llm_round_plan plan;
  const auto& llm = task.llm;
  if (!llm.enabled || (llm.rounds_every == 0 && llm.rounds_on_stall == 0))
    return plan;
  const auto current = llm_current_round(run);
  if (current > 0 && llm_next(task, run, {}, current).k != llm_step::kind::finish) {
    plan.ask = true;
    plan.round = current;
    plan.why = "round " + std::to_string(current) + " in progress";
    return plan;
  }
  if (current >= llm.max_rounds)
    return plan;
  const auto usage = llm_usage_of(run);
  if (usage.calls >= llm.max_calls ||
      usage.prompt_tokens + usage.completion_tokens >= llm.max_tokens_per_run)
    return plan;
  const auto ended = ended_explore(run);
  const auto start = std::min<std::size_t>(round_start(run, current), ended.size());
  const auto since = ended.size() - start;
  if (llm.rounds_every > 0 && since >= llm.rounds_every) {
    plan.ask = true;
    plan.why = std::to_string(since) + " search trials ended since round " +
               std::to_string(current) + " (llm.rounds_every = " +
               std::to_string(llm.rounds_every) + ")";
  } else if (llm.rounds_on_stall > 0 && since >= llm.rounds_on_stall) {
    // Stalled: none of the last rounds_on_stall ended search trials beat the best before them.
    const double base = run.noise ? run.noise->mean_step_time_s : 0.0;
    auto speedup = [&](const tuning::trial_record* t) {
      return t->usable() && base > 0 && t->timed_step_time_s > 0 ? base / t->timed_step_time_s
                                                                 : 0.0;
    };
    const auto tail = ended.size() - llm.rounds_on_stall;
    double best_before = 0;
    for (std::size_t i = 0; i < tail; ++i)
      best_before = std::max(best_before, speedup(ended[i]));
    double best_tail = 0;
    for (std::size_t i = tail; i < ended.size(); ++i)
      best_tail = std::max(best_tail, speedup(ended[i]));
    if (best_tail <= best_before) {
      plan.ask = true;
      plan.why = "the search stalled: the last " + std::to_string(llm.rounds_on_stall) +
                 " search trials found nothing better (llm.rounds_on_stall)";
    }
  }
  if (plan.ask)
    plan.round = current + 1;
  return plan;
}

std::vector<llm_round_summary> llm_rounds(const tuning::task_spec& task,
                                          const store::run_state& run) {
  std::vector<llm_round_summary> out;
  if (!task.llm.enabled)
    return out;
  const auto search = with_llm_patches(task, run, "");
  const auto ended = ended_explore(run);
  const auto rounds = llm_current_round(run);
  // The priors in use from each round on: its valid priors answer, else the earlier ones (the
  // knowledge base's at init when the model gave none: run.priors then, as PriorsLoaded held).
  std::optional<tuning::prior_set> in_use;
  for (std::uint32_t r = 0; r <= rounds; ++r) {
    llm_round_summary s;
    s.round = r;
    s.explored = std::min<std::uint32_t>(round_start(run, r),
                                         static_cast<std::uint32_t>(ended.size()));
    for (const auto& e : run.llm)
      if (llm_round_of(e) == r && e.value("event", "") == "request" && s.why.empty())
        s.why = r == 0 ? std::string{"init"} : e.value("why", std::string{});
      else if (llm_round_of(e) == r && e.value("event", "") == "parsed" &&
               e.value("purpose", "") == llm_priors && e.value("valid", false) &&
               e.contains("priors")) {
        s.priors_valid = true;
        in_use = store::priors_from_json(e["priors"]);
      }
    if (r == 0 && !s.priors_valid)
      in_use = run.priors; // the only PriorsLoaded of a run without valid LLM priors at init
    if (!in_use)
      in_use = tuning::prior_set{};
    std::uint32_t end = static_cast<std::uint32_t>(ended.size());
    if (r < rounds)
      end = std::min(end, round_start(run, r + 1));
    std::set<std::uint64_t> window;
    for (std::uint32_t i = s.explored; i < end; ++i)
      window.insert(ended[i]->trial_id);
    // Revised on every measurement up to the window's end (baseline included); the rank
    // correlations over the window's usable search trials.
    std::vector<tuning::trial_record> history;
    for (const auto& t : run.trials) {
      if (t.outcome == tuning::trial_outcome::lost)
        continue;
      if (t.kind == tuning::purpose_kind::explore && window.count(t.trial_id) == 0) {
        bool before = false;
        for (std::uint32_t i = 0; i < s.explored && i < ended.size(); ++i)
          before = before || ended[i]->trial_id == t.trial_id;
        if (!before)
          continue;
      }
      history.push_back(t);
    }
    auto revision = tuning::revise_priors(search, *in_use, history,
                                          run.noise ? run.noise->log_sd : 0.02);
    std::vector<double> measured, prior, revised;
    for (const auto& q : revision.points)
      if (window.count(q.trial_id) != 0) {
        measured.push_back(q.measured);
        prior.push_back(q.prior);
        revised.push_back(q.posterior);
      }
    s.trials = measured.size();
    s.spearman_prior = tuning::spearman(prior, measured);
    s.spearman_revised = tuning::spearman(revised, measured);
    out.push_back(std::move(s));
  }
  return out;
}

} // namespace infrarsi::decide
