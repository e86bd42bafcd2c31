"""Closed-form properties of the oracle: each expected value is derived here, by hand."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import oracle
from oracle import GradScaling, OptState
from oracle.adagrad import AdagradConvention
from oracle.adam import AdamConvention
from oracle.common import bias_corrections
from oracle.lamb import DEEPSPEED_LAMB, LambConvention

RNG = np.random.default_rng(7)

# one (optimizer, convention, hparams) per optimizer and counter convention
SPECS = {
    "adam/param": ("adam", AdamConvention(decay="l2"), {"lr": 1e-2, "weight_decay": 0.1, "amsgrad": True}),
    "adamw/group": ("adamw", AdamConvention(decay="decoupled_update", counter="group"), {"lr": 1e-2, "weight_decay": 0.1}),
    "adagrad/param": ("adagrad", AdagradConvention(), {"lr": 0.1, "weight_decay": 0.1, "initial_accumulator_value": 0.1}),
    "adagrad/group": ("adagrad", AdagradConvention(decay="decoupled", counter="group"), {"lr": 0.1, "weight_decay": 0.1}),
    "lamb/group": ("lamb", LambConvention(), {"lr": 1e-2, "weight_decay": 0.1}),
    "lamb/param": ("lamb", DEEPSPEED_LAMB, {"lr": 1e-2, "weight_decay": 0.1}),
}


def problem(n_groups=2, shapes=((3, 2), (4,))):
    params = [[RNG.standard_normal(s) for s in shapes] for _ in range(n_groups)]
    grads = [[RNG.standard_normal(s) for s in shapes] for _ in range(n_groups)]
    return params, grads


def counters(state):
    return state.group_step, [[st.get("step") for st in group] for group in state.params]


def assert_same_state(a: OptState, b: OptState):
    assert a.group_step == b.group_step
    for ga, gb in zip(a.params, b.params):
        for sa, sb in zip(ga, gb):
            assert sa.keys() == sb.keys()
            for k in sa:
                np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


def run(spec, params, grads, state=None, scaling=None, hp_over=None, steps=1):
    name, conv, hp = SPECS[spec]
    hps = [{**hp, **(hp_over or {})} for _ in params]
    state = OptState.empty(params) if state is None else state
    for _ in range(steps):
        params, state = oracle.step(name, params, grads, state, hps, conv, scaling)
    return params, state


@pytest.mark.parametrize("eps_mode", ["outside", "outside_corrected", "inside"])
@pytest.mark.parametrize("eps", [1e-8, 1e-2])
def test_adam_first_step_magnitude(eps_mode, eps):
    """Step 1 with bias correction and wd = 0: m^ = g and v^ = g^2, so the step is
    lr*|g|/(|g| + eps) (eps outside the sqrt) or lr*|g|/sqrt(g^2 + eps) (inside)."""
    lr = 3e-2
    g = np.array([1e-9, -1e-6, 3e-3, -0.5, 7.0, 0.0, 1e-4])
    p = RNG.standard_normal(g.shape)
    [[new]], _ = oracle.adam.step([[p]], [[g]], OptState.empty([[p]]), [{"lr": lr, "eps": eps}],
                                  AdamConvention(eps_mode=eps_mode))
    a = np.abs(g)
    want = lr * a / (a + eps) if eps_mode != "inside" else lr * a / np.sqrt(a * a + eps)
    np.testing.assert_allclose(np.abs(new - p), want, rtol=1e-13, atol=1e-16 * np.abs(p).max())
    assert np.all(np.sign(p - new) == np.sign(g))


@pytest.mark.parametrize("spec", ["adam/param", "adamw/group", "adagrad/param", "adagrad/group"])
def test_zero_grads_and_no_decay_leave_params_unchanged(spec):
    params, grads = problem()
    zeros = [[np.zeros_like(g) for g in group] for group in grads]
    steps = 3
    if spec.startswith("adagrad"):  # Adagrad's step is g/std: zero even with a history
        _, state = run(spec, params, grads, hp_over={"weight_decay": 0.0})
    else:
        state = None
    new, _ = run(spec, params, zeros, state=state, hp_over={"weight_decay": 0.0}, steps=steps)
    for a, b in zip(sum(params, []), sum(new, [])):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("spec", list(SPECS))
def test_lr_zero_leaves_params_but_advances_moments_and_counters(spec):
    name, conv, _ = SPECS[spec]
    params, grads = problem()
    # no clipping (LAMB), so the moments have a closed form
    hp_over = {"lr": 0.0, **({"max_grad_norm": 0.0} if name == "lamb" else {})}  # only LAMB has the key
    new, state = run(spec, params, grads, hp_over=hp_over, steps=2)
    for a, b in zip(sum(params, []), sum(new, [])):
        np.testing.assert_array_equal(a, b)
    if conv.counter == "group":
        assert state.group_step == [2, 2]
    else:
        assert all(st["step"] == 2 for group in state.params for st in group)
    for gs, ps, sts in zip(grads, params, state.params):
        for g, p, st in zip(gs, ps, sts):
            if name == "adagrad":  # h = init + 2*(g + wd*p)^2 (l2) or 2*g^2 (decoupled)
                gg = g + 0.1 * p if conv.decay == "l2" else g
                init = SPECS[spec][2].get("initial_accumulator_value", 0.0)
                np.testing.assert_allclose(st["sum"], init + 2 * gg * gg, rtol=1e-15)
                continue
            b1, b2 = 0.9, 0.999
            gg = g + 0.1 * p if conv.decay == "l2" else g
            # same grad twice: m = (1 - b1^2) g, v = (1 - b2^2) g^2 (1 - b^2 factored: no cancellation)
            np.testing.assert_allclose(st["exp_avg"], (1 - b1) * (1 + b1) * gg, rtol=1e-14)
            np.testing.assert_allclose(st["exp_avg_sq"], (1 - b2) * (1 + b2) * gg * gg, rtol=1e-14)


@pytest.mark.parametrize("spec", list(SPECS))
def test_counter_conventions(spec):
    """Group counters advance for an empty group and for a group whose params all lack grads;
    a param counter advances only with a grad."""
    name, conv, hp = SPECS[spec]
    p = RNG.standard_normal(3)
    params = [[p, p.copy()], [], [p.copy()]]
    grads = [[RNG.standard_normal(3), None], [], [None]]
    state = OptState.empty(params)
    for _ in range(3):
        new, state = oracle.step(name, params, grads, state, [hp] * 3, conv)
    if conv.counter == "group":
        assert state.group_step == [3, 3, 3]
        assert all("step" not in st for group in state.params for st in group)
    else:
        assert state.group_step == [0, 0, 0]
        assert state.params[0][0]["step"] == 3 and type(state.params[0][0]["step"]) is int
        assert state.params[0][1] == {} and state.params[2][0] == {}
    np.testing.assert_array_equal(new[0][1], params[0][1])  # no grad: unchanged
    np.testing.assert_array_equal(new[2][0], params[2][0])


@pytest.mark.parametrize("spec", list(SPECS))
def test_found_inf_skips_everything(spec):
    name, conv, hp = SPECS[spec]
    params, grads = problem()
    params, state = run(spec, params, grads, steps=2)
    before = copy.deepcopy((params, state))
    bad = [[g * np.inf for g in group] for group in grads]
    new, after = run(spec, params, bad, state=state, scaling=GradScaling(inv_scale=0.5, found_inf=True))
    for a, b in zip(sum(before[0], []), sum(new, [])):
        np.testing.assert_array_equal(a, b)
    assert_same_state(before[1], after)
    assert counters(after) == counters(before[1])


@pytest.mark.parametrize("s", [2.0 ** 10, 2.0 ** -7, 2.0 ** 40])
@pytest.mark.parametrize("spec", list(SPECS))
def test_inv_scale_applied_exactly_once(spec, s):
    """Power-of-two scaling is exact, so grads*s with inv_scale=1/s is bit-identical to grads."""
    params, grads = problem()
    grads[1][0] = grads[1][0] * 30  # make LAMB's global clip bind
    ref, ref_state = run(spec, params, grads, steps=1)
    scaled = [[g * s for g in group] for group in grads]
    got, got_state = run(spec, params, scaled, scaling=GradScaling(inv_scale=1 / s), steps=1)
    for a, b in zip(sum(ref, []), sum(got, [])):
        np.testing.assert_array_equal(a, b)
    assert_same_state(ref_state, got_state)


@pytest.mark.parametrize("spec", list(SPECS))
def test_inputs_not_mutated_and_outputs_not_aliased(spec):
    params, grads = problem()
    grads[0][1] = None
    params, state = run(spec, params, grads)
    snapshot = copy.deepcopy((params, grads, state))
    name, conv, hp = SPECS[spec]
    for scaling in (None, GradScaling(inv_scale=0.25), GradScaling(found_inf=True)):
        new, new_state = oracle.step(name, params, grads, state, [hp, hp], conv, scaling)
        for a, b in zip(sum(snapshot[0], []), sum(params, [])):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(sum(snapshot[1], []), sum(grads, [])):
            assert (a is None and b is None) or np.array_equal(a, b)
        assert_same_state(snapshot[2], state)
        # new arrays are returned (oracle.common docstring): writing to them leaves the inputs alone
        for a, b in zip(sum(params, []), sum(new, [])):
            assert not np.shares_memory(a, b)
        for sa, sb in zip(sum(state.params, []), sum(new_state.params, [])):
            for k in sa:
                if isinstance(sa[k], np.ndarray):
                    assert not np.shares_memory(sa[k], sb[k]), k


def test_bias_corrections_are_exact_integer_powers():
    b1, b2 = 0.9, 1 - 2.0 ** -30
    for t in (1, 2, 10, 2 ** 24 - 1, 2 ** 24, 2 ** 24 + 1, 2 ** 31 + 5):
        assert bias_corrections(b1, b2, t, True) == (1 - math.pow(b1, t), 1 - math.pow(b2, t))
    assert bias_corrections(b1, b2, 5, False) == (1.0, 1.0)
    # a float32 counter cannot tell 2**24 from 2**24 + 1; the result must
    assert bias_corrections(b1, b2, 2 ** 24 + 1, True)[1] != bias_corrections(b1, b2, 2 ** 24, True)[1]


@pytest.mark.parametrize("counter", ["param", "group"])
def test_adam_counter_near_2_pow_24(counter):
    """A step from a counter of 2**24: t = 2**24 + 1, an exact int, and the update uses
    1 - b^t with that exact t (b2 chosen so that b2^t is far from 0 and 1)."""
    b1, b2, lr, eps = 0.9, 1 - 2.0 ** -30, 1e-2, 1e-8
    p, g = RNG.standard_normal(4), RNG.standard_normal(4)
    m, v = RNG.standard_normal(4), RNG.random(4) + 0.1
    t0 = 2 ** 24
    st = {"exp_avg": m, "exp_avg_sq": v}
    state = OptState([t0], [[{**st, "step": t0} if counter == "param" else st]])
    [[new]], state = oracle.adam.step([[p]], [[g]], state, [{"lr": lr, "betas": (b1, b2), "eps": eps}],
                                      AdamConvention(counter=counter))
    t = state.params[0][0]["step"] if counter == "param" else state.group_step[0]
    assert t == t0 + 1 and type(t) is int
    m1, v1 = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    expect = lambda t: p - lr / (1 - math.pow(b1, t)) * m1 / (np.sqrt(v1) / math.sqrt(1 - math.pow(b2, t)) + eps)  # noqa: E731
    np.testing.assert_allclose(new, expect(t0 + 1), rtol=1e-15, atol=1e-17)
    assert np.max(np.abs(new - expect(t0))) > 1e-12  # the test can tell t0 from t0 + 1


def test_amsgrad_keeps_running_max_of_raw_v():
    """A large grad, then zero grads: v decays, the max stays at v_1 = (1-b2) g^2 (not
    bias-corrected), and the step uses sqrt(max)/sqrt(bc2_t)."""
    b1, b2, lr, eps = 0.9, 0.9, 1e-2, 1e-8
    p, g = RNG.standard_normal(3), np.array([2.0, -3.0, 0.5])
    hp = [{"lr": lr, "betas": (b1, b2), "eps": eps, "amsgrad": True}]
    conv = AdamConvention(decay="l2")
    params, state = [[p]], OptState.empty([[p]])
    params, state = oracle.adam.step(params, [[g]], state, hp, conv)
    v1 = (1 - b2) * g * g
    np.testing.assert_allclose(state.params[0][0]["max_exp_avg_sq"], v1, rtol=1e-15)
    m = (1 - b1) * g
    for t in (2, 3, 4):
        before = params[0][0]
        params, state = oracle.adam.step(params, [[np.zeros(3)]], state, hp, conv)
        st = state.params[0][0]
        m = b1 * m
        np.testing.assert_allclose(st["exp_avg_sq"], b2 ** (t - 1) * v1, rtol=1e-14)
        np.testing.assert_allclose(st["max_exp_avg_sq"], v1, rtol=1e-15)
        assert np.all(st["max_exp_avg_sq"] > st["exp_avg_sq"])
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        step = lr * (m / bc1) / (np.sqrt(v1) / np.sqrt(bc2) + eps)
        np.testing.assert_allclose(before - params[0][0], step, rtol=1e-13)
