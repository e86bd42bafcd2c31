"""An oracle spec against torch's own forloop optimizer in float64, side by side (shared by the
tests of NAdam, RAdam and Rprop; Adam/Adagrad/SGD keep their own in test_oracle_torch.py).

Both run free from the same float64 params and grads. Every group has params of several shapes
(a 0-d one, a 0-numel one); the first elements of param 0's grad are exactly 0 on every step; the
last param of every group has no grad on some steps; a group may be empty. torch runs under a
float64 default dtype, so its 0-dim state (step, NAdam's mu_product) is float64 too.

After each step every param and every state entry is compared, relative to its running operand
magnitude: per element, the running maximum of |value| and, for a param, of the step taken
|p_k - p_{k-1}| (a param or moment can cancel to near 0, where the plain relative error means
nothing). Where that scale is 0 the two must agree exactly. Counters must be equal exactly.
"""
from __future__ import annotations

import numpy as np
import torch

import oracle
from oracle import OptState

TOL = 1e-13
SHAPES = [(3, 4), (5,), (), (0,), (2, 3)]
ZEROS = 2                   # leading grad elements of param 0 that are exactly 0
NONE_STEPS = {1, 2, 7, 8, 9, 15}  # steps (from 1) on which the last param of a group has no grad


def grads_at(rng, step, sizes, scales):
    out = []
    for n, scale in zip(sizes, scales):
        group = []
        for i, shape in enumerate(SHAPES[:n]):
            g = rng.standard_normal(shape) * scale
            if i == 0 and g.size:
                g.flat[:ZEROS] = 0.0
            group.append(None if (i == n - 1 and step in NONE_STEPS) else g)
        out.append(group)
    return out


def rel_err(got, expected, scale) -> float:
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    diff = np.abs(got - expected)
    if diff.size == 0:
        return 0.0
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(expected))
    assert np.all(diff[scale == 0] == 0), "mismatch where the operands are all 0"
    return float(np.max(np.where(scale == 0, 0.0, diff / np.where(scale == 0, 1.0, scale))))


class _Scales(dict):
    def bump(self, key, *mags):
        new = mags[0]
        for m in mags[1:]:
            new = np.maximum(new, m)
        self[key] = np.maximum(self[key], new) if key in self else new
        return self[key]


def make_torch(cls, params, hparams):
    groups = [{"params": [torch.tensor(p) for p in ps], **{k: (tuple(v) if isinstance(v, list) else v)
                                                           for k, v in hp.items()}}
              for ps, hp in zip(params, hparams)]
    return cls(groups, foreach=False)


def lockstep(cls, name, hparams, sizes, conv=None, seed=0, steps=20, scales=None) -> float:
    """Run torch's `cls` and oracle.SPECS[name] side by side; assert agreement; return the worst error."""
    spec = oracle.SPECS[name]
    conv = spec.convention if conv is None else conv
    rng = np.random.default_rng(seed)
    params = [[rng.standard_normal(s) for s in SHAPES[:n]] for n in sizes]
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        opt = make_torch(cls, params, hparams)
        tparams = [g["params"] for g in opt.param_groups]
        state, seen, worst = OptState.empty(params), _Scales(), 0.0
        for t in range(1, steps + 1):
            grads = grads_at(rng, t, sizes, scales or [10.0 ** -k for k in range(len(sizes))])
            for tps, gs in zip(tparams, grads):
                for tp, g in zip(tps, gs):
                    tp.grad = None if g is None else torch.tensor(g)
            opt.step()
            new, state = spec.step(params, grads, state, hparams, conv)
            worst = max(worst, _compare(opt, tparams, params, new, state, seen, f"{name} {hparams} step {t}"))
            params = new
    finally:
        torch.set_default_dtype(saved)
    return worst


def _compare(opt, tparams, old, new, state, seen, where) -> float:
    worst = 0.0
    for gi, tps in enumerate(tparams):
        for i, tp in enumerate(tps):
            at = f"{where} group {gi} param {i}"
            ts, os_ = opt.state[tp], state.params[gi][i]
            assert set(ts) == set(os_), f"{at}: state keys {sorted(ts)} vs {sorted(os_)}"
            s = seen.bump((gi, i, "p"), np.abs(new[gi][i]), np.abs(new[gi][i] - old[gi][i]))
            e = rel_err(tp.detach().numpy(), new[gi][i], s)
            assert e <= TOL, f"{at}: param relative error {e:.3g}"
            worst = max(worst, e)
            for key, value in os_.items():
                if key == "step":
                    assert float(ts[key]) == value and type(value) is int, at
                    continue
                s = seen.bump((gi, i, key), np.abs(value))
                e = rel_err(ts[key].detach().numpy(), value, s)
                assert e <= TOL, f"{at}: {key} relative error {e:.3g}"
                worst = max(worst, e)
    return worst
