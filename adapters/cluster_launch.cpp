#include "adapters/cluster_launch.hpp"

#include <signal.h>

#include <cstring>
#include <set>

namespace infrarsi::adapters {

namespace {

/// Parses a non-negative decimal integer of at most 9 digits (no sign, nothing else).
std::optional<int> small_number(std::string_view text) {
  if (text.empty() || text.size() > 9)
    return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

/// "--name" for "--name=value" and "--name"; "-x" for "-xVALUE" and "-x"; "" for a non-option.
std::string option_name(const std::string& arg) {
  if (arg.rfind("--", 0) == 0)
    return arg.substr(0, arg.find('='));
  if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-')
    return arg.substr(0, 2);
  return {};
}

/// Trims spaces at both ends.
std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ')
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

} // namespace

const std::string& slurm_rank_script() {
  // POSIX sh (dash): no arrays, no [[ ]]. "$0" is "infrarsi-rank", "$@" the workload's argv.
  static const std::string script =
      "RANK=${SLURM_PROCID:?\"not a Slurm task (no SLURM_PROCID)\"}\n"
      "WORLD_SIZE=${SLURM_NTASKS:?\"not a Slurm task (no SLURM_NTASKS)\"}\n"
      "LOCAL_RANK=${SLURM_LOCALID:-0}\n"
      "n=${SLURM_NODEID:-0}\n"
      "LOCAL_WORLD_SIZE=\n"
      "saved_ifs=$IFS\n"
      "IFS=,\n"
      "for item in ${SLURM_STEP_TASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-$SLURM_NTASKS}}; do\n"
      "  count=${item%%(*}\n"
      "  repeat=1\n"
      "  case $item in *'(x'*) repeat=${item#*(x}; repeat=${repeat%)};; esac\n"
      "  if [ \"$n\" -lt \"$repeat\" ]; then LOCAL_WORLD_SIZE=$count; break; fi\n"
      "  n=$((n - repeat))\n"
      "done\n"
      "IFS=$saved_ifs\n"
      "LOCAL_WORLD_SIZE=${LOCAL_WORLD_SIZE:-$WORLD_SIZE}\n"
      "if [ \"${SLURM_STEP_NUM_NODES:-1}\" = 1 ]; then\n"
      "  MASTER_ADDR=127.0.0.1\n"
      "else\n"
      "  MASTER_ADDR=$(scontrol show hostnames \"$SLURM_STEP_NODELIST\" | head -n 1)\n"
      "fi\n"
      "if [ -z \"$MASTER_ADDR\" ]; then\n"
      "  echo \"infrarsi: cannot name the first host of SLURM_STEP_NODELIST"
      "='$SLURM_STEP_NODELIST'\" >&2\n"
      "  exit 97\n"
      "fi\n"
      "export RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR\n"
      "if [ \"$RANK\" = 0 ]; then\n"
      "  echo \"INFRARSI_SLURM_STEP $SLURM_JOB_ID.$SLURM_STEP_ID\" >&2\n"
      "fi\n"
      "exec \"$@\"\n";
  return script;
}

std::vector<std::string> srun_command(const srun_plan& plan) {
  std::vector<std::string> cmd = {"srun",
                                  "--ntasks=" + std::to_string(plan.world_size),
                                  "--kill-on-bad-exit=1",
                                  "--label",
                                  "--input=none",
                                  "--export=ALL",
                                  "--chdir=" + plan.workdir,
                                  "--job-name=" + plan.step_name};
  cmd.insert(cmd.end(), plan.extra_args.begin(), plan.extra_args.end());
  cmd.insert(cmd.end(), {"/bin/sh", "-c", slurm_rank_script(), "infrarsi-rank"});
  cmd.insert(cmd.end(), plan.argv.begin(), plan.argv.end());
  return cmd;
}

std::vector<std::string> torchrun_command(const torchrun_plan& plan) {
  std::vector<std::string> cmd = plan.program;
  cmd.insert(cmd.end(),
             {"--nnodes=1", "--nproc_per_node=" + std::to_string(plan.world_size),
              "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:" + std::to_string(plan.port),
              "--rdzv_id=" + plan.rdzv_id, "--max_restarts=0", "--tee=3",
              "--log_dir=" + plan.log_dir});
  cmd.insert(cmd.end(), plan.extra_args.begin(), plan.extra_args.end());
  cmd.emplace_back("--no_python");
  cmd.insert(cmd.end(), plan.argv.begin(), plan.argv.end());
  return cmd;
}

std::string reserved_srun_option(const std::string& arg) {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"--ntasks", "-n"},
      {"--label", "-l"},
      {"--input", "-i"},
      {"--output", "-o"},
      {"--error", "-e"},
      {"--unbuffered", "-u"},
      {"--kill-on-bad-exit", "-K"},
      {"--chdir", "-D"},
      {"--job-name", "-J"},
      {"--export", ""},
      {"--jobid", ""},
      {"--pty", ""}};
  auto name = option_name(arg);
  if (name.empty())
    return {};
  for (const auto& [long_name, short_name] : names)
    if (name == long_name || (!short_name.empty() && name == short_name))
      return long_name;
  return {};
}

std::string reserved_torchrun_option(const std::string& arg) {
  static const std::vector<std::string> names = {
      "--nnodes",      "--nproc_per_node", "--rdzv_backend", "--rdzv_endpoint",
      "--rdzv_id",     "--max_restarts",   "--tee",          "--redirects",
      "--log_dir",     "--no_python",      "--standalone",   "--master_addr",
      "--master_port", "--node_rank"};
  auto name = option_name(arg);
  if (name == "-r")
    return "--redirects";
  if (name.rfind("--", 0) != 0)
    return {};
  for (auto& c : name)
    if (c == '-')
      c = '_';
  name.replace(0, 2, "--");
  for (const auto& n : names)
    if (name == n)
      return n;
  return {};
}

std::optional<labelled_line> parse_srun_label(std::string_view line) {
  std::size_t i = 0;
  while (i < line.size() && line[i] == ' ')
    ++i;
  auto digits_begin = i;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9')
    ++i;
  if (i == digits_begin || line.substr(i, 2) != ": ")
    return std::nullopt;
  auto rank = small_number(line.substr(digits_begin, i - digits_begin));
  if (!rank)
    return std::nullopt;
  return labelled_line{*rank, line.substr(i + 2)};
}

std::optional<labelled_line> parse_torchrun_label(std::string_view line) {
  if (line.empty() || line.front() != '[')
    return std::nullopt;
  auto close = line.find("]:");
  if (close == std::string_view::npos)
    return std::nullopt;
  auto inside = line.substr(1, close - 1);
  auto digits = inside.size();
  while (digits > 0 && inside[digits - 1] >= '0' && inside[digits - 1] <= '9')
    --digits;
  auto rank = small_number(inside.substr(digits));
  if (!rank)
    return std::nullopt;
  return labelled_line{*rank, line.substr(close + 2)};
}

std::optional<srun_task_report> parse_srun_task_report(std::string_view line) {
  // "srun: error: HOST: task 1: WHAT" or "srun: error: HOST: tasks 0-1,3: WHAT"
  constexpr std::string_view head = "srun: error: ";
  if (line.rfind(head, 0) != 0)
    return std::nullopt;
  auto rest = line.substr(head.size());
  auto host_end = rest.find(": task");
  if (host_end == std::string_view::npos)
    return std::nullopt;
  rest = rest.substr(host_end + 2);
  if (rest.rfind("tasks ", 0) == 0)
    rest.remove_prefix(6);
  else if (rest.rfind("task ", 0) == 0)
    rest.remove_prefix(5);
  else
    return std::nullopt;
  auto colon = rest.find(": ");
  if (colon == std::string_view::npos)
    return std::nullopt;
  srun_task_report report;
  std::set<int> ranks;
  auto list = rest.substr(0, colon);
  while (!list.empty()) {
    auto comma = list.find(',');
    auto item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    auto dash = item.find('-');
    auto first = small_number(item.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : small_number(item.substr(dash + 1));
    if (!first || !last || *last < *first || *last - *first > 65536)
      return std::nullopt;
    for (int r = *first; r <= *last; ++r)
      ranks.insert(r);
  }
  if (ranks.empty())
    return std::nullopt;
  report.ranks.assign(ranks.begin(), ranks.end());
  auto what = trim(rest.substr(colon + 2));
  report.what = std::string{what};
  constexpr std::string_view exited = "Exited with exit code ";
  if (what.rfind(exited, 0) == 0) {
    if (auto code = small_number(what.substr(exited.size()))) {
      report.kind = srun_task_report::kind_t::exited;
      report.code = *code;
    }
    return report;
  }
  if (what == "Out Of Memory") {
    report.kind = srun_task_report::kind_t::oom;
    return report;
  }
  constexpr std::string_view core = " (core dumped)";
  auto name = what;
  if (name.size() > core.size() && name.substr(name.size() - core.size()) == core)
    name.remove_suffix(core.size());
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* text = ::strsignal(sig);
    if (text != nullptr && name == text) {
      report.kind = srun_task_report::kind_t::signalled;
      report.code = sig;
      break;
    }
  }
  return report;
}

std::optional<torchrun_failure> parse_torchrun_failure(std::string_view line) {
  constexpr std::string_view head = "failed (exitcode: ";
  auto at = line.find(head);
  if (at == std::string_view::npos)
    return std::nullopt;
  auto rest = line.substr(at + head.size());
  bool negative = !rest.empty() && rest.front() == '-';
  if (negative)
    rest.remove_prefix(1);
  auto close = rest.find(')');
  auto code = small_number(rest.substr(0, close));
  constexpr std::string_view local = ") local_rank: ";
  if (!code || close == std::string_view::npos || rest.substr(close, local.size()) != local)
    return std::nullopt;
  rest = rest.substr(close + local.size());
  auto end = rest.find_first_not_of("0123456789");
  auto rank = small_number(rest.substr(0, end));
  if (!rank)
    return std::nullopt;
  return torchrun_failure{*rank, negative ? -*code : *code};
}

} // namespace infrarsi::adapters
