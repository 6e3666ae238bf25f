#!/usr/bin/env bash
# bench/nodes_wall.sh — wall time of `infrarsi tune` with N node slots against one, same task and
# seed (issue 13). The task is config/tasks/sim-dense-1node.toml with every trial made to last at
# least SLEEP seconds of wall time (`sh -c "sleep SLEEP && exec infrarsi-sim ..."`), so that the
# simulator's millisecond trials do not hide what N slots buy; the simulator's step times stay
# SIMULATED seconds. The workload is copied outside any git repository (apply commits nothing).
#
# Usage: bench/nodes_wall.sh [--nodes N] [--trials T] [--sleep S] [--seed K] [--out FILE]
# Defaults: N 4, T 40, S 1.0, K 1, FILE bench/results/nodes_wall.md. Needs build/bin/infrarsi
# (scripts/setup builds it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nodes=4; trials=40; sleep_s=1.0; seed=1; out="${here}/bench/results/nodes_wall.md"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --trials) trials="$2"; shift 2 ;;
    --sleep) sleep_s="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "bench/nodes_wall.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bin="${here}/build/bin/infrarsi"
[[ -x "$bin" ]] || { echo "bench/nodes_wall.sh: $bin missing: run scripts/setup" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -a "${here}/workloads/sim" "$work/sim"
sim="$(readlink -f "${here}/workloads/sim/.bin/infrarsi-sim")"
sed -e "s#\.\./\.\./workloads/sim#${work}/sim#g" \
    -e "s#^argv = \[\"\.bin/infrarsi-sim\",#argv = [\"/bin/sh\", \"-c\", \"sleep ${sleep_s} \&\& exec \\\\\"\$0\\\\\" \\\\\"\$@\\\\\"\", \"${sim}\",#" \
    "${here}/config/tasks/sim-dense-1node.toml" > "$work/task.toml"
grep -q '"/bin/sh"' "$work/task.toml" || { echo "bench/nodes_wall.sh: could not rewrite argv" >&2; exit 1; }

run() { # slots -> "wall_s promoted_line"
  local slots="$1" store="$work/store-$1" start end
  start=$(date +%s.%N)
  "$bin" tune "$work/task.toml" --store "$store" --nodes "$slots" --trials "$trials" --seed "$seed" \
    --quiet > "$work/summary-$slots.txt"
  end=$(date +%s.%N)
  echo "$(echo "$end - $start" | bc -l)"
}
echo "nodes 1 ..." >&2; w1=$(run 1)
echo "nodes ${nodes} ..." >&2; wn=$(run "$nodes")
ratio=$(echo "$wn / $w1" | bc -l)
max_in_flight() { # the most attempts dispatched and not yet ended, from the event log
  "$bin" log dump "$(ls "$work/store-$1/runs")" --store "$work/store-$1" --json 2>/dev/null |
    python3 -c '
import json, sys
open_, best = set(), 0
for line in sys.stdin:
    e = json.loads(line)
    k, p = e.get("kind_id"), e.get("payload") or {}
    key = (p.get("trial_id"), p.get("attempt"))
    if k == 11: open_.add(key)
    elif k in (12, 13): open_.discard(key)
    best = max(best, len(open_))
print(best)'
}
m1=$(max_in_flight 1); mn=$(max_in_flight "$nodes")
mkdir -p "$(dirname "$out")"
{
  echo "# Wall time with ${nodes} node slots against 1 (bench/nodes_wall.sh)"
  echo
  echo "Task: config/tasks/sim-dense-1node.toml, every trial >= ${sleep_s} s of wall time; ${trials}"
  echo "search trials; seed ${seed}; $(nproc) cores; $(date -u +%Y-%m-%d)."
  echo "Command: \`bench/nodes_wall.sh --nodes ${nodes} --trials ${trials} --sleep ${sleep_s} --seed ${seed}\`"
  echo
  echo "| node slots | wall time (s) | most trials in flight | summary |"
  echo "|---|---|---|---|"
  printf '| 1 | %.1f | %s | %s |\n' "$w1" "$m1" "$(cut -c1-160 "$work/summary-1.txt")"
  printf '| %s | %.1f | %s | %s |\n' "$nodes" "$wn" "$mn" "$(cut -c1-160 "$work/summary-${nodes}.txt")"
  echo
  printf 'Ratio (%s slots / 1): **%.3f** (target <= 0.35).\n' "$nodes" "$ratio"
} > "$out"
cat "$out"
