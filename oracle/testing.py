"""The oracle in your own tests: does an optimizer compute what the specification says?

    from oracle.testing import assert_optimizer_matches
    assert_optimizer_matches(MyAdamW, optimizer="adamw", dtypes=["float32"])

runs the comparison engine's cases (lockstep, trajectory, counters, schema, checkpoint round-trip;
oracle.compare.checking.case_run) against `MyAdamW` in this process and raises AssertionError whose message is one
paragraph: the most severe failing case's line as `python -m oracle.compare` prints it, its repro
command, what convention inference concluded (the CLI's lines), then the other failing cases by name:

    1 of 1 oracle case(s) failed; the most severe:
    FAIL impl:mypkg.optim:MyAdamW adamw/fp32/wd0.1/single/normal seed=0: lockstep step 1 group 0
    param 0 param[6, 11]: expected -0.0052545819, got -0.00269594975, error 5.49e+06 ULP > bound
    39.6 ULP (128 of 128 elements out of bound); also failing: trajectory
      reproduce: python -m oracle.compare --impl mypkg.optim:MyAdamW --optimizer adamw --case ...
    impl:mypkg.optim:MyAdamW: NO known convention explains it; judged against the nearest, ...

`factory` is a torch.optim.Optimizer subclass, or a callable with its constructor signature
(params, **hyperparameters); conventions it differs on by design are declared as class attributes
(ORACLE_CONVENTION, ORACLE_COMPUTE, ...: README, "Your own optimizer"). The pytest plugin
(oracle.pytest_plugin) offers this as the `oracle_matches` fixture and parametrizes a test over the
cases with `@pytest.mark.oracle(...)` and an `oracle_case` argument.

This module imports neither torch nor the comparison engine until a check runs.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from .compare.measuring.checks import FAILING


def _name(factory) -> tuple[str, bool]:
    """('module:QualName', importable): importable names make `--impl` repro commands work."""
    module, qual = getattr(factory, "__module__", None), getattr(factory, "__qualname__", None)
    if module and qual and "<" not in qual:
        try:
            obj = importlib.import_module(module)
            for part in qual.split("."):
                obj = getattr(obj, part)
            if obj is factory:
                return f"{module}:{qual}", True
        except (ImportError, AttributeError):
            pass
    return f"{module or '?'}:{qual or type(factory).__name__}", False


def _dtypes(dtypes) -> tuple:
    from oracle.storage import canonical
    if dtypes is None:
        return ("float32", "bfloat16", "float16")
    if isinstance(dtypes, str):
        dtypes = [dtypes]
    return tuple(canonical(d) for d in dtypes)


def _scenarios(scenarios) -> list:
    if scenarios in (None, (), [], "none"):
        return []
    if isinstance(scenarios, str):
        scenarios = [scenarios]
    from oracle.compare.scenarios import SCENARIOS
    if "all" in scenarios:
        return list(SCENARIOS)
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}, all or none")
    return list(scenarios)


def case_names(optimizer: str, dtypes=None, cases=None, steps: int = 20) -> list[str]:
    """The matrix cases of `optimizer` in `dtypes` selected by `cases` (None: all; a string: a glob or
    substring, as `--case`; a list: those names). No torch is imported."""
    from oracle.compare.checking import cases as C
    from oracle.compare.optimizers import records
    if optimizer not in records():
        raise ValueError(f"unknown optimizer {optimizer!r}; choose from {', '.join(records())}")
    pattern = cases if isinstance(cases, str) else None
    names = [c.name for c in C.cases(optimizer, _dtypes(dtypes), steps, pattern)]
    if cases is not None and not isinstance(cases, str):
        wanted = list(cases)
        missing = [n for n in wanted if n not in names]
        if missing:
            raise ValueError(f"no case {missing[0]!r} for {optimizer} in {', '.join(_dtypes(dtypes))}; "
                             f"cases: {', '.join(names)}")
        names = [n for n in names if n in wanted]
    if not names:
        raise ValueError(f"no {optimizer} case matches {cases!r} in {', '.join(_dtypes(dtypes))}")
    return names


_INFERRED: dict = {}  # (factory, optimizer, dtypes, device) -> Inference or None: one inference per test session
OTHER_FAILURES = 5    # failing cases a failure message names after the most severe one


def _judged(factory, optimizer, convention, infer: bool, dtypes, device: str) -> tuple:
    """(the Target, the inference's lines as the CLI prints them, [] where nothing was inferred)."""
    from oracle.compare.targets.declare import judged_as
    from oracle.compare.targets.user_impl import declared_axes, from_object
    spec, _ = _name(factory)
    if optimizer is None and getattr(factory, "ORACLE_OPTIMIZER", None) is None:
        raise ValueError(f"which optimizer does {spec} implement? pass optimizer='adamw' (or 'adam', 'adagrad', "
                         f"'lamb', ...) or set ORACLE_OPTIMIZER on the class")
    target = from_object(factory, spec, optimizer, convention, inferred=False)
    if not (infer and target.infer):
        return target, []
    key = (factory, target.optimizer, tuple(dtypes or ()), device)
    if key not in _INFERRED:
        from oracle.compare.inference.infer import infer as fingerprint
        _INFERRED[key] = fingerprint(target, device, declared=declared_axes(factory), dtypes=dtypes)
    found = _INFERRED[key]
    if found.used is None:
        return target, found.lines()
    from oracle.compare.targets.declare import Candidate
    # through the report's record of it, as the CLI's workers receive it (a nearest one is not explained)
    return judged_as(target, Candidate.from_json(found.to_json()["candidate"])), found.lines()


def target_for(factory, optimizer: str | None = None, convention=None, infer: bool = True, dtypes=None,
               device: str = "cpu"):
    """The comparison engine's Target for a factory (oracle.compare.targets.user_impl.from_object); what the
    factory does not declare is inferred first (oracle.compare.inference.infer), as the CLI does, unless infer=False."""
    return _judged(factory, optimizer, convention, infer, dtypes, device)[0]


def _checked(factory, optimizer, dtypes, cases, scenarios, steps, seeds, device, convention, infer) -> tuple:
    """(the CaseResults in order, the inference's lines)."""
    from oracle.compare.running.driver import jobs_for, rows, run_job
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        # zero steps would compare nothing and pass an optimizer that writes NaN
        raise ValueError(f"steps must be an integer >= 1 (optimizer steps compared per case), got {steps!r}")
    target, explanation = _judged(factory, optimizer, convention, infer, _dtypes(dtypes), device)
    spec, importable = _name(factory)
    chosen = _scenarios(scenarios)
    matrix = cases != [] and (cases is not None or not chosen)  # like the CLI: naming scenarios runs only those
    names = set(case_names(target.optimizer, dtypes, cases, steps)) if matrix else set()
    work = jobs_for(target, _dtypes(dtypes), steps, list(seeds), None, chosen, matrix=matrix)
    results = []
    for tgt, case, seed in work:
        if not case.name.startswith("scenario:") and case.name not in names:
            continue
        for r in rows(run_job(tgt, case.name, seed, case.steps, device, getattr(case, "pattern", None))):
            if not importable:  # `--impl` cannot import it: say how to rerun from Python instead
                r.repro = (f"oracle.testing.assert_optimizer_matches({spec.split(':')[1]}, optimizer="
                           f"{target.optimizer!r}, cases=[{r.case!r}], seeds=[{seed}], steps={steps})")
            results.append(r)
    return results, explanation


def check_optimizer(factory, optimizer: str | None = None, dtypes=None, cases=None, scenarios=None,
                    steps: int = 20, seeds=(0,), device: str = "cpu", convention=None, infer: bool = True) -> list:
    """Run the selected cases (and scenarios) against `factory` here; the CaseResults, in order."""
    return _checked(factory, optimizer, dtypes, cases, scenarios, steps, seeds, device, convention, infer)[0]


def failure_message(results, device: str = "cpu", explanation=()) -> str:
    """One paragraph for a person fixing the optimizer ('' when nothing failed): the most severe failing
    case's failure line (as `python -m oracle.compare` prints it) and its repro command, what inference
    concluded about the form (`explanation`: the CLI's lines), then the other failing cases by name."""
    from oracle.compare.checking.explain import failing_checks, failure_line, most_severe_first
    from oracle.compare.reporting.report import repro_command
    bad = most_severe_first(r for r in results if r.status in FAILING)
    if not bad:
        return ""
    first, rest = bad[0], bad[1:]
    out = [f"{len(bad)} of {len(results)} oracle case(s) failed; the most severe:",
           failure_line(first), f"  reproduce: {repro_command(first, device)}", *explanation]
    if rest:
        named = [f"{r.case} seed={r.seed} ({', '.join(n for n, _ in failing_checks(r)) or r.status})"
                 for r in rest[:OTHER_FAILURES]]
        more = f"; and {len(rest) - OTHER_FAILURES} more" if len(rest) > OTHER_FAILURES else ""
        out.append(f"also failing: {'; '.join(named)}{more}")
    return "\n".join(out)


def assert_optimizer_matches(factory, optimizer: str | None = None, dtypes=None, cases=None, scenarios=None,
                             steps: int = 20, seeds=(0,), device: str = "cpu", convention=None,
                             infer: bool = True) -> list:
    """Raise AssertionError (one paragraph: the most severe failing case, its repro command, the
    inferred or nearest form, the other failing cases) unless `factory` matches the oracle on every
    selected case; also when every case was skipped (nothing checked is not a pass). Returns the
    CaseResults.

    optimizer: the oracle's name (adamw, adam, adagrad, lamb, ...); dtypes: param dtypes (default
    float32, bfloat16, float16); cases: None (all), a glob/substring or a list of case names;
    scenarios: names from oracle.compare.scenarios ("all"), default none; infer: what the factory does
    not declare (ORACLE_*) is inferred first (oracle.compare.inference.infer; once per factory and session)."""
    __tracebackhide__ = True  # pytest: the failure is the caller's line and this message, not our source
    results, explanation = _checked(factory, optimizer, dtypes, cases, scenarios, steps, seeds, device,
                                    convention, infer)
    message = failure_message(results, device, explanation)
    if message:
        raise AssertionError(message)
    if not any(r.status == "pass" for r in results):
        reasons = sorted({r.reason for r in results})
        raise AssertionError(f"nothing was checked: every selected case was skipped ({'; '.join(reasons)})")
    return results


@dataclass(frozen=True)
class OracleCase:
    """One case of the matrix, as the pytest plugin's `oracle_case` parameter: `check(factory)`
    runs it (pytest.skip where the factory does not support the case's dtype or options)."""

    optimizer: str
    name: str
    seed: int = 0
    steps: int = 20
    device: str = "cpu"
    kwargs: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def id(self) -> str:
        return self.name if self.seed == 0 else f"{self.name}[seed={self.seed}]"

    def check(self, factory, convention=None) -> None:
        __tracebackhide__ = True
        scenario = self.name.split(":", 1)[1] if self.name.startswith("scenario:") else None
        cases, scenarios = ([], [scenario]) if scenario else ([self.name], None)
        results, explanation = _checked(factory, self.optimizer, None, cases, scenarios, self.steps,
                                        (self.seed,), self.device, convention, True)
        message = failure_message(results, self.device, explanation)
        if message:
            raise AssertionError(message)
        if results and all(r.status == "skip" for r in results):
            import pytest
            pytest.skip("; ".join(sorted({r.reason for r in results})))


def oracle_cases(optimizer: str, dtypes=None, cases=None, scenarios=None, steps: int = 20, seeds=(0,),
                 device: str = "cpu") -> list[OracleCase]:
    """The OracleCase list @pytest.mark.oracle(...) parametrizes `oracle_case` over."""
    out = []
    for seed in seeds:
        if cases != [] and (cases is not None or not scenarios):
            out += [OracleCase(optimizer, n, seed, steps, device) for n in case_names(optimizer, dtypes, cases, steps)]
        out += [OracleCase(optimizer, f"scenario:{s}", seed, steps, device) for s in _scenarios(scenarios)]
    return out


__all__ = ["OracleCase", "assert_optimizer_matches", "case_names", "check_optimizer", "failure_message",
           "oracle_cases", "target_for"]
