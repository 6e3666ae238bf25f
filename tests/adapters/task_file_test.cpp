// Tests for runtime/task_file.cpp: a valid task loads completely; every kind of mistake gets an
// error naming the file, line, key, value and what was expected.

#include "adapters/task_file.hpp"

#include <chrono>
#include <fstream>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace infrarsi::runtime {
namespace {

class TaskFileTest : public ::testing::Test {
protected:
  test::temp_dir dir;

  std::string write(const std::string& text) {
    auto path = dir.sub("task.toml");
    std::ofstream{path} << text;
    return path;
  }

  std::string error_of(const std::string& text) {
    auto r = adapters::load_task_file(write(text));
    if (r)
      return "(loaded)";
    return describe(r.error());
  }
};

const char* minimal = R"(name = "t"
[workload]
argv = ["python3", "train.py", "--mb", "{micro_batch}"]
[[knobs]]
name = "micro_batch"
type = "int"
values = [1, 2, 4]
default = 1
)";

TEST_F(TaskFileTest, LoadsTheFakeTaskCompletely) {
  auto t = adapters::load_task_file(std::string{INFRARSI_TEST_DATA_DIR} + "/tasks/fake.toml");
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(t->name, "fake");
  EXPECT_EQ(t->workload.launcher, tuning::launcher_kind::ranks);
  EXPECT_EQ(t->workload.world_size, "{world_size}");
  EXPECT_EQ(t->workload.workdir, std::string{INFRARSI_TEST_DATA_DIR} + "/workloads");
  EXPECT_EQ(t->workload.env.at("FAKE_MODE"), "{mode}");
  ASSERT_EQ(t->knobs.size(), 5u);
  EXPECT_EQ(t->knobs[2].tags, std::vector<std::string>{"memory-hungry"});
  EXPECT_EQ(std::get<double>(t->knobs[3].default_value), 0.05);
  EXPECT_EQ(t->limits.kill_grace_s, 1.0);
  EXPECT_EQ(t->limits.timeout_s, 60.0);
  EXPECT_EQ(t->metrics.prefix, "INFRARSI_METRICS ");
}

TEST_F(TaskFileTest, MinimalTaskGetsDocumentedDefaults) {
  auto t = adapters::load_task_file(write(minimal));
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(t->limits.timeout_s, 600.0);
  EXPECT_EQ(t->limits.memory_cap_bytes, 0u);
  EXPECT_EQ(t->workload.world_size, "1");
  EXPECT_EQ(t->metrics.oom_exit_codes, std::vector<int>{86});
}

TEST_F(TaskFileTest, ErrorsNameFileLineKeyValueAndExpectation) {
  auto e = error_of(std::string{minimal} + "[limits]\ntimeout_s = \"soon\"\n");
  EXPECT_NE(e.find("task.toml:10:13: limits.timeout_s: expected a number, got string \"soon\""),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[limits]\nmemory_cap_bytes = \"lots\"\n");
  EXPECT_NE(e.find("limits.memory_cap_bytes: expected a byte count"), std::string::npos) << e;
  e = error_of(std::string{minimal} + "[limits]\ntimeuot_s = 5\n");
  EXPECT_NE(e.find("limits.timeuot_s: unknown key (allowed here:"), std::string::npos) << e;
  e = error_of(R"(name = "t"
[workload]
argv = ["x"]
[[knobs]]
name = "micro_batch"
type = "int"
values = [1, 2, 4]
default = 3
)");
  EXPECT_NE(e.find(":8:11: knobs[0].default: expected one of 1, 2, 4, got integer 3"),
            std::string::npos)
    << e;
  e = error_of(R"(name = "t"
[workload]
argv = ["x"]
[[knobs]]
name = "attention"
type = "string"
default = "naive"
)");
  EXPECT_NE(e.find("knobs[0].type: expected one of \"int\", \"real\", \"bool\", \"choice\", got "
                   "string \"string\""),
            std::string::npos)
    << e;
  e = error_of("name = \"t\"\n[workload]\nargv = [\"x\", 3]\n");
  EXPECT_NE(e.find("workload.argv[1]: expected a string, got integer 3"), std::string::npos) << e;
  e = error_of("name = \"t\"\n[workload\nargv = []\n");
  EXPECT_NE(e.find("task.toml:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("TOML syntax error"), std::string::npos) << e;
  e = error_of("name = \"t\"\n");
  EXPECT_NE(e.find("workload: missing"), std::string::npos) << e;
  e = error_of(std::string{minimal} + "[[patches]]\nname = \"p\"\nfile = \"nope.patch\"\n");
  EXPECT_NE(e.find("patches[0].file: no such file:"), std::string::npos) << e;
  EXPECT_NE(adapters::load_task_file(dir.sub("absent.toml")).error().code(), 0);
}

TEST_F(TaskFileTest, IntegerKeysAreNeverTruncatedOrWrapped) {
  auto e = error_of(std::string{minimal} + "[contract]\nparams = 3.5\n");
  EXPECT_NE(e.find("contract.params: expected an integer in [0, 4611686018427387904], got "
                   "float 3.5"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[contract]\nsteps = 1e20\n");
  EXPECT_NE(e.find("contract.steps: expected an integer in [0, 4294967295]"), std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[contract]\nlayers = 5000000000\n");
  EXPECT_NE(e.find("contract.layers: expected an integer in [0, 4294967295], got integer "
                   "5000000000"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[budget]\ntrials = -1\n");
  EXPECT_NE(e.find("budget.trials: expected an integer in [0, 1000000], got integer -1"),
            std::string::npos)
    << e;
  auto ok = adapters::load_task_file(write(std::string{minimal} + "[contract]\nparams = 10942464\n"));
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_EQ(ok->contract.params, 10942464u);
}

// Issue 19: the loss invariant and each mode's own keys; a key of another mode is an error.
TEST_F(TaskFileTest, LossModesAndTheirKeys) {
  auto t = adapters::load_task_file(write(minimal));
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(t->contract.loss_mode, tuning::loss_mode::pointwise);
  EXPECT_EQ(t->contract.loss_window, 0u);
  t = adapters::load_task_file(
    write(std::string{minimal} + "[contract]\nsteps = 40\nloss_mode = \"window\"\nloss_window = 10\n"));
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(t->contract.loss_mode, tuning::loss_mode::window);
  EXPECT_EQ(t->contract.loss_window, 10u);
  t = adapters::load_task_file(write(std::string{minimal}
                                     + "[contract]\nsteps = 40\nloss_mode = \"eval\"\n"
                                       "eval_steps = [9, 19, 39]\n"));
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(t->contract.loss_mode, tuning::loss_mode::eval);
  EXPECT_EQ(t->contract.eval_steps, (std::vector<std::uint32_t>{9, 19, 39}));
  t = adapters::load_task_file(write(std::string{minimal}
                                     + "[contract]\nloss_mode = \"eval\"\neval_steps = \"reported\"\n"));
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_TRUE(t->contract.eval_steps.empty());

  auto e = error_of(std::string{minimal} + "[contract]\nloss_mode = \"windowed\"\n");
  EXPECT_NE(e.find("task.toml:10:13: contract.loss_mode: expected \"pointwise\", \"window\" or "
                   "\"eval\", got string \"windowed\""),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[contract]\nloss_mode = \"window\"\n");
  EXPECT_NE(e.find("contract.loss_window: missing (loss_mode = \"window\" needs the steps per "
                   "window, an integer >= 2)"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[contract]\nsteps = 40\nloss_mode = \"window\"\nloss_window = 1\n");
  EXPECT_NE(e.find("contract.loss_window: expected an integer in [2, 40], got integer 1"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[contract]\nloss_window = 10\n");
  EXPECT_NE(e.find("contract.loss_window: only read with loss_mode = \"window\" (loss_mode is "
                   "\"pointwise\")"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal}
               + "[contract]\nloss_mode = \"window\"\nloss_window = 4\nloss_checkpoints = [1]\n");
  EXPECT_NE(e.find("contract.loss_checkpoints: only read with loss_mode = \"pointwise\" (loss_mode "
                   "is \"window\")"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[contract]\nsteps = 40\nloss_mode = \"eval\"\neval_steps = [9, 40]\n");
  EXPECT_NE(e.find("contract.eval_steps[]: expected a step number below contract.steps, got "
                   "integer 40"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[contract]\nloss_mode = \"eval\"\neval_steps = [9, 9]\n");
  EXPECT_NE(e.find("contract.eval_steps[]: expected increasing step numbers, got 9 after 9"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[contract]\neval_steps = [9]\n");
  EXPECT_NE(e.find("contract.eval_steps: only read with loss_mode = \"eval\""), std::string::npos)
    << e;
  // The metrics field of an eval loss in a regex.
  t = adapters::load_task_file(write(std::string{minimal}
                                     + "[metrics]\nformat = \"regex\"\nregex = 'step (\\d+) loss "
                                       "(\\S+)(?: eval (\\S+))?'\nregex_fields = [\"step\", \"loss\", "
                                       "\"eval_loss\"]\n"));
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(t->metrics.regex_fields.back(), "eval_loss");
}

// Hostile task files (issue 20): each limit gets an error naming the file, the key, the value
// and the limit, at once (no allocation in proportion to the hostile input).
TEST_F(TaskFileTest, ConstraintNestedTenThousandDeepIsAClearErrorWithinASecond) {
  std::string deep = std::string(10000, '(') + "micro_batch" + std::string(10000, ')') + " > 0";
  auto start = std::chrono::steady_clock::now();
  // Top-level keys go before the first table of the minimal task.
  auto with_constraint = [&](const std::string& c) {
    std::string text = minimal;
    return error_of("constraints = [\"" + c + "\"]\n" + text);
  };
  auto e = with_constraint(deep);
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_NE(e.find("task.toml:"), std::string::npos) << e;
  EXPECT_NE(e.find("constraints[0]: expected an expression: expression of 20015 characters is "
                   "longer than the limit of 4096"),
            std::string::npos)
    << e.substr(0, 300);
  // Within the length limit, nesting is limited on its own.
  std::string nested = std::string(1000, '(') + "micro_batch" + std::string(1000, ')') + " > 0";
  e = with_constraint(nested);
  EXPECT_NE(e.find("constraints[0]: expected an expression: nested deeper than the limit of 64 "
                   "levels"),
            std::string::npos)
    << e.substr(0, 300);
}

TEST_F(TaskFileTest, KnobOfOneHundredThousandValuesIsAClearErrorWithinASecond) {
  std::string values;
  for (int i = 1; i <= 100000; ++i)
    values += (i == 1 ? "" : ", ") + std::to_string(i);
  auto start = std::chrono::steady_clock::now();
  auto e = error_of("name = \"t\"\n[workload]\nargv = [\"x\"]\n[[knobs]]\nname = \"mb\"\n"
                    "type = \"int\"\nvalues = ["
                    + values + "]\ndefault = 1\n");
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_NE(e.find("task.toml:7:10: knobs[0].values: 100000 values, more than the limit of 256"),
            std::string::npos)
    << e.substr(0, 300);
  // The same task read back from an event log (resume, replay) is refused the same way.
  auto logged = adapters::load_task_text(
    "name = \"t\"\n[workload]\nargv = [\"x\"]\n[[knobs]]\nname = \"mb\"\ntype = \"int\"\n"
    "values = [" + values + "]\ndefault = 1\n",
    dir.sub("task.toml"));
  ASSERT_FALSE(logged);
  EXPECT_NE(describe(logged.error()).find("knobs[0].values: 100000 values, more than the limit"),
            std::string::npos);
  // Many knobs of allowed size still add up to too many search features.
  std::string many = "name = \"t\"\n[workload]\nargv = [\"x\"]\n";
  for (int k = 0; k < 5; ++k) {
    many += "[[knobs]]\nname = \"k" + std::to_string(k) + "\"\ntype = \"int\"\nvalues = [";
    for (int i = 1; i <= 256; ++i)
      many += (i == 1 ? "" : ", ") + std::to_string(i);
    many += "]\ndefault = 1\n";
  }
  e = error_of(many);
  EXPECT_NE(e.find("knobs: 1275 search features (the searched values of every knob other than "
                   "its default, plus one per patch), more than the limit of 1024"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[[knobs]]\nname = \"big\"\ntype = \"int\"\nmin = 0\n"
               "max = 1e300\ndefault = 0\n");
  EXPECT_NE(e.find("knobs[1].max: expected an integer with |value| <= 2^53, got float 1e+300"),
            std::string::npos)
    << e;
}

TEST_F(TaskFileTest, NamesAndScopePathsStayInsideTheirDirectories) {
  auto with_name = [&](const std::string& name) {
    std::string text = minimal;
    return error_of("name = \"" + name + "\"" + text.substr(text.find('\n')));
  };
  auto e = with_name("../../../x");
  EXPECT_NE(e.find("task.toml:1:8: name: expected a name of at most 128 letters, digits, '_', '.' "
                   "or '-'"),
            std::string::npos)
    << e;
  EXPECT_NE(e.find("got \"../../../x\""), std::string::npos) << e;
  for (const char* bad : {"/etc/x", "a/b", ".hidden", "-flag", "a..b", "", "a b"})
    EXPECT_NE(with_name(bad).find(": name: expected a name"), std::string::npos) << bad;
  EXPECT_EQ(with_name(std::string(129, 'a')).find("(loaded)"), std::string::npos);
  EXPECT_EQ(with_name("sim-dense9b_h100.v2"), "(loaded)");
  e = with_name("t\"\nknowledge = \"../secrets");
  EXPECT_NE(e.find("knowledge: expected a name"), std::string::npos) << e;
  std::ofstream{dir.sub("a.patch")} << "--- a/x\n+++ b/x\n";
  e = error_of(std::string{minimal} + "[[patches]]\nname = \"../p\"\nfile = \"a.patch\"\n");
  EXPECT_NE(e.find("patches[0].name: expected a name"), std::string::npos) << e;
  e = error_of(std::string{minimal} + "[scope]\neditable = [\"src/*.py\", \"../outside/*\"]\n");
  EXPECT_NE(e.find("scope.editable[1]: expected a glob relative to the workload directory without "
                   "a \"..\" component, got \"../outside/*\""),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[scope]\nfrozen = [\"/etc/passwd\"]\n");
  EXPECT_NE(e.find("scope.frozen[0]: expected a glob relative"), std::string::npos) << e;
}

// Issue 19: workload.distributed_env and env knobs that may be "unset".
TEST_F(TaskFileTest, DistributedEnvAndUnsetEnvKnobsAreReadAndCheckedNamingFileKeyAndValue) {
  auto t = adapters::load_task_file(write(minimal));
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(t->workload.distributed_env, tuning::distributed_env_kind::always);
  std::string with = minimal;
  with.insert(with.find("argv"), "distributed_env = \"multi_rank\"\n");
  t = adapters::load_task_file(write(with));
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(t->workload.distributed_env, tuning::distributed_env_kind::multi_rank);
  std::string bad = minimal;
  bad.insert(bad.find("argv"), "distributed_env = \"single\"\n");
  auto e = error_of(bad);
  EXPECT_NE(e.find("task.toml:3:19: workload.distributed_env: expected \"always\" (every rank "
                   "gets RANK, WORLD_SIZE, MASTER_ADDR, ...) or \"multi_rank\" (only when "
                   "world_size > 1), got string \"single\""),
            std::string::npos)
    << e;
  const std::string algo = "[[knobs]]\nname = \"algo\"\ntype = \"choice\"\n"
                           "values = [\"unset\", \"Ring\"]\ndefault = \"unset\"\n";
  t = adapters::load_task_file(
    write(std::string{minimal} + "[workload.env]\nNCCL_ALGO = \"{algo}\"\n" + algo));
  ASSERT_TRUE(t) << describe(t.error());
  ASSERT_NE(tuning::sole_knob_of(*t, t->workload.env.at("NCCL_ALGO")), nullptr);
  EXPECT_TRUE(tuning::may_be_unset(*t->find_knob("algo")));
  EXPECT_FALSE(tuning::may_be_unset(*t->find_knob("micro_batch")));
  e = error_of(std::string{minimal} + "[workload.env]\nNCCL_ALGO = \"x{algo}\"\n" + algo);
  EXPECT_NE(e.find("task.toml:10:13: workload.env.NCCL_ALGO: knob 'algo' may be \"unset\" "
                   "(which removes the variable), so the template must be exactly \"{algo}\", "
                   "got \"x{algo}\""),
            std::string::npos)
    << e;
}

TEST_F(TaskFileTest, FileLargerThanTheLimitIsRefusedBeforeParsing) {
  std::string big = std::string{minimal} + "# " + std::string(adapters::task_file_limits::max_file_bytes, 'x')
                    + "\n";
  auto e = error_of(big);
  EXPECT_NE(e.find("task.toml: " + std::to_string(big.size())
                   + " bytes, more than the limit of 1048576 bytes for a task file"),
            std::string::npos)
    << e;
}

TEST(ByteSize, UnitsAndRejections) {
  std::uint64_t v = 0;
  ASSERT_TRUE(adapters::parse_byte_size("3GiB", v));
  EXPECT_EQ(v, 3ull << 30);
  ASSERT_TRUE(adapters::parse_byte_size("2.5 GB", v));
  EXPECT_EQ(v, 2'500'000'000ull);
  ASSERT_TRUE(adapters::parse_byte_size("4096", v));
  EXPECT_EQ(v, 4096u);
  EXPECT_FALSE(adapters::parse_byte_size("3 parsecs", v));
  EXPECT_FALSE(adapters::parse_byte_size("-1GB", v));
  EXPECT_FALSE(adapters::parse_byte_size("", v));
  // Not plain decimal: hexadecimal, exponent, inf/nan.
  EXPECT_FALSE(adapters::parse_byte_size("0x10", v));
  EXPECT_FALSE(adapters::parse_byte_size("8e10", v));
  EXPECT_FALSE(adapters::parse_byte_size("inf", v));
  EXPECT_FALSE(adapters::parse_byte_size("nan", v));
  // A non-zero size that rounds to 0 bytes, and one beyond 2^63.
  EXPECT_FALSE(adapters::parse_byte_size("0.4", v));
  EXPECT_FALSE(adapters::parse_byte_size("10000000TB", v));
  ASSERT_TRUE(adapters::parse_byte_size("81559MiB", v));
  EXPECT_EQ(v, 81559ull * 1048576ull);
  ASSERT_TRUE(adapters::parse_byte_size("0", v));
  EXPECT_EQ(v, 0u);
}

TEST_F(TaskFileTest, TheAdaptiveMeasurementKeysLoadAndAreChecked) {
  // Defaults: target 3 %, at most 12 baselines, 8 looks of verify_repeats pairs.
  auto d = adapters::load_task_file(write(std::string{minimal} + "[budget]\nverify_repeats = 4\n"));
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_DOUBLE_EQ(d->budget.target_mds, 0.03);
  EXPECT_EQ(d->budget.max_baseline_repeats, 12u);
  EXPECT_EQ(d->budget.max_verify_repeats, 32u);
  auto ok = adapters::load_task_file(
    write(std::string{minimal}
          + "[budget]\ntarget_mds = 0.05\nmax_baseline_repeats = 20\nmax_verify_repeats = 30\n"));
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_DOUBLE_EQ(ok->budget.target_mds, 0.05);
  EXPECT_EQ(ok->budget.max_baseline_repeats, 20u);
  EXPECT_EQ(ok->budget.max_verify_repeats, 30u);
  auto e = error_of(std::string{minimal} + "[budget]\ntarget_mds = 1.5\n");
  EXPECT_NE(e.find("task.toml:"), std::string::npos) << e;
  EXPECT_NE(e.find("budget.target_mds: expected a fraction in (0, 1), e.g. 0.03 for 3 %, got "
                   "float 1.5"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[budget]\nbaseline_repeats = 5\nmax_baseline_repeats = 4\n");
  EXPECT_NE(e.find("budget.max_baseline_repeats: expected an integer >= budget.baseline_repeats "
                   "(5), got integer 4"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[budget]\nmax_verify_repeats = 10\n");
  EXPECT_NE(e.find("budget.max_verify_repeats: expected a multiple of budget.verify_repeats (3)"),
            std::string::npos)
    << e;
  EXPECT_NE(e.find("got integer 10"), std::string::npos) << e;
  e = error_of(std::string{minimal} + "[budget]\nmax_verify_repeats = 51\n");
  EXPECT_NE(e.find("from 1 to 16 times it"), std::string::npos) << e;
}

TEST_F(TaskFileTest, TheSearchPolicyIsANamedPolicyOrAnErrorListingThem) {
  auto d = adapters::load_task_file(write(std::string{minimal}));
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_EQ(d->budget.policy, ""); // the default policy at init
  auto ok = adapters::load_task_file(write(std::string{minimal} + "[budget]\npolicy = \"bayes_ei/1\"\n"));
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_EQ(ok->budget.policy, "bayes_ei/1");
  auto e = error_of(std::string{minimal} + "[budget]\npolicy = \"bayes_ei\"\n");
  EXPECT_NE(e.find("task.toml:"), std::string::npos) << e;
  EXPECT_NE(e.find("budget.policy: expected one of the search policies: bayes_ei/7, bayes_ei/6, "
                   "bayes_ei/5, "
                   "bayes_ei/4, "
                   "bayes_ei/3, bayes_ei/2, bayes_ei/1, "
                   "seeded_local_search/1, random/1, greedy_coordinate/1, settings_only/1, got "
                   "string \"bayes_ei\""),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[budget]\npolicy = 2\n");
  EXPECT_NE(e.find("budget.policy: expected a string, got integer 2"), std::string::npos) << e;
}

// Issue 16: [hardware] (what the findings are filed under) and [model] (the workload signature).
TEST_F(TaskFileTest, HardwareAndModelTablesLoadAndTheirMistakesAreNamed) {
  auto t = adapters::load_task_file(write(std::string{minimal} + R"([hardware]
gpu = "H100-80GB"
gpu_memory_bytes = "80GiB"
gpus_per_node = 8
nodes = 2
interconnect = "nvlink+infiniband"
simulated = true
[hardware.software]
torch = "2.4.0"
nccl = "2.21.5"
[model]
name = "yi-9b"
architecture = "dense"
layers = 48
seq_len = 4096
)"));
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_TRUE(t->hardware.declared);
  EXPECT_EQ(t->hardware.gpu, "H100-80GB");
  EXPECT_EQ(t->hardware.gpu_memory_bytes, std::uint64_t{80} << 30);
  EXPECT_EQ(t->hardware.gpus_per_node, 8u);
  EXPECT_EQ(t->hardware.nodes, 2u);
  EXPECT_TRUE(t->hardware.simulated);
  EXPECT_EQ(t->hardware.software.at("nccl"), "2.21.5");
  EXPECT_TRUE(t->model.declared);
  EXPECT_EQ(t->model.name, "yi-9b");
  EXPECT_EQ(t->model.shape.at("layers"), 48);
  EXPECT_EQ(t->model.shape.at("seq_len"), 4096);
  auto plain = adapters::load_task_file(write(minimal));
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->hardware.declared);
  EXPECT_FALSE(plain->model.declared);

  auto e = error_of(std::string{minimal} + "[hardware]\ngpus_per_node = 8\n");
  EXPECT_NE(e.find("hardware.gpu: missing (a string is required)"), std::string::npos) << e;
  e = error_of(std::string{minimal} + "[hardware]\ngpu = \"H100\"\ngpus_per_node = 0\n");
  EXPECT_NE(e.find("hardware.gpus_per_node: expected an integer in [1, 4096], got integer 0"),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[hardware]\ngpu = \"H100\"\ngpu_mem = 1\n");
  EXPECT_NE(e.find("hardware.gpu_mem: unknown key (allowed here:"), std::string::npos) << e;
  e = error_of(std::string{minimal} + "[hardware]\ngpu = \"H100\"\n[hardware.software]\ntorch = 2\n");
  EXPECT_NE(e.find("hardware.software.torch: expected a version string"), std::string::npos) << e;
  e = error_of(std::string{minimal} + "[model]\nname = \"m\"\narchitecture = \"rnn\"\n");
  EXPECT_NE(e.find("model.architecture: expected \"dense\" or \"moe\", got string \"rnn\""),
            std::string::npos)
    << e;
  e = error_of(std::string{minimal} + "[model]\nname = \"m\"\nlayers = -1\n");
  EXPECT_NE(e.find("model.layers: expected an integer in [1, "), std::string::npos) << e;
  e = error_of(std::string{minimal} + "[model]\nname = \"m\"\nlayer = 4\n");
  EXPECT_NE(e.find("model.layer: unknown key (allowed here:"), std::string::npos) << e;
}

TEST_F(TaskFileTest, KnobRolesAndHardwareFiguresLoadAndTheirMistakesAreNamed) {
  const std::string layout = R"(name = "t"
[workload]
argv = ["python3", "train.py", "--tp", "{tp}", "--mb", "{micro_batch}"]
[[knobs]]
name = "tp"
type = "int"
values = [1, 2, 4]
default = 1
role = "tp"
[[knobs]]
name = "micro_batch"
type = "int"
values = [1, 2, 4]
default = 1
role = "micro_batch"
[[knobs]]
name = "ckpt"
type = "choice"
values = ["none", "selective", "full"]
default = "none"
role = "recompute"
[hardware]
gpu = "T4-16GB"
gpus_per_node = 4
nodes = 4
peak_tflops = 65
intra_node_gb_per_s = 12
inter_node_gb_per_s = 6.25
)";
  auto t = adapters::load_task_file(write(layout));
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(t->knobs[0].role, "tp");
  EXPECT_EQ(t->knobs[1].role, "micro_batch");
  EXPECT_EQ(t->knobs[2].role, "recompute");
  EXPECT_DOUBLE_EQ(t->hardware.peak_tflops, 65.0);
  EXPECT_DOUBLE_EQ(t->hardware.intra_node_bytes_per_s, 12e9);
  EXPECT_DOUBLE_EQ(t->hardware.inter_node_bytes_per_s, 6.25e9);

  auto with = [&](const std::string& from, const std::string& to) {
    auto text = layout;
    text.replace(text.find(from), from.size(), to);
    return error_of(text);
  };
  auto e = with("role = \"tp\"", "role = \"tensor\"");
  EXPECT_NE(e.find("knobs[0].role: expected one of \"tp\", \"pp\""), std::string::npos) << e;
  EXPECT_NE(e.find("got string \"tensor\""), std::string::npos) << e;
  e = with("role = \"micro_batch\"", "role = \"tp\"");
  EXPECT_NE(e.find("knobs[1].role: knob 'tp' already has role \"tp\" (at most one knob per role)"),
            std::string::npos)
    << e;
  e = with("role = \"recompute\"", "role = \"pp\"");
  EXPECT_NE(e.find("knobs[2].role: expected a role that fits the knob's type (\"pp\" needs an int "
                   "knob)"),
            std::string::npos)
    << e;
  e = with("peak_tflops = 65", "peak_tflops = -1");
  EXPECT_NE(e.find("hardware.peak_tflops: expected a finite number >= 0"), std::string::npos) << e;
}

} // namespace
} // namespace infrarsi::runtime
