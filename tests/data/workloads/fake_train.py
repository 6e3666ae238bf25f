#!/usr/bin/env python3
"""A stand-in training job for launcher tests (no torch): speaks the INFRARSI_METRICS protocol.

Each rank reads RANK/WORLD_SIZE; rank 0 prints one metrics line per step and a final line.
Behaviour flags let tests provoke every outcome deterministically.
"""
import argparse, json, os, signal, socket, subprocess, sys, time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--step-time", type=float, default=0.05)
p.add_argument("--tokens", type=int, default=1024)
p.add_argument("--alloc-mb", type=int, default=0, help="hold this much resident memory")
p.add_argument("--fail-rank", type=int, default=-1, help="this rank exits 3 at --fail-step")
p.add_argument("--fail-step", type=int, default=1)
p.add_argument("--oom-rank", type=int, default=-1, help="this rank reports OOM, exits 86")
p.add_argument("--hang-rank", type=int, default=-1, help="this rank sleeps forever")
p.add_argument("--hang-step", type=int, default=0, help="... from this step on")
p.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (needs SIGKILL)")
p.add_argument("--child", action="store_true", help="leave a sleeping child process behind")
p.add_argument("--no-final", action="store_true")
p.add_argument("--loss-scale", type=float, default=1.0)
p.add_argument("--loss-fall", type=float, default=0.1,
               help="the loss falls by this much per step (0: a flat loss, e.g. at its ceiling)")
p.add_argument("--lockstep", action="store_true",
               help="ranks meet at the start of every step over MASTER_ADDR:MASTER_PORT, as in a "
                    "collective: no rank runs ahead of rank 0's printed steps, a peer gone hangs it")
args = p.parse_args()

rank = int(os.environ.get("RANK", "0"))
world = int(os.environ.get("WORLD_SIZE", "1"))
if args.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.child:
    subprocess.Popen(["sleep", "611.5"])
hold = bytearray(args.alloc_mb * 1024 * 1024)
for i in range(0, len(hold), 4096):
    hold[i] = 1



class Barrier:
    """Rank 0 listens on MASTER_PORT; every other rank connects. wait(): each rank sends a byte,
    rank 0 answers all once it heard from all (a blocking all-reduce of nothing)."""

    def __init__(self):
        addr = (os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"]))
        if rank == 0:
            srv = socket.socket()
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(addr)
            srv.listen(world)
            self.peers = [srv.accept()[0] for _ in range(world - 1)]
        else:
            deadline = time.time() + 120
            while True:
                try:
                    self.peers = [socket.create_connection(addr)]
                    break
                except OSError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.02)

    def wait(self):
        if rank != 0:
            self.peers[0].sendall(b"s")
        for peer in self.peers:
            if not peer.recv(1):
                while True:  # a peer is gone: wait as a collective would
                    time.sleep(1)
        if rank == 0:
            for peer in self.peers:
                peer.sendall(b"s")


barrier = Barrier() if args.lockstep and world > 1 else None

for step in range(args.steps):
    if barrier:
        barrier.wait()
    if rank == args.hang_rank and step >= args.hang_step:
        while True:
            time.sleep(1)
    if rank == args.oom_rank and step == args.fail_step:
        print(f"INFRARSI_OOM rank {rank}: DefaultCPUAllocator: can't allocate memory", file=sys.stderr, flush=True)
        sys.exit(86)
    if rank == args.fail_rank and step == args.fail_step:
        print(f"Traceback (most recent call last):\nRuntimeError: boom on rank {rank}", file=sys.stderr, flush=True)
        sys.exit(3)
    time.sleep(args.step_time)
    if rank == 0:
        print("INFRARSI_METRICS " + json.dumps({
            "step": step, "loss": (5.0 - args.loss_fall * step) * args.loss_scale,
            "tokens": args.tokens * world, "step_time_s": args.step_time,
            "forward_s": args.step_time / 3, "peak_memory_bytes": len(hold) + 10_000_000,
            "warmup": step == 0}), flush=True)
if rank == 0 and not args.no_final:
    print("INFRARSI_METRICS " + json.dumps({"event": "final", "status": "ok", "steps": args.steps}), flush=True)
