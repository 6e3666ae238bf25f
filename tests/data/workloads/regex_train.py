#!/usr/bin/env python3
"""An unmodified-script stand-in: prints nanoGPT-style lines, no metrics protocol."""
import sys, time
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
print("starting training", flush=True)
for i in range(steps):
    time.sleep(0.02)
    print(f"iter {i}: loss {3.0 - 0.25 * i:.4f}, time {20.0 + i:.1f}ms, mfu 1.5%", flush=True)
print("done", flush=True)
