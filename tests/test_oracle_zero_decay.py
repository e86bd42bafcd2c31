"""zero_decay: the L2 term g + wd*p at weight_decay == 0, left out ("skip": torch, DeepSpeed's CPU
kernels, our fused kernels) or added as 0*p ("add": apex, DeepSpeed's CUDA FusedAdam, optax).

Only a non-finite param tells them apart (0*inf is NaN), so every test here steps params that hold
+inf, -inf and NaN next to finite ones: the oracle's two values against each other, and against torch
(float64, all three code paths) and our fused kernels, which must put every NaN and inf where their
declared convention puts it and agree on the finite elements.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

import oracle
from fused import FusedAdagrad, FusedAdam, convention_of
from oracle import OptState
from oracle.adagrad import AdagradConvention
from oracle.adam import AdamConvention

P = np.array([np.inf, -np.inf, np.nan, 1.5, -0.25])
G = np.array([0.25, -0.5, 0.125, 0.75, -1.0])
FINITE = np.isfinite(P)
CASES = {  # name: (oracle step, convention, hyperparameters)
    "adam": (oracle.adam.step, oracle.adam.TORCH_ADAM,
             dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)),
    "adagrad": (oracle.adagrad.step, oracle.adagrad.TORCH_ADAGRAD, dict(lr=1e-2, weight_decay=0.0)),
    "adagrad_accumulator": (oracle.adagrad.step, oracle.adagrad.ACCUMULATOR_DECAY_ADAGRAD,
                            dict(lr=1e-2, weight_decay=0.0)),
}


def oracle_steps(name: str, zero_decay: str, steps: int = 2, p=P):
    step, conv, hp = CASES[name]
    conv = replace(conv, zero_decay=zero_decay)
    params, state = [[p.copy()]], OptState.empty([[p]])
    for _ in range(steps):
        params, state = step(params, [[G.copy()]], state, [hp], conv)
    return params[0][0], state.params[0][0]


@pytest.mark.parametrize("name", list(CASES))
def test_skip_keeps_a_nonfinite_param_and_finite_state(name):
    p, st = oracle_steps(name, "skip")
    np.testing.assert_array_equal(p[~FINITE], P[~FINITE])  # inf stays inf, NaN stays NaN
    assert all(np.isfinite(v).all() for v in st.values() if isinstance(v, np.ndarray))


@pytest.mark.parametrize("name", list(CASES))
def test_add_turns_a_nonfinite_param_and_its_state_nan(name):
    p, st = oracle_steps(name, "add")
    assert np.isnan(p[~FINITE]).all()
    for v in (v for v in st.values() if isinstance(v, np.ndarray)):
        assert np.isnan(v[~FINITE]).all()
        assert np.isfinite(v[FINITE]).all()


@pytest.mark.parametrize("name", list(CASES))
def test_the_two_agree_wherever_the_param_is_finite(name):
    skip, add = oracle_steps(name, "skip"), oracle_steps(name, "add")
    np.testing.assert_array_equal(skip[0][FINITE], add[0][FINITE])


def test_a_nonzero_decay_is_added_under_either_value():
    """zero_decay says nothing about wd != 0: there both add wd*p, inf*wd included."""
    step, conv, hp = CASES["adam"]
    out = []
    for zero_decay in ("skip", "add"):
        params, state = [[P.copy()]], OptState.empty([[P]])
        params, _ = step(params, [[G.copy()]], state, [dict(hp, weight_decay=0.1)],
                         replace(conv, zero_decay=zero_decay))
        out.append(params[0][0])
    np.testing.assert_array_equal(out[0], out[1])
    assert np.isnan(out[0][:3]).all()  # g + 0.1*inf is inf, and an inf grad makes m/sqrt(v) NaN


@pytest.mark.parametrize("cls", [AdamConvention, AdagradConvention])
def test_an_unknown_value_is_refused(cls):
    with pytest.raises(ValueError, match="zero_decay must be one of"):
        cls(zero_decay="never")


def _torch_opt(name: str, path: str, p: torch.Tensor):
    kw = {"fused": True} if path == "fused" else {"foreach": path == "foreach"}
    _, _, hp = CASES[name]
    if name == "adam":
        return torch.optim.Adam([p], lr=hp["lr"], betas=hp["betas"], eps=hp["eps"], weight_decay=0.0, **kw)
    return torch.optim.Adagrad([p], lr=hp["lr"], weight_decay=0.0, **kw)


@pytest.mark.parametrize("path", ["forloop", "foreach", "fused"])
@pytest.mark.parametrize("name", ["adam", "adagrad"])
def test_torch_is_skip(name, path):
    """torch (2.13, CPU) skips the term at wd == 0 on every code path: its float64 result has the
    "skip" oracle's non-finite elements exactly, and its finite ones to float64 rounding."""
    p = torch.tensor(P, dtype=torch.float64, requires_grad=True)
    opt = _torch_opt(name, path, p)
    for _ in range(2):
        p.grad = torch.tensor(G, dtype=torch.float64)
        opt.step()
    got, (want, _) = p.detach().numpy(), oracle_steps(name, "skip")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~FINITE & ~np.isnan(want)], want[~FINITE & ~np.isnan(want)])
    np.testing.assert_allclose(got[FINITE], want[FINITE], rtol=1e-14)
    assert np.isnan(oracle_steps(name, "add")[0][~FINITE]).all()  # the other value would have failed


@pytest.mark.parametrize("make", [lambda ps: FusedAdam(ps, lr=1e-2, weight_decay=0.0, adam_w_mode=False),
                                  lambda ps: FusedAdagrad(ps, lr=1e-2, weight_decay=0.0)],
                         ids=["FusedAdam_l2", "FusedAdagrad"])
def test_our_kernels_are_skip(make):
    """Our fused kernels leave the term out at wd == 0 (csrc/optim_math.h `l2`), as their declared
    convention says: the non-finite params keep their values and the state stays finite."""
    p = torch.tensor(P, dtype=torch.float32, requires_grad=True)
    opt = make([p])
    for _ in range(2):
        p.grad = torch.tensor(G, dtype=torch.float32)
        opt.step()
    assert convention_of(opt)[1].zero_decay == "skip"
    got = p.detach().numpy()
    np.testing.assert_array_equal(got[~FINITE][:2], P[~FINITE][:2])
    assert np.isnan(got[2])
    for v in opt.state[p].values():
        if isinstance(v, torch.Tensor) and v.numel() == P.size:
            assert torch.isfinite(v).all(), v
