"""`python -m oracle.compare diff OLD/report.json NEW/report.json`: what changed between two runs.

Rows are matched by (target, case, seed); checks by name. Reported, as markdown (for a CI job
summary or a terminal):

- new failures: a check (or an error row) failing in NEW that did not fail in OLD;
- fixed: a check failing in OLD that passes in NEW (its row ran in both);
- skips that appeared (the row ran in OLD and is skipped in NEW, or a target that ran in OLD is skipped
  as a whole) or vanished; rows new to NEW that skip (a new target's, a new case's) are counted apart;
- rows no longer run / newly run (information only);
- per target x dtype x check (dtype "scenarios" for scenario rows), the worst error-to-bound ratio
  (`worst_ratio` of report.json's checks, max over rows that ran) before and after; a ratio that rose
  by more than --factor is flagged even while it still passes. Ratios below --floor count as --floor,
  so exact checks moving between 0 and a rounding do not flag.

Exit status: 0 nothing got worse, 1 something did (a new failure, a skip that appeared, a flagged
ratio), 2 usage error (a file missing, not JSON, not a report).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, field
from ..measuring.checks import FAILING, RAN

DEFAULT_FACTOR = 2.0
DEFAULT_FLOOR = 0.01


class DiffError(ValueError):
    pass


def load_report(path: str) -> dict:
    if os.path.isdir(path):
        path = os.path.join(path, "report.json")
    from .publish import verify
    torn = verify(os.path.dirname(path) or ".")  # files beside manifest.json must be one run's
    if torn:
        raise DiffError(f"{path} is not one run's report: {'; '.join(torn)}")
    from .schema import load
    from ..isolation.untrusted import DataFileError
    try:
        doc = load(path)
    except DataFileError as exc:
        raise DiffError(str(exc)) from None
    doc["_path"] = path
    return doc


def _float(x) -> float | None:
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _rows(doc: dict) -> dict:
    return {(r["target"], r["case"], r.get("seed", 0)): r for r in doc["results"]}


def _failing(row: dict) -> set:
    names = {n for n, c in row.get("checks", {}).items() if not c.get("passed", True)}
    if not names and row["status"] in FAILING:
        names = {row["status"]}
    return names


def worst_ratios(doc: dict) -> dict:
    """(target, dtype, check) -> the worst error/bound ratio over the rows that ran."""
    out = {}
    for r in doc["results"]:
        if r["status"] not in RAN:
            continue
        kind = "scenarios" if r["case"].startswith("scenario:") else (r.get("dtype") or "-")
        for name, c in r.get("checks", {}).items():
            v = _float(c.get("worst_ratio"))
            if v is None:
                continue
            key = (r["target"], kind, name)
            out[key] = max(out.get(key, v), v)
    return out


@dataclass
class Diff:
    old: dict
    new: dict
    factor: float
    floor: float
    new_failures: list = field(default_factory=list)    # (target, case, seed, check, status)
    fixed: list = field(default_factory=list)           # (target, case, seed, check)
    skips_appeared: list = field(default_factory=list)  # (target, case, seed, reason)
    skips_vanished: list = field(default_factory=list)  # (target, case, seed, now status)
    not_run: list = field(default_factory=list)         # rows in OLD only
    newly_run: list = field(default_factory=list)       # rows in NEW only (not skipped)
    new_rows_skipped: list = field(default_factory=list)  # rows in NEW only, skipped (target, case, seed, reason)
    ratios: list = field(default_factory=list)          # (target, dtype, check, before, after, flagged)

    @property
    def rose(self) -> list:
        return [r for r in self.ratios if r[5]]

    @property
    def worse(self) -> bool:
        return bool(self.new_failures or self.skips_appeared or self.rose)


def compare(old: dict, new: dict, factor: float = DEFAULT_FACTOR, floor: float = DEFAULT_FLOOR) -> Diff:
    d = Diff(old, new, factor, floor)
    a, b = _rows(old), _rows(new)
    ran_before = {key[0] for key, ra in a.items() if ra["status"] != "skip"}
    for key, rb in b.items():
        ra = a.get(key)
        if rb["status"] == "skip":
            # worse only where something that ran in OLD runs no more: the row itself, or a target that
            # ran skipped as a whole; a row new to NEW (a new target, a new case) that skips loses nothing
            if (ra is not None and ra["status"] != "skip") or (ra is None and key[0] in ran_before
                                                                and rb["case"] == "(all cases)"):
                d.skips_appeared.append((*key, rb.get("reason", "")))
            elif ra is None:
                d.new_rows_skipped.append((*key, rb.get("reason", "")))
            continue
        if ra is None:
            d.newly_run.append(key)
        elif ra["status"] == "skip":
            d.skips_vanished.append((*key, rb["status"]))
        before = _failing(ra) if ra is not None and ra["status"] != "skip" else set()
        for check in sorted(_failing(rb) - before):
            d.new_failures.append((*key, check, rb["status"]))
        if ra is not None and ra["status"] != "skip":
            after = _failing(rb)
            for check in sorted(before - after):
                # fixed only where NEW ran that check (an error row ran none of the others)
                if rb["status"] in ("pass", "fail") or check in rb.get("checks", {}):
                    d.fixed.append((*key, check))
    for key, ra in a.items():
        if key not in b:
            if ra["status"] != "skip":
                d.not_run.append(key)
            else:
                d.skips_vanished.append((*key, "absent"))
    wa, wb = worst_ratios(old), worst_ratios(new)
    for key in sorted(set(wa) | set(wb)):
        before, after = wa.get(key), wb.get(key)
        flagged = (before is not None and after is not None
                   and max(after, floor) > factor * max(before, floor))
        d.ratios.append((*key, before, after, flagged))
    return d


def _r(x) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else f"{x:.3g}"


def markdown(d: Diff, limit: int = 50) -> str:
    def vers(doc):
        v = doc.get("versions", {})
        return ", ".join(f"{k} {v[k]}" for k in ("torch", "deepspeed", "bitsandbytes", "torchao") if k in v)

    verdict = "WORSE" if d.worse else "no regression"
    out = [f"## oracle.compare diff: {verdict}", "",
           f"- old: `{d.old['_path']}` ({d.old.get('created', '?')}; {vers(d.old)})",
           f"- new: `{d.new['_path']}` ({d.new.get('created', '?')}; {vers(d.new)})",
           f"- **{len(d.new_failures)} new failures, {len(d.fixed)} fixed, {len(d.skips_appeared)} skips appeared, "
           f"{len(d.skips_vanished)} vanished, {len(d.rose)} worst-ratio rises > {d.factor:g}x** "
           f"(ratios below {d.floor:g} count as {d.floor:g}); {len(d.not_run)} rows no longer run, "
           f"{len(d.newly_run)} newly run, {len(d.new_rows_skipped)} new rows skipped", ""]

    def section(title, head, rows):
        if not rows:
            return
        out.extend([f"### {title} ({len(rows)})", "", "| " + " | ".join(head) + " |",
                    "|" + "---|" * len(head)])
        out.extend("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows[:limit])
        if len(rows) > limit:
            out.append(f"\n({len(rows) - limit} more)")
        out.append("")

    section("New failures", ["target", "case", "seed", "check", "status"], d.new_failures)
    section("Fixed", ["target", "case", "seed", "check"], d.fixed)
    section("Skips that appeared", ["target", "case", "seed", "reason"],
            [(*k, reason[:120]) for *k, reason in d.skips_appeared])
    section("Skips that vanished", ["target", "case", "seed", "now"], d.skips_vanished)
    section(f"Worst error/bound ratio rose more than {d.factor:g}x", ["target", "dtype", "check", "before", "after"],
            [(t, k, c, _r(b), _r(a)) for t, k, c, b, a, _ in d.rose])
    section("Rows no longer run", ["target", "case", "seed"], d.not_run)
    section("Rows newly run", ["target", "case", "seed"], d.newly_run)
    changed = [(t, k, c, _r(b), _r(a), "**rose**" if f else "")
               for t, k, c, b, a, f in d.ratios if b is not None and a is not None and _r(b) != _r(a)]
    if changed:
        out += ["<details><summary>Worst error/bound ratio per target, dtype and check that changed "
                f"({len(changed)})</summary>", ""]
        section("Changed ratios", ["target", "dtype", "check", "before", "after", ""], changed)
        out += ["</details>", ""]
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m oracle.compare diff",
                                description="What changed between two oracle.compare runs (report.json files). "
                                            "Exit 1 when something got worse.")
    p.add_argument("old", help="the earlier report.json (or its folder)")
    p.add_argument("new", help="the later report.json (or its folder)")
    p.add_argument("--factor", type=float, default=DEFAULT_FACTOR,
                   help=f"flag a worst error/bound ratio that rose by more than this factor (default {DEFAULT_FACTOR:g})")
    p.add_argument("--floor", type=float, default=DEFAULT_FLOOR,
                   help=f"ratios below this count as this when comparing (default {DEFAULT_FLOOR:g})")
    p.add_argument("--out", metavar="FILE", help="also write the markdown here")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    if not args.factor > 1.0 or not args.floor > 0.0:
        print("error: --factor must be > 1 and --floor > 0", file=sys.stderr)
        return 2
    try:
        old, new = load_report(args.old), load_report(args.new)
    except DiffError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        d = compare(old, new, args.factor, args.floor)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # rows that are not ours: data, never trusted
        print(f"error: {args.old} or {args.new}: a result row is not one of ours ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 2
    text = markdown(d)
    print(text, end="")
    if args.out:
        from .report import atomic_write
        atomic_write(args.out, text)
    return 1 if d.worse else 0


__all__ = ["Diff", "DiffError", "compare", "load_report", "main", "markdown", "worst_ratios"]
