#!/usr/bin/env bash
# Dev helper: start N ranks of a command on this machine with the torchrun environment contract
# (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT).
# If one rank exits non-zero, the others are killed; the exit status is that of the first rank
# that failed (e.g. 86 = out of memory), else 0.  The C++ node-runner does the same in production.
#
#   usage: launch_local.sh NPROC [--] COMMAND [ARGS...]
#   e.g.   OPENBLAS_NUM_THREADS=1 workloads/torch_gpt/launch_local.sh 2 /usr/bin/python3 \
#              workloads/torch_gpt/train.py --micro-batch 2
#   env:   MASTER_PORT (default: a free port chosen by the kernel)
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 NPROC [--] COMMAND [ARGS...]" >&2
  exit 2
fi
nproc=$1; shift
[ "${1:-}" = "--" ] && shift
case $nproc in ''|*[!0-9]*|0) echo "$0: NPROC must be a positive integer" >&2; exit 2;; esac
port=${MASTER_PORT:-$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 1
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
}
trap 'cleanup; exit 130' INT TERM

for ((r = 0; r < nproc; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$nproc LOCAL_WORLD_SIZE=$nproc \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done

status=0
live=("${pids[@]}")
while [ "${#live[@]}" -gt 0 ]; do
  done_pid=
  wait -n -p done_pid "${live[@]}"
  rc=$?
  [ -z "$done_pid" ] && break  # nothing left to wait for
  next=()
  for p in "${live[@]}"; do [ "$p" != "$done_pid" ] && next+=("$p"); done
  live=("${next[@]}")
  if [ "$rc" -ne 0 ]; then
    status=$rc
    echo "launch_local: rank pid $done_pid exited with status $rc; killing the other ranks" >&2
    cleanup
    wait 2>/dev/null
    break
  fi
done
exit "$status"
