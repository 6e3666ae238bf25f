#!/usr/bin/env python3
"""A stochastic stand-in training job for the loss invariants (no torch): linear regression by SGD
on a fixed synthetic data set, speaking the INFRARSI_METRICS protocol.

Every optimizer step takes the same global batch (the same samples, so the same tokens and the
same gradient: the mean over the whole batch, whatever the split) in micro-batches of
--micro-batch samples, accumulated over global_batch / micro_batch passes. The data loader
shuffles the step's batch with a seed of the step and the split, and the script prints the loss of
its LAST micro-batch, as many training scripts do: another honest split reports another subset's
loss at every step, while the parameters, the mean loss over a window of steps (in expectation)
and the eval loss on the fixed held-out set (to rounding) do not change.

--cheat plants what the loss invariants must catch:
  drift             the learning rate is 0.6 x the contract's (other numerics: the loss falls slower)
  skip_backward     no backward pass: the gradient is never computed, the parameters never move
  frozen_optimizer  the optimizer is frozen after the first 5 steps: gradients are computed, the
                    parameters no longer change
"""
import argparse, json, random, sys, time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--global-batch", type=int, default=32)
p.add_argument("--micro-batch", type=int, default=8)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--eval-every", type=int, default=5)
p.add_argument("--tokens-per-sample", type=int, default=32)
p.add_argument("--step-sleep", type=float, default=0.005)
p.add_argument("--cheat", default="none",
               choices=["none", "drift", "skip_backward", "frozen_optimizer"])
args = p.parse_args()
if args.micro_batch <= 0 or args.global_batch % args.micro_batch != 0:
    print(f"micro_batch {args.micro_batch} does not divide global_batch {args.global_batch}",
          file=sys.stderr)
    sys.exit(2)

DIM = 4
data_rng = random.Random(20261201)
w_true = [data_rng.uniform(-2.0, 2.0) for _ in range(DIM)]
NOISE = 0.3


def sample(rng):
    """One sample: tokens_per_sample (x, y) pairs; its loss is the mean over its tokens."""
    tokens = []
    for _ in range(args.tokens_per_sample):
        x = [rng.gauss(0.0, 1.0) for _ in range(DIM)]
        tokens.append((x, sum(a * b for a, b in zip(w_true, x)) + rng.gauss(0.0, NOISE)))
    return tokens


train = [sample(data_rng) for _ in range(args.steps * args.global_batch)]
eval_rng = random.Random(7)
held_out = [sample(eval_rng) for _ in range(64)]


def loss_and_grad(w, batch, want_grad=True):
    """Sum over the samples of each sample's mean token loss 0.5 (w.x - y)^2, and its gradient."""
    loss = 0.0
    grad = [0.0] * DIM
    for tokens in batch:
        for x, y in tokens:
            r = sum(a * b for a, b in zip(w, x)) - y
            loss += 0.5 * r * r / len(tokens)
            if want_grad:
                for i in range(DIM):
                    grad[i] += r * x[i] / len(tokens)
    return loss, grad


w = [0.0] * DIM
lr = args.lr * (0.6 if args.cheat == "drift" else 1.0)
accum = args.global_batch // args.micro_batch
for step in range(args.steps):
    t0 = time.perf_counter()
    batch = train[step * args.global_batch:(step + 1) * args.global_batch]
    order = list(range(args.global_batch))
    random.Random(step * 1000003 + args.micro_batch).shuffle(order)
    grad = [0.0] * DIM
    last_loss = 0.0
    for k in range(accum):
        micro = [batch[i] for i in order[k * args.micro_batch:(k + 1) * args.micro_batch]]
        loss, g = loss_and_grad(w, micro, want_grad=args.cheat != "skip_backward")
        last_loss = loss / args.micro_batch
        for i in range(DIM):
            grad[i] += g[i] / args.global_batch
    if not (args.cheat == "frozen_optimizer" and step >= 5):
        for i in range(DIM):
            w[i] -= lr * grad[i]
    line = {"step": step, "loss": last_loss,
            "tokens": args.global_batch * args.tokens_per_sample}
    if (step + 1) % args.eval_every == 0 or step == args.steps - 1:
        line["eval_loss"] = loss_and_grad(w, held_out, want_grad=False)[0] / len(held_out)
    time.sleep(args.step_sleep)
    line["step_time_s"] = time.perf_counter() - t0
    print("INFRARSI_METRICS " + json.dumps(line), flush=True)
print("INFRARSI_METRICS " + json.dumps({"event": "final", "status": "ok", "steps": args.steps,
                                        "global_batch": args.global_batch}), flush=True)
