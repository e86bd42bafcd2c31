"""The Muon oracle (oracle/muon.py).

torch.optim.Muon runs its Newton-Schulz iteration in bfloat16 whatever the param's dtype, so torch
in float64 is not a float64 Muon. The oracle's float64 step is checked against an independent
float64 derivation instead: the quintic NS step maps each singular value s of X to
f(s) = a*s + b*s^3 + c*s^5 and keeps the singular vectors, so NS_k(M) = U f^k(S/n) V^T from one
SVD of M (n its normalizer), with no matrix product of the iteration. torch in float64 is then held
to what the spec says of it: its momentum buffer (float64 arithmetic) agrees to float64 roundoff,
and its params lie within the bound the error model derives for a bfloat16 iteration.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import oracle
from oracle import OptState, muon
from oracle.compare.measuring.errmodel import Bounded, unit_roundoff

SHAPES = [(4, 6), (7, 3), (5, 5), (6, 1)]  # wide, tall (transposed by torch), square, a column


def svd_ns(m, coefficients, steps, eps, eps_mode="clamp"):
    """NS_steps(M) from M's SVD: the scalar polynomial iterated on the singular values."""
    a, b, c = coefficients
    norm = math.sqrt(float(np.sum(m * m)))
    den = max(norm, eps) if eps_mode == "clamp" else norm + eps
    u, s, vt = np.linalg.svd(m, full_matrices=False)
    s = s / den
    for _ in range(steps):
        s = a * s + b * s ** 3 + c * s ** 5
    return (u * s) @ vt


def by_hand(p, g, buf, hp, momentum_form="ema", eps_mode="clamp"):
    """One Muon step written from the equations (oracle/muon.py's docstring), float64."""
    mu = hp["momentum"]
    if momentum_form == "ema":
        buf = mu * buf + (1 - mu) * g
        m = (1 - mu) * g + mu * buf if hp["nesterov"] else buf
    else:
        buf = mu * buf + g
        m = g + mu * buf if hp["nesterov"] else buf
    o = svd_ns(m, hp["ns_coefficients"], hp["ns_steps"], hp["eps"], eps_mode)
    rows, cols = p.shape
    ratio = 0.2 * math.sqrt(max(rows, cols)) if hp["adjust_lr_fn"] == "match_rms_adamw" else \
        math.sqrt(max(1.0, rows / cols))
    return p * (1 - hp["lr"] * hp["weight_decay"]) - hp["lr"] * ratio * o, buf


HPARAMS = [
    {"lr": 0.02},
    {"lr": 0.05, "weight_decay": 0.0, "nesterov": False},
    {"lr": 0.01, "momentum": 0.9, "adjust_lr_fn": "match_rms_adamw", "weight_decay": 0.3},
    {"lr": 0.02, "adjust_lr_fn": "original", "ns_steps": 3},
    {"lr": 0.02, "ns_coefficients": (15 / 8, -10 / 8, 3 / 8), "ns_steps": 8},  # the classic quintic
    {"lr": 0.02, "ns_steps": 0, "eps": 1e-3},
    {"lr": 0.0},
]


def _steps(hp, conv=muon.TORCH_MUON, steps=6, seed=0, zero_step=3, none_step=5):
    """The oracle's trajectory and the hand derivation's, side by side; the worst relative difference.
    Step zero_step brings all-zero grads, and on none_step the second param has no grad."""
    rng = np.random.default_rng(seed)
    hp = muon.validate([hp])[0]
    params = [rng.standard_normal(s) for s in SHAPES]
    hand = [p.copy() for p in params]
    bufs = [np.zeros(s) for s in SHAPES]
    state, worst = OptState.empty([params]), 0.0
    for k in range(1, steps + 1):
        grads = [np.zeros(s) if k == zero_step else rng.standard_normal(s) * 0.1 for s in SHAPES]
        if k == none_step:
            grads[1] = None
        new, state = muon.step([params], [grads], state, [hp], conv)
        for i, g in enumerate(grads):
            if g is not None:
                hand[i], bufs[i] = by_hand(hand[i], g, bufs[i], hp, conv.momentum_form, conv.eps_mode)
            worst = max(worst, float(np.max(np.abs(new[0][i] - hand[i]))))
            if g is not None:
                worst = max(worst, float(np.max(np.abs(state.params[0][i]["momentum_buffer"] - bufs[i]))))
        params = new[0]
    return worst


@pytest.mark.parametrize("hp", HPARAMS, ids=lambda hp: ",".join(f"{k}={v}" for k, v in hp.items()))
def test_matches_the_svd_derivation(hp):
    assert _steps(hp) < 1e-12


@pytest.mark.parametrize("conv", [muon.JORDAN_MUON, muon.MOONLIGHT_MUON,
                                  muon.MuonConvention(gram_side="rows"), muon.MuonConvention(ns_dtype="compute")],
                         ids=["jordan", "moonlight", "gram_rows", "ns_compute"])
def test_other_conventions_match_their_derivation(conv):
    assert _steps({"lr": 0.02, "eps": 1e-2}, conv) < 1e-12


def test_zero_grads_only_decay():
    """An all-zero grad on a fresh param: the buffer stays 0, NS(0) = 0 / eps = 0, and the param is
    only decayed, exactly."""
    p = np.arange(12.0).reshape(3, 4)
    new, st = muon.step([[p]], [[np.zeros((3, 4))]], OptState.empty([[p]]), [{"lr": 0.1, "weight_decay": 0.5}])
    np.testing.assert_array_equal(new[0][0], p * (1 - 0.1 * 0.5))
    np.testing.assert_array_equal(st.params[0][0]["momentum_buffer"], np.zeros((3, 4)))


def test_momentum_forms_give_one_update_and_buffers_apart_by_one_minus_mu():
    """The docstring's claim: with ||M|| far above eps the "sum" form moves the params as "ema" does,
    and its buffer is the ema buffer over (1 - mu)."""
    rng = np.random.default_rng(3)
    p, hp = rng.standard_normal((5, 4)), {"lr": 0.02, "momentum": 0.9}
    state = {c: OptState.empty([[p]]) for c in ("ema", "sum")}
    params = {c: [[p]] for c in state}
    for _ in range(4):
        g = rng.standard_normal((5, 4))
        for c in state:
            params[c], state[c] = muon.step(params[c], [[g]], state[c], [hp], muon.MuonConvention(momentum_form=c))
    np.testing.assert_allclose(params["sum"][0][0], params["ema"][0][0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(state["sum"].params[0][0]["momentum_buffer"] * (1 - 0.9),
                               state["ema"].params[0][0]["momentum_buffer"], rtol=1e-12)


def test_one_ns_step_fewer_or_other_coefficients_is_observable():
    """The derivation can fail: NS hyperparameters change the update far beyond roundoff."""
    for other in ({"ns_steps": 4}, {"ns_coefficients": (3.4, -4.7750, 2.0315)}):
        rng = np.random.default_rng(0)
        p, g = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
        hp = muon.validate([{"lr": 0.02}])[0]
        new, _ = muon.step([[p]], [[g]], OptState.empty([[p]]), [{"lr": 0.02, **other}])
        want, _ = by_hand(p, g, np.zeros_like(p), hp)
        assert np.max(np.abs(new[0][0] - want)) > 1e-4


# --- torch.optim.Muon in float64 -----------------------------------------------------------------

def _torch_run(hp, steps=5, seed=1):
    """torch.optim.Muon on float64 params next to the oracle evaluated on error-carrying arrays
    (float64 compute, NS in bfloat16: the spec's ns_dtype). Yields per step and param
    (torch param, torch buffer, oracle Bounded param, oracle Bounded buffer)."""
    rng = np.random.default_rng(seed)
    u = unit_roundoff("float64")
    params = [rng.standard_normal(s) for s in SHAPES]
    tparams = [torch.tensor(p, requires_grad=True) for p in params]
    opt = torch.optim.Muon(tparams, **hp)
    vhp = muon.validate([hp])[0]
    for k in range(1, steps + 1):
        grads = [np.zeros(s) if k == 2 else rng.standard_normal(s) * 0.1 for s in SHAPES]
        before = [tp.detach().numpy().copy() for tp in tparams]
        for tp, g in zip(tparams, grads):
            tp.grad = torch.tensor(g)
        bufs = [opt.state[tp]["momentum_buffer"].numpy().copy() if tp in opt.state else np.zeros_like(g)
                for tp, g in zip(tparams, grads)]
        opt.step()
        for i, (tp, g) in enumerate(zip(tparams, grads)):
            st = {"momentum_buffer": Bounded(bufs[i], None, u)}
            bp, bst = muon.update(Bounded(before[i], None, u), Bounded(g, None, u), st, vhp, muon.TORCH_MUON)
            yield tp.detach().numpy(), opt.state[tp]["momentum_buffer"].numpy(), bp, bst["momentum_buffer"]


@pytest.mark.parametrize("hp", [{"lr": 0.02, "ns_steps": 1}, {"lr": 0.05, "nesterov": False, "ns_steps": 1,
                                                             "adjust_lr_fn": "match_rms_adamw"},
                                {"lr": 0.02}, {"lr": 0.02, "weight_decay": 0.5, "ns_steps": 2}],
                         ids=["steps1", "plain_match_rms", "defaults", "decay_steps2"])
def test_torch_float64_lies_within_the_derived_bound(hp):
    """torch's buffer: float64 arithmetic, within the derived float64 bound (a few ULPs). torch's
    param: within the bound derived for a bfloat16 NS iteration (every step, every shape)."""
    for got_p, got_buf, bp, bbuf in _torch_run(hp):
        assert np.all(np.abs(got_buf - bbuf.v) <= bbuf.e)
        assert np.all(np.abs(got_p - bp.v) <= bp.e)


def test_the_bound_needs_the_bfloat16_iteration():
    """Without ns_dtype's bfloat16 (the iteration in float64) the bound does not hold torch: the
    bfloat16 rounding is what the derived bound carries."""
    rng = np.random.default_rng(0)
    p, g = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    tp = torch.tensor(p, requires_grad=True)
    tp.grad = torch.tensor(g)
    torch.optim.Muon([tp], lr=0.02, ns_steps=1).step()
    u = unit_roundoff("float64")
    hp = muon.validate([{"lr": 0.02, "ns_steps": 1}])[0]
    bp, _ = muon.update(Bounded(p, None, u), Bounded(g, None, u), {}, hp, muon.MuonConvention(ns_dtype="compute"))
    assert np.any(np.abs(tp.detach().numpy() - bp.v) > bp.e)


def test_torch_defaults_are_the_specs():
    import inspect
    sig = inspect.signature(torch.optim.Muon.__init__).parameters
    assert {k: sig[k].default for k in oracle.SPECS["muon"].defaults} == oracle.SPECS["muon"].defaults


@pytest.mark.parametrize("bad, match", [
    ({"lr": -1.0}, r"group 1: lr=-1.0 must be >= 0"),
    ({"momentum": -0.1}, r"group 1: momentum=-0.1"),
    ({"ns_steps": 100}, r"group 1: ns_steps=100"),
    ({"ns_steps": 2.0}, r"group 1: ns_steps=2.0 must be an integer"),
    ({"ns_coefficients": (1.0, 2.0)}, r"group 1: ns_coefficients must be 3 values"),
    ({"adjust_lr_fn": "rms"}, r"group 1: adjust_lr_fn='rms'"),
    ({"nesterov": 1}, r"group 1: nesterov=1 must be True or False"),
])
def test_validation_names_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        oracle.SPECS["muon"].validate([{}, bad])


def test_only_matrices():
    p = np.zeros(5)
    with pytest.raises(ValueError, match="2-D params only"):
        muon.step([[p]], [[p]], OptState.empty([[p]]), [{}])
