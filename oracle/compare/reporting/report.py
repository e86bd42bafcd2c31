"""Reports: a terminal summary table, and report.json + report.md + report.html published as one unit
(oracle.compare.reporting.publish).

report.json is the data (schema "optimizer-oracle-report/2", the JSON Schema in
oracle/compare/reporting/report.schema.json, documented in docs/report-schema.md): top level {schema, created,
complete, versions, argv, summary[], results[]}; each result {target, case, optimizer, dtype,
hparams (one object per group), seed, steps, status, reason, seconds, repro, checks{name: {passed,
compared, unbounded, worst_ratio, worst_error_ulps, worst_bound_ulps, power, note, findings[],
series?, histogram?}}}. report.md and report.html are views of that document (`markdown(doc)`,
oracle.compare.reporting.html.render(doc)), so both can be rebuilt from a report.json.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
import time
from dataclasses import asdict

from ..checking.summary import (hazards, jsonable, measure, new_failure_rows, skip_reason, skipped_line,  # noqa: F401
                      skipped_targets, summarize, summary_table, verdict_text, run_counts, counts_text)

from ..checking.runinfo import repro_command, versions  # noqa: F401 - part of this module's API
from ..measuring.checks import FAILING

SCHEMA = "optimizer-oracle-report/2"
FILES = ("report.json", "report.md", "report.html")
SERIES_POINTS = 64   # most points of a per-step series kept in report.json (the worst always among them)


# --- JSON values ---------------------------------------------------------------------------------

_num = jsonable  # the name oracle.mutants uses

def _short(x: float, digits: int = 4):
    """A finite float to `digits` significant digits (series and histograms: plotted, not compared)."""
    x = float(x)
    return float(f"{x:.{digits}g}") if math.isfinite(x) else str(x)


def series_dict(c) -> dict | None:
    """A check's per-step series, columnar ({step, ratio, error_ulps, bound_ulps}), thinned to
    SERIES_POINTS evenly spaced steps (the worst step always kept)."""
    series = getattr(c, "series", None)
    if not series:
        return None
    steps = sorted(series)
    if len(steps) > SERIES_POINTS:
        worst = c.worst_step()
        keep = {steps[round(i * (len(steps) - 1) / (SERIES_POINTS - 2))] for i in range(SERIES_POINTS - 1)}
        steps = sorted(keep | {worst})
    return {"step": steps, "ratio": [_short(series[k][0]) for k in steps],
            "error_ulps": [_short(series[k][1]) for k in steps], "bound_ulps": [_short(series[k][2]) for k in steps]}


def histogram_dict(c) -> dict | None:
    """The worst step's per-element errors in ULPs: {step, bins: [[low, high, count], ...]} for the
    non-empty bins of checks.HIST_EDGES ([0, 0] counts exact agreement; high null: unbounded above)."""
    from ..measuring.checks import HIST_EDGES
    worst = c.worst_step() if getattr(c, "series", None) else None
    counts = getattr(c, "histogram", {}).get(worst)
    if not counts or not any(counts):
        return None
    edges = list(HIST_EDGES) + [None]
    bins = [[0.0, 0.0, counts[0]]] if counts[0] else []
    bins += [[edges[i - 1], edges[i], n] for i, n in enumerate(counts) if i and n]
    return {"step": worst, "bins": bins}


def check_dict(c, measures: bool = False) -> dict:
    out = {"passed": c.passed, "compared": c.compared, "unbounded": c.unbounded,
           "worst_ratio": _num(c.worst_ratio), "worst_error_ulps": _num(c.worst_error),
           "worst_bound_ulps": _num(c.worst_bound), "power": _num(c.power), "note": c.note,
           "findings": [{k: _num(v) for k, v in asdict(f).items()} for f in c.findings]}
    if measures:  # per-step data for report.html's plots: failing rows only (report.json size)
        for key, value in (("series", series_dict(c)), ("histogram", histogram_dict(c))):
            if value is not None:
                out[key] = value
    return out


def result_dict(result, device: str) -> dict:
    from ..checking.explain import reason
    bad = result.status in FAILING
    return {"target": result.target, "case": result.case, "optimizer": result.optimizer, "dtype": result.dtype,
            "hparams": [_num(dict(hp)) for hp in result.hparams],
            "seed": result.seed, "steps": result.steps, "status": result.status, "reason": reason(result),
            "seconds": round(result.seconds, 3), "repro": repro_command(result, device),
            "checks": {name: check_dict(c, measures=bad) for name, c in result.checks.items()},
            **({"hazards": _num(result.hazards)} if getattr(result, "hazards", None) else {})}


MD_FAILURES = 40  # failure lines in report.md (all of them are in report.html and report.json)


def markdown(doc: dict) -> str:
    """report.md from a report document: header, summary, new failures, hazards, known entries;
    every finding, the plots, notes and tracebacks are in report.html."""
    from ..checking.explain import failure_line, first_line, most_severe_first
    from ..checking.hazards import entries as precision_hazards, folded_line, group_line, grouped, noticeable
    out = ["# Optimizer oracle report", "", f"- created: {doc['created']}", f"- complete: {doc['complete']}",
           f"- versions: {', '.join(f'{k} {v}' for k, v in doc['versions'].items())}",
           f"- command: `{' '.join(doc['argv'])}`", f"- result: {verdict_text(doc)}",
           "- everything else (every finding, error and bound versus step, error histograms, notes, tracebacks): "
           "[report.html](report.html); the data: `report.json`", "",
           "Errors are in ULPs of the storage dtype at the operand magnitude; detection power is the smallest "
           "relative error in an update that the lockstep check would catch (median over cases).", "",
           "## Summary", "", summary_table(doc["summary"], "github"), ""]
    if doc.get("inferred"):
        from ..inference.infer import lines
        out += ["## Inferred conventions", "", "Each --impl that does not declare its conventions was judged by "
                "the one inferred for it (python -m oracle.compare.inference.infer; --no-infer to skip):", ""]
        for found in doc["inferred"]:
            out += ["```", *lines(found), "```", ""]
    new = most_severe_first(new_failure_rows(doc))  # the MD_FAILURES shown: the most severe
    out += ["## New failures" if doc.get("known") else "## Failures (not judged against known findings)", ""]
    if not new:
        out.append("None.")
    for r in new[:MD_FAILURES]:
        out.append(f"- {failure_line(r)}  \n  reproduce: `{r['repro']}`")
    if len(new) > MD_FAILURES:
        out.append(f"- ... and {len(new) - MD_FAILURES} more (see [report.html](report.html))")
    errors = [r for r in doc["results"] if r["status"] == "error"]
    if errors:
        out += ["", "## Errors (the target raised or crashed; tracebacks in report.html)", ""]
        out += [f"- {r['target']} `{r['case']}`: {first_line(r['reason'])}" for r in errors[:MD_FAILURES]]
        if len(errors) > MD_FAILURES:
            out.append(f"- ... and {len(errors) - MD_FAILURES} more (see [report.html](report.html))")
    out += ["", "## Hazards", ""]
    out += [f"- {h}" for h in hazards(doc)] or ["None."]
    out += ["", "## Precision hazards", "",
            "Hyperparameters and derived constants the target's compute arithmetic cannot hold "
            "(oracle.compare.checking.hazards), with the measured effect where they change results; one line for every "
            "target and dtype holding the same constant the same way, those that change results first "
            "(per target: report.html).", ""]
    groups = grouped(precision_hazards(doc))
    shown = [g for g in groups if noticeable(g)]
    out += [f"- {group_line(g)}" for g in shown[:MD_FAILURES]]
    if len(shown) > MD_FAILURES:
        out.append(f"- ... and {len(shown) - MD_FAILURES} more (see [report.html](report.html))")
    small = [g for g in groups if not noticeable(g)]
    out += [f"- {folded_line(small)}"] if small else []
    out += [] if groups else ["None."]
    known = doc.get("known")
    if known and known.get("entries"):
        out += ["", "## Known findings", "", f"File `{known['file']}`, device {known['device']}.", ""]
        out += [f"- `{e['id']}`: {e['status']} ({e['reason']}); {e['summary']}" for e in known["entries"]]
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




def document(results, argv, complete: bool, device: str, extra: dict | None = None) -> dict:
    """The report.json document of a run."""
    meta = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "complete": complete,
            "versions": versions(), "argv": list(argv), **(extra or {})}
    from ..checking.hazards import summarize as hazard_entries
    doc = {**_num(meta), "summary": [_num(r) for r in summarize(results)],
           "hazards": _num(hazard_entries(results)), "results": [result_dict(r, device) for r in results]}
    doc["counts"] = run_counts(doc)  # the one set of counts every view of the run shows
    return doc


_SCALAR = r'(?:-?\d[\d.eE+-]*|null|true|false|"-?inf"|"nan")'
_NUMBER_LIST = re.compile(r"\[\n\s*(" + _SCALAR + r"(?:,\n\s*" + _SCALAR + r")*)\n\s*\]")


def dumps(doc: dict) -> str:
    """Strict JSON, one key per line, but a list of numbers on one line (series, indices, bins)."""
    text = json.dumps(doc, indent=1, allow_nan=False)
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text) + "\n"


def render(doc: dict, html: bool = True) -> dict:
    """{file name: text} of a report document: report.json, report.md and report.html (its counts
    derived from its rows here, whatever a re-rendered report.json said they were)."""
    doc = {**doc, "counts": run_counts(doc)}
    files = {"report.json": dumps(doc), "report.md": markdown(doc)}
    if html:
        from .html import render as render_html
        files["report.html"] = render_html(doc)
    return files


class ReportNotWritten(OSError):
    """The final write into the report folder failed (a disk that filled during the run), or its
    files could not be rendered: `doc` is the report, `saved` where its report.json was saved
    instead (None when nowhere could take it)."""

    def __init__(self, report_dir: str, cause: Exception, doc: dict, saved: str | None):
        why = (cause.strerror or str(cause)) if isinstance(cause, OSError) \
            else f"rendering it failed ({type(cause).__name__}: {cause})"
        super().__init__(getattr(cause, "errno", None), f"the report could not be written into {report_dir}: {why}")
        self.doc, self.saved = doc, saved


def save_fallback(doc: dict, folders=None) -> str | None:
    """report.json alone, compact, in a new file of the temporary folder (else the home folder): the
    path, or None when neither takes it. `render` rebuilds the rest from it."""
    for folder in folders or (tempfile.gettempdir(), os.path.expanduser("~")):
        path = None
        try:
            fd, path = tempfile.mkstemp(prefix="oracle-compare-report-", suffix=".json", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, separators=(",", ":"))
            return path
        except OSError:
            if path:
                with contextlib.suppress(OSError):
                    os.unlink(path)
    return None


def write(report_dir: str, results, argv, complete: bool, device: str, extra: dict | None = None,
          lock: bool = True) -> dict:
    """Write report.json, report.md and report.html into `report_dir` as one unit
    (oracle.compare.reporting.publish); `lock=False` when the caller already holds the folder's ReportLock.
    A write that fails (the folder was checked before the work, so: a disk that filled since) saves
    report.json elsewhere and raises ReportNotWritten saying where."""
    from .publish import ReportLock, publish
    doc = document(results, argv, complete, device, extra)
    try:
        files = render(doc)
    except Exception as exc:  # noqa: BLE001 - a rendering bug must not lose a sweep's results
        raise ReportNotWritten(report_dir, exc, doc, save_fallback(doc)) from exc
    try:
        if lock:
            with ReportLock(report_dir, argv):
                publish(report_dir, files, meta={"report_schema": SCHEMA})
        else:
            publish(report_dir, files, meta={"report_schema": SCHEMA})
    except OSError as exc:
        raise ReportNotWritten(report_dir, exc, doc, save_fallback(doc)) from exc
    return doc
