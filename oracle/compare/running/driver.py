"""The one driver: which jobs a selection makes, and running one job.

A job is (target, matrix case or scenario, seed). The CLI (oracle.compare.cli)
plans jobs here and runs them in worker processes (oracle.compare.running.workers);
the kill matrix (oracle.mutants) runs the same jobs for each mutant. A job
yields one result row, or several for a scenario with variants (the engine
scenarios: one row per world size and save point).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from ..measuring import phases
from ..measuring.phases import phase

SCENARIO_PREFIX = "scenario:"


@dataclass(frozen=True)
class ScenarioJob:
    """A scenario in the work list, shaped like a case (name, steps); `pattern`
    keeps only the scenario's rows whose case name matches (--case)."""

    scenario: str
    steps: int
    pattern: str | None = None

    @property
    def name(self) -> str:
        return f"{SCENARIO_PREFIX}{self.scenario}"


def matches(name: str, pattern: str | None) -> bool:
    return pattern is None or fnmatch.fnmatch(name, pattern) or pattern in name


def scenario_selected(job_name: str, pattern: str | None) -> bool:
    """A scenario job runs under --case PATTERN when the pattern can select
    one of its rows ("scenario:NAME/variant"): it names the scenario."""
    return pattern is None or matches(job_name, pattern) or pattern.startswith(job_name + "/") \
        or fnmatch.fnmatch(job_name + "/", pattern.split("/")[0] + "/")


def jobs_for(target, dtypes, steps: int, seeds, case_pattern: str | None, scenario_names, matrix: bool) -> list:
    """(target, case or ScenarioJob, seed) for one target: its matrix cases
    (an optimizer target) and every named scenario that applies to it."""
    from ..checking import cases as C
    from ..scenarios import SCENARIOS
    work = []
    for seed in seeds:
        if matrix and target.engine is None:
            work += [(target, case, seed) for case in C.cases(target.optimizer, dtypes, steps, case_pattern)]
        for name in scenario_names:
            job = ScenarioJob(name, steps, case_pattern)
            if SCENARIOS[name].applies(target) and scenario_selected(job.name, case_pattern):
                work.append((target, job, seed))
    return work


def run_job(target, case_name: str, seed: int, steps: int, device: str, pattern: str | None = None,
            teach: bool = True):
    """One matrix case (by name) or one scenario ("scenario:NAME"): a CaseResult or a list of them.
    teach: a failing matrix row says which single change of convention would make it pass
    (oracle.compare.inference.infer.teach; a few more runs of the case).
    A target with `own_process` set runs it in a child forked for this job alone (see isolation.processes.in_own_process)."""
    if target.own_process:
        from ..isolation.processes import in_own_process
        _warm(target, device)
        with phase("own process: fork, hand back the row", count_children=False):
            result, measured = in_own_process(lambda: _alone(target, case_name, seed, steps, device, pattern, teach))
        phases.absorb(measured)  # the child's phases, itemised as if the job had run here
        return result
    return _run_job(target, case_name, seed, steps, device, pattern, teach)


_WARM: set = set()


def _warm(target, device: str) -> None:
    """Build (never step) one optimizer of an own-process target here, once per process, so the
    imports and library loads it triggers are paid once and not again in every job's child (1.3 s
    each for DeepSpeed's FusedAdam). A failure is left for the job itself to report."""
    if target.name in _WARM:
        return
    _WARM.add(target.name)
    import torch
    try:
        target.make([{"params": [torch.zeros(2, device=device, requires_grad=True)], "lr": 1e-3}], {})
    except Exception:  # noqa: BLE001 - the job builds it again and reports what goes wrong
        pass


def _alone(target, case_name, seed, steps, device, pattern, teach):
    """The job in its own process, between integrity checks of that process (what it changes there
    dies with it, but would still decide this job's own verdict: oracle.compare.isolation.tamper)."""
    from ..isolation import tamper
    phases.take()  # what the forking process had measured is its own to send
    clean = tamper.snapshot()
    result = _run_job(target, case_name, seed, steps, device, pattern, teach)
    return untampered(clean, result, target.name, target.optimizer, case_name, seed, steps)[0], phases.take()


def untampered(clean, result, name, optimizer, case_name, seed, steps):
    """(row, changes) after a job: its result, or, when it changed what judges it (oracle.compare.isolation.tamper),
    an error row naming the changes, which are undone."""
    from ..isolation import tamper
    changes = tamper.changed(clean)
    if not changes:
        return result, changes
    tamper.settle(clean)
    return error_result(name, optimizer, case_name, seed, steps, tamper.reason(changes)), changes


def _run_job(target, case_name, seed, steps, device, pattern, teach):
    from ..checking.deviation import mark
    if case_name.startswith(SCENARIO_PREFIX):
        from ..scenarios import SCENARIOS
        sc = SCENARIOS[case_name[len(SCENARIO_PREFIX):]]
        with phase(f"scenario {case_name[len(SCENARIO_PREFIX):]}"):
            result = sc.run(target, device, seed, pattern=pattern) if sc.engine else sc.run(target, device, seed)
        mark(target, rows(result))
        return result
    from ..checking import cases as C
    from ..inference.infer import teach as explain_by_convention
    from ..checking.case_run import run_case
    case = C.find_case(case_name, steps)
    with phase("matrix case"):
        result = run_case(target, case, seed, device)
    if teach and result.status == "fail" and not result.reason:
        # which one legitimate convention would explain it (a few more runs, on failing rows only)
        with phase("teach (failing rows)"):
            result.reason = explain_by_convention(target, case, seed, device,
                                                  [n for n, c in result.checks.items() if not c.passed])
    mark(target, [result])
    return result


def error_result(target, optimizer, case_name, seed, steps, reason):
    from ..checking import cases as C
    from ..measuring.checks import CheckResult
    from ..checking.case_run import CaseResult
    try:
        case = C.find_case(case_name, steps)
        dtype, hparams = case.dtype, case.group_hparams()
    except ValueError:
        dtype, hparams = "", []
    r = CaseResult(target, case_name, optimizer, dtype, hparams, seed, steps, status="error", reason=reason)
    r.checks = {"error": CheckResult("error", passed=False, note=reason)}
    return r


def rows(result) -> list:
    """A job's result as a list of rows."""
    return list(result) if isinstance(result, (list, tuple)) else [result]


__all__ = ["SCENARIO_PREFIX", "ScenarioJob", "error_result", "jobs_for", "matches", "rows", "run_job", "scenario_selected",
           "untampered"]
