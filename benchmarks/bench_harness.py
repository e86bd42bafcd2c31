"""How fast the harness itself runs: cases per second, and where a case's time goes.

    python benchmarks/bench_harness.py                          # measure, print JSON
    python benchmarks/bench_harness.py --out result.json
    python benchmarks/bench_harness.py --check benchmarks/harness_baseline.json [--tolerance 3]
    python benchmarks/bench_harness.py --out benchmarks/harness_baseline.json   # a new baseline
    pytest benchmarks/test_bench_harness.py                     # the same, through pytest-benchmark

Sweeps: the default sweep (`--optimizer adamw`, every target and scenario) and `--optimizer all`,
each on a deterministic, cost-balanced sample (`--shard 1/8` and `1/16` of the selection, so a CI
run takes about a minute), through the real CLI with its warm worker pool (`--jobs`, default the
cores). cases/s counts report rows per second of wall time, worker start-up included.

Whole-sweep profile ("profile" of each sweep): wall and CPU seconds per phase over every process of the
sweep (oracle.compare.measuring.phases, what `python -m oracle.compare --profile` prints): the plan,
worker start-up, each scenario kind, the target's steps, the oracle with its error model, reading state
back, comparing, hazards, round trips, teach, the report.

Per-case breakdown (ms per case, on a sample of default-sweep jobs run in this process):
  spawn       starting a worker up to its first import (interpreter, multiprocessing bootstrap),
              per worker, and amortized per case in the sweeps above
  import      a worker importing torch and the engine, likewise
              (the breakdown's sample: the default sweep's --shard 1/8 without rank_skew, each target's
              first-use costs paid before timing, as in a warm worker)
  oracle      the oracle's update on plain float64 arrays (measured by re-running each step)
  error model the same update on error-carrying arrays (oracle.compare.measuring.errmodel) minus the above
  target      building the optimizer under test and its step() calls
  other       the rest of a case: reading state back, comparisons, inputs, checkpoints
  report      report.write, per case

--check compares cases/s with a baseline and fails (exit 1) when a sweep is slower than the
baseline divided by --tolerance (default 3: the benchmark runs on shared machines; it catches a
lost warm pool or a per-case re-import, not a few percent). Nothing here asserts on time in the
test suite.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SWEEPS = {
    "default": ["--optimizer", "adamw", "--shard", "1/8"],
    "all": ["--optimizer", "all", "--shard", "1/16"],
}
BREAKDOWN_SAMPLE = ["--optimizer", "adamw", "--shard", "1/8"]


def sweep(name: str, jobs: int | None = None) -> dict:
    """Run one sweep sample through the CLI; cases, seconds, cases/s, worker start-up."""
    from oracle.compare.running import workers as isolate
    from oracle.compare.cli import main
    from oracle.compare.measuring import phases
    stats = {}
    real_pool = isolate.Pool

    class CountingPool(real_pool):  # keep the pool's start-up timings
        def close(self):
            super().close()
            stats.update(self.stats)

    isolate.Pool = CountingPool
    try:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
            args = [*SWEEPS[name], "--report-dir", tmp, "--quiet", "--known", "none"]
            if jobs:
                args += ["--jobs", str(jobs)]
            t0 = time.perf_counter()
            code = main(args)
            wall = time.perf_counter() - t0
            # the whole sweep's phases: the CLI's own (this process) and every worker's
            profile = phases.merge(phases.take(), stats.get("phases"))
            rows = json.loads(Path(tmp, "report.json").read_text())["results"]
    finally:
        isolate.Pool = real_pool
    ran = [r for r in rows if r["status"] != "skip" or r["case"] != "(all cases)"]
    workers = stats.get("workers_started", 0)
    spawn = [s - i for s, i in zip(stats.get("spawn_s", []), stats.get("import_s", []))]
    return {"argv": SWEEPS[name], "exit": code, "cases": len(ran), "seconds": round(wall, 2),
            "cases_per_s": round(len(ran) / wall, 3), "workers": workers,
            "spawn_ms_per_worker": round(1000 * sum(spawn) / max(1, len(spawn)), 1),
            "import_ms_per_worker": round(1000 * sum(stats.get("import_s", [])) / max(1, workers), 1),
            "startup_ms_per_case": round(1000 * sum(stats.get("spawn_s", [])) / max(1, len(ran)), 1),
            "profile": phases.as_json(profile)}


def _plain(x):
    from oracle.common import OptState
    from oracle.compare.measuring.errmodel import Bounded
    if isinstance(x, Bounded):
        return x.v.copy()
    if isinstance(x, OptState):
        return OptState(list(x.group_step), _plain(x.params))
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _has_bounded(x) -> bool:
    from oracle.compare.measuring.errmodel import Bounded
    if isinstance(x, Bounded):
        return True
    if isinstance(x, list):
        return any(_has_bounded(v) for v in x)
    return False


def breakdown() -> dict:
    """ms per case of oracle, error model, target, other and report, on a sample run in this process."""
    import oracle
    from oracle.compare import cli
    from oracle.compare.reporting import report
    from oracle.compare.running.driver import rows, run_job
    acc = defaultdict(float)
    real_specs = dict(oracle.SPECS)

    def timed_spec(spec):
        def step(params, grads, state, hps, conv, scaling=None):
            t0 = time.perf_counter()
            out = spec.step(params, grads, state, hps, conv, scaling)
            t1 = time.perf_counter()
            acc["bounded"] += t1 - t0
            if _has_bounded(params):
                plain = (_plain(params), _plain(grads), _plain(state))
                t2 = time.perf_counter()
                spec.step(*plain, hps, conv, scaling)
                acc["oracle"] += time.perf_counter() - t2
                acc["excluded"] += time.perf_counter() - t1
            return out
        return replace(spec, step=step)

    def timed_target(target):
        def make(groups, defaults):
            t0 = time.perf_counter()
            opt = target.make(groups, defaults)
            acc["target"] += time.perf_counter() - t0
            inner = opt.step

            def step(*a, **k):
                t = time.perf_counter()
                try:
                    return inner(*a, **k)
                finally:
                    acc["target"] += time.perf_counter() - t
            opt.step = step
            return opt
        return replace(target, make=make)

    args, optimizers = cli.parse(BREAKDOWN_SAMPLE)
    work, _ = cli.plan(args, optimizers)
    from oracle.compare.running.shard import assign
    work = [job for job, s in zip(work, assign(work, 8)) if s == 0 and job[1].name != "scenario:rank_skew"]
    # a warm worker has paid each target's first-use costs (torch._dynamo on the first optimizer,
    # loading an extension): pay them here first, untimed
    for target in {t.name: t for t, _, _ in work}.values():
        case = next(c for t, c, _ in work if t is target)
        run_job(target, case.name, 0, case.steps, "cpu", getattr(case, "pattern", None))
    results = []
    oracle.SPECS.update({k: timed_spec(v) for k, v in real_specs.items()})
    try:
        t0 = time.perf_counter()
        for target, case, seed in work:
            results += rows(run_job(timed_target(target), case.name, seed, case.steps, "cpu",
                                    getattr(case, "pattern", None)))
        total = time.perf_counter() - t0 - acc["excluded"]
    finally:
        oracle.SPECS.clear()
        oracle.SPECS.update(real_specs)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        report.write(tmp, results, ["bench"], True, "cpu")
        acc["report"] = time.perf_counter() - t0
    n = len(results)
    ms = lambda s: round(1000 * s / max(1, n), 2)  # noqa: E731
    return {"cases": n, "oracle": ms(acc["oracle"]), "error_model": ms(acc["bounded"] - acc["oracle"]),
            "target": ms(acc["target"]), "other": ms(total - acc["bounded"] - acc["target"]),
            "report": ms(acc["report"]), "case_total": ms(total)}


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def measure(jobs: int | None = None) -> dict:
    from oracle.compare.running.workers import default_jobs
    out = {"machine": {"cpus": default_jobs(), "load_average_at_start": load_average(),
                       "python": platform.python_version()},
           "jobs": jobs or default_jobs(), "sweeps": {}}
    for name in SWEEPS:
        out["sweeps"][name] = sweep(name, jobs)
    out["breakdown_ms_per_case"] = breakdown()
    for key in ("spawn", "import"):
        out["breakdown_ms_per_case"][f"{key}_per_worker"] = out["sweeps"]["default"][f"{key}_ms_per_worker"]
    out["breakdown_ms_per_case"]["startup_amortized"] = out["sweeps"]["default"]["startup_ms_per_case"]
    out["machine"]["load_average_at_end"] = load_average()
    return out


def check(result: dict, baseline: dict, tolerance: float) -> list[str]:
    """Sweeps slower than baseline/tolerance (cases per second)."""
    bad = []
    for name, base in baseline["sweeps"].items():
        got = result["sweeps"].get(name)
        if got is None:
            bad.append(f"{name}: not measured")
        elif got["cases_per_s"] < base["cases_per_s"] / tolerance:
            bad.append(f"{name}: {got['cases_per_s']} cases/s < baseline {base['cases_per_s']} / {tolerance:g}")
    return bad


def from_pytest_benchmark(doc: dict) -> dict:
    """The result shape above from `pytest benchmarks/test_bench_harness.py --benchmark-json`."""
    info = doc.get("machine_info", {})
    out = {"machine": {"cpus": info.get("cpu", {}).get("count"), "cpu": info.get("cpu", {}).get("brand_raw"),
                       "python": info.get("python_version")},
           "sweeps": {}, "breakdown_ms_per_case": {}}
    for b in doc["benchmarks"]:
        if b["name"].startswith("test_sweep["):
            out["sweeps"][b["name"][len("test_sweep["):-1]] = b["extra_info"]
        elif b["name"] == "test_breakdown":
            out["breakdown_ms_per_case"] = b["extra_info"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the result here as JSON")
    ap.add_argument("--check", metavar="BASELINE", help="compare cases/s with this baseline JSON")
    ap.add_argument("--result", metavar="JSON", help="with --check: a result already measured (no new run)")
    ap.add_argument("--tolerance", type=float, default=3.0, help="allowed slowdown factor (default 3)")
    ap.add_argument("--jobs", type=int, help="worker processes (default: the cores)")
    a = ap.parse_args(argv)
    result = json.loads(Path(a.result).read_text()) if a.result else measure(a.jobs)
    if "benchmarks" in result:
        result = from_pytest_benchmark(result)
    text = json.dumps(result, indent=1)
    for name, got in result.get("sweeps", {}).items():
        if got.get("profile"):  # for a person: the same as --profile prints
            from oracle.compare.measuring import phases
            print(f"{name} sweep ({' '.join(got['argv'])}):", file=sys.stderr)
            print("\n".join(phases.table(phases.from_json(got["profile"]), got["seconds"])), file=sys.stderr)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)
    if a.check:
        bad = check(result, json.loads(Path(a.check).read_text()), a.tolerance)
        for line in bad:
            print(f"SLOWER: {line}", file=sys.stderr)
        if bad:
            return 1
        print(f"within {a.tolerance:g}x of {a.check}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
