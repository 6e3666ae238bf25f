#!/usr/bin/env python3
"""bench/nodes_compare.py: search quality at several --nodes counts, side by side.

Reads the search_quality.json of runs of bench/search_quality that differ only in --nodes and
writes OUT/nodes.json and OUT/nodes.md: per policy and task, the mean over seeds of the
fraction of the optimum, the true speedup, trials to 90 %, the failed device-seconds share and
the simulated wall clock of the search, one column group per node count, and per policy the
geometric mean over tasks of the fraction of the optimum with its difference from the first
file (the target of issue 13: at most 0.03 below).

Usage: bench/nodes_compare.py A/search_quality.json B/search_quality.json [...] --out DIR
       [--target 0.03]
"""
import argparse
import json
import math
import os
import sys


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="search_quality.json files (first: the reference)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--target", type=float, default=0.03,
                    help="largest allowed drop of the geometric-mean fraction (default 0.03)")
    a = ap.parse_args()

    docs = []
    for path in a.inputs:
        with open(path) as f:
            docs.append(json.load(f))
    nodes = [d["settings"].get("nodes", 1) for d in docs]
    ref = docs[0]["settings"]
    for d, path in zip(docs[1:], a.inputs[1:]):
        s = d["settings"]
        for key in ("budget", "seeds", "policies"):
            if s[key] != ref[key]:
                sys.exit(f"nodes_compare: {path}: settings.{key} differs from {a.inputs[0]}")

    policies = ref["policies"]
    tasks = [t["name"] for t in docs[0]["tasks"]]
    cells = []  # per policy, task: one entry per node count
    summary = []
    for p in policies:
        per_nodes_fracs = []
        for d in docs:
            fr = []
            for c in d["aggregates"]:
                if c["policy"] == p and c["errors"] < c["runs"]:
                    fr.append(c["fraction_of_optimum"]["mean"])
            per_nodes_fracs.append(fr)
        gm = [geomean(fr) for fr in per_nodes_fracs]
        summary.append({
            "policy": p,
            "nodes": nodes,
            "geomean_fraction_of_optimum": gm,
            "difference_from_first": [g - gm[0] for g in gm],
            "target_drop": a.target,
            "target_met": all(gm[0] - g <= a.target for g in gm[1:]),
        })
        for t in tasks:
            row = {"policy": p, "task": t, "by_nodes": []}
            for n, d in zip(nodes, docs):
                c = next(c for c in d["aggregates"] if c["policy"] == p and c["task"] == t)
                row["by_nodes"].append({
                    "nodes": n,
                    "runs": c["runs"],
                    "errors": c["errors"],
                    "fraction_of_optimum": c["fraction_of_optimum"],
                    "true_speedup": c["true_speedup"],
                    "best_explored_true_speedup": c["best_explored_true_speedup"],
                    "trials_to_90pct_optimum": c["trials_to_90pct_optimum"],
                    "reached_90pct": c["reached_90pct"],
                    "promoted": c["promoted"],
                    "failed_device_share": c["failed_device_share"],
                    "clock_s": c.get("clock_s"),
                })
            cells.append(row)

    os.makedirs(a.out, exist_ok=True)
    out = {
        "benchmark": "search_quality_nodes/1",
        "inputs": [{"file": p, "command": d["command"], "nodes": n}
                   for p, d, n in zip(a.inputs, docs, nodes)],
        "budget": ref["budget"],
        "seeds": ref["seeds"],
        "policies": policies,
        "summary": summary,
        "cells": cells,
    }
    with open(os.path.join(a.out, "nodes.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")

    budget = ref["budget"]

    def reach(v):
        return f">{budget}" if v > budget else f"{v:.1f}"

    md = ["# Search quality by node count", ""]
    md.append("Commands (one per node count; raw runs in each directory's `search_quality.json`):")
    md.append("")
    for p, d, n in zip(a.inputs, docs, nodes):
        md.append(f"- `--nodes {n}`: `{d['command']}` -> `{os.path.relpath(p, a.out)}`")
    md.append(f"- this table: `bench/nodes_compare.py {' '.join(a.inputs)} --out {a.out}`")
    md.append("")
    md.append(f"Budget {budget} search trials, seeds {ref['seeds'][0]}..{ref['seeds'][-1]}; "
              "every run driven by decide::next_step over N simulated node slots "
              "(bench/run_driver.hpp). Means over the seeds. *of optimum*: true speedup of "
              "the promoted configuration / the task's optimum speedup. *to 90 %*: first "
              "search trial (in proposal order) reaching 90 % of the optimum's speedup "
              f"(>{budget}: not reached, counted as {budget + 1}), runs that reached it. "
              "*failed*: share of the search's device-seconds on failed trials. *clock*: "
              "simulated seconds until the last search trial ended.")
    md.append("")
    head = "| policy | task |"
    sep = "|---|---|"
    for n in nodes:
        head += f" of optimum (N={n}) | true speedup (N={n}) | to 90 % (N={n}) |" \
                f" failed (N={n}) | clock s (N={n}) |"
        sep += "---|---|---|---|---|"
    md += [head, sep]
    for row in cells:
        line = f"| `{row['policy']}` | `{row['task']}` |"
        for b in row["by_nodes"]:
            ok = b["runs"] - b["errors"]
            f = b["fraction_of_optimum"]
            line += (f" {f['mean']:.3f} [{f['min']:.2f}, {f['max']:.2f}] |"
                     f" {b['true_speedup']['mean']:.3f}x |"
                     f" {reach(b['trials_to_90pct_optimum']['mean'])} ({b['reached_90pct']}/{ok}) |"
                     f" {100 * b['failed_device_share']['mean']:.1f} % |")
            clock = b.get("clock_s")
            line += f" {clock['search']['mean']:.0f} |" if clock else " |"
        md.append(line)
    for s in summary:
        line = f"| `{s['policy']}` | **geometric mean** |"
        for g, diff in zip(s["geomean_fraction_of_optimum"], s["difference_from_first"]):
            line += f" **{g:.3f}** ({diff:+.3f}) | | | | |"
        md.append(line)
    md.append("")
    for s in summary:
        gm = s["geomean_fraction_of_optimum"]
        verdict = "met" if s["target_met"] else "MISSED"
        md.append(f"Target (geometric-mean fraction of the optimum at N={nodes[-1]} no more than "
                  f"{a.target:.2f} below N={nodes[0]}) for `{s['policy']}`: {gm[0]:.3f} -> "
                  f"{gm[-1]:.3f} ({gm[-1] - gm[0]:+.3f}): **{verdict}**.")
    md.append("")
    with open(os.path.join(a.out, "nodes.md"), "w") as f:
        f.write("\n".join(md))
    for s in summary:
        print(f"{s['policy']}: geometric-mean fraction of optimum "
              + ", ".join(f"N={n}: {g:.3f}" for n, g in zip(nodes, s["geomean_fraction_of_optimum"]))
              + (" (target met)" if s["target_met"] else " (target MISSED)"))


if __name__ == "__main__":
    main()
