"""Where a run's time goes: wall and CPU seconds per phase, summed over the processes of the run.

A phase is a named span of work: the plan, a worker's start-up, a matrix case's lockstep steps (the
target's step, reading its state back, the oracle with its error model, the comparisons), its hazard
measurements and round trips, teach, each scenario kind, inference, the report. Phases nest, and each
is charged only the time not spent in a phase inside it, so the phases of a process add up to the
time it spent inside any phase. CPU time counts this process and the child processes it waited for
(rank processes, a target's own forked process), from getrusage.

A worker sends what it measured with each result (take()); the CLI adds them up (merge) and prints
the table with --profile; benchmarks/bench_harness.py prints the same for its sweeps. The cost is two
clock readings and four getrusage calls per phase (about 4 us), so it is always on.
"""
from __future__ import annotations

import resource
import time

_totals: dict[str, list] = {}   # phase -> [wall s, cpu s, times entered], exclusive of nested phases
# open phases: [wall, own CPU, children's CPU at entry; the same spent in phases inside; count_children]
_stack: list[list] = []


def _clocks() -> tuple[float, float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def cpu_s() -> float:
    """CPU seconds of this process and of the children it has waited for."""
    _, me, kids = _clocks()
    return me + kids


class phase:
    """A span of work named `name` (a context manager). count_children=False: children this phase reaps
    are not its work (the CLI's loop, at whose end the worker pool is closed: each worker measured its
    own time and sent it). A class rather than a generator: it is entered about 70000 times in a
    default job (four per checked step), and the generator's machinery cost more than the clocks."""

    __slots__ = ("name", "count_children", "frame")

    def __init__(self, name: str, count_children: bool = True):
        self.name, self.count_children = name, count_children

    def __enter__(self):
        self.frame = [*_clocks(), 0.0, 0.0, 0.0]
        _stack.append(self.frame)
        return self

    def __exit__(self, *exc) -> None:
        frame = self.frame
        _stack.pop()
        now = _clocks()
        spent = [now[k] - frame[k] for k in range(3)]
        total = _totals.setdefault(self.name, [0.0, 0.0, 0])
        total[0] += spent[0] - frame[3]
        total[1] += spent[1] - frame[4] + (spent[2] - frame[5] if self.count_children else 0.0)
        total[2] += 1
        if _stack:
            outer = _stack[-1]
            for k in range(3):
                outer[3 + k] += spent[k]


def absorb(more: dict | None) -> None:
    """Add totals measured in another process to this one's (a job's own forked child: the phase that
    waited for it counts none of its CPU, count_children=False, so nothing is counted twice)."""
    merge(_totals, more)


def take() -> dict:
    """This process's totals since the last take, and start afresh (open phases keep counting)."""
    out = {name: list(v) for name, v in _totals.items()}
    _totals.clear()
    return out


def merge(into: dict, more: dict | None) -> dict:
    """Add another process's totals (a worker's, sent with a result) into `into`; returns it."""
    for name, (wall, cpu, n) in (more or {}).items():
        total = into.setdefault(name, [0.0, 0.0, 0])
        total[0] += wall
        total[1] += cpu
        total[2] += n
    return into


def table(totals: dict, wall_s: float | None = None) -> list[str]:
    """The totals as lines for a person, the most CPU first, with each phase's share of the CPU."""
    cpu = sum(v[1] for v in totals.values()) or 1.0
    head = f"where the time went ({sum(v[1] for v in totals.values()):.1f} s of CPU in all processes"
    head += f", {wall_s:.1f} s of wall time):" if wall_s is not None else "):"
    width = max([len("phase"), *map(len, totals)])
    lines = [head, f"  {'phase':{width}s} {'times':>7s} {'wall s':>8s} {'CPU s':>8s} {'CPU %':>6s}"]
    for name, (w, c, n) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"  {name:{width}s} {n:7d} {w:8.2f} {c:8.2f} {100 * c / cpu:6.1f}")
    return lines


def as_json(totals: dict) -> dict:
    return {name: {"times": n, "wall_s": round(w, 3), "cpu_s": round(c, 3)}
            for name, (w, c, n) in sorted(totals.items(), key=lambda kv: -kv[1][1])}


def from_json(doc: dict) -> dict:
    """The totals as_json wrote (a benchmark's JSON), back in the form table and merge take."""
    return {name: [v["wall_s"], v["cpu_s"], v["times"]] for name, v in doc.items()}


__all__ = ["absorb", "as_json", "cpu_s", "from_json", "merge", "phase", "table", "take"]
