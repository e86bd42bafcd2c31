"""The conventions optax cannot check: torch NAdam, LAMB's other forms, counter
formats, and the refusals. Expected values come from the equations, written
out here per element with Python floats (math), never from the oracle."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from oracle import adagrad, adam, lamb
from oracle.common import OptState, counter_saturation, next_count, round_integer

REL = 1e-14  # same expressions in float64, differing in association only: a few ulps


def close(ours, want) -> bool:
    ours, want = np.asarray(ours, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(ours - want))) <= REL * max(float(np.max(np.abs(want))), 1e-300)


# --- counter formats ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, bits", [("float32", 24), ("bfloat16", 8)])
def test_counter_advances_once_more_then_stays(fmt, bits):
    top = 2 ** bits
    assert counter_saturation(fmt) == top
    assert next_count(top - 2, fmt) == top - 1
    assert next_count(top - 1, fmt) == top  # advances once
    assert next_count(top, fmt) == top      # then stays: top + 1 ties and rounds to the even top
    assert next_count(top, "exact") == top + 1


def test_integer_rounding_is_the_hardware_float32_one():
    ts = [*range(2 ** 24 - 4, 2 ** 24 + 40), 2 ** 25 + 1, 2 ** 30 + 3 * 2 ** 6, 123456789]
    for t in ts:
        assert round_integer(t, 24) == int(np.float32(t)), t
        assert next_count(int(np.float32(t)), "float32") == int(np.float32(np.float32(t) + np.float32(1))), t


def test_integer_rounding_is_bfloat16s():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 reference: pip install ml_dtypes")
    bf16 = ml_dtypes.bfloat16
    for t in range(0, 2 ** 11):
        assert round_integer(t, 8) == int(np.float32(np.asarray(t, dtype=np.float32).astype(bf16))), t


def slow_betas():
    """Betas so close to 1 that 1 - b^t still moves near t = 2**24."""
    return (1 - 1e-7, 1 - 1e-8)


def test_float32_counter_saturates_and_bias_corrections_use_the_saturated_t():
    rng = np.random.default_rng(0)
    p = [[rng.standard_normal(6)]]
    g = [[rng.standard_normal(6)]]
    moments = {"exp_avg": rng.standard_normal(6) * 1e-2, "exp_avg_sq": rng.random(6) * 1e-4}
    hp = [{"lr": 1e-2, "betas": slow_betas()}]
    f32 = replace(adam.TORCH_ADAMW, counter_format="float32")

    def from_step(n, conv):
        return adam.step(p, g, OptState([0], [[{**moments, "step": n}]]), hp, conv)

    first, st1 = from_step(2 ** 24 - 1, f32)
    assert st1.params[0][0]["step"] == 2 ** 24
    again, st2 = from_step(2 ** 24, f32)
    assert st2.params[0][0]["step"] == 2 ** 24
    # the saturated step runs with t = 2**24, the value an exact counter reaches one step earlier
    assert np.array_equal(again[0][0], first[0][0])
    exact, _ = from_step(2 ** 24, adam.TORCH_ADAMW)  # t = 2**24 + 1
    assert not np.array_equal(exact[0][0], again[0][0])


def test_bfloat16_group_counter_saturates_at_256():
    conv = replace(lamb.PAPER_LAMB, counter="group", counter_format="bfloat16")
    p, g = [[np.ones(3)]], [[np.full(3, 0.5)]]
    state = OptState([255], [[{}]])
    for want in (256, 256, 256):
        p, state = lamb.step(p, g, state, [{}], conv)
        assert state.group_step == [want]


def test_unknown_counter_format_is_refused():
    with pytest.raises(ValueError, match="counter_format"):
        adam.AdamConvention(counter_format="float16")


# --- Adam: eps_root, v-only correction ---------------------------------------------------------

@pytest.mark.parametrize("mode", ["outside", "inside"])
def test_eps_root_needs_the_corrected_outside_form(mode):
    p, g = [[np.ones(2)]], [[np.ones(2)]]
    conv = adam.AdamConvention(eps_mode=mode)
    with pytest.raises(ValueError, match="group 0: eps_root"):
        adam.step(p, g, OptState.empty(p), [{"eps_root": 1e-8}], conv)
    adam.step(p, g, OptState.empty(p), [{"eps_root": 0.0}], conv)  # zero: every mode


def test_negative_eps_root_is_refused():
    with pytest.raises(ValueError, match="eps_root"):
        adam.validate([{"eps_root": -1e-8}])
    with pytest.raises(ValueError, match="eps_root"):
        lamb.validate([{"eps_root": -1e-8}])


def test_eps_root_under_lamb_needs_moment_correction():
    p, g = [[np.ones(2)]], [[np.ones(2)]]
    with pytest.raises(ValueError, match="eps_root"):
        lamb.step(p, g, OptState.empty(p), [{"eps_root": 1e-8}], lamb.DEEPSPEED_LAMB)


def test_v_uncorrected_adam_by_hand():
    """bias_correction_v=False: u = (m/(1-b1^t)) / (sqrt(v) + eps)."""
    lr, b1, b2, eps = 0.1, 0.9, 0.99, 1e-8
    xs, gs = [0.5, -1.0, 0.0], [[0.3, -0.2, 0.0], [0.1, 0.4, 1e-30], [-0.5, 0.0, 2.0]]
    conv = replace(adam.OPTAX_ADAM, bias_correction_v=False)
    params, state = [[np.array(xs)]], OptState.empty([[np.array(xs)]])
    want, m, v = list(xs), [0.0] * 3, [0.0] * 3
    for t, grad in enumerate(gs, start=1):
        params, state = adam.step(params, [[np.array(grad)]], state, [{"lr": lr, "betas": (b1, b2), "eps": eps}], conv)
        for i, gi in enumerate(grad):
            m[i] = b1 * m[i] + (1 - b1) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            want[i] -= lr * (m[i] / (1 - b1 ** t)) / (math.sqrt(v[i]) + eps)
        assert close(params[0][0], want)


# --- torch NAdam -------------------------------------------------------------------------------

def nadam_by_hand(xs, grads, lr, b1, b2, eps, wd, psi, decoupled):
    """torch.optim.NAdam's documented algorithm, element by element."""
    x, m, v, prod = list(xs), [0.0] * len(xs), [0.0] * len(xs), 1.0
    out = []
    for t, grad in enumerate(grads, start=1):
        mu = b1 * (1 - 0.5 * 0.96 ** (t * psi))
        mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi))
        prod *= mu
        for i in range(len(x)):
            gi = grad[i]
            if decoupled:
                x[i] *= 1 - lr * wd
            else:
                gi += wd * x[i]
            m[i] = b1 * m[i] + (1 - b1) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            denom = math.sqrt(v[i] / (1 - b2 ** t)) + eps
            x[i] -= lr * (1 - mu) / (1 - prod) * gi / denom
            x[i] -= lr * mu_next / (1 - prod * mu_next) * m[i] / denom
        out.append((list(x), prod))
    return out


def nadam_grads(steps=20, n=5):
    rng = np.random.default_rng(7)
    grads = rng.standard_normal((steps, n))
    grads[:, 0] = 0.0      # an element that never gets a grad
    grads[::3, 1] = 1e-30  # tiny ones
    return grads


@pytest.mark.parametrize("decoupled", [False, True])
def test_torch_nadam_by_hand(decoupled):
    lr, b1, b2, eps, wd, psi = 0.01, 0.9, 0.999, 1e-8, 0.1, 4e-3
    xs, grads = [0.3, -1.2, 2.0, 0.0, -0.7], nadam_grads()
    conv = adam.TORCH_NADAMW if decoupled else adam.TORCH_NADAM
    hp = [{"lr": lr, "betas": (b1, b2), "eps": eps, "weight_decay": wd, "momentum_decay": psi}]
    params, state = [[np.array(xs)]], OptState.empty([[np.array(xs)]])
    for (want, prod), grad in zip(nadam_by_hand(xs, grads, lr, b1, b2, eps, wd, psi, decoupled), grads):
        params, state = adam.step(params, [[grad]], state, hp, conv)
        assert close(params[0][0], want)
        assert close(state.params[0][0]["mu_product"], prod)


@pytest.mark.parametrize("decoupled", [False, True])
def test_torch_nadam_matches_torch_in_float64(decoupled):
    torch = pytest.importorskip("torch")
    lr, b1, b2, eps, wd, psi = 0.01, 0.9, 0.999, 1e-8, 0.1, 4e-3
    xs, grads = np.array([0.3, -1.2, 2.0, 0.0, -0.7]), nadam_grads()
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # torch holds step and mu_product in the default dtype
    try:
        w = torch.nn.Parameter(torch.tensor(xs))
        opt = torch.optim.NAdam([w], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, momentum_decay=psi,
                                decoupled_weight_decay=decoupled, foreach=False)
        conv = adam.TORCH_NADAMW if decoupled else adam.TORCH_NADAM
        hp = [{"lr": lr, "betas": (b1, b2), "eps": eps, "weight_decay": wd, "momentum_decay": psi}]
        params, state = [[xs]], OptState.empty([[xs]])
        for grad in grads:
            w.grad = torch.tensor(grad)
            opt.step()
            params, state = adam.step(params, [[grad]], state, hp, conv)
            assert close(params[0][0], w.detach().numpy())
            assert close(state.params[0][0]["mu_product"], float(opt.state[w]["mu_product"]))
        assert set(state.params[0][0]) == set(opt.state[w])  # the same state keys
    finally:
        torch.set_default_dtype(old)


# --- LAMB's other forms ------------------------------------------------------------------------

def norm(xs):
    return math.sqrt(sum(x * x for x in xs))


def lamb_by_hand(xs, grads, hp, *, decay="decoupled_update", debias="moments", lower=0.0, upper=math.inf,
                 trust_eps=0.0, clip=None):
    """One tensor, trust ratio always on, no grad clipping: LAMB from its equations."""
    lr, (b1, b2), eps, wd = hp["lr"], hp["betas"], hp["eps"], hp["weight_decay"]
    x, m, v, out = list(xs), [0.0] * len(xs), [0.0] * len(xs), []
    for t, grad in enumerate(grads, start=1):
        if decay == "decoupled":
            x = [xi * (1 - lr * wd) for xi in x]
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, grad)]
        v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, grad)]
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        if debias == "moments":
            u, step = [(mi / bc1) / (math.sqrt(vi / bc2) + eps) for mi, vi in zip(m, v)], lr
        else:  # "step_size_bc1"
            u, step = [mi / (math.sqrt(vi) + eps) for mi, vi in zip(m, v)], lr / bc1
        if decay == "decoupled_update":
            u = [ui + wd * xi for ui, xi in zip(u, x)]
        w = min(max(norm(x), lower), upper)
        r = w / (norm(u) + trust_eps) if w != 0 and norm(u) != 0 else 1.0
        if clip is not None:
            r = min(r, clip)
        x = [xi - step * r * ui for xi, ui in zip(x, u)]
        out.append(list(x))
    return out


LAMB_HP = {"lr": 0.02, "betas": (0.9, 0.99), "eps": 1e-6, "weight_decay": 0.1}
LAMB_FORMS = {
    "decoupled": ({"decay": "decoupled"}, {}, {"decay": "decoupled"}),
    "step_size_bc1": ({"bias_correction": "step_size_bc1"}, {}, {"debias": "step_size_bc1"}),
    "phi_upper": ({}, {"norm_upper": 1.5}, {"upper": 1.5}),
    "phi_lower": ({}, {"norm_lower": 5.0}, {"lower": 5.0}),
    "trust_eps": ({}, {"trust_eps": 0.25}, {"trust_eps": 0.25}),
    "upper_clip": ({"clamp": True, "clamp_lower": False}, {"max_coeff": 0.4}, {"clip": 0.4}),
}


@pytest.mark.parametrize("form", sorted(LAMB_FORMS))
@pytest.mark.parametrize("start", ["random", "zero"])
def test_lamb_forms_by_hand(form, start):
    conv_kw, hp_kw, hand_kw = LAMB_FORMS[form]
    conv = replace(lamb.PAPER_LAMB, **conv_kw)
    rng = np.random.default_rng(3)
    xs = [0.0] * 6 if start == "zero" else list(rng.standard_normal(6))
    grads = rng.standard_normal((12, 6))
    grads[:, 0] = 0.0
    hp = {**LAMB_HP, **hp_kw}
    params, state = [[np.array(xs)]], OptState.empty([[np.array(xs)]])
    for want, grad in zip(lamb_by_hand(xs, grads, hp, **hand_kw), grads):
        params, state = lamb.step(params, [[grad]], state, [hp], conv)
        assert close(params[0][0], want)


def test_lamb_forms_are_distinct():
    """Each form moves the params differently from the paper's (the test above has power)."""
    rng = np.random.default_rng(3)
    xs, grads = list(rng.standard_normal(6)), rng.standard_normal((12, 6))
    base = lamb_by_hand(xs, grads, LAMB_HP)[-1]
    for form, (_, hp_kw, hand_kw) in LAMB_FORMS.items():
        assert not close(lamb_by_hand(xs, grads, {**LAMB_HP, **hp_kw}, **hand_kw)[-1], base), form


@pytest.mark.parametrize("rule, moves", [("off", True), ("zero_grads", False)])
def test_lamb_zero_max_grad_norm(rule, moves):
    """max_grad_norm = 0: no clipping ("off"), or apex's G/0 = inf divisor: grads become 0,
    so with m = v = 0 and no decay the params stay put."""
    conv = replace(lamb.APEX_LAMB, zero_max_grad_norm=rule)
    p, g = [[np.array([1.0, -2.0])]], [[np.array([0.5, 0.25])]]
    hp = [{"max_grad_norm": 0.0, "weight_decay": 0.0}]
    new, state = lamb.step(p, g, OptState.empty(p), hp, conv)
    assert (not np.array_equal(new[0][0], p[0][0])) == moves
    if not moves:
        assert np.array_equal(state.params[0][0]["exp_avg"], np.zeros(2))
    # a zero global norm divides by 1 under either rule: nothing to zero
    zero, _ = lamb.step(p, [[np.zeros(2)]], OptState.empty(p), hp, conv)
    assert np.array_equal(zero[0][0], p[0][0])


def test_lamb_norm_upper_must_not_be_below_lower():
    with pytest.raises(ValueError, match="norm_upper"):
        lamb.validate([{"norm_lower": 2.0, "norm_upper": 1.0}])


# --- Adagrad's zero-accumulator rule, by hand --------------------------------------------------

def test_adagrad_zero_accumulator_by_hand():
    """where(h > 0, g/sqrt(h + eps), 0): exactly zero where h = 0, including an
    underflowed g^2, and g/sqrt(h + eps) elsewhere."""
    lr = 0.1
    xs, grad = [1.0, 2.0, 3.0], [0.0, 1e-170, 0.5]
    hp = [{"lr": lr, "eps": 0.0}]
    new, _ = adagrad.step([[np.array(xs)]], [[np.array(grad)]], OptState.empty([[np.array(xs)]]), hp,
                          adagrad.OPTAX_ADAGRAD)
    assert new[0][0][0] == 1.0 and new[0][0][1] == 2.0
    assert close(new[0][0][2], 3.0 - lr * 0.5 / math.sqrt(0.25))
