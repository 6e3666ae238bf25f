#pragma once
/// @file cluster_launch.hpp
/// Launching a trial's ranks through the cluster's own engine (docs/node-runner.md "Launching
/// through Slurm and torchrun"): the command lines the trial launcher runs for
/// `workload.launcher = "slurm"` (one `srun` job step of the allocation infrarsi runs in) and
/// `"torchrun"` (one `torchrun` process that starts the ranks), and the parsers of what those
/// programs print: the per-rank labels of their output, srun's per-task exit reports, torchrun's
/// failure line. Pure functions (no I/O), so each is unit-tested with real values; the trial
/// launcher (trial_launcher.cpp) runs the commands.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::adapters {

/// What the srun command of a trial needs.
struct srun_plan {
  /// Ranks of the trial: srun's `--ntasks` (1..4096).
  int world_size = 1;
  /// Working directory of every rank (srun's `--chdir`).
  std::string workdir;
  /// The job step's name (srun's `--job-name`), e.g. "infrarsi-trial-7-0".
  std::string step_name;
  /// `workload.srun_args`, rendered: inserted after infrarsi's own options, before the program.
  std::vector<std::string> extra_args;
  /// The workload's argv, rendered; argv[0] is the program each rank executes.
  std::vector<std::string> argv;
};

/// The `/bin/sh` script every Slurm task runs before the workload (srun_command): it exports the
/// torchrun environment contract from Slurm's own variables of the task —
/// RANK = SLURM_PROCID, WORLD_SIZE = SLURM_NTASKS, LOCAL_RANK = SLURM_LOCALID, LOCAL_WORLD_SIZE =
/// this node's entry of SLURM_STEP_TASKS_PER_NODE ("2(x3),1" format; node SLURM_NODEID),
/// MASTER_ADDR = 127.0.0.1 for a one-node step, else the first host of SLURM_STEP_NODELIST
/// (`scontrol show hostnames`), where task 0 runs — and keeps MASTER_PORT as the launcher set it.
/// Task 0 then prints `INFRARSI_SLURM_STEP JOBID.STEPID` on its stderr (the launcher cancels
/// that step to stop the trial) and every task `exec`s the workload ("$@"). A task without
/// SLURM_PROCID exits 2 with a message; MASTER_ADDR that cannot be named exits 97.
const std::string& slurm_rank_script();

/// The marker task 0 prints before the workload runs: "INFRARSI_SLURM_STEP ".
inline constexpr std::string_view slurm_step_marker = "INFRARSI_SLURM_STEP ";

/// The command of a trial's Slurm job step:
/// `srun --ntasks=N --kill-on-bad-exit=1 --label --input=none --export=ALL --chdir=WORKDIR
/// --job-name=NAME EXTRA... /bin/sh -c SCRIPT infrarsi-rank ARGV...` (SCRIPT:
/// slurm_rank_script()). `--label` prefixes every output line with its task's rank, which the
/// launcher uses to write each rank's log and to read the reporting rank's metrics live;
/// `--kill-on-bad-exit=1` ends the step when a task fails (nobody waits for a lost peer);
/// `--export=ALL`: every task gets srun's environment, whatever SLURM_EXPORT_ENV says (an
/// `sbatch --export=NONE` script has it set to NONE).
std::vector<std::string> srun_command(const srun_plan& plan);

/// What the torchrun command of a trial needs.
struct torchrun_plan {
  /// `workload.torchrun_program`: the program (and its leading arguments), e.g. {"torchrun"} or
  /// {"/usr/bin/python3", "-m", "torch.distributed.run"}.
  std::vector<std::string> program = {"torchrun"};
  /// Ranks of the trial, all on this node: `--nproc_per_node`.
  int world_size = 1;
  /// The c10d rendezvous endpoint: the launcher's free port on 127.0.0.1.
  int port = 0;
  /// The rendezvous id, unique per trial and attempt, e.g. "infrarsi-7-0".
  std::string rdzv_id;
  /// torchrun's `--log_dir` (the trial directory's `torchrun/`).
  std::string log_dir;
  /// `workload.torchrun_args`, rendered: after infrarsi's flags, before `--no_python`.
  std::vector<std::string> extra_args;
  /// The workload's argv, rendered; run as is (`--no_python`).
  std::vector<std::string> argv;
};

/// The command of a trial run by torchrun: PROGRAM... `--nnodes=1 --nproc_per_node=N
/// --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:PORT --rdzv_id=ID --max_restarts=0 --tee=3
/// --log_dir=DIR` EXTRA... `--no_python` ARGV... (`--tee=3`: every line of a rank's stdout and
/// stderr is also printed with the prefix `[default<rank>]:`, which the launcher demultiplexes;
/// `--max_restarts=0`: a failed trial is not re-run inside the trial).
std::vector<std::string> torchrun_command(const torchrun_plan& plan);

/// The options infrarsi sets itself on srun (a `workload.srun_args` entry may not set them):
/// the option `arg` sets ("--ntasks" for "-n4", "--label" for "-l"), or "" when it is none of
/// them. Reserved: --ntasks (-n), --label (-l), --input (-i), --output (-o), --error (-e),
/// --unbuffered (-u), --kill-on-bad-exit (-K), --chdir (-D), --job-name (-J), --export, --jobid,
/// --pty.
std::string reserved_srun_option(const std::string& arg);

/// The same for `workload.torchrun_args`: --nnodes, --nproc_per_node, --rdzv_backend,
/// --rdzv_endpoint, --rdzv_id, --max_restarts, --tee, --redirects (-r), --log_dir, --no_python,
/// --standalone, --master_addr, --master_port, --node_rank (also spelled with '-' for '_').
std::string reserved_torchrun_option(const std::string& arg);

/// A line split at its rank label: srun's `--label` ("0: text", " 12: text") or torchrun's
/// `--tee` ("[default0]:text"). nullopt: the line has no label (the launcher's own message).
struct labelled_line {
  int rank = 0;
  std::string_view text;
};
std::optional<labelled_line> parse_srun_label(std::string_view line);
std::optional<labelled_line> parse_torchrun_label(std::string_view line);

/// One task report of srun on its stderr, e.g. "srun: error: node1: tasks 0-1: Exited with exit
/// code 3", "srun: error: node1: task 1: Segmentation fault", "srun: error: node1: task 0: Out
/// Of Memory".
struct srun_task_report {
  enum class kind_t : std::uint8_t {
    exited,    ///< "Exited with exit code N": code = N
    signalled, ///< a signal's description (strsignal, e.g. "Killed"): code = the signal
    oom,       ///< "Out Of Memory" (Slurm's cgroup OOM)
    other,     ///< anything else Slurm says about the task (code 0)
  };
  std::vector<int> ranks;
  kind_t kind = kind_t::other;
  int code = 0;
  /// Slurm's words, e.g. "Exited with exit code 3".
  std::string what;
};
std::optional<srun_task_report> parse_srun_task_report(std::string_view line);

/// torchrun's failure line ("... failed (exitcode: 3) local_rank: 1 (pid: 4711) of binary:
/// ..."): the rank and its exit code (negative: killed by that signal).
struct torchrun_failure {
  int rank = 0;
  int exit_code = 0;
};
std::optional<torchrun_failure> parse_torchrun_failure(std::string_view line);

} // namespace infrarsi::adapters
