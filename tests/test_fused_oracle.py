"""Fused optimizers (CPU path) against the float64 oracle, in lockstep.

Every step, the oracle starts from the fused optimizer's own state (the fp32
param or master, the moments, the group counters) converted to float64 and
takes one step with the same grads; the fused result must agree within a
budget of ULPs of the storage dtype at the operands' magnitude. Lockstep keeps
the unit meaningful over many steps: a free-running float64 run drifts from
any float32 implementation by accumulated rounding, not by bugs.

Each case runs several steps with weight decay on three groups: shapes of
rank 1-3, a param whose grad is always None, an empty group, and a
zero-numel tensor last.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

import oracle
from fused import FusedAdagrad, FusedAdam, FusedLAMB, convention_of
from fused.testing import as_f64, assert_ulps

# ULP budgets, in ULPs of float32 at the operand magnitude: for p, the
# largest of |p_old|, |p_new| and the update term's operand magnitude
# (update_scale); for moments, of the old and new moment and the grad term.
# - The effective grad g' = g*inv_scale (/clip) (+ wd*p) carries up to
#   1.5 ULPs (one rounding per operation).
# - m = b1*m + (1-b1)*g': two products and a sum on top: measured <= 2.2
#   (LAMB L2); budget 3.
# - v = b2*v + (1-b2)*g'^2, h = h + g'^2: squaring doubles g's relative
#   error: measured <= 3.9 (Adagrad L2, inexact inv_scale); budget 4.
# - p: decay factor (rounded once from double), product, difference, and
#   the update's own few roundings: measured <= 2.9; budget 4. (torch's
#   fused AdamW measures <= 5.0 on the same scale, measured on torch 2.13.)
FP32_BUDGET = {"param": 4.0, "exp_avg": 3.0, "exp_avg_sq": 4.0, "sum": 4.0}
# bf16 moments are computed in float32 and rounded once on store: 0.5 ULP of
# bf16, plus the float32 error above, which is ~2^-16 of a bf16 ULP.
BF16_MOMENT_BUDGET = 0.51


@dataclass(frozen=True)
class Case:
    desc: str
    cls: type
    kwargs: dict = field(default_factory=dict)


CASES = [
    Case("adamw", FusedAdam, dict(lr=1e-2, weight_decay=0.1)),
    Case("adam_l2", FusedAdam, dict(lr=1e-2, weight_decay=0.1, adam_w_mode=False, betas=(0.8, 0.99))),
    Case("adam_no_bias_correction", FusedAdam, dict(lr=1e-3, weight_decay=0.05, bias_correction=False, eps=1e-3)),
    # 0.125: an initial accumulator that bf16 `sum` storage holds exactly (the
    # oracle starts from the exact value).
    Case("adagrad_l2", FusedAdagrad, dict(lr=0.1, weight_decay=0.1, lr_decay=0.01, initial_accumulator_value=0.125)),
    Case("adagrad_w", FusedAdagrad, dict(lr=0.1, weight_decay=0.1, adagrad_w_mode=True, eps=1e-6)),
    # randn grads of ~1200 elements have a norm of ~35: max_grad_norm=1 clips every step.
    Case("lamb_clipped", FusedLAMB, dict(lr=1e-2, weight_decay=0.1, max_grad_norm=1.0)),
    Case("lamb_l2_unclipped", FusedLAMB, dict(lr=1e-2, weight_decay=0.1, adam_w_mode=False, max_grad_norm=0.0,
                                               grad_averaging=False)),
    Case("nvlamb_no_decay", FusedLAMB, dict(lr=1e-2, weight_decay=0.0, use_nvlamb=True, max_grad_norm=100.0)),
    Case("lamb_no_decay_no_ratio", FusedLAMB, dict(lr=1e-2, weight_decay=0.0, bias_correction=False)),
]

ORACLE_KEYS = ("lr", "betas", "eps", "weight_decay", "lr_decay", "initial_accumulator_value", "grad_averaging",
               "max_grad_norm")
SHAPES = [[(37, 5), (1000,), (3, 4, 5)], [], [(64,), (0,)]]
NO_GRAD = (0, 3)  # group 0 gets an extra param that never has a grad
STEPS = 4


def make_params(dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    groups = [[torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in shapes] for shapes in SHAPES]
    groups[NO_GRAD[0]].append(torch.randn(7, generator=gen).to(dtype).requires_grad_())
    return groups


def set_grads(groups, gen):
    for gi, ps in enumerate(groups):
        for i, p in enumerate(ps):
            p.grad = None if (gi, i) == NO_GRAD else torch.randn(p.shape, generator=gen).to(p.dtype)


def compute_copy(opt, p):
    """The float32 values the math updates: the master if there is one."""
    return opt.state[p].get("master_param", p)


def oracle_inputs(opt, groups):
    """Params, grads, state and hparams for oracle.step, from the fused optimizer now."""
    params = [[as_f64(compute_copy(opt, p)) for p in ps] for ps in groups]
    grads = [[None if p.grad is None else as_f64(p.grad) for p in ps] for ps in groups]
    state = oracle.OptState([int(g["step"]) for g in opt.param_groups],
                            [[{k: as_f64(v) for k, v in opt.state[p].items() if k != "master_param"}
                              for p in ps] for ps in groups])
    hparams = [{k: g[k] for k in ORACLE_KEYS if k in g} for g in opt.param_groups]
    if isinstance(opt, FusedLAMB):  # one optimizer-wide max_grad_norm, the constructor's
        for hp in hparams:
            hp["max_grad_norm"] = opt.defaults["max_grad_norm"]
    return params, grads, state, hparams


def moment_scale(key, old, new, grad, p, wd):
    """Operand magnitude of a moment update: the old and new values and the
    (decayed) grad term, squared for the second moment."""
    g = np.abs(grad) + wd * np.abs(p)
    term = g * g if key in ("exp_avg_sq", "sum") else g
    return np.maximum(np.maximum(np.abs(old), np.abs(new)), term)


def update_scale(name, conv, hp, t, p, g, old, new):
    """Operand magnitude of the update term subtracted from p.

    The update divides a moment (or the grad) by a denominator; where the
    moment cancels to near zero its absolute error is that of its operands,
    so the term is measured with the moment's operand magnitude in place of
    the moment. Without this, a param crossing zero reads as thousands of ULPs.
    """
    wd = hp["weight_decay"]
    l2 = conv.decay == "l2"
    g_op = np.abs(g) + (wd * np.abs(p) if l2 else 0.0)
    if name == "adagrad":
        clr = hp["lr"] / (1 + (t - 1) * hp.get("lr_decay", 0.0))
        decoupled = 0.0 if l2 else wd * np.abs(p)
        return clr * (g_op / (np.sqrt(new["sum"]) + hp["eps"]) + decoupled)
    m_op = np.maximum(np.maximum(np.abs(old.get("exp_avg", 0.0)), np.abs(new["exp_avg"])), g_op)
    b1, b2 = hp["betas"]
    if name == "lamb":
        bc1, bc2 = oracle.common.bias_corrections(b1, b2, t, conv.bias_correction != "none")
        u = (new["exp_avg"] / bc1) / (np.sqrt(new["exp_avg_sq"] / bc2) + hp["eps"])
        decoupled = 0.0 if l2 else wd * p
        ratio = oracle.lamb.trust_ratio(p, u + decoupled, hp, conv)
        return hp["lr"] * ratio * ((m_op / bc1) / (np.sqrt(new["exp_avg_sq"] / bc2) + hp["eps"])
                                   + np.abs(decoupled))
    bc1, bc2 = oracle.common.bias_corrections(b1, b2, t, conv.bias_correction)
    return hp["lr"] / bc1 * m_op / (np.sqrt(new["exp_avg_sq"]) / np.sqrt(bc2) + hp["eps"])


def effective_grads(opt, grads, inv_scale):
    """The grads the update sees: unscaled and, for LAMB, clipped (for error scales)."""
    factor = 1.0 if inv_scale is None else inv_scale
    if isinstance(opt, FusedLAMB):
        factor /= oracle.lamb.clip_factor(grads, factor, opt.defaults["max_grad_norm"])
    return [[None if g is None else g * factor for g in gs] for gs in grads]


def check_step(opt, groups, before, grads, expected_params, expected_state, moment_dtype, what):
    assert [int(g["step"]) for g in opt.param_groups] == expected_state.group_step, f"{what}: counters"
    name, conv = convention_of(opt)
    for gi, ps in enumerate(groups):
        hp = {**oracle.SPECS[name].defaults, **before[3][gi]}
        t = expected_state.group_step[gi]
        for i, p in enumerate(ps):
            where = f"{what} group {gi} param {i}"
            if p.grad is None:
                assert not opt.state[p], f"{where}: state created for a param without grad"
                assert np.array_equal(as_f64(p), before[0][gi][i]), f"{where}: param without grad changed"
                continue
            old_p, exp_p, g = before[0][gi][i], expected_params[gi][i], grads[gi][i]
            old_st, new_st = before[2].params[gi][i], expected_state.params[gi][i]
            scale = np.maximum(np.maximum(np.abs(old_p), np.abs(exp_p)),
                               update_scale(name, conv, hp, t, old_p, g, old_st, new_st))
            assert_ulps(compute_copy(opt, p), exp_p, scale, "float32", FP32_BUDGET["param"], f"{where} param")
            if "master_param" in opt.state[p]:
                model = opt.state[p]["master_param"].to(p.dtype)
                assert torch.equal(p.detach().view(torch.int16), model.view(torch.int16)), \
                    f"{where}: param is not its master rounded to {p.dtype}"
            for key, exp in new_st.items():
                old = old_st.get(key, np.zeros_like(exp))
                scale = moment_scale(key, old, exp, g, old_p, hp["weight_decay"])
                budget, fmt = ((FP32_BUDGET[key], "float32") if moment_dtype == torch.float32
                               else (BF16_MOMENT_BUDGET, "bfloat16"))
                assert_ulps(opt.state[p][key], exp, scale, fmt, budget, f"{where} {key}")


def run_lockstep(case: Case, dtype, moment_dtype=torch.float32, inv_scale=None, steps=STEPS):
    groups = make_params(dtype)
    opt = case.cls([{"params": ps} for ps in groups], moment_dtype=moment_dtype, **case.kwargs)
    name, conv = convention_of(opt)
    gen = torch.Generator().manual_seed(1)
    scaling = None if inv_scale is None else oracle.GradScaling(inv_scale=inv_scale)
    for t in range(steps):
        set_grads(groups, gen)
        if inv_scale is not None:  # scaled grads, as a GradScaler leaves them
            for p in (p for ps in groups for p in ps if p.grad is not None):
                p.grad = (p.grad.float() / inv_scale).to(dtype)
        before = oracle_inputs(opt, groups)
        expected_params, expected_state = oracle.step(name, *before[:3], before[3], conv, scaling)
        opt.step(inv_scale=inv_scale)
        grads = effective_grads(opt, before[1], inv_scale)
        check_step(opt, groups, before, grads, expected_params, expected_state, moment_dtype,
                   f"{case.desc} {dtype} step {t + 1}")
    return opt


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.desc)
def test_lockstep_with_oracle(case, dtype):
    run_lockstep(case, dtype)


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[5]], ids=lambda c: c.desc)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_bf16_moments(case, dtype):
    opt = run_lockstep(case, dtype, moment_dtype=torch.bfloat16)
    state = next(s for s in opt.state.values())
    assert all(v.dtype == torch.bfloat16 for k, v in state.items() if k != "master_param")


@pytest.mark.parametrize("inv_scale", [2.0 ** -10, 0.3], ids=["pow2", "inexact"])
@pytest.mark.parametrize("case", [CASES[0], CASES[4], CASES[5]], ids=lambda c: c.desc)
def test_inv_scale(case, inv_scale):
    run_lockstep(case, torch.float32, inv_scale=inv_scale)


def test_grads_are_not_modified():
    groups = make_params(torch.bfloat16)
    set_grads(groups, torch.Generator().manual_seed(3))
    grads = [p.grad.clone() for ps in groups for p in ps if p.grad is not None]
    for cls in (FusedAdam, FusedAdagrad, FusedLAMB):
        cls([{"params": ps} for ps in groups], weight_decay=0.1).step(inv_scale=0.5)
        after = [p.grad for ps in groups for p in ps if p.grad is not None]
        assert all(torch.equal(a, b) for a, b in zip(after, grads)), cls.__name__


def test_lamb_stage_sums_of_squares_match_oracle_clip():
    """Stage 1 alone: the kernel's global sum of squares gives the oracle's clip factor."""
    from fused import _ext

    gen = torch.Generator().manual_seed(5)
    grads = [torch.randn(s, generator=gen) * 3 for s in [(1000,), (70000,), (0,), (7, 7)]]
    inv_scale = 0.3
    sums = _ext.cpu().sumsq(grads, inv_scale)
    expected = [float(np.sum(np.square(as_f64(g) * inv_scale))) for g in grads]
    np.testing.assert_allclose(sums.numpy(), expected, rtol=1e-12)  # double accumulation of exact products
    clip = oracle.lamb.clip_factor([[as_f64(g) for g in grads]], inv_scale, 1.0)
    assert clip == pytest.approx(float(np.sqrt(sums.sum())), rel=1e-12)
