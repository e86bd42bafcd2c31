"""Inputs unchanged: grads and closure inputs are not written by step()."""
from __future__ import annotations

import copy
import time

from ..lazy_torch import torch

from ..checking.bitwise import bits_finding
from ..measuring.checks import CheckResult, Finding, same_bits
from ..checking.guards import allocate
from ..checking.case_run import set_grads
from . import scenario
from .common import base_hparams, build, finish, grad_values, guarded, new_result, skip, tensor, unavailable, shaped_for, values


def _configs(target):
    base = dict((base_hparams(target.optimizer) or {}))
    out = [("wd", base)]
    if "maximize" in target.options:
        out.append(("maximize", {**base, "maximize": True}))
    if "amsgrad" in target.options:
        out.append(("amsgrad", {**base, "amsgrad": True}))
    return out


@guarded
def run_inputs_unchanged(target, device="cpu", seed=0, steps=3):
    """Grads, their tensors and the caller's hyperparameters are unchanged by step()."""
    t0 = time.perf_counter()
    configs = _configs(target)
    result = new_result(target, "inputs_unchanged", "fp32+bf16/" + "+".join(c for c, _ in configs), "float32",
                        [hp for _, hp in configs], seed, steps)
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    res, bounds, notes = CheckResult("inputs_unchanged"), CheckResult("bounds"), []
    shapes = shaped_for(target, [(6, 3), (5,)])
    # contiguous grads, then grads that are strided views with guarded gaps (oracle.compare.checking.guards):
    # a kernel reading or writing a strided grad by memory order shows in the gaps
    variants = [(dtype, "contiguous") for dtype in ("float32", "bfloat16")] + [("float32", "strided")]
    for dtype, layout in variants:
        if dtype not in target.dtypes:
            continue
        for cname, hp in configs:
            label = f"[{dtype} {cname}{' strided grads' if layout == 'strided' else ''}] "
            params = [[tensor(values(seed, s, dtype, 1.0, "inputs", i), dtype, device) for i, s in enumerate(shapes)]]
            opt = build(target, params, [hp])
            for k in range(1, steps + 1):
                grads = [[grad_values(seed, ("inputs", i), k, s, dtype) for i, s in enumerate(shapes)]]
                guards = []
                if layout == "strided":
                    for i, (p, gv) in enumerate(zip(params[0], grads[0])):
                        p.grad, guard = allocate(gv, p.dtype, p.device, f"{label}group 0 param {i} grad", layout)
                        guards.append(guard)
                else:
                    set_grads(params, grads)
                gts = [p.grad for p in params[0]]
                copies = [g.detach().clone() for g in gts]
                caller = [{key: copy.deepcopy(v) for key, v in group.items() if key not in ("params", "step")}
                          for group in opt.param_groups]
                try:
                    opt.step()
                except Exception as exc:  # noqa: BLE001 - refusing strided grads is an answer, not a defect
                    if layout != "strided":
                        raise
                    notes.append(f"{label.strip()} step() refused strided grads: {type(exc).__name__}: {exc}"[:300])
                    break
                for guard in guards:
                    guard.check(bounds, k)
                for i, (p, g, c) in enumerate(zip(params[0], gts, copies)):
                    res.compared += 2
                    if p.grad is not g:
                        res.fail(Finding("inputs_unchanged", k, f"{label}group 0 param {i} grad", expected="same tensor",
                                         got="replaced", detail="step() replaced p.grad"))
                    if not same_bits(g, c):
                        res.fail(bits_finding("inputs_unchanged", k, f"{label}group 0 param {i} grad", g, c,
                                               "grad modified by step()"))
                for gi, (group, was) in enumerate(zip(opt.param_groups, caller)):
                    for key, val in was.items():
                        res.compared += 1
                        if not _same_value(group.get(key), val):
                            res.fail(Finding("inputs_unchanged", k, f"{label}group {gi} {key}", expected=repr(val),
                                             got=repr(group.get(key)), detail="hyperparameter modified by step()"))
    return finish(target, result, {"inputs_unchanged": res, "bounds": bounds}, t0, notes)


def _same_value(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_bits(a, b)
    return type(a) is type(b) and a == b


SCENARIO = scenario("inputs_unchanged", run_inputs_unchanged)
