"""One line per failure, the same everywhere: the terminal, report.json's `reason`, report.md,
JUnit XML and oracle.testing's AssertionError.

    FAIL torch.adamw.fused adamw/fp32/wd0.1/single/normal seed=0: lockstep step 1 group 0 param 0 param
    [3, 1]: expected 0.0123456791, got 0.0123456144, error 54.2 ULP > bound 29.4 ULP (3 of 64 elements
    out of bound); also failing: trajectory [known torch defect (id): summary]

The finding shown is that of the row's most severe failing check (oracle.compare.measuring.checks.SEVERITY:
memory written outside a tensor, then non-finite output, modified inputs, ..., numerical bounds last),
and failure listings put the most severe rows first (`most_severe_first`).

Everything here reads CaseResult / CheckResult / Finding objects or their report.json dicts (the
same field names), so a line can be rebuilt from a report file.
"""
from __future__ import annotations

import math


def _get(obj, name, default=None):
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def _number(x):
    """A float from a report value ("inf" strings included); None when it is not a number."""
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str) and x in ("inf", "-inf", "nan"):
        return float(x)
    return None


def value(x) -> str:
    """A value as a person reads it: floats to 9 significant digits (float32 round-trips)."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, float):
        return format(x, ".9g")
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(value(v) for v in x) + "]"
    return str(x)


def ulps(x) -> str:
    v = _number(x)
    if v is None:
        return "-"
    if math.isinf(v) or math.isnan(v):
        return str(v)
    return format(v, ".3g")


def index_text(index) -> str:
    if index is None:
        return ""
    if isinstance(index, str):  # an old report's repr
        return index
    return "[" + ", ".join(str(i) for i in index) + "]"


def finding_text(f) -> str:
    """check, step, tensor[index]: expected, got, error and bound (or what the exact check compares)."""
    step = _get(f, "step")
    where = f"{_get(f, 'check')}{f' step {step}' if step is not None else ''} {_get(f, 'tensor')}"
    where += index_text(_get(f, "index"))
    text = f"{where}: expected {value(_get(f, 'expected'))}, got {value(_get(f, 'got'))}"
    err, bound = _get(f, "error_ulps"), _get(f, "bound_ulps")
    if err is not None or bound is not None:
        e, b = _number(err), _number(bound)
        rel = ">" if e is not None and b is not None and e > b else "vs"
        text += f", error {ulps(err)} ULP {rel} bound {ulps(bound)} ULP"
    else:
        e, g = _number(_get(f, "expected")), _number(_get(f, "got"))
        if e is not None and g is not None and math.isfinite(e) and math.isfinite(g):
            text += f", off by {format(abs(g - e), '.3g')}; exact check (bound 0)"
        else:
            text += "; exact check (bound 0)"
    detail = _get(f, "detail")
    return text + (f" ({detail})" if detail else "")


def by_severity(items) -> list:
    """(name, check) pairs, most severe first (oracle.compare.measuring.checks.SEVERITY), report order within a rank."""
    from ..measuring.checks import severity
    return sorted(items, key=lambda item: severity(item[0]))


def failing_checks(result) -> list:
    """(name, check) pairs of the checks that did not pass, most severe first."""
    return by_severity((n, c) for n, c in (_get(result, "checks") or {}).items() if not _get(c, "passed", True))


def row_severity(result) -> int:
    """A row's rank: that of its most severe failing check (a "deviation" row: that name's rank)."""
    from ..measuring.checks import NUMERIC_RANK, severity
    names = [n for n, _ in failing_checks(result)]
    if _get(result, "status") == "deviation":
        names.append("deviation")
    return min((severity(n) for n in names), default=NUMERIC_RANK)


def most_severe_first(rows) -> list:
    """Failing rows by their most severe check, in their given order within a rank."""
    return sorted(rows, key=row_severity)


def first_line(text: str, limit: int = 300) -> str:
    line = next((s.strip() for s in reversed(str(text).strip().splitlines()) if s.strip()), "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def describe(result) -> str:
    """Why a row failed, without its target and case: the first finding of the most severe failing
    check (an error row: the exception), then the other failing checks by name, by severity."""
    status = _get(result, "status")
    failing = failing_checks(result)
    if status == "error":
        error = dict(failing).get("error")
        text = _get(result, "reason") or (first_line(_get(error, "note", "")) if error is not None else "")
        return text or "the target raised or crashed (no message)"
    if not failing:
        return ""
    if status in ("deviation", "unexplained") and _get(result, "reason"):
        return _get(result, "reason")  # the deviation's name and size / the nearest form and its probes
    name, check = failing[0]
    findings = _get(check, "findings") or []
    if findings:
        text = finding_text(findings[0])
        more = len(findings) - 1
        if more:
            text += f"; +{more} more finding(s) in {name}"
    else:
        note = _get(check, "note") or ""
        text = f"{name}: failed" + (f" ({first_line(note)})" if note else " (no finding recorded)")
    others = [n for n, _ in failing[1:]]
    if others:
        text += f"; also failing: {', '.join(others)}"
    return text


def failure_line(result, note: str = "", prefix: str | None = None) -> str:
    """`FAIL target case seed=N: <describe>` plus the known/declared note where one applies."""
    status = _get(result, "status") or "fail"
    head = f"{prefix or status.upper()} {_get(result, 'target')} {_get(result, 'case')} seed={_get(result, 'seed', 0)}"
    text = f"{head}: {describe(result)}"
    if status == "error":
        text += " (traceback in the report)"
    note = note.strip()
    if note and note not in text:
        text += f" [{note}]"
    return text


def reason(result) -> str:
    """The row's `reason` in report.json: the failure description, then the row's own notes
    (known-defect and declared-deviation texts) where there are any."""
    status = _get(result, "status")
    own = _get(result, "reason") or ""
    if status != "fail":
        return own
    text = describe(result)
    return f"{text}; {own}" if own and own not in text else (text or own)


__all__ = ["by_severity", "describe", "failing_checks", "failure_line", "finding_text", "most_severe_first", "reason",
           "row_severity", "value"]
