"""Grad scaling: inv_scale and found_inf, as a GradScaler drives them."""
from __future__ import annotations

import time

import numpy as np

from oracle.common import GradScaling

from ..checking.bitwise import compare_bits, state_bits
from ..measuring.checks import CheckResult
from ..checking.lockstep import Lockstep
from ..checking.case_run import set_grads
from ..checking.cases import with_eps
from . import scenario
from .common import base_hparams, build, finish, grad_values, guarded, new_result, skip, tensor, unavailable, shaped_for, values


SCALE = 1024.0  # a power of two: scaling and unscaling are exact


@guarded
def run_grad_scaling(target, device="cpu", seed=0):
    """found_inf leaves everything bitwise unchanged (first step and later);
    inv_scale is applied exactly once."""
    t0 = time.perf_counter()
    # |g| ~ eps (where the optimizer has one): the grad's scale shows in the update
    hp = [with_eps(target.optimizer, dict(base_hparams(target.optimizer) or {}), 1e-3)]
    # (step, found_inf, loss scale); steps 6-7: found_inf without a grad scale (PyTorch #95847)
    steps = [(1, True, SCALE), (2, False, SCALE), (3, False, SCALE), (4, True, SCALE), (5, False, SCALE),
             (6, True, 1.0), (7, False, 1.0)]
    result = new_result(target, "grad_scaling", "fp32/scale1024+1", "float32", hp, seed, len(steps))
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    if target.scaling is None:
        return skip(result, f"{target.name} has no grad-scaling interface (target.scaling is None)")
    checks = {n: CheckResult(n) for n in ("found_inf", "scaled_step", "counters")}
    shapes = shaped_for(target, [(6, 4), (9,)])
    params = [[tensor(values(seed, s, "float32", 1.0, "scaling", i), "float32", device) for i, s in enumerate(shapes)]]
    opt = build(target, params, hp)
    ls = Lockstep(target, opt, hp, checks["scaled_step"], checks["counters"])
    for k, inf, scale in steps:
        grads = [[grad_values(seed, ("scaling", i), k, s, "float32", 1e-3) * scale for i, s in enumerate(shapes)]]
        if inf:
            grads[0][0] = grads[0][0].copy()
            grads[0][0].flat[0] = np.inf
        set_grads(params, grads)
        if inf:
            before = state_bits(opt)
            target.scaling(opt, 1.0 / scale, True)
            compare_bits(checks["found_inf"], k, before, state_bits(opt), f"changed by a step with found_inf (step {k})")
            checks["found_inf"].compared += 1
        else:
            ls.step(k, grads, GradScaling(inv_scale=1.0 / scale),
                    do_step=lambda: target.scaling(opt, 1.0 / scale, False))
    return finish(target, result, checks, t0)


SCENARIO = scenario("grad_scaling", run_grad_scaling)
