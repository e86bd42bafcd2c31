"""The summary of a run (one row per target x optimizer x dtype) and what report.md and report.html
say about it; works on CaseResults and on report.json result dicts alike."""
from __future__ import annotations

import math
import numbers
from collections import Counter, defaultdict

from tabulate import tabulate
from ..measuring.checks import FAILING, severity


def apart_text(counts) -> str:
    """The rows counted apart from numerical failures ("3 deviation(s), 1 unexplained, "), if any."""
    parts = [f"{counts['deviation']} deviation(s)" if counts.get("deviation") else "",
             f"{counts['unexplained']} unexplained" if counts.get("unexplained") else ""]
    return "".join(p + ", " for p in parts if p)


def jsonable(x):
    """A JSON value: numbers stay numbers (NumPy scalars included), non-finite floats become the
    strings "inf", "-inf", "nan" (strict JSON has none), tuples become lists, objects stay objects."""
    if x is None or isinstance(x, (str, bool)):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        x = float(x)
        return x if math.isfinite(x) else str(x)
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return [jsonable(v) for v in x]
    return str(x)


def _field(obj, name, default=None):
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def _float(x):
    if isinstance(x, bool) or x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def measure(c) -> tuple | None:
    """(worst ratio, its error ULPs, its bound ULPs) of a check (object or report dict) that compared
    against a derived bound; None for exact checks and checks that compared nothing."""
    ratio = _float(_field(c, "worst_ratio"))
    err = _float(_field(c, "worst_error_ulps", _field(c, "worst_error")))
    bound = _float(_field(c, "worst_bound_ulps", _field(c, "worst_bound")))
    if ratio is None or not bound or not _field(c, "compared"):
        return None
    return ratio, err, bound


def row_kind(r) -> str:
    return "scenarios" if _field(r, "case").startswith("scenario:") else (_field(r, "dtype") or "-")


def skip_reason(target: str, reason: str) -> str:
    """A skip reason without the target's name in front (the row names it)."""
    return reason[len(target) + 1:] if reason.startswith(target + " ") else reason


def summarize(results) -> list[dict]:
    """One row per target x optimizer x dtype ("scenarios" for scenario rows); results are CaseResults
    or report.json result dicts. The worst error/bound is lockstep's for matrix rows and the worst over
    every bounded check for scenario rows. Failed checks are listed most severe first."""
    groups = defaultdict(list)
    for r in results:
        groups[(_field(r, "target"), _field(r, "optimizer"), row_kind(r))].append(r)
    rows = []
    for (target, opt, dtype), rs in groups.items():
        count = lambda s: sum(_field(r, "status") == s for r in rs)  # noqa: E731
        checks = [(n, c) for r in rs for n, c in (_field(r, "checks") or {}).items()]
        measured = [m for n, c in checks if (dtype == "scenarios" or n == "lockstep") and (m := measure(c))]
        worst = max(measured, key=lambda m: m[0], default=None)
        powers = sorted(p for n, c in checks if n == "lockstep" and (p := _float(_field(c, "power"))) is not None
                        and math.isfinite(p))
        failed = sorted({n for n, c in checks if not _field(c, "passed", True)}, key=lambda n: (severity(n), n))
        skips = Counter(skip_reason(target, _field(r, "reason") or "") for r in rs if _field(r, "status") == "skip")
        rows.append({
            "target": target, "optimizer": opt, "dtype": dtype, "pass": count("pass"), "fail": count("fail"),
            "error": count("error"), "skip": count("skip"), "deviation": count("deviation"),
            "unexplained": count("unexplained"), "failed_checks": failed,
            "worst_ratio": worst[0] if worst else None,
            "worst_error_ulps": worst[1] if worst else None,
            "worst_bound_ulps": worst[2] if worst else None,
            "median_power": powers[len(powers) // 2] if powers else None,
            "skip_reason": "; ".join(f"{why} (x{n})" if n > 1 else why for why, n in skips.items()),
        })
    return rows


def skipped_targets(rows) -> list[dict]:
    """Summary rows of targets skipped as a whole (unavailable here)."""
    return [r for r in rows if r["skip"] and not (r["pass"] or r["fail"] or r["error"] or r.get("deviation")
                                                or r.get("unexplained")) and r["dtype"] == "-"]


def skipped_line(rows) -> str:
    """One line for every target skipped as a whole, grouped by reason."""
    by_reason = defaultdict(list)
    for r in skipped_targets(rows):
        by_reason[r["skip_reason"]].append(r["target"])
    if not by_reason:
        return ""
    parts = [f"{', '.join(names)} ({why})" for why, names in by_reason.items()]
    n = sum(len(v) for v in by_reason.values())
    return f"Skipped {n} target(s), unavailable here: " + "; ".join(parts)


def _fmt(x, spec=".3g"):
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    return format(x, spec) if isinstance(x, float) else str(x)


def summary_table(rows, fmt: str = "simple") -> str:
    """The summary rows that ran (targets skipped as a whole are left to skipped_line)."""
    shown = [r for r in rows if r not in skipped_targets(rows)]
    # rows judged under a deviation, or unexplained by any form, are counted apart from failures
    apart = [s for s in ("deviation", "unexplained") if any(r.get(s) for r in shown)]
    table = [[r["target"], r["optimizer"], r["dtype"], r["pass"], r["fail"], *(r.get(s, 0) for s in apart),
              r["error"], r["skip"],
              f"{_fmt(r['worst_error_ulps'])} / {_fmt(r['worst_bound_ulps'])}" if r["worst_ratio"] is not None else "",
              _fmt(r["median_power"], ".1e"), ", ".join(r["failed_checks"]),
              r["skip_reason"] if r["skip"] else ""]
             for r in shown]
    head = ["target", "optimizer", "dtype", "pass", "fail", *apart, "error", "skip", "worst err / bound (ULP)",
            "detection power", "failed checks", "skipped: why"]
    return tabulate(table, head, tablefmt=fmt)


# --- report.md: summary, new failures, hazards; the rest is in report.html ----------------------------

def new_failure_rows(doc: dict) -> list[dict]:
    """The failing/erroring result dicts holding a failure no applicable known entry matches (all
    of them when the run was not judged)."""
    bad = [r for r in doc["results"] if r["status"] in FAILING]
    known = doc.get("known")
    if not known:
        return bad
    new = {(f["target"], f["case"], f["seed"]) for f in known.get("new", [])}
    return [r for r in bad if (r["target"], r["case"], r["seed"]) in new]


def hazards(doc: dict) -> list[str]:
    """What makes this run's verdict weaker than it looks, one line each."""
    out = []
    results = doc["results"]
    if not doc.get("complete", True):
        out.append(f"The run was interrupted: only {len(results)} result rows were written (complete: false).")
    errors = [r for r in results if r["status"] == "error"]
    if errors:
        targets = sorted({r["target"] for r in errors})
        out.append(f"{len(errors)} row(s) errored (the target raised or crashed; nothing was checked there): "
                   f"{', '.join(targets[:8])}{' ...' if len(targets) > 8 else ''}.")
    known = doc.get("known")
    if known:
        for e in known.get("entries", []):
            if e["status"] == "fixed":
                out.append(f"Known entry `{e['id']}` no longer reproduces: {e['reason']}.")
        not_run = [e["id"] for e in known.get("entries", []) if e["status"] == "not run"]
        if not_run:  # counted: the "Known findings" table lists each
            out.append(f"{len(not_run)} known entries not exercised by this run (the \"Known findings\" table "
                       "lists each).")
        other = [f for f in known.get("new", []) if f.get("not_applicable_entries")]
        if other:
            out.append(f"{len(other)} new failure(s) match entries written for other versions or devices "
                       f"({', '.join(sorted({i for f in other for i in f['not_applicable_entries']}))}).")
    elif "known" in doc:
        out.append("Not judged against known findings (`--known none`): every failure counts.")
    rows = doc.get("summary") or [jsonable(r) for r in summarize(results)]
    line = skipped_line(rows)
    if line:
        out.append(line + ".")
    partial = [r for r in results if r["status"] == "skip" and r["case"] != "(all cases)"]
    if partial:
        why = Counter(skip_reason(r["target"], r["reason"]) for r in partial)
        out.append(f"{len(partial)} case(s) skipped where a target lacks a dtype or option: "
                   + "; ".join(f"{w} (x{n})" for w, n in why.most_common(6))
                   + ("; ..." if len(why) > 6 else "") + ".")
    unbounded = sum(c.get("unbounded", 0) for r in results for c in r["checks"].values())
    if unbounded:
        out.append(f"{unbounded} element comparison(s) had no derivable bound (the compute precision does not "
                   f"determine the result) and were counted, not compared.")
    declared = sorted({(r["target"], n) for r in results for n, c in r["checks"].items()
                       if "declared deviation" in (c.get("note") or "")})
    if declared:
        out.append(f"{len(declared)} check(s) pass as declared deviations (by design, not defects): "
                   + ", ".join(f"{t} {n}" for t, n in declared[:8]) + (" ..." if len(declared) > 8 else "") + ".")
    return out


WHOLE_TARGET = "(all cases)"  # the case of the one row standing for a target skipped as a whole


def run_counts(doc: dict) -> dict:
    """The run's counts, the one set that console, report.md, report.html, report.json and JUnit show.
    Units: result rows (a target x case x seed; a target skipped as a whole is not a row but counted
    apart), and the failing rows split into new (holding a failure no applicable known entry matches)
    and known; known entries that no longer reproduce are counted as entries."""
    rows = [r for r in doc["results"] if r["case"] != WHOLE_TARGET]
    status = Counter(r["status"] for r in rows)
    failing = sum(status[s] for s in FAILING)
    known = doc.get("known")
    new = len(new_failure_rows({**doc, "results": rows})) if known else failing
    out = {"rows": len(rows), **{s: status[s] for s in ("pass", *FAILING, "skip")}, "failing": failing,
           "judged": bool(known), "new": new, "known": failing - new,
           # counted from the entries, as the rows are: a re-rendered report.json's own counts are not trusted
           "fixed_entries": sum(isinstance(e, dict) and e.get("status") == "fixed"
                                for e in (known or {}).get("entries", [])),
           "targets_skipped": len(doc["results"]) - len(rows)}
    out["ok"] = bool(known["ok"]) if known else not failing
    return out


def counts_text(c: dict) -> str:
    """The counts as one line: rows by status, the failing rows new and known, then what is not a row."""
    text = (f"{plural(c['rows'], 'result row')}: {c['pass']} passed, {c['fail']} failed, {apart_text(c)}"
            f"{plural(c['error'], 'error')}, {c['skip']} skipped")
    if c["judged"] and c["failing"]:
        text += f"; of the {plural(c['failing'], 'failing row')}: {c['new']} new, {c['known']} known"
    elif not c["judged"]:
        text += "; not judged against known findings"
    if c["targets_skipped"]:
        text += f"; {c['targets_skipped']} target(s) skipped as a whole"
    if c["fixed_entries"]:
        text += f"; {c['fixed_entries']} known entr{'y' if c['fixed_entries'] == 1 else 'ies'} fixed (no longer reproducing)"
    return text


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def verdict_text(doc: dict) -> str:
    c = run_counts(doc)  # from the rows, never a stored count: a rendered report.json is not trusted
    return f"**{'PASS' if c['ok'] else 'FAIL'}**: {counts_text(c)}"
