"""The oracle's float64 AdamW step on a large tensor against a minimal in-place NumPy AdamW, side by
side in one run (the issue's target: within 1.5x).

    python benchmarks/bench_oracle.py [--numel 16777216] [--rounds 3]

Each round times one step of each, alternating, on the same inputs; the ratio of the medians is
printed. The in-place form is the floor for NumPy: a handful of passes over the arrays, no
allocation. The oracle is pure (returns new arrays, never writes its inputs) and runs an elementwise
rule in cache-sized slices (oracle.common.SLICE); with slicing off (`--slice 0`) it is the
whole-array form this replaced.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import oracle.common
from oracle import adam
from oracle.common import OptState

HP = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}


class InPlace:
    """torch.optim.AdamW's single-tensor arithmetic with NumPy's out= ops: the floor."""

    def __init__(self, p, g):
        self.p, self.g = p.copy(), g
        self.m, self.v, self.tmp = np.zeros_like(p), np.zeros_like(p), np.empty_like(p)
        self.t = 0

    def step(self):
        self.t += 1
        lr, (b1, b2), eps, wd = HP["lr"], HP["betas"], HP["eps"], HP["weight_decay"]
        p, g, m, v, tmp = self.p, self.g, self.m, self.v, self.tmp
        np.multiply(p, 1.0 - lr * wd, out=p)
        np.multiply(m, b1, out=m)
        np.multiply(g, 1.0 - b1, out=tmp)
        np.add(m, tmp, out=m)
        np.multiply(g, g, out=tmp)
        np.multiply(tmp, 1.0 - b2, out=tmp)
        np.multiply(v, b2, out=v)
        np.add(v, tmp, out=v)
        np.sqrt(v, out=tmp)
        np.divide(tmp, np.sqrt(1.0 - b2 ** self.t), out=tmp)
        np.add(tmp, eps, out=tmp)
        np.divide(m, tmp, out=tmp)
        np.multiply(tmp, lr / (1.0 - b1 ** self.t), out=tmp)
        np.subtract(p, tmp, out=p)


class Oracle:
    def __init__(self, p, g):
        self.p, self.g, self.state = p.copy(), g, OptState.empty([[p]])

    def step(self):
        new, self.state = adam.step([[self.p]], [[self.g]], self.state, [HP], adam.TORCH_ADAMW)
        self.p = new[0][0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=1 << 24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slice", type=int, default=None, help="oracle.common.SLICE (0: no slicing)")
    args = ap.parse_args(argv)
    if args.slice is not None:
        oracle.common.SLICE = args.slice or 1 << 62
    rng = np.random.default_rng(0)
    p, g = rng.standard_normal(args.numel), rng.standard_normal(args.numel)
    runs = {"in-place NumPy": InPlace(p, g), "oracle": Oracle(p, g)}
    times = {name: [] for name in runs}
    for _ in range(args.rounds + 1):  # the first round warms both (allocations, page faults) and is dropped
        for name, run in runs.items():
            t0 = time.perf_counter()
            run.step()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(ts[1:]) for name, ts in times.items()}
    np.testing.assert_allclose(runs["oracle"].p, runs["in-place NumPy"].p, rtol=1e-12, atol=1e-15)  # the same update (near-zero results cancel)
    for name, m in med.items():
        print(f"{name:>15}: {m * 1e3:8.1f} ms per step ({args.numel} elements, median of {args.rounds})")
    print(f"oracle / in-place = {med['oracle'] / med['in-place NumPy']:.2f}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
