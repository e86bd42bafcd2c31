"""The Lion oracle (oracle/lion.py) against a 50-digit mpmath transcription of its docstring.

The reference below is written element by element with mpmath and shares no code with the
oracle; inputs are float64 values converted to mpf exactly. 50 free-running steps, two groups
differing in every hyperparameter, wd > 0, a param without a grad on some steps, and elements
whose grad is exactly 0 from the first step (so c = 0 exactly, and the two sign_zero
conventions part: "zero" only decays such an element, "copysign" also moves it by -lr).

Agreement is relative to the operand magnitude: per element, the running maximum over
steps 1..t of |p_k|, the update term's lr and |lr*wd*p_{k-1}| for a param;
of |m_k| and the incoming |g| for exp_avg. The oracle must agree to 1e-14.

Why the reference's copysign of an exact 0 is +1: the oracle's zeros are +0. m starts at +0,
b*(+0) is +0, and a float64 sum is -0 only when both terms are -0 (round to nearest), so c
and m are never -0 here, whatever the sign of a zero grad.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import oracle
from oracle import GradScaling, OptState
from oracle.lion import COPYSIGN_LION, DEEPSPEED_LION, REFERENCE_LION, LionConvention

mp = mpmath.mp
mp.dps = 50
TOL = 1e-14
STEPS = 50
SHAPES = [[(3, 4), (5,)], [(), (6,)]]
ZERO_ELEMENTS = 3  # the first elements of every grad of param 0 of each group are exactly 0 (or -0)
NONE_AT = {(1, 1): {1, 2, 17, 30}}  # (group, param): steps without a grad
HP = [{"lr": 1e-2, "betas": (0.9, 0.99), "weight_decay": 0.5},
      {"lr": 3e-3, "betas": (0.95, 0.98), "weight_decay": 1.0, "maximize": True}]
WORST: dict[str, float] = {}


def mp_sign(c, sign_zero):
    if c > 0:
        return mp.mpf(1)
    if c < 0:
        return mp.mpf(-1)
    return mp.mpf(0) if sign_zero == "zero" else mp.mpf(1)  # +0: see the module docstring


class Ref:
    """One param, element by element: p, m, and running scales."""

    def __init__(self, p):
        self.p = [mp.mpf(float(x)) for x in np.ravel(p)]
        self.m = [mp.mpf(0)] * len(self.p)
        self.sp = [abs(x) for x in self.p]
        self.sm = [mp.mpf(0)] * len(self.p)
        self.steps = 0

    def step(self, g, hp, sign_zero, inv_scale):
        lr, wd = mp.mpf(hp["lr"]), mp.mpf(hp.get("weight_decay", 0.0))
        b1, b2 = (mp.mpf(b) for b in hp.get("betas", (0.9, 0.99)))
        self.steps += 1
        for j, gj in enumerate(np.ravel(g)):
            gj = mp.mpf(float(gj)) * mp.mpf(inv_scale)
            if hp.get("maximize", False):
                gj = -gj
            c = b1 * self.m[j] + (1 - b1) * gj
            prev = self.p[j]
            self.p[j] = prev * (1 - lr * wd) - lr * mp_sign(c, sign_zero)
            self.m[j] = b2 * self.m[j] + (1 - b2) * gj
            self.sp[j] = max(self.sp[j], abs(self.p[j]), lr, lr * wd * abs(prev))
            self.sm[j] = max(self.sm[j], abs(self.m[j]), abs(gj))


def make_problem(seed):
    rng = np.random.default_rng(seed)
    params = [[rng.standard_normal(s) for s in group] for group in SHAPES]
    grads = []
    for t in range(1, STEPS + 1):
        step = []
        for gi, group in enumerate(SHAPES):
            gs = []
            for i, s in enumerate(group):
                if t in NONE_AT.get((gi, i), ()):
                    gs.append(None)
                    continue
                g = rng.standard_normal(s) * 10.0 ** rng.integers(-3, 2)
                if i == 0 and g.size:  # exact zeros, some of them -0
                    g.flat[:ZERO_ELEMENTS] = [0.0, -0.0, 0.0][:min(ZERO_ELEMENTS, g.size)]
                gs.append(g)
            step.append(gs)
        grads.append(step)
    return params, grads


def rel(ours, exact, scale):
    err = abs(mp.mpf(float(ours)) - exact)
    return float(err / scale) if scale else (0.0 if err == 0 else math.inf)


def run_vs_mpmath(conv, hp=HP, seed=0, scaling=GradScaling()):
    params, grads = make_problem(seed)
    refs = [[Ref(p) for p in group] for group in params]
    state = OptState.empty(params)
    worst = 0.0
    for t, gs in enumerate(grads, 1):
        params, state = oracle.lion.step(params, gs, state, hp, conv, scaling)
        for gi, group in enumerate(refs):
            for i, r in enumerate(group):
                g = gs[gi][i]
                if g is not None:
                    r.step(g, hp[gi], conv.sign_zero, float(scaling.inv_scale))
                where = f"{conv} step {t} group {gi} param {i}"
                st = state.params[gi][i]
                assert ("exp_avg" in st) == (r.steps > 0), where
                for j, x in enumerate(np.ravel(params[gi][i])):
                    e = rel(x, r.p[j], r.sp[j])
                    assert e <= TOL, f"{where} p[{j}]: {e:.3g}"
                    worst = max(worst, e)
                for j, x in enumerate(np.ravel(st.get("exp_avg", []))):
                    e = rel(x, r.m[j], r.sm[j])
                    assert e <= TOL, f"{where} exp_avg[{j}]: {e:.3g}"
                    worst = max(worst, e)
    return worst, params, state, refs


@pytest.mark.parametrize("conv", [REFERENCE_LION, COPYSIGN_LION, LionConvention(counter="param"),
                                  LionConvention(sign_zero="copysign", counter="group")],
                         ids=["zero/none", "copysign/none", "zero/param", "copysign/group"])
def test_vs_mpmath(conv):
    worst, _, state, _ = run_vs_mpmath(conv)
    WORST["mpmath"] = max(WORST.get("mpmath", 0.0), worst)
    if conv.counter == "group":
        assert state.group_step == [STEPS, STEPS]
    else:
        assert state.group_step == [0, 0]
    st = state.params[1][1]
    if conv.counter == "param":
        assert st["step"] == STEPS - len(NONE_AT[(1, 1)]) and type(st["step"]) is int
    else:
        assert "step" not in st


def test_inv_scale_vs_mpmath():
    worst, *_ = run_vs_mpmath(REFERENCE_LION, scaling=GradScaling(inv_scale=0.3), seed=1)
    WORST["mpmath"] = max(WORST.get("mpmath", 0.0), worst)


def test_fp32_hparams_are_rounded_before_use():
    """DeepSpeed's preset holds lr, betas, wd as float32: the reference rounds them itself."""
    f32 = lambda x: float(np.float32(x))  # noqa: E731
    hp32 = [{**h, "lr": f32(h["lr"]), "betas": tuple(f32(b) for b in h["betas"]),
             "weight_decay": f32(h["weight_decay"])} for h in HP]
    params, grads = make_problem(2)
    ours = oracle.lion.step(params, grads[0], OptState.empty(params), HP, DEEPSPEED_LION)[0]
    exact = oracle.lion.step(params, grads[0], OptState.empty(params), hp32, COPYSIGN_LION)[0]
    for a, b in zip(sum(ours, []), sum(exact, [])):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("sign_zero", ["zero", "copysign"])
def test_exact_zero_grads(sign_zero):
    """c = 0 exactly: "zero" only decays p, "copysign" also steps by -lr, for +0 and -0 grads alike;
    and the maximize negation of a zero changes nothing."""
    p0 = np.array([1.0, -2.0, 0.5, 0.0])
    for maximize in (False, True):
        hp = [{"lr": 0.25, "weight_decay": 0.5, "maximize": maximize}]
        for g in (np.zeros(4), np.full(4, -0.0)):
            out, st = oracle.step("lion", [[p0]], [[g]], None, hp, LionConvention(sign_zero=sign_zero))
            decayed = p0 * (1 - 0.25 * 0.5)  # powers of two: exact
            np.testing.assert_array_equal(out[0][0], decayed if sign_zero == "zero" else decayed - 0.25)
            np.testing.assert_array_equal(st.params[0][0]["exp_avg"], np.zeros(4))


def test_sign_of_nan_momentum():
    """A NaN c: NaN under "zero" (np.sign; torch.sign would give 0), +-1 by its sign bit under copysign."""
    st = OptState([0], [[{"exp_avg": np.array([np.nan, -np.nan])}]])
    hp = [{"lr": 0.5}]
    out, _ = oracle.lion.step([[np.ones(2)]], [[np.ones(2)]], st, hp, REFERENCE_LION)
    assert np.all(np.isnan(out[0][0]))
    out, _ = oracle.lion.step([[np.ones(2)]], [[np.ones(2)]], st, hp, COPYSIGN_LION)
    assert set(out[0][0].tolist()) <= {0.5, 1.5}  # which sign a NaN carries through b1*m + ... is the FPU's


def test_found_inf_and_none_grads_change_nothing():
    params, grads = make_problem(3)
    new, state = oracle.lion.step(params, grads[0], OptState.empty(params), HP, REFERENCE_LION,
                                  GradScaling(found_inf=True))
    assert all(np.array_equal(a, b) for a, b in zip(sum(params, []), sum(new, [])))
    assert state.params == [[{}, {}], [{}, {}]]
    none = [[None] * len(g) for g in params]
    new, state = oracle.lion.step(params, none, OptState.empty(params), HP, LionConvention(counter="group"))
    assert all(np.array_equal(a, b) for a, b in zip(sum(params, []), sum(new, [])))
    assert state.group_step == [1, 1] and state.params == [[{}, {}], [{}, {}]]


class Traced(np.lib.mixins.NDArrayOperatorsMixin):
    """An array type implementing NumPy's protocols itself, as the comparison engine's
    error-carrying arrays do: records every ufunc and function the update calls."""

    seen: set = set()

    def __init__(self, v):
        self.v = np.asarray(v, dtype=np.float64)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        Traced.seen.add(ufunc.__name__)
        out = getattr(ufunc, method)(*[x.v if isinstance(x, Traced) else x for x in inputs], **kwargs)
        return Traced(out)

    def __array_function__(self, func, types, args, kwargs):
        Traced.seen.add(func.__name__)
        unwrap = lambda x: x.v if isinstance(x, Traced) else x  # noqa: E731
        out = func(*[unwrap(a) for a in args], **kwargs)
        return Traced(out) if isinstance(out, np.ndarray) else out  # np.shape, np.iscomplexobj: plain


@pytest.mark.parametrize("conv", [REFERENCE_LION, COPYSIGN_LION], ids=["zero", "copysign"])
def test_update_passes_protocol_arrays_through(conv):
    """Plain ufuncs only: a protocol array goes through the whole step and gives the plain result."""
    p, g = np.array([1.0, -1.0, 2.0, 0.5]), np.array([0.5, 0.0, -3.0, 1e-30])
    hp = [{"lr": 0.1, "weight_decay": 0.1, "maximize": True}]
    want, want_st = oracle.lion.step([[p]], [[g]], OptState.empty([[p]]), hp, conv)
    Traced.seen = set()
    got, got_st = oracle.lion.step([[Traced(p)]], [[Traced(g)]], OptState.empty([[p]]), hp, conv)
    assert isinstance(got[0][0], Traced) and isinstance(got_st.params[0][0]["exp_avg"], Traced)
    np.testing.assert_array_equal(got[0][0].v, want[0][0])
    np.testing.assert_array_equal(got_st.params[0][0]["exp_avg"].v, want_st.params[0][0]["exp_avg"])
    assert ("sign" if conv.sign_zero == "zero" else "copysign") in Traced.seen


@pytest.mark.parametrize("bad,match", [
    ({"lr": -1e-4}, "group 1: lr"), ({"lr": math.nan}, "group 1: lr"),
    ({"weight_decay": -0.1}, "group 1: weight_decay"), ({"weight_decay": math.nan}, "group 1: weight_decay"),
    ({"betas": (1.0, 0.99)}, r"group 1: betas\[0\]"), ({"betas": (0.9, -0.1)}, r"group 1: betas\[1\]"),
    ({"betas": (math.nan, 0.99)}, r"group 1: betas\[0\]"), ({"betas": (0.9,)}, "group 1: betas must be a pair"),
])
def test_validation_names_the_group(bad, match):
    params = [[np.ones(2)], [np.ones(2)]]
    with pytest.raises(ValueError, match=match):
        oracle.step("lion", params, [[np.ones(2)], [np.ones(2)]], None, [{}, bad])


@pytest.mark.parametrize("field", ["sign_zero", "counter"])
def test_unknown_convention_values(field):
    with pytest.raises(ValueError, match=f"{field} must be one of"):
        LionConvention(**{field: "bogus"})


def test_spec_record():
    spec = oracle.SPECS["lion"]
    assert spec.defaults == {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 0.0, "maximize": False}
    assert spec.state_keys == ("exp_avg",) and spec.convention == REFERENCE_LION


def test_zz_report_worst():
    if not WORST:
        pytest.skip("run with the whole module to collect the figures")
    print(f"\nlion worst relative agreement vs mpmath (dps=50, {STEPS} steps): {WORST['mpmath']:.3g}")
    assert WORST["mpmath"] <= TOL
