"""The oracle against a 50-digit mpmath recomputation, for every optimizer and convention.

The references below are direct scalar transcriptions of the equations in the oracle's
docstrings (oracle/adam.py, adagrad.py, lamb.py), written element by element with mpmath
and sharing no code with the oracle. Inputs are float64 values, converted to mpf exactly;
hyperparameters are the float64 values given (or their float32 roundings, done here with
struct, when fp32_hparams is set).

Agreement is relative to the operand magnitude: per element, the error of a param after step
t is divided by the running maximum over steps 1..t of |p_k| and of every term that enters
its update (|lr*wd*p|, |step size * trust ratio * u|, ...); for a moment, of |m_k| (|v_k|)
and of its incoming |g| (g^2). The float64 oracle must agree to 1e-14.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import struct

import mpmath
import numpy as np
import pytest

import oracle
from oracle import GradScaling, OptState
from oracle.adagrad import AdagradConvention
from oracle.adam import AdamConvention
from oracle.lamb import APEX_LAMB, DEEPSPEED_LAMB, NVLAMB, PAPER_LAMB, LambConvention

mp = mpmath.mp
mp.dps = 50
TOL = 1e-14
STEPS = 4
WORST: dict[str, float] = {}


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def hparam(x, fp32):
    return mp.mpf(f32(x) if fp32 else float(x))


class Ref:
    """Element-wise mpmath state for one param: flat lists of mpf, and running scales."""

    def __init__(self, p):
        self.shape = np.shape(p)
        self.p = [mp.mpf(float(x)) for x in np.ravel(p)]
        self.st: dict[str, list] = {}
        self.t = 0
        self.scale = {"p": [abs(x) for x in self.p]}

    def bump(self, key, i, *mags):
        s = self.scale.setdefault(key, [mp.mpf(0)] * len(self.p))
        s[i] = max([s[i], *[abs(m) for m in mags]])


def mp_grads(grads, inv_scale):
    s = mp.mpf(float(inv_scale))
    return [[None if g is None else [mp.mpf(float(x)) * s for x in np.ravel(g)] for g in group] for group in grads]


def advance(refs, grads, counter, group_step, g):
    """Counter t for every param of group g that has a grad (docstring of oracle.common.drive)."""
    out = []
    for r, gr in zip(refs, grads):
        if gr is None:
            out.append(None)
            continue
        r.t = group_step[g] if counter == "group" else r.t + 1
        out.append(r.t)
    return out


# ---- Adam (oracle/adam.py docstring) ----
def adam_ref_step(refs, grads, hps, conv, group_step, scaling):
    if scaling.found_inf:
        return
    grads = mp_grads(grads, scaling.inv_scale)
    for gi, (rs, gs, hp) in enumerate(zip(refs, grads, hps)):
        group_step[gi] += conv.counter == "group"
        fp = conv.fp32_hparams
        lr, eps, wd = hparam(hp["lr"], fp), hparam(hp["eps"], fp), hparam(hp["weight_decay"], fp)
        b1, b2 = hparam(hp["betas"][0], fp), hparam(hp["betas"][1], fp)
        for r, g, t in zip(rs, gs, advance(rs, gs, conv.counter, group_step, gi)):
            if g is None:
                continue
            n = len(r.p)
            m = r.st.setdefault("exp_avg", [mp.mpf(0)] * n)
            v = r.st.setdefault("exp_avg_sq", [mp.mpf(0)] * n)
            vmax = r.st.setdefault("max_exp_avg_sq", [mp.mpf(0)] * n) if hp["amsgrad"] else None
            bc1, bc2 = (1 - b1 ** t, 1 - b2 ** t) if conv.bias_correction else (mp.mpf(1), mp.mpf(1))
            for i in range(n):
                p, gg = r.p[i], g[i]
                if hp["maximize"]:
                    gg = -gg
                if conv.decay == "l2":
                    gg = gg + wd * p
                if conv.decay == "decoupled":
                    p = p * (1 - lr * wd)
                m[i] = b1 * m[i] + (1 - b1) * gg
                v[i] = b2 * v[i] + (1 - b2) * gg * gg
                vv = v[i]
                if vmax is not None:
                    vv = vmax[i] = max(vmax[i], v[i])
                if conv.eps_mode == "outside":
                    denom = mp.sqrt(vv) / mp.sqrt(bc2) + eps
                elif conv.eps_mode == "outside_corrected":
                    denom = mp.sqrt(vv / bc2) + eps
                else:
                    denom = mp.sqrt(vv / bc2 + eps)
                u = (m[i] / bc1) / denom
                terms = [lr * u, lr * wd * r.p[i]]
                if conv.decay == "decoupled_update":
                    u = u + wd * p
                r.p[i] = p - lr * u
                r.bump("p", i, r.p[i], *terms)
                r.bump("exp_avg", i, m[i], gg)
                r.bump("exp_avg_sq", i, v[i], gg * gg)
                if vmax is not None:
                    r.bump("max_exp_avg_sq", i, vmax[i], gg * gg)


# ---- Adagrad (oracle/adagrad.py docstring) ----
def adagrad_ref_step(refs, grads, hps, conv, group_step, scaling):
    if scaling.found_inf:
        return
    grads = mp_grads(grads, scaling.inv_scale)
    for gi, (rs, gs, hp) in enumerate(zip(refs, grads, hps)):
        group_step[gi] += conv.counter == "group"
        fp = conv.fp32_hparams
        lr, eps, wd = hparam(hp["lr"], fp), hparam(hp["eps"], fp), hparam(hp["weight_decay"], fp)
        lr_decay, init = hparam(hp["lr_decay"], fp), hparam(hp["initial_accumulator_value"], fp)
        for r, g, t in zip(rs, gs, advance(rs, gs, conv.counter, group_step, gi)):
            if g is None:
                continue
            h = r.st.setdefault("sum", [init] * len(r.p))
            clr = lr / (1 + (t - 1) * lr_decay)
            for i in range(len(r.p)):
                p, gg = r.p[i], g[i]
                if hp["maximize"]:
                    gg = -gg
                if conv.decay == "l2":
                    gg = gg + wd * p
                acc = gg + wd * p if conv.decay == "accumulator" else gg
                h[i] = h[i] + acc * acc
                std = mp.sqrt(h[i]) + eps if conv.eps_mode == "outside" else mp.sqrt(h[i] + eps)
                u = gg / std
                if conv.decay == "decoupled":
                    u = u + wd * p
                r.p[i] = p - clr * u
                r.bump("p", i, r.p[i], clr * gg / std, clr * wd * p)
                r.bump("sum", i, h[i], acc * acc)


# ---- LAMB (oracle/lamb.py docstring) ----
def lamb_ref_step(refs, grads, hps, conv, group_step, scaling):
    if scaling.found_inf:
        return
    grads = mp_grads(grads, scaling.inv_scale)
    clip = mp.mpf(1)
    if conv.global_clip:
        norm = mp.sqrt(sum(x * x for group in grads for g in group if g is not None for x in g))
        mgn = mp.mpf(float(hps[0]["max_grad_norm"]))
        if mgn > 0 and norm > mgn:
            clip = norm / mgn
    for gi, (rs, gs, hp) in enumerate(zip(refs, grads, hps)):
        group_step[gi] += conv.counter == "group"
        fp = conv.fp32_hparams
        lr, eps, wd = hparam(hp["lr"], fp), hparam(hp["eps"], fp), hparam(hp["weight_decay"], fp)
        b1, b2 = hparam(hp["betas"][0], fp), hparam(hp["betas"][1], fp)
        b3 = 1 - b1 if hp["grad_averaging"] else mp.mpf(1)
        for r, g, t in zip(rs, gs, advance(rs, gs, conv.counter, group_step, gi)):
            if g is None:
                continue
            n = len(r.p)
            m = r.st.setdefault("exp_avg", [mp.mpf(0)] * n)
            v = r.st.setdefault("exp_avg_sq", [mp.mpf(0)] * n)
            if conv.bias_correction == "none":
                bc1 = bc2 = mp.mpf(1)
            else:
                bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
            u, gin = [], []
            for i in range(n):
                gg = g[i] / clip
                if conv.decay == "l2":
                    gg = gg + wd * r.p[i]
                gin.append(gg)
                m[i] = b1 * m[i] + b3 * gg
                v[i] = b2 * v[i] + (1 - b2) * gg * gg
                if conv.bias_correction == "moments":
                    ui = (m[i] / bc1) / (mp.sqrt(v[i] / bc2) + eps)
                else:
                    ui = m[i] / (mp.sqrt(v[i]) + eps)
                if conv.decay == "decoupled_update":
                    ui = ui + wd * r.p[i]
                u.append(ui)
            step_size = lr if conv.bias_correction != "step_size" else lr * mp.sqrt(bc2) / bc1
            pn = mp.sqrt(sum(x * x for x in r.p))
            un = mp.sqrt(sum(x * x for x in u))
            if conv.trust == "decay_only" and wd == 0:
                ratio = mp.mpf(1)
            else:
                ratio = pn / un if pn != 0 and un != 0 else mp.mpf(1)
                if conv.clamp:
                    ratio = min(max(ratio, mp.mpf(hp["min_coeff"])), mp.mpf(hp["max_coeff"]))
            r.ratio = ratio
            for i in range(n):
                d = step_size * ratio * u[i]
                r.p[i] = r.p[i] - d
                r.bump("p", i, r.p[i], d, step_size * ratio * wd * r.p[i])
                r.bump("exp_avg", i, m[i], gin[i])
                r.bump("exp_avg_sq", i, v[i], gin[i] * gin[i])


REFS = {"adam": adam_ref_step, "adagrad": adagrad_ref_step, "lamb": lamb_ref_step}
MODULES = {"adam": oracle.adam, "adagrad": oracle.adagrad, "lamb": oracle.lamb}


def tiny_problem(seed, n_groups=2, p_scale=1.0, g_scale=1.0, none_at=None):
    """Tiny tensors: two groups (the second with a 0-dim param), grads for STEPS steps.
    none_at = {(group, param): steps without a grad}."""
    rng = np.random.default_rng(seed)
    shapes = [[(2, 2), (3,)], [(), (2,)]][:n_groups]
    params = [[rng.standard_normal(s) * p_scale for s in group] for group in shapes]
    grads = []
    for t in range(1, STEPS + 1):
        grads.append([[None if none_at and t in none_at.get((gi, i), ()) else rng.standard_normal(s) * g_scale
                       for i, s in enumerate(group)] for gi, group in enumerate(shapes)])
    return params, grads


def compare(name, conv, hparams, params, grads, scaling=GradScaling()):
    """Run oracle and reference side by side; return the worst relative error and the refs."""
    module, ref_step = MODULES[name], REFS[name]
    refs = [[Ref(p) for p in group] for group in params]
    group_step = [0] * len(params)
    state = OptState.empty(params)
    worst = 0.0
    for t, gs in enumerate(grads, 1):
        params, state = module.step(params, gs, state, hparams, conv, scaling)
        ref_step(refs, gs, module.validate(hparams), conv, group_step, scaling)
        assert state.group_step == group_step
        for gi, group in enumerate(refs):
            for i, r in enumerate(group):
                st = state.params[gi][i]
                if conv.counter == "param":
                    assert st.get("step", 0) == r.t, (gi, i, t)
                for key, ours in [("p", params[gi][i]), *((k, st[k]) for k in r.st)]:
                    ours = np.ravel(ours)
                    assert ours.size == len(r.p)
                    for j, exact in enumerate(r.p if key == "p" else r.st[key]):
                        err = abs(mp.mpf(float(ours[j])) - exact)
                        scale = r.scale[key][j]
                        e = float(err / scale) if scale else (0.0 if err == 0 else math.inf)
                        worst = max(worst, e)
                        assert e <= TOL, f"{name} {conv} step {t} group {gi} param {i} {key}[{j}]: {e:.3g}"
                assert set(r.st) <= set(st), (gi, i, set(st))
    return worst, refs


def record(name, worst):
    WORST[name] = max(WORST.get(name, 0.0), worst)


ADAM_HP = [{"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-3, "weight_decay": 0.1},
           {"lr": 0.3, "betas": (0.5, 0.8), "eps": 1e-8, "weight_decay": 0.05}]


@pytest.mark.parametrize("decay,eps_mode,bias_correction",
                         list(itertools.product(("l2", "decoupled", "decoupled_update"),
                                                ("outside", "outside_corrected", "inside"), (True, False))))
@pytest.mark.parametrize("amsgrad,maximize", [(False, False), (True, True)])
def test_adam_vs_mpmath(decay, eps_mode, bias_correction, amsgrad, maximize):
    conv = AdamConvention(decay=decay, eps_mode=eps_mode, bias_correction=bias_correction)
    hp = [{**h, "amsgrad": amsgrad, "maximize": maximize} for h in ADAM_HP]
    # amsgrad: grads shrink, so the running max differs from v
    params, grads = tiny_problem(1, none_at={(1, 1): {2}})
    grads = [[[None if g is None else g * 4.0 ** -t for g in group] for group in gs] for t, gs in enumerate(grads)]
    worst, refs = compare("adam", conv, hp, params, grads)
    if amsgrad:
        assert any(a > b for group in refs for r in group
                   for a, b in zip(r.st["max_exp_avg_sq"], r.st["exp_avg_sq"]))
    record("adam", worst)


@pytest.mark.parametrize("counter", ["param", "group"])
@pytest.mark.parametrize("amsgrad,maximize", [(True, False), (False, True)])
def test_adam_counters_vs_mpmath(counter, amsgrad, maximize):
    """A param without a grad on steps 1 and 3 and an all-None group: the counters differ."""
    conv = AdamConvention(decay="decoupled", counter=counter)
    hp = [{**h, "amsgrad": amsgrad, "maximize": maximize} for h in ADAM_HP]
    params, grads = tiny_problem(2, none_at={(0, 1): {1, 3}, (1, 0): {1, 2, 3, 4}, (1, 1): {1, 2, 3, 4}})
    record("adam", compare("adam", conv, hp, params, grads)[0])


ADAGRAD_HP = [{"lr": 0.1, "lr_decay": 0.0, "initial_accumulator_value": 0.0, "eps": 1e-3, "weight_decay": 0.1},
              {"lr": 0.5, "lr_decay": 0.3, "initial_accumulator_value": 0.2, "eps": 1e-10, "weight_decay": 0.05,
               "maximize": True}]


@pytest.mark.parametrize("decay,eps_mode", list(itertools.product(("l2", "decoupled", "accumulator"),
                                                                  ("outside", "inside"))))
@pytest.mark.parametrize("counter", ["param", "group"])
def test_adagrad_vs_mpmath(decay, eps_mode, counter):
    conv = AdagradConvention(decay=decay, eps_mode=eps_mode, counter=counter)
    params, grads = tiny_problem(3, none_at={(1, 1): {1, 3}})
    record("adagrad", compare("adagrad", conv, ADAGRAD_HP, params, grads)[0])


LAMB_HP = [{"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": 0.01, "max_grad_norm": 1.0},
           {"lr": 0.1, "betas": (0.8, 0.99), "eps": 1e-4, "weight_decay": 0.1, "max_grad_norm": 1.0}]

LAMB_CASES = {
    "apex": (APEX_LAMB, LAMB_HP, {}),
    "nvlamb": (NVLAMB, LAMB_HP, {}),
    "paper": (PAPER_LAMB, LAMB_HP, {}),
    "deepspeed": (DEEPSPEED_LAMB, LAMB_HP, {}),
    "deepspeed_clamped": (DEEPSPEED_LAMB, [{**h, "min_coeff": 0.01, "max_coeff": 0.3} for h in LAMB_HP], {}),
    "l2": (LambConvention(decay="l2"), LAMB_HP, {}),
    "no_grad_averaging": (APEX_LAMB, [{**h, "grad_averaging": False} for h in LAMB_HP], {}),
    "no_bias_correction": (LambConvention(bias_correction="none"), LAMB_HP, {}),
    "clipping_active": (APEX_LAMB, LAMB_HP, {"g_scale": 10.0}),
    "clipping_off": (APEX_LAMB, [{**h, "max_grad_norm": 0.0} for h in LAMB_HP], {"g_scale": 10.0}),
    "wd0_decay_only": (APEX_LAMB, [{**h, "weight_decay": 0.0} for h in LAMB_HP], {}),
    "zero_param_nvlamb": (NVLAMB, LAMB_HP, {"p_scale": 0.0}),
    "scaled_grads": (NVLAMB, LAMB_HP, {"scaling": GradScaling(inv_scale=1 / 3)}),
    "param_counter_none_grads": (PAPER_LAMB, LAMB_HP, {"none_at": {(0, 1): {2}, (1, 0): {1, 2}}}),
}


@pytest.mark.parametrize("case", list(LAMB_CASES))
def test_lamb_vs_mpmath(case):
    conv, hp, opts = LAMB_CASES[case]
    scaling = opts.get("scaling", GradScaling())
    params, grads = tiny_problem(4, p_scale=opts.get("p_scale", 1.0), g_scale=opts.get("g_scale", 0.1),
                                 none_at=opts.get("none_at"))
    worst, refs = compare("lamb", conv, hp, params, grads, scaling)
    ratios = [r.ratio for group in refs for r in group]
    if case == "deepspeed_clamped":
        assert any(x == mp.mpf(0.3) for x in ratios)  # the clamp binds
    if case == "wd0_decay_only":  # apex without use_nvlamb: no trust ratio when wd = 0
        assert all(x == 1 for x in ratios)
    record("lamb", worst)


def test_lamb_zero_norm_param_first_step():
    """Step 1 from p = 0: ||p|| = 0, so r = 1 and the step is lr * u exactly as without LAMB."""
    params, grads = tiny_problem(5, p_scale=0.0, g_scale=0.1)
    refs = [[Ref(p) for p in g] for g in params]
    lamb_ref_step(refs, grads[0], oracle.lamb.validate(LAMB_HP), NVLAMB, [0, 0], GradScaling())
    assert all(r.ratio == 1 for g in refs for r in g)
    record("lamb", compare("lamb", NVLAMB, LAMB_HP, params, grads[:1])[0])


# hyperparameters chosen so their float32 roundings differ visibly from the float64 values
FP32_HP = {
    "adam": [{"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-3, "weight_decay": 0.1, "amsgrad": True}],
    "adagrad": [{"lr": 0.1, "lr_decay": 0.1, "initial_accumulator_value": 0.1, "eps": 1e-3, "weight_decay": 0.1}],
    "lamb": [{"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-3, "weight_decay": 0.1}],
}
FP32_CONV = {"adam": AdamConvention(decay="decoupled_update", fp32_hparams=True),
             "adagrad": AdagradConvention(decay="decoupled", fp32_hparams=True),
             "lamb": LambConvention(trust="always", fp32_hparams=True)}


@pytest.mark.parametrize("name", ["adam", "adagrad", "lamb"])
def test_fp32_hparams_are_rounded_before_use(name):
    conv, hp = FP32_CONV[name], FP32_HP[name]
    params, grads = tiny_problem(6, n_groups=1)
    params, grads = params[:1], [gs[:1] for gs in grads]
    worst, _ = compare(name, conv, hp, params, grads)  # reference rounds to float32 itself
    record(name, worst)
    # and the rounding matters: with float64 hyperparameters the result is far off
    exact = MODULES[name].step(params, grads[0], OptState.empty(params), hp,
                               dataclasses.replace(conv, fp32_hparams=False))[0]
    rounded = MODULES[name].step(params, grads[0], OptState.empty(params), hp, conv)[0]
    assert np.max(np.abs(exact[0][0] - rounded[0][0])) > 1e-10


def test_zz_report_worst():
    if not WORST:
        pytest.skip("run with the whole module to collect the figures")
    print("\nworst relative agreement vs mpmath (dps=50): "
          + ", ".join(f"{k} {v:.3g}" for k, v in sorted(WORST.items())))
    assert WORST and all(v <= TOL for v in WORST.values())
