// Tests for workloads/sim: the cluster simulator's models (memory by hand, OOM boundary,
// recomputation monotonicity), the noise and loss (same seed, same metrics), the kernels file
// and its patches, the oracle (each sim task's exhaustive optimum beats its reference), the
// command line, and real trials of the sim tasks through the launcher (ok, oom, launch_error).

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "adapters/trial_launcher.hpp"
#include "adapters/task_file.hpp"
#include "store/run_projection.hpp"
#include "test_util.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/expr.hpp"
#include "workloads/sim/cli.hpp"
#include "workloads/sim/enumerate.hpp"
#include "workloads/sim/kernels.hpp"
#include "workloads/sim/model.hpp"
#include "workloads/sim/run.hpp"

namespace infrarsi::sim {
namespace {

const std::string source_dir = INFRARSI_SOURCE_DIR;
const std::string sim_binary = INFRARSI_SIM_PATH;

const std::vector<std::string> sim_tasks = {
    "sim-dense-1node",  "sim-dense-multinode", "sim-moe-1node",   "sim-moe-multinode",
    "sim-dense9b-h100", "sim-dense9b-a100",    "sim-dense9b-h200"};

std::string task_path(const std::string& name) {
  return source_dir + "/config/tasks/" + name + ".toml";
}

tuning::task_spec load(const std::string& name) {
  auto task = adapters::load_task_file(task_path(name));
  if (!task)
    throw std::runtime_error(describe(task.error()));
  return std::move(*task);
}

sim_config llama8b() {
  sim_config c;
  c.hardware = "H100-80GB";
  c.gpus = 8;
  c.model = *find_model("llama3-8b");
  c.seq_len = 4096;
  c.global_batch = 256;
  return c;
}

// -- memory -----------------------------------------------------------------------------------

TEST(SimMemory, LayerActivationsMatchKorthikantiForGpt3) {
  // Korthikanti et al. 2022, sec. 4: a GPT-3 layer stores s*b*h*(34 + 5*a*s/h) bytes without
  // parallelism; sbh*(10 + 24/t + 5as/(ht)) with tensor parallelism; 34*sbh/t with sequence
  // parallelism and selective recomputation; 2*sbh (its input) with full recomputation.
  auto m = *find_model("gpt-175b"); // h 12288, a 96
  kernel_settings k;
  k.norm = norm_impl::fused;
  k.mlp_activation = activation_impl::fused;
  k.attention = attention_impl::fused_softmax;
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
  const double sbh = s * b * h;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, k, s, b, 1, false, recompute_mode::none),
                   sbh * (34 + 5 * a * s / h));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, k, s, b, 8, false, recompute_mode::none),
                   sbh * (10 + 24 / t + 5 * a * s / (h * t)));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, k, s, b, 8, true, recompute_mode::selective),
                   sbh * 34 / t);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, k, s, b, 8, false, recompute_mode::full), 2 * sbh);
  // Hand-computed: 2048 * 12288 * (34 + 5 * 96 * 2048 / 12288) = 25,165,824 * 114 = 2,868,903,936.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, k, s, b, 1, false, recompute_mode::none),
                   2'868'903'936.0);
}

TEST(SimMemory, ModelStatesMatchAHandComputedCase) {
  // Llama-3-8B, TP 1, PP 1, DP 8, ZeRO-1, full recomputation, micro-batch 1, sequence 4096.
  // Parameters (untied embeddings): 32 layers x (attention 4096*4096*(1 + 2*8/32) + 4096^2,
  // norms 2*4096, SwiGLU 3*4096*14336) + 2 * 128256*4096 + 4096 = 8,030,261,248.
  auto c = llama8b();
  c.parallel.distributed_optimizer = true;
  c.parallel.recompute = recompute_mode::full;
  auto t = compute_truth(c);
  ASSERT_TRUE(t.valid) << t.error;
  const double phi = 8'030'261'248.0;
  EXPECT_DOUBLE_EQ(t.params_total, phi);
  ASSERT_EQ(t.stages.size(), 1u);
  const auto& m = t.stages[0];
  EXPECT_DOUBLE_EQ(m.weights, 2 * phi);        // bf16 parameters
  EXPECT_DOUBLE_EQ(m.gradients, 4 * phi);      // fp32 main gradients
  EXPECT_DOUBLE_EQ(m.optimizer, 12 * phi / 8); // fp32 master + Adam m, v, sharded over DP 8
  // Full recomputation keeps each layer's input: 2 * s * b * h bytes x 32 layers.
  EXPECT_DOUBLE_EQ(m.activations, 2.0 * 4096 * 4096 * 32);
  // Without the distributed optimizer the whole 18 bytes per parameter stay on every GPU.
  c.parallel.distributed_optimizer = false;
  auto t2 = compute_truth(c);
  EXPECT_DOUBLE_EQ(t2.stages[0].weights + t2.stages[0].gradients + t2.stages[0].optimizer,
                   18 * phi);
}

TEST(SimMemory, OomExactlyAboveCapacity) {
  auto c = llama8b();
  c.parallel.tp = 2;
  c.parallel.recompute = recompute_mode::full;
  auto t = compute_truth(c);
  ASSERT_TRUE(t.valid);
  ASSERT_FALSE(t.oom);
  auto peak = static_cast<std::uint64_t>(t.peak_memory_bytes);
  c.memory_cap_bytes = peak;
  EXPECT_FALSE(compute_truth(c).oom) << "a peak equal to the capacity fits";
  c.memory_cap_bytes = peak - 1;
  auto over = compute_truth(c);
  EXPECT_TRUE(over.oom) << "one byte less does not";
  EXPECT_EQ(over.oom_rank, 0);
  // The real GPU: the same job with TP 1, ZeRO-1 and no recomputation does not fit in 80 GB...
  auto big = llama8b();
  big.parallel.tp = 1;
  big.parallel.distributed_optimizer = true;
  auto tb = compute_truth(big);
  EXPECT_TRUE(tb.oom);
  EXPECT_GT(tb.peak_memory_bytes, static_cast<double>(find_hardware("H100-80GB")->memory_bytes));
  // ... and fits in an H200's 141 GB.
  big.hardware = "H200-141GB";
  EXPECT_FALSE(compute_truth(big).oom);
}

TEST(SimMemory, OomIsReportedByTheProgramWithExitStatus86) {
  auto dir = source_dir + "/workloads/sim";
  auto c = llama8b();
  c.parallel.tp = 2;
  c.parallel.recompute = recompute_mode::full;
  std::string why;
  c.kernels = *load_kernels(dir + "/kernels.conf", why);
  auto peak = static_cast<std::uint64_t>(compute_truth(c).peak_memory_bytes);
  auto run = [&](std::uint64_t cap, std::string& out, std::string& err) {
    std::ostringstream o, e;
    int rc = run_program({"--tp", "2", "--recompute", "full", "--kernels", dir + "/kernels.conf",
                          "--memory-cap-bytes", std::to_string(cap), "--steps", "3"},
                         o, e);
    out = o.str();
    err = e.str();
    return rc;
  };
  std::string out, err;
  EXPECT_EQ(run(peak, out, err), 0) << err;
  EXPECT_NE(out.find("INFRARSI_METRICS {\"event\":\"final\""), std::string::npos) << out;
  EXPECT_EQ(run(peak - 1, out, err), exit_oom);
  EXPECT_EQ(out.find("INFRARSI_METRICS"), std::string::npos) << "no step before the OOM";
  auto line = err.substr(err.find("INFRARSI_OOM ") + 13);
  auto j = nlohmann::json::parse(line.substr(0, line.find('\n')));
  EXPECT_EQ(j["needed_bytes"].get<std::uint64_t>(), peak);
  EXPECT_EQ(j["available_bytes"].get<std::uint64_t>(), peak - 1);
  EXPECT_EQ(j["gpu"].get<int>(), 0);
}

// -- time ------------------------------------------------------------------------------------

TEST(SimTime, MoreRecomputationIsNeverFasterAndNeverUsesMoreMemory) {
  // All else equal, over a grid of models, GPUs, layouts, knobs and kernels.
  int checked = 0;
  for (const char* model : {"llama3-8b", "yi-9b", "deepseek-moe-16b", "mixtral-8x7b", "gpt-7.5b"})
    for (const char* gpu : {"A100-80GB", "H100-80GB"})
      for (int tp : {1, 2, 8})
        for (int pp : {1, 2, 4})
          for (int vpp : {1, 2})
            for (int mb : {1, 4})
              for (int sp = 0; sp < 2; ++sp)
                for (int dopt = 0; dopt < 2; ++dopt)
                  for (int ov = 0; ov < 2; ++ov)
                    for (int graphs = 0; graphs < 2; ++graphs)
                      for (auto attention : {attention_impl::eager, attention_impl::fused_softmax,
                                             attention_impl::flash2})
                        for (int fused = 0; fused < 2; ++fused) {
                          sim_config c;
                          c.hardware = gpu;
                          c.gpus = 32;
                          c.model = *find_model(model);
                          c.seq_len = 2048;
                          c.global_batch = 64;
                          c.parallel.tp = tp;
                          c.parallel.pp = pp;
                          c.parallel.vpp = vpp;
                          c.parallel.micro_batch = mb;
                          c.parallel.ep = c.model.moe() ? 2 : 1;
                          c.parallel.sequence_parallel = sp || (tp > 1 && c.model.moe());
                          c.parallel.distributed_optimizer = dopt;
                          c.parallel.overlap_grad_reduce = ov;
                          c.parallel.overlap_param_gather = ov && dopt;
                          c.parallel.cuda_graphs = graphs;
                          c.kernels.attention = attention;
                          if (fused)
                            c.kernels = optimized_kernels();
                          double prev_time = 0, prev_mem = 1e300;
                          for (auto mode : {recompute_mode::none, recompute_mode::selective,
                                            recompute_mode::full}) {
                            c.parallel.recompute = mode;
                            auto t = compute_truth(c);
                            if (!t.valid)
                              break;
                            EXPECT_GE(t.step_time_s, prev_time)
                                << model << " " << gpu << " tp " << tp << " pp " << pp << " vpp "
                                << vpp << " mb " << mb << " recompute " << to_string(mode);
                            EXPECT_LE(t.peak_memory_bytes, prev_mem * (1 + 1e-12))
                                << model << " " << gpu << " tp " << tp << " pp " << pp
                                << " recompute " << to_string(mode);
                            prev_time = t.step_time_s;
                            prev_mem = t.peak_memory_bytes;
                            ++checked;
                          }
                        }
  EXPECT_GT(checked, 10000);
}

TEST(SimTime, PhasesAddUpAndPipelineBubbleFollowsNarayanan) {
  auto c = llama8b();
  c.gpus = 32;
  c.parallel.tp = 2;
  c.parallel.pp = 4;
  c.parallel.micro_batch = 1;
  c.global_batch = 64; // DP 4: 16 micro-batches per step
  auto t1 = compute_truth(c);
  ASSERT_TRUE(t1.valid) << t1.error;
  EXPECT_NEAR(t1.phases.total(), t1.step_time_s, 1e-12);
  EXPECT_EQ(t1.lay.num_microbatches, 16);
  // Interleaving with v = 2 halves the bubble (p-1)/(v m) (same stage times).
  c.parallel.vpp = 2;
  auto t2 = compute_truth(c);
  ASSERT_TRUE(t2.valid) << t2.error;
  EXPECT_NEAR(t2.phases.bubble_s, t1.phases.bubble_s / 2, 1e-9);
  // The bubble relative to the steady state is about (p-1)/m = 3/16 (stages differ a little:
  // the last one also runs the output layer).
  double ratio = t1.phases.bubble_s / (t1.phases.forward_s + t1.phases.backward_s);
  EXPECT_NEAR(ratio, 3.0 / 16, 0.03);
}

TEST(SimTime, PatchesHaveTheirDocumentedEffects) {
  auto c = llama8b();
  c.parallel.tp = 2;
  c.parallel.recompute = recompute_mode::selective;
  auto base = compute_truth(c);
  auto with = [&](auto edit) {
    auto d = c;
    edit(d.kernels);
    return compute_truth(d);
  };
  auto norm = with([](kernel_settings& k) { k.norm = norm_impl::fused; });
  auto swiglu = with([](kernel_settings& k) { k.mlp_activation = activation_impl::fused; });
  auto rope = with([](kernel_settings& k) { k.rope = rope_impl::fused; });
  auto fa3 = with([](kernel_settings& k) { k.attention = attention_impl::flash3; });
  for (const auto* t : {&norm, &swiglu, &rope, &fa3})
    EXPECT_LT(t->step_time_s, base.step_time_s);
  // Memory: fused norm and SwiGLU keep less; RoPE and FlashAttention-3 do not change memory.
  EXPECT_LT(norm.peak_memory_bytes, base.peak_memory_bytes);
  EXPECT_LT(swiglu.peak_memory_bytes, base.peak_memory_bytes);
  EXPECT_DOUBLE_EQ(rope.peak_memory_bytes, base.peak_memory_bytes);
  EXPECT_DOUBLE_EQ(fa3.peak_memory_bytes, base.peak_memory_bytes);
  // The cheat does less work (faster) for the same reported tokens; the drift patch keeps the
  // work and changes the contract.
  auto cheat = with([](kernel_settings& k) { k.data_loader = data_loader_impl::fast; });
  EXPECT_LT(cheat.step_time_s, 0.7 * base.step_time_s);
  EXPECT_EQ(cheat.tokens_per_step, base.tokens_per_step);
  EXPECT_EQ(cheat.contract, contract_kind::less_work);
  auto drift = with([](kernel_settings& k) { k.optimizer_states = optimizer_state_impl::bf16; });
  EXPECT_EQ(drift.contract, contract_kind::loss_drift);
  EXPECT_LT(drift.peak_memory_bytes, base.peak_memory_bytes);
  // FlashAttention-3 does not exist on an A100: no effect, and a warning.
  c.hardware = "A100-80GB";
  auto a100 = compute_truth(c);
  c.kernels.attention = attention_impl::flash3;
  auto a100_fa3 = compute_truth(c);
  EXPECT_DOUBLE_EQ(a100_fa3.step_time_s, a100.step_time_s);
  EXPECT_TRUE(a100_fa3.flash3_fallback);
  EXPECT_FALSE(a100_fa3.lay.warnings.empty());
  // Grouped GEMM speeds up a fine-grained MoE; it does nothing for a dense model.
  sim_config moe;
  moe.model = *find_model("deepseek-moe-16b");
  moe.parallel.ep = 8;
  moe.parallel.recompute = recompute_mode::full;
  auto loop = compute_truth(moe);
  moe.kernels.moe_gemm = moe_gemm_impl::grouped;
  auto grouped = compute_truth(moe);
  EXPECT_LT(grouped.step_time_s, 0.9 * loop.step_time_s);
  auto dense = llama8b();
  dense.parallel.tp = 2;
  dense.parallel.recompute = recompute_mode::full;
  auto d1 = compute_truth(dense);
  dense.kernels.moe_gemm = moe_gemm_impl::grouped;
  EXPECT_DOUBLE_EQ(compute_truth(dense).step_time_s, d1.step_time_s);
}

TEST(SimLayout, InvalidLayoutsNameTheConstraint) {
  struct bad {
    std::function<void(sim_config&)> edit;
    std::string needle;
  };
  std::vector<bad> cases = {
      {[](sim_config& c) { c.parallel.tp = 3; }, "TP x PP = 3 x 1 = 3 does not divide the 8 GPUs"},
      {[](sim_config& c) {
         c.model = *find_model("yi-9b");
         c.parallel.tp = 8;
       },
       "does not divide the 4 query groups"},
      {[](sim_config& c) {
         c.parallel.pp = 8;
         c.model.layers = 36;
       },
       "does not divide the 36 layers"},
      {[](sim_config& c) { c.parallel.vpp = 2; }, "need pipeline parallel size > 1"},
      {[](sim_config& c) {
         c.global_batch = 12;
         c.parallel.micro_batch = 2;
       },
       "global batch 12 is not a multiple of micro-batch x DP = 2 x 8"},
      {[](sim_config& c) { c.parallel.ep = 2; }, "needs a mixture-of-experts model"},
      {[](sim_config& c) { c.parallel.overlap_param_gather = true; },
       "requires --distributed-optimizer"},
      {[](sim_config& c) {
         c.model = *find_model("mixtral-8x7b");
         c.parallel.tp = 2;
         c.parallel.ep = 2;
       },
       "requires sequence parallelism"},
      {[](sim_config& c) {
         c.model = *find_model("mixtral-8x7b");
         c.parallel.ep = 16;
         c.gpus = 16;
       },
       "does not divide the 8 experts"},
      {[](sim_config& c) { c.gpus = 12; }, "not a whole number of 8-GPU nodes"},
  };
  for (const auto& bc : cases) {
    auto c = llama8b();
    bc.edit(c);
    auto t = compute_truth(c);
    EXPECT_FALSE(t.valid) << bc.needle;
    EXPECT_NE(t.error.find(bc.needle), std::string::npos) << t.error;
  }
  // The program exits 2 at once, before any metrics.
  std::ostringstream o, e;
  EXPECT_EQ(
      run_program({"--tp", "3", "--kernels", source_dir + "/workloads/sim/kernels.conf"}, o, e),
      exit_usage);
  EXPECT_EQ(o.str().find("INFRARSI_METRICS"), std::string::npos);
  EXPECT_NE(e.str().find("invalid parallel layout"), std::string::npos) << e.str();
}

// -- noise and loss ---------------------------------------------------------------------------

TEST(SimRun, SameSeedSameMetricsAndNoiseOnlyInTime) {
  auto c = llama8b();
  c.parallel.tp = 2;
  c.parallel.recompute = recompute_mode::full;
  auto t = compute_truth(c);
  run_options o;
  o.seed = 7;
  o.launch_id = 42;
  o.steps = 12;
  auto a = simulate_run(c, t, o);
  auto b = simulate_run(c, t, o);
  ASSERT_EQ(a.size(), 13u);
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].dump(), b[i].dump());
  // Another launch: other step times, the same losses and tokens.
  auto o2 = o;
  o2.launch_id = 43;
  auto c2 = simulate_run(c, t, o2);
  int differ = 0;
  for (int i = 0; i < 12; ++i) {
    differ += a[static_cast<std::size_t>(i)]["step_time_s"] !=
              c2[static_cast<std::size_t>(i)]["step_time_s"];
    EXPECT_EQ(a[static_cast<std::size_t>(i)]["loss"], c2[static_cast<std::size_t>(i)]["loss"]);
    EXPECT_EQ(a[static_cast<std::size_t>(i)]["tokens"], c2[static_cast<std::size_t>(i)]["tokens"]);
  }
  EXPECT_EQ(differ, 12);
  // Warm-up steps are marked and slower; the phases add up to the step time.
  EXPECT_TRUE(a[0]["warmup"].get<bool>());
  EXPECT_TRUE(a[1]["warmup"].get<bool>());
  EXPECT_FALSE(a[2]["warmup"].get<bool>());
  for (int i = 0; i < 12; ++i) {
    const auto& s = a[static_cast<std::size_t>(i)];
    double sum = s["data_s"].get<double>() + s["forward_s"].get<double>() +
                 s["backward_s"].get<double>() + s["optimizer_s"].get<double>() +
                 s["communication_s"].get<double>() + s["bubble_s"].get<double>();
    EXPECT_NEAR(sum, s["step_time_s"].get<double>(), 1e-9 * sum);
  }
  // Without noise the timed steps equal the truth.
  o.noise = false;
  auto quiet = simulate_run(c, t, o);
  EXPECT_DOUBLE_EQ(quiet[5]["step_time_s"].get<double>(), t.step_time_s);
  EXPECT_EQ(quiet.back()["event"], "final");
  EXPECT_EQ(quiet.back()["tokens_total"].get<std::uint64_t>(), 12u * 256u * 4096u);
  EXPECT_TRUE(quiet.back()["simulated"].get<bool>());
}

TEST(SimRun, NoiseHasTheClusterCoefficientOfVariation) {
  auto c = llama8b();
  c.parallel.tp = 2;
  c.parallel.recompute = recompute_mode::full;
  auto t = compute_truth(c);
  run_options o;
  o.steps = 4000;
  o.warmup_steps = 0;
  auto lines = simulate_run(c, t, o);
  std::vector<double> logs;
  for (int i = 0; i < o.steps; ++i)
    logs.push_back(std::log(lines[static_cast<std::size_t>(i)]["step_time_s"].get<double>()));
  std::sort(logs.begin(), logs.end());
  // Robust spread (stragglers are rare outliers): the interquartile range of a normal is
  // 1.349 sigma.
  double iqr = logs[3 * logs.size() / 4] - logs[logs.size() / 4];
  EXPECT_NEAR(iqr / 1.349, find_hardware("H100-80GB")->step_cv, 0.0015);
}

TEST(SimRun, LossIsReproducedByWorkPreservingConfigurationsAndChangedByDriftAndCheat) {
  auto c = llama8b();
  c.parallel.tp = 2;
  c.parallel.recompute = recompute_mode::full;
  auto ref = compute_truth(c);
  auto other = c;
  other.parallel.tp = 1;
  other.parallel.distributed_optimizer = true;
  other.parallel.micro_batch = 2;
  other.kernels = optimized_kernels();
  auto t_other = compute_truth(other);
  auto drift = c;
  drift.kernels.optimizer_states = optimizer_state_impl::bf16;
  auto t_drift = compute_truth(drift);
  auto cheat = c;
  cheat.kernels.data_loader = data_loader_impl::fast;
  auto t_cheat = compute_truth(cheat);
  for (int step = 0; step < 10; ++step) {
    double l = synthetic_loss(c, ref, step);
    EXPECT_GT(l, 2.0);
    EXPECT_LT(l, std::log(128256.0) + 0.1);
    EXPECT_NEAR(synthetic_loss(other, t_other, step) / l, 1.0, 2e-3) << step;
    if (step >= 4) {
      EXPECT_GT(synthetic_loss(drift, t_drift, step) / l, 1.02) << step;
      EXPECT_GT(synthetic_loss(cheat, t_cheat, step) / l, 1.02) << step;
    }
  }
  // Decreasing trend.
  EXPECT_LT(synthetic_loss(c, ref, 9), synthetic_loss(c, ref, 0) - 1.0);
}

// -- kernels file and patches -----------------------------------------------------------------

TEST(SimKernels, ShippedFileParsesAndEveryPatchAppliesAloneAndTogether) {
  auto dir = source_dir + "/workloads/sim";
  std::string text, why;
  ASSERT_TRUE(read_text_file(dir + "/kernels.conf", text));
  auto base = parse_kernels(text, "kernels.conf", why);
  ASSERT_TRUE(base) << why;
  EXPECT_EQ(*base, kernel_settings{});
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator{dir + "/patches"})
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 7u);
  std::string all = text;
  for (const auto& n : names) {
    std::string diff;
    ASSERT_TRUE(read_text_file(dir + "/patches/" + n, diff));
    auto one = apply_unified_diff(text, diff, why);
    ASSERT_TRUE(one) << n << ": " << why;
    auto k = parse_kernels(*one, n, why);
    ASSERT_TRUE(k) << why;
    EXPECT_NE(*k, *base) << n << " changes nothing";
    auto next = apply_unified_diff(all, diff, why);
    ASSERT_TRUE(next) << n << " does not compose: " << why;
    all = *next;
    // Applying twice fails, as git apply would.
    EXPECT_FALSE(apply_unified_diff(*one, diff, why)) << n;
  }
  auto k = parse_kernels(all, "all", why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(k->norm, norm_impl::fused);
  EXPECT_EQ(k->mlp_activation, activation_impl::fused);
  EXPECT_EQ(k->rope, rope_impl::fused);
  EXPECT_EQ(k->attention, attention_impl::flash3);
  EXPECT_EQ(k->moe_gemm, moe_gemm_impl::grouped);
  EXPECT_EQ(k->optimizer_states, optimizer_state_impl::bf16);
  EXPECT_EQ(k->data_loader, data_loader_impl::fast);
}

TEST(SimKernels, BadFilesAreRejectedWithFileAndLine) {
  std::string why;
  EXPECT_FALSE(parse_kernels("norm = eager\nnorm = fused\n", "k.conf", why));
  EXPECT_NE(why.find("k.conf:2: key 'norm' given twice"), std::string::npos) << why;
  EXPECT_FALSE(parse_kernels("# c\nattention = flash9\n", "k.conf", why));
  EXPECT_NE(why.find("k.conf:2: attention: expected one of eager, fused_softmax, flash2, flash3"),
            std::string::npos)
      << why;
  EXPECT_FALSE(parse_kernels("speed = max\n", "k.conf", why));
  EXPECT_NE(why.find("unknown key 'speed'"), std::string::npos) << why;
  std::ostringstream o, e;
  EXPECT_EQ(run_program({"--kernels", "/nonexistent/kernels.conf"}, o, e), exit_usage);
  EXPECT_NE(e.str().find("cannot read kernels file"), std::string::npos);
}

// -- the oracle -------------------------------------------------------------------------------

class SimTaskOptimum : public ::testing::TestWithParam<std::string> {};

TEST_P(SimTaskOptimum, ExhaustiveOptimumBeatsTheReference) {
  auto task = load(GetParam());
  enumeration_summary s;
  std::string why;
  ASSERT_TRUE(enumerate_task(task, patch_scope::legit, {}, s, why)) << why;
  ASSERT_TRUE(s.baseline);
  ASSERT_TRUE(s.optimum);
  EXPECT_TRUE(s.baseline->valid) << s.baseline->error;
  EXPECT_FALSE(s.baseline->oom) << "the reference configuration must run";
  EXPECT_EQ(s.baseline->contract, contract_kind::ok);
  EXPECT_TRUE(s.optimum->knobs != s.baseline->knobs || s.optimum->patches != s.baseline->patches);
  double speedup = s.baseline->step_time_s / s.optimum->step_time_s;
  EXPECT_GT(speedup, 1.3) << GetParam();
  EXPECT_LT(speedup, 4.0) << GetParam();
  // The space has every kind of trial: valid, out-of-memory and invalid layouts.
  EXPECT_GT(s.valid, 0u);
  EXPECT_GT(s.oom, 0u);
  EXPECT_GT(s.invalid, 0u);
  EXPECT_EQ(s.valid + s.invalid, s.configurations);
  // The task's constraints hold exactly for the layouts the simulator accepts, so the search
  // loses no valid configuration and never launches an invalid one.
  std::vector<tuning::constraint_expr> constraints;
  for (const auto& text : task.constraints) {
    auto e = tuning::constraint_expr::parse(text, why);
    ASSERT_TRUE(e) << why;
    constraints.push_back(*e);
  }
  ASSERT_FALSE(constraints.empty());
  enumeration_summary layouts;
  std::uint64_t disagreements = 0;
  ASSERT_TRUE(enumerate_task(
      task, patch_scope::none,
      [&](const enumerated_config& c) {
        auto vars = task.constants;
        for (const auto& [k, v] : c.knobs)
          vars[k] = v;
        bool holds = tuning::first_violation(constraints, vars).empty();
        if (holds != c.valid && ++disagreements <= 3)
          ADD_FAILURE() << (c.valid ? "valid layout excluded by " : "invalid layout allowed: ")
                        << tuning::first_violation(constraints, vars) << c.error;
      },
      layouts, why))
      << why;
  EXPECT_EQ(disagreements, 0u);
  // The optimum as the program would run it: the same truth.
  auto kernels = patched_kernels(task, s.optimum->patches, why);
  ASSERT_TRUE(kernels) << why;
  auto cfg = task_config(task, s.optimum->knobs, *kernels, why);
  ASSERT_TRUE(cfg) << why;
  EXPECT_DOUBLE_EQ(compute_truth(*cfg).step_time_s, s.optimum->step_time_s);
  std::cout << "[ sim     ] " << GetParam() << ": reference " << s.baseline->step_time_s
            << " s, optimum " << s.optimum->step_time_s << " s, speedup " << speedup << "\n";
}

INSTANTIATE_TEST_SUITE_P(AllSimTasks, SimTaskOptimum, ::testing::ValuesIn(sim_tasks),
                         [](const auto& param_info) {
                           auto n = param_info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(SimTasks, CrossHardwareTasksDifferOnlyInTheGpu) {
  auto h100 = load("sim-dense9b-h100");
  auto a100 = load("sim-dense9b-a100");
  auto h200 = load("sim-dense9b-h200");
  auto without_gpu = [](tuning::task_spec t) {
    for (auto& a : t.workload.argv)
      if (a == "H100-80GB" || a == "A100-80GB" || a == "H200-141GB")
        a = "GPU";
    return t.workload.argv;
  };
  EXPECT_EQ(without_gpu(h100), without_gpu(a100));
  EXPECT_EQ(without_gpu(h100), without_gpu(h200));
  EXPECT_EQ(h100.knobs.size(), a100.knobs.size());
  EXPECT_EQ(h100.patches.size(), h200.patches.size());
}

TEST(SimCli, EnumeratePrintsASummaryWithTheOptimum) {
  std::ostringstream o, e;
  ASSERT_EQ(
      run_program({"--enumerate", "--task", task_path("sim-dense9b-h200"), "--top", "3"}, o, e), 0)
      << e.str();
  std::istringstream lines{o.str()};
  std::vector<nlohmann::json> js;
  for (std::string l; std::getline(lines, l);)
    js.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(js.size(), 4u);
  EXPECT_LE(js[0]["step_time_s"].get<double>(), js[1]["step_time_s"].get<double>());
  EXPECT_EQ(js[3]["event"], "summary");
  EXPECT_DOUBLE_EQ(js[3]["optimum"]["step_time_s"].get<double>(),
                   js[0]["step_time_s"].get<double>());
  EXPECT_GT(js[3]["speedup"].get<double>(), 1.0);
}

TEST(SimCli, TruthPrintsNoiseFreeTimeAndMemory) {
  std::ostringstream o, e;
  ASSERT_EQ(run_program({"--truth", "--tp", "2", "--recompute", "full", "--kernels",
                         source_dir + "/workloads/sim/kernels.conf"},
                        o, e),
            0)
      << e.str();
  auto j = nlohmann::json::parse(o.str());
  auto c = llama8b();
  c.parallel.tp = 2;
  c.parallel.recompute = recompute_mode::full;
  auto t = compute_truth(c);
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), t.step_time_s);
  EXPECT_EQ(j["peak_memory_bytes"].get<std::uint64_t>(),
            static_cast<std::uint64_t>(t.peak_memory_bytes));
  EXPECT_FALSE(j["oom"].get<bool>());
}

// -- real trials through the launcher ---------------------------------------------------------

class SimTrial : public ::testing::Test {
protected:
  test::temp_dir dir;
  int trial = 0;

  /// The task with argv[0] pointing at this build's binary (the link in workloads/sim/.bin may
  /// point at another build tree).
  static tuning::task_spec task(const std::string& name) {
    auto t = load(name);
    t.workload.argv[0] = sim_binary;
    return t;
  }

  adapters::trial_report run(const tuning::task_spec& t, tuning::knob_assignment knobs = {},
                             std::vector<std::string> patches = {}) {
    adapters::trial_request req;
    req.task = &t;
    req.knobs = std::move(knobs);
    req.patches = std::move(patches);
    req.trial_id = static_cast<std::uint64_t>(++trial);
    req.trial_dir = dir.sub("trial-" + std::to_string(trial));
    auto rep = adapters::run_trial(req);
    if (!rep)
      throw std::runtime_error(describe(rep.error()));
    return std::move(*rep);
  }
};

TEST_F(SimTrial, ReferenceTrialOfEachTaskIsOkWithSimulatedSteps) {
  for (const auto& name : sim_tasks) {
    auto t = task(name);
    auto rep = run(t);
    const auto* r = rep.result.get();
    ASSERT_EQ(r->outcome(), wire::Outcome::Ok) << name << ": " << r->detail()->str();
    ASSERT_EQ(r->steps()->size(), 10u) << name;
    std::string why;
    auto cfg = task_config(t, {}, kernel_settings{}, why);
    ASSERT_TRUE(cfg) << why;
    auto truth = compute_truth(*cfg);
    const auto* s = r->steps()->Get(5);
    EXPECT_EQ(s->tokens(), truth.tokens_per_step) << name;
    // Simulated seconds, not wall seconds: within the noise of the truth.
    EXPECT_NEAR(s->step_time_s() / truth.step_time_s, 1.0, 0.25) << name;
    EXPECT_TRUE(s->forward_s().has_value());
    EXPECT_EQ(r->peak_memory_bytes(), static_cast<std::uint64_t>(truth.peak_memory_bytes));
    EXPECT_LT(r->wall_time_s(), 2.0) << name << ": a simulated trial takes milliseconds";
  }
}

TEST_F(SimTrial, TheTaskFileRunsAsWrittenThroughTheLinkInTheWorkdir) {
  auto t = load("sim-dense-1node");
  ASSERT_EQ(t.workload.argv[0], ".bin/infrarsi-sim");
  ASSERT_TRUE(std::filesystem::exists(t.workload.workdir + "/.bin/infrarsi-sim"))
      << "built by the infrarsi-sim target";
  auto rep = run(t, {}, {"fused_rmsnorm", "flash3_attention"});
  EXPECT_EQ(rep.result->outcome(), wire::Outcome::Ok) << rep.result->detail()->str();
  EXPECT_EQ(rep.result->steps()->size(), 10u);
}

TEST_F(SimTrial, PatchesAreAppliedWithGitApplyAndChangeTheSimulatedJob) {
  auto t = task("sim-moe-1node");
  auto base = run(t);
  ASSERT_EQ(base.result->outcome(), wire::Outcome::Ok) << base.result->detail()->str();
  auto patched = run(
      t, {}, {"fused_rmsnorm", "fused_swiglu", "fused_rope", "flash3_attention", "grouped_gemm"});
  ASSERT_EQ(patched.result->outcome(), wire::Outcome::Ok) << patched.result->detail()->str();
  EXPECT_NE(patched.workdir, base.workdir);
  auto median = [](const adapters::trial_report& r) { // steps 2.. (the first two warm up)
    std::vector<double> v;
    for (const auto* s : *r.result->steps())
      if (s->step() >= 2)
        v.push_back(s->step_time_s());
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  EXPECT_LT(median(patched), 0.8 * median(base));
  // Same work, same loss (within numerical noise).
  for (std::size_t i = 0; i < 10; ++i)
    EXPECT_NEAR(patched.result->steps()->Get(static_cast<unsigned>(i))->loss() /
                    base.result->steps()->Get(static_cast<unsigned>(i))->loss(),
                1.0, 2e-3);
  // The cheat reports the same tokens, runs faster, and its loss trajectory is off.
  auto cheat = run(t, {}, {"fast_dataloader"});
  ASSERT_EQ(cheat.result->outcome(), wire::Outcome::Ok);
  EXPECT_EQ(cheat.result->steps()->Get(9)->tokens(), base.result->steps()->Get(9)->tokens());
  EXPECT_LT(median(cheat), 0.8 * median(base));
  EXPECT_GT(cheat.result->steps()->Get(9)->loss() / base.result->steps()->Get(9)->loss(), 1.02);
}

TEST_F(SimTrial, OutOfMemoryIsClassifiedOom) {
  auto t = task("sim-dense-1node");
  auto rep = run(t, {{"tp", std::int64_t{1}}, {"recompute", std::string{"none"}}});
  EXPECT_EQ(rep.result->outcome(), wire::Outcome::Oom) << rep.result->detail()->str();
  EXPECT_EQ(rep.result->exit_code(), 86);
  EXPECT_TRUE(rep.result->steps() == nullptr || rep.result->steps()->size() == 0u);
  EXPECT_NE(rep.result->detail()->str().find("INFRARSI_OOM"), std::string::npos)
      << rep.result->detail()->str();
}

TEST_F(SimTrial, InvalidLayoutIsRefusedBeforeLaunchOrByTheSimulator) {
  auto t = task("sim-dense9b-h100");
  // The task declares Megatron's layout rules as constraints: the node-runner never launches a
  // layout that breaks one, and names the rule and the values.
  auto refused = run(t, {{"tp", std::int64_t{8}}}); // Yi-9B has 4 query groups
  EXPECT_EQ(refused.result->outcome(), wire::Outcome::ContractViolation);
  EXPECT_EQ(refused.result->detail()->str(),
            "constraint: 'heads % tp == 0 && kv_heads % tp == 0 && ffn % tp == 0' is false for "
            "ffn=11008, heads=32, kv_heads=4, tp=8");
  // Without them, the simulator itself refuses the layout: exit status 2, a launch error.
  t.constraints.clear();
  auto rep = run(t, {{"tp", std::int64_t{8}}});
  EXPECT_EQ(rep.result->outcome(), wire::Outcome::LaunchError) << rep.result->detail()->str();
  EXPECT_EQ(rep.result->exit_code(), 2);
  auto rep2 = run(t, {{"vpp", std::int64_t{2}}}); // interleaving without a pipeline
  EXPECT_EQ(rep2.result->outcome(), wire::Outcome::LaunchError);
}


// -- what a simulated trial costs, and what its smoke probe can judge ---------------------------

/// The simulator's price of one launch from its final line: simulated_wall_s (a start-up of
/// 30 s + 2e-8 s per parameter on a GPU, plus the steps) and device_seconds (that x the GPUs).
struct simulated_price {
  double wall_s = 0;
  double device_s = 0;
  double steps_s = 0; // the step times the launch reported, summed
};

simulated_price price_of(const wire::TrialResult& r) {
  simulated_price p;
  if (r.final_report() == nullptr || r.final_report()->size() == 0)
    throw std::runtime_error("no final line");
  auto fin = nlohmann::json::parse(r.final_report()->str());
  p.wall_s = fin.at("simulated_wall_s").get<double>();
  p.device_s = fin.at("device_seconds").get<double>();
  if (r.steps() != nullptr)
    for (const auto* s : *r.steps())
      p.steps_s += s->step_time_s();
  return p;
}

TEST_F(SimTrial, ASimulatedTrialIsChargedTheSimulatorsDeviceSecondsNotTheHostsWallTime) {
  for (const std::string name : {"sim-dense-1node", "sim-dense-multinode"}) {
    auto t = task(name);
    const double gpus = std::stod(t.workload.world_size);
    auto rep = run(t);
    const auto* r = rep.result.get();
    ASSERT_EQ(r->outcome(), wire::Outcome::Ok) << name << ": " << r->detail()->str();
    const auto p = price_of(*r);
    EXPECT_DOUBLE_EQ(r->device_seconds(), p.device_s) << name;
    EXPECT_NEAR(r->device_seconds(), gpus * p.wall_s, 1e-9 * r->device_seconds()) << name;
    // The simulated wall time is the start-up (at least 30 s) plus the 10 steps it reported.
    EXPECT_GE(p.wall_s - p.steps_s, 30.0 - 1e-9) << name;
    EXPECT_LT(p.wall_s - p.steps_s, 60.0) << name;
    // The same launch read as wall-clock time (simulated_time off) is the host's wall time x GPUs.
    t.contract.simulated_time = false;
    auto host = run(t);
    ASSERT_EQ(host.result->outcome(), wire::Outcome::Ok) << host.result->detail()->str();
    EXPECT_DOUBLE_EQ(host.result->device_seconds(), gpus * host.result->wall_time_s()) << name;
    EXPECT_LT(host.result->device_seconds(), 0.05 * r->device_seconds()) << name;
    std::cout << name << ": " << gpus << " GPUs; host wall " << r->wall_time_s()
              << " s; charged " << r->device_seconds() << " device-seconds (the simulator's: "
              << p.wall_s << " simulated s x " << gpus << "); read as wall-clock time: "
              << host.result->device_seconds() << "\n";
  }
}

/// Each shipped sim task's [smoke] launch falls: its unpatched run judges numerics (not vacuous),
/// and it costs the simulator's price of one GPU.
TEST_F(SimTrial, EveryShippedSmokeLaunchFallsAndIsChargedItsSimulatedPrice) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator{source_dir + "/config/tasks"})
    if (e.path().filename().string().rfind("sim-", 0) == 0 && e.path().extension() == ".toml")
      names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), sim_tasks.size());
  for (const auto& name : names) {
    auto t = task(name);
    ASSERT_TRUE(t.smoke) << name;
    auto small = tuning::smoke_task(t);
    small.workload.argv[0] = sim_binary;
    adapters::trial_request req;
    req.task = &small;
    req.trial_dir = dir.sub("smoke-" + name);
    req.trial_id = 1;
    auto rep = adapters::run_trial(req);
    ASSERT_TRUE(rep) << describe(rep.error());
    tuning::trial_record rec;
    store::apply_result(rec, *rep->result);
    EXPECT_FALSE(tuning::smoke_reference_problem(small.contract, rec)) << name;
    auto why = tuning::smoke_vacuous(small.contract, rec);
    EXPECT_FALSE(why) << name << ": " << *why;
    ASSERT_EQ(rec.steps.size(), 3u) << name;
    EXPECT_GT(rec.steps.front().loss - rec.steps.back().loss,
              tuning::smoke_min_loss_fall(small.contract, rec.steps.front().loss))
      << name;
    const auto p = price_of(*rep->result);
    EXPECT_DOUBLE_EQ(rec.device_seconds, p.device_s) << name; // one GPU: = simulated_wall_s
    EXPECT_DOUBLE_EQ(p.device_s, p.wall_s) << name;
    std::cout << name << ": smoke loss " << rec.steps.front().loss << " -> "
              << rec.steps.back().loss << " over 3 steps; " << rec.device_seconds
              << " device-seconds\n";
  }
}

/// A 13B shape (Llama-2-13B's dimensions and its 32,000-token vocabulary; 8 x H100, 64 sequences
/// of 4096 tokens per step) with the shipped tasks' thin smoke model (two layers of 512 on one
/// GPU, three steps of the same batch): the small model's loss sits at its ceiling ln(32000) =
/// 10.37 on every step, so the data loader that skips half of every sample (fast_dataloader)
/// cannot show in it. The probe says so (vacuous) and the full launch judges the patch; the same
/// cheat with the shipped sim-dense-1node smoke launch (falling loss) is caught small.
TEST_F(SimTrial, AThinSmokeModelAtItsLossCeilingIsAVacuousProbe) {
  auto t = task("sim-dense-1node");
  const auto set_arg = [](std::vector<std::string>& argv, const std::string& flag,
                          const std::string& value) {
    auto at = std::find(argv.begin(), argv.end(), flag);
    if (at == argv.end() || at + 1 == argv.end())
      throw std::runtime_error("no " + flag);
    *(at + 1) = value;
  };
  set_arg(t.workload.argv, "--model", "llama2-7b");
  set_arg(t.workload.argv, "--global-batch", "64");
  for (const auto& extra : std::vector<std::string>{"--layers", "40", "--hidden", "5120",
                                                    "--heads", "40", "--kv-heads", "40",
                                                    "--ffn", "13824"})
    t.workload.argv.push_back(extra);
  t.constants["layers"] = std::int64_t{40};
  t.constants["heads"] = std::int64_t{40};
  t.constants["kv_heads"] = std::int64_t{40};
  t.constants["ffn"] = std::int64_t{13824};
  t.constants["global_batch"] = std::int64_t{64};
  t.contract.tokens_per_step = 64 * 4096;
  ASSERT_TRUE(t.smoke);
  t.smoke->argv[0] = sim_binary;
  set_arg(t.smoke->argv, "--model", "llama2-7b");
  set_arg(t.smoke->argv, "--global-batch", "64");
  t.smoke->contract.tokens_per_step = 64 * 4096;
  t.smoke->contract.global_batch = 64;
  const tuning::knob_assignment knobs = {{"tp", std::int64_t{4}}};

  adapters::trial_request req;
  req.task = &t;
  req.knobs = knobs;
  req.patches = {"fast_dataloader"};
  req.smoke_patches = {"fast_dataloader"};
  req.trial_id = 41;
  req.trial_dir = dir.sub("ceiling");
  auto rep = adapters::run_trial(req);
  ASSERT_TRUE(rep) << describe(rep.error());
  const auto* r = rep->result.get();
  ASSERT_EQ(r->outcome(), wire::Outcome::Ok) << r->detail()->str(); // the full launch ran
  EXPECT_EQ(r->steps()->size(), 10u);
  const auto detail = r->detail()->str();
  ASSERT_TRUE(tuning::is_smoke_vacuous(detail)) << detail;
  const auto why = *tuning::smoke_vacuous_reason(detail);
  std::cout << "13B-like shape, 32,000 tokens: " << why << "\n";
  // The unpatched smoke losses: ln(32000) and the +-0.02 data-order wobble, on all three steps.
  std::ifstream log{dir.sub("ceiling/smoke-unpatched/rank-0.stdout")};
  std::vector<double> losses;
  for (std::string line; std::getline(log, line);)
    if (line.rfind("INFRARSI_METRICS ", 0) == 0) {
      auto j = nlohmann::json::parse(line.substr(17));
      if (j.contains("loss"))
        losses.push_back(j["loss"].get<double>());
    }
  ASSERT_EQ(losses.size(), 3u);
  for (double l : losses)
    EXPECT_NEAR(l, std::log(32000.0), 0.025);
  EXPECT_EQ(why.rfind("the unpatched smoke loss went 10.3", 0), 0u) << why;
  EXPECT_NE(why.find(" over 3 steps ("), std::string::npos) << why;
  EXPECT_NE(why.find("= max(loss_atol 1e-06, loss_rtol 0.01 x 10.3"), std::string::npos) << why;
  EXPECT_FALSE(std::filesystem::exists(dir.sub("ceiling/smoke-patched")));
  std::ifstream note_in{dir.sub("ceiling/smoke.txt")};
  std::string note{std::istreambuf_iterator<char>{note_in}, {}};
  EXPECT_EQ(note.rfind("smoke probe of fast_dataloader: vacuous: " + why + " (1 launch, ", 0), 0u)
    << note;

  // The shipped smoke launch of sim-dense-1node (256 sequences, 128,256 tokens: its loss falls)
  // catches the same cheat before the full launch, at the simulator's price of two launches.
  auto shipped = task("sim-dense-1node");
  shipped.smoke->argv[0] = sim_binary;
  req.task = &shipped;
  req.knobs = {};
  req.trial_dir = dir.sub("falling");
  rep = adapters::run_trial(req);
  ASSERT_TRUE(rep) << describe(rep.error());
  r = rep->result.get();
  ASSERT_EQ(r->outcome(), wire::Outcome::ContractViolation) << r->detail()->str();
  EXPECT_TRUE(tuning::is_smoke_probe(r->detail()->str())) << r->detail()->str();
  EXPECT_EQ(tuning::violation_code(r->detail()->str()), "loss_drift") << r->detail()->str();
  EXPECT_GT(r->device_seconds(), 2 * 30.0); // two one-GPU launches of at least 30 s each
  EXPECT_LT(r->device_seconds(), 2 * 60.0);
  std::cout << "sim-dense-1node's own smoke: " << r->detail()->str() << "; "
            << r->device_seconds() << " device-seconds\n";
}

} // namespace
} // namespace infrarsi::sim
