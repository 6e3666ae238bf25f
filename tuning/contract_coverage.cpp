#include "tuning/contract_coverage.hpp"

#include <algorithm>

namespace infrarsi::tuning {

namespace {

bool captures(const metrics_spec& m, const char* field) {
  return std::find(m.regex_fields.begin(), m.regex_fields.end(), field) != m.regex_fields.end();
}

} // namespace

const char* to_string(check_status status) {
  switch (status) {
    case check_status::observed: return "observed";
    case check_status::partial: return "partial";
    case check_status::vacuous: return "vacuous";
    case check_status::fails_always: return "fails_always";
    case check_status::off: return "off";
  }
  return "?";
}

std::vector<check_coverage> contract_coverage(const task_spec& task) {
  const auto& c = task.contract;
  const auto& m = task.metrics;
  const bool regex = m.format == metrics_spec::format_kind::regex;
  std::vector<check_coverage> out;
  auto add = [&out](const char* code, check_status status, std::string evidence) {
    out.push_back({code, status, std::move(evidence)});
  };

  // steps
  if (c.steps == 0)
    add("steps", check_status::off, "contract.steps = 0: the number of steps is not checked");
  else
    add("steps", check_status::observed,
        "the steps of the metrics lines against contract.steps = " + std::to_string(c.steps));

  // tokens
  if (c.tokens_per_step == 0) {
    add("tokens", check_status::off,
        "contract.tokens_per_step = 0: tokens per step are not checked");
  } else if (!regex) {
    add("tokens", check_status::observed,
        "each metrics line's \"tokens\" against contract.tokens_per_step = "
          + std::to_string(c.tokens_per_step) + " (a line without it counts 0 tokens)");
  } else if (captures(m, "tokens")) {
    add("tokens", check_status::observed,
        "the regex's tokens field against contract.tokens_per_step = "
          + std::to_string(c.tokens_per_step));
  } else if (m.tokens_per_step == c.tokens_per_step) {
    add("tokens", check_status::vacuous,
        "metrics.regex has no tokens field: every step is credited metrics.tokens_per_step = "
          + std::to_string(m.tokens_per_step)
          + ", the task's own constant, so the check compares contract.tokens_per_step with "
            "itself and cannot fail");
  } else {
    add("tokens", check_status::fails_always,
        "metrics.regex has no tokens field: every step is credited metrics.tokens_per_step = "
          + std::to_string(m.tokens_per_step) + ", not contract.tokens_per_step = "
          + std::to_string(c.tokens_per_step) + ", so every trial fails it");
  }

  // global_batch, params, layers: declared by the final line (json_lines only)
  auto declared = [&](const char* key, std::uint64_t want) {
    std::string name = std::string{"contract."} + key;
    if (want == 0)
      add(key, check_status::off, name + " = 0: not checked");
    else if (regex)
      add(key, check_status::vacuous,
          "metrics.format = \"regex\" has no final line, so the workload never declares " + std::string{key}
            + " and " + name + " = " + std::to_string(want) + " cannot fail");
    else if (!m.require_final_line)
      add(key, check_status::partial,
          "the final line's \"" + std::string{key} + "\" against " + name + " = "
            + std::to_string(want)
            + ", only when a trial prints a final line (metrics.require_final_line = false: a "
              "trial without one passes it)");
    else
      add(key, check_status::observed,
          "the final line's \"" + std::string{key} + "\" against " + name + " = "
            + std::to_string(want));
  };
  declared("global_batch", c.global_batch);
  declared("params", c.params);
  declared("layers", c.layers);

  // loss
  const bool loss_seen = !regex || captures(m, "loss");
  const std::string no_loss =
    "metrics.regex has no loss field: every step reports a loss of 0, so the check cannot fail";
  add("loss_non_finite", loss_seen ? check_status::observed : check_status::vacuous,
      loss_seen ? "every step's loss must be finite" : no_loss);
  add("loss_not_falling", loss_seen ? check_status::observed : check_status::vacuous,
      loss_seen ? "the loss must fall where the baseline's reference falls" : no_loss);
  switch (c.loss_mode) {
    case loss_mode::pointwise:
      add("loss_drift", loss_seen ? check_status::observed : check_status::vacuous,
          loss_seen ? "the loss at each checkpoint against the baseline's reference" : no_loss);
      break;
    case loss_mode::window:
      add("loss_drift", loss_seen ? check_status::observed : check_status::vacuous,
          loss_seen ? "the mean loss over each window of contract.loss_window = "
                        + std::to_string(c.loss_window)
                        + " steps against the baselines' (contract.loss_mode = \"window\")"
                    : no_loss);
      break;
    case loss_mode::eval: {
      // A missing eval loss is a violation (tuning::check_contract), never a pass.
      const bool eval_seen = !regex || captures(m, "eval_loss");
      add("loss_drift", eval_seen ? check_status::observed : check_status::fails_always,
          eval_seen ? std::string{"the workload's eval loss (metrics field eval_loss) at "}
                        + (c.eval_steps.empty() ? "every step the baselines reported it"
                                                : "contract.eval_steps")
                        + " against the baselines' (contract.loss_mode = \"eval\")"
                    : "contract.loss_mode = \"eval\" but metrics.regex has no eval_loss field: "
                      "no trial reports an eval loss, so every trial fails it");
      break;
    }
  }

  // timed_window
  std::string window = "[" + std::to_string(c.timed_first) + ", " + std::to_string(c.timed_last)
                       + "]";
  if (c.steps == 0)
    add("timed_window", check_status::off,
        "contract.steps = 0: the timed window is not checked");
  else if (regex)
    add("timed_window", check_status::partial,
        "the steps of the window " + window
          + " must be reported; a regex task has no final line (\"timed_steps\") and no warm-up "
            "field, so a workload that times another window or calls a step of it warm-up cannot "
            "be seen");
  else
    add("timed_window", check_status::observed,
        "the window " + window
          + " fully reported, the final line's \"timed_steps\" and the steps' \"warmup\" marks");

  // step_times and clock
  const bool time_seen = !regex || captures(m, "step_time_s") || captures(m, "step_time_ms");
  if (!time_seen)
    add("step_times", check_status::fails_always,
        "metrics.regex has no step_time_s or step_time_ms field: every step reports 0 s, which "
        "is not a positive step time");
  else if (c.simulated_time)
    add("step_times", check_status::partial,
        "step times must be positive; contract.simulated_time = true: not against wall time");
  else
    add("step_times", check_status::observed,
        "step times positive and adding up to at most (1 + contract.wall_tolerance) x wall time");
  if (c.simulated_time)
    add("clock", check_status::off,
        "contract.simulated_time = true: step times are not checked against the harness clock");
  else if (!c.clock_check)
    add("clock", check_status::off, "waived by the task (contract.clock_check = false)");
  else if (!time_seen)
    add("clock", check_status::fails_always,
        "metrics.regex has no step time field: the reported 0 s never agrees with the harness "
        "clock");
  else
    add("clock", check_status::observed,
        "the timed window's median step against the harness clock's intervals between metrics "
        "lines");
  return out;
}

std::vector<check_coverage> vacuous_checks(const task_spec& task) {
  std::vector<check_coverage> out;
  for (auto& c : contract_coverage(task))
    if (c.status == check_status::partial || c.status == check_status::vacuous
        || c.status == check_status::fails_always)
      out.push_back(std::move(c));
  return out;
}

std::vector<std::string> work_enforced_by(const task_spec& task) {
  std::vector<std::string> out;
  for (const auto& e : task.constraints)
    out.push_back("constraint '" + e + "' (checked before every launch; a configuration that "
                  "breaks it never runs)");
  for (const auto& [name, value] : task.constants)
    out.push_back("constant " + name + " = " + to_string(value)
                  + " (fixed, part of the contract; rendered where argv and env name it)");
  return out;
}

} // namespace infrarsi::tuning
