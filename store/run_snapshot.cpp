// Snapshots of the run projection: run_state <-> canonical JSON, and loading a run from its
// snapshot plus the tail of its stream (store/run_projection.hpp, docs/event-log.md).

#include <cmath>
#include <limits>
#include <stdexcept>

#include "store/run_projection.hpp"

namespace infrarsi::store {

namespace {

using nlohmann::json;

// Tripwire: a snapshot must hold every field the fold fills, or snapshot + tail would differ from
// a full fold. When one of these fails, a field was added: serialize it below (state_json and
// state_from_json), bump run_state_format, then update the size here. (Sizes of x86-64
// libstdc++; other platforms skip the check.)
#if defined(__x86_64__) && defined(__GLIBCXX__)
static_assert(sizeof(run_state) == 880, "run_state changed: update run_snapshot.cpp");
static_assert(sizeof(tuning::trial_record) == 408, "trial_record changed: update run_snapshot.cpp");
static_assert(sizeof(reverification) == 224, "reverification changed: update run_snapshot.cpp");
static_assert(sizeof(tuning::step_point) == 64, "step_point changed: update run_snapshot.cpp");
static_assert(sizeof(tuning::loss_reference) == 216,
              "loss_reference changed: update run_snapshot.cpp");
static_assert(sizeof(tuning::loss_window_reference) == 40,
              "loss_window_reference changed: update run_snapshot.cpp");
static_assert(sizeof(tuning::declared_work) == 72, "declared_work changed: update run_snapshot.cpp");
static_assert(sizeof(tuning::noise_estimate) == 40, "noise_estimate changed: update run_snapshot.cpp");
static_assert(sizeof(tuning::speedup_estimate) == 48,
              "speedup_estimate changed: update run_snapshot.cpp");
static_assert(sizeof(tuning::setting_prior) == 120, "setting_prior changed: update run_snapshot.cpp");
static_assert(sizeof(tuning::patch_prior) == 80, "patch_prior changed: update run_snapshot.cpp");
static_assert(sizeof(tuning::configuration) == 72, "configuration changed: update run_snapshot.cpp");
#endif

// -- encoding ----------------------------------------------------------------------------------

/// True if `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
/// U+10FFFF), which is what nlohmann::json's serializer accepts.
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0)
        lo = 0xA0;
      if (c == 0xED)
        hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0)
        lo = 0x90;
      if (c == 0xF4)
        hi = 0x8F;
    } else {
      return false;
    }
    if (i + n >= s.size())
      return false;
    for (std::size_t k = 1; k <= n; ++k) {
      auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
        return false;
    }
    i += n + 1;
  }
  return true;
}

json text(const std::string& s) {
  if (valid_utf8(s))
    return s;
  static constexpr char digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * s.size());
  for (unsigned char c : s) {
    hex.push_back(digits[c >> 4]);
    hex.push_back(digits[c & 0xF]);
  }
  return json{{"hex", hex}};
}

json num(double d) {
  if (std::isfinite(d))
    return d;
  if (std::isnan(d))
    return "NaN";
  return d > 0 ? "Infinity" : "-Infinity";
}

json nums(const std::vector<double>& v) {
  json a = json::array();
  for (double d : v)
    a.push_back(num(d));
  return a;
}

json texts(const std::vector<std::string>& v) {
  json a = json::array();
  for (const auto& s : v)
    a.push_back(text(s));
  return a;
}

json knob(const tuning::knob_value& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v))
    return {{"int", *i}};
  if (const auto* d = std::get_if<double>(&v))
    return {{"real", num(*d)}};
  if (const auto* b = std::get_if<bool>(&v))
    return {{"bool", *b}};
  return {{"text", text(std::get<std::string>(v))}};
}

json config(const tuning::configuration& c) {
  json knobs = json::array(); // [[name, value], ...]: names may be any text
  for (const auto& [name, value] : c.knobs)
    knobs.push_back(json::array({text(name), knob(value)}));
  return {{"knobs", knobs}, {"patches", texts(c.patches)}};
}

json step_map(const std::map<std::uint32_t, double>& m) {
  json a = json::array();
  for (const auto& [step, v] : m)
    a.push_back(json::array({step, num(v)}));
  return a;
}

json loss_windows(const std::vector<tuning::loss_window_reference>& windows) {
  json a = json::array();
  for (const auto& w : windows)
    a.push_back(json::array({w.first, w.last, num(w.mean), num(w.within_var), num(w.between_var),
                             w.runs}));
  return a;
}

json trial(const tuning::trial_record& t) {
  json steps = json::array();
  for (const auto& p : t.steps)
    steps.push_back(json::array({p.step, num(p.loss), p.tokens, num(p.step_time_s), p.warmup,
                                 num(p.observed_at_s),
                                 p.eval_loss ? num(*p.eval_loss) : json(nullptr)}));
  json declared{{"final_seen", t.declared.final_seen}};
  if (t.declared.global_batch)
    declared["global_batch"] = *t.declared.global_batch;
  if (t.declared.params)
    declared["params"] = *t.declared.params;
  if (t.declared.layers)
    declared["layers"] = *t.declared.layers;
  if (t.declared.timed_steps)
    declared["timed_steps"] =
      json::array({t.declared.timed_steps->first, t.declared.timed_steps->second});
  json phases = json::array();
  for (const auto& [name, s] : t.phase_s)
    phases.push_back(json::array({text(name), num(s)}));
  return {{"trial_id", t.trial_id},
          {"attempt", t.attempt},
          {"purpose", text(t.purpose)},
          {"kind", static_cast<unsigned>(t.kind)},
          {"candidate_trial", t.candidate_trial},
          {"round", t.round},
          {"config", config(t.config)},
          {"dispatched", t.dispatched},
          {"finished", t.finished},
          {"outcome", static_cast<unsigned>(t.outcome)},
          {"steps", steps},
          {"declared", declared},
          {"wall_time_s", num(t.wall_time_s)},
          {"device_seconds", num(t.device_seconds)},
          {"peak_memory_bytes", t.peak_memory_bytes},
          {"memory_source", static_cast<unsigned>(t.memory)},
          {"host_peak_bytes", t.host_peak_bytes},
          {"detail", text(t.detail)},
          {"phase_s", phases},
          {"verified", t.verified},
          {"violations", texts(t.violations)},
          {"timed_step_time_s", num(t.timed_step_time_s)}};
}

json reverif(const reverification& r) {
  return {{"candidate_trial", r.candidate_trial},
          {"config", config(r.config)},
          {"baseline_times_s", nums(r.baseline_times_s)},
          {"candidate_times_s", nums(r.candidate_times_s)},
          {"estimate",
           {{"speedup", num(r.estimate.speedup)},
            {"ci_low", num(r.estimate.ci_low)},
            {"ci_high", num(r.estimate.ci_high)},
            {"dof", num(r.estimate.dof)},
            {"log_sd_a", num(r.estimate.log_sd_a)},
            {"log_sd_b", num(r.estimate.log_sd_b)}}},
          {"promotable", r.promotable},
          {"reason", text(r.reason)},
          {"round", r.round},
          {"remeasure", r.remeasure}};
}

json priors(const tuning::prior_set& p) {
  json settings = json::array();
  for (const auto& s : p.settings)
    settings.push_back({{"knob", text(s.knob)},
                        {"value", knob(s.value)},
                        {"speedup", num(s.speedup)},
                        {"memory_bytes", num(s.memory_bytes)},
                        {"source", text(s.source)}});
  json patches = json::array();
  for (const auto& x : p.patches)
    patches.push_back({{"patch", text(x.patch)},
                       {"speedup", num(x.speedup)},
                       {"memory_bytes", num(x.memory_bytes)},
                       {"source", text(x.source)}});
  return {{"settings", settings}, {"patches", patches}};
}

json state_json(const run_state& s) {
  json j{{"run_id", text(s.run_id)},
         {"task_path", text(s.task_path)},
         {"seed", s.seed},
         {"out_of_scope_patches", texts(s.out_of_scope_patches)},
         {"priors", priors(s.priors)},
         {"priors_loaded", s.priors_loaded},
         {"experience_seeded", s.experience_seeded},
         {"experience_seeds_explained", s.experience_seeds_explained},
         {"reference", {{"loss", step_map(s.reference.loss)},
                        {"spread", step_map(s.reference.spread)},
                        {"windows", loss_windows(s.reference.windows)},
                        {"eval_loss", step_map(s.reference.eval_loss)},
                        {"eval_spread", step_map(s.reference.eval_spread)}}},
         {"stages_started", texts(s.stages_started)},
         {"stages_completed", texts(s.stages_completed)},
         {"stale_results", s.stale_results},
         {"events", s.events}};
  json conflicts = json::array();
  for (const auto& [a, b] : s.patch_conflicts)
    conflicts.push_back(json::array({text(a), text(b)}));
  j["patch_conflicts"] = conflicts;
  json seeds = json::array();
  for (const auto& c : s.experience_seeds)
    seeds.push_back(config(c));
  j["experience_seeds"] = seeds;
  if (!s.experience_pack.is_null())
    j["experience_pack"] = s.experience_pack;
  json trials = json::array();
  for (const auto& t : s.trials)
    trials.push_back(trial(t));
  j["trials"] = trials;
  json rv = json::array();
  for (const auto& r : s.reverifications)
    rv.push_back(reverif(r));
  j["reverifications"] = rv;
  if (s.noise)
    j["noise"] = {{"runs", s.noise->runs},
                  {"mean_step_time_s", num(s.noise->mean_step_time_s)},
                  {"log_sd", num(s.noise->log_sd)},
                  {"cv", num(s.noise->cv)},
                  {"min_detectable_speedup", num(s.noise->min_detectable_speedup)}};
  // Documents were parsed from JSON text, so they hold only finite numbers and valid UTF-8.
  if (s.contract_doc)
    j["contract_doc"] = *s.contract_doc;
  if (s.doctor_doc)
    j["doctor_doc"] = *s.doctor_doc;
  if (s.promotion)
    j["promotion"] = *s.promotion;
  if (s.report)
    j["report"] = *s.report;
  if (s.applied)
    j["applied"] = *s.applied;
  if (s.search_stopped)
    j["search_stopped"] = *s.search_stopped;
  if (s.apply_intent)
    j["apply_intent"] = *s.apply_intent;
  if (s.last_proposals)
    j["last_proposals"] = *s.last_proposals;
  j["interruptions"] = s.interruptions;
  j["proposals_taken"] = s.proposals_taken;
  if (!s.llm.empty())
    j["llm"] = s.llm;
  json in_flight = json::array();
  for (const auto& [a, c] : s.in_flight)
    in_flight.push_back(json::array({a.first, a.second, c.dispatched_at_ns, c.interrupted_at_ns}));
  j["in_flight"] = in_flight;
  return j;
}

// -- decoding ----------------------------------------------------------------------------------

/// Thrown inside parse_run_state only; turned into errc::corrupt_data at its border.
struct decode_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw decode_error{where.empty() ? what : where + ": " + what};
}

const json& field(const json& obj, const std::string& where, const char* key) {
  if (!obj.is_object())
    fail(where, "expected an object");
  auto it = obj.find(key);
  if (it == obj.end())
    fail(where, std::string{"missing field '"} + key + "'");
  return *it;
}

std::string sub(const std::string& where, const char* key) {
  return where.empty() ? std::string{key} : where + "." + key;
}

std::string idx(const std::string& where, std::size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

std::uint64_t as_u64(const json& v, const std::string& where) {
  if (!v.is_number_unsigned())
    fail(where, "expected an unsigned integer");
  return v.get<std::uint64_t>();
}

std::uint32_t as_u32(const json& v, const std::string& where) {
  auto x = as_u64(v, where);
  if (x > std::numeric_limits<std::uint32_t>::max())
    fail(where, "out of range for 32 bits");
  return static_cast<std::uint32_t>(x);
}

std::int64_t as_i64(const json& v, const std::string& where) {
  if (!v.is_number_integer())
    fail(where, "expected an integer");
  return v.get<std::int64_t>();
}

bool as_bool(const json& v, const std::string& where) {
  if (!v.is_boolean())
    fail(where, "expected true or false");
  return v.get<bool>();
}

double as_num(const json& v, const std::string& where) {
  if (v.is_number())
    return v.get<double>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "NaN")
      return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity")
      return std::numeric_limits<double>::infinity();
    if (s == "-Infinity")
      return -std::numeric_limits<double>::infinity();
  }
  fail(where, "expected a number, \"NaN\", \"Infinity\" or \"-Infinity\"");
}

std::string as_text(const json& v, const std::string& where) {
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_object() && v.size() == 1 && v.contains("hex") && v["hex"].is_string()) {
    const auto& hex = v["hex"].get_ref<const std::string&>();
    if (hex.size() % 2 != 0)
      fail(where, "odd-length hex text");
    auto nibble = [&](char c) -> int {
      if (c >= '0' && c <= '9')
        return c - '0';
      if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
      fail(where, "bad hex digit");
    };
    std::string out;
    out.reserve(hex.size() / 2);
    for (std::size_t i = 0; i < hex.size(); i += 2)
      out.push_back(static_cast<char>((nibble(hex[i]) << 4) | nibble(hex[i + 1])));
    return out;
  }
  fail(where, "expected a string or {\"hex\": ...}");
}

const json& as_array(const json& v, const std::string& where, std::size_t exact = 0) {
  if (!v.is_array())
    fail(where, "expected an array");
  if (exact != 0 && v.size() != exact)
    fail(where, "expected an array of " + std::to_string(exact) + " values");
  return v;
}

std::vector<double> as_nums(const json& v, const std::string& where) {
  std::vector<double> out;
  const auto& a = as_array(v, where);
  for (std::size_t i = 0; i < a.size(); ++i)
    out.push_back(as_num(a[i], idx(where, i)));
  return out;
}

std::vector<std::string> as_texts(const json& v, const std::string& where) {
  std::vector<std::string> out;
  const auto& a = as_array(v, where);
  for (std::size_t i = 0; i < a.size(); ++i)
    out.push_back(as_text(a[i], idx(where, i)));
  return out;
}

tuning::knob_value as_knob(const json& v, const std::string& where) {
  if (!v.is_object() || v.size() != 1)
    fail(where, "expected one of {\"int\"|\"real\"|\"bool\"|\"text\": value}");
  auto it = v.begin();
  const std::string tag = it.key();
  auto inner = sub(where, tag.c_str());
  if (tag == "int") {
    if (!it.value().is_number_integer())
      fail(inner, "expected an integer");
    if (it.value().is_number_unsigned()
        && it.value().get<std::uint64_t>()
             > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(inner, "out of range for a 64-bit signed integer");
    return tuning::knob_value{it.value().get<std::int64_t>()};
  }
  if (tag == "real")
    return tuning::knob_value{as_num(it.value(), inner)};
  if (tag == "bool")
    return tuning::knob_value{as_bool(it.value(), inner)};
  if (tag == "text")
    return tuning::knob_value{as_text(it.value(), inner)};
  fail(where, "unknown knob value type '" + tag + "'");
}

tuning::configuration as_config(const json& v, const std::string& where) {
  tuning::configuration c;
  auto kw = sub(where, "knobs");
  const auto& knobs = as_array(field(v, where, "knobs"), kw);
  for (std::size_t i = 0; i < knobs.size(); ++i) {
    auto w = idx(kw, i);
    const auto& pair = as_array(knobs[i], w, 2);
    c.knobs[as_text(pair[0], w)] = as_knob(pair[1], w);
  }
  c.patches = as_texts(field(v, where, "patches"), sub(where, "patches"));
  return c;
}

std::map<std::uint32_t, double> as_step_map(const json& v, const std::string& where) {
  std::map<std::uint32_t, double> m;
  const auto& a = as_array(v, where);
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto w = idx(where, i);
    const auto& pair = as_array(a[i], w, 2);
    m[as_u32(pair[0], w)] = as_num(pair[1], w);
  }
  return m;
}

std::optional<std::uint64_t> opt_u64(const json& obj, const std::string& where, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end())
    return std::nullopt;
  return as_u64(*it, sub(where, key));
}

tuning::trial_record as_trial(const json& v, const std::string& w) {
  tuning::trial_record t;
  auto f = [&](const char* key) -> const json& { return field(v, w, key); };
  t.trial_id = as_u64(f("trial_id"), sub(w, "trial_id"));
  t.attempt = as_u32(f("attempt"), sub(w, "attempt"));
  t.purpose = as_text(f("purpose"), sub(w, "purpose"));
  auto kind = as_u64(f("kind"), sub(w, "kind"));
  if (kind > static_cast<std::uint64_t>(tuning::purpose_kind::ablation))
    fail(sub(w, "kind"), "out of range for a purpose");
  t.kind = static_cast<tuning::purpose_kind>(kind);
  t.candidate_trial = as_u64(f("candidate_trial"), sub(w, "candidate_trial"));
  t.round = as_u32(f("round"), sub(w, "round"));
  t.config = as_config(f("config"), sub(w, "config"));
  t.dispatched = as_bool(f("dispatched"), sub(w, "dispatched"));
  t.finished = as_bool(f("finished"), sub(w, "finished"));
  auto outcome = as_u64(f("outcome"), sub(w, "outcome"));
  if (outcome > 255)
    fail(sub(w, "outcome"), "out of range for an outcome");
  t.outcome = static_cast<tuning::trial_outcome>(outcome);
  auto sw = sub(w, "steps");
  const auto& steps = as_array(f("steps"), sw);
  t.steps.reserve(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    auto pw = idx(sw, i);
    const auto& p = as_array(steps[i], pw, 7);
    tuning::step_point sp;
    sp.step = as_u32(p[0], pw);
    sp.loss = as_num(p[1], pw);
    sp.tokens = as_u64(p[2], pw);
    sp.step_time_s = as_num(p[3], pw);
    sp.warmup = as_bool(p[4], pw);
    sp.observed_at_s = as_num(p[5], pw);
    if (!p[6].is_null())
      sp.eval_loss = as_num(p[6], pw);
    t.steps.push_back(sp);
  }
  auto dw = sub(w, "declared");
  const auto& d = f("declared");
  t.declared.final_seen = as_bool(field(d, dw, "final_seen"), sub(dw, "final_seen"));
  t.declared.global_batch = opt_u64(d, dw, "global_batch");
  t.declared.params = opt_u64(d, dw, "params");
  t.declared.layers = opt_u64(d, dw, "layers");
  if (auto it = d.find("timed_steps"); it != d.end()) {
    auto tw = sub(dw, "timed_steps");
    const auto& pair = as_array(*it, tw, 2);
    t.declared.timed_steps = std::pair{as_u32(pair[0], tw), as_u32(pair[1], tw)};
  }
  t.wall_time_s = as_num(f("wall_time_s"), sub(w, "wall_time_s"));
  t.device_seconds = as_num(f("device_seconds"), sub(w, "device_seconds"));
  t.peak_memory_bytes = as_u64(f("peak_memory_bytes"), sub(w, "peak_memory_bytes"));
  auto source = as_u64(f("memory_source"), sub(w, "memory_source"));
  if (source > static_cast<std::uint64_t>(tuning::memory_source::host_rss))
    fail(sub(w, "memory_source"), "out of range for a memory source");
  t.memory = static_cast<tuning::memory_source>(source);
  t.host_peak_bytes = as_u64(f("host_peak_bytes"), sub(w, "host_peak_bytes"));
  t.detail = as_text(f("detail"), sub(w, "detail"));
  auto phw = sub(w, "phase_s");
  const auto& phases = as_array(f("phase_s"), phw);
  for (std::size_t i = 0; i < phases.size(); ++i) {
    auto pw = idx(phw, i);
    const auto& pair = as_array(phases[i], pw, 2);
    t.phase_s[as_text(pair[0], pw)] = as_num(pair[1], pw);
  }
  t.verified = as_bool(f("verified"), sub(w, "verified"));
  t.violations = as_texts(f("violations"), sub(w, "violations"));
  t.timed_step_time_s = as_num(f("timed_step_time_s"), sub(w, "timed_step_time_s"));
  return t;
}

reverification as_reverification(const json& v, const std::string& w) {
  reverification r;
  auto f = [&](const char* key) -> const json& { return field(v, w, key); };
  r.candidate_trial = as_u64(f("candidate_trial"), sub(w, "candidate_trial"));
  r.config = as_config(f("config"), sub(w, "config"));
  r.baseline_times_s = as_nums(f("baseline_times_s"), sub(w, "baseline_times_s"));
  r.candidate_times_s = as_nums(f("candidate_times_s"), sub(w, "candidate_times_s"));
  auto ew = sub(w, "estimate");
  const auto& e = f("estimate");
  r.estimate.speedup = as_num(field(e, ew, "speedup"), sub(ew, "speedup"));
  r.estimate.ci_low = as_num(field(e, ew, "ci_low"), sub(ew, "ci_low"));
  r.estimate.ci_high = as_num(field(e, ew, "ci_high"), sub(ew, "ci_high"));
  r.estimate.dof = as_num(field(e, ew, "dof"), sub(ew, "dof"));
  r.estimate.log_sd_a = as_num(field(e, ew, "log_sd_a"), sub(ew, "log_sd_a"));
  r.estimate.log_sd_b = as_num(field(e, ew, "log_sd_b"), sub(ew, "log_sd_b"));
  r.promotable = as_bool(f("promotable"), sub(w, "promotable"));
  r.reason = as_text(f("reason"), sub(w, "reason"));
  r.round = as_u32(f("round"), sub(w, "round"));
  r.remeasure = as_bool(f("remeasure"), sub(w, "remeasure"));
  return r;
}

tuning::prior_set as_priors(const json& v, const std::string& w) {
  tuning::prior_set p;
  auto sw = sub(w, "settings");
  const auto& settings = as_array(field(v, w, "settings"), sw);
  for (std::size_t i = 0; i < settings.size(); ++i) {
    auto x = idx(sw, i);
    const auto& s = settings[i];
    tuning::setting_prior sp;
    sp.knob = as_text(field(s, x, "knob"), sub(x, "knob"));
    sp.value = as_knob(field(s, x, "value"), sub(x, "value"));
    sp.speedup = as_num(field(s, x, "speedup"), sub(x, "speedup"));
    sp.memory_bytes = as_num(field(s, x, "memory_bytes"), sub(x, "memory_bytes"));
    sp.source = as_text(field(s, x, "source"), sub(x, "source"));
    p.settings.push_back(std::move(sp));
  }
  auto pw = sub(w, "patches");
  const auto& patches = as_array(field(v, w, "patches"), pw);
  for (std::size_t i = 0; i < patches.size(); ++i) {
    auto x = idx(pw, i);
    const auto& s = patches[i];
    tuning::patch_prior pp;
    pp.patch = as_text(field(s, x, "patch"), sub(x, "patch"));
    pp.speedup = as_num(field(s, x, "speedup"), sub(x, "speedup"));
    pp.memory_bytes = as_num(field(s, x, "memory_bytes"), sub(x, "memory_bytes"));
    pp.source = as_text(field(s, x, "source"), sub(x, "source"));
    p.patches.push_back(std::move(pp));
  }
  return p;
}

std::optional<json> opt_doc(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end())
    return std::nullopt;
  return *it;
}

run_state state_from_json(const json& j) {
  const std::string w;
  auto f = [&](const char* key) -> const json& { return field(j, w, key); };
  run_state s;
  s.run_id = as_text(f("run_id"), "run_id");
  s.task_path = as_text(f("task_path"), "task_path");
  s.seed = as_u64(f("seed"), "seed");
  s.contract_doc = opt_doc(j, "contract_doc");
  s.out_of_scope_patches = as_texts(f("out_of_scope_patches"), "out_of_scope_patches");
  const auto& conflicts = as_array(f("patch_conflicts"), "patch_conflicts");
  for (std::size_t i = 0; i < conflicts.size(); ++i) {
    auto where = idx("patch_conflicts", i);
    const auto& pair = as_array(conflicts[i], where, 2);
    s.patch_conflicts.emplace_back(as_text(pair[0], where), as_text(pair[1], where));
  }
  s.priors = as_priors(f("priors"), "priors");
  s.priors_loaded = as_bool(f("priors_loaded"), "priors_loaded");
  const auto& seeds = as_array(f("experience_seeds"), "experience_seeds");
  for (std::size_t i = 0; i < seeds.size(); ++i)
    s.experience_seeds.push_back(as_config(seeds[i], idx("experience_seeds", i)));
  s.experience_seeded = as_bool(f("experience_seeded"), "experience_seeded");
  s.experience_seeds_explained =
    as_bool(f("experience_seeds_explained"), "experience_seeds_explained");
  if (auto it = j.find("experience_pack"); it != j.end())
    s.experience_pack = *it;
  if (auto it = j.find("noise"); it != j.end()) {
    tuning::noise_estimate n;
    n.runs = static_cast<std::size_t>(as_u64(field(*it, "noise", "runs"), "noise.runs"));
    n.mean_step_time_s =
      as_num(field(*it, "noise", "mean_step_time_s"), "noise.mean_step_time_s");
    n.log_sd = as_num(field(*it, "noise", "log_sd"), "noise.log_sd");
    n.cv = as_num(field(*it, "noise", "cv"), "noise.cv");
    n.min_detectable_speedup =
      as_num(field(*it, "noise", "min_detectable_speedup"), "noise.min_detectable_speedup");
    s.noise = n;
  }
  const auto& ref = f("reference");
  s.reference.loss = as_step_map(field(ref, "reference", "loss"), "reference.loss");
  s.reference.spread = as_step_map(field(ref, "reference", "spread"), "reference.spread");
  const auto& windows = as_array(field(ref, "reference", "windows"), "reference.windows");
  for (std::size_t i = 0; i < windows.size(); ++i) {
    auto ww = idx("reference.windows", i);
    const auto& x = as_array(windows[i], ww, 6);
    tuning::loss_window_reference r;
    r.first = as_u32(x[0], ww);
    r.last = as_u32(x[1], ww);
    r.mean = as_num(x[2], ww);
    r.within_var = as_num(x[3], ww);
    r.between_var = as_num(x[4], ww);
    r.runs = as_u32(x[5], ww);
    s.reference.windows.push_back(r);
  }
  s.reference.eval_loss =
    as_step_map(field(ref, "reference", "eval_loss"), "reference.eval_loss");
  s.reference.eval_spread =
    as_step_map(field(ref, "reference", "eval_spread"), "reference.eval_spread");
  s.doctor_doc = opt_doc(j, "doctor_doc");
  const auto& trials = as_array(f("trials"), "trials");
  s.trials.reserve(trials.size());
  for (std::size_t i = 0; i < trials.size(); ++i)
    s.trials.push_back(as_trial(trials[i], idx("trials", i)));
  const auto& rv = as_array(f("reverifications"), "reverifications");
  for (std::size_t i = 0; i < rv.size(); ++i)
    s.reverifications.push_back(as_reverification(rv[i], idx("reverifications", i)));
  s.stale_results = as_u64(f("stale_results"), "stale_results");
  s.promotion = opt_doc(j, "promotion");
  s.report = opt_doc(j, "report");
  s.applied = opt_doc(j, "applied");
  s.search_stopped = opt_doc(j, "search_stopped");
  s.apply_intent = opt_doc(j, "apply_intent");
  s.last_proposals = opt_doc(j, "last_proposals");
  s.interruptions = as_u64(f("interruptions"), "interruptions");
  if (j.contains("llm")) // snapshots before issue 15 have none
    for (const auto& e : as_array(j["llm"], "llm"))
      s.llm.push_back(e);
  s.proposals_taken = as_u64(f("proposals_taken"), "proposals_taken");
  const auto& in_flight = as_array(f("in_flight"), "in_flight");
  for (std::size_t i = 0; i < in_flight.size(); ++i) {
    auto where = idx("in_flight", i);
    const auto& e = as_array(in_flight[i], where, 4);
    attempt_clock c;
    c.dispatched_at_ns = as_i64(e[2], where);
    c.interrupted_at_ns = as_i64(e[3], where);
    s.in_flight[{as_u64(e[0], where), as_u32(e[1], where)}] = c;
  }
  s.stages_started = as_texts(f("stages_started"), "stages_started");
  s.stages_completed = as_texts(f("stages_completed"), "stages_completed");
  s.events = as_u64(f("events"), "events");
  return s;
}

// The snapshot value: {"covered": n, "unknown_kinds_skipped": u, "state": {...}}.
std::string snapshot_bytes(const run_state& s, std::uint64_t covered, std::uint64_t unknown) {
  json j{{"covered", covered}, {"unknown_kinds_skipped", unknown}, {"state", state_json(s)}};
  return j.dump();
}

} // namespace

run_projection::run_projection(run_state state, std::uint64_t covered,
                               std::uint64_t unknown_kinds_skipped)
  : state_(std::move(state)) {
  restore_position(covered, state_.events, unknown_kinds_skipped);
}

std::string serialize_run_state(const run_state& state) {
  return state_json(state).dump();
}

caf::expected<run_state> parse_run_state(std::string_view text) {
  auto j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded())
    return make_error(errc::corrupt_data, "run state: not valid JSON");
  try {
    return state_from_json(j);
  } catch (const decode_error& e) {
    return make_error(errc::corrupt_data, std::string{"run state: "} + e.what());
  }
}

caf::expected<run_load> load_run_with_snapshot(const event_log& log, const std::string& run_id) {
  run_load out;
  std::optional<run_projection> proj;
  auto snap = log.read_snapshot(run_id);
  if (!snap) {
    if (code_of(snap.error()) == errc::invalid_argument)
      return std::move(snap.error()); // a bad run id: nothing to fall back to
    out.reason = "snapshot unreadable: " + describe(snap.error());
  } else if (!*snap) {
    out.reason = "no snapshot";
  } else if ((*snap)->format != run_state_format) {
    out.reason = "snapshot format '" + (*snap)->format + "' is not '" + run_state_format + "'";
  } else {
    const auto& rec = **snap;
    auto version = log.version(run_id);
    if (!version)
      return std::move(version.error());
    const auto j = json::parse(rec.bytes, nullptr, false);
    if (rec.covered > *version) {
      out.reason = "snapshot covers " + std::to_string(rec.covered)
                   + " events but the stream holds " + std::to_string(*version);
    } else if (j.is_discarded()) {
      out.reason = "snapshot unparsable: not valid JSON";
    } else {
      try {
        auto covered = as_u64(field(j, "snapshot", "covered"), "snapshot.covered");
        auto unknown = as_u64(field(j, "snapshot", "unknown_kinds_skipped"),
                              "snapshot.unknown_kinds_skipped");
        auto state = state_from_json(field(j, "snapshot", "state"));
        if (covered != rec.covered)
          out.reason = "snapshot inconsistent: stored as covering " + std::to_string(rec.covered)
                       + " events, its content says " + std::to_string(covered);
        else if (state.run_id != run_id)
          out.reason = "snapshot inconsistent: it is of run '" + state.run_id + "'";
        else if (state.events + unknown != covered)
          out.reason = "snapshot inconsistent: " + std::to_string(state.events) + " applied + "
                       + std::to_string(unknown) + " skipped events != "
                       + std::to_string(covered) + " covered";
        else
          proj.emplace(std::move(state), covered, unknown);
      } catch (const decode_error& e) {
        out.reason = std::string{"snapshot unparsable: "} + e.what();
      }
    }
  }
  if (proj) {
    out.used_snapshot = true;
    out.snapshot_covered = proj->next_position();
  } else {
    proj.emplace(run_id);
  }
  auto before = proj->next_position();
  if (auto err = fold_stream(log, run_id, *proj))
    return err;
  out.events_folded = proj->next_position() - before;
  out.unknown_kinds_skipped = proj->unknown_kinds_skipped();
  out.state = proj->state();
  return out;
}

caf::expected<std::uint64_t> snapshot_run(event_log& log, const std::string& run_id) {
  // Fold from the previous snapshot when it is trusted, else from the start.
  auto loaded = load_run_with_snapshot(log, run_id);
  if (!loaded)
    return std::move(loaded.error());
  std::uint64_t covered = loaded->snapshot_covered + loaded->events_folded;
  if (auto err = log.write_snapshot(
        run_id, covered, run_state_format,
        snapshot_bytes(loaded->state, covered, loaded->unknown_kinds_skipped)))
    return err;
  return covered;
}

} // namespace infrarsi::store
