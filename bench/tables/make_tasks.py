#!/usr/bin/env python3
"""Writes bench/tables/tasks/*.toml: one task per fixed-work subset of the real tables in
bench/tables/data/ (bench/README.md "Real tables"). Run from anywhere; rewrites every task file.

Each task's knobs are the table's layout columns that vary within the subset, with the distinct
values the subset records; its default is the user's natural start: TP 1, PP 1, micro-batch 1
(activation checkpointing as the authors started), or, when that row is not an ok row of the
subset, the smallest ok layout (smallest TP, then PP, then micro-batch). The constraints are the
layout rules (GPUs divisible by TP x PP, global batch divisible by micro-batch x DP). [model] is
the model's shape as the table's header and its source repository state it, never tuned.
"""
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 1 << 30


def read(name):
    with open(os.path.join(HERE, "data", name)) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace('"', '\\"') + '"'
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return str(v)


KNOB_INFO = {
    "tp": ("tp", ["parallelism", "memory-saver"], "tensor-parallel size"),
    "pp": ("pp", ["parallelism", "memory-saver"],
           "pipeline-parallel stages (DP = GPUs / (TP x PP))"),
    "micro_batch": ("micro_batch", ["memory-hungry"], "sequences per micro-batch"),
    "recompute": ("recompute", ["memory-saver"],
                  "activation checkpointing (Megatron --checkpoint-activations)"),
    "zero_stage": ("zero_stage", ["memory-saver"], "ZeRO stage (DeepSpeed)"),
    "pipeline_engine": (None, ["parallelism"],
                        "DeepSpeed's pipeline engine (false: no pipeline engine, the table's "
                        "pp = 0; needs PP 1)"),
}


def write_task(spec):
    """spec: dict with name, description, comments, table, where, match (knob -> column),
    knobs (name -> values), default, time_column, memory_column, memory_unit, gpus, constants,
    constraints, model, hardware, device_memory, seq_len, global_batch, notes."""
    out = []
    for c in spec["comments"]:
        out.append(("# " + c).rstrip())
    out.append("# Written by bench/tables/make_tasks.py; the benchmark: bench/tables/run.")
    out.append(f'name = "{spec["name"]}"')
    out.append(f'description = {toml_value(spec["description"])}')
    out.append("")
    out.append("constraints = [")
    for c in spec["constraints"]:
        out.append(f"  {toml_value(c)},")
    out.append("]")
    out.append("")
    out.append("# The trial is replayed from the table (bench/table_evaluator.hpp; bench/tables/replay "
               "does the")
    out.append("# same as a program): --where selects the fixed-work subset, --match the "
               "configuration's row.")
    out.append("[workload]")
    out.append('workdir = ".."')
    out.append('launcher = "command"')
    out.append(f'world_size = "{spec["gpus"]}"')
    argv = ["./replay", "--table", "data/" + spec["table"]]
    for col, v in spec["where"]:
        argv += ["--where", f"{col}={v}"]
    for col, tmpl in spec["match"]:
        argv += ["--match", f"{col}={tmpl}"]
    argv += ["--time-column", spec["time_column"]]
    if spec.get("memory_column"):
        argv += ["--memory-column", spec["memory_column"], "--memory-unit",
                 str(spec.get("memory_unit", 1))]
    argv += ["--gpus", str(spec["gpus"]),
             "--tokens-per-step", str(spec["global_batch"] * spec["seq_len"]),
             "--trial-id", "{trial_id}", "--attempt", "{attempt}"]
    lines = [toml_value(argv[0])] + [", ".join(toml_value(a) for a in argv[i:i + 2])
                                     for i in range(1, len(argv), 2)]
    out.append("argv = [" + ",\n        ".join(lines) + "]")
    out.append("")
    out.append("[metrics]")
    out.append('format = "json_lines"')
    out.append("")
    out.append("[constants]")
    for k, v in spec["constants"].items():
        out.append(f"{k} = {toml_value(v)}")
    out.append("")
    out.append("# The contracted work: 10 steps of the table's global batch (steps 2..9 timed). "
               "The step")
    out.append("# times are the table's measured seconds, replayed: no harness clock applies "
               "(simulated_time).")
    out.append("[contract]")
    out.append("steps = 10")
    out.append(f'tokens_per_step = {spec["global_batch"] * spec["seq_len"]}')
    out.append("timed_steps = [2, 9]")
    out.append('loss_checkpoints = "all"')
    out.append("loss_rtol = 0.01")
    out.append("simulated_time = true")
    out.append("")
    out.append("[scope]")
    out.append("editable = []")
    out.append('frozen = ["replay", "data/*.csv"]')
    out.append("")
    hw = spec["hardware"]
    out.append("[hardware]")
    for k in ["gpu", "gpu_memory_bytes", "gpus_per_node", "nodes", "interconnect",
              "peak_tflops", "intra_node_gb_per_s", "inter_node_gb_per_s"]:
        if k in hw:
            if k + "_note" in hw:
                out.append("# " + hw[k + "_note"])
            out.append(f"{k} = {toml_value(hw[k])}")
    out.append("simulated = false")
    out.append("")
    out.append("[model]")
    for note in spec.get("model_notes", []):
        out.append("# " + note)
    for k, v in spec["model"].items():
        out.append(f"{k} = {toml_value(v)}")
    out.append("")
    out.append("[limits]")
    out.append("# The GPU's memory: where the planner's memory model places OOM trials.")
    out.append(f'device_memory_bytes = {toml_value(spec["device_memory"])}')
    out.append("timeout_s = 60")
    out.append("")
    for name, values in spec["knobs"].items():
        role, tags, desc = KNOB_INFO[name]
        out.append("[[knobs]]")
        out.append(f'name = "{name}"')
        if all(isinstance(v, str) for v in values):
            out.append('type = "choice"')
            out.append(f"values = {toml_value(values)}")
        elif all(isinstance(v, bool) for v in values):
            out.append('type = "bool"')
            out.append('true_text = "1"')
            out.append('false_text = "0"')
        else:
            out.append('type = "int"')
            out.append(f"values = {toml_value(values)}")
        out.append(f"default = {toml_value(spec['default'][name])}")
        if role:
            out.append(f'role = "{role}"')
        out.append(f"tags = {toml_value(tags)}")
        out.append(f"description = {toml_value(desc)}")
        out.append("")
    path = os.path.join(HERE, "tasks", spec["name"] + ".toml")
    with open(path, "w") as f:
        f.write("\n".join(out).rstrip() + "\n")
    return path


def distinct(rows, col, cast=int):
    return sorted({cast(r[col]) for r in rows if r[col] != ""})


def natural_start(rows, ok, keys, prefer):
    """prefer: the natural start (dict col -> value); if no ok row has it, the smallest ok
    layout by keys order."""
    def match(r, d):
        return all(str(r[c]) == str(v) for c, v in d.items())
    if any(ok(r) and match(r, prefer) for r in rows):
        return prefer, True
    t = min(tuple(int(r[k]) for k in keys) for r in rows if ok(r))
    return dict(zip(keys, t)), False


def amp_tasks():
    specs = []
    # GPT-2 350M on 16 T4.
    rows = read("amp_gpt2-350m_16xT4_g4dn.csv")
    start, natural = natural_start(rows, lambda r: r["outcome"] == "ok", ["tp", "pp", "mbs"],
                                   {"tp": 1, "pp": 1, "mbs": 1})
    specs.append(dict(
        name="table-amp-gpt2-350m-16xT4",
        description="GPT-2 350M, Megatron-LM 1.1.5 + DeepSpeed, 4 x 4 T4-16GB (AWS g4dn.12xlarge), "
                    "global batch 32 (replayed from AMP's measured trials)",
        comments=[
            "Real table: AMP's homogeneous experiment (Li et al., NeurIPS 2022), every layout of "
            "16 GPUs",
            "measured once on AWS: bench/tables/data/amp_gpt2-350m_16xT4_g4dn.csv (its # lines: "
            "source",
            "github.com/DachengLi1/AMP src/results/homogeneous_results.txt, commit 72eeea45). "
            "One fixed-work subset",
            "(every row: 16 GPUs, global batch 32). 53 legal layouts, 47 ok, 5 failed (AMP does "
            "not say why;",
            "they grow with micro-batch: memory-like, replayed as OOM), 1 missing (replayed as "
            "absent).",
            "Default: TP 1, PP 1, micro-batch 1 (an ok row: the natural start; AMP's own first "
            "pick).",
        ],
        table="amp_gpt2-350m_16xT4_g4dn.csv",
        where=[("n_gpus", 16), ("gbs", 32)],
        match=[("tp", "{tp}"), ("pp", "{pp}"), ("mbs", "{micro_batch}")],
        knobs={"tp": distinct(rows, "tp"), "pp": distinct(rows, "pp"),
               "micro_batch": distinct(rows, "mbs")},
        default={"tp": start["tp"], "pp": start["pp"], "micro_batch": start["mbs"]},
        time_column="step_time_s", gpus=16,
        constants={"gpus": 16, "global_batch": 32},
        constraints=["gpus % (tp * pp) == 0",
                     "global_batch % (micro_batch * (gpus / (tp * pp))) == 0"],
        global_batch=32, seq_len=1024,
        model={"name": "gpt2-350m", "architecture": "dense", "layers": 24, "hidden": 1024,
               "heads": 16, "ffn": 4096, "vocab": 52256, "seq_len": 1024, "global_batch": 32},
        model_notes=["The CSV header and AMP's src/homogeneous.py model_config: 24 layers, hidden "
                     "1024, 16 heads,",
                     "seq 1024, vocab 52256; ffn = 4 x hidden (GPT-2)."],
        hardware={"gpu": "T4-16GB", "gpu_memory_bytes": "15360MiB", "gpus_per_node": 4,
                  "nodes": 4, "interconnect": "pcie+ethernet",
                  "intra_node_gb_per_s": 6.25, "inter_node_gb_per_s": 6.25,
                  "intra_node_gb_per_s_note":
                      "The CSV header: AMP's cluster_info gives 50 Gb/s between and within nodes "
                      "(src/homogeneous.py:",
                  "inter_node_gb_per_s_note":
                      "50 * 1e9 / 32 floats per second) = 6.25 GB/s, as AMP's cost model takes it."},
        device_memory="15360MiB",
    ))
    # TransGAN on 16 V100.
    rows = read("amp_transgan_16gpu.csv")
    start, natural = natural_start(rows, lambda r: r["outcome"] == "ok", ["tp", "pp", "mbs"],
                                   {"tp": 1, "pp": 1, "mbs": 1})
    specs.append(dict(
        name="table-amp-transgan-16xV100",
        description="TransGAN generator (AMP het_model), Megatron-LM 1.1.5 + DeepSpeed, 4 x 4 "
                    "V100-16GB, global batch 64 (replayed from AMP's measured trials)",
        comments=[
            "Real table: AMP's heterogeneous-model experiment (layers of very uneven cost): "
            "bench/tables/data/",
            "amp_transgan_16gpu.csv (source github.com/DachengLi1/AMP src/results/"
            "het_model_results.txt, commit",
            "72eeea45). One fixed-work subset (16 GPUs, global batch 64): 65 legal layouts, 19 "
            "ok, 46 failed",
            "(memory-like: they grow with micro-batch, except the TP 4 x PP 1 rows; replayed as "
            "OOM).",
            "Default: TP 1, PP 1, micro-batch 1 (an ok row: the natural start).",
        ],
        table="amp_transgan_16gpu.csv",
        where=[("n_gpus", 16), ("gbs", 64)],
        match=[("tp", "{tp}"), ("pp", "{pp}"), ("mbs", "{micro_batch}")],
        knobs={"tp": distinct(rows, "tp"), "pp": distinct(rows, "pp"),
               "micro_batch": distinct(rows, "mbs")},
        default={"tp": start["tp"], "pp": start["pp"], "micro_batch": start["mbs"]},
        time_column="step_time_s", gpus=16,
        constants={"gpus": 16, "global_batch": 64},
        constraints=["gpus % (tp * pp) == 0",
                     "global_batch % (micro_batch * (gpus / (tp * pp))) == 0"],
        global_batch=64, seq_len=81,
        model={"name": "transgan-amp", "architecture": "dense", "layers": 24, "hidden": 1024,
               "heads": 4, "seq_len": 81, "global_batch": 64},
        model_notes=[
            "From AMP's source (github.com/DachengLi1/AMP, commit 72eeea45): src/het_model.py "
            "model_config",
            "(hidden 1024, depth [12,0,0,0,0,12] = 24 blocks, bottom 9), examples/"
            "ds_pretrain_transgan_pipe.sh",
            "(--gf_dim NHIDDEN, --g_depth 12,0,0,0,0,12, --bottom_width 9) and megatron/model/"
            "trans_gan_gen.py",
            "(ParallelTransGANGeneratorPipe: num_heads 4 by default, not overridden by "
            "pretrain_transgan.py;",
            "the first 12 blocks are width 1024 over bottom_width^2 = 81 tokens, the last 12 "
            "width 1024/64 = 16",
            "over (9 x 32)^2 = 82,944 tokens). A uniform transformer shape cannot describe both: "
            "layers, hidden,",
            "heads and seq_len are the 12 wide blocks' (seq 81), counted 24 times; the narrow "
            "blocks' activations",
            "(the likely cause of the failures) are not in it. No vocabulary (AMP's 52256 is "
            "its GPT config's).",
        ],
        hardware={"gpu": "V100-SXM2-16GB", "gpu_memory_bytes": "16GiB", "gpus_per_node": 4,
                  "nodes": 4, "interconnect": "nvlink+ethernet",
                  "intra_node_gb_per_s": 21.25, "inter_node_gb_per_s": 1.25,
                  "intra_node_gb_per_s_note":
                      "The CSV header: src/het_model.py cluster_info, 170 Gb/s within a node "
                      "(21.25 GB/s) and",
                  "inter_node_gb_per_s_note": "10 Gb/s between nodes (1.25 GB/s)."},
        device_memory="16GiB",
    ))
    return specs


def bigscience_tasks():
    specs = []
    rows = read("bigscience_1b3_8xV100.csv")
    for gpu, mem in (("V100-32GB", "32GiB"), ("V100-16GB", "16GiB")):
        sub = [r for r in rows if r["gpu"] == gpu]
        ok = lambda r: r["outcome"] == "ok"
        varying = {c: distinct(sub, c) for c in ("tp", "pp", "mbs", "act_ckpt")}
        knobs, match, default = {}, [], {}
        where = [("gpu", gpu), ("n_gpus", 8), ("gbs", 512)]
        names = {"tp": "tp", "pp": "pp", "mbs": "micro_batch", "act_ckpt": "recompute"}
        for col in ("tp", "pp", "mbs", "act_ckpt"):
            if len(varying[col]) > 1:
                knobs[names[col]] = ([False, True] if col == "act_ckpt" else varying[col])
                match.append((col, "{" + names[col] + "}"))
            else:
                where.append((col, varying[col][0]))
        if varying["act_ckpt"] == [1]:
            # Fixed on in the subset: a one-value knob, so that the prior sees it (its default
            # is no recomputation).
            knobs["recompute"] = ["full"]
            default["recompute"] = "full"
        # Natural start: TP 1, PP 1, micro-batch 1, activation checkpointing on (the authors'
        # first table runs with it).
        prefer = {"tp": 1, "pp": 1, "mbs": 1, "act_ckpt": 1}
        prefer = {k: v for k, v in prefer.items() if len(varying[k]) > 1}
        start, natural = natural_start(sub, ok, [k for k in ("tp", "pp", "mbs", "act_ckpt")
                                                 if len(varying[k]) > 1], prefer)
        for col, v in start.items():
            default[names[col]] = bool(v) if col == "act_ckpt" else v
        n_ok = sum(1 for r in sub if ok(r))
        n_oom = sum(1 for r in sub if r["outcome"] == "oom")
        short = "32gb" if gpu == "V100-32GB" else "16gb"
        constraints = ["gpus % (tp * pp) == 0" if "tp" in knobs else "gpus % pp == 0",
                       "global_batch % (micro_batch * (gpus / (tp * pp))) == 0" if "tp" in knobs
                       else "global_batch % (micro_batch * (gpus / pp)) == 0"]
        specs.append(dict(
            name=f"table-bigscience-1b3-8xV100-{short}",
            description=f"GPT 1.3B (BigScience tr3m), Megatron-DeepSpeed, 2 x 4 {gpu}, global "
                        "batch 512 (replayed from the authors' measurements)",
            comments=[
                "Real table: bench/tables/data/bigscience_1b3_8xV100.csv (source github.com/"
                "bigscience-workshop/bigscience",
                "experiments/tr3m-1B3.md, commit 9e64edec). Fixed-work subset: the "
                f"{gpu} rows (8 GPUs, global batch 512):",
                f"{len(sub)} rows, {n_ok} ok, {n_oom} OOM (the author's word); peak memory "
                "(mem_gb, the author's note) for ok rows.",
                "Step times have integer resolution (~3 % quantisation).",
                "Default: " + ", ".join(f"{names[c]} {v}" for c, v in start.items()) +
                (" (the natural start" + (", activation checkpointing on as in the authors' "
                                          "first table)" if "act_ckpt" in start else ")")
                 if natural else " (the natural start is not an ok row: the smallest ok layout)"),
            ],
            table="bigscience_1b3_8xV100.csv",
            where=where, match=match, knobs=knobs, default=default,
            time_column="sec_per_it", memory_column="mem_gb", memory_unit=GiB, gpus=8,
            constants={"gpus": 8, "global_batch": 512},
            constraints=constraints,
            global_batch=512, seq_len=2048,
            model={"name": "gpt-1b3-tr3m", "architecture": "dense", "layers": 24,
                   "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 50257, "seq_len": 2048,
                   "global_batch": 512},
            model_notes=["The CSV header (tr3m: 24 layers, hidden 2048, 16 heads, seq 2048, "
                         "vocab 50257); ffn = 4 x hidden (GPT)."],
            hardware={"gpu": "V100-SXM2-" + gpu.split("-")[1], "gpu_memory_bytes": mem,
                      "gpus_per_node": 4, "nodes": 2, "interconnect": "nvlink+omnipath"},
            device_memory=mem,
        ))
    return specs


def bloom_task():
    rows = read("bigscience_bloom176b-prequel_384xA100-80GB.csv")
    key = dict(nodes="48", nhidden_x_nlayers="14336x72", nheads="64", gbs="2048",
               date="2022-02-25")
    sub = [r for r in rows if all(r[k] == v for k, v in key.items())]
    ok = lambda r: r["outcome"] == "ok"
    start, natural = natural_start(sub, ok, ["tp", "pp", "mbs"], {"tp": 1, "pp": 1, "mbs": 1})
    configs = {(r["tp"], r["pp"], r["mbs"]) for r in sub}
    return dict(
        name="table-bloom-prequel-384xA100",
        description="BLOOM-prequel GPT (hidden 14336 x 72 layers, 64 heads), Megatron-DeepSpeed, "
                    "48 x 8 A100-SXM4-80GB, global batch 2048 (replayed from the authors' "
                    "measurements)",
        comments=[
            "Real table: bench/tables/data/bigscience_bloom176b-prequel_384xA100-80GB.csv "
            "(source github.com/",
            "bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md, commit "
            "9e64edec). The only",
            "comparable subset with several layouts: nodes 48, 14336x72, 64 heads, global batch "
            "2048, 2022-02-25",
            f"(sections 'GBS Variations' lines 773 and 798): {len(sub)} rows, {len(configs)} "
            "layouts (one measured twice:",
            "the geometric mean), 2 OOM (the author's word); ZeRO-1 and activation checkpointing "
            "on in every row.",
            "Default: " + ", ".join(f"{k} {v}" for k, v in start.items()) +
            " (TP 1, PP 1 cannot hold 181B on a GPU and is not in the table: the smallest ok "
            "layout).",
            "recompute (full) and zero_stage (1) are one-value knobs: fixed in the subset, "
            "declared so that the prior sees them.",
        ],
        table="bigscience_bloom176b-prequel_384xA100-80GB.csv",
        where=[(k, v) for k, v in key.items()] + [("zero_stage", 1)],
        match=[("tp", "{tp}"), ("pp", "{pp}"), ("mbs", "{micro_batch}")],
        knobs={"tp": distinct(sub, "tp"), "pp": distinct(sub, "pp"),
               "micro_batch": distinct(sub, "mbs"), "recompute": ["full"], "zero_stage": [1]},
        default={"tp": start["tp"], "pp": start["pp"], "micro_batch": start["mbs"],
                 "recompute": "full", "zero_stage": 1},
        time_column="sec_per_it", memory_column="mem_gb", memory_unit=GiB, gpus=384,
        constants={"gpus": 384, "global_batch": 2048},
        constraints=["gpus % (tp * pp) == 0",
                     "global_batch % (micro_batch * (gpus / (tp * pp))) == 0"],
        global_batch=2048, seq_len=2048,
        model={"name": "bloom-prequel-14336x72", "architecture": "dense", "layers": 72,
               "hidden": 14336, "heads": 64, "ffn": 57344, "vocab": 250880, "seq_len": 2048,
               "global_batch": 2048},
        model_notes=["The CSV header and rows: hidden 14336 x 72 layers, 64 heads, seq 2048, "
                     "vocab ~250k (250880: BLOOM's",
                     "padded vocabulary); ffn = 4 x hidden (GPT)."],
        hardware={"gpu": "A100-SXM4-80GB", "gpu_memory_bytes": "80GiB", "gpus_per_node": 8,
                  "nodes": 48, "interconnect": "nvlink+infiniband"},
        device_memory="80GiB",
    )


def lucie_tasks():
    specs = []
    lucie_model = {"name": "lucie-7b", "architecture": "dense", "layers": 32, "hidden": 4096,
                   "heads": 32, "kv_heads": 32, "ffn": 11008, "vocab": 32000}
    notes = ["The CSV header: Lucie-7B = Llama-2-7B shape (32 layers, hidden 4096, ffn 11008 "
             "SwiGLU, 32 heads MHA), vocab 32k."]
    # seq4k: rows with equal (experiment, n_gpus, gbs) and >= 4 configurations with a result.
    rows = [r for r in read("lucie7b_seq4k_A100-80GB.csv") if r["experiment"] == "1_seq4k"]
    groups = {}
    for r in rows:
        groups.setdefault((int(r["n_gpus"]), int(r["gbs"])), []).append(r)
    skipped = []
    for (n, gbs), sub in sorted(groups.items()):
        configs = {(r["tp"], r["pp"], r["mbs"]) for r in sub if r["outcome"] == "ok"}
        if len(configs) < 4:
            skipped.append(f"seq4k {n} GPUs gbs {gbs}: {len(configs)} configurations")
            continue
        ok = lambda r: r["outcome"] == "ok"
        start, natural = natural_start(
            [dict(r, pp=r["pp"] if r["pp"] != "0" else "1") for r in sub if r["pp"] != "0"] +
            [], ok, ["tp", "pp", "mbs"], {"tp": 1, "pp": 1, "mbs": 1})
        has_no_engine = any(r["pp"] == "0" for r in sub)
        pps = sorted({max(1, int(r["pp"])) for r in sub})
        knobs = {"tp": distinct(sub, "tp"), "pp": pps, "micro_batch": distinct(sub, "mbs")}
        default = {"tp": start["tp"], "pp": start["pp"], "micro_batch": start["mbs"]}
        match = [("tp", "{tp}"), ("pp", "{pp}"), ("mbs", "{micro_batch}")]
        constraints = ["gpus % (tp * pp) == 0",
                       "global_batch % (micro_batch * (gpus / (tp * pp))) == 0"]
        if has_no_engine:
            knobs["pipeline_engine"] = [False, True]
            default["pipeline_engine"] = True
            match[1] = ("pp", "{pp}*{pipeline_engine}")
            constraints.append("pipeline_engine || pp == 1")
        nodes = n // 8
        nfail = sum(1 for r in sub if r["outcome"] != "ok")
        specs.append(dict(
            name=f"table-lucie7b-seq4k-{nodes}n-gbs{gbs}",
            description=f"Lucie-7B (Llama-2-7B shape), seq 4096, Megatron-DeepSpeed, {nodes} x 8 "
                        f"A100-SXM4-80GB, global batch {gbs} (replayed from the authors' "
                        "measurements)",
            comments=[
                "Real table: bench/tables/data/lucie7b_seq4k_A100-80GB.csv (source github.com/"
                "OpenLLM-France/Lucie-Training",
                "chronicles/parallelism/scripts/expe_parallelism/expe_summary.csv, commit "
                "c3b8b3a0). Fixed-work subset:",
                f"experiment 1_seq4k, {n} GPUs, global batch {gbs}: {len(sub)} rows, "
                f"{len(configs)} ok layouts, {nfail} without a result",
                "(no_result: not confirmed OOM, replayed as absent). ZeRO 0 and no activation "
                "checkpointing in every row.",
                "The table's pp 0 is DeepSpeed without its pipeline engine: knob pipeline_engine "
                "false with PP 1." if has_no_engine else "Every row runs DeepSpeed's pipeline "
                "engine.",
                "Default: " + ", ".join(f"{k} {toml_value(v)}" for k, v in default.items()) +
                (" (the natural start)" if natural else
                 " (TP 1, PP 1, micro-batch 1 is not an ok row: the smallest ok layout)"),
            ],
            table="lucie7b_seq4k_A100-80GB.csv",
            where=[("experiment", "1_seq4k"), ("n_gpus", n), ("gbs", gbs)],
            match=match, knobs=knobs, default=default,
            time_column="step_time_s", gpus=n,
            constants={"gpus": n, "global_batch": gbs},
            constraints=constraints, global_batch=gbs, seq_len=4096,
            model=dict(lucie_model, seq_len=4096, global_batch=gbs, attention="flash"),
            model_notes=notes + ["attention = \"flash\": the CSV header names flash-attn-2."],
            hardware={"gpu": "A100-SXM4-80GB", "gpu_memory_bytes": "80GiB", "gpus_per_node": 8,
                      "nodes": nodes, "interconnect": "nvlink+infiniband"},
            device_memory="80GiB",
        ))
    # seq2k: micro-batch is not a free knob (the authors used the largest that fitted), ZeRO 1
    # only with TP 1 x PP 1: the knobs are TP and PP.
    rows = read("lucie7b_seq2k_A100-80GB.csv")
    groups = {}
    for r in rows:
        groups.setdefault((int(r["n_gpus"]), int(r["gbs"])), []).append(r)
    for (n, gbs), sub in sorted(groups.items()):
        configs = {(r["tp"], r["pp"]) for r in sub if r["outcome"] == "ok"}
        if len(configs) < 4:
            skipped.append(f"seq2k {n} GPUs gbs {gbs}: {len(configs)} configurations")
            continue
        nodes = n // 8
        specs.append(dict(
            name=f"table-lucie7b-seq2k-{nodes}n-gbs{gbs}",
            description=f"Lucie-7B (Llama-2-7B shape), seq 2048, Megatron-DeepSpeed, {nodes} x 8 "
                        f"A100-SXM4-80GB, global batch {gbs} (replayed from the authors' "
                        "measurements)",
            comments=[
                "Real table: bench/tables/data/lucie7b_seq2k_A100-80GB.csv (source github.com/"
                "OpenLLM-France/Lucie-Training",
                "chronicles/parallelism/all_iters_w_dp.csv, commit c3b8b3a0). Fixed-work subset: "
                f"{n} GPUs, global batch {gbs}: 4 layouts, all ok.",
                "Knobs TP and PP: the authors ran each layout at the largest micro-batch "
                "that fitted (not a free knob: no",
                "micro-batch knob, the prior assumes 1) and ZeRO 1 only with TP 1 x PP 1: "
                "zero_stage is a knob that the last",
                "constraint ties to the layout (4 legal configurations), declared so that the "
                "prior sees ZeRO 1 there.",
                "Default: TP 1, PP 1, ZeRO 1 (an ok row: the natural start).",
            ],
            table="lucie7b_seq2k_A100-80GB.csv",
            where=[("n_gpus", n), ("gbs", gbs)],
            match=[("tp", "{tp}"), ("pp", "{pp}"), ("zero", "{zero_stage}")],
            knobs={"tp": distinct(sub, "tp"), "pp": distinct(sub, "pp"),
                   "zero_stage": distinct(sub, "zero")},
            default={"tp": 1, "pp": 1, "zero_stage": 1},
            time_column="step_time_s", gpus=n,
            constants={"gpus": n, "global_batch": gbs},
            constraints=["gpus % (tp * pp) == 0",
                         "(tp * pp == 1 && zero_stage == 1) || (tp * pp > 1 && zero_stage == 0)"],
            global_batch=gbs, seq_len=2048,
            model=dict(lucie_model, seq_len=2048, global_batch=gbs), model_notes=notes,
            hardware={"gpu": "A100-SXM4-80GB", "gpu_memory_bytes": "80GiB", "gpus_per_node": 8,
                      "nodes": nodes, "interconnect": "nvlink+infiniband"},
            device_memory="80GiB",
        ))
    return specs, skipped


def sailor_tasks():
    specs = []
    rows = read("sailor_validation.csv")
    for nodes in (16, 32):
        sub = [r for r in rows if r["cluster"] == "clariden" and r["model"] == "OPT-350"
               and int(r["nodes"]) == nodes and r["gbs"] == "1024"]
        n = int(sub[0]["n_gpus"])
        specs.append(dict(
            name=f"table-sailor-opt350-{nodes}xGH200node",
            description=f"OPT-350M, Sailor's Megatron runtime, {nodes} nodes x 4 GH200-96GB "
                        "(CSCS Clariden), TP 4, micro-batch 8, global batch 1024 (replayed from "
                        "Sailor's validation runs)",
            comments=[
                "Real table: bench/tables/data/sailor_validation.csv (bench/tables/sailor_extract.py "
                "from github.com/eth-easl/sailor",
                "sailor/Planner/simulations/validation/clariden/OPT-350/N" + str(nodes) +
                "/plan_config_*.json, commit cf2c8e3c). Fixed-work subset: OPT-350,",
                f"{nodes} nodes, global batch 1024: 3 plans (PP 1, 2, 4; DP = GPUs / (4 PP)), "
                "measured iteration time and peak memory.",
                "3 configurations: scored by the prior (bench/tables/run), not searched (fewer "
                "than 4).",
                "Default: PP 1 (the natural start); TP 4 and micro-batch 8 are one-value knobs "
                "(fixed in every plan, declared for the prior).",
            ],
            table="sailor_validation.csv",
            where=[("cluster", "clariden"), ("model", "OPT-350"), ("nodes", nodes),
                   ("gbs", 1024)],
            match=[("tp", "{tp}"), ("pp", "{pp}"), ("mbs", "{micro_batch}")],
            knobs={"tp": [4], "pp": distinct(sub, "pp"), "micro_batch": [8]},
            default={"tp": 4, "pp": 1, "micro_batch": 8},
            time_column="step_time_s", memory_column="peak_mem_bytes", memory_unit=1, gpus=n,
            constants={"gpus": n, "global_batch": 1024},
            constraints=["gpus % (tp * pp) == 0",
                         "global_batch % (micro_batch * (gpus / (tp * pp))) == 0"],
            global_batch=1024, seq_len=2048,
            model={"name": "opt-350m", "architecture": "dense", "layers": 24, "hidden": 1024,
                   "heads": 16, "ffn": 4096, "vocab": 50272, "seq_len": 2048,
                   "global_batch": 1024},
            model_notes=["Sailor's llm_info.json: OPT-350 layer parameters 12h^2+13h with h = "
                         "1024, activations 2048 x 1024 per sequence",
                         "(seq 2048); 24 layers; heads 16, ffn 4096, vocab 50272 (OPT-350m)."],
            hardware={"gpu": "GH200-96GB", "gpu_memory_bytes": "96GiB", "gpus_per_node": 4,
                      "nodes": nodes, "interconnect": "nvlink+slingshot"},
            device_memory="96GiB",
        ))
    return specs


def main():
    os.makedirs(os.path.join(HERE, "tasks"), exist_ok=True)
    specs = amp_tasks() + bigscience_tasks() + [bloom_task()]
    lucie, skipped = lucie_tasks()
    specs += lucie + sailor_tasks()
    for s in specs:
        print(write_task(s))
    for s in skipped:
        print("skipped (fewer than 4 configurations with a result):", s, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
