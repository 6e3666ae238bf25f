#!/usr/bin/env bash
# Quick self-test (< 60 s on 2 CPU cores): tiny model, 3 steps.
#  1. (micro-batch 1, world size 1) vs (micro-batch 2, world size 2) vs (micro-batch 1, world size 2,
#     accumulation 2): per-step losses must agree within relative tolerance 1e-5 and tokens must
#     be equal (work-preserving configurations).
#  2. a memory cap far below the footprint must exit 86 with an INFRARSI_OOM line (1 rank).
# Exits non-zero on any failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tiny=(--steps 3 --warmup-steps 1 --layers 2 --d-model 64 --heads 2 --seq-len 64 --global-batch 4)

"$py" "$here/train.py" "${tiny[@]}" --micro-batch 1 > "$tmp/ws1_mb1.out"
"$here/launch_local.sh" 2 "$py" "$here/train.py" "${tiny[@]}" --micro-batch 2 > "$tmp/ws2_mb2.out"
"$here/launch_local.sh" 2 "$py" "$here/train.py" "${tiny[@]}" --micro-batch 1 > "$tmp/ws2_mb1.out"
for f in ws1_mb1 ws2_mb2 ws2_mb1; do
  grep -q '"event": "final", "status": "ok"' "$tmp/$f.out" || { echo "selftest: $f has no final ok line" >&2; exit 1; }
done
"$py" "$here/compare.py" "$tmp/ws1_mb1.out" "$tmp/ws2_mb2.out" "$tmp/ws2_mb1.out" --rtol 1e-5

set +e
"$py" "$here/train.py" "${tiny[@]}" --micro-batch 1 --memory-cap-bytes 100000000 > "$tmp/oom.out" 2> "$tmp/oom.err"
rc=$?
set -e
if [ "$rc" -ne 86 ] || ! grep -q '^INFRARSI_OOM ' "$tmp/oom.err"; then
  echo "selftest: memory cap 1e8 bytes: expected exit 86 and an INFRARSI_OOM line, got $rc" >&2
  cat "$tmp/oom.err" >&2
  exit 1
fi
echo "selftest: OOM path ok (exit 86): $(grep '^INFRARSI_OOM ' "$tmp/oom.err" | head -c 200)"
echo "selftest: ok"
