"""The Adafactor oracle (oracle/adafactor.py) against torch.optim.Adafactor in float64, forloop and
foreach: 0-D, 1-D, 2-D and 3-D params (factored from 2 dims on, a 2-D param with a single column
too), grads exactly zero in part and on a whole step, a param without a grad on some steps (its
counter lags), several groups and an empty one, every hyperparameter away from its default; the
paper's eps1 placement against torch-optimizer's Adafactor; validation."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import oracle
from oracle import OptState
from oracle.adafactor import PAPER_EPS_ADAFACTOR
from tests.oracle_vs_torch import TOL, compare_param, relative, torch_defaults

SHAPES = [(3, 4), (5,), (), (2, 3, 4), (6, 1)]
NONE_STEPS = {1, 2, 7, 8, 11}   # the last param has no grad on these steps
ZERO_STEP = 4                   # every grad exactly zero


def grads_at(rng, step, groups, scale=0.1):
    out = []
    for hp in groups:
        gs = []
        for i, shape in enumerate(SHAPES if hp is not None else ()):
            g = rng.standard_normal(shape) * scale if step != ZERO_STEP else np.zeros(shape)
            if i == 0:
                g.ravel()[:2] = 0.0  # exactly-zero elements inside a factored row
            gs.append(None if i == len(SHAPES) - 1 and step in NONE_STEPS else g)
        out.append(gs)
    return out


def run(groups, foreach: bool, steps: int = 12, seed: int = 0) -> float:
    """torch.optim.Adafactor and the oracle side by side; the worst relative error (param and state)."""
    spec = oracle.SPECS["adafactor"]
    rng = np.random.default_rng(seed)
    hparams = [hp or {} for hp in groups]
    params = [[rng.standard_normal(s) for s in (SHAPES if hp is not None else ())] for hp in groups]
    tparams = [[torch.tensor(p) for p in ps] for ps in params]
    opt = torch.optim.Adafactor([{"params": tps, **hp} for tps, hp in zip(tparams, hparams)], foreach=foreach)
    state, worst = OptState.empty(params), 0.0
    for t in range(1, steps + 1):
        grads = grads_at(rng, t, groups)
        for tps, gs in zip(tparams, grads):
            for tp, g in zip(tps, gs):
                tp.grad = None if g is None else torch.tensor(g)
        opt.step()
        params, state = spec.step(params, grads, state, hparams)
        for gi, tps in enumerate(tparams):
            for i, tp in enumerate(tps):
                where = f"adafactor {hparams[gi]} foreach={foreach} step {t} group {gi} param {i}"
                e = compare_param(where, tp, opt.state.get(tp, {}), params[gi][i], state.params[gi][i])
                assert e <= TOL, f"{where}: relative error {e:.3g}"
                worst = max(worst, e)
    return worst


def configs():
    for wd, maximize, eps1 in itertools.product((0.0, 0.1), (False, True), (None, 1e-3)):
        g0 = {"lr": 1e-2, "beta2_decay": -0.8, "eps": (eps1, 1e-3), "d": 1.0, "weight_decay": wd,
              "maximize": maximize}
        # every hyperparameter differs: lr above 1/sqrt(t) (rho_t follows t), eps2 above RMS(p) (the
        # floor acts), d large (no clipping); the third group is empty
        g1 = {"lr": 0.5, "beta2_decay": -0.5, "eps": (1e-1 if eps1 is None else None, 2.0), "d": 4.0,
              "weight_decay": 0.2 - wd, "maximize": not maximize}
        yield [g0, g1, None]


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
def test_matches_torch_float64(foreach):
    worst = max(run(groups, foreach=foreach, seed=k) for k, groups in enumerate(configs()))
    print(f"\nadafactor foreach={foreach}: worst relative error vs torch float64 {worst:.3g}")
    assert worst <= TOL


def test_the_state_is_factored_from_two_dims_on():
    spec = oracle.SPECS["adafactor"]
    params = [[np.ones(s) for s in SHAPES]]
    _, state = spec.step(params, [[np.full(s, 0.5) for s in SHAPES]], OptState.empty(params), [{}])
    shapes = [{k: np.shape(v) for k, v in st.items() if k != "step"} for st in state.params[0]]
    assert shapes == [{"row_var": (3, 1), "col_var": (1, 4)}, {"variance": (5,)}, {"variance": ()},
                      {"row_var": (2, 3, 1), "col_var": (2, 1, 4)}, {"row_var": (6, 1), "col_var": (1, 1)}]
    assert [spec.state_keys_for({}, s) for s in ((3, 4), (5,))] == [("row_var", "col_var"), ("variance",)]


def test_eps1_none_is_the_params_own_machine_epsilon():
    """At v_hat = 0 (a zero grad on the first step) u = g/eps1 = 0 either way; with a grad of 1e-9 under
    a float64 param, eps1 = 2**-52 leaves u = g/|g| = 1 and eps1 = 1e-3 gives 1e-6: the clamp reads
    the float64 epsilon, as torch.finfo(torch.float64).eps."""
    spec = oracle.SPECS["adafactor"]
    got = []
    for eps1 in (None, 1e-3):
        p = [[np.zeros(4)]]
        new, _ = spec.step(p, [[np.full(4, 1e-9)]], OptState.empty(p), [{"eps": (eps1, 1.0), "lr": 1.0, "d": 1e9}])
        got.append(new[0][0])
    # alpha = max(eps2, 0) * min(lr, 1) = 1; u = g/sqrt(max(g^2, eps1^2))
    np.testing.assert_allclose(got[0], -np.ones(4), rtol=1e-12)
    np.testing.assert_allclose(got[1], -np.full(4, 1e-6), rtol=1e-12)


def test_an_empty_param_is_left_as_it_is_with_its_state_created():
    spec = oracle.SPECS["adafactor"]
    params = [[np.zeros((0, 3)), np.zeros(0)]]
    new, state = spec.step(params, [[np.zeros((0, 3)), np.zeros(0)]], OptState.empty(params), [{}])
    assert [np.shape(p) for p in new[0]] == [(0, 3), (0,)]
    assert [sorted(k for k in st if k != "step") for st in state.params[0]] == [["col_var", "row_var"], ["variance"]]
    assert state.params[0][0]["col_var"].shape == (1, 3) and not state.params[0][0]["col_var"].any()


def torch_optimizer_paper_eps(p0, grads, lr, eps, d, c):
    """torch-optimizer 0.3.0's Adafactor (jettify; fairseq's form: eps1 added to g^2) with lr as given:
    relative_step=False and scale_parameter=True make its step size max(eps2, RMS(p)) * lr, torch's
    alpha_t while lr <= 1/sqrt(t); no decay (it scales wd by alpha_t, torch by lr)."""
    import torch_optimizer
    ps = [torch.tensor(p) for p in p0]
    opt = torch_optimizer.Adafactor(ps, lr=lr, eps2=eps, clip_threshold=d, decay_rate=c, beta1=None,
                                    weight_decay=0.0, scale_parameter=True, relative_step=False, warmup_init=False)
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = torch.tensor(g)
        opt.step()
    return [p.numpy() for p in ps]


def test_paper_eps1_placement_matches_torch_optimizer():
    """eps1_mode="paper" against an independent implementation of the paper's placement (2-D and 1-D:
    torch-optimizer's row normalisation handles no more dims, jettify/pytorch-optimizer #405)."""
    pytest.importorskip("torch_optimizer")
    rng = np.random.default_rng(5)
    shapes = [(5, 7), (9,), (6, 1)]
    p0 = [rng.standard_normal(s) for s in shapes]
    grads = [[rng.standard_normal(s) * 0.1 for s in shapes] for _ in range(15)]
    hp = {"lr": 1e-2, "eps": (1e-3, 1e-3), "d": 1.0, "beta2_decay": -0.8}
    want = torch_optimizer_paper_eps(p0, grads, hp["lr"], hp["eps"], hp["d"], hp["beta2_decay"])
    spec, params = oracle.SPECS["adafactor"], [list(p0)]
    state = OptState.empty(params)
    for gs in grads:
        params, state = spec.step(params, [gs], state, [hp], PAPER_EPS_ADAFACTOR)
    assert max(relative(w, p) for w, p in zip(want, params[0])) <= TOL
    # and the placement is observable here: torch's form moves the params elsewhere
    params_t, state_t = [list(p0)], OptState.empty([p0])
    for gs in grads:
        params_t, state_t = spec.step(params_t, [gs], state_t, [hp])
    assert max(relative(a, b) for a, b in zip(params_t[0], params[0])) > 1e-6


def test_torch_defaults_are_the_specs():
    assert oracle.SPECS["adafactor"].defaults == torch_defaults("adafactor")


@pytest.mark.parametrize("bad, match", [
    ({"lr": -1.0}, r"group 1: lr=-1.0 must be >= 0"),
    ({"beta2_decay": 0.5}, r"group 1: beta2_decay=0.5 must be <= 0"),
    ({"eps": (-1.0, 1e-3)}, r"group 1: eps\[0\]=-1.0 must be >= 0"),
    ({"eps": ("x", 1e-3)}, r"group 1: eps\[0\]='x' must be None or a real number"),
    ({"eps": (None, float("inf"))}, r"group 1: eps\[1\]=inf"),
    ({"eps": 1e-3}, r"group 1: eps must be a pair \(eps1, eps2\)"),
    ({"d": 0.5}, r"group 1: d=0.5 must be >= 1.0"),
    ({"weight_decay": -0.1}, r"group 1: weight_decay=-0.1"),
    ({"maximize": "no"}, r"group 1: maximize='no' must be True or False"),
])
def test_validation_names_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        oracle.SPECS["adafactor"].validate([{}, bad])
