"""Adamax in float64: the specification.

Per element, for a param p with grad g at step t (t counts from 1), in this
order (Kingma & Ba 2015, Algorithm 2; torch.optim.Adamax's order of
operations, _single_tensor_adamax):

    g   <- -g                                  if maximize
    g   <- g + wd*p                            L2 decay (torch; only when wd != 0)
    m   <- b1*m + (1-b1)*g                     state exp_avg, starts at 0 (torch: lerp)
    u   <- max(b2*u, |g| + eps)                eps_mode="max"     (torch, optax scale_by_adamax)
           max(b2*u, |g|)                      eps_mode="outside" (the paper's u; eps then guards the
                                               division below: tf.keras.optimizers.Adamax, documented
                                               as m_t / (v_t + epsilon))
                                               state exp_inf, starts at 0
    d   <- u                                   eps_mode="max"
           u + eps                             eps_mode="outside"
    p   <- p - (lr/(1 - b1^t)) * (m/d)         (torch: addcdiv(m, u, value=-lr/bc1), bc1 in float64
                                               on the host)

The two eps forms agree wherever |g| dominates eps; they part where the grads
are near or below eps (eps_mode="max" floors u at eps, so an element whose
grads are all zero has u = eps, and m/u = 0). With eps = 0 the paper's rule
divides 0 by 0 on such an element.

torch's foreach path (_multi_tensor_adamax) performs the same operations in
the same order (lerp, b2*u, |g|, + eps, maximum, addcdiv); it differs from the
forloop path in rounding only. Its counter is a per-param float32 tensor
(counter_format, oracle.common.COUNTER_FORMATS). Under torch.compile the counter's value is that
tensor (_get_value), so 1 - b1^t and lr/bc1 (Tensor.__rdiv__: reciprocal times lr) are float32
tensor operations: bias_correction_precision="compute", Adam's option of the same name.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import (GradScaling, OptState, add_l2, ascent, bias_corrections, check_counter, drive, ema, held)
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, VARIANT, Form, ref
from .hparams import validated
from .spec import DECAY, FIRST_MOMENT_RATE, GUARD, NO_PRECISION_ROLE, SECOND_MOMENT_RATE, STEP_SIZE, OptimizerSpec, Role

EPS_MODES = ("max", "outside")


@dataclass(frozen=True)
class AdamaxConvention:
    """Defaults: torch.optim.Adamax."""

    eps_mode: str = "max"
    counter: str = "param"
    fp32_hparams: bool = False
    counter_format: str = "exact"
    # 1 - b1^t and lr/bc1: "float64" on the host, "compute" as array operations in the compute dtype
    bias_correction_precision: str = "float64"

    def __post_init__(self):
        if self.eps_mode not in EPS_MODES:
            raise ValueError(f"eps_mode must be one of {EPS_MODES}, got {self.eps_mode!r}")
        check_counter(self.counter, self.counter_format)
        if self.bias_correction_precision not in BC_PRECISIONS:
            raise ValueError(f"bias_correction_precision must be one of {BC_PRECISIONS}, "
                             f"got {self.bias_correction_precision!r}")


BC_PRECISIONS = ("float64", "compute")


TORCH_ADAMAX = AdamaxConvention()
# tf.keras.optimizers.Adamax: the paper's max, eps added to it in the division.
KERAS_ADAMAX = AdamaxConvention(eps_mode="outside")

DEFAULTS = {"lr": 2e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "maximize": False}
# beta2 decays the infinity norm, as Adam's beta2 its second moment (held alike: 1 - beta2 near 0)
ROLES = {"lr": Role(STEP_SIZE), "betas": (Role(FIRST_MOMENT_RATE, "beta1"), Role(SECOND_MOMENT_RATE, "beta2")),
         "eps": Role(GUARD), "weight_decay": Role(DECAY, "wd"), "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES)


def infinity_norm(u, g, b2, eps, eps_mode: str):
    """The new exp_inf: max(b2*u, |g| + eps), or the paper's max(b2*u, |g|)."""
    mag = np.abs(g) + eps if eps_mode == "max" else np.abs(g)
    return np.maximum(b2 * u, mag)


def update(p, g, st, hp, t, conv: AdamaxConvention):
    """One Adamax update of one param; returns (new p, new state entry)."""
    lr, eps, wd, (b1, b2) = held(hp, conv, "lr", "eps", "weight_decay", "betas")
    st = dict(st)
    g = add_l2(ascent(g, hp), p, wd)
    m = st["exp_avg"] = ema(st.get("exp_avg", np.zeros_like(p)), g, b1)
    u = st["exp_inf"] = infinity_norm(st.get("exp_inf", np.zeros_like(p)), g, b2, eps, conv.eps_mode)
    d = u if conv.eps_mode == "max" else u + eps
    if conv.bias_correction_precision == "compute":
        bc1 = 1.0 - b1 ** np.full_like(p, t, shape=())
        return p - (1.0 / bc1 * lr) * (m / d), st
    bc1, _ = bias_corrections(b1, b2, t, True)
    return p - (lr / bc1) * (m / d), st


def step(params, grads, state: OptState, hparams, conv: AdamaxConvention = TORCH_ADAMAX,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv), conv.counter_format,
                 elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "eps_mode": {
        "max": ref("eps inside the running max, max(b2*u, |g| + eps) (torch.optim.Adamax)"),
        "outside": Form(VARIANT, "Kingma & Ba 2015, Algorithm 2's u = max(b2*u, |g|) with eps added to it in the "
                                 "division: tf.keras.optimizers.Adamax, documented", probe={"eps": 1e-2}),
    },
    "counter": {
        "param": ref("one counter per param, advanced when it has a grad (torch.optim)"),
        "group": Form(VARIANT, "one counter per param group, advanced on every step (Keras' iterations)"),
        "none": Form(DEVIATION, "no step counter: the bias correction needs t"),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "hyperparameters held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
    "bias_correction_precision": {
        "float64": ref("1 - beta1^t and lr/bc1 on the host in float64 (torch's eager paths)"),
        "compute": Form(EQUIVALENT, "1 - beta1^t and lr/bc1 formed in the compute dtype from the float32 step "
                                    "tensor: the same value, other rounding (torch.compile'd Adamax)"),
    },
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter: exact up to 2**24 steps (torch); its saturation is judged "
                                    "by the long-horizon scenario", steps=300, probe={"betas": (0.999, 0.999)}),
        "bfloat16": Form(DEVIATION, "a bfloat16 counter stops at 256: the bias correction frozen from there",
                         steps=300, probe={"betas": (0.999, 0.999)}),
    },
}

SPECS = (OptimizerSpec(name="adamax", step=step, validate=validate, convention=TORCH_ADAMAX,
                       state_keys=("exp_avg", "exp_inf"), forms=FORMS, defaults=DEFAULTS, roles=ROLES,
                       options=frozenset({"maximize"}),
                       summary="Adamax, Adam with an infinity norm (torch.optim.Adamax)",
                       presets={"torch.adamax": TORCH_ADAMAX, "keras.adamax": KERAS_ADAMAX},
                       complex_form="components"),)
