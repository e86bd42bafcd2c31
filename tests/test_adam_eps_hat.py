"""eps_mode="hat": Kingma & Ba's efficient form of Adam, and the Keras 3 AdamW preset built on it.

Kingma & Ba 2015, end of section 2: Algorithm 1's last three lines can be replaced by

    alpha_t = alpha * sqrt(1 - beta2^t) / (1 - beta1^t)
    theta_t = theta_{t-1} - alpha_t * m_t / (sqrt(v_t) + eps_hat)

The restatements below are written from that formula and from Keras 3's source
(keras/src/optimizers/adam.py Adam.update_step, base_optimizer.py _apply_weight_decay and
apply), in plain float64 NumPy, without oracle.adam's helpers.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from oracle import adam
from oracle.common import OptState

SHAPES = ((7,), (3, 4))


def grads_for(k: int, shapes=SHAPES, seed: int = 7):
    """Nonzero grads for step k (no exact zeros: eps = 0 must not divide 0 by 0)."""
    rng = np.random.default_rng(seed + 1000 * k)
    return [rng.normal(0.0, 1.0, s) + np.where(rng.random(s) < 0.5, 0.3, -0.3) for s in shapes]


def params0(shapes=SHAPES, seed: int = 3):
    rng = np.random.default_rng(seed)
    return [rng.normal(0.0, 1.0, s) for s in shapes]


def run_oracle(conv, hp, steps: int, none_at=None, hp_at=None):
    """The oracle's params after each step: one group; `none_at(k, i)` gives param i no grad at step k;
    `hp_at(k)` the group's hyperparameters at step k (default: hp every step)."""
    params = [params0()]
    state = OptState.empty(params)
    out = []
    for k in range(1, steps + 1):
        grads = [[None if none_at and none_at(k, i) else g for i, g in enumerate(grads_for(k))]]
        params, state = adam.step(params, grads, state, [hp_at(k) if hp_at else hp], conv)
        out.append([p.copy() for p in params[0]])
    return out


def rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# --- (1) the paper's efficient form ---------------------------------------------------------------

def kingma_ba_efficient(steps: int, lr, b1, b2, eps_hat, amsgrad=False):
    """Kingma & Ba 2015, Algorithm 1 with the end-of-section-2 reordering; with amsgrad the running
    max of v (Reddi et al. 2018) takes v's place in the denominator."""
    theta = params0()
    m = [np.zeros_like(x) for x in theta]
    v = [np.zeros_like(x) for x in theta]
    vmax = [np.zeros_like(x) for x in theta]
    out = []
    for t in range(1, steps + 1):
        alpha_t = lr * math.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t)
        for i, g in enumerate(grads_for(t)):
            m[i] = b1 * m[i] + (1.0 - b1) * g
            v[i] = b2 * v[i] + (1.0 - b2) * g * g
            vmax[i] = np.maximum(vmax[i], v[i])
            theta[i] = theta[i] - alpha_t * m[i] / (np.sqrt(vmax[i] if amsgrad else v[i]) + eps_hat)
        out.append([x.copy() for x in theta])
    return out


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("eps", [1e-8, 1e-3])
def test_hat_is_kingma_ba_efficient_form(eps, amsgrad):
    lr, b1, b2 = 1e-2, 0.9, 0.999
    conv = adam.AdamConvention(decay="l2", eps_mode="hat")
    got = run_oracle(conv, {"lr": lr, "betas": (b1, b2), "eps": eps, "amsgrad": amsgrad}, 20)
    want = kingma_ba_efficient(20, lr, b1, b2, eps, amsgrad)
    for k, (gs, ws) in enumerate(zip(got, want), 1):
        for g, w in zip(gs, ws):
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=0, err_msg=f"step {k}")


# --- (2), (3) against eps_mode="outside" ----------------------------------------------------------

FORMS = [dict(), dict(amsgrad=True), dict(amsgrad=True, form="max_corrected"), dict(momentum="nesterov"),
         dict(momentum="nadam")]


def convs(kw, eps_mode):
    return adam.AdamConvention(decay="decoupled", eps_mode=eps_mode, amsgrad_form=kw.get("form", "max_raw"),
                               momentum=kw.get("momentum", "plain"))


@pytest.mark.parametrize("kw", FORMS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_hat_equals_outside_at_eps_zero(kw):
    hp = {"lr": 1e-2, "eps": 0.0, "weight_decay": 0.1, "amsgrad": kw.get("amsgrad", False)}
    hat, outside = run_oracle(convs(kw, "hat"), hp, 20), run_oracle(convs(kw, "outside"), hp, 20)
    for gs, ws in zip(hat, outside):
        for g, w in zip(gs, ws):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)


@pytest.mark.parametrize("kw", FORMS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_hat_is_outside_with_eps_over_sqrt_bc2(kw):
    """The paper's identity, under every momentum and amsgrad form: hat with eps is outside with
    eps/sqrt(1 - b2^t) at step t (every param has a grad every step, so t is the step)."""
    b2, eps = 0.999, 1e-3
    hp = {"lr": 1e-2, "eps": eps, "weight_decay": 0.1, "amsgrad": kw.get("amsgrad", False)}
    hat = run_oracle(convs(kw, "hat"), hp, 20)
    outside = run_oracle(convs(kw, "outside"), hp, 20,
                         hp_at=lambda k: {**hp, "eps": eps / math.sqrt(1.0 - b2 ** k)})
    for gs, ws in zip(hat, outside):
        for g, w in zip(gs, ws):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)


def test_hat_differs_from_outside_observably_at_eps_1e_3():
    hp = {"lr": 1e-2, "eps": 1e-3}
    hat = run_oracle(adam.AdamConvention(eps_mode="hat"), hp, 20)
    outside = run_oracle(adam.AdamConvention(eps_mode="outside"), hp, 20)
    p0 = params0()
    # step 1: outside moves by lr*g/(|g| + eps), hat by lr*g/(|g| + eps/sqrt(1 - b2)): eps ~ 0.03 |g|
    step_hat, step_out = hat[0][0] - p0[0], outside[0][0] - p0[0]
    assert rel(step_hat, step_out) > 1e-2
    assert np.all(np.abs(step_hat) < np.abs(step_out))  # the larger effective eps: smaller steps
    assert max(rel(a, b) for a, b in zip(hat[-1], outside[-1])) > 1e-4


def test_hat_refuses_eps_root():
    with pytest.raises(ValueError, match="eps_root"):
        run_oracle(adam.AdamConvention(eps_mode="hat"), {"eps_root": 1e-8}, 1)


def test_hat_is_a_variant_of_both_specs():
    import oracle
    from oracle import forms as F
    for name in ("adam", "adamw"):
        form = F.form_of(oracle.SPECS[name], "eps_mode", "hat")
        assert form.kind == F.VARIANT and "Kingma & Ba" in form.cite
    assert F.kind(oracle.SPECS["adamw"], adam.KERAS_ADAMW) == F.VARIANT


# --- (4) Keras 3 AdamW ----------------------------------------------------------------------------

def keras_adamw(steps: int, lr, b1, b2, eps, wd, none_at=None, f32=lambda x: x, one_minus_rounded=True):
    """Keras 3 AdamW in float64, transcribed from its source (keras 3, master 2026-08):

    apply(grads, vars): drop the (grad, var) pairs whose grad is None; then
        _apply_weight_decay: var <- var - var*wd*lr                  (every remaining var, wd = 0 too)
        Adam.update_step per var, t = iterations + 1:
            alpha = lr*sqrt(1 - b2^t)/(1 - b1^t)
            m <- m + (g - m)*(1 - b1);  v <- v + (g^2 - v)*(1 - b2)
            var <- var - m*alpha/(sqrt(v) + eps)
        iterations += 1                                              (whether or not grads were None)

    `f32` rounds a hyperparameter as Keras holds it for a float32 variable (lr a float32 Variable,
    beta and wd cast to the variable's dtype, the Python floats eps and 1 - beta entering float32 ops).
    one_minus_rounded=False forms 1 - beta from the rounded beta instead (what fp32_hparams does).
    """
    theta = params0()
    m = [np.zeros_like(x) for x in theta]
    v = [np.zeros_like(x) for x in theta]
    lr_, wd_, eps_ = f32(lr), f32(wd), f32(eps)
    b1_, b2_ = f32(b1), f32(b2)
    c1, c2 = (f32(1.0 - b1), f32(1.0 - b2)) if one_minus_rounded else (1.0 - b1_, 1.0 - b2_)
    out, iterations = [], 0
    for k in range(1, steps + 1):
        pairs = [(i, g) for i, g in enumerate(grads_for(k)) if not (none_at and none_at(k, i))]
        for i, _ in pairs:
            theta[i] = theta[i] - theta[i] * wd_ * lr_
        t = iterations + 1
        alpha = lr_ * np.sqrt(1.0 - b2_ ** t) / (1.0 - b1_ ** t)
        for i, g in pairs:
            m[i] = m[i] + (g - m[i]) * c1
            v[i] = v[i] + (g * g - v[i]) * c2
            theta[i] = theta[i] - m[i] * alpha / (np.sqrt(v[i]) + eps_)
        iterations += 1
        out.append([x.copy() for x in theta])
    return out


def second_param_skips(k, i):
    return i == 1 and k % 3 == 0  # Keras's one counter still advances: t is the step, not its own count


def test_keras_adamw_preset_is_keras_update_rule():
    """Hyperparameters exact in float32, 1 - beta exact too: the preset's float32 rounding of the
    hyperparameters is then no rounding at all, and float64 must agree to roundoff."""
    lr, b1, b2, eps, wd = 2.0 ** -7, 0.875, 1.0 - 2.0 ** -10, 2.0 ** -10, 0.25
    hp = {"lr": lr, "betas": (b1, b2), "eps": eps, "weight_decay": wd}
    got = run_oracle(adam.KERAS_ADAMW, hp, 8, none_at=second_param_skips)
    want = keras_adamw(8, lr, b1, b2, eps, wd, none_at=second_param_skips)
    for k, (gs, ws) in enumerate(zip(got, want), 1):
        for g, w in zip(gs, ws):
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=0, err_msg=f"step {k}")
    # the per-param counter would not match (the skipped param's t lags), nor would "outside"
    for other in (adam.AdamConvention(decay="decoupled", eps_mode="hat", counter="param"),
                  adam.AdamConvention(decay="decoupled", eps_mode="outside", counter="group")):
        moved = run_oracle(other, hp, 8, none_at=second_param_skips)
        assert max(rel(a, b) for a, b in zip(moved[-1], want[-1])) > 1e-9, other


def test_keras_adamw_preset_with_keras_defaults():
    """Keras's defaults (epsilon 1e-7, weight_decay 0.004), rounded to float32 as Keras holds them for a
    float32 variable. Keras rounds 1 - beta itself (a Python double entering a float32 op); the preset,
    like every fp32_hparams form, forms 1 - round(beta), and no option says otherwise. With that one
    difference put back the two agree to float64 roundoff; with it the moves part by at most the
    relative gap between the two (2^-24 * beta2/(1 - beta2), about 6e-5 at beta2 = 0.999)."""
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-7, 0.004
    hp = {"lr": lr, "betas": (b1, b2), "eps": eps, "weight_decay": wd}
    f32 = lambda x: float(np.float32(x))  # noqa: E731
    got = run_oracle(adam.KERAS_ADAMW, hp, 8, none_at=second_param_skips)
    same = keras_adamw(8, lr, b1, b2, eps, wd, none_at=second_param_skips, f32=f32, one_minus_rounded=False)
    keras_ = keras_adamw(8, lr, b1, b2, eps, wd, none_at=second_param_skips, f32=f32)
    p0 = params0()
    bound = 2.0 ** -24 * b2 / (1.0 - b2)
    for gs, ss, ks in zip(got, same, keras_):
        for g, s_, k, p in zip(gs, ss, ks, p0):
            np.testing.assert_allclose(g, s_, rtol=1e-13, atol=0)
            assert rel(g - p, k - p) < bound


def test_keras_adamw_against_keras_itself():
    keras = pytest.importorskip("keras", reason="keras is not installed here (optional: "
                                                "the float64 transcription above is the check)")
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-7, 0.004
    opt = keras.optimizers.AdamW(learning_rate=lr, weight_decay=wd, beta_1=b1, beta_2=b2, epsilon=eps)
    variables = [keras.Variable(p.astype(np.float32), dtype="float32") for p in params0()]
    hp = {"lr": lr, "betas": (b1, b2), "eps": eps, "weight_decay": wd}
    got = run_oracle(adam.KERAS_ADAMW, hp, 5)
    for k in range(1, 6):
        opt.apply([keras.ops.convert_to_tensor(g.astype(np.float32)) for g in grads_for(k)], variables)
    p0 = params0()
    for var, g, p in zip(variables, got[-1], p0):
        have = np.asarray(keras.ops.convert_to_numpy(var), dtype=np.float64)
        assert rel(have - p, g - p) < 1e-4  # float32 arithmetic against float64
