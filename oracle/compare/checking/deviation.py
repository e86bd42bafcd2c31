"""Rows judged under a deviation: status "deviation", never a plain pass (oracle.forms).

A target whose convention (declared, or found by inference) holds a value that oracle.forms
classifies as a deviation for its optimizer is judged under it like under any form: every check
runs with the same bounds. A row that passes them is then not a "pass" but a "deviation": the
implementation does what that convention says, and that is not the named algorithm. The row's
reason names each deviating option, what it does and whose behaviour it is, with its size
measured by the oracle in float64 against the reference form. It fails the run (exit 1) unless
reports/known.toml lists it (check "deviation") or the class declares it on purpose:

    ORACLE_DEVIATIONS = {"decay": "we decay like AdamW under the name Adam, on purpose"}

(option name -> reason); the row then passes, its "deviation" check saying what was declared.
"""
from __future__ import annotations

from ..measuring.checks import CheckResult

CHECK = "deviation"


def of(target) -> list:
    """(option, value, Form) for each deviation in the target's convention; [] for none, or for a
    target without an oracle convention of its optimizer's type."""
    import oracle
    from oracle import forms
    spec = oracle.SPECS.get(getattr(target, "optimizer", None))
    conv = getattr(target, "convention", None)
    if spec is None or conv is None or type(conv) is not type(spec.reference):
        return []
    return forms.deviations(spec, conv)


def text(target) -> str:
    """The deviations of the target's convention, with their measured size."""
    import oracle
    from oracle import forms
    return forms.describe(oracle.SPECS[target.optimizer], target.convention)


# What no form may excuse (oracle.compare.inference.infer.UNEXCUSABLE): such a row stays a failure.
UNEXCUSABLE = ("finite", "bounds")


def mark(target, rows) -> None:
    """Turn the passing rows of a target judged under an undeclared deviation into "deviation" rows
    (and note a declared one on them); a target no form explains has its failing rows "unexplained"."""
    if getattr(target, "unexplained", ""):
        mark_unexplained(target, rows)
    devs = of(target)
    if not devs:
        return
    declared = dict(getattr(target, "deviations", ()) or ())
    open_ = [o for o, _, _ in devs if o not in declared]
    words = text(target)
    for r in rows:
        if r.status != "pass" or not r.checks:
            continue
        if open_:
            r.status = CHECK
            r.reason = f"deviation: {words}"
            r.checks[CHECK] = CheckResult(CHECK, passed=False, compared=1, note=r.reason)
        else:
            said = "; ".join(f"{o}: {declared[o]}" for o, _, _ in devs)
            r.checks[CHECK] = CheckResult(CHECK, passed=True, compared=1,
                                          note=f"declared deviation ({said}): {words}")


def mark_unexplained(target, rows) -> None:
    """Failing rows of a target that no legitimate form or known deviation explains: status
    "unexplained", the reason naming the nearest form, then what this row found (the probes that
    separate the nearest form are listed once, with the inferred conventions). A row failing a check
    no form may excuse stays "fail"."""
    from .explain import describe
    for r in rows:
        failing = {n for n, c in r.checks.items() if not c.passed}
        if r.status != "fail" or failing & set(UNEXCUSABLE):
            continue
        here = describe(r)
        r.status = "unexplained"
        r.reason = f"unexplained: no form of {target.optimizer} explains it (nearest: {target.unexplained}); {here}"


__all__ = ["CHECK", "UNEXCUSABLE", "mark", "mark_unexplained", "of", "text"]
