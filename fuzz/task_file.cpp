// libFuzzer target: task-file text (TOML) through adapters::load_task_text, the reader
// `infrarsi replay` and a resume use on the text logged in ContractLocked. Whatever loads is then
// used the way init and the planner use it. Any crash, sanitizer report or escaping exception is
// a finding: bad input must end in an error naming the file and key, nothing else.

#include <cstddef>
#include <cstdint>
#include <string>

#include "adapters/task_file.hpp"
#include "tuning/expr.hpp"
#include "tuning/planner.hpp"
#include "tuning/search_space.hpp"

using namespace infrarsi;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  // The referenced files need not exist (as for a log read back), so nothing outside is read.
  auto task = adapters::load_task_text(text, "/nonexistent/infrarsi-fuzz/task.toml");
  if (!task)
    return 0;
  // Constraints at the defaults, as the loader checks them, and on one single change each.
  auto base = tuning::baseline_configuration(*task);
  (void)tuning::constraint_violation(*task, base);
  for (const auto& c : tuning::single_changes(*task, base))
    (void)tuning::constraint_violation(*task, c);
  // The planner's features and its enumeration of candidates (a bounded sample).
  tuning::feature_space fs{*task, nullptr};
  (void)fs.point(*task, base);
  (void)tuning::enumerate_candidates(*task, 1, 64);
  // Templates rendered with the defaults, as the launcher renders argv and env.
  auto vars = tuning::template_vars(*task, base.knobs,
                                    {{"trial_id", "1"},
                                     {"attempt", "0"},
                                     {"trial_dir", "/t"},
                                     {"rank", "0"},
                                     {"world_size", "1"},
                                     {"memory_cap_bytes", "0"}});
  std::string why;
  for (const auto& a : task->workload.argv)
    (void)tuning::render_template(a, vars, why);
  (void)tuning::render_template(task->workload.world_size, vars, why);
  return 0;
}
