"""RMSprop in float64: the specification.

Per element, for a param p with grad g, in this order (Tieleman & Hinton 2012,
Lecture 6.5; Graves 2013, eq. 38-40 for the centered form; torch.optim.RMSprop's
order of operations, _single_tensor_rmsprop):

    g    <- -g                                 if maximize
    g    <- g + wd*p                           L2 decay (torch; only when wd != 0)
    v    <- alpha*v + (1-alpha)*g^2            state square_avg, starts at 0
    centered (state grad_avg, starts at 0):
        ga   <- alpha*ga + (1-alpha)*g         (torch: grad_avg.lerp_(g, 1-alpha))
        var  <- v - ga^2
    otherwise var <- v
    avg  <- sqrt(var) + eps                    eps_mode="outside" (torch)
            sqrt(var + eps)                    eps_mode="inside"  (tf.keras.optimizers.RMSprop,
                                               TF 2 docs: lr*g/sqrt(ms + eps); "epsilon hat")
    momentum > 0 (state momentum_buffer, starts at 0):
        buf  <- mu*buf + g/avg
        p    <- p - lr*buf
    otherwise
        p    <- p - lr*(g/avg)

torch keeps a per-param `step` counter that the update never reads (counter
"param"); a rule with a group counter or none is the same update. The
momentum buffer exists only while momentum > 0 and grad_avg only when
centered, both created with square_avg on a param's first step.

torch's foreach path (_multi_tensor_rmsprop) performs the same operations in
the same order (the lerp of grad_avg, sqrt, + eps, addcdiv); it differs from
the forloop path in rounding only. In exact arithmetic var >= 0 (ga is a
weighted mean of the grads with weights summing to 1 - alpha^t <= 1); a
low-precision kernel can round it below 0, where sqrt gives NaN.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import GradScaling, OptState, add_l2, ascent, check_counter, drive, ema, ema_square, held
from .forms import EQUIVALENT, FP32_HPARAMS, VARIANT, Form, ref
from .hparams import validated
from .spec import (DECAY, GUARD, MOMENTUM_RATE, NO_PRECISION_ROLE, SECOND_MOMENT_RATE, STEP_SIZE, OptimizerSpec,
                   Role)

EPS_MODES = ("outside", "inside")


@dataclass(frozen=True)
class RMSpropConvention:
    """Defaults: torch.optim.RMSprop."""

    eps_mode: str = "outside"
    counter: str = "param"
    fp32_hparams: bool = False
    # how the (unread) counter is stored: torch's float32 tensor stops at 2**24 (oracle.common.COUNTER_FORMATS)
    counter_format: str = "exact"

    def __post_init__(self):
        if self.eps_mode not in EPS_MODES:
            raise ValueError(f"eps_mode must be one of {EPS_MODES}, got {self.eps_mode!r}")
        check_counter(self.counter, self.counter_format)


TORCH_RMSPROP = RMSpropConvention()
# tf.keras.optimizers.RMSprop: eps inside the root (its documented update, lr*g/sqrt(ms + eps)).
KERAS_RMSPROP = RMSpropConvention(eps_mode="inside")

DEFAULTS = {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8, "weight_decay": 0.0, "momentum": 0.0, "centered": False,
            "maximize": False}
ROLES = {"lr": Role(STEP_SIZE), "alpha": Role(SECOND_MOMENT_RATE, "alpha"), "eps": Role(GUARD),
         "weight_decay": Role(DECAY, "wd"), "momentum": Role(MOMENTUM_RATE, "mu"),
         "centered": Role(NO_PRECISION_ROLE), "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES)


def denominator(st, g, alpha, eps, centered: bool, eps_mode: str):
    """sqrt of the (centered) second moment with eps; updates grad_avg in `st` when centered."""
    var = st["square_avg"]
    if centered:
        ga = st["grad_avg"] = ema(st.get("grad_avg", np.zeros_like(g)), g, alpha)
        var = var - ga * ga
    return np.sqrt(var) + eps if eps_mode == "outside" else np.sqrt(var + eps)


def update(p, g, st, hp, conv: RMSpropConvention):
    """One RMSprop update of one param; returns (new p, new state entry)."""
    lr, alpha, eps, wd, mu = held(hp, conv, "lr", "alpha", "eps", "weight_decay", "momentum")
    st = dict(st)
    g = add_l2(ascent(g, hp), p, wd)
    st["square_avg"] = ema_square(st.get("square_avg", np.zeros_like(p)), g, alpha)
    avg = denominator(st, g, alpha, eps, hp["centered"], conv.eps_mode)
    if mu > 0:
        buf = st["momentum_buffer"] = mu * st.get("momentum_buffer", np.zeros_like(p)) + g / avg
        return p - lr * buf, st
    return p - lr * (g / avg), st


def step(params, grads, state: OptState, hparams, conv: RMSpropConvention = TORCH_RMSPROP,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], conv), conv.counter_format,
                 elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "eps_mode": {
        "outside": ref("Tieleman & Hinton 2012 with eps added to the root (torch.optim.RMSprop)"),
        "inside": Form(VARIANT, "eps inside the root, g/sqrt(v + eps): tf.keras.optimizers.RMSprop, documented",
                       probe={"eps": 1e-2}),
    },
    "counter": {
        "param": ref("a per-param counter that nothing reads (torch.optim.RMSprop)"),
        "group": Form(EQUIVALENT, "a per-group counter that nothing reads"),
        "none": Form(EQUIVALENT, "no counter: nothing reads one"),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "hyperparameters held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter (torch): it stops at 2**24, and nothing reads it"),
        "bfloat16": Form(EQUIVALENT, "a bfloat16 counter: it stops at 256, and nothing reads it"),
    },
}

SPECS = (OptimizerSpec(name="rmsprop", step=step, validate=validate, convention=TORCH_RMSPROP,
                       state_keys=("square_avg",), forms=FORMS, defaults=DEFAULTS, roles=ROLES,
                       options=frozenset({"centered", "maximize"}),
                       optional_state={"momentum_buffer": "momentum", "grad_avg": "centered"},
                       summary="RMSprop, plain or centered, with momentum (torch.optim.RMSprop)",
                       presets={"torch.rmsprop": TORCH_RMSPROP, "keras.rmsprop": KERAS_RMSPROP},
                       complex_form="components"),)
