"""Reports: a terminal summary, and markdown + JSON files written atomically.

JSON schema "optimizer-oracle-report/1" (documented in docs/report-schema.md):
top level {schema, created, complete, versions, argv, summary[], results[]};
each result {target, case, optimizer, dtype, hparams, seed, steps, status,
reason, seconds, repro, checks{name: {passed, compared, unbounded,
worst_ratio, worst_error_ulps, worst_bound_ulps, power, note, findings[]}}}.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict

from tabulate import tabulate

from .runinfo import repro_command, versions  # noqa: F401 - part of this module's API

SCHEMA = "optimizer-oracle-report/1"


def _num(x):
    if x is None or isinstance(x, (str, bool, int)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    if isinstance(x, (tuple, list)):
        return [_num(v) for v in x]
    return str(x)


def result_dict(result, device: str) -> dict:
    checks = {}
    for name, c in result.checks.items():
        checks[name] = {
            "passed": c.passed, "compared": c.compared, "unbounded": c.unbounded,
            "worst_ratio": _num(c.worst_ratio), "worst_error_ulps": _num(c.worst_error),
            "worst_bound_ulps": _num(c.worst_bound), "power": _num(c.power), "note": c.note,
            "findings": [{k: _num(v) for k, v in asdict(f).items()} for f in c.findings]}
    return {"target": result.target, "case": result.case, "optimizer": result.optimizer, "dtype": result.dtype,
            "hparams": _num([{k: _num(v) for k, v in hp.items()} for hp in result.hparams]),
            "seed": result.seed, "steps": result.steps, "status": result.status, "reason": result.reason,
            "seconds": round(result.seconds, 3), "repro": repro_command(result, device), "checks": checks}


def summarize(results) -> list[dict]:
    """One row per target x optimizer x dtype."""
    groups = defaultdict(list)
    for r in results:
        kind = "scenarios" if r.case.startswith("scenario:") else r.dtype or "-"
        groups[(r.target, r.optimizer, kind)].append(r)
    rows = []
    for (target, opt, dtype), rs in groups.items():
        count = lambda s: sum(r.status == s for r in rs)  # noqa: E731
        ls = [r.checks["lockstep"] for r in rs if "lockstep" in r.checks]
        worst = max(ls, key=lambda c: c.worst_ratio, default=None)
        powers = sorted(c.power for c in ls if math.isfinite(c.power))
        failed = sorted({n for r in rs for n, c in r.checks.items() if not c.passed})
        rows.append({
            "target": target, "optimizer": opt, "dtype": dtype, "pass": count("pass"), "fail": count("fail"),
            "error": count("error"), "skip": count("skip"), "failed_checks": failed,
            "worst_ratio": worst.worst_ratio if worst else None,
            "worst_error_ulps": worst.worst_error if worst else None,
            "worst_bound_ulps": worst.worst_bound if worst else None,
            "median_power": powers[len(powers) // 2] if powers else None,
            "skip_reason": next((r.reason for r in rs if r.status == "skip"), ""),
        })
    return rows


def _fmt(x, spec=".3g"):
    return "" if x is None else format(x, spec) if isinstance(x, float) else str(x)


def summary_table(rows, fmt: str = "simple") -> str:
    table = [[r["target"], r["optimizer"], r["dtype"], r["pass"], r["fail"], r["error"], r["skip"],
              f"{_fmt(r['worst_error_ulps'])} / {_fmt(r['worst_bound_ulps'])}" if r["worst_ratio"] is not None else "",
              _fmt(r["median_power"], ".1e"), ", ".join(r["failed_checks"]) or (r["skip_reason"][:50] if r["skip"] and not r["pass"] else "")]
             for r in rows]
    head = ["target", "optimizer", "dtype", "pass", "fail", "error", "skip", "worst lockstep err / bound (ULP)",
            "detection power", "failed checks / skip reason"]
    return tabulate(table, head, tablefmt=fmt)


def mismatch_rows(results, device: str):
    for r in results:
        if r.status not in ("fail", "error"):
            continue
        for name, c in r.checks.items():
            if name == "error":
                yield r, name, None
            for f in c.findings:
                yield r, name, f


def markdown(results, rows, meta: dict, device: str) -> str:
    out = ["# Optimizer oracle report\n", f"- created: {meta['created']}", f"- complete: {meta['complete']}",
           f"- versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}",
           f"- command: `{' '.join(meta['argv'])}`", "",
           "Errors are in ULPs of the storage dtype at the operand magnitude; detection power is the smallest "
           "relative error in an update that the lockstep check would catch (median over cases).", "",
           "## Summary", "", summary_table(rows, "github"), ""]
    if "known" in meta:  # the run was judged against known findings (oracle.compare.known)
        from .known import markdown as known_markdown
        out += known_markdown(meta["known"])
    mism = list(mismatch_rows(results, device))
    first = {}
    for r, name, f in mism:
        if f is not None and (r.target, name) not in first:
            first[(r.target, name)] = (r, f)
    if first:
        out += ["## Where to start: the first finding of each target and check", "",
                tabulate([[t, n, r.case, _fmt(f.step), f.tensor, _fmt(f.index), _fmt(f.expected, ".9g"),
                           _fmt(f.got, ".9g"), _fmt(f.error_ulps), _fmt(f.bound_ulps), f"`{repro_command(r, device)}`"]
                          for (t, n), (r, f) in first.items()],
                         ["target", "check", "case", "step", "tensor", "index", "expected", "got", "error (ULP)",
                          "bound (ULP)", "reproduce"], tablefmt="github"), ""]
    out += ["## Mismatches", ""]
    if not mism:
        out.append("None.")
    else:
        table = []
        for r, name, f in mism:
            if f is None:
                table.append([r.target, r.case, "error", "", "", "", "", "", "", "", r.reason,
                              f"`{repro_command(r, device)}`"])
                continue
            table.append([r.target, r.case, name, _fmt(f.step), f.tensor, _fmt(f.index), _fmt(f.expected, ".9g"),
                          _fmt(f.got, ".9g"), _fmt(f.error_ulps), _fmt(f.bound_ulps), f.detail,
                          f"`{repro_command(r, device)}`"])
        out.append(tabulate(table, ["target", "case", "check", "step", "tensor", "index", "expected", "got",
                                    "error (ULP)", "bound (ULP)", "detail", "reproduce"], tablefmt="github"))
    noted = [r for r in results if r.status in ("pass", "fail") and r.reason]
    if noted:
        out += ["", "## Notes (declared deviations and known defects)", ""]
        out += [f"- **{r.target}** `{r.case}` ({r.status}): {r.reason}" for r in noted]
    errors = [r for r in results if r.status == "error"]
    if errors:
        out += ["", "## Errors (the target raised or crashed; other cases went on)", ""]
        for r in errors:
            out += [f"### {r.target} {r.case}", "", "```", r.checks.get("error").note.strip() if "error" in r.checks
                    else r.reason, "```", ""]
    return "\n".join(out) + "\n"


def atomic_write(path: str, text: str) -> None:
    """Write to a temporary file in the same folder, then rename over `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; a report is for reading
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise




def write(report_dir: str, results, argv, complete: bool, device: str, extra: dict | None = None) -> dict:
    rows = summarize(results)
    meta = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "complete": complete,
            "versions": versions(), "argv": list(argv), **(extra or {})}
    doc = {**meta, "summary": [{k: _num(v) for k, v in r.items()} for r in rows],
           "results": [result_dict(r, device) for r in results]}
    atomic_write(os.path.join(report_dir, "report.json"), json.dumps(doc, indent=1, allow_nan=False))
    atomic_write(os.path.join(report_dir, "report.md"), markdown(results, rows, meta, device))
    return doc
