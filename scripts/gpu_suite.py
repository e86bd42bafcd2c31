"""Run the GPU verification steps in order and leave every result in one folder.

    python scripts/gpu_suite.py --report-dir reports/gpu

Steps (each with its own time limit, its log in <report-dir>/logs/<step>.log):
    device   scripts/require_cuda.py: refuse at once without a usable CUDA device (nothing else runs)
    build    scripts/build_kernels.py: build our CUDA kernels (JIT) and run one step with them
    tests    pytest -m gpu (junit XML in <report-dir>/pytest-gpu.xml); no test run counts as a failure
    compare  python -m oracle.compare --optimizer all --device cuda, judged against reports/known.toml
             (report.md, report.json): known defects pass, new failures and entries no longer
             reproducing fail
    bench    python benchmarks/bench_fused.py --device cuda (bench.json)
    diff     only with a previous run's report.json (--previous, or $GPU_PREVIOUS_REPORT: the nightly
             workflow downloads last night's artifact): copied to <report-dir>/previous/report.json,
             then python -m oracle.compare diff previous/report.json report.json (diff.md); a new
             failure, a skip that appeared or a worst error/bound ratio that rose > 2x fails it
A failing step does not stop the later ones (a nightly run should say everything it can), but the
exit status is 0 only when every step passed. <report-dir>/steps.json records each step's command,
exit status, seconds and verdict; <report-dir>/summary.md is the table for CI's job summary.

Time limits default to generous values for the nightly job; set GPU_TIMEOUT_<STEP> (seconds, e.g.
GPU_TIMEOUT_BUILD=180) to tighten them, as scripts/gpu_check.sh does.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NO_CUDA = 3


def steps(report_dir: Path, py: str = sys.executable, previous: Path | None = None) -> list[tuple[str, list[str], int]]:
    """(name, argv, default time limit in seconds), in the order they run; "diff" only with a
    previous report (already copied to <report_dir>/previous/report.json)."""
    rd = str(report_dir)
    diff = [("diff", [py, "-m", "oracle.compare", "diff", f"{rd}/previous/report.json", f"{rd}/report.json",
                      "--out", f"{rd}/diff.md"], 300)] if previous is not None else []
    return [
        ("device", [py, "scripts/require_cuda.py", "--json", f"{rd}/device.json"], 120),
        ("build", [py, "scripts/build_kernels.py"], 1200),
        ("tests", [py, "-m", "pytest", "-m", "gpu", "-q", "-ra", "-p", "no:cacheprovider",
                   "--timeout=900", f"--junitxml={rd}/pytest-gpu.xml"], 1800),
        ("compare", [py, "-m", "oracle.compare", "--optimizer", "all", "--device", "cuda",
                     "--report-dir", rd, "--known", "reports/known.toml"], 1800),
        ("bench", [py, "benchmarks/bench_fused.py", "--device", "cuda", "--out", f"{rd}/bench.json"], 900),
    ] + diff


def run_logged(argv: list[str], log: Path, limit_s: int) -> tuple[int | None, float]:
    """Run argv from the repo root, echoing its output and copying it to log.

    Returns (exit status or None on time-out, seconds). On time-out the whole process group is
    sent SIGTERM, then SIGKILL 10 s later, so a hung CUDA call cannot outlive its limit.
    """
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write("$ " + " ".join(argv) + "\n")
        f.flush()
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    return
                try:
                    proc.wait(wait)
                    return
                except subprocess.TimeoutExpired:
                    pass

        timer = threading.Timer(limit_s, kill)
        timer.start()
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                f.write(line)
            proc.wait()
        finally:
            timer.cancel()
        if timed_out.is_set():
            f.write(f"\n[gpu_suite] killed after {limit_s} s time limit\n")
    return (None if timed_out.is_set() else proc.returncode), time.monotonic() - t0


def junit_counts(path: Path) -> dict | None:
    if not path.exists():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}


def verdict(name: str, rc: int | None, report_dir: Path) -> str:
    if rc is None:
        return "TIMEOUT"
    if name == "tests":
        counts = junit_counts(report_dir / "pytest-gpu.xml")
        if rc == 5 or (counts is not None and counts["tests"] - counts["skipped"] == 0):
            return "FAIL (no GPU test ran)"
        if rc == 0 and counts and counts["skipped"]:
            return f"pass ({counts['skipped']} skipped)"
    if name == "compare" and rc == 1:
        return "MISMATCH"
    if name == "compare" and rc == 2:
        return "FAIL (usage error)"
    if name == "diff" and rc == 1:
        return "WORSE (than the previous run)"
    if name == "diff" and rc == 2:
        return "FAIL (unreadable report)"
    return "pass" if rc == 0 else f"FAIL (exit {rc})"


def first_table(md_path: Path) -> list[str]:
    """The first Markdown table in a file (report.md puts its summary table first)."""
    if not md_path.exists():
        return []
    lines, table = md_path.read_text().splitlines(), []
    for line in lines:
        if line.lstrip().startswith("|"):
            table.append(line)
        elif table:
            break
    return table


def bench_table(path: Path, max_rows: int = 60) -> list[str]:
    """bench.json as a table when it is a list of flat records (or holds one under a key)."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    rows = data
    if isinstance(data, dict):
        rows = next((v for v in data.values() if isinstance(v, list) and v and isinstance(v[0], dict)), None)
    if not (isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows)):
        return [f"bench.json: see the artifact ({path.name})"]
    cols = [k for k in rows[0] if not isinstance(rows[0][k], (dict, list))]
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows[:max_rows]]
    if len(rows) > max_rows:
        out.append(f"\n({len(rows) - max_rows} more rows in bench.json)")
    return out


def write_summary(report_dir: Path, results: list[dict]) -> str:
    ok = all(r["verdict"].startswith("pass") for r in results)
    md = [f"# GPU verification: {'PASS' if ok else 'FAIL'}", ""]
    dev = report_dir / "device.json"
    if dev.exists():
        d = json.loads(dev.read_text())
        md += [f"Device: {d.get('device')} (sm {d.get('capability')}), torch {d.get('torch')}, "
               f"CUDA {d.get('cuda')}", ""]
    md += ["| step | verdict | exit | seconds | log |", "|---|---|---|---|---|"]
    md += [f"| {r['step']} | {r['verdict']} | {'-' if r['exit'] is None else r['exit']} | {r['seconds']:.1f} | logs/{r['step']}.log |"
           for r in results]
    counts = junit_counts(report_dir / "pytest-gpu.xml")
    if counts:
        md += ["", "GPU tests: " + ", ".join(f"{v} {k}" for k, v in counts.items())]
    ran = {r["step"] for r in results if r["exit"] is not None}
    if "compare" in ran:
        table = first_table(report_dir / "report.md")
        md += ["", "## oracle.compare --device cuda", ""] + (table or ["(no report.md was written)"])
    if "bench" in ran:
        bench = bench_table(report_dir / "bench.json")
        md += ["", "## Kernel benchmark", ""] + (bench or ["(no bench.json was written)"])
    diff = report_dir / "diff.md"
    if "diff" in ran and diff.exists():
        md += ["", "## Against the previous run", "", diff.read_text().replace("## oracle.compare diff", "### diff", 1)]
    elif "compare" in ran and "diff" not in {r["step"] for r in results}:
        md += ["", "## Against the previous run", "", "No previous report.json (first run, or its artifact could "
               "not be downloaded): no diff."]
    text = "\n".join(md) + "\n"
    (report_dir / "summary.md").write_text(text)
    return text


def keep_previous(path: str | None, report_dir: Path) -> Path | None:
    """Copy a previous report.json to <report_dir>/previous/report.json (kept with the artifact);
    None when there is none to diff against."""
    if not path:
        return None
    src = Path(path)
    if src.is_dir():
        src = src / "report.json"
    if not src.is_file():
        print(f"[gpu_suite] no previous report at {src}: no diff", flush=True)
        return None
    dst = report_dir / "previous" / "report.json"
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.resolve() != dst.resolve():
        shutil.copyfile(src, dst)
    return dst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report-dir", default="reports/gpu", help="where every output goes (default: %(default)s)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-clock budget for all steps together; each step's limit is cut to what is left")
    ap.add_argument("--previous", default=os.environ.get("GPU_PREVIOUS_REPORT") or None, metavar="REPORT_JSON",
                    help="a previous run's report.json to diff against (default $GPU_PREVIOUS_REPORT; none: no diff)")
    args = ap.parse_args(argv)
    end = None if args.budget_s is None else time.monotonic() + args.budget_s
    report_dir = Path(args.report_dir)
    if not report_dir.is_absolute():
        report_dir = ROOT / report_dir
    (report_dir / "logs").mkdir(parents=True, exist_ok=True)
    previous = keep_previous(args.previous, report_dir)

    results = []
    for name, cmd, default_limit in steps(report_dir, previous=previous):
        limit = int(os.environ.get(f"GPU_TIMEOUT_{name.upper()}", default_limit))
        if end is not None:
            limit = min(limit, int(end - time.monotonic()))
        if limit < 5:
            results.append({"step": name, "command": cmd, "exit": None, "seconds": 0.0, "limit_s": limit,
                            "verdict": "FAIL (not run: time budget spent)"})
            print(f"[gpu_suite] --- {name}: not run, the time budget is spent", flush=True)
            continue
        print(f"\n[gpu_suite] === {name} (limit {limit} s): {' '.join(cmd)}", flush=True)
        rc, secs = run_logged(cmd, report_dir / "logs" / f"{name}.log", limit)
        results.append({"step": name, "command": cmd, "exit": rc, "seconds": round(secs, 2),
                        "limit_s": limit, "verdict": verdict(name, rc, report_dir)})
        print(f"[gpu_suite] --- {name}: {results[-1]['verdict']} in {secs:.1f} s", flush=True)
        (report_dir / "steps.json").write_text(json.dumps(results, indent=2))
        if name == "device" and rc != 0:
            write_summary(report_dir, results)
            return NO_CUDA if rc == NO_CUDA else 1
    print("\n" + write_summary(report_dir, results))
    print(f"[gpu_suite] reports in {report_dir}")
    return 0 if all(r["verdict"].startswith("pass") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
