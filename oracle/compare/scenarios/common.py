"""What every scenario shares: inputs from (seed, tags), result rows, the skip rules.

Deviations a target makes by design are declared on it (Target.declared:
(check, reason) pairs): such a check still runs, its findings are kept in the
note and in `reason`, and the row says "declared". Known defects of a library
are in reports/known.toml (oracle.compare.checking.known): the check still fails and
`reason` names the entry."""
from __future__ import annotations

import time
import traceback
import zlib

import numpy as np
from ..lazy_torch import torch

from oracle.storage import round_to

from ..measuring.checks import CheckResult
from ..optimizers import records
from ..checking.case_run import CaseResult, torch_dtype


def base_hparams(optimizer: str) -> dict | None:
    """The optimizer's scenario hyperparameters (its comparison record): decay
    on, so a spurious step or a decay applied to a frozen param moves the param."""
    rec = records().get(optimizer)
    return None if rec is None else dict(rec.scenario_hparams)

def without_decay(optimizer: str, hp: dict) -> dict:
    """The hyperparameters of a group without weight decay (norm weights): weight_decay 0 where the
    optimizer has one; unchanged for one that has none (Rprop, whose groups then differ in params only)."""
    import oracle
    return {**hp, "weight_decay": 0.0} if "weight_decay" in oracle.SPECS[optimizer].defaults else dict(hp)


def known(target_name: str, check: str, case: str | None = None) -> str | None:
    """The known-defect text (reports/known.toml, oracle.compare.checking.known) for a failing check, if any."""
    from ..checking.known import note
    return note(target_name, check, case)


def declared(target, check: str) -> str | None:
    """The reason a target declares for deviating in `check` by design (Target.declared), if any."""
    return dict(getattr(target, "declared", ())).get(check)


# --- inputs ------------------------------------------------------------------

def rng(seed: int, *tags) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32("|".join(map(str, tags)).encode())])


def shaped_for(target, shapes):
    """A scenario's param shapes (a list of shapes, or one list per group) as the target's optimizer
    takes params (oracle.spec.shaped: Muon's as matrices of as many elements; unchanged for the rest)."""
    import oracle
    from oracle.spec import shaped
    ranks = oracle.SPECS[target.optimizer].param_ranks
    return [shaped_for(target, s) if isinstance(s, list) else shaped(s, ranks) for s in shapes]


def values(seed: int, shape, dtype: str, scale: float, *tags) -> np.ndarray:
    """float64 values exactly representable in `dtype`, from (seed, tags) alone."""
    return round_to(rng(seed, *tags).standard_normal(shape) * scale, dtype)


def tensor(x: np.ndarray, dtype: str, device: str, leaf=True) -> torch.Tensor:
    t = torch.tensor(np.asarray(x), dtype=torch_dtype(dtype), device=device)
    return t.requires_grad_() if leaf else t


def grad_values(seed, label, k, shape, dtype, scale=0.1):
    return values(seed, shape, dtype, scale, "grad", label, k)


# --- results -----------------------------------------------------------------

def new_result(target, name: str, variant: str, dtype: str, hparams, seed: int, steps: int) -> CaseResult:
    return CaseResult(target.name, f"scenario:{name}/{variant}", target.optimizer, dtype, hparams, seed, steps)


def skip(result: CaseResult, reason: str) -> CaseResult:
    result.status, result.reason = "skip", reason
    return result


def finish(target, result: CaseResult, checks: dict, t0: float, notes: list[str] = ()) -> CaseResult:
    result.checks = dict(checks)
    declared_notes = []
    for name, c in result.checks.items():
        reason = declared(target, name)
        if reason and not c.passed:
            shown = "; ".join(f"step {f.step} {f.tensor}: expected {f.expected}, got {f.got}" for f in c.findings[:3])
            c.note = (c.note + " " if c.note else "") + f"declared deviation ({reason}); findings: {shown}"
            c.passed = True
            c.findings = []
            declared_notes.append(f"{name}: declared deviation")
    if not all(c.passed for c in result.checks.values()):
        result.status = "fail"
    known_notes = [f"{name}: {text}" for name, c in result.checks.items()
                   if not c.passed and (text := known(result.target, name, result.case))]
    result.reason = "; ".join([*known_notes, *notes, *declared_notes])
    result.seconds = time.perf_counter() - t0
    return result


def guarded(fn):
    """A scenario that raises becomes status "error" with the traceback."""
    def run(target, device: str = "cpu", seed: int = 0, **kwargs) -> CaseResult:
        t0 = time.perf_counter()
        try:
            return fn(target, device, seed, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a crashing target is a result
            name = fn.__name__.removeprefix("run_")
            result = new_result(target, name, "error", "", [], seed, 0)
            result.status, result.reason = "error", f"{type(exc).__name__}: {exc}"
            result.checks = {"error": CheckResult("error", passed=False, note=traceback.format_exc(limit=-4))}
            result.seconds = time.perf_counter() - t0
            return result
    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def unavailable(target, device: str, dtypes=("float32",), options=()) -> str | None:
    reason = target.unavailable(device)
    if reason is None and base_hparams(target.optimizer) is None:
        reason = f"no scenario hyperparameters for {target.optimizer}"
    if reason is None and target.make is None:
        reason = f"{target.name} cannot be built"
    missing = [d for d in dtypes if d not in target.dtypes]
    if reason is None and missing:
        reason = f"{target.name} does not support {', '.join(missing)}"
    return reason


def build(target, groups: list[list], hparams: list[dict]):
    return target.make([{"params": ps, **hp} for ps, hp in zip(groups, hparams)], {})


