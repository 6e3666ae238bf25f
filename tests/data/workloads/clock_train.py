#!/usr/bin/env python3
"""A tiny honest or cheating job for the harness-clock check (no torch).

Each step does a fixed amount of CPU work timed with time.perf_counter around the step, and
prints one INFRARSI_METRICS line as it ends, as a real training loop does. --mode picks honest or one planted cheat:
  fake_timer      every measured interval shrinks by 40 % (a "faster clock", as
                  workloads/torch_gpt/patches/cheat_fake_timer.patch)
  partial_timer   the timer covers only the second half of each step's work
  buffered        stdout is block-buffered: the lines arrive together at exit; its steps do 6x
                  the work, so that its reported timed window (6 steps) is longer than 4 x
                  tuning::min_clock_window_s (0.2 s) on any machine: a shorter window is too
                  short to judge by design (tuning/contract_check.cpp), and on a fast idle core
                  6 steps of the default work report only about 0.1 s
"""
import argparse, json, os, sys, time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=12)
p.add_argument("--work", type=int, default=60000, help="loop iterations per half step")
p.add_argument("--tokens", type=int, default=1024)
p.add_argument("--sleep", type=float, default=0.0,
               help="seconds per step spent sleeping instead of CPU work (honest timer; a step "
                    "whose time barely depends on the machine's load)")
p.add_argument("--mode", choices=["honest", "fake_timer", "partial_timer", "buffered"],
               default="honest")
args = p.parse_args()

scale = 0.6 if args.mode == "fake_timer" else 1.0
buffered = args.mode == "buffered"
if buffered:
    args.work *= 6
out = os.fdopen(1, "w", buffering=1 << 16) if buffered else sys.stdout


def work(n):
    if args.sleep > 0:
        time.sleep(args.sleep / 2)
        return 0
    acc = 0
    for i in range(n):
        acc += i * i % 7
    return acc


for step in range(args.steps):
    t0 = time.perf_counter()
    work(args.work)
    if args.mode == "partial_timer":
        t0 = time.perf_counter()
    work(args.work)
    elapsed = (time.perf_counter() - t0) * scale
    line = "INFRARSI_METRICS " + json.dumps({
        "step": step, "loss": 5.0 - 0.1 * step, "tokens": args.tokens,
        "step_time_s": elapsed, "warmup": step < 2})
    print(line, file=out, flush=not buffered)
print("INFRARSI_METRICS " + json.dumps({"event": "final", "status": "ok", "steps": args.steps}),
      file=out, flush=True)
