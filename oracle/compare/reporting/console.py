"""What `python -m oracle.compare` prints: progress while it runs, and the outcome.

Progress counts jobs (a job: one target x matrix case or scenario x seed; a scenario job yields one
result row per variant), and so does the closing line ("148 jobs -> 161 result rows: ..."). On a
terminal the progress is one redrawn bar with the elapsed time and an ETA (failures are printed
above it as they happen); otherwise, or with --verbose, one plain line per result row; --quiet
prints none. The outcome: the known-findings verdict, the summary table (not with --quiet), one
line for the targets skipped as a whole, the counts, then one line per failure (check, tensor,
index, expected, got, error and bound in ULPs, the known/declared note) with its repro command,
new failures first, the most severe first within each (oracle.compare.measuring.checks.SEVERITY), "... and N
more (see report)" past the limit (--verbose: no limit).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from collections import Counter
from ..measuring.checks import FAILING

FAILURE_LINES = 10  # failure lines printed at the end (all of them with --verbose)


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Per-job progress on `stream` (stderr): a bar with ETA on a terminal, plain lines elsewhere."""

    def __init__(self, total: int, stream=None, verbosity: int = 0, tty: bool | None = None):
        self.total, self.stream, self.verbosity = total, stream or sys.stderr, verbosity
        self.tty = (self.stream.isatty() if tty is None else tty) and verbosity == 0 and \
            os.environ.get("TERM") != "dumb"
        self.done, self.t0, self.counts, self.drawn = 0, time.monotonic(), Counter(), False

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def bar(self, label: str = "") -> str:
        width = shutil.get_terminal_size((100, 24)).columns
        elapsed = time.monotonic() - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else None
        filled = round(20 * self.done / self.total) if self.total else 20
        bad = ", ".join(f"{self.counts[s]} {s}" for s in FAILING if self.counts[s])
        text = (f"[{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.total} jobs"
                f"{f' ({bad})' if bad else ''}  {_clock(elapsed)} elapsed"
                f"{f', ETA {_clock(eta)}' if eta is not None else ''}{f'  {label}' if label else ''}")
        return text[:max(width - 1, 20)]

    def start(self, label: str = "") -> None:
        if self.tty and self.total:
            self._write("\r\x1b[2K" + self.bar(label))
            self.drawn = True

    def advance(self, rows, job_label: str, next_label: str = "") -> None:
        """A job finished with these result rows."""
        from ..checking.explain import describe
        self.done += 1
        for r in rows:
            self.counts[r.status] += 1
        if self.verbosity < 0:
            return
        if self.tty:
            above = [f"{r.status.upper()} {r.target} {r.case} seed={r.seed}: {describe(r)}"
                     for r in rows if r.status in FAILING]
            self._write("\r\x1b[2K" + "".join(line + "\n" for line in above)
                        + (self.bar(next_label) if self.done < self.total else ""))
            self.drawn = self.done < self.total
            return
        for r in rows:
            line = f"[{self.done}/{self.total}] {r.status:5s} {r.target} {r.case} seed={r.seed}"
            if r.status in FAILING:
                line += f"  ({describe(r)})"
            elif r.status == "skip" and self.verbosity > 0:
                line += f"  ({r.reason})"
            self._write(line + "\n")
            if self.verbosity > 0:
                for name, c in r.checks.items():
                    self._write(f"      {name}: {'pass' if c.passed else 'FAIL'}, compared {c.compared}, "
                                f"worst {c.worst_error:.3g} / {c.worst_bound:.3g} ULP (ratio {c.worst_ratio:.3g})\n")

    def close(self) -> None:
        if self.drawn:
            self._write("\r\x1b[2K")
            self.drawn = False


def job_label(job) -> str:
    target, case, seed = job
    return f"{target.name} {case.name}"


def known_note(result, verdict) -> str:
    """The result's own notes (known-defect and declared texts) and the known entries that cover it."""
    ids = [] if verdict is None else sorted({e for f in verdict.known if f.result is result for e in f.entries})
    own = result.reason if result.status == "fail" else ""
    extra = [f"known defect {i}" for i in ids if i not in own]
    return "; ".join(filter(None, [own, *extra]))


def failure_lines(results, judge, device: str, limit: int | None, report_path: str) -> list[str]:
    """One line per failing row with its repro command: new ones first, then known ones, each the most
    severe first."""
    from ..checking.explain import failure_line, most_severe_first
    from .report import repro_command
    bad = most_severe_first(r for r in results if r.status in FAILING)
    new = [r for r in bad if judge.is_new(r)]
    known = [r for r in bad if not judge.is_new(r)]
    ordered = [("NEW " if judge.active else "", r) for r in new] + [("KNOWN ", r) for r in known]
    out = []
    for tag, r in ordered[:limit]:
        line = failure_line(r, known_note(r, judge.verdict), prefix=f"{tag}{r.status.upper()}")
        out.append(f"  {line}\n    reproduce: {repro_command(r, device)}")
    if limit is not None and len(ordered) > limit:
        out.append(f"  ... and {len(ordered) - limit} more (see {report_path})")
    return out


def counts_line(jobs_done: int, jobs_total: int, doc: dict, seconds: float, report_path: str) -> str:
    from ..checking.summary import counts_text, plural
    jobs = plural(jobs_total, "job") if jobs_done == jobs_total else f"{jobs_done} of {plural(jobs_total, 'job')}"
    return f"\n{jobs} -> {counts_text(doc['counts'])}; {seconds:.1f} s; report: {report_path}"


def outcome(results, doc: dict, judge, args, jobs_done: int, jobs_total: int, seconds: float) -> list[str]:
    """Everything printed after the run, in order."""
    from . import report
    verbosity = getattr(args, "verbosity", 0)
    report_path = os.path.join(args.report_dir, "report.html")
    rows = report.summarize(results)
    out = list(judge.lines())
    if verbosity >= 0:
        out.append(report.summary_table(rows))
    skipped = report.skipped_line(rows)
    if skipped:
        out.append(skipped)
    out.append(counts_line(jobs_done, jobs_total, doc, seconds, report_path))
    out += failure_lines(results, judge, args.device, None if verbosity > 0 else FAILURE_LINES, report_path)
    return out


__all__ = ["FAILURE_LINES", "Progress", "failure_lines", "known_note", "outcome"]
