#!/usr/bin/python3
"""Training loop of the torch_gpt workload (FROZEN: not in the editable scope; edit model.py).

Rank 0 prints one line per step to stdout, ``INFRARSI_METRICS {json}``, and a final line with
``"event": "final"``.  See README.md for the protocol.  Exit status: 0 ok, 86 out of memory (a line
``INFRARSI_OOM {json}`` on stderr first), 2 bad arguments, anything else: crash (traceback).
"""
import argparse
import contextlib
import json
import math
import os
import re
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist

import data
import model as model_lib

OOM_EXIT = 86
METRICS_PREFIX = "INFRARSI_METRICS "
OOM_PREFIX = "INFRARSI_OOM "
# Headroom of the RLIMIT_DATA backstop above the RSS cap (see README "Out of memory").
DATA_LIMIT_HEADROOM = 1 << 30


class MemoryCapExceeded(MemoryError):
    pass


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    w = p.add_argument_group("work (fixed by the task contract)")
    w.add_argument("--steps", type=int, default=12, help="optimizer steps, warmup included")
    w.add_argument("--warmup-steps", type=int, default=2, help="first steps, executed and reported but not timed")
    w.add_argument("--global-batch", type=int, default=16, help="sequences per optimizer step, all ranks")
    w.add_argument("--seq-len", type=int, default=256, help="tokens per sequence")
    w.add_argument("--layers", type=int, default=6)
    w.add_argument("--d-model", type=int, default=384)
    w.add_argument("--heads", type=int, default=6)
    w.add_argument("--seed", type=int, default=1234)
    w.add_argument("--lr", type=float, default=1e-3)
    k = p.add_argument_group("launch knobs (speed, not work)")
    k.add_argument("--micro-batch", type=int, default=1,
                   help="sequences per forward/backward; accumulation = global_batch / (micro_batch * world_size)")
    k.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank (torch.set_num_threads)")
    k.add_argument("--activation-checkpointing", type=int, choices=(0, 1), default=0)
    k.add_argument("--attention", choices=model_lib.ATTENTION_IMPLS, default=model_lib.ATTENTION_IMPLS[0])
    k.add_argument("--foreach", type=int, choices=(0, 1), default=0, help="AdamW foreach implementation")
    k.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="bf16 = autocast (changes numerics)")
    k.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    k.add_argument("--memory-cap-bytes", type=int, default=None,
                   help="per-rank memory cap (also env INFRARSI_MEMORY_CAP_BYTES); exceeding it exits 86")
    return p.parse_args(argv), p


def read_status_kib(field):
    with open("/proc/self/status") as f:
        m = re.search(r"^%s:\s+(\d+) kB" % field, f.read(), re.M)
    return int(m.group(1)) if m else 0


class Memory:
    """Per-step peak memory of this rank and enforcement of the cap.

    CPU: peak = VmHWM (peak resident set), reset at each step start by writing 5 to
    /proc/self/clear_refs; the cap is checked against VmHWM after every micro-batch forward, every
    backward and the optimizer step, plus an RLIMIT_DATA backstop (cap + 1 GiB) so that a runaway
    allocation genuinely fails in the allocator.  CUDA: torch.cuda.set_per_process_memory_fraction
    (the caching allocator raises a genuine out-of-memory error) and max_memory_allocated.
    """

    def __init__(self, device, cap):
        self.device = device
        self.cap = cap
        self.can_reset = True
        if device.type == "cuda":
            if cap is not None:
                total = torch.cuda.get_device_properties(device).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), device)
        elif cap is not None:
            limit = cap + DATA_LIMIT_HEADROOM
            _, hard = resource.getrlimit(resource.RLIMIT_DATA)
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))

    def reset(self):
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            self.can_reset = False  # peak then covers the whole run so far

    def peak(self):
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return read_status_kib("VmHWM") * 1024

    def check(self, where):
        if self.cap is None or self.device.type == "cuda":
            return
        peak = self.peak()
        if peak > self.cap:
            raise MemoryCapExceeded("peak RSS %d bytes exceeds the memory cap %d bytes (%s)" % (peak, self.cap, where))


def is_oom(exc):
    if isinstance(exc, MemoryError):
        return True
    msg = str(exc)
    return ("can't allocate memory" in msg or "out of memory" in msg.lower()
            or "CUDA error: out of memory" in msg)


def emit(obj):
    sys.stdout.write(METRICS_PREFIX + json.dumps(obj, separators=(", ", ": ")) + "\n")
    sys.stdout.flush()


def main(argv=None):
    args, parser = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    cap = args.memory_cap_bytes
    if cap is None and os.environ.get("INFRARSI_MEMORY_CAP_BYTES"):
        cap = int(os.environ["INFRARSI_MEMORY_CAP_BYTES"])

    # ---- validate the work and the knobs (exit 2 = launch error) ----
    for name in ("steps", "global_batch", "seq_len", "layers", "d_model", "heads", "micro_batch", "threads"):
        if getattr(args, name) < 1:
            parser.error("--%s must be >= 1" % name.replace("_", "-"))
    if not 0 <= args.warmup_steps < args.steps:
        parser.error("--warmup-steps must be in [0, steps)")
    if world_size < 1 or not 0 <= rank < world_size:
        parser.error("bad RANK/WORLD_SIZE %d/%d" % (rank, world_size))
    if args.global_batch % (args.micro_batch * world_size) != 0:
        parser.error("--global-batch %d is not divisible by micro_batch %d * world_size %d"
                     % (args.global_batch, args.micro_batch, world_size))
    if args.d_model % args.heads != 0:
        parser.error("--d-model must be divisible by --heads")
    if cap is not None and cap <= 0:
        parser.error("memory cap must be positive")
    accumulation = args.global_batch // (args.micro_batch * world_size)

    if args.device == "auto":
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        device_type = args.device
    if device_type == "cuda":
        if not torch.cuda.is_available():
            parser.error("--device cuda but torch.cuda.is_available() is False")
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    torch.set_num_threads(args.threads)

    mem = Memory(device, cap)
    try:
        return run(args, rank, world_size, accumulation, device, mem)
    except BaseException as exc:  # noqa: B902 - classify then re-raise
        if is_oom(exc):
            sys.stdout.flush()
            sys.stderr.write(OOM_PREFIX + json.dumps({"rank": rank, "error": type(exc).__name__,
                                                      "message": str(exc).strip()[:2000]}) + "\n")
            sys.stderr.flush()
            os._exit(OOM_EXIT)  # no teardown: peers see the connection close
        raise


def run(args, rank, world_size, accumulation, device, mem):
    distributed = world_size > 1
    if distributed:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)

    tokens, corpus_sha, corpus_files = data.load_corpus()
    batches = data.GlobalBatches(tokens, args.seq_len, args.global_batch, args.seed)

    torch.manual_seed(args.seed)
    net = model_lib.GPT(vocab_size=256, seq_len=args.seq_len, layers=args.layers, d_model=args.d_model,
                        heads=args.heads, attention=args.attention,
                        activation_checkpointing=bool(args.activation_checkpointing))
    n_params = sum(p.numel() for p in net.parameters())
    net.to(device)
    if distributed:
        ddp_kwargs = {"broadcast_buffers": False}
        if device.type == "cuda":
            ddp_kwargs["device_ids"] = [device.index]
        train_net = torch.nn.parallel.DistributedDataParallel(net, **ddp_kwargs)
    else:
        train_net = net
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                                  foreach=bool(args.foreach))
    autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16)
                if args.dtype == "bf16" else contextlib.nullcontext())
    # Each rank's backward gets sum(token losses) * world_size / contract_tokens; DDP averages the
    # gradients over ranks, so the gradient equals that of the mean loss over the global batch.
    contract_tokens = args.global_batch * args.seq_len
    grad_scale = world_size / contract_tokens
    cuda = device.type == "cuda"

    def now():
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter()

    step_times, tokens_total, last_loss = [], 0, float("nan")
    for step in range(args.steps):
        mem.reset()
        t_step = now()
        data_s = forward_s = backward_s = 0.0
        loss_acc = torch.zeros((), dtype=torch.float64)
        tok_acc = torch.zeros((), dtype=torch.int64)
        for m in range(accumulation):
            t0 = now()
            x, y = batches.micro_batch(step, rank, world_size, args.micro_batch, m)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            t1 = now()
            data_s += t1 - t0
            sync = (not distributed) or m == accumulation - 1
            ctx = contextlib.nullcontext() if sync else train_net.no_sync()
            with ctx:
                with autocast:
                    loss_sum, n_tok = train_net(x, y)
                t2 = now()
                forward_s += t2 - t1
                mem.check("forward step %d micro-batch %d" % (step, m))
                (loss_sum * grad_scale).backward()
                t3 = now()
                backward_s += t3 - t2
            mem.check("backward step %d micro-batch %d" % (step, m))
            loss_acc += loss_sum.detach().to("cpu", torch.float64)
            tok_acc += n_tok.detach().to("cpu", torch.int64)
        t4 = now()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t5 = now()
        optimizer_s = t5 - t4
        mem.check("optimizer step %d" % step)
        peak = mem.peak()
        if distributed:
            sums = torch.stack([loss_acc, tok_acc.to(torch.float64)])
            peak_t = torch.tensor([peak], dtype=torch.int64)
            if device.type == "cuda":
                sums, peak_t = sums.to(device), peak_t.to(device)
            dist.all_reduce(sums, op=dist.ReduceOp.SUM)
            dist.all_reduce(peak_t, op=dist.ReduceOp.MAX)
            loss_total, tok_total, peak = float(sums[0]), int(round(float(sums[1]))), int(peak_t[0])
        else:
            loss_total, tok_total = float(loss_acc), int(tok_acc)
        t6 = now()
        step_time = t6 - t_step
        warmup = step < args.warmup_steps
        if not warmup:
            step_times.append(step_time)
        tokens_total += tok_total
        last_loss = loss_total / tok_total if tok_total else float("nan")
        if rank == 0:
            rec = {"step": step, "loss": last_loss, "tokens": tok_total, "step_time_s": step_time,
                   "data_s": data_s, "forward_s": forward_s, "backward_s": backward_s,
                   "optimizer_s": optimizer_s}
            if distributed:
                rec["sync_s"] = t6 - t5
            rec["peak_memory_bytes"] = peak
            rec["warmup"] = warmup
            emit(rec)
        if not math.isfinite(last_loss):
            raise FloatingPointError("non-finite loss %r at step %d" % (last_loss, step))

    if rank == 0:
        env_knobs = {k: os.environ[k] for k in sorted(os.environ)
                     if k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "GLIBC_TUNABLES")
                     or k.startswith("MALLOC_")}
        emit({"event": "final", "status": "ok", "steps": args.steps, "tokens_total": tokens_total,
              "tokens_per_step": args.global_batch * args.seq_len, "final_loss": last_loss,
              "params": n_params, "layers": args.layers, "d_model": args.d_model, "heads": args.heads,
              "seq_len": args.seq_len, "global_batch": args.global_batch, "world_size": world_size,
              "micro_batch": args.micro_batch, "accumulation": accumulation, "threads": args.threads,
              "activation_checkpointing": args.activation_checkpointing, "attention": args.attention,
              "foreach": args.foreach, "dtype": args.dtype, "device": device.type, "seed": args.seed,
              "env": env_knobs, "corpus_sha256": corpus_sha, "corpus_files": corpus_files,
              "timed_steps": [args.warmup_steps, args.steps - 1],
              "step_time_median_s": statistics.median(step_times),
              "step_time_mean_s": statistics.fmean(step_times),
              "memory_cap_bytes": mem.cap, "peak_reset": mem.can_reset, "torch": torch.__version__})
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
