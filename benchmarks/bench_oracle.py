"""The oracle's float64 AdamW step on a large tensor against a minimal in-place NumPy AdamW, side by
side in one run (the issue's target: within 1.5x).

    python benchmarks/bench_oracle.py [--numel 16777216] [--rounds 3] [--out result.json]

Each round times one step of each, alternating, on the same inputs; the ratio of the medians is
printed. The in-place form is the floor for NumPy: a handful of passes over the arrays, no
allocation. The oracle is pure (returns new arrays, never writes its inputs) and runs an elementwise
rule in cache-sized slices (oracle.common.SLICE); with slicing off (`--slice 0`) it is the
whole-array form this replaced. "oracle, fresh outputs" is the oracle with output recycling off
(oracle.common.RECYCLE_BYTES: every step page-faults new arrays), the form before recycling.
`--out` writes the medians, the ratios and the command as JSON (benchmarks/oracle_vs_inplace.json).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
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
    def __init__(self, p, g, recycle=True):
        self.p, self.g, self.state, self.recycle = p.copy(), g, OptState.empty([[p]]), recycle

    def step(self):
        kept = oracle.common.RECYCLE_BYTES
        if not self.recycle:
            oracle.common.RECYCLE_BYTES = 1 << 62
        try:
            new, self.state = adam.step([[self.p]], [[self.g]], self.state, [HP], adam.TORCH_ADAMW)
        finally:
            oracle.common.RECYCLE_BYTES = kept
        self.p = new[0][0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=1 << 24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slice", type=int, default=None, help="oracle.common.SLICE (0: no slicing)")
    ap.add_argument("--recycle-bytes", type=int, default=None, help="oracle.common.RECYCLE_BYTES")
    ap.add_argument("--out", help="write the medians and ratios as JSON")
    args = ap.parse_args(argv)
    kept = oracle.common.SLICE, oracle.common.RECYCLE_BYTES
    try:  # called as a function (tests/test_bench_oracle.py), it leaves the settings as it found them
        return _run(args, argv)
    finally:
        oracle.common.SLICE, oracle.common.RECYCLE_BYTES = kept


def _run(args, argv) -> int:
    if args.slice is not None:
        oracle.common.SLICE = args.slice or 1 << 62
    if args.recycle_bytes is not None:
        oracle.common.RECYCLE_BYTES = args.recycle_bytes
    rng = np.random.default_rng(0)
    p, g = rng.standard_normal(args.numel), rng.standard_normal(args.numel)
    runs = {"in-place NumPy": InPlace(p, g), "oracle": Oracle(p, g), "oracle, fresh outputs": Oracle(p, g, False)}
    times = {name: [] for name in runs}
    for _ in range(args.rounds + 1):  # the first round warms both (allocations, page faults) and is dropped
        for name, run in runs.items():
            t0 = time.perf_counter()
            run.step()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(ts[1:]) for name, ts in times.items()}
    np.testing.assert_allclose(runs["oracle"].p, runs["in-place NumPy"].p, rtol=1e-12, atol=1e-15)  # the same update (near-zero results cancel)
    assert np.array_equal(runs["oracle"].p, runs["oracle, fresh outputs"].p)  # recycling changes no bit
    floor = med["in-place NumPy"]
    for name, m in med.items():
        print(f"{name:>21}: {m * 1e3:8.1f} ms per step ({args.numel} elements, median of {args.rounds})")
    ratios = {name: m / floor for name, m in med.items() if name != "in-place NumPy"}
    for name, r in ratios.items():
        print(f"{name} / in-place = {r:.2f}x" + (" (target <= 1.5x)" if name == "oracle" else ""))
    if args.out:
        doc = {"command": " ".join(["python", "benchmarks/bench_oracle.py", *(argv if argv is not None else sys.argv[1:])]),
               "numel": args.numel, "rounds": args.rounds, "load_average_at_end": list(os.getloadavg()),
               "median_ms": {name: m * 1e3 for name, m in med.items()}, "over_in_place": ratios}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
