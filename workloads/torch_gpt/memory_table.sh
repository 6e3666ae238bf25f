#!/bin/sh
# Dev tool: peak RSS per rank of the default model (6 x 384, global batch 16 x 256) by
# micro-batch and activation checkpointing, with glibc's default allocator and with
# MALLOC_MMAP_THRESHOLD_=4194304, then the OOM boundary under a per-rank cap.
# Usage: workloads/torch_gpt/memory_table.sh [CAP_BYTES]   (default cap 1.5 GB)
# Prints one line per configuration: the max over steps 1..3 of peak_memory_bytes (VmHWM, reset
# each step), or the exit status (86 = out of memory under the cap).
cd "$(dirname "$0")" || exit 2
cap=${1:-1500000000}
py=/usr/bin/python3
peak() { # ENV... -- FLAGS...
  out=$(env "$@" 2>/dev/null)
  rc=$?
  if [ $rc -ne 0 ]; then echo "exit $rc"; return; fi
  echo "$out" | grep '^INFRARSI_METRICS {"step"' | sed 's/.*"peak_memory_bytes": \([0-9]*\).*"warmup": \(true\|false\).*/\2 \1/' \
    | awk '$1=="false" && $2>m {m=$2} END {printf "%.0f MB\n", m/1e6}'
}
for alloc in default 4194304; do
  for ckpt in 0 1; do
    for mb in 1 4 8 16; do
      if [ $alloc = default ]; then e=""; else e="MALLOC_MMAP_THRESHOLD_=$alloc"; fi
      printf 'alloc=%s ckpt=%s mb=%-2s peak: ' $alloc $ckpt $mb
      peak $e $py train.py --steps 4 --warmup-steps 1 --micro-batch $mb --activation-checkpointing $ckpt
    done
  done
done
echo "per-rank cap $cap bytes:"
for alloc in default 4194304; do
  for ckpt in 0 1; do
    for mb in 8 16; do
      if [ $alloc = default ]; then e=""; else e="MALLOC_MMAP_THRESHOLD_=$alloc"; fi
      printf 'alloc=%s ckpt=%s mb=%-2s under the cap: ' $alloc $ckpt $mb
      peak $e $py train.py --steps 4 --warmup-steps 1 --micro-batch $mb --activation-checkpointing $ckpt --memory-cap-bytes $cap
    done
  done
done
