#!/usr/bin/python3
"""Dev tool: measure torch_gpt configurations, interleaved, with the machine's load recorded.

usage: bench.py --rounds 5 --out results.jsonl CONFIG [CONFIG ...]
CONFIG is NAME=WS:ENV:FLAGS, e.g.  'mb16=1:OPENBLAS_NUM_THREADS=1:--micro-batch 16'
(ENV is comma-separated K=V or empty, WORKLOAD_DIR=DIR runs DIR/train.py, e.g. a patched copy;
FLAGS are appended to train.py's argv).
Round r runs every config once (order rotated by r so no config always runs first). Before each
run it waits (up to --max-wait-s) until the CPUs are idle (< --idle-busy busy over 1 s). For each
run it records the per-run median step time over the timed steps (train.py's final line), the
peak memory, the losses, and the *foreign* CPU load: (all CPU time consumed on the machine during
the run - CPU time of the run's own processes) / wall time, in cores.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "INFRARSI_METRICS "


def cpu_busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]) - idle, sum(v[:8])


def busy_fraction(interval=3.0):
    b0, t0 = cpu_busy_jiffies()
    time.sleep(interval)
    b1, t1 = cpu_busy_jiffies()
    return (b1 - b0) / max(1, t1 - t0)


def run_one(name, spec, timeout):
    ws, env_s, flags = spec.split(":", 2)
    env = dict(os.environ)
    workdir = HERE
    for kv in filter(None, env_s.split(",")):
        k, v = kv.split("=", 1)
        if k == "WORKLOAD_DIR":  # run a patched copy of the workload
            workdir = v
        else:
            env[k] = v
    cmd = ["/usr/bin/python3", os.path.join(workdir, "train.py")] + shlex.split(flags)
    if int(ws) > 1:
        cmd = [os.path.join(HERE, "launch_local.sh"), ws] + cmd
    ru0 = os.times()
    b0, _ = cpu_busy_jiffies()
    w0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - w0
    b1, _ = cpu_busy_jiffies()
    ru1 = os.times()
    own = (ru1.children_user - ru0.children_user) + (ru1.children_system - ru0.children_system)
    total = (b1 - b0) / os.sysconf("SC_CLK_TCK")
    steps, final = [], None
    for line in p.stdout.splitlines():
        if line.startswith(PREFIX):
            r = json.loads(line[len(PREFIX):])
            (final := r) if r.get("event") == "final" else steps.append(r)
    rec = {"name": name, "spec": spec, "rc": p.returncode, "wall_s": wall,
           "own_cpu_s": own, "foreign_load_cores": max(0.0, (total - own) / wall),
           "loadavg": open("/proc/loadavg").read().split()[:3]}
    if final:
        rec.update(step_time_median_s=final["step_time_median_s"], final_loss=final["final_loss"],
                   losses=[s["loss"] for s in steps], tokens=[s["tokens"] for s in steps],
                   peak_memory_bytes=max(s["peak_memory_bytes"] for s in steps[final["timed_steps"][0]:]))
    else:
        rec["stderr_tail"] = p.stderr[-800:]
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-wait-s", type=float, default=120)
    ap.add_argument("--idle-busy", type=float, default=0.15)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--min-clean", type=int, default=0,
                    help="keep running extra rounds (up to --max-rounds) until every config has this many "
                         "runs with foreign load <= --max-foreign cores")
    ap.add_argument("--max-foreign", type=float, default=0.1)
    ap.add_argument("--max-rounds", type=int, default=20)
    ap.add_argument("--summarize", action="store_true", help="only print the table of --out")
    a = ap.parse_args()
    if a.summarize:
        return summarize(a.out, a.max_foreign, [c.split("=", 1)[0] for c in a.configs])
    configs = [c.split("=", 1) for c in a.configs]
    with open(a.out, "a") as out:
        clean = {name: 0 for name, _ in configs}
        try:  # resume: runs already in --out count (same name and spec)
            with open(a.out) as f:
                for line in f:
                    r = json.loads(line)
                    if (r["name"] in clean and dict(configs)[r["name"]] == r["spec"] and r["rc"] == 0
                            and r["foreign_load_cores"] <= a.max_foreign):
                        clean[r["name"]] += 1
        except FileNotFoundError:
            pass
        for r in range(a.max_rounds if a.min_clean else a.rounds):
            if a.min_clean and all(v >= a.min_clean for v in clean.values()):
                break
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for name, spec in order:
                if a.min_clean and clean[name] >= a.min_clean:
                    continue
                t0 = time.time()
                while busy_fraction() > a.idle_busy and time.time() - t0 < a.max_wait_s:
                    pass
                rec = run_one(name, spec, a.timeout)
                rec["round"] = r
                rec["waited_s"] = time.time() - t0
                if rec["rc"] == 0 and rec["foreign_load_cores"] <= a.max_foreign:
                    clean[name] += 1
                out.write(json.dumps(rec) + "\n")
                out.flush()
                print("%-24s round %d rc %s median %.3fs foreign %.2f cores" % (
                    name, r, rec["rc"], rec.get("step_time_median_s", float("nan")),
                    rec["foreign_load_cores"]), flush=True)


def summarize(path, max_foreign, names):
    runs = [json.loads(l) for l in open(path)]
    if names == ["all"]:
        names = list(dict.fromkeys(r["name"] for r in runs))
    print("| config | clean runs (all) | median step s | min | max | peak RSS MB | foreign load (clean) |")
    print("|---|---|---|---|---|---|---|")
    for n in names:
        rs = [r for r in runs if r["name"] == n]
        ok = [r for r in rs if r["rc"] == 0 and r["foreign_load_cores"] <= max_foreign]
        if not ok:
            print("| %s | 0 (%d) | | | | | |" % (n, len(rs)))
            continue
        t = [r["step_time_median_s"] for r in ok]
        print("| %s | %d (%d) | %.3f | %.3f | %.3f | %.0f | %.2f |" % (
            n, len(ok), len(rs), statistics.median(t), min(t), max(t),
            max(r["peak_memory_bytes"] for r in ok) / 1e6, max(r["foreign_load_cores"] for r in ok)))


if __name__ == "__main__":
    main()
