"""The SGD oracle (oracle/sgd.py) against torch.optim.SGD in float64 and against a
50-digit mpmath transcription of its docstring.

torch: forloop (foreach=False) and foreach (foreach=True), 20 free-running steps from
the same float64 params and grads, two groups differing in every hyperparameter, a 0-dim
and an empty param, and a param without a grad on some steps (its momentum buffer then
starts later than the others'). After every step the params and the momentum buffers
are compared, and the state keys must be the same (no buffer without momentum, no step
counter ever).

mpmath: the conventions torch does not have (first_step="dampened", decay="decoupled"),
and all the others too, as scalar formulas sharing no code with the oracle.

Agreement is relative to the operand magnitude, as in test_oracle_torch.py: per element,
the running maximum over steps 1..t of, for a param, |p_k|, the step taken |p_k - p_{k-1}|
and each term of the update (lr*|g'|, lr*mu*|buf|, lr*wd*|p|); for the buffer, |buf_k|
and its incoming |g'| = |g| + wd*|p| (L2).
"""
from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
import torch

import oracle
from oracle import OptState
from oracle.sgd import DECOUPLED_SGD, TORCH_SGD, ZERO_BUFFER_SGD, SGDConvention

STEPS = 20
TOL = 1e-13  # against torch
MP_TOL = 1e-14  # against mpmath
SHAPES = [(3, 4), (5,), (), (0,), (2, 3)]  # the last param has no grad on some steps
NONE_STEPS = {1, 2, 7, 8, 9, 15}
WORST: dict[str, float] = {}
mp = mpmath.mp
mp.dps = 50


def record(key, worst):
    WORST[key] = max(WORST.get(key, 0.0), worst)


def rel_err(got, expected, scale):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert got.shape == expected.shape
    if got.size == 0:
        return 0.0
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(expected))
    diff = np.abs(got - expected)
    assert np.all(diff[scale == 0] == 0), "mismatch where the operands are all 0"
    return float(np.max(np.where(scale == 0, 0.0, diff / np.where(scale == 0, 1.0, scale))))


class Scales:
    """Running operand magnitudes per key."""

    def __init__(self):
        self.s = {}

    def bump(self, key, *mags):
        new = mags[0]
        for m in mags[1:]:
            new = np.maximum(new, m)
        self.s[key] = new if key not in self.s else np.maximum(self.s[key], new)
        return self.s[key]


def make_grads(rng, step, scale):
    grads = []
    for i, shape in enumerate(SHAPES):
        if i == len(SHAPES) - 1 and step in NONE_STEPS:
            grads.append(None)
        else:
            grads.append(rng.standard_normal(shape) * scale)
    return grads


def torch_sgd(params, hparams, foreach):
    groups = [{"params": [torch.tensor(p, dtype=torch.float64) for p in ps], **hp} for ps, hp in zip(params, hparams)]
    return torch.optim.SGD(groups, foreach=foreach)


def run_vs_torch(hparams, foreach, conv=TORCH_SGD, seed=0, steps=STEPS):
    """torch and the oracle side by side; returns the worst relative error."""
    rng = np.random.default_rng(seed)
    params = [[rng.standard_normal(s) for s in SHAPES] for _ in hparams]
    opt = torch_sgd(params, hparams, foreach)
    tparams = [g["params"] for g in opt.param_groups]
    state = OptState.empty(params)
    scales = Scales()
    worst = 0.0
    for t in range(1, steps + 1):
        grads = [make_grads(rng, t, 10.0 ** (gi - 1)) for gi in range(len(hparams))]
        for tps, gs in zip(tparams, grads):
            for tp, g in zip(tps, gs):
                tp.grad = None if g is None else torch.tensor(g, dtype=torch.float64)
        opt.step()
        new_params, state = oracle.step("sgd", params, grads, state, hparams, conv)
        assert state.group_step == [0] * len(hparams), "counter 'none' advanced a group counter"
        for gi, (hp, tps) in enumerate(zip(opt.param_groups, tparams)):
            lr, mu, wd = hp["lr"], hp["momentum"], hp["weight_decay"]
            for i, tp in enumerate(tps):
                old, new, g = params[gi][i], new_params[gi][i], grads[gi][i]
                ts, os_ = opt.state.get(tp, {}), state.params[gi][i]
                where = f"{hp['lr']=} {mu=} {hp['dampening']=} {hp['nesterov']=} {wd=} {hp['maximize']=} " \
                        f"foreach={foreach} step {t} group {gi} param {i}"
                assert set(ts) == set(os_), f"{where}: state keys torch {set(ts)}, oracle {set(os_)}"
                assert "step" not in os_, where
                gmag = 0.0 if g is None else np.abs(g) + wd * np.abs(old)
                buf = np.abs(os_.get("momentum_buffer", 0.0))
                terms = lr * gmag + lr * mu * buf if g is not None else 0.0
                sp = scales.bump((gi, i, "p"), np.abs(old), np.abs(new), np.abs(new - old), terms)
                worst = max(worst, e := rel_err(tp.numpy(), new, sp))
                assert e <= TOL, f"{where}: param relative error {e:.3g}"
                if g is not None and "momentum_buffer" in os_:
                    sb = scales.bump((gi, i, "buf"), buf, gmag)
                    worst = max(worst, e := rel_err(ts["momentum_buffer"].numpy(), os_["momentum_buffer"], sb))
                    assert e <= TOL, f"{where}: momentum_buffer relative error {e:.3g}"
        params = new_params
    return worst


def sgd_configs():
    for mu, dampening, nesterov, wd, maximize in itertools.product(
            (0.0, 0.9), (0.0, 0.5), (False, True), (0.0, 0.1), (False, True)):
        if nesterov and (mu == 0 or dampening != 0):
            continue  # torch refuses it (test_validation below)
        g0 = {"lr": 0.1, "momentum": mu, "dampening": dampening, "nesterov": nesterov, "weight_decay": wd,
              "maximize": maximize}
        # the second group differs in every hyperparameter it can
        g1 = {"lr": 1e-3, "momentum": 0.5 if mu else 0.0, "dampening": 0.0 if nesterov else 0.1,
              "nesterov": nesterov, "weight_decay": 0.1 - wd, "maximize": not maximize}
        yield [g0, g1]


CONFIGS = list(sgd_configs())


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
def test_matches_torch_float64(foreach):
    worst = max(run_vs_torch(hp, foreach, seed=k) for k, hp in enumerate(CONFIGS))
    record(f"torch foreach={foreach}", worst)
    print(f"\nsgd foreach={foreach}: {len(CONFIGS)} configs x {STEPS} steps, worst relative agreement vs torch "
          f"float64 {worst:.3g}")
    assert worst <= TOL


def test_torch_defaults_are_the_specs():
    """Every default of the spec is torch's constructor default (and no others)."""
    opt = torch.optim.SGD([torch.zeros(1)])
    torch_defaults = {k: v for k, v in opt.defaults.items() if k not in ("foreach", "differentiable", "fused")}
    assert oracle.SPECS["sgd"].defaults == torch_defaults


@pytest.mark.parametrize("conv", [ZERO_BUFFER_SGD, DECOUPLED_SGD], ids=["dampened", "decoupled"])
def test_other_conventions_differ_from_torch(conv):
    """The comparison can fail: the non-torch options are far from torch's SGD."""
    hp = [{"lr": 0.1, "momentum": 0.9, "dampening": 0.5, "weight_decay": 0.1}] * 2
    with pytest.raises(AssertionError, match="relative error"):
        run_vs_torch(hp, False, conv=conv, steps=2)


# ---------------------------------------------------------------- mpmath

def mp_sgd(p, grads, hp, conv):
    """The docstring of oracle/sgd.py, element by element, in 50-digit arithmetic.
    p: list of mpf; grads: per step, a list of mpf or None. Returns per step (p, buf)."""
    lr, mu, d, wd = (mp.mpf(float(hp[k])) for k in ("lr", "momentum", "dampening", "weight_decay"))
    buf = None
    out = []
    for gs in grads:
        if gs is None:
            out.append((list(p), buf))
            continue
        new_p, new_buf = [], []
        for j, (x, g) in enumerate(zip(p, gs)):
            if hp["maximize"]:
                g = -g
            if conv.decay == "l2":
                g = g + wd * x
            else:
                x = x * (1 - lr * wd)
            if mu != 0:
                if buf is None and conv.first_step == "copy":
                    b = g
                else:
                    b = mu * (buf[j] if buf is not None else 0) + (1 - d) * g
                new_buf.append(b)
                g = g + mu * b if hp["nesterov"] else b
            new_p.append(x - lr * g)
        p = new_p
        buf = new_buf if mu != 0 else None
        out.append((list(p), buf))
    return out


def oracle_trajectory(p0, grads, hp, conv):
    params, state = [[p0]], OptState.empty([[p0]])
    out = []
    for g in grads:
        params, state = oracle.sgd.step(params, [[g]], state, [hp], conv)
        out.append((params[0][0], state.params[0][0].get("momentum_buffer")))
    return out


MP_STEPS = 6


@pytest.mark.parametrize("first_step", ["copy", "dampened"])
@pytest.mark.parametrize("decay", ["l2", "decoupled"])
@pytest.mark.parametrize("mu,dampening,nesterov", [(0.0, 0.0, False), (0.9, 0.0, False), (0.9, 0.3, False),
                                                   (0.8, 0.0, True)])
@pytest.mark.parametrize("maximize", [False, True])
def test_vs_mpmath(first_step, decay, mu, dampening, nesterov, maximize):
    conv = SGDConvention(decay=decay, first_step=first_step)
    hp = {"lr": 0.1, "momentum": mu, "dampening": dampening, "weight_decay": 0.2, "nesterov": nesterov,
          "maximize": maximize}
    rng = np.random.default_rng(7)
    p0 = rng.standard_normal(5)
    grads = [None if t == 0 else rng.standard_normal(5) for t in range(MP_STEPS)]  # no grad on step 1
    ours = oracle_trajectory(p0, grads, hp, conv)
    ref = mp_sgd([mp.mpf(float(x)) for x in p0], [None if g is None else [mp.mpf(float(x)) for x in g]
                                                  for g in grads], hp, conv)
    lr, mu_, wd = (mp.mpf(hp[k]) for k in ("lr", "momentum", "weight_decay"))
    worst = 0.0
    prev = [mp.mpf(float(x)) for x in p0]
    p_scale = [abs(x) for x in prev]
    b_scale = [mp.mpf(0)] * 5
    for t, ((p, buf), (rp, rbuf)) in enumerate(zip(ours, ref)):
        assert (buf is None) == (rbuf is None), f"step {t + 1}: buffer present {buf is not None}"
        for j in range(5):
            g_in = abs(mp.mpf(float(grads[t][j]))) + wd * abs(prev[j]) if grads[t] is not None else mp.mpf(0)
            b = abs(rbuf[j]) if rbuf is not None else mp.mpf(0)
            # the param's operands: itself, and each term of its update (lr*g', lr*mu*buf, lr*buf, lr*wd*p)
            p_scale[j] = max(p_scale[j], abs(rp[j]), lr * g_in, lr * b, lr * wd * abs(prev[j]))
            worst = max(worst, float(abs(mp.mpf(float(p[j])) - rp[j]) / p_scale[j]))
            if rbuf is not None:
                b_scale[j] = max(b_scale[j], b, g_in, mu_ * b)
                worst = max(worst, float(abs(mp.mpf(float(buf[j])) - rbuf[j]) / b_scale[j]))
        prev = rp
    record("mpmath", worst)
    assert worst <= MP_TOL, f"{conv} {hp}: worst relative error {worst:.3g}"


def test_dampened_first_step_closed_form():
    """first_step="dampened": buf_1 = (1-d)*g, p_1 = p_0 - lr*(1-d)*g (no decay); "copy": buf_1 = g.
    With d = 0.5 and lr a power of two every operation is exact, so equality is exact."""
    p0 = np.array([1.0, -2.0, 0.75])
    g = np.array([0.5, 3.0, -1.25])
    hp = {"lr": 0.25, "momentum": 0.9, "dampening": 0.5}
    (p, buf), = oracle_trajectory(p0, [g], hp, ZERO_BUFFER_SGD)
    np.testing.assert_array_equal(buf, 0.5 * g)
    np.testing.assert_array_equal(p, p0 - 0.25 * 0.5 * g)
    (p, buf), = oracle_trajectory(p0, [g], hp, TORCH_SGD)
    np.testing.assert_array_equal(buf, g)
    np.testing.assert_array_equal(p, p0 - 0.25 * g)


def test_decoupled_decay_closed_form():
    """decay="decoupled", no momentum: p_1 = p_0*(1 - lr*wd) - lr*g, the grad untouched by the decay;
    a zero grad with wd > 0 shrinks p by exactly (1 - lr*wd) (exact for these powers of two)."""
    p0 = np.array([1.0, -2.0, 0.5])
    hp = {"lr": 0.5, "weight_decay": 0.5}
    (p, buf), = oracle_trajectory(p0, [np.zeros(3)], hp, DECOUPLED_SGD)
    assert buf is None
    np.testing.assert_array_equal(p, p0 * 0.75)
    g = np.array([0.25, 1.0, -0.5])
    (p, _), = oracle_trajectory(p0, [g], hp, DECOUPLED_SGD)
    np.testing.assert_array_equal(p, p0 * 0.75 - 0.5 * g)
    (p, _), = oracle_trajectory(p0, [g], hp, TORCH_SGD)  # L2: the decay enters the grad
    np.testing.assert_array_equal(p, p0 - 0.5 * (g + 0.5 * p0))


# ---------------------------------------------------------------- counters, state, validation

@pytest.mark.parametrize("counter", ["none", "param", "group"])
def test_counter_conventions(counter):
    """SGD's math reads no counter; the convention only decides which counter is kept."""
    conv = SGDConvention(counter=counter)
    params = [[np.ones(2), np.ones(3)], []]
    grads = [[np.ones(2), None], []]
    state = OptState.empty(params)
    hp = [{"momentum": 0.9}, {}]
    for _ in range(3):
        out, state = oracle.sgd.step(params, grads, state, hp, conv)
    assert state.group_step == ([3, 3] if counter == "group" else [0, 0])
    first = state.params[0][0]
    assert ("step" in first) == (counter == "param") and first.get("step", 3) == 3
    assert state.params[0][1] == {}  # no grad: no state, no counter
    assert set(first) - {"step"} == {"momentum_buffer"}
    # the trajectory is the same whatever counter is kept
    ref, _ = oracle.sgd.step(params, grads, OptState.empty(params), hp, TORCH_SGD)
    assert oracle.sgd.step(params, grads, OptState.empty(params), hp, conv)[0][0][0].tolist() == ref[0][0].tolist()


def test_counter_none_passes_no_t():
    seen = []
    params, state = [[np.ones(2)]], OptState.empty([[np.ones(2)]])
    oracle.common.drive(params, [[np.ones(2)]], state, [{}], "none", None,
                        lambda g, i, p, grad, st, t: (seen.append(t), (p, st))[1])
    assert seen == [None]


def test_no_momentum_no_state():
    params = [[np.ones(3)]]
    out, state = oracle.step("sgd", params, [[np.full(3, 2.0)]], None, [{"lr": 0.5}])
    assert state.params == [[{}]] and state.group_step == [0]
    np.testing.assert_array_equal(out[0][0], np.zeros(3))
    assert oracle.SPECS["sgd"].state_keys_for({"momentum": 0.9}) == ("momentum_buffer",)
    assert oracle.SPECS["sgd"].state_keys_for({"momentum": 0.0}) == ()


def test_buffer_does_not_alias_the_grad():
    g = np.array([1.0, 2.0])
    _, state = oracle.step("sgd", [[np.zeros(2)]], [[g]], None, [{"momentum": 0.9}])
    buf = state.params[0][0]["momentum_buffer"]
    assert not np.shares_memory(buf, g)
    g[0] = 7.0
    assert buf[0] == 1.0


def test_infinite_param_without_decay_keeps_a_finite_buffer():
    """wd = 0 adds nothing (torch skips the term): an infinite param does not put NaN into the buffer."""
    _, state = oracle.step("sgd", [[np.array([np.inf, 1.0])]], [[np.array([1.0, 1.0])]], None,
                           [{"momentum": 0.9}])
    assert np.all(np.isfinite(state.params[0][0]["momentum_buffer"]))


@pytest.mark.parametrize("bad,match", [
    ({"lr": -1.0}, "group 1: lr"),
    ({"momentum": -0.1}, "group 1: momentum"),
    ({"weight_decay": -0.1}, "group 1: weight_decay"),
    ({"dampening": math.nan}, "group 1: dampening"),
    ({"lr": math.nan}, "group 1: lr"),
    ({"nesterov": True}, "group 1: nesterov requires momentum > 0"),
    ({"nesterov": True, "momentum": 0.9, "dampening": 0.1}, "group 1: nesterov requires"),
])
def test_validation_names_the_group(bad, match):
    params = [[np.ones(2)], [np.ones(2)]]
    with pytest.raises(ValueError, match=match):
        oracle.step("sgd", params, [[np.ones(2)], [np.ones(2)]], None, [{}, bad])


def test_torch_refuses_what_the_oracle_refuses():
    for bad in ({"lr": -1.0}, {"momentum": -0.1}, {"weight_decay": -0.1}, {"nesterov": True},
                {"nesterov": True, "momentum": 0.9, "dampening": 0.1}):
        with pytest.raises(ValueError):
            torch.optim.SGD([torch.zeros(1)], **bad)


@pytest.mark.parametrize("field,value", [("decay", "decoupled_update"), ("first_step", "zero"),
                                         ("counter", "step")])
def test_unknown_convention_values(field, value):
    with pytest.raises(ValueError, match=field if field != "counter" else "counter"):
        SGDConvention(**{field: value})


def test_zz_report_worst():
    if not WORST:
        pytest.skip("run with the whole module to collect the figures")
    print("\nsgd worst relative agreement: " + ", ".join(f"{k} {v:.3g}" for k, v in sorted(WORST.items())))
    assert all(v <= TOL for v in WORST.values())
