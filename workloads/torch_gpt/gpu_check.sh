#!/usr/bin/env bash
# GPU check: run the workload on CUDA, 1 rank, for a few steps, and print its metrics lines.
# Picks the first interpreter among $PYTHON, /usr/bin/python3, python3, python whose torch has
# CUDA available.  Exit status: 0 ok; 3 no interpreter with a CUDA-enabled torch; 1 a run did not
# end with the status it should (the third run must hit its memory cap: 86).  Well under 5 minutes:
# each run is capped at 120 s by `timeout`.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

py=
for cand in ${PYTHON:-} /usr/bin/python3 python3 python; do
  command -v "$cand" > /dev/null 2>&1 || continue
  if "$cand" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' > /dev/null 2>&1; then
    py=$cand
    break
  fi
  echo "gpu_check: $cand: $("$cand" -c 'import torch; print("torch", torch.__version__, "cuda available:", torch.cuda.is_available(), "built with cuda:", torch.version.cuda)' 2>&1 | tail -n 1)"
done
if [ -z "$py" ]; then
  echo "gpu_check: FAIL: no python interpreter with a CUDA-enabled torch and a visible GPU" >&2
  exit 3
fi
echo "gpu_check: using $py: $("$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))')"

status=0
run() {  # run EXPECTED_STATUS ARGS...
  local want=$1; shift
  echo "gpu_check: run: train.py --device cuda --steps 6 --warmup-steps 2 $*"
  timeout 120 "$py" "$here/train.py" --device cuda --steps 6 --warmup-steps 2 "$@"
  local rc=$?
  echo "gpu_check: exit status $rc (expected $want)"
  if [ $rc -ne "$want" ]; then status=1; fi
}
run 0 --micro-batch 16                            # default model, whole global batch in one micro-batch
run 0 --micro-batch 4 --dtype bf16                # accumulation 4, bf16 autocast
run 86 --micro-batch 16 --memory-cap-bytes 200000000   # must print INFRARSI_OOM and exit 86
if [ $status -eq 0 ]; then echo "gpu_check: ok"; else echo "gpu_check: FAIL" >&2; fi
exit $status
