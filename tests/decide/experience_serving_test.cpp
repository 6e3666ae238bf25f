// Issue 16, parts 2 and 3: the structured hardware and workload identity of a run, the
// similarity rule and what the curator serves in each mode (decide/experience_serving.hpp), on
// the shipped simulator task files and on hand-made bank records.

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "adapters/task_file.hpp"
#include "decide/decisions.hpp"
#include "decide/experience_serving.hpp"
#include "messages/errc.hpp"
#include "store/run_projection.hpp"

namespace infrarsi {
namespace {

using decide::experience_mode;
using decide::hardware_match;
using nlohmann::json;

tuning::task_spec shipped(const std::string& name) {
  auto t = adapters::load_task_file(std::string{INFRARSI_SOURCE_DIR} + "/config/tasks/" + name
                                    + ".toml");
  if (!t)
    throw std::runtime_error{name + ": " + describe(t.error())};
  return std::move(*t);
}

json gpu(const std::string& model, std::uint64_t gib, std::uint32_t per_node = 8,
         std::uint32_t nodes = 1) {
  return {{"gpu", model},
          {"gpu_family", decide::gpu_family(model)},
          {"gpu_memory_bytes", gib << 30},
          {"gpus_per_node", per_node},
          {"nodes", nodes}};
}

TEST(ExperienceIdentity, GpuFamiliesByArchitectureGeneration) {
  EXPECT_EQ(decide::gpu_family("H100-80GB"), "hopper");
  EXPECT_EQ(decide::gpu_family("NVIDIA H200"), "hopper");
  EXPECT_EQ(decide::gpu_family("NVIDIA GH200 480GB"), "hopper");
  EXPECT_EQ(decide::gpu_family("A100-SXM4-40GB"), "ampere");
  EXPECT_EQ(decide::gpu_family("NVIDIA A10G"), "ampere");
  EXPECT_EQ(decide::gpu_family("NVIDIA L40S"), "ada");
  EXPECT_EQ(decide::gpu_family("NVIDIA B200"), "blackwell");
  EXPECT_EQ(decide::gpu_family("GB200"), "blackwell");
  EXPECT_EQ(decide::gpu_family("Tesla V100-SXM2-32GB"), "volta");
  EXPECT_EQ(decide::gpu_family("AMD Instinct MI300X"), "cdna3");
  // Unknown: a family of its own.
  EXPECT_EQ(decide::gpu_family("Gaudi2"), "gaudi2");
}

TEST(ExperienceIdentity, TheSimilarityRuleRanksModelThenFamilyAndMemoryClass) {
  auto h100 = gpu("H100-80GB", 80);
  EXPECT_EQ(decide::match_hardware(gpu("H100-80GB", 80), h100), hardware_match::same_model);
  // Same model at another scale: same family and memory, not the same hardware.
  EXPECT_EQ(decide::match_hardware(gpu("H100-80GB", 80, 8, 4), h100),
            hardware_match::same_family_memory);
  // H200: Hopper with 141 GB, less than twice 80 GB.
  EXPECT_EQ(decide::match_hardware(gpu("H200-141GB", 141), h100),
            hardware_match::same_family_memory);
  EXPECT_EQ(decide::match_hardware(h100, gpu("H200-141GB", 141)),
            hardware_match::same_family_memory);
  // A100-80GB: the same memory, another generation.
  EXPECT_EQ(decide::match_hardware(gpu("A100-80GB", 80), h100), hardware_match::other);
  // The same family, memories more than 2x apart.
  EXPECT_EQ(decide::match_hardware(gpu("H100-80GB", 80), gpu("H20-24GB", 24)),
            hardware_match::other);
  EXPECT_EQ(decide::match_hardware(gpu("A100-SXM4-40GB", 40), gpu("A100-SXM4-80GB", 80)),
            hardware_match::same_family_memory);
  EXPECT_STREQ(decide::to_string(hardware_match::same_family_memory),
               "same family and memory class");
}

TEST(ExperienceIdentity, SimulatorTasksFileTheirFindingsUnderTheSimulatedHardware) {
  json node = {{"cpu", "Some CPU"}, {"gpus", json::array()}};
  auto h100 = decide::hardware_identity(shipped("sim-dense9b-h100"), node);
  EXPECT_EQ(h100["gpu"], "H100-80GB");
  EXPECT_EQ(h100["gpu_family"], "hopper");
  EXPECT_EQ(h100["gpu_memory_bytes"], std::uint64_t{81559} << 20);
  EXPECT_EQ(h100["gpus_per_node"], 8u);
  EXPECT_EQ(h100["nodes"], 1u);
  EXPECT_EQ(h100["simulated"], true);
  EXPECT_EQ(h100["declared"], true);
  auto h200 = decide::hardware_identity(shipped("sim-dense9b-h200"), node);
  auto a100 = decide::hardware_identity(shipped("sim-dense9b-a100"), node);
  EXPECT_EQ(decide::match_hardware(h200, h100), hardware_match::same_family_memory);
  EXPECT_EQ(decide::match_hardware(a100, h100), hardware_match::other);
  auto multinode = decide::hardware_identity(shipped("sim-dense-multinode"), node);
  EXPECT_EQ(multinode["nodes"], 4u);
  // The fingerprint follows the declared hardware, not the machine running the simulator.
  auto other_node = json{{"cpu", "Another CPU"}, {"gpus", json::array({" NVIDIA A10G"})}};
  EXPECT_EQ(decide::run_hardware_fingerprint(shipped("sim-dense9b-h100"), node),
            decide::run_hardware_fingerprint(shipped("sim-dense9b-h100"), other_node));
  EXPECT_NE(decide::run_hardware_fingerprint(shipped("sim-dense9b-h100"), node),
            decide::run_hardware_fingerprint(shipped("sim-dense9b-h200"), node));
  EXPECT_EQ(decide::run_hardware_fingerprint(shipped("sim-dense9b-h100"), node).size(), 16u);
}

TEST(ExperienceIdentity, ATaskWithoutHardwareIsDescribedFromTheNode) {
  auto task = shipped("torch_gpt");
  ASSERT_FALSE(task.hardware.declared);
  auto with_gpus = decide::hardware_identity(
    task, json{{"cpu", "Xeon"}, {"gpus", json::array({" NVIDIA H100 80GB HBM3", " NVIDIA H100 "
                                                                                  "80GB HBM3"})}});
  EXPECT_EQ(with_gpus["gpu"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(with_gpus["gpu_family"], "hopper");
  EXPECT_EQ(with_gpus["gpus_per_node"], 2u);
  EXPECT_EQ(with_gpus["declared"], false);
  auto cpu_only = decide::hardware_identity(task, json{{"cpu", "Xeon"}, {"gpus", json::array()}});
  EXPECT_EQ(cpu_only["gpu"], "cpu:Xeon");
  EXPECT_EQ(cpu_only["gpus_per_node"], 1u);
}

TEST(ExperienceIdentity, TheWorkloadClassIsTheModelShapeAndTheParallelLayout) {
  auto h100 = decide::workload_identity(shipped("sim-dense9b-h100"));
  auto h200 = decide::workload_identity(shipped("sim-dense9b-h200"));
  auto a100 = decide::workload_identity(shipped("sim-dense9b-a100"));
  auto moe = decide::workload_identity(shipped("sim-moe-1node-a100"));
  auto llama = decide::workload_identity(shipped("sim-dense-1node"));
  EXPECT_EQ(h100["model"], "yi-9b");
  EXPECT_EQ(h100["architecture"], "dense");
  EXPECT_EQ(h100["shape"]["layers"], 48);
  EXPECT_EQ(h100["shape"]["seq_len"], 4096);
  EXPECT_EQ(h100["layout"], json::array({"pp", "tp"}));
  EXPECT_EQ(h100["class"], h200["class"]);
  EXPECT_EQ(h100["class"], a100["class"]);
  EXPECT_NE(h100["class"], moe["class"]);
  EXPECT_NE(h100["class"], llama["class"]);
  EXPECT_EQ(moe["architecture"], "moe");
  // Without [model]: only the same task name matches.
  auto plain = decide::workload_identity(shipped("torch_gpt"));
  EXPECT_EQ(plain["model"], "task:torch_gpt");
}

/// A bank record as the projection stores it.
json record(const json& hardware, const std::string& workload_class, double speedup,
            std::uint64_t position, int tp) {
  return {{"hardware", "fp-" + hardware["gpu"].get<std::string>()},
          {"workload", "sig"},
          {"hardware_identity", hardware},
          {"workload_identity", {{"class", workload_class}}},
          {"config", {{"knobs", {{"tp", tp}}}, {"patches", json::array()}}},
          {"speedup", speedup},
          {"ci_low", speedup - 0.1},
          {"run", "run-" + std::to_string(position)},
          {"position", position}};
}

decide::serving_request h100_request(experience_mode mode) {
  decide::serving_request r;
  r.hardware_identity = gpu("H100-80GB", 80);
  r.workload_identity = {{"class", "dense9b"}};
  r.hardware_fingerprint = "fp-H100-80GB";
  r.workload_signature = "sig-h100";
  r.mode = mode;
  return r;
}

std::vector<json> bank() {
  return {record(gpu("A100-80GB", 80), "dense9b", 1.9, 10, 1),  // other hardware, fastest
          record(gpu("H200-141GB", 141), "dense9b", 1.5, 20, 2), // same family and memory
          record(gpu("H100-80GB", 80), "dense9b", 1.2, 30, 4),   // the same model
          record(gpu("H100-80GB", 80), "moe16b", 2.5, 40, 8),    // another workload
          record(gpu("H200-141GB", 141), "dense9b", 1.4, 50, 2)}; // same configuration again
}

std::vector<int> tps(const json& pack) {
  std::vector<int> out;
  for (const auto& s : pack["seeds"])
    out.push_back(s["config"]["knobs"]["tp"].get<int>());
  return out;
}

TEST(ExperienceServing, FilteredServesTheSameWorkloadSimilarHardwareFirst) {
  auto pack = decide::experience_pack(bank(), h100_request(experience_mode::filtered));
  EXPECT_EQ(pack["mode"], "filtered");
  EXPECT_EQ(pack["serving"], "propose-or-explain/1");
  // H100 (same model) first, then H200 (same family), then A100 (other hardware, though its
  // verified speedup is the highest); the second H200 finding has the same configuration and is
  // served once; the MoE finding is another workload.
  EXPECT_EQ(tps(pack), (std::vector<int>{4, 2, 1}));
  EXPECT_EQ(pack["seeds"][0]["match"], "same GPU model");
  EXPECT_EQ(pack["seeds"][1]["match"], "same family and memory class");
  EXPECT_EQ(pack["seeds"][1]["origin_hardware"], "H200-141GB");
  EXPECT_EQ(pack["seeds"][1]["speedup"], 1.5);
  EXPECT_EQ(pack["seeds"][2]["match"], "other hardware");
  EXPECT_EQ(pack["not_served"]["other_workload"], 1u);
  EXPECT_EQ(pack["served_by_match"]["same GPU model"], 1u);
  EXPECT_EQ(pack["served_by_match"]["other hardware"], 1u);
  EXPECT_EQ(decide::experience_pack_text(pack),
            "3 seed(s) served (1 same GPU model, 1 same family and memory class, 1 other "
            "hardware); 1 finding(s) of other workloads not served");
}

// What a served finding's models learnt becomes the next run's priors: only from the same
// workload on the same GPU model or family, only for settings the task has, and the priors
// that were there before for the others.
TEST(ExperienceServing, TheBestMatchingFindingsEffectsBecomeTheRunsPriors) {
  auto task = shipped("sim-dense9b-h100");
  auto findings = bank();
  auto effects = [](double tp4, double flash) {
    return json::array({{{"feature", "tp=4"}, {"posterior_speedup", tp4},
                         {"posterior_log_sd", 0.05}, {"trials", 3}},
                        {{"feature", "+flash3_attention"}, {"posterior_speedup", flash},
                         {"posterior_log_sd", 0.02}, {"trials", 2}},
                        {{"feature", "no_such_knob=1"}, {"posterior_speedup", 9.0},
                         {"posterior_log_sd", 0.1}, {"trials", 1}}});
  };
  // The A100 finding (other hardware) and the H200 one (same family, served before it as a
  // seed) learnt something too: neither is used; only the same GPU model's effects are.
  findings[0]["effects"] = effects(0.5, 0.5);
  findings[1]["effects"] = effects(0.7, 0.7);
  findings[2]["effects"] = effects(1.25, 1.08);
  findings[2]["memory"] = {{"fitted", true},
                           {"prices", json::array({{{"feature", "tp=4"}, {"bytes", -2.0e9}}})}};
  auto pack = decide::experience_pack(findings, h100_request(experience_mode::filtered));
  ASSERT_TRUE(pack.contains("prior_adjustment")) << pack.dump();
  EXPECT_EQ(pack["prior_adjustment"]["run"], "run-30");
  EXPECT_EQ(pack["prior_adjustment"]["match"], "same GPU model");
  tuning::prior_set before;
  before.settings.push_back({"tp", tuning::knob_value{std::int64_t{4}}, 1.6, 0.0, "knowledge"});
  before.settings.push_back({"pp", tuning::knob_value{std::int64_t{2}}, 1.1, 0.0, "knowledge"});
  auto after = decide::experience_priors(task, before, pack);
  ASSERT_TRUE(after);
  const auto* tp4 = after->find("tp", tuning::knob_value{std::int64_t{4}});
  ASSERT_NE(tp4, nullptr);
  EXPECT_DOUBLE_EQ(tp4->speedup, 1.25);
  EXPECT_DOUBLE_EQ(tp4->memory_bytes, -2.0e9);
  EXPECT_EQ(tp4->source, "experience:run-30 (H100-80GB, same GPU model)");
  const auto* pp2 = after->find("pp", tuning::knob_value{std::int64_t{2}});
  ASSERT_NE(pp2, nullptr);
  EXPECT_DOUBLE_EQ(pp2->speedup, 1.1);
  EXPECT_EQ(pp2->source, "knowledge");
  const auto* flash = after->find_patch("flash3_attention");
  ASSERT_NE(flash, nullptr);
  EXPECT_DOUBLE_EQ(flash->speedup, 1.08);
  EXPECT_EQ(after->settings.size(), 2u) << "the unknown knob is skipped";
  // Applied twice: nothing changes the second time.
  EXPECT_FALSE(decide::experience_priors(task, *after, pack));
  // Only other hardware has effects: no adjustment, and the priors stay as they were.
  findings[2].erase("effects");
  auto other = decide::experience_pack(findings, h100_request(experience_mode::filtered));
  EXPECT_FALSE(other.contains("prior_adjustment")) << other.dump();
  EXPECT_FALSE(decide::experience_priors(task, before, other));
}

TEST(ExperienceServing, AllServesEveryFindingBySpeedupAndNoneServesNothing) {
  auto all = decide::experience_pack(bank(), h100_request(experience_mode::all));
  EXPECT_EQ(tps(all), (std::vector<int>{8, 1, 2, 4}));
  EXPECT_EQ(all["seeds"][0]["same_workload"], false);
  EXPECT_EQ(all["seeds"][1]["match"], "other hardware");
  EXPECT_EQ(all["not_served"]["other_workload"], 0u);
  auto none = decide::experience_pack(bank(), h100_request(experience_mode::none));
  EXPECT_TRUE(none["seeds"].empty());
  EXPECT_EQ(none["mode"], "none");
}

TEST(ExperienceServing, FindingsWithoutIdentityMatchOnlyTheExactKeys) {
  // A finding logged before the structured identity: its fingerprint and signature only.
  json old = {{"hardware", "fp-H100-80GB"},
              {"workload", "sig-h100"},
              {"config", {{"knobs", {{"tp", 8}}}}},
              {"speedup", 1.3},
              {"position", 5}};
  json elsewhere = old;
  elsewhere["hardware"] = "fp-other";
  json other_workload = old;
  other_workload["workload"] = "sig-other";
  auto pack = decide::experience_pack({elsewhere, old, other_workload},
                                      h100_request(experience_mode::filtered));
  ASSERT_EQ(pack["seeds"].size(), 1u); // `elsewhere` has old's configuration: served once
  EXPECT_EQ(pack["seeds"][0]["match"], "same GPU model");
  EXPECT_EQ(pack["seeds"][0]["position"], 5u);
  EXPECT_EQ(pack["not_served"]["other_workload"], 1u);
}

// A seed found on a GPU with more memory whose measured peak does not fit this run's GPU is not
// proposed, and the reason names both; one that fits is proposed.
TEST(ExperienceServing, ASeedWhosePeakMemoryExceedsThisGpuIsRefusedWithTheReason) {
  auto task = shipped("sim-dense9b-h100");
  store::run_state run;
  run.run_id = "r";
  run.contract_doc = json{{"memory_capacity_bytes", std::uint64_t{81559} << 20},
                          {"policy", "bayes_ei/2"}};
  run.experience_seeds_explained = true;
  auto fits = tuning::baseline_configuration(task);
  fits.knobs["micro_batch"] = std::int64_t{2};
  auto hungry = tuning::baseline_configuration(task);
  hungry.knobs["recompute"] = std::string{"none"};
  run.experience_seeds = {hungry, fits};
  run.experience_pack = {
    {"mode", "filtered"},
    {"seeds",
     {{{"origin_hardware", "H200-141GB"}, {"peak_memory_bytes", std::uint64_t{120} << 30}},
      {{"origin_hardware", "H200-141GB"}, {"peak_memory_bytes", std::uint64_t{60} << 30}}}}};
  auto plan = decide::experience_seed_plan(task, run, "bayes_ei/2");
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_FALSE(plan[0].propose);
  EXPECT_EQ(plan[0].reason, "its peak memory where it was found (H200-141GB: 120.0 GiB) exceeds "
                            "this run's memory capacity (79.6 GiB)");
  EXPECT_TRUE(plan[1].propose) << plan[1].reason;
  EXPECT_EQ(plan[1].reason, "");
}

// A finding of a run locked with identities carries them, the promoted configuration's peak
// memory and the search's failed settings with their class; one locked without them does not.
TEST(ExperienceRecord, CarriesIdentityPeakMemoryAndFailedSettings) {
  auto task = shipped("sim-dense9b-h100");
  store::run_state run;
  run.run_id = "r";
  auto winner = tuning::baseline_configuration(task);
  winner.knobs["micro_batch"] = std::int64_t{2};
  auto hungry = tuning::baseline_configuration(task);
  hungry.knobs["recompute"] = std::string{"none"};
  auto trial = [](std::uint64_t id, const tuning::configuration& c, tuning::trial_outcome o,
                  std::uint64_t peak) {
    tuning::trial_record t;
    t.trial_id = id;
    t.purpose = "explore";
    t.kind = tuning::purpose_kind::explore;
    t.config = c;
    t.finished = true;
    t.outcome = o;
    t.peak_memory_bytes = peak;
    return t;
  };
  run.trials = {trial(3, hungry, tuning::trial_outcome::oom, 0),
                trial(4, winner, tuning::trial_outcome::ok, std::uint64_t{70} << 30)};
  json promotion = {{"promoted", true},
                    {"config", store::to_json(winner)},
                    {"speedup", 1.2},
                    {"ci_low", 1.1},
                    {"ci_high", 1.3},
                    {"pairs", 3}};
  run.contract_doc = json{{"hardware_fingerprint", "fp"},
                          {"workload_signature", "sig"},
                          {"hardware_identity", gpu("H100-80GB", 80)},
                          {"workload_identity", {{"class", "c"}}}};
  auto doc = decide::experience_record_doc(task, run, promotion, 9);
  ASSERT_TRUE(doc);
  EXPECT_EQ((*doc)["hardware_identity"]["gpu"], "H100-80GB");
  EXPECT_EQ((*doc)["peak_memory_bytes"], std::uint64_t{70} << 30);
  ASSERT_EQ((*doc)["failed_settings"].size(), 1u) << doc->dump();
  EXPECT_EQ((*doc)["failed_settings"][0]["trial"], 3u);
  EXPECT_EQ((*doc)["failed_settings"][0]["outcome"], "oom");
  EXPECT_EQ((*doc)["failed_settings"][0]["config"], store::to_json(hungry));
  // Locked by a build before the identities: the record as it was (old logs replay unchanged).
  run.contract_doc = json{{"hardware_fingerprint", "fp"}, {"workload_signature", "sig"}};
  auto old = decide::experience_record_doc(task, run, promotion, 9);
  ASSERT_TRUE(old);
  EXPECT_FALSE(old->contains("hardware_identity"));
  EXPECT_FALSE(old->contains("peak_memory_bytes"));
  EXPECT_FALSE(old->contains("failed_settings"));
  EXPECT_FALSE(old->contains("effects"));
  EXPECT_FALSE(old->contains("memory"));
  // Locked with "experience_record" 2: what the models learnt too (here: too few trials for a
  // memory fit, which the record says).
  run.contract_doc = json{{"hardware_fingerprint", "fp"},
                          {"workload_signature", "sig"},
                          {"experience_record", 2}};
  auto learnt = decide::experience_record_doc(task, run, promotion, 9);
  ASSERT_TRUE(learnt);
  ASSERT_TRUE(learnt->contains("effects")) << learnt->dump();
  ASSERT_TRUE((*learnt)["effects"].is_array());
  for (const auto& e : (*learnt)["effects"])
    EXPECT_GT(e.value("trials", 0), 0) << e.dump();
  ASSERT_TRUE(learnt->contains("memory")) << learnt->dump();
  EXPECT_FALSE((*learnt)["memory"].contains("trials")) << "per-trial predictions stay in the report";
  EXPECT_TRUE((*learnt)["memory"].contains("fitted"));
}

TEST(ExperienceServing, ModesParseAndPrint) {
  EXPECT_EQ(decide::parse_experience_mode("filtered"), experience_mode::filtered);
  EXPECT_EQ(decide::parse_experience_mode("all"), experience_mode::all);
  EXPECT_EQ(decide::parse_experience_mode("none"), experience_mode::none);
  EXPECT_FALSE(decide::parse_experience_mode("Filtered"));
  EXPECT_FALSE(decide::parse_experience_mode(""));
}

} // namespace
} // namespace infrarsi
