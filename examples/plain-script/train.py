#!/usr/bin/env python3
"""A stand-in for an unmodified public training script (nanoGPT-style), used by
docs/plain-script.md: argparse flags, gradient accumulation, a plain-text progress line per
iteration, an evaluation loss on fixed held-out data every --eval-interval iterations, and a
distributed path taken whenever RANK is in the environment. Nothing in it knows about infrarsi.

    /usr/bin/python3 train.py --batch-size 8 --grad-accum 4 --iters 30
"""
import argparse
import os
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=8, help="micro-batch size (sequences)")
p.add_argument("--grad-accum", type=int, default=4, help="micro-batches per optimizer step")
p.add_argument("--iters", type=int, default=30)
p.add_argument("--eval-interval", type=int, default=10)
p.add_argument("--block", type=int, default=64, help="tokens per sequence")
p.add_argument("--width", type=int, default=384)
p.add_argument("--compile-free-fused", choices=["0", "1"], default="0",
               help="1: fused AdamW step (torch foreach)")
args = p.parse_args()

# The distributed switch of many public scripts: under torchrun-style variables the script
# initialises a process group and shards the data; as a plain process it does not.
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    torch.distributed.init_process_group("gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
else:
    rank, world = 0, 1

torch.manual_seed(1337)
vocab = 64


def sequences(n, seed):
    # A learnable language: the next token is (5 x token + 3) mod vocab, one in five replaced
    # by a random token, so the loss falls from ln(64) ~ 4.16 towards the noise's entropy.
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n, args.block + 1, dtype=torch.long)
    out[:, 0] = torch.randint(0, vocab, (n,), generator=g)
    for t in range(1, args.block + 1):
        noise = torch.randint(0, vocab, (n,), generator=g)
        keep = torch.rand(n, generator=g) < 0.8
        out[:, t] = torch.where(keep, (5 * out[:, t - 1] + 3) % vocab, noise)
    return out


data = sequences(4096, 1)        # the training set
held_out = sequences(64, 2)      # fixed evaluation data

model = nn.Sequential(nn.Embedding(vocab, args.width), nn.Linear(args.width, args.width),
                      nn.GELU(), nn.Linear(args.width, vocab))
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, foreach=args.compile_free_fused == "1")
loss_fn = nn.CrossEntropyLoss()
order = torch.randperm(len(data), generator=torch.Generator().manual_seed(7))


def loss_of(batch):
    x, y = batch[:, :-1], batch[:, 1:]
    return loss_fn(model(x).reshape(-1, vocab), y.reshape(-1))


cursor = 0
for it in range(args.iters):
    t0 = time.time()
    for micro in range(args.grad_accum):
        idx = order[cursor:cursor + args.batch_size]
        cursor = (cursor + args.batch_size) % (len(data) - args.batch_size)
        loss = loss_of(data[idx]) / args.grad_accum
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    dt = time.time() - t0
    if rank == 0:
        # The loss printed is the last micro-batch's, scaled back, as nanoGPT prints it.
        line = f"iter {it}: loss {loss.item() * args.grad_accum:.4f}, time {dt * 1000:.2f}ms"
        if (it + 1) % args.eval_interval == 0:
            with torch.no_grad():
                line += f", val {loss_of(held_out).item():.4f}"
        print(line, flush=True)
if ddp:
    torch.distributed.destroy_process_group()
