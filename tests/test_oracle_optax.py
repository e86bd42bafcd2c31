"""The oracle's optax presets against optax itself, both in float64.

50 steps of each form from the same params and grads; the grads include
exactly-zero elements, tiny ones (1e-30) and ones whose square underflows
(1e-170), their scale changes from step to step (so an amsgrad running max
is taken from an older step), and one tensor of params starts at exactly 0
(LAMB's zero-norm rule).

Agreement is measured per tensor and per step, normwise:
    rel = max|oracle - optax| / max(max|optax|, smallest normal float64)
and must be <= 1e-14 at every step. Both sides compute the same expressions
in float64 in nearly the same order; what differs is association (optax's
(1-b)*g + b*m against b*m + (1-b)*g is the same sum, XLA's pow against
math.pow, g*rsqrt(h) against g/sqrt(h)), a few ulps per step, far from
1e-14 relative after 50 steps; a wrong form (another amsgrad max, another
nesterov term) differs at 1e-3 and more (test_neighbouring_forms_differ).

optax runs eagerly, op by op (no jit): a jitted, fused kernel may contract
a*b + c into one fused multiply-add, which the oracle does not do.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

REASON = "the optax cross-check needs jax and optax: pip install '.[crosscheck]'"
jax = pytest.importorskip("jax", reason=REASON)
optax = pytest.importorskip("optax", reason=REASON)
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

from oracle import adagrad, adam, lamb  # noqa: E402
from oracle.common import OptState  # noqa: E402

STEPS = 50
LIMIT = 1e-14
SHAPES = ((4, 3), (5,), (2, 2))
LR, B1, B2, WD = 0.05, 0.9, 0.99, 0.1


def initial_params():
    rng = np.random.default_rng(1)
    params = [rng.standard_normal(s) for s in SHAPES]
    params[2] = np.zeros(SHAPES[2])  # a zero-norm tensor (LAMB: r = 1 on its first step)
    return params


def grads_at(k: int):
    """Step k's grads: random, scaled by 10**-(k % 4) so v shrinks on some steps,
    with an exactly-zero element, a tiny one and one whose square underflows."""
    rng = np.random.default_rng(100 + k)
    grads = [rng.standard_normal(s) * 10.0 ** -(k % 4) for s in SHAPES]
    grads[0].flat[0] = 0.0
    grads[0].flat[1] = 1e-30
    grads[1].flat[0] = -1e-170
    return grads


def relative(ours: np.ndarray, theirs: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(theirs))), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(ours - theirs))) / scale


def run_optax(tx):
    params = [jnp.asarray(p) for p in initial_params()]
    state = tx.init(params)
    out = []
    for k in range(1, STEPS + 1):
        updates, state = tx.update([jnp.asarray(g) for g in grads_at(k)], state, params)
        params = optax.apply_updates(params, updates)
        out.append([np.asarray(p) for p in params])
    return out


def run_oracle(module, conv, hp):
    params = [initial_params()]
    state = OptState.empty(params)
    out = []
    for k in range(1, STEPS + 1):
        params, state = module.step(params, [grads_at(k)], state, [hp], conv)
        out.append([np.array(p) for p in params[0]])
    return out


def worst(ours, theirs) -> float:
    return max(relative(a, b) for step_a, step_b in zip(ours, theirs) for a, b in zip(step_a, step_b))


def adam_hp(**kw):
    return {"lr": LR, "betas": (B1, B2), "eps": 1e-8, **kw}


def lamb_hp(**kw):
    return {"lr": LR, "betas": (B1, B2), "eps": 1e-6, "weight_decay": WD, **kw}


CASES = {
    "adam": (lambda: optax.adam(LR, B1, B2, eps=1e-8), adam, adam.OPTAX_ADAM, adam_hp()),
    "adam+l2": (lambda: optax.chain(optax.add_decayed_weights(WD), optax.adam(LR, B1, B2, eps=1e-8)),
                adam, adam.OPTAX_ADAM, adam_hp(weight_decay=WD)),
    "adam.eps_root": (lambda: optax.adam(LR, B1, B2, eps=1e-8, eps_root=1e-10),
                      adam, adam.OPTAX_ADAM, adam_hp(eps_root=1e-10)),
    "adam.eps_root_only": (lambda: optax.adam(LR, B1, B2, eps=0.0, eps_root=1e-16),
                           adam, adam.OPTAX_ADAM, adam_hp(eps=0.0, eps_root=1e-16)),
    "adamw": (lambda: optax.adamw(LR, B1, B2, eps=1e-8, weight_decay=WD),
              adam, adam.OPTAX_ADAMW, adam_hp(weight_decay=WD)),
    "adamw.eps_root": (lambda: optax.adamw(LR, B1, B2, eps=1e-8, eps_root=1e-12, weight_decay=WD),
                       adam, adam.OPTAX_ADAMW, adam_hp(weight_decay=WD, eps_root=1e-12)),
    "amsgrad": (lambda: optax.amsgrad(LR, B1, B2, eps=1e-8),
                adam, adam.OPTAX_AMSGRAD, adam_hp(amsgrad=True)),
    "amsgrad+l2.eps_root": (lambda: optax.chain(optax.add_decayed_weights(WD),
                                                optax.amsgrad(LR, B1, B2, eps=1e-8, eps_root=1e-10)),
                            adam, adam.OPTAX_AMSGRAD, adam_hp(amsgrad=True, weight_decay=WD, eps_root=1e-10)),
    "amsgrad.nu_uncorrected": (lambda: optax.amsgrad(LR, B1, B2, eps=1e-8, bias_correction_nu=False),
                               adam, adam.OPTAX_AMSGRAD_NU_UNCORRECTED, adam_hp(amsgrad=True)),
    "nadam": (lambda: optax.nadam(LR, B1, B2, eps=1e-8), adam, adam.OPTAX_NADAM, adam_hp()),
    "nadam+l2": (lambda: optax.chain(optax.add_decayed_weights(WD), optax.nadam(LR, B1, B2, eps=1e-8)),
                 adam, adam.OPTAX_NADAM, adam_hp(weight_decay=WD)),
    "nadamw": (lambda: optax.nadamw(LR, B1, B2, eps=1e-8, weight_decay=WD),
               adam, adam.OPTAX_NADAMW, adam_hp(weight_decay=WD)),
    "adagrad": (lambda: optax.adagrad(LR, initial_accumulator_value=0.1, eps=1e-7),
                adagrad, adagrad.OPTAX_ADAGRAD, {"lr": LR, "initial_accumulator_value": 0.1, "eps": 1e-7}),
    # eps = 0 and a zero accumulator: only the where(h > 0, ...) rule keeps the
    # zero and underflowing elements finite
    "adagrad.zero_accumulator": (lambda: optax.adagrad(LR, initial_accumulator_value=0.0, eps=0.0),
                                 adagrad, adagrad.OPTAX_ADAGRAD,
                                 {"lr": LR, "initial_accumulator_value": 0.0, "eps": 0.0}),
    "adagrad+l2": (lambda: optax.chain(optax.add_decayed_weights(WD),
                                       optax.adagrad(LR, initial_accumulator_value=0.0, eps=1e-10)),
                   adagrad, adagrad.OPTAX_ADAGRAD,
                   {"lr": LR, "initial_accumulator_value": 0.0, "eps": 1e-10, "weight_decay": WD}),
    "lamb": (lambda: optax.lamb(LR, B1, B2, eps=1e-6, weight_decay=WD), lamb, lamb.OPTAX_LAMB, lamb_hp()),
    "lamb.eps_root": (lambda: optax.lamb(LR, B1, B2, eps=1e-6, eps_root=1e-8, weight_decay=WD),
                      lamb, lamb.OPTAX_LAMB, lamb_hp(eps_root=1e-8)),
    "lamb.no_decay": (lambda: optax.lamb(LR, B1, B2, eps=1e-6, weight_decay=0.0),
                      lamb, lamb.OPTAX_LAMB, lamb_hp(weight_decay=0.0)),
}


@pytest.fixture(scope="session")  # not module: xdist may interleave other modules, re-running it
def optax_runs():
    """Each optax trajectory once (the eager runs are the slow part)."""
    return {}


def optax_run(cache, name):
    if name not in cache:
        cache[name] = run_optax(CASES[name][0]())
    return cache[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_oracle_preset_matches_optax(name, optax_runs):
    _, module, conv, hp = CASES[name]
    theirs = optax_run(optax_runs, name)
    ours = run_oracle(module, conv, hp)
    assert all(np.all(np.isfinite(p)) for step in theirs for p in step), "optax itself left the finite range"
    assert worst(ours, theirs) <= LIMIT


# The nearest other convention: the comparison above must tell it apart. (torch's
# decoupled p*(1 - lr*wd) is no neighbour of optax's adamw: p - lr*(u + wd*p) is
# the same value in exact arithmetic, the two differ by rounding only.)
NEIGHBOURS = {
    "amsgrad": (adam, replace(adam.OPTAX_AMSGRAD, amsgrad_form="max_raw")),
    "amsgrad.nu_uncorrected": (adam, adam.OPTAX_AMSGRAD),
    "nadam": (adam, adam.OPTAX_ADAM),
    "nadamw": (adam, adam.OPTAX_ADAMW),
    "adam.eps_root": (adam, adam.OPTAX_ADAM),
    "lamb": (lamb, lamb.APEX_LAMB),
}


@pytest.mark.parametrize("name", sorted(NEIGHBOURS))
def test_neighbouring_forms_differ(name, optax_runs):
    module, conv = NEIGHBOURS[name]
    hp = dict(CASES[name][3])
    if name == "adam.eps_root":
        hp["eps_root"] = 0.0  # the same form without eps_root
    with np.errstate(all="ignore"):
        ours = run_oracle(module, conv, hp)
    assert worst(ours, optax_run(optax_runs, name)) > 1e6 * LIMIT


def test_adagrad_divide_rule_is_not_optax():
    """Under eps = 0 the exactly-zero accumulator gives 0/0 with torch's rule."""
    _, module, conv, hp = CASES["adagrad.zero_accumulator"]
    with np.errstate(all="ignore"):
        ours = run_oracle(module, replace(conv, zero_accumulator="divide"), hp)
    assert np.isnan(ours[0][0].flat[0]) and np.all(np.isfinite(run_oracle(module, conv, hp)[0][0]))
