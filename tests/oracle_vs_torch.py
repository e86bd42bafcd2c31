"""Shared driver for the oracle-vs-torch float64 tests of torch's simpler optimizers (RMSprop,
Adamax, Adadelta, ASGD): torch.optim.<Name> on float64 tensors and the oracle step side by side.

Each group holds params of SHAPES: a 2-d, a 1-d, a 0-dim and an empty param, and a last param
without a grad on NONE_STEPS (its state starts later and its counter lags). Every grad of param 0
has its first ZERO_ELEMENTS elements exactly 0, and step ZERO_STEP gives every param an all-zero
grad. A group given as None is empty. After every step, per param: the state keys (torch's, the
counter included, against the oracle's), the counter, and each tensor (param and every state
entry) with its error relative to the tensor's largest magnitude (max|a - b| / max|b|; a tensor
of zeros must match exactly).
"""
from __future__ import annotations

import numpy as np
import torch

import oracle
from oracle import OptState

SHAPES = [(3, 4), (5,), (), (0,), (2, 3)]
NONE_STEPS = {1, 2, 7, 8, 11}
ZERO_ELEMENTS = 2
ZERO_STEP = 4


def grads_at(rng, step, groups, scale):
    """One step's grads: per group a list matching SHAPES (None where the param has no grad)."""
    out = []
    for hp in groups:
        gs = []
        for i, shape in enumerate(SHAPES if hp is not None else ()):
            if i == len(SHAPES) - 1 and step in NONE_STEPS:
                gs.append(None)
                continue
            g = rng.standard_normal(shape) * scale if step != ZERO_STEP else np.zeros(shape)
            if i == 0:
                g.ravel()[:ZERO_ELEMENTS] = 0.0
            gs.append(g)
        out.append(gs)
    return out


def relative(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.size == 0:
        return 0.0
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(want))
    peak = float(np.max(np.abs(want)))
    diff = float(np.max(np.abs(got - want)))
    assert peak > 0 or diff == 0, "a tensor of zeros does not match exactly"
    return diff / peak if peak else 0.0


def compare_param(where, tp, tstate, new_p, ostate) -> float:
    """Worst relative error of one param and its state; the keys and the counter must agree."""
    assert set(tstate) == set(ostate), f"{where}: state keys torch {sorted(tstate)}, oracle {sorted(ostate)}"
    worst = relative(tp.numpy(), new_p)
    for key, value in ostate.items():
        if key == "step":
            assert int(tstate["step"].item()) == value, f"{where}: step torch {tstate['step']}, oracle {value}"
            continue
        worst = max(worst, relative(tstate[key].numpy(), value))
    return worst


def run(name: str, groups: list, conv=None, foreach: bool = False, steps: int = 12, seed: int = 0) -> float:
    """torch.optim's class for `name` and the oracle for `steps` steps; the worst relative error seen.
    groups: per group its hyperparameters, or None for an empty group."""
    spec = oracle.SPECS[name]
    conv = spec.convention if conv is None else conv
    rng = np.random.default_rng(seed)
    hparams = [hp or {} for hp in groups]
    params = [[rng.standard_normal(s) for s in (SHAPES if hp is not None else ())] for hp in groups]
    tparams = [[torch.tensor(p) for p in ps] for ps in params]
    cls = getattr(torch.optim, TORCH_NAMES[name])
    opt = cls([{"params": tps, **hp} for tps, hp in zip(tparams, hparams)], foreach=foreach)
    state = OptState.empty(params)
    worst = 0.0
    for t in range(1, steps + 1):
        grads = grads_at(rng, t, groups, 0.1)
        for tps, gs in zip(tparams, grads):
            for tp, g in zip(tps, gs):
                tp.grad = None if g is None else torch.tensor(g)
        opt.step()
        params, state = spec.step(params, grads, state, hparams, conv)
        for gi, tps in enumerate(tparams):
            for i, tp in enumerate(tps):
                where = f"{name} {hparams[gi]} foreach={foreach} step {t} group {gi} param {i}"
                e = compare_param(where, tp, opt.state.get(tp, {}), params[gi][i], state.params[gi][i])
                assert e <= TOL, f"{where}: relative error {e:.3g}"
                worst = max(worst, e)
    return worst


def torch_defaults(name: str) -> dict:
    """torch's constructor defaults for `name`, less the implementation flags."""
    opt = getattr(torch.optim, TORCH_NAMES[name])([torch.zeros(1)])
    flags = ("foreach", "differentiable", "fused", "capturable")
    return {k: v for k, v in opt.defaults.items() if k not in flags}


TOL = 1e-13
TORCH_NAMES = {"rmsprop": "RMSprop", "adamax": "Adamax", "adadelta": "Adadelta", "asgd": "ASGD", "adafactor": "Adafactor"}
