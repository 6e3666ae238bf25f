#!/usr/bin/env python3
"""Writes bench/tables/data/sailor_validation.csv from the eth-easl/sailor repository.

Usage: bench/tables/sailor_extract.py GIT_DIR [COMMIT] > bench/tables/data/sailor_validation.csv

GIT_DIR is a clone (or bare mirror) of github.com/eth-easl/sailor; every
sailor/Planner/simulations/validation/**/plan_config_*.json of COMMIT (default HEAD) becomes one
row: the plan's layout (pipeline stages, tensor-parallel size per stage, data-parallel size,
micro-batch, global batch), its measured iteration time ("real", seconds) and peak GPU memory
("max_mem", bytes). Only the standard library; reads with `git show`, writes nothing else.
"""
import csv
import json
import subprocess
import sys

PREFIX = "sailor/Planner/simulations/validation/"
# GPU names of Sailor's plans as NVIDIA names them (GH-96: GH200 with 96 GB HBM3).
GPU_NAMES = {"GH-96": "GH200-96GB", "RTX-3090": "RTX-3090-24GB", "Titan-RTX": "Titan-RTX-24GB",
             "RTX-2080": "RTX-2080-8GB"}


def git(git_dir, *args):
    return subprocess.run(["git", "-C", git_dir, *args], check=True, capture_output=True,
                          text=True).stdout


def main():
    if len(sys.argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    git_dir = sys.argv[1]
    commit = git(git_dir, "rev-parse", sys.argv[2] if len(sys.argv) == 3 else "HEAD").strip()
    paths = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", commit, PREFIX).split("\n")
             if p.endswith(".json") and "/plan_config_" in p]
    out = sys.stdout
    out.write(f"# source: github.com/eth-easl/sailor  path: {PREFIX}**/plan_config_*.json  "
              f"commit: {commit}\n")
    out.write("# written by bench/tables/sailor_extract.py (one row per plan file, file named in "
              "plan_file); Sailor = Strati et al., SOSP 2025\n")
    out.write("# cluster clariden: CSCS Clariden, nodes of 4x GH200 96GB (plan GPU 'GH-96'); "
              "cluster mit: mixed RTX-3090 / Titan-RTX / RTX-2080 nodes (heterogeneous: gpu "
              "lists every type)\n")
    out.write("# models (Sailor llm_info.json, 1 micro-batch, TP 1): OPT-350 = 24 layers, hidden "
              "1024, seq 2048 (act_output_floats 2097152 = 2048 x 1024; layer params 12h^2+13h); "
              "GPT-Neo-2.7 = 32 layers, hidden 2560, seq 2048; 2 more pipeline units each "
              "(embedding, head)\n")
    out.write("# columns: nodes = plan N; tp = tensor-parallel size of every stage (tmp_per_stage); "
              "pp = num_stages; dp = data-parallel replicas per stage; n_gpus = tp x pp x dp; "
              "mbs = micro-batch; gbs = global batch (sequences per iteration)\n")
    out.write("# units: step_time_s = measured iteration time 'real' (s); peak_mem_bytes = measured "
              "'max_mem' (bytes, the largest GPU of the plan); red_grads_s = Sailor's gradient "
              "reduction time field (s); every plan ran (outcome ok; the files record no failure)\n")
    out.write("# as in the files: mit N3_D1 and N6_D2 hold identical real and max_mem; the N4_D4 "
              "plans' red_grads equals GPT-NEO N4_D4's real\n")
    out.write("# fixed work: rows with equal (cluster, model, nodes, gbs); the largest such subsets "
              "have 3 plans (OPT-350 on 16 and 32 clariden nodes at gbs 1024; mit 4 and 6 nodes)\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["cluster", "model", "nodes", "gpu", "gpus_per_node", "n_gpus", "gbs", "tp", "pp",
                "dp", "mbs", "step_time_s", "peak_mem_bytes", "red_grads_s", "layers_per_stage",
                "outcome", "plan_file"])
    rows = []
    for p in paths:
        d = json.loads(git(git_dir, "show", f"{commit}:{p}"))
        rel = p[len(PREFIX):]
        cluster = rel.split("/")[0]
        model = rel.split("/")[1] if cluster == "clariden" else "OPT-350"
        pl = d["pipeline_list"][0]
        tps = {cfg[1] for stage in pl["tmp_per_stage"] for cfg in stage}
        gpus = sorted({GPU_NAMES.get(g[0], g[0]) for stage in pl["tmp_per_stage"]
                       for cfg in stage for g in cfg[0]})
        per_node = sorted({g[1] for stage in pl["tmp_per_stage"] for cfg in stage
                           for g in cfg[0]})
        dps = set(pl["dp"])
        if len(tps) != 1 or len(dps) != 1:
            sys.stderr.write(f"{p}: stages differ in tp {tps} or dp {dps}: skipped\n")
            continue
        tp, dp, pp = tps.pop(), dps.pop(), pl["num_stages"]
        rows.append([cluster, model, d["N"], "+".join(gpus), "+".join(map(str, per_node)),
                     tp * pp * dp, d["gbs"], tp, pp, dp, d["mbs"], d["real"], d["max_mem"],
                     d.get("red_grads", ""),
                     "[" + ",".join(str(len(s)) for s in pl["layers_per_stage"]) + "]", "ok",
                     rel])
    rows.sort(key=lambda r: (r[0], r[1], r[2], r[6], r[8]))
    w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
