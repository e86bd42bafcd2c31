"""The main job, side by side with an earlier commit: the same command in both trees, alternating,
same machine and interpreter, medians of --rounds (issue 30's acceptance is measured with this).

    python benchmarks/bench_main_job.py --against 329853c                      # --optimizer adamw
    python benchmarks/bench_main_job.py --against 329853c --sweep all          # --optimizer all
    python benchmarks/bench_main_job.py --against 329853c --sweep default --sweep all --rounds 3

The earlier commit is checked out into a temporary git worktree (removed at the end); each run is
`python -m oracle.compare <sweep> --report-dir <temporary folder>` with that tree first on
PYTHONPATH, so each tree judges with its own engine and targets (the venv's packages are shared).
One warm-up run of each tree is not timed: it builds what that tree builds once (its fused
kernels' cache, the DeepSpeed ops when its key differs). Prints one line per run and a JSON
summary: seconds per run, the medians and the ratio earlier / now, and each run's exit status
(a run that exits 2 or more is an error, not a timing).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = {"default": ["--optimizer", "adamw"], "all": ["--optimizer", "all"]}


@contextlib.contextmanager
def worktree(commit: str):
    """A detached checkout of `commit` in a temporary folder, removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix="bench-main-job-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(where), commit], check=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False)


def env_for(tree: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def check_imports(tree: Path) -> None:
    """The tree's own engine is the one imported there (not the checkout the venv was installed from)."""
    out = subprocess.run([sys.executable, "-c", "import oracle; print(oracle.__file__)"], cwd=tree, env=env_for(tree),
                         capture_output=True, text=True, check=True).stdout.strip()
    if not Path(out).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"error: in {tree} python imports {out}, not that tree's engine")


def timed(tree: Path, argv: list[str]) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="bench-main-job-report-") as out:
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, "-m", "oracle.compare", *argv, "--report-dir", out], cwd=tree,
                            env=env_for(tree), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        return time.perf_counter() - t0, rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, metavar="COMMIT", help="the earlier commit to compare with")
    ap.add_argument("--sweep", action="append", choices=sorted(SWEEPS), help="default (the README's main job) or all")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="also write the JSON summary here")
    args = ap.parse_args(argv)
    sweeps = args.sweep or ["default"]
    summary = {"against": args.against, "rounds": args.rounds, "load_average_at_start": os.getloadavg(),
               "sweeps": {}}
    with worktree(args.against) as old:
        trees = {"earlier": old, "now": ROOT}
        for tree in trees.values():
            check_imports(tree)
        for sweep in sweeps:
            times: dict = {name: [] for name in trees}
            codes: dict = {name: [] for name in trees}
            for name, tree in trees.items():
                secs, rc = timed(tree, SWEEPS[sweep])
                print(f"{sweep:8s} {name:8s} warm-up {secs:7.1f} s (exit {rc})", flush=True)
            for r in range(args.rounds):
                for name, tree in (trees.items() if r % 2 == 0 else reversed(trees.items())):
                    secs, rc = timed(tree, SWEEPS[sweep])
                    times[name].append(secs)
                    codes[name].append(rc)
                    print(f"{sweep:8s} {name:8s} round {r + 1} {secs:7.1f} s (exit {rc})", flush=True)
            med = {name: statistics.median(ts) for name, ts in times.items()}
            summary["sweeps"][sweep] = {"argv": SWEEPS[sweep], "seconds": times, "exit": codes, "median_s": med,
                                        "earlier_over_now": med["earlier"] / med["now"]}
            print(f"{sweep}: earlier {med['earlier']:.1f} s, now {med['now']:.1f} s: "
                  f"{med['earlier'] / med['now']:.2f}x faster now (median of {args.rounds})", flush=True)
    summary["load_average_at_end"] = os.getloadavg()
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    bad = [(s, n) for s, d in summary["sweeps"].items() for n, cs in d["exit"].items() if any(c >= 2 for c in cs)]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
