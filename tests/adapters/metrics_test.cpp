// Tests for adapters/metrics.cpp: JSON lines and regex metrics, malformed input, NaN losses.

#include "adapters/metrics.hpp"

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace infrarsi::adapters {
namespace {

TEST(Metrics, JsonLinesWithPrefixAnywhereInTheLine) {
  tuning::metrics_spec spec;
  metrics_parser p{spec};
  p.feed("loading data...");
  p.feed("INFRARSI_METRICS {\"step\": 0, \"loss\": 5.5, \"tokens\": 8192, \"step_time_s\": 1.25, "
         "\"backward_s\": 0.5, \"peak_memory_bytes\": 123456, \"warmup\": true}");
  p.feed("[rank0] INFRARSI_METRICS {\"step\": 1, \"loss\": 5.25, \"tokens\": 8192, "
         "\"step_time_s\": 1.0}\r");
  p.feed("INFRARSI_METRICS {\"event\": \"final\", \"status\": \"ok\", \"steps\": 2}");
  ASSERT_EQ(p.steps().size(), 2u);
  EXPECT_EQ(p.steps()[0].tokens, 8192u);
  EXPECT_DOUBLE_EQ(*p.steps()[0].backward_s, 0.5);
  EXPECT_FALSE(p.steps()[0].forward_s.has_value());
  EXPECT_EQ(*p.steps()[0].peak_memory_bytes, 123456u);
  EXPECT_TRUE(p.steps()[0].warmup);
  EXPECT_DOUBLE_EQ(p.steps()[1].loss, 5.25);
  EXPECT_FALSE(p.steps()[1].warmup);
  ASSERT_TRUE(p.final_seen());
  EXPECT_EQ((*p.final_line())["steps"], 2);
  EXPECT_EQ(p.malformed_lines(), 0u);
}

TEST(Metrics, MalformedLinesAreCountedNotFatal) {
  tuning::metrics_spec spec;
  metrics_parser p{spec};
  p.feed("INFRARSI_METRICS {not json");
  p.feed("INFRARSI_METRICS {\"step\": 3}");
  p.feed("INFRARSI_METRICS {\"step\": 4, \"loss\": null, \"step_time_s\": 0.1}");
  EXPECT_EQ(p.malformed_lines(), 2u);
  EXPECT_NE(p.first_malformed().find("not a JSON object"), std::string::npos);
  ASSERT_EQ(p.steps().size(), 1u);
  EXPECT_TRUE(std::isnan(p.steps()[0].loss)); // a NaN loss is kept as NaN, never as 0
}

TEST(Metrics, RegexFieldsAndUnits) {
  tuning::metrics_spec spec;
  spec.format = tuning::metrics_spec::format_kind::regex;
  spec.regex = R"(iter (\d+): loss ([0-9.]+|nan), time ([0-9.]+)ms, mem ([0-9.]+)MB)";
  spec.regex_fields = {"step", "loss", "step_time_ms", "peak_memory_mb"};
  spec.tokens_per_step = 512;
  metrics_parser p{spec};
  EXPECT_TRUE(p.config_error().empty());
  p.feed("iter 10: loss 2.31, time 95.2ms, mem 100MB");
  p.feed("iter 11: loss nan, time 95.0ms, mem 100MB");
  p.feed("eval loss 2.0");
  ASSERT_EQ(p.steps().size(), 2u);
  EXPECT_EQ(p.steps()[0].step, 10u);
  EXPECT_DOUBLE_EQ(p.steps()[0].step_time_s, 0.0952);
  EXPECT_EQ(*p.steps()[0].peak_memory_bytes, 100u * 1048576u);
  EXPECT_EQ(p.steps()[0].tokens, 512u);
  EXPECT_TRUE(std::isnan(p.steps()[1].loss));
}

// Issue 19: the eval loss of a step (contract.loss_mode eval), in JSON lines and in a regex.
TEST(Metrics, EvalLossFieldInJsonAndRegex) {
  tuning::metrics_spec spec;
  metrics_parser p{spec};
  p.feed("INFRARSI_METRICS {\"step\": 0, \"loss\": 5.5, \"step_time_s\": 0.1}");
  p.feed("INFRARSI_METRICS {\"step\": 1, \"loss\": 5.0, \"eval_loss\": 4.75, \"step_time_s\": 0.1}");
  p.feed("INFRARSI_METRICS {\"step\": 2, \"loss\": 4.5, \"eval_loss\": null, \"step_time_s\": 0.1}");
  ASSERT_EQ(p.steps().size(), 3u);
  EXPECT_FALSE(p.steps()[0].eval_loss.has_value());
  ASSERT_TRUE(p.steps()[1].eval_loss.has_value());
  EXPECT_DOUBLE_EQ(*p.steps()[1].eval_loss, 4.75);
  ASSERT_TRUE(p.steps()[2].eval_loss.has_value()); // reported, not a number: NaN, never dropped
  EXPECT_TRUE(std::isnan(*p.steps()[2].eval_loss));

  tuning::metrics_spec rx;
  rx.format = tuning::metrics_spec::format_kind::regex;
  rx.regex = R"(step (\d+) loss (\S+)(?: eval (\S+))?)";
  rx.regex_fields = {"step", "loss", "eval_loss"};
  metrics_parser r{rx};
  ASSERT_TRUE(r.config_error().empty()) << r.config_error();
  r.feed("step 0 loss 5.5");
  r.feed("step 1 loss 5.0 eval 4.25");
  r.feed("step 2 loss 4.5 eval nan");
  ASSERT_EQ(r.steps().size(), 3u);
  EXPECT_EQ(r.malformed_lines(), 0u);
  EXPECT_FALSE(r.steps()[0].eval_loss.has_value());
  EXPECT_DOUBLE_EQ(*r.steps()[1].eval_loss, 4.25);
  EXPECT_DOUBLE_EQ(r.steps()[1].loss, 5.0);
  ASSERT_TRUE(r.steps()[2].eval_loss.has_value());
  EXPECT_TRUE(std::isnan(*r.steps()[2].eval_loss));
}

TEST(Metrics, BadRegexIsAConfigError) {
  tuning::metrics_spec spec;
  spec.format = tuning::metrics_spec::format_kind::regex;
  spec.regex = "iter (\\d+";
  spec.regex_fields = {"step"};
  metrics_parser p{spec};
  EXPECT_NE(p.config_error().find("does not compile"), std::string::npos);
  spec.regex = "iter (\\d+)";
  spec.regex_fields = {"step", "loss"};
  metrics_parser q{spec};
  EXPECT_NE(q.config_error().find("1 capture group(s) but regex_fields names 2"),
            std::string::npos);
}

/// The lines of a file of tests/data/framework_logs/ fed to a parser of `regex` and `fields`.
metrics_parser parse_log(const std::string& file, const std::string& regex,
                         std::vector<std::string> fields) {
  tuning::metrics_spec spec;
  spec.format = tuning::metrics_spec::format_kind::regex;
  spec.regex = regex;
  spec.regex_fields = std::move(fields);
  spec.tokens_per_step = 4096;
  metrics_parser p{spec};
  EXPECT_TRUE(p.config_error().empty()) << p.config_error();
  std::ifstream in{std::string{INFRARSI_TEST_DATA_DIR} + "/framework_logs/" + file};
  EXPECT_TRUE(in.good()) << file;
  for (std::string line; std::getline(in, line);)
    p.feed(line);
  return p;
}

// torchtitan prints the peak on the step's own line, in GiB: `memory:  9.46GiB(64.99%)`.
TEST(Metrics, TorchtitanMemoryInGib) {
  const std::string titan = R"(step:\s*(\d+)\s+loss:\s*([0-9.]+).*memory:\s*([0-9.]+)GiB)";
  auto p = parse_log("torchtitan.log", titan, {"step", "loss", "peak_memory_gib"});
  EXPECT_EQ(p.malformed_lines(), 0u);
  ASSERT_EQ(p.steps().size(), 4u);
  EXPECT_EQ(p.steps()[0].step, 14u);
  EXPECT_DOUBLE_EQ(p.steps()[0].loss, 3.24405);
  EXPECT_EQ(*p.steps()[0].peak_memory_bytes, static_cast<std::uint64_t>(9.46 * 1073741824.0));
  EXPECT_EQ(p.steps()[3].step, 5u);
  EXPECT_EQ(*p.steps()[3].peak_memory_bytes, static_cast<std::uint64_t>(66.91 * 1073741824.0));
  // peak_memory_gb reads the same binary unit under the name frameworks often print.
  auto gb = parse_log("torchtitan.log", titan, {"step", "loss", "peak_memory_gb"});
  ASSERT_EQ(gb.steps().size(), 4u);
  EXPECT_EQ(*gb.steps()[0].peak_memory_bytes, *p.steps()[0].peak_memory_bytes);
}

// Megatron-LM prints memory on a line of its own after the iteration's line; one regex with
// two alternatives reads both, and the memory goes to the step just read.
TEST(Metrics, MegatronMaxAllocatedLineGivesTheLastStepItsPeak) {
  auto p = parse_log("megatron_lm.log",
                     R"(iteration\s+(\d+)/\s*\d+ \|.*elapsed time per iteration \(ms\): ([0-9.]+))"
                     R"( \|.*lm loss: ([0-9.E+-]+) \||max allocated: ([0-9.]+))",
                     {"step", "step_time_ms", "loss", "peak_memory_mb"});
  EXPECT_EQ(p.malformed_lines(), 0u);
  ASSERT_EQ(p.steps().size(), 1u);
  EXPECT_EQ(p.steps()[0].step, 20u);
  EXPECT_DOUBLE_EQ(p.steps()[0].step_time_s, 0.744);
  EXPECT_DOUBLE_EQ(p.steps()[0].loss, 1.020935);
  EXPECT_EQ(p.steps()[0].tokens, 4096u);
  EXPECT_EQ(*p.steps()[0].peak_memory_bytes, static_cast<std::uint64_t>(5670.39 * 1048576.0));

  auto old = parse_log("megatron_lm_2020.log",
                       R"(iteration\s+(\d+)/\s*\d+ \| elapsed time per iteration \(ms\): ([0-9.]+))"
                       R"( \||max allocated: ([0-9.]+))",
                       {"step", "step_time_ms", "peak_memory_mb"});
  EXPECT_EQ(old.malformed_lines(), 0u);
  ASSERT_EQ(old.steps().size(), 2u);
  EXPECT_EQ(old.steps()[0].step, 5u);
  EXPECT_EQ(*old.steps()[0].peak_memory_bytes,
            static_cast<std::uint64_t>(12606.06201171875 * 1048576.0));
  EXPECT_EQ(old.steps()[1].step, 10u);
  EXPECT_FALSE(old.steps()[1].peak_memory_bytes.has_value()); // no report after iteration 10
}

TEST(Metrics, MemoryLineBeforeAnyStepIsNotAStep) {
  tuning::metrics_spec spec;
  spec.format = tuning::metrics_spec::format_kind::regex;
  spec.regex = R"(iteration (\d+) loss ([0-9.]+)|max allocated: ([0-9.]+))";
  spec.regex_fields = {"step", "loss", "peak_memory_mb"};
  metrics_parser p{spec};
  p.feed("[Rank 0] (after 0 iterations) memory (MB) | allocated: 10.0 | max allocated: 12.0");
  p.feed("iteration 1 loss 2.5");
  p.feed("max allocated: 100.0");
  p.feed("max allocated: 50.0"); // a later, smaller report keeps the step's peak
  EXPECT_EQ(p.malformed_lines(), 0u);
  ASSERT_EQ(p.steps().size(), 1u);
  EXPECT_EQ(p.steps()[0].step, 1u);
  EXPECT_EQ(*p.steps()[0].peak_memory_bytes, 100u * 1048576u);
}

TEST(Metrics, OomPatterns) {
  tuning::metrics_spec spec;
  EXPECT_NE(find_oom_pattern(spec, "RuntimeError: CUDA out of memory. Tried to allocate"), nullptr);
  EXPECT_EQ(*find_oom_pattern(spec, "INFRARSI_OOM rank 1: ..."), "INFRARSI_OOM");
  EXPECT_EQ(find_oom_pattern(spec, "loss went out of range"), nullptr);
}

} // namespace
} // namespace infrarsi::adapters
