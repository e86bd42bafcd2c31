"""Irregular inputs: grads that come and go, non-contiguous and mixed-dtype params, groups added late."""
from __future__ import annotations

from dataclasses import dataclass, field

import time

import numpy as np

import oracle
from oracle.spec import GUARD, shaped


from ..measuring.checks import CheckResult, Finding
from ..checking.lockstep import Lockstep
from ..checking.case_run import torch_dtype
from ..checking.cases import with_regime
from . import scenario
from ..checking.guards import allocate
from .common import base_hparams, without_decay, build, finish, grad_values, guarded, new_result, skip, unavailable, values


@dataclass(frozen=True)
class SubCase:
    """One irregular input: groups of (label, shape, dtype) (labels starting
    "nc_" are non-contiguous, "_t" transposed, else strided), the steps on
    which a label has no grad, the step count, extra hyperparameters, the step
    at which a group is added, and whether refusing it (naming contiguity) is
    a legitimate answer rather than a failure."""

    groups: list
    grad_none: dict = field(default_factory=dict)
    steps: int = 3
    hparams: dict = field(default_factory=dict)
    add_group_at: int | None = None
    may_refuse: str | None = None
    grad_scale: float = 1.0
    # run only where a denominator guard defaults to None, i.e. to each param's own format epsilon
    # (torch Adafactor's eps1); the hyperparameters then keep that default
    format_eps: bool = False


F = "float32"
SUBCASES = {
    "grad_none": SubCase([[("a", (5, 3), F), ("frozen", (4,), F), ("skip4", (6,), F)]],
                         {"frozen": (1, 2, 3), "skip4": (4,)}, steps=6),
    "zero_numel": SubCase([[("z0", (0,), F), ("a", (5,), F), ("z1", (0, 3), F), ("b", (3, 2), F), ("z2", (0,), F)]]),
    "scalar": SubCase([[("s", (), F), ("a", (4,), F)]]),
    "noncontiguous": SubCase([[("nc_t", (5, 4), F), ("a", (3,), F), ("nc_s", (7,), F)]], may_refuse="contiguous"),
    # eps large enough for the fp16 param's updates to show (where the optimizer has an eps)
    "mixed_dtypes": SubCase([[("f32", (5,), "float32"), ("bf16", (6,), "bfloat16"), ("f16", (4,), "float16")]],
                            hparams={"eps": 1e-3}),
    # the same group with the guard left to each param's format: the bf16 param's grads small enough
    # (1e-3) that bf16's epsilon binds where float32's does not, so one epsilon for every param shows
    "mixed_dtypes_format_eps": SubCase([[("f32", (5,), "float32"), ("bf16", (6,), "bfloat16"),
                                         ("f16", (4,), "float16")]], grad_scale=1e-2, format_eps=True),
    "add_param_group": SubCase([[("a", (5, 2), F)]], steps=5, add_group_at=3),
}


def format_eps_default(spec) -> bool:
    """A tuple-valued eps with a guard component defaulting to None (the param format's epsilon)."""
    eps, role = spec.defaults.get("eps"), spec.roles.get("eps")
    return isinstance(role, tuple) and any(r.what == GUARD and v is None for r, v in zip(role, eps))


def _guarded(x: np.ndarray, dtype, device, kind, name: str, guards: list, leaf: bool = True):
    """A tensor with the values of x inside a guarded buffer (oracle.compare.checking.guards): kind "t" a
    transposed layout, "s" every other element (guards in the gaps), else contiguous."""
    layout = {"t": "transposed", "s": "strided"}.get(kind, "contiguous")
    view, guard = allocate(x, torch_dtype(dtype), device, name, layout)
    guards.append(guard)
    return view.requires_grad_() if leaf else view


@guarded
def run_irregular(target, device="cpu", seed=0):
    """grad None (frozen/unfrozen), zero-numel tensors first/middle/last, 0-dim
    params, non-contiguous params and grads, mixed dtypes in one group, a
    group added after construction: every step checked against the oracle."""
    t0 = time.perf_counter()
    base = dict((base_hparams(target.optimizer) or {}))
    result = new_result(target, "irregular", "mixed", "float32", [base], seed, 0)
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    checks, notes = {}, []
    spec = oracle.SPECS[target.optimizer]
    bounds = CheckResult("bounds")  # every sub-case's params and grads sit in guarded buffers
    for name, sub in SUBCASES.items():
        groups = [[(label, shaped(shape, spec.param_ranks), dt) for label, shape, dt in group] for group in sub.groups]
        none, steps = sub.grad_none, sub.steps
        res = checks[name] = CheckResult(name)
        dtypes = {d for g in groups for _, _, d in g}
        missing = dtypes - set(target.dtypes)
        if missing:
            res.note = f"skipped: {target.name} does not support {', '.join(sorted(missing))}"
            notes.append(f"{name} skipped ({res.note[9:]})")
            continue
        if sub.format_eps and not format_eps_default(spec):
            res.note = "skipped: no denominator guard of this optimizer defaults to the param's format epsilon"
            continue
        sub_base = {**base, "eps": spec.defaults["eps"]} if sub.format_eps else base
        hp = [with_regime(target.optimizer, sub_base, sub.hparams)]
        params, guards = [], []
        for g, group in enumerate(groups):
            row = []
            for label, shape, dt in group:
                x = values(seed, shape, dt, 1.0, "irregular", name, label)
                kind = label[-1] if label.startswith("nc_") else ""
                row.append(_guarded(x, dt, device, kind, f"[{name}] {label} param", guards))
            params.append(row)
        layout = [[(label, shape, dt) for label, shape, dt in group] for group in groups]
        try:
            opt = build(target, params, hp)
        except Exception as exc:  # noqa: BLE001
            if sub.may_refuse and sub.may_refuse in str(exc):
                res.note = f"skipped: construction refused non-contiguous params: {type(exc).__name__}: {exc}"
                notes.append(f"{name} skipped (refused: {exc})")
            else:
                res.fail(Finding(name, 0, f"[{name}] constructor", expected="an optimizer", got=type(exc).__name__,
                                 detail=str(exc)[:300]))
            continue
        ls = Lockstep(target, opt, hp, res, res, f"[{name}] ")
        ptrs = {(g, i): (p.data_ptr(), p.stride()) for g, ps in enumerate(params) for i, p in enumerate(ps)}
        for k in range(1, steps + 1):
            if k == sub.add_group_at:
                x = values(seed, (3, 3), "float32", 1.0, "irregular", name, "late")
                late = _guarded(x, "float32", device, "", f"[{name}] late param", guards)
                late_hp = {**without_decay(target.optimizer, base), "lr": base.get("lr", 1e-2) * 0.5}
                opt.add_param_group({"params": [late], **late_hp})
                params.append([late])
                layout.append([("late", (3, 3), "float32")])
                ls.grow(late_hp)
            grads = []
            for g, group in enumerate(layout):
                row = []
                for label, shape, dt in group:
                    scale = (1.0 if dt == "float16" else 0.1) * sub.grad_scale
                    row.append(None if k in none.get(label, ()) else grad_values(seed, ("irr", name, label), k, shape, dt, scale))
                grads.append(row)
            grad_guards = []
            for g, (ps, gs, lay) in enumerate(zip(params, grads, layout)):
                for p, gr, (label, shape, dt) in zip(ps, gs, lay):
                    if gr is None:
                        p.grad = None
                        continue
                    kind = ("s" if label[-1] == "t" else "t") if label.startswith("nc_") else ""
                    p.grad = _guarded(gr, dt, device, kind, f"[{name}] {label} grad", grad_guards, leaf=False)
            try:
                ls.step(k, grads)
            except Exception as exc:  # noqa: BLE001 - reported in this sub-case, the others still run
                if sub.may_refuse and k == 1 and sub.may_refuse in str(exc):
                    # refused with a reason: the implementation cannot express it (not silently wrong)
                    res.note = f"skipped: step() refused non-contiguous tensors: {type(exc).__name__}: {exc}"
                    notes.append(f"{name} skipped (refused: {exc})")
                else:
                    res.fail(Finding(name, k, f"[{name}] step()", expected="an update", got=type(exc).__name__,
                                     detail=str(exc)[:300]))
                break
            for guard in guards + grad_guards:
                guard.check(bounds, k)
            for (g, i), (ptr, stride) in ptrs.items():
                p = params[g][i]
                res.compared += 1
                if (p.data_ptr(), p.stride()) != (ptr, stride):
                    res.fail(Finding(name, k, f"[{name}] group {g} param {i} storage", expected=f"{ptr:#x} {stride}",
                                     got=f"{p.data_ptr():#x} {p.stride()}",
                                     detail="the param was replaced, not updated in place (views of it go stale)"))
    checks["bounds"] = bounds
    return finish(target, result, checks, t0, notes)


SCENARIO = scenario("irregular", run_irregular)
