// Snapshots of the run projection (store/run_snapshot.cpp): run_state <-> JSON bit-exactly, and
// snapshot + tail = full fold on a realistic run, for both event_log backends. A snapshot of
// another format, a damaged one or an inconsistent one is ignored with its reason, never trusted.

#include "store/run_projection.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "store/memory_event_log.hpp"
#include "store/rocksdb_event_log.hpp"
#include "test_util.hpp"
#include "log_backends.hpp"

namespace infrarsi::store {
namespace {

using nlohmann::json;

// -- a realistic run, built from the real message types ------------------------------------------

messages::trial_spec_msg spec(std::uint64_t id, std::uint32_t attempt, const std::string& purpose,
                              std::int64_t micro_batch, double bucket_scale, bool ckpt,
                              std::vector<std::string> patches) {
  wire::TrialSpecT t;
  t.trial_id = id;
  t.attempt = attempt;
  t.purpose = purpose;
  auto knob = [&t](const std::string& name, auto value) {
    auto k = std::make_unique<wire::KnobAssignmentT>();
    k->name = name;
    k->value.Set(std::move(value));
    t.knobs.push_back(std::move(k));
  };
  wire::IntKnobT mb;
  mb.value = micro_batch;
  wire::RealKnobT bs;
  bs.value = bucket_scale;
  wire::BoolKnobT ck;
  ck.value = ckpt;
  wire::TextKnobT attn;
  attn.value = micro_batch > 4 ? "sdpa" : "math";
  knob("micro_batch", mb);
  knob("bucket_scale", bs);
  knob("activation_checkpointing", ck);
  knob("attention", attn);
  t.patches = std::move(patches);
  t.timeout_s = 300;
  return messages::trial_spec_msg::pack(t);
}

/// A doubles source with the values that break naive JSON: NaN, infinities, -0, subnormals,
/// extremes, and random bit patterns.
struct doubles {
  std::mt19937_64 rng;
  explicit doubles(std::uint64_t seed) : rng(seed) {}
  double any() {
    switch (rng() % 12) {
      case 0: return std::numeric_limits<double>::quiet_NaN();
      case 1: return std::numeric_limits<double>::infinity();
      case 2: return -std::numeric_limits<double>::infinity();
      case 3: return -0.0;
      case 4: return std::numeric_limits<double>::denorm_min();
      case 5: return std::numeric_limits<double>::max();
      case 6: return 0.1 + 0.2;
      default: return finite_bits();
    }
  }
  double finite_bits() {
    for (;;) {
      auto bits = rng();
      double d;
      std::memcpy(&d, &bits, sizeof d);
      if (std::isfinite(d))
        return d;
    }
  }
  double positive(double lo, double hi) {
    return std::uniform_real_distribution<double>{lo, hi}(rng);
  }
};

messages::trial_result_msg result(std::uint64_t id, std::uint32_t attempt, wire::Outcome outcome,
                                  std::uint32_t steps, doubles& d, const std::string& detail,
                                  const std::string& final_report) {
  wire::TrialResultT r;
  r.trial_id = id;
  r.attempt = attempt;
  r.outcome = outcome;
  for (std::uint32_t i = 0; i < steps; ++i) {
    auto s = std::make_unique<wire::StepMetricsT>();
    s->step = i;
    s->loss = (i % 5 == 3) ? d.any() : 6.0 - 0.1 * i + d.positive(0, 1e-3);
    s->tokens = 16384;
    s->step_time_s = d.positive(0.2, 0.3);
    s->warmup = i < 2;
    if (i % 3 != 2)
      s->observed_at_s = 1.5 + 0.25 * i + d.positive(0, 0.01);
    if (i % 2 == 0) {
      s->data_s = d.positive(0.001, 0.01);
      s->forward_s = d.positive(0.05, 0.1);
      s->backward_s = d.positive(0.1, 0.2);
      s->optimizer_s = d.positive(0.01, 0.02);
    }
    if (i % 4 == 1)
      s->communication_s = d.positive(0.01, 0.05);
    if (i % 4 == 3) // an eval loss every 4th step (loss_mode eval); NaN where the loss is
      s->eval_loss = (i % 5 == 3) ? d.any() : 5.5 - 0.1 * i + d.positive(0, 1e-3);
    r.steps.push_back(std::move(s));
  }
  r.peak_memory_bytes = (std::uint64_t{900} << 20) + id;
  r.wall_time_s = d.positive(5, 50);
  r.device_seconds = 2 * r.wall_time_s;
  r.exit_code = outcome == wire::Outcome::Ok ? 0 : 1;
  r.detail = detail;
  r.final_report = final_report;
  return messages::trial_result_msg::pack(r);
}

new_event doc(wire::EventKind kind, const char* schema, const json& j) {
  return new_event::of(kind, messages::make_document(schema, j.dump()));
}

new_event stage(wire::EventKind kind, wire::Stage st) {
  wire::StageEventT s;
  s.stage = st;
  s.detail = "stage";
  return new_event::of(kind, messages::stage_event_msg::pack(s));
}

new_event verdict(std::uint64_t id, std::uint32_t attempt, std::vector<std::string> violations,
                  double timed) {
  return doc(wire::EventKind::TrialVerified, "verdict/1",
             json{{"trial_id", id},
                  {"attempt", attempt},
                  {"outcome", "ok"},
                  {"violations", violations},
                  {"timed_step_time_s", timed}});
}

/// The events of one whole run (init, doctor, run with every outcome, a lost and re-queued
/// trial, a stale duplicate result, an event of an unknown kind, re-verification in two rounds,
/// report, apply), deterministic for a seed.
std::vector<new_event> realistic_run(std::uint64_t seed) {
  doubles d{seed};
  std::vector<new_event> ev;
  using K = wire::EventKind;
  using S = wire::Stage;
  const std::string final_ok = R"({"event":"final","global_batch":64,"params":10942464,)"
                               R"("layers":4,"timed_steps":[2,9]})";
  auto propose = [&](std::uint64_t id, std::uint32_t att, const std::string& purpose,
                     std::int64_t mb, double bs, bool ck, std::vector<std::string> patches) {
    auto s = spec(id, att, purpose, mb, bs, ck, std::move(patches));
    ev.push_back(new_event::of(K::TrialProposed, s));
    ev.push_back(new_event::of(K::TrialDispatched, s));
  };
  auto complete = [&](std::uint64_t id, std::uint32_t att, wire::Outcome o, std::uint32_t steps,
                      const std::string& detail, const std::string& final_report) {
    ev.push_back(new_event::of(K::TrialCompleted,
                               result(id, att, o, steps, d, detail, final_report)));
  };

  wire::RunCreatedT rc;
  rc.task = "config/tasks/torch_gpt.toml";
  rc.seed = 0xFFFFFFFFFFFFFFF0ULL ^ seed; // a seed past 2^63
  rc.tool_version = "0.1.0";
  ev.push_back(new_event::of(K::RunCreated, messages::run_created_msg::pack(rc)));
  ev.push_back(stage(K::StageStarted, S::Init));
  ev.push_back(doc(K::ContractLocked, "contract/1",
                   json{{"contract_hash", "9f1c"},
                        {"hardware", {{"cpus", 2}, {"memory_bytes", 1ULL << 34}}},
                        {"patches",
                         {{"fused_qkv", {{"in_scope", true}}},
                          {"foreach_adamw", {{"in_scope", true}}},
                          {"edit_frozen", {{"in_scope", false}}}}},
                        {"patch_conflicts",
                         json::array({json::array({"fused_qkv", "foreach_adamw"})})},
                        {"seed", seed}}));
  ev.push_back(stage(K::StageCompleted, S::Init));
  ev.push_back(doc(K::PriorsLoaded, "priors/1",
                   json{{"settings",
                         {{{"knob", "micro_batch"},
                           {"value", {{"int", 8}}},
                           {"speedup", 1.25},
                           {"memory_bytes", 1.5e9},
                           {"source", "knowledge:config/knowledge/torch_gpt.toml"}},
                          {{"knob", "bucket_scale"},
                           {"value", {{"real", 0.1 + 0.2}}},
                           {"speedup", 1.01},
                           {"memory_bytes", -2e6},
                           {"source", "llm:gpt"}}}},
                        {"patches",
                         {{{"patch", "fused_qkv"},
                           {"speedup", 1.07},
                           {"memory_bytes", 0.0},
                           {"source", "llm:gpt"}}}}}));
  ev.push_back(doc(K::ExperienceSeeded, "experience_pack/1",
                   json{{"seeds",
                         {{{"config",
                            {{"knobs", {{"micro_batch", {{"int", 4}}}}},
                             {"patches", {"fused_qkv"}}}}}}}}));
  ev.push_back(stage(K::StageStarted, S::Doctor));
  for (std::uint64_t b = 0; b < 3; ++b) {
    propose(b, 0, "baseline", 2, 1.0, false, {});
    complete(b, 0, wire::Outcome::Ok, 12, "completed", final_ok);
    ev.push_back(verdict(b, 0, {}, d.positive(0.2, 0.3)));
  }
  json reference = json::array();
  for (std::uint32_t step = 0; step < 12; ++step)
    reference.push_back(
      {{"step", step}, {"loss", 6.0 - 0.1 * step}, {"spread", d.positive(0, 1e-3)}});
  ev.push_back(doc(K::BaselineCalibrated, "doctor/1",
                   json{{"noise",
                         {{"runs", 3},
                          {"mean_step_time_s", d.positive(0.2, 0.3)},
                          {"log_sd", d.positive(0.001, 0.02)},
                          {"cv", d.positive(0.001, 0.02)},
                          {"min_detectable_speedup", d.positive(0.01, 0.05)}}},
                        {"baseline_trials", {0, 1, 2}},
                        {"reference", reference},
                        // What loss_mode window / eval runs add (issue 19).
                        {"loss_windows",
                         {{{"first", 0}, {"last", 5}, {"mean", 5.75}, {"within_var", d.positive(0, 1e-3)},
                           {"between_var", d.positive(0, 1e-4)}, {"runs", 3}},
                          {{"first", 6}, {"last", 11}, {"mean", 5.15}, {"within_var", d.positive(0, 1e-3)},
                           {"between_var", 0.0}, {"runs", 3}}}},
                        {"eval_reference",
                         {{{"step", 3}, {"loss", 5.2}, {"spread", d.positive(0, 1e-3)}},
                          {{"step", 7}, {"loss", 4.8}, {"spread", 0.0}}}}}));
  ev.push_back(stage(K::StageCompleted, S::Doctor));
  ev.push_back(stage(K::StageStarted, S::Run));

  propose(3, 0, "explore", 8, 0.5, false, {"fused_qkv"});
  complete(3, 0, wire::Outcome::Ok, 12, "completed", final_ok);
  // A duplicate result for the same attempt: never counted twice.
  complete(3, 0, wire::Outcome::Crash, 3, "late duplicate", "");
  ev.push_back(verdict(3, 0, {}, d.positive(0.15, 0.2)));
  propose(4, 0, "explore", 16, 0.1 + 0.2, true, {"foreach_adamw", "fused_qkv"});
  // An event of a kind from a newer build: skipped and counted.
  ev.push_back(new_event{4242, messages::byte_buffer::copy_of("from the future")});
  // Text cut mid-character by the launcher (invalid UTF-8) must survive a snapshot.
  complete(4, 0, wire::Outcome::Oom, 5,
           "out of memory ('CUDA out of memory'): tried to allocate 2.0 \xe2\x82", "");
  ev.push_back(verdict(4, 0, {}, 0.0));
  propose(5, 0, "explore", 4, 2.0, false, {});
  ev.push_back(new_event::of(K::TrialLost, spec(5, 0, "explore", 4, 2.0, false, {})));
  propose(5, 1, "explore", 4, 2.0, false, {});
  complete(5, 1, wire::Outcome::Ok, 12, "completed", R"({"event":"final","global_batch":64})");
  ev.push_back(verdict(5, 1, {"loss: step 7 off the reference by 0.31 (tolerance 0.05)"},
                       d.positive(0.2, 0.3)));
  propose(6, 0, "explore", 4, -0.0, true, {"fused_qkv"});
  complete(6, 0, wire::Outcome::Timeout, 0, "timed out after 300 s", "");
  propose(7, 0, "explore", 4, 1.0, false, {"edit_frozen"});
  complete(7, 0, wire::Outcome::ContractViolation, 0, "scope: edits frozen file train.py", "");
  ev.push_back(verdict(7, 0, {"scope: edits frozen file train.py"}, 0.0));
  propose(8, 0, "explore", 8, 0.5, true, {"fused_qkv"});
  complete(8, 0, wire::Outcome::Ok, 12, "completed", "not json at all");

  // Re-verification of trial 3: round 1 (noisy, re-measured) then round 2 supersedes it.
  for (std::uint32_t round = 1; round <= 2; ++round) {
    std::string tag = round == 1 ? "/3" : "/3#2";
    std::vector<double> a;
    std::vector<double> b;
    for (std::uint64_t i = 0; i < 2; ++i) {
      std::uint64_t base_id = 10 + 4 * (round - 1) + 2 * i;
      propose(base_id, 0, "verify-baseline" + tag, 2, 1.0, false, {});
      complete(base_id, 0, wire::Outcome::Ok, 12, "completed", final_ok);
      a.push_back(d.positive(0.2, 0.3));
      ev.push_back(verdict(base_id, 0, {}, a.back()));
      propose(base_id + 1, 0, "verify-candidate" + tag, 8, 0.5, false, {"fused_qkv"});
      complete(base_id + 1, 0, wire::Outcome::Ok, 12, "completed", final_ok);
      b.push_back(d.positive(0.15, 0.2));
      ev.push_back(verdict(base_id + 1, 0, {}, b.back()));
    }
    ev.push_back(doc(
      K::CandidateReverified, "reverification/1",
      json{{"candidate_trial", 3},
           {"config",
            {{"knobs",
              {{"micro_batch", {{"int", 8}}},
               {"bucket_scale", {{"real", 0.5}}},
               {"activation_checkpointing", {{"bool", false}}},
               {"attention", {{"text", "sdpa"}}}}},
             {"patches", {"fused_qkv"}}}},
           {"baseline_times_s", a},
           {"candidate_times_s", b},
           {"speedup", d.positive(1.1, 1.4)},
           {"ci_low", d.positive(1.0, 1.1)},
           // nlohmann writes the +inf upper bound of a too-small sample as null
           {"ci_high", round == 1 ? json(std::numeric_limits<double>::infinity())
                                  : json(d.positive(1.4, 1.6))},
           {"dof", d.positive(1, 3)},
           {"min_detectable_speedup", 0.03},
           {"promotable", round == 2},
           {"round", round},
           {"remeasure", round == 1},
           {"reason", round == 1 ? "measured under visibly higher variance: re-measured"
                                 : "lower bound clears 1 + mds"}}));
  }
  ev.push_back(doc(K::CandidatePromoted, "promotion/1",
                   json{{"trial", 3}, {"speedup", 1.31}, {"diff", "micro_batch 2->8, +fused_qkv"}}));
  ev.push_back(stage(K::StageCompleted, S::Run));
  ev.push_back(stage(K::StageStarted, S::Report));
  ev.push_back(doc(K::ReportWritten, "report/1",
                   json{{"markdown", ".infrarsi/runs/r/report.md"},
                        {"failed_device_seconds", 123.5}}));
  ev.push_back(stage(K::StageCompleted, S::Report));
  ev.push_back(stage(K::StageStarted, S::Apply));
  ev.push_back(doc(K::ChangesApplied, "apply/1", json{{"committed", false}, {"files", {"a.py"}}}));
  ev.push_back(stage(K::StageCompleted, S::Apply));
  return ev;
}

// -- field-by-field comparison, independent of the serializer -----------------------------------

bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0; // also tells -0.0 from 0.0
}

bool same_doubles(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size())
    return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_double(a[i], b[i]))
      return false;
  return true;
}

bool same_knob(const tuning::knob_value& a, const tuning::knob_value& b) {
  if (a.index() != b.index())
    return false;
  if (const auto* d = std::get_if<double>(&a))
    return same_double(*d, std::get<double>(b));
  return a == b;
}

bool same_config(const tuning::configuration& a, const tuning::configuration& b) {
  if (a.patches != b.patches || a.knobs.size() != b.knobs.size())
    return false;
  for (auto ia = a.knobs.begin(), ib = b.knobs.begin(); ia != a.knobs.end(); ++ia, ++ib)
    if (ia->first != ib->first || !same_knob(ia->second, ib->second))
      return false;
  return true;
}

template <class K>
bool same_map(const std::map<K, double>& a, const std::map<K, double>& b) {
  if (a.size() != b.size())
    return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib)
    if (ia->first != ib->first || !same_double(ia->second, ib->second))
      return false;
  return true;
}

/// The first field in which `a` and `b` differ ("" when none): every field of run_state.
std::string first_difference(const run_state& a, const run_state& b) {
#define INFRARSI_SAME(cond, what)                                                                \
  if (!(cond))                                                                                   \
    return what;
  INFRARSI_SAME(a.run_id == b.run_id, "run_id")
  INFRARSI_SAME(a.task_path == b.task_path, "task_path")
  INFRARSI_SAME(a.seed == b.seed, "seed")
  INFRARSI_SAME(a.contract_doc == b.contract_doc, "contract_doc")
  INFRARSI_SAME(a.out_of_scope_patches == b.out_of_scope_patches, "out_of_scope_patches")
  INFRARSI_SAME(a.patch_conflicts == b.patch_conflicts, "patch_conflicts")
  INFRARSI_SAME(a.priors.settings.size() == b.priors.settings.size(), "priors.settings")
  for (std::size_t i = 0; i < a.priors.settings.size(); ++i) {
    const auto& x = a.priors.settings[i];
    const auto& y = b.priors.settings[i];
    INFRARSI_SAME(x.knob == y.knob && same_knob(x.value, y.value)
                    && same_double(x.speedup, y.speedup)
                    && same_double(x.memory_bytes, y.memory_bytes) && x.source == y.source,
                  "priors.settings[" + std::to_string(i) + "]")
  }
  INFRARSI_SAME(a.priors.patches.size() == b.priors.patches.size(), "priors.patches")
  for (std::size_t i = 0; i < a.priors.patches.size(); ++i) {
    const auto& x = a.priors.patches[i];
    const auto& y = b.priors.patches[i];
    INFRARSI_SAME(x.patch == y.patch && same_double(x.speedup, y.speedup)
                    && same_double(x.memory_bytes, y.memory_bytes) && x.source == y.source,
                  "priors.patches[" + std::to_string(i) + "]")
  }
  INFRARSI_SAME(a.priors_loaded == b.priors_loaded, "priors_loaded")
  INFRARSI_SAME(a.experience_seeds.size() == b.experience_seeds.size(), "experience_seeds")
  for (std::size_t i = 0; i < a.experience_seeds.size(); ++i)
    INFRARSI_SAME(same_config(a.experience_seeds[i], b.experience_seeds[i]), "experience_seeds")
  INFRARSI_SAME(a.experience_seeded == b.experience_seeded, "experience_seeded")
  INFRARSI_SAME(a.noise.has_value() == b.noise.has_value(), "noise")
  if (a.noise)
    INFRARSI_SAME(a.noise->runs == b.noise->runs
                    && same_double(a.noise->mean_step_time_s, b.noise->mean_step_time_s)
                    && same_double(a.noise->log_sd, b.noise->log_sd)
                    && same_double(a.noise->cv, b.noise->cv)
                    && same_double(a.noise->min_detectable_speedup,
                                   b.noise->min_detectable_speedup),
                  "noise")
  INFRARSI_SAME(same_map(a.reference.loss, b.reference.loss), "reference.loss")
  INFRARSI_SAME(same_map(a.reference.spread, b.reference.spread), "reference.spread")
  INFRARSI_SAME(a.reference.windows.size() == b.reference.windows.size(), "reference.windows")
  for (std::size_t i = 0; i < a.reference.windows.size(); ++i) {
    const auto& x = a.reference.windows[i];
    const auto& y = b.reference.windows[i];
    INFRARSI_SAME(x.first == y.first && x.last == y.last && same_double(x.mean, y.mean)
                    && same_double(x.within_var, y.within_var)
                    && same_double(x.between_var, y.between_var) && x.runs == y.runs,
                  "reference.windows[" + std::to_string(i) + "]")
  }
  INFRARSI_SAME(same_map(a.reference.eval_loss, b.reference.eval_loss), "reference.eval_loss")
  INFRARSI_SAME(same_map(a.reference.eval_spread, b.reference.eval_spread),
                "reference.eval_spread")
  INFRARSI_SAME(a.doctor_doc == b.doctor_doc, "doctor_doc")
  INFRARSI_SAME(a.trials.size() == b.trials.size(), "trials")
  for (std::size_t i = 0; i < a.trials.size(); ++i) {
    const auto& x = a.trials[i];
    const auto& y = b.trials[i];
    auto w = "trials[" + std::to_string(i) + "].";
    INFRARSI_SAME(x.trial_id == y.trial_id && x.attempt == y.attempt, w + "id")
    INFRARSI_SAME(x.purpose == y.purpose, w + "purpose")
    INFRARSI_SAME(same_config(x.config, y.config), w + "config")
    INFRARSI_SAME(x.dispatched == y.dispatched, w + "dispatched")
    INFRARSI_SAME(x.finished == y.finished, w + "finished")
    INFRARSI_SAME(x.outcome == y.outcome, w + "outcome")
    INFRARSI_SAME(x.steps.size() == y.steps.size(), w + "steps")
    for (std::size_t k = 0; k < x.steps.size(); ++k) {
      const auto& p = x.steps[k];
      const auto& q = y.steps[k];
      INFRARSI_SAME(p.step == q.step && same_double(p.loss, q.loss) && p.tokens == q.tokens
                      && same_double(p.step_time_s, q.step_time_s) && p.warmup == q.warmup
                      && same_double(p.observed_at_s, q.observed_at_s)
                      && p.eval_loss.has_value() == q.eval_loss.has_value()
                      && (!p.eval_loss || same_double(*p.eval_loss, *q.eval_loss)),
                    w + "steps[" + std::to_string(k) + "]")
    }
    INFRARSI_SAME(x.declared.final_seen == y.declared.final_seen
                    && x.declared.global_batch == y.declared.global_batch
                    && x.declared.params == y.declared.params
                    && x.declared.layers == y.declared.layers
                    && x.declared.timed_steps == y.declared.timed_steps,
                  w + "declared")
    INFRARSI_SAME(same_double(x.wall_time_s, y.wall_time_s), w + "wall_time_s")
    INFRARSI_SAME(same_double(x.device_seconds, y.device_seconds), w + "device_seconds")
    INFRARSI_SAME(x.peak_memory_bytes == y.peak_memory_bytes, w + "peak_memory_bytes")
    INFRARSI_SAME(x.detail == y.detail, w + "detail")
    INFRARSI_SAME(same_map(x.phase_s, y.phase_s), w + "phase_s")
    INFRARSI_SAME(x.verified == y.verified, w + "verified")
    INFRARSI_SAME(x.violations == y.violations, w + "violations")
    INFRARSI_SAME(same_double(x.timed_step_time_s, y.timed_step_time_s), w + "timed_step_time_s")
  }
  INFRARSI_SAME(a.reverifications.size() == b.reverifications.size(), "reverifications")
  for (std::size_t i = 0; i < a.reverifications.size(); ++i) {
    const auto& x = a.reverifications[i];
    const auto& y = b.reverifications[i];
    INFRARSI_SAME(x.candidate_trial == y.candidate_trial && same_config(x.config, y.config)
                    && same_doubles(x.baseline_times_s, y.baseline_times_s)
                    && same_doubles(x.candidate_times_s, y.candidate_times_s)
                    && same_double(x.estimate.speedup, y.estimate.speedup)
                    && same_double(x.estimate.ci_low, y.estimate.ci_low)
                    && same_double(x.estimate.ci_high, y.estimate.ci_high)
                    && same_double(x.estimate.dof, y.estimate.dof)
                    && same_double(x.estimate.log_sd_a, y.estimate.log_sd_a)
                    && same_double(x.estimate.log_sd_b, y.estimate.log_sd_b)
                    && x.promotable == y.promotable && x.reason == y.reason
                    && x.round == y.round && x.remeasure == y.remeasure,
                  "reverifications[" + std::to_string(i) + "]")
  }
  INFRARSI_SAME(a.stale_results == b.stale_results, "stale_results")
  INFRARSI_SAME(a.promotion == b.promotion, "promotion")
  INFRARSI_SAME(a.report == b.report, "report")
  INFRARSI_SAME(a.applied == b.applied, "applied")
  INFRARSI_SAME(a.stages_started == b.stages_started, "stages_started")
  INFRARSI_SAME(a.stages_completed == b.stages_completed, "stages_completed")
  INFRARSI_SAME(a.events == b.events, "events")
#undef INFRARSI_SAME
  return "";
}

// -- backends ------------------------------------------------------------------------------------

using test_backends::memory_backend;
using test_backends::rocksdb_backend;

template <class Backend>
class RunSnapshotTest : public ::testing::Test {
protected:
  Backend backend;
  std::unique_ptr<event_log> log = backend.open();
  std::vector<new_event> events = realistic_run(7);

  /// Appends events [from, to) to `run` in batches of random size (1..5).
  void append(const std::string& run, std::size_t from, std::size_t to, std::mt19937_64& rng) {
    while (from < to) {
      auto n = std::min<std::size_t>(to - from, 1 + rng() % 5);
      std::vector<new_event> batch(events.begin() + static_cast<std::ptrdiff_t>(from),
                                   events.begin() + static_cast<std::ptrdiff_t>(from + n));
      auto r = log->append(run, from, batch);
      ASSERT_TRUE(r) << describe(r.error());
      from += n;
    }
  }

  run_state full_fold(const std::string& run) {
    auto full = load_run(*log, run);
    EXPECT_TRUE(full) << describe(full.error());
    return full ? *full : run_state{};
  }

  /// `loaded` equals a full fold of `run`: field by field, and serialized byte for byte.
  void expect_full_fold(const std::string& run, const run_state& loaded, const std::string& note) {
    auto full = full_fold(run);
    EXPECT_EQ(first_difference(loaded, full), "") << note;
    EXPECT_EQ(serialize_run_state(loaded), serialize_run_state(full)) << note;
  }

  /// Loads with the snapshot; checks it was ignored with a reason containing `why` and that the
  /// state is the full fold's.
  void expect_ignored(const std::string& run, const std::string& why) {
    auto loaded = load_run_with_snapshot(*log, run);
    ASSERT_TRUE(loaded) << describe(loaded.error());
    EXPECT_FALSE(loaded->used_snapshot);
    EXPECT_NE(loaded->reason.find(why), std::string::npos) << loaded->reason;
    EXPECT_EQ(loaded->snapshot_covered, 0u);
    EXPECT_EQ(loaded->events_folded, *log->version(run));
    expect_full_fold(run, loaded->state, why);
  }
};

using Backends = ::testing::Types<memory_backend, rocksdb_backend>;
struct backend_names {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, memory_backend> ? "memory" : "rocksdb";
  }
};
TYPED_TEST_SUITE(RunSnapshotTest, Backends, backend_names);

// The realistic run exercises what it claims to (otherwise the equality below proves little).
TYPED_TEST(RunSnapshotTest, TheRealisticRunFillsEveryPartOfTheState) {
  std::mt19937_64 rng{1};
  this->append("r", 0, this->events.size(), rng);
  auto s = load_run(*this->log, "r");
  ASSERT_TRUE(s) << describe(s.error());
  EXPECT_EQ(s->events + 1, this->events.size()); // one event of an unknown kind
  EXPECT_TRUE(s->contract_doc && s->doctor_doc && s->promotion && s->report && s->applied);
  EXPECT_EQ(s->out_of_scope_patches, std::vector<std::string>{"edit_frozen"});
  ASSERT_EQ(s->patch_conflicts.size(), 1u);
  EXPECT_EQ(s->patch_conflicts[0].first, "fused_qkv");
  EXPECT_TRUE(s->priors_loaded);
  EXPECT_EQ(s->priors.settings.size(), 2u);
  EXPECT_EQ(s->experience_seeds.size(), 1u);
  ASSERT_TRUE(s->noise);
  EXPECT_EQ(s->reference.loss.size(), 12u);
  EXPECT_EQ(s->stages_completed.size(), 5u);
  ASSERT_EQ(s->reverifications.size(), 1u); // round 2 superseded round 1
  EXPECT_EQ(s->reverifications[0].round, 2u);
  const auto* lost = s->find(5, 0);
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ(lost->outcome, tuning::trial_outcome::lost);
  const auto* t3 = s->find(3, 0);
  ASSERT_NE(t3, nullptr);
  EXPECT_EQ(t3->outcome, tuning::trial_outcome::ok); // the late duplicate did not count
  EXPECT_TRUE(t3->dispatched && t3->verified && t3->declared.timed_steps);
  EXPECT_EQ(t3->phase_s.size(), 5u);
  EXPECT_EQ(s->find(5, 1)->outcome, tuning::trial_outcome::contract_violation);
  bool nan_loss = false;
  for (const auto& t : s->trials)
    for (const auto& p : t.steps)
      nan_loss = nan_loss || std::isnan(p.loss);
  EXPECT_TRUE(nan_loss);
}

TYPED_TEST(RunSnapshotTest, SnapshotAtEveryPrefixPlusTheTailEqualsAFullFold) {
  std::mt19937_64 rng{42};
  const auto n = this->events.size();
  for (std::size_t k = 0; k <= n; ++k) {
    auto run = "k" + std::to_string(k);
    this->append(run, 0, k, rng);
    auto covered = snapshot_run(*this->log, run);
    ASSERT_TRUE(covered) << describe(covered.error());
    ASSERT_EQ(*covered, k);
    this->append(run, k, n, rng);
    auto loaded = load_run_with_snapshot(*this->log, run);
    ASSERT_TRUE(loaded) << describe(loaded.error());
    ASSERT_TRUE(loaded->used_snapshot) << "k=" << k << ": " << loaded->reason;
    EXPECT_EQ(loaded->reason, "");
    EXPECT_EQ(loaded->snapshot_covered, k);
    EXPECT_EQ(loaded->events_folded, n - k);
    EXPECT_EQ(loaded->unknown_kinds_skipped, 1u);
    this->expect_full_fold(run, loaded->state, "k=" + std::to_string(k));
    if (::testing::Test::HasFailure())
      return;
  }
}

// Random prefixes, each built through a chain of snapshots (every snapshot after the first is
// itself made from the previous snapshot plus a tail).
TYPED_TEST(RunSnapshotTest, ChainsOfSnapshotsOnRandomPrefixesEqualAFullFold) {
  std::mt19937_64 rng{2026};
  const auto n = this->events.size();
  for (int round = 0; round < 40; ++round) {
    auto run = "chain" + std::to_string(round);
    std::size_t end = rng() % (n + 1);
    std::size_t at = 0;
    std::size_t last_snapshot = 0;
    bool any = false;
    while (at < end) {
      std::size_t next = at + 1 + rng() % std::max<std::size_t>(1, end / 3);
      next = std::min(next, end);
      this->append(run, at, next, rng);
      at = next;
      if (rng() % 2 == 0) {
        auto covered = snapshot_run(*this->log, run);
        ASSERT_TRUE(covered) << describe(covered.error());
        ASSERT_EQ(*covered, at);
        last_snapshot = at;
        any = true;
      }
    }
    auto loaded = load_run_with_snapshot(*this->log, run);
    ASSERT_TRUE(loaded) << describe(loaded.error());
    EXPECT_EQ(loaded->used_snapshot, any) << loaded->reason;
    EXPECT_EQ(loaded->snapshot_covered, last_snapshot);
    EXPECT_EQ(loaded->events_folded, end - last_snapshot);
    this->expect_full_fold(run, loaded->state,
                           "round " + std::to_string(round) + ", prefix " + std::to_string(end)
                             + ", snapshot at " + std::to_string(last_snapshot));
    if (::testing::Test::HasFailure())
      return;
  }
}

TYPED_TEST(RunSnapshotTest, NoSnapshotFoldsTheWholeStream) {
  std::mt19937_64 rng{3};
  this->append("r", 0, 20, rng);
  this->expect_ignored("r", "no snapshot");
  auto none = load_run_with_snapshot(*this->log, "never-written");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->reason, "no snapshot");
  EXPECT_EQ(none->state.events, 0u);
  auto bad = load_run_with_snapshot(*this->log, "bad run id");
  ASSERT_FALSE(bad);
  EXPECT_EQ(code_of(bad.error()), errc::invalid_argument);
}

// An older format is never trusted, even when its bytes would parse: here its content is a
// snapshot of a shorter prefix, and trusting it would lose events.
TYPED_TEST(RunSnapshotTest, ASnapshotOfAnOlderFormatIsIgnoredWithTheReason) {
  std::mt19937_64 rng{4};
  this->append("r", 0, 25, rng);
  ASSERT_TRUE(snapshot_run(*this->log, "r"));
  auto stored = this->log->read_snapshot("r");
  ASSERT_TRUE(stored && *stored);
  this->append("r", 25, 40, rng);
  ASSERT_FALSE(this->log->write_snapshot("r", 40, "infrarsi-run-state/0", (*stored)->bytes));
  this->expect_ignored("r", "snapshot format 'infrarsi-run-state/0' is not '" + std::string{run_state_format} + "'");
  ASSERT_FALSE(this->log->write_snapshot("r", 25, "something-else/1", (*stored)->bytes));
  this->expect_ignored("r", "snapshot format 'something-else/1'");
}

TYPED_TEST(RunSnapshotTest, ADamagedOrInconsistentSnapshotIsIgnoredWithTheReason) {
  std::mt19937_64 rng{5};
  this->append("r", 0, 30, rng);
  ASSERT_TRUE(snapshot_run(*this->log, "r"));
  auto stored = this->log->read_snapshot("r");
  ASSERT_TRUE(stored && *stored);
  const std::string good = (*stored)->bytes;
  this->append("r", 30, 45, rng);
  auto write = [&](std::uint64_t covered, const std::string& bytes) {
    auto err = this->log->write_snapshot("r", covered, run_state_format, bytes);
    ASSERT_FALSE(err) << describe(err);
  };

  write(30, good.substr(0, good.size() / 2)); // cut short
  this->expect_ignored("r", "snapshot unparsable: not valid JSON");
  write(30, "");
  this->expect_ignored("r", "snapshot unparsable: not valid JSON");

  auto j = json::parse(good);
  auto tampered = j;
  tampered["state"]["trials"][1]["steps"][3] = json::array({3, 1.0}); // a step of 2 values
  write(30, tampered.dump());
  this->expect_ignored("r", "snapshot unparsable: trials[1].steps[3]: expected an array of 7");

  tampered = j;
  tampered["state"].erase("reverifications");
  write(30, tampered.dump());
  this->expect_ignored("r", "missing field 'reverifications'");

  tampered = j;
  auto applied = j["state"]["events"].get<std::uint64_t>();
  auto skipped = j["unknown_kinds_skipped"].get<std::uint64_t>();
  ASSERT_EQ(applied + skipped, 30u);
  ASSERT_EQ(skipped, 1u); // the event of an unknown kind is among the first 30
  tampered["state"]["events"] = applied - 1; // applied + skipped no longer = covered
  write(30, tampered.dump());
  this->expect_ignored("r", "snapshot inconsistent: " + std::to_string(applied - 1)
                              + " applied + 1 skipped events != 30 covered");

  write(20, good); // stored as covering 20, the content says 30
  this->expect_ignored("r",
                       "snapshot inconsistent: stored as covering 20 events, its content says 30");

  // Another run's snapshot copied under this run's key.
  this->append("other", 0, 30, rng);
  ASSERT_TRUE(snapshot_run(*this->log, "other"));
  write(30, (*this->log->read_snapshot("other"))->bytes);
  this->expect_ignored("r", "snapshot inconsistent: it is of run 'other'");

  // And a good one is used again.
  write(30, good);
  auto loaded = load_run_with_snapshot(*this->log, "r");
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(loaded->used_snapshot) << loaded->reason;
  this->expect_full_fold("r", loaded->state, "good snapshot");
}

TYPED_TEST(RunSnapshotTest, SnapshotStorageRoundTripsBytesAndChecksItsArguments) {
  std::mt19937_64 rng{6};
  this->append("a", 0, 10, rng);
  this->append("b", 0, 3, rng);
  const std::string binary{"\0\xff{not json}\n", sizeof "\0\xff{not json}\n" - 1};
  ASSERT_FALSE(this->log->write_snapshot("a", 4, "opaque/1", binary));
  ASSERT_FALSE(this->log->write_snapshot("b", 3, "opaque/2", "b-bytes"));
  auto a = this->log->read_snapshot("a");
  ASSERT_TRUE(a && *a) << (a ? "none" : describe(a.error()));
  EXPECT_EQ((*a)->covered, 4u);
  EXPECT_EQ((*a)->format, "opaque/1");
  EXPECT_EQ((*a)->bytes, binary);
  // A later snapshot replaces the earlier one; other runs keep theirs.
  ASSERT_FALSE(this->log->write_snapshot("a", 10, "opaque/1", ""));
  EXPECT_EQ((*this->log->read_snapshot("a"))->covered, 10u);
  EXPECT_EQ((*this->log->read_snapshot("a"))->bytes, "");
  EXPECT_EQ((*this->log->read_snapshot("b"))->bytes, "b-bytes");
  auto none = this->log->read_snapshot("c");
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  // Snapshots are not events.
  EXPECT_EQ(this->log->head(), 13u);
  EXPECT_EQ(*this->log->version("a"), 10u);

  auto beyond = this->log->write_snapshot("a", 11, "opaque/1", "x");
  ASSERT_TRUE(beyond);
  EXPECT_EQ(code_of(beyond), errc::invalid_argument);
  EXPECT_NE(describe(beyond).find("covers 11 events but the stream holds 10"), std::string::npos)
    << describe(beyond);
  EXPECT_EQ(code_of(this->log->write_snapshot("a", 1, "", "x")), errc::invalid_argument);
  EXPECT_EQ(code_of(this->log->write_snapshot("a", 1, std::string(256, 'f'), "x")),
            errc::invalid_argument);
  EXPECT_EQ(code_of(this->log->write_snapshot("no/such", 0, "f", "x")), errc::invalid_argument);
  EXPECT_EQ(code_of(this->log->read_snapshot("no/such").error()), errc::invalid_argument);
  EXPECT_EQ((*this->log->read_snapshot("a"))->covered, 10u); // unchanged by the failures
}

// -- run_state <-> JSON, without a log ------------------------------------------------------------

run_state folded(const std::vector<new_event>& events, std::size_t count) {
  memory_event_log log;
  for (std::size_t i = 0; i < count; ++i)
    EXPECT_TRUE(log.append("r", i, {events[i]}));
  return *load_run(log, "r");
}

bool same_bits(double a, double b) {
  return same_double(a, b);
}

TEST(RunStateJson, EveryDoubleComesBackBitExactIncludingNanInfinityAndNegativeZero) {
  auto s = folded(realistic_run(11), realistic_run(11).size());
  // Fill doubles the fold leaves ordinary with the awkward ones, everywhere there is a double.
  doubles d{99};
  for (auto& t : s.trials) {
    for (auto& p : t.steps) {
      p.loss = d.any();
      p.step_time_s = d.any();
      p.observed_at_s = d.any();
      if (p.eval_loss)
        p.eval_loss = d.any();
    }
    t.wall_time_s = d.any();
    t.device_seconds = d.any();
    t.timed_step_time_s = d.any();
    for (auto& [name, v] : t.phase_s)
      v = d.any();
    t.config.knobs["bucket_scale"] = d.any();
  }
  s.noise->cv = -0.0;
  s.noise->log_sd = std::numeric_limits<double>::denorm_min();
  s.reference.loss[3] = std::numeric_limits<double>::quiet_NaN();
  ASSERT_EQ(s.reference.windows.size(), 2u);
  s.reference.windows[1].within_var = d.any();
  s.reference.eval_loss[7] = -std::numeric_limits<double>::infinity();
  s.reverifications[0].estimate.log_sd_a = d.finite_bits();
  s.reverifications[0].baseline_times_s.push_back(-std::numeric_limits<double>::infinity());
  s.priors.settings[0].speedup = d.finite_bits();

  auto text = serialize_run_state(s);
  auto back = parse_run_state(text);
  ASSERT_TRUE(back) << describe(back.error());
  EXPECT_EQ(first_difference(*back, s), "");
  EXPECT_EQ(serialize_run_state(*back), text);
  ASSERT_EQ(back->trials.size(), s.trials.size());
  for (std::size_t i = 0; i < s.trials.size(); ++i) {
    const auto& a = s.trials[i];
    const auto& b = back->trials[i];
    ASSERT_EQ(a.steps.size(), b.steps.size());
    for (std::size_t k = 0; k < a.steps.size(); ++k) {
      EXPECT_TRUE(same_bits(a.steps[k].loss, b.steps[k].loss)) << a.steps[k].loss;
      EXPECT_TRUE(same_bits(a.steps[k].step_time_s, b.steps[k].step_time_s));
      EXPECT_TRUE(same_bits(a.steps[k].observed_at_s, b.steps[k].observed_at_s));
      ASSERT_EQ(a.steps[k].eval_loss.has_value(), b.steps[k].eval_loss.has_value());
      if (a.steps[k].eval_loss) {
        EXPECT_TRUE(same_bits(*a.steps[k].eval_loss, *b.steps[k].eval_loss));
      }
      EXPECT_EQ(a.steps[k].tokens, b.steps[k].tokens);
      EXPECT_EQ(a.steps[k].warmup, b.steps[k].warmup);
      EXPECT_EQ(a.steps[k].step, b.steps[k].step);
    }
    EXPECT_TRUE(same_bits(a.wall_time_s, b.wall_time_s));
    EXPECT_TRUE(same_bits(a.device_seconds, b.device_seconds));
    EXPECT_TRUE(same_bits(a.timed_step_time_s, b.timed_step_time_s));
    EXPECT_TRUE(same_bits(std::get<double>(a.config.knobs.at("bucket_scale")),
                          std::get<double>(b.config.knobs.at("bucket_scale"))));
    for (const auto& [name, v] : a.phase_s)
      EXPECT_TRUE(same_bits(v, b.phase_s.at(name)));
    EXPECT_EQ(a.detail, b.detail);
    EXPECT_EQ(a.declared.timed_steps, b.declared.timed_steps);
    EXPECT_EQ(a.declared.global_batch, b.declared.global_batch);
    EXPECT_EQ(a.outcome, b.outcome);
    EXPECT_EQ(a.dispatched, b.dispatched);
  }
  EXPECT_TRUE(same_bits(back->noise->cv, -0.0));
  EXPECT_TRUE(same_bits(back->noise->log_sd, std::numeric_limits<double>::denorm_min()));
  EXPECT_TRUE(std::isnan(back->reference.loss.at(3)));
  EXPECT_TRUE(same_bits(back->reverifications[0].estimate.log_sd_a,
                        s.reverifications[0].estimate.log_sd_a));
  EXPECT_EQ(back->reverifications[0].baseline_times_s.back(),
            -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(same_bits(back->priors.settings[0].speedup, s.priors.settings[0].speedup));
  EXPECT_EQ(back->seed, s.seed);
  EXPECT_GT(back->seed, std::uint64_t{1} << 63);
  EXPECT_EQ(*back->contract_doc, *s.contract_doc);
}

TEST(RunStateJson, TextThatIsNotUtf8ComesBackByteForByte) {
  run_state s;
  s.run_id = "r";
  tuning::trial_record t;
  t.detail = std::string{"cut \xe2\x82"} + std::string{"\0\xff", 2};
  t.purpose = "explore";
  t.config.knobs["attention"] = std::string{"\xc3\x28"}; // an invalid 2-byte sequence
  t.config.patches = {"caf\xc3\xa9"};                     // valid UTF-8 stays a plain string
  s.trials.push_back(t);
  s.stages_started = {"init"};
  auto text = serialize_run_state(s);
  EXPECT_NE(text.find(R"("patches":["café"])"), std::string::npos) << text;
  EXPECT_NE(text.find(R"({"hex":"63757420e28200ff"})"), std::string::npos) << text;
  auto back = parse_run_state(text);
  ASSERT_TRUE(back) << describe(back.error());
  EXPECT_EQ(back->trials[0].detail, t.detail);
  EXPECT_EQ(std::get<std::string>(back->trials[0].config.knobs.at("attention")), "\xc3\x28");
  EXPECT_EQ(back->trials[0].config.patches, t.config.patches);
}

TEST(RunStateJson, ParseErrorsNameTheField) {
  auto text = serialize_run_state(folded(realistic_run(1), 40));
  auto j = json::parse(text);
  auto expect_error = [](const json& bad, const std::string& what) {
    auto r = parse_run_state(bad.dump());
    ASSERT_FALSE(r);
    EXPECT_EQ(code_of(r.error()), errc::corrupt_data);
    EXPECT_NE(describe(r.error()).find(what), std::string::npos) << describe(r.error());
  };
  auto bad = j;
  bad["trials"][2]["config"]["knobs"][0][1] = json{{"complex", 1}};
  expect_error(bad, "trials[2].config.knobs[0]: unknown knob value type 'complex'");
  bad = j;
  bad["trials"][0]["steps"][1][1] = "fast";
  expect_error(bad, "trials[0].steps[1]: expected a number, \"NaN\"");
  bad = j;
  bad["seed"] = -1;
  expect_error(bad, "seed: expected an unsigned integer");
  bad = j;
  bad.erase("run_id");
  expect_error(bad, "missing field 'run_id'");
  auto r = parse_run_state("{\"run_id\":");
  ASSERT_FALSE(r);
  EXPECT_NE(describe(r.error()).find("not valid JSON"), std::string::npos);
}

// Documents write a non-finite double as null (nlohmann::json): the fold must not throw on it.
TEST(RunProjection, ANullNumberInADocumentDoesNotBreakTheFold) {
  memory_event_log log;
  auto spec0 = spec(0, 0, "explore", 2, 1.0, false, {});
  ASSERT_TRUE(log.append(
    "r", 0,
    {new_event::of(wire::EventKind::TrialProposed, spec0),
     doc(wire::EventKind::TrialVerified, "verdict/1",
         json{{"trial_id", 0}, {"attempt", 0}, {"violations", json::array()},
              {"timed_step_time_s", nullptr}}),
     doc(wire::EventKind::CandidateReverified, "reverification/1",
         json{{"candidate_trial", 0}, {"baseline_times_s", {0.2, nullptr}},
              {"candidate_times_s", json::array()}, {"speedup", nullptr}, {"ci_low", 0.0},
              {"ci_high", std::numeric_limits<double>::infinity()}, {"dof", nullptr}}),
     doc(wire::EventKind::BaselineCalibrated, "doctor/1",
         json{{"noise", {{"runs", 1}, {"cv", nullptr}}},
              {"reference", {{{"step", 0}, {"loss", nullptr}}}}})}));
  auto s = load_run(log, "r");
  ASSERT_TRUE(s) << describe(s.error());
  EXPECT_EQ(s->trials[0].timed_step_time_s, 0.0);
  ASSERT_EQ(s->reverifications.size(), 1u);
  EXPECT_EQ(s->reverifications[0].estimate.ci_high, std::numeric_limits<double>::infinity());
  EXPECT_EQ(s->reverifications[0].estimate.speedup, 1.0);
  ASSERT_EQ(s->reverifications[0].baseline_times_s.size(), 2u);
  EXPECT_TRUE(std::isnan(s->reverifications[0].baseline_times_s[1]));
  EXPECT_EQ(s->noise->cv, 0.0);
  EXPECT_EQ(s->reference.loss.at(0), 0.0);
}

} // namespace
} // namespace infrarsi::store
