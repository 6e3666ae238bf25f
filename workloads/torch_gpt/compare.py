#!/usr/bin/python3
"""Compare the per-step losses of INFRARSI_METRICS outputs.

usage: compare.py BASELINE.out OTHER.out [OTHER2.out ...] [--rtol R] [--atol A]
Prints, for each OTHER, max |loss - baseline loss| over steps, the max relative difference, the
token counts, and exits 1 if any step differs by more than atol + rtol*|baseline| or if the
step count or per-step tokens differ.
"""
import argparse
import json
import sys

PREFIX = "INFRARSI_METRICS "


def read(path):
    steps, final = [], None
    with open(path) as f:
        for line in f:
            if not line.startswith(PREFIX):
                continue
            rec = json.loads(line[len(PREFIX):])
            if rec.get("event") == "final":
                final = rec
            else:
                steps.append(rec)
    return steps, final


def main():
    p = argparse.ArgumentParser()
    p.add_argument("baseline")
    p.add_argument("others", nargs="+")
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--atol", type=float, default=0.0)
    a = p.parse_args()
    base, _ = read(a.baseline)
    ok = True
    for path in a.others:
        other, _ = read(path)
        if len(other) != len(base):
            print("%s: %d steps vs %d in baseline" % (path, len(other), len(base)))
            ok = False
            continue
        max_abs = max(abs(o["loss"] - b["loss"]) for o, b in zip(other, base))
        max_rel = max(abs(o["loss"] - b["loss"]) / abs(b["loss"]) for o, b in zip(other, base))
        tok_ok = all(o["tokens"] == b["tokens"] for o, b in zip(other, base))
        within = all(abs(o["loss"] - b["loss"]) <= a.atol + a.rtol * abs(b["loss"]) for o, b in zip(other, base))
        print("%s: max_abs_loss_diff=%.3e max_rel_loss_diff=%.3e tokens_equal=%s within_tol=%s"
              % (path, max_abs, max_rel, tok_ok, within))
        ok = ok and within and tok_ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
