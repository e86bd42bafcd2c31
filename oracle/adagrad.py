"""Adagrad in float64: the specification.

Per element, for a param p with grad g at step t (t counts from 1), in this
order (Duchi et al. 2011; torch.optim.Adagrad's order of operations):

    g   <- -g                                  if maximize
    g   <- g + wd*p                            decay="l2"       (torch); at wd == 0 only
                                               with zero_decay="add" (apex; torch skips it)
    clr <- lr / (1 + (t-1)*lr_decay)
    h   <- h + g^2                             h starts at initial_accumulator_value
           h + (g + wd*p)^2                    decay="accumulator" (the decay enters the
                                               accumulator only, as DeepSpeedCPUAdagrad was
                                               read in docs/conventions.md; its
                                               0.19.8 kernel is in fact "l2", see
                                               oracle/compare/targets/deepspeed.py)
    std <- sqrt(h) + eps                       eps_mode="outside"  (torch, apex, DeepSpeed)
           sqrt(h + eps)                       eps_mode="inside"   (optax: rsqrt(h + eps))
    q   <- g/std                               zero_accumulator="divide" (torch, apex, DeepSpeed)
           g/std where h > 0, else 0           zero_accumulator="zero"   (optax scale_by_rss:
                                               where(h > 0, rsqrt(h + eps), 0) * g)
    p   <- p - clr * q                         decay "l2" and "accumulator" (raw g in the numerator)
    p   <- p - clr * (q + wd*p)                decay="decoupled"   (apex adagrad_w_mode)

The two zero_accumulator rules differ only where h = 0 exactly: there g = 0
too unless g^2 underflowed (|g| below about 1e-162 in float64), so "divide"
gives 0/std = 0 for eps > 0 but g/sqrt(eps) for an underflowed g, and 0/0 =
NaN for eps = 0; "zero" gives 0 in every case.

torch creates `sum` (and its counter) for every param in __init__; that is a
state-schema matter for the harness. Here a param's accumulator is created
on its first step, equal to what an eager one would hold then.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import (ZERO_DECAYS, GradScaling, OptState, ascent, check_counter, drive, held, l2_applies)
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, VARIANT, Form, ref
from .hparams import validated
from .spec import (
    DECAY, GUARD, INITIAL_ACCUMULATOR, NO_PRECISION_ROLE, STEP_SIZE, STEP_SIZE_DECAY, OptimizerSpec, Role)

DECAYS = ("l2", "decoupled", "accumulator")
EPS_MODES = ("outside", "inside")
ZERO_ACCUMULATORS = ("divide", "zero")


@dataclass(frozen=True)
class AdagradConvention:
    """Defaults: torch.optim.Adagrad."""

    decay: str = "l2"
    eps_mode: str = "outside"
    counter: str = "param"
    fp32_hparams: bool = False
    zero_accumulator: str = "divide"
    counter_format: str = "exact"
    # decay "l2" or "accumulator" at weight_decay == 0: "skip" the term or "add" 0*p
    # (oracle.common.ZERO_DECAYS; they differ only for an infinite or NaN param).
    zero_decay: str = "skip"

    def __post_init__(self):
        for name, allowed in (("decay", DECAYS), ("eps_mode", EPS_MODES), ("zero_accumulator", ZERO_ACCUMULATORS),
                              ("zero_decay", ZERO_DECAYS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        check_counter(self.counter, self.counter_format)


TORCH_ADAGRAD = AdagradConvention()
# optax.adagrad 0.2.8 (scale_by_rss + scale_by_learning_rate): no lr decay and no
# weight decay of its own (chain add_decayed_weights first: decay="l2", adding wd*p whatever wd is).
OPTAX_ADAGRAD = AdagradConvention(eps_mode="inside", zero_accumulator="zero", zero_decay="add")
ACCUMULATOR_DECAY_ADAGRAD = AdagradConvention(decay="accumulator")
# DeepSpeedCPUAdagrad 0.19.8 as measured: torch's L2 form, hyperparameters held as float32.
DEEPSPEED_ADAGRAD = AdagradConvention(decay="l2", fp32_hparams=True)

DEFAULTS = {"lr": 1e-2, "lr_decay": 0.0, "weight_decay": 0.0, "initial_accumulator_value": 0.0,
            "eps": 1e-10, "maximize": False}
ROLES = {"lr": Role(STEP_SIZE), "lr_decay": Role(STEP_SIZE_DECAY), "weight_decay": Role(DECAY, "wd"),
         "initial_accumulator_value": Role(INITIAL_ACCUMULATOR), "eps": Role(GUARD),
         "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES)


def update(p, g, st, hp, t, conv: AdagradConvention):
    """One Adagrad update of one param; returns (new p, new state entry)."""
    lr, eps, wd, lr_decay, init = held(hp, conv, "lr", "eps", "weight_decay", "lr_decay", "initial_accumulator_value")
    st = dict(st)
    h = st.get("sum", np.full_like(p, init))
    g = ascent(g, hp)
    l2 = l2_applies(wd, conv.zero_decay)
    if conv.decay == "l2" and l2:
        g = g + wd * p
    clr = lr / (1.0 + (t - 1) * lr_decay)
    acc_g = g + wd * p if conv.decay == "accumulator" and l2 else g
    h = st["sum"] = h + acc_g * acc_g
    std = np.sqrt(h) + eps if conv.eps_mode == "outside" else np.sqrt(h + eps)
    u = scaled(g, h, std, conv.zero_accumulator)
    if conv.decay == "decoupled":
        u = u + wd * p
    return p - clr * u, st


def scaled(g, h, std, zero_accumulator: str):
    """g/std, or optax's rule: 0 where the accumulator is exactly 0."""
    if zero_accumulator == "divide":
        return g / std
    with np.errstate(divide="ignore", invalid="ignore"):  # the branch np.where discards
        return np.where(h > 0, g / std, 0.0)


def step(params, grads, state: OptState, hparams, conv: AdagradConvention = TORCH_ADAGRAD,
         scaling: GradScaling | None = None):
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv), conv.counter_format,
                 elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "decay": {
        "l2": ref("Duchi et al. 2011 with L2 regularisation in the gradient (torch.optim.Adagrad)"),
        "decoupled": Form(VARIANT, "decoupled decay added to the update: apex FusedAdagrad's documented "
                                   "adagrad_w_mode=True"),
        "accumulator": Form(DEVIATION, "the decayed grad enters the accumulator only, the raw grad the update"),
    },
    "eps_mode": {
        "outside": ref("Duchi et al. 2011: delta added to the root of the accumulator (torch)"),
        "inside": Form(VARIANT, "eps inside the root, rsqrt(h + eps): optax.adagrad (scale_by_rss), documented",
                       probe={"eps": 1e-2}),
    },
    "counter": {
        "param": ref("one counter per param (torch.optim)"),
        "group": Form(VARIANT, "one counter per param group, advanced on every step (apex, our fused kernels)",
                      probe={"lr_decay": 0.05}),
        "none": Form(DEVIATION, "no step counter: lr_decay needs t", probe={"lr_decay": 0.05}),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "hyperparameters held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
    "zero_accumulator": {
        "divide": ref("g/(sqrt(h) + eps) everywhere"),
        "zero": Form(EQUIVALENT, "0 where h == 0: there g == 0 too (unless g*g underflowed), so the same update "
                                 "(optax scale_by_rss)"),
    },
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter: exact up to 2**24 steps; its saturation is judged by the "
                                    "long-horizon scenario", steps=300, probe={"lr_decay": 0.05}),
        "bfloat16": Form(DEVIATION, "a bfloat16 counter: it stops at 256", steps=300, probe={"lr_decay": 0.05}),
    },
    "zero_decay": {
        "skip": ref("the L2 term left out at weight_decay == 0 (torch)"),
        "add": Form(EQUIVALENT, "0*p added at weight_decay == 0: the same for every finite param (apex, optax)",
                    probe={"weight_decay": 0.0}),
    },
}

SPECS = (OptimizerSpec(name="adagrad", step=step, validate=validate, convention=TORCH_ADAGRAD, state_keys=("sum",), defaults=DEFAULTS, forms=FORMS, roles=ROLES,
                       options=frozenset({"lr_decay", "initial_accumulator_value", "maximize"}),
                       eager_state={"sum": "initial_accumulator_value"}, counter_hparams=("lr_decay",),
                       summary="Adagrad (torch.optim.Adagrad)",
                       presets={"torch.adagrad": TORCH_ADAGRAD, "optax.adagrad": OPTAX_ADAGRAD,
                                "deepspeed.cpu_adagrad": DEEPSPEED_ADAGRAD},
                       complex_form="components"),)
