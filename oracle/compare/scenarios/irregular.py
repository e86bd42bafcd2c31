"""Irregular inputs: grads that come and go, non-contiguous and mixed-dtype params, groups added late."""
from __future__ import annotations

import time

import numpy as np
import torch


from ..checks import CheckResult, Finding
from ..lockstep import Lockstep
from ..run import TORCH_DTYPES
from . import scenario
from .common import base_hparams, build, finish, grad_values, guarded, new_result, skip, tensor, unavailable, values


def _irregular_layouts():
    """name -> (groups of (label, shape, dtype), grad-None steps per label, steps)."""
    f = "float32"
    return {
        "grad_none": ([[("a", (5, 3), f), ("frozen", (4,), f), ("skip4", (6,), f)]],
                      {"frozen": (1, 2, 3), "skip4": (4,)}, 6),
        "zero_numel": ([[("z0", (0,), f), ("a", (5,), f), ("z1", (0, 3), f), ("b", (3, 2), f), ("z2", (0,), f)]], {}, 3),
        "scalar": ([[("s", (), f), ("a", (4,), f)]], {}, 3),
        "noncontiguous": ([[("nc_t", (5, 4), f), ("a", (3,), f), ("nc_s", (7,), f)]], {}, 3),
        "mixed_dtypes": ([[("f32", (5,), "float32"), ("bf16", (6,), "bfloat16"), ("f16", (4,), "float16")]], {}, 3),
        "add_param_group": ([[("a", (5, 2), f)]], {}, 5),
    }


def _noncontiguous(x: np.ndarray, dtype, device, kind):
    """A leaf tensor with the values of x that is not contiguous."""
    dt = TORCH_DTYPES[dtype]
    if kind == "t":  # a transposed layout
        t = torch.empty(x.shape[::-1], dtype=dt, device=device).t()
    else:  # every other element of a larger buffer
        t = torch.empty(2 * x.size, dtype=dt, device=device)[::2].view(x.shape)
    with torch.no_grad():
        t.copy_(torch.tensor(x, dtype=dt))
    return t.detach().requires_grad_()


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
    for name, (groups, none, steps) in _irregular_layouts().items():
        res = checks[name] = CheckResult(name)
        dtypes = {d for g in groups for _, _, d in g}
        missing = dtypes - set(target.dtypes)
        if missing:
            res.note = f"skipped: {target.name} does not support {', '.join(sorted(missing))}"
            notes.append(f"{name} skipped ({res.note[9:]})")
            continue
        hp = [{**base, "eps": 1e-3}] if name == "mixed_dtypes" else [dict(base)]
        params = []
        for g, group in enumerate(groups):
            row = []
            for label, shape, dt in group:
                x = values(seed, shape, dt, 1.0, "irregular", name, label)
                row.append(_noncontiguous(x, dt, device, label[-1]) if label.startswith("nc_") else tensor(x, dt, device))
            params.append(row)
        layout = [[(label, shape, dt) for label, shape, dt in group] for group in groups]
        try:
            opt = build(target, params, hp)
        except Exception as exc:  # noqa: BLE001
            if name == "noncontiguous" and "contiguous" in str(exc):
                res.note = f"skipped: construction refused non-contiguous params: {type(exc).__name__}: {exc}"
                notes.append(f"{name} skipped (refused: {exc})")
            else:
                res.fail(Finding(name, 0, f"[{name}] constructor", expected="an optimizer", got=type(exc).__name__,
                                 detail=str(exc)[:300]))
            continue
        ls = Lockstep(target, opt, hp, res, res, f"[{name}] ")
        ptrs = {(g, i): (p.data_ptr(), p.stride()) for g, ps in enumerate(params) for i, p in enumerate(ps)}
        for k in range(1, steps + 1):
            if name == "add_param_group" and k == 3:
                x = values(seed, (3, 3), "float32", 1.0, "irregular", name, "late")
                late = tensor(x, "float32", device)
                late_hp = {**base, "weight_decay": 0.0, "lr": base.get("lr", 1e-2) * 0.5}
                opt.add_param_group({"params": [late], **late_hp})
                params.append([late])
                layout.append([("late", (3, 3), "float32")])
                ls.grow(late_hp)
            grads = []
            for g, group in enumerate(layout):
                row = []
                for label, shape, dt in group:
                    scale = 1.0 if dt == "float16" else 0.1
                    row.append(None if k in none.get(label, ()) else grad_values(seed, ("irr", name, label), k, shape, dt, scale))
                grads.append(row)
            for g, (ps, gs, lay) in enumerate(zip(params, grads, layout)):
                for p, gr, (label, shape, dt) in zip(ps, gs, lay):
                    if gr is None:
                        p.grad = None
                    elif label.startswith("nc_"):
                        p.grad = _noncontiguous(gr, dt, device, "s" if label[-1] == "t" else "t").detach()
                    else:
                        p.grad = torch.tensor(gr, dtype=p.dtype, device=p.device)
            try:
                ls.step(k, grads)
            except Exception as exc:  # noqa: BLE001 - reported in this sub-case, the others still run
                if name == "noncontiguous" and k == 1 and "contiguous" in str(exc):
                    # refused with a reason: the implementation cannot express it (not silently wrong)
                    res.note = f"skipped: step() refused non-contiguous tensors: {type(exc).__name__}: {exc}"
                    notes.append(f"{name} skipped (refused: {exc})")
                else:
                    res.fail(Finding(name, k, f"[{name}] step()", expected="an update", got=type(exc).__name__,
                                     detail=str(exc)[:300]))
                break
            for (g, i), (ptr, stride) in ptrs.items():
                p = params[g][i]
                res.compared += 1
                if (p.data_ptr(), p.stride()) != (ptr, stride):
                    res.fail(Finding(name, k, f"[{name}] group {g} param {i} storage", expected=f"{ptr:#x} {stride}",
                                     got=f"{p.data_ptr():#x} {p.stride()}",
                                     detail="the param was replaced, not updated in place (views of it go stale)"))
    return finish(target, result, checks, t0, notes)


SCENARIO = scenario("irregular", run_irregular)
