"""Adam's Nesterov forms as the widely used libraries ship them, against float64 restatements.

- momentum="nesterov": Dozat 2016 with a constant beta1, b1*m/(1 - b1^(t+1)) + (1-b1)*g/(1 - b1^t)
  (optax scale_by_adam(nesterov=True));
- momentum="nesterov_bc1": one bias correction for both terms, (b1*m + (1-b1)*g)/(1 - b1^t): NAdam as
  Choi et al. 2019 write it in Table 1, the AlgoPerf NAdamW baseline, and timm's NAdamW
  (timm/optim/nadamw.py, read at timm 1.0: p *= 1 - lr*wd; m, v updated; p -= lr/bc1 *
  (b1*m + (1-b1)*g)/(sqrt(v)/sqrt(bc2) + eps));
- momentum="nadam": Dozat's momentum schedule (torch.optim.NAdam, Keras Nadam, timm Nadam).

The restatements are plain NumPy, written from those sources without oracle.adam's helpers.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import oracle
from oracle import adam
from oracle import forms as F
from tests.test_adam_eps_hat import grads_for, params0, rel, run_oracle

NADAMW = adam.AdamConvention(decay="decoupled", eps_mode="outside", momentum="nesterov_bc1")


def algoperf_nadamw(steps: int, lr, b1, b2, eps, wd):
    """timm's / AlgoPerf's NAdamW, one param list, every param stepped every step."""
    p = params0()
    m = [np.zeros_like(x) for x in p]
    v = [np.zeros_like(x) for x in p]
    out = []
    for t in range(1, steps + 1):
        for i, g in enumerate(grads_for(t)):
            p[i] = p[i] * (1.0 - lr * wd)
            m[i] = b1 * m[i] + (1.0 - b1) * g
            v[i] = b2 * v[i] + (1.0 - b2) * g * g
            nesterov = b1 * m[i] + (1.0 - b1) * g
            p[i] = p[i] - lr / (1.0 - b1 ** t) * nesterov / (np.sqrt(v[i]) / np.sqrt(1.0 - b2 ** t) + eps)
        out.append([x.copy() for x in p])
    return out


def test_nesterov_bc1_is_the_algoperf_nadamw():
    hp = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-3, "weight_decay": 0.1}
    got = run_oracle(NADAMW, hp, 20)
    want = algoperf_nadamw(20, 1e-2, 0.9, 0.99, 1e-3, 0.1)
    for k, (gs, ws) in enumerate(zip(got, want), 1):
        for g, w in zip(gs, ws):
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=0, err_msg=f"step {k}")


def test_nesterov_forms_part_at_the_early_steps_and_meet_later():
    """The two constant-beta1 forms differ only in the first term's correction, 1 - b1^(t+1) versus
    1 - b1^t: apart by a few percent at step 1, by less than 1e-3 relative once b1^t is small."""
    hp = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
    a = run_oracle(adam.AdamConvention(momentum="nesterov"), hp, 200)
    b = run_oracle(adam.AdamConvention(momentum="nesterov_bc1"), hp, 200)
    p0 = params0()
    assert rel(a[0][0] - p0[0], b[0][0] - p0[0]) > 1e-2
    late = [rel(a[k][0] - a[k - 1][0], b[k][0] - b[k - 1][0]) for k in range(150, 200)]
    assert max(late) < 1e-3


def test_nesterov_bc1_is_a_variant_with_its_citation():
    for name in ("adam", "adamw"):
        form = F.form_of(oracle.SPECS[name], "momentum", "nesterov_bc1")
        assert form.kind == F.VARIANT and "Choi et al. 2019" in form.cite


def timm_optim(module: str):
    """A timm.optim submodule loaded on its own: timm's package import pulls torchvision, which this
    CPU torch cannot import, and the optimizers need nothing of it."""
    found = importlib.util.find_spec("timm")
    if found is None or not found.submodule_search_locations:
        pytest.skip("timm is not installed (pip install --no-deps 'timm>=1.0,<1.1')")
    pkg_name = "_timm_optim_only"
    if pkg_name not in sys.modules:
        pkg = types.ModuleType(pkg_name)
        pkg.__path__ = [str(Path(found.submodule_search_locations[0]) / "optim")]
        sys.modules[pkg_name] = pkg
    return importlib.import_module(f"{pkg_name}.{module}")


def test_timm_nadamw_follows_the_restatement_and_is_inferred_as_the_variant():
    """timm's NAdamW itself, in float64, matches the restatement; then, undeclared, inference names
    the nesterov_bc1 variant for it and its fp32 cases pass."""
    from oracle.compare.inference import infer as I
    from oracle.compare.targets.user_impl import from_object
    from oracle.testing import check_optimizer
    NAdamW = timm_optim("nadamw").NAdamW
    params = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in params0()]
    opt = NAdamW(params, lr=1e-2, betas=(0.9, 0.99), eps=1e-3, weight_decay=0.1, foreach=False)
    want = algoperf_nadamw(5, 1e-2, 0.9, 0.99, 1e-3, 0.1)
    for t in range(1, 6):
        for p, g in zip(params, grads_for(t)):
            p.grad = torch.tensor(g)
        opt.step()
        for p, w in zip(params, want[t - 1]):
            np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-12, atol=0, err_msg=f"step {t}")
    inf = I.infer(from_object(NAdamW, "timm.optim.nadamw:NAdamW", optimizer="adamw", inferred=False))
    assert inf.chosen is not None and inf.chosen.convention.momentum == "nesterov_bc1", inf.lines()
    assert F.kind(oracle.SPECS["adamw"], inf.chosen.convention) != F.DEVIATION
    results = check_optimizer(NAdamW, optimizer="adamw", dtypes=["float32"], steps=6)
    bad = [(r.case, r.reason) for r in results if r.status not in ("pass", "skip")]
    assert results and not bad, bad
