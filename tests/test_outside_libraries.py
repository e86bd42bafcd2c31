"""Real outside libraries, undeclared, each verdict checked against a float64 transcription of that
library's rule written here.

For each library the test first runs the library itself in float64 next to the transcription (so the
transcription is the library's rule, not our reading of its docs), then says what that rule is in the
oracle's terms: a legitimate form (inference must find one and every fp32 case must pass) or a
deviation (inference must name it, and its size must be what the transcription gives). Installed by
.ci/run without their dependencies; each test skips, saying why, where its library is missing.

Transcriptions, read from the sources at the pinned versions:
- torch-optimizer 0.3.0 Lamb (debias=False): per param t += 1; m, v as Adam's; u = m/(sqrt(v) + eps)
  + wd*p; r = min(||p||, 10)/||u|| (1 where either norm is 0); p -= lr*r*u. No bias correction
  (You et al. v3), phi's upper bound 10: legitimate.
- pytorch-optimizer 4.1 Lamb (defaults): one counter per group; m, v; p *= 1 - lr*wd; u = m/(sqrt(v) +
  eps); r = min(||p||, 10)/(||u|| + eps); p -= lr/(1 - b1^t)*r*u: lr/bc1 applied after the trust ratio
  normalised u, a deviation (x10 at step 1).
- lion-pytorch 0.2 Lion: p *= 1 - lr*wd; p -= lr*sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g: the
  reference Lion.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import oracle
from oracle import forms as F
from oracle.compare.inference import infer as I
from oracle.compare.targets.user_impl import load_impl
from oracle.testing import check_optimizer

STEPS = 6


def problem():
    """Two params, one with ||p|| > 10 (phi's upper bound shows), and grads per step."""
    rng = np.random.default_rng(11)
    params = [rng.normal(0.0, 1.0, (6,)), 4.0 * rng.normal(0.0, 1.0, (3, 4))]
    grads = [[rng.normal(0.0, 1.0, p.shape) for p in params] for _ in range(STEPS)]
    return params, grads


def run_library(cls, **hp):
    """The library's optimizer in float64: the params after each step."""
    params0, grads = problem()
    params = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params0]
    opt = cls(params, **hp)
    out = []
    for gs in grads:
        for p, g in zip(params, gs):
            p.grad = torch.tensor(g)
        opt.step()
        out.append([p.detach().numpy().copy() for p in params])
    return out


def run_rule(rule, **hp):
    """A transcription: rule(p, g, state, t, **hp) -> new p, over the same problem."""
    params, grads = problem()
    state = [{} for _ in params]
    out = []
    for t, gs in enumerate(grads, 1):
        params = [rule(p, g, st, t, **hp) for p, g, st in zip(params, gs, state)]
        out.append([p.copy() for p in params])
    return out


def adam_moments(st, g, b1, b2):
    st["m"] = b1 * st.get("m", 0.0) + (1.0 - b1) * g
    st["v"] = b2 * st.get("v", 0.0) + (1.0 - b2) * g * g
    return st["m"], st["v"]


def torch_optimizer_lamb(p, g, st, t, lr, betas, eps, weight_decay):
    m, v = adam_moments(st, g, *betas)
    u = m / (np.sqrt(v) + eps) + weight_decay * p
    wn, un = min(np.linalg.norm(p), 10.0), np.linalg.norm(u)
    r = 1.0 if wn == 0 or un == 0 else wn / un
    return p - lr * r * u


def pytorch_optimizer_lamb(p, g, st, t, lr, betas, eps, weight_decay):
    m, v = adam_moments(st, g, *betas)
    p = p * (1.0 - lr * weight_decay)
    u = m / (np.sqrt(v) + eps)
    wn, un = min(np.linalg.norm(p), 10.0), np.linalg.norm(u)
    r = 1.0 if wn == 0 or un == 0 else wn / (un + eps)
    return p - lr / (1.0 - betas[0] ** t) * r * u


def lion_pytorch_lion(p, g, st, t, lr, betas, weight_decay):
    m = st.get("m", 0.0)
    p = p * (1.0 - lr * weight_decay) - lr * np.sign(betas[0] * m + (1.0 - betas[0]) * g)
    st["m"] = betas[1] * m + (1.0 - betas[1]) * g
    return p


LAMB_HP = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": 0.01}
LION_HP = {"lr": 1e-3, "betas": (0.9, 0.99), "weight_decay": 0.1}
LIBRARIES = [  # (import spec, optimizer, transcription, hyperparameters, verdict)
    ("torch_optimizer:Lamb", "lamb", torch_optimizer_lamb, LAMB_HP, "pass"),
    ("pytorch_optimizer:Lamb", "lamb", pytorch_optimizer_lamb, LAMB_HP, "deviation"),
    ("lion_pytorch:Lion", "lion", lion_pytorch_lion, LION_HP, "pass"),
]


def _import(spec):
    module, name = spec.split(":")
    return getattr(pytest.importorskip(module), name)


@pytest.mark.parametrize("spec,optimizer,rule,hp,verdict", LIBRARIES, ids=[x[0] for x in LIBRARIES])
def test_the_transcription_is_the_library(spec, optimizer, rule, hp, verdict):
    got, want = run_library(_import(spec), **hp), run_rule(rule, **hp)
    for t, (gs, ws) in enumerate(zip(got, want), 1):
        for g, w in zip(gs, ws):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15, err_msg=f"{spec} step {t}")


@pytest.mark.parametrize("spec,optimizer,rule,hp,verdict", LIBRARIES, ids=[x[0] for x in LIBRARIES])
def test_the_verdict_follows_the_transcription(spec, optimizer, rule, hp, verdict):
    cls = _import(spec)
    inf = I.infer(load_impl(spec, optimizer=optimizer, inferred=False))
    assert inf.chosen is not None, inf.lines()
    kind = F.kind(oracle.SPECS[optimizer], inf.chosen.convention)
    assert (kind == F.DEVIATION) == (verdict == "deviation"), (inf.chosen.label(), kind)
    # the oracle under what inference chose computes the transcription's rule
    conv = inf.chosen.convention
    params, grads = problem()
    from oracle.common import OptState
    state, ps = OptState.empty([params]), [params]
    for t, gs in enumerate(grads, 1):
        ps, state = oracle.SPECS[optimizer].step(ps, [gs], state, [{**oracle.SPECS[optimizer].defaults, **hp}], conv)
    for g, w in zip(ps[0], run_rule(rule, **hp)[-1]):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=0)
    results = check_optimizer(cls, optimizer=optimizer, dtypes=["float32"], steps=STEPS)
    statuses = {r.status for r in results}
    if verdict == "pass":
        bad = [(r.case, r.reason) for r in results if r.status not in ("pass", "skip")]
        assert not bad and "pass" in statuses, bad
    else:
        assert "deviation" in statuses and "pass" not in statuses, statuses


def test_pytorch_optimizer_lamb_moves_ten_times_the_reference_at_step_1():
    """The size the deviation row reports, from the transcription alone: the step-1 update of
    pytorch-optimizer's Lamb against the paper's LAMB (same trust ratio, lr*phi(||w||) per tensor)."""
    params, _ = problem()
    hp = {**LAMB_HP, "weight_decay": 0.0}
    theirs = run_rule(pytorch_optimizer_lamb, **hp)[0]
    paper = run_rule(torch_optimizer_lamb, **hp)[0]   # no bias correction: m/sqrt(v) at t=1 is the same
    for p0, a, b in zip(params, theirs, paper):
        ratio = np.linalg.norm(a - p0) / np.linalg.norm(b - p0)
        assert ratio == pytest.approx(10.0, rel=1e-4)
