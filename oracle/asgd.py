"""ASGD (averaged SGD) in float64: the specification.

Per element, for a param p with grad g at step t (t counts from 1), in this
order (Polyak & Juditsky 1992 averaging, with the step-size schedule of Bottou's
"sgd" ASGD (Bottou 2012, "Stochastic Gradient Descent Tricks", section 5.3);
torch.optim.ASGD's order of operations, _single_tensor_asgd):

    g    <- -g                                 if maximize
    g    <- g + wd*p                           L2 decay (torch; only when wd != 0)
    p    <- p * (1 - lambd*eta)                eta: the state before this step (lr before the first)
    p    <- p - eta*g
    ax   <- ax + mu*(p - ax)                   mu: the state before this step (1 before the first);
                                               state ax starts at 0, so the first step copies p
    eta  <- lr / (1 + lambd*lr*t)^alpha        per-param scalar state, from the host in float64
    mu   <- 1 / max(1, t - t0)                 per-param scalar state

The step-size schedule is formed either on the host in float64 (torch's forloop path:
`_get_value(step)` is a Python float, so eta is one rounding of the exact value) or as
array operations in the compute dtype (`schedule_precision="compute"`: torch's foreach
path without capturable evaluates lr/((1 + lambd*lr*step)**alpha) with `step` its float32
tensor, five float32 operations; compiled and capturable code likewise). Same value in
exact arithmetic; under "compute" the derived tolerance counts each of those roundings.
torch's preset is "compute": its forloop's single rounding lies within that bound too, and
one preset covers both paths (and the compiled one).

torch's forloop path copies p into ax where mu == 1 instead of forming
ax + 1*(p - ax): the same value in exact arithmetic, written here in the one
form both paths share. Its foreach path (_multi_tensor_asgd) differs in
rounding only: it forms p - eta*(g + lambd*p) (the decay folded into the grad)
and ax + mu*(p - ax) everywhere. torch keeps step, eta and mu as 0-dim tensors
of its scalar dtype (float32 unless the default dtype is float64).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .common import GradScaling, OptState, add_l2, ascent, check_counter, decay_decoupled, drive, held
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, Form, ref
from .hparams import validated
from .spec import DECAY, NO_PRECISION_ROLE, STEP_SIZE, OptimizerSpec, Role


@dataclass(frozen=True)
class ASGDConvention:
    """Defaults: torch.optim.ASGD."""

    counter: str = "param"
    fp32_hparams: bool = False
    counter_format: str = "exact"
    # eta's schedule: "float64" on the host, "compute" as array operations in the compute dtype
    schedule_precision: str = "float64"

    def __post_init__(self):
        check_counter(self.counter, self.counter_format)
        if self.schedule_precision not in SCHEDULE_PRECISIONS:
            raise ValueError(f"schedule_precision must be one of {SCHEDULE_PRECISIONS}, "
                             f"got {self.schedule_precision!r}")


SCHEDULE_PRECISIONS = ("float64", "compute")
# torch.optim.ASGD: the foreach path forms eta in float32 tensor ops (the forloop's one rounding
# of the float64 value lies within the bound that counts them), see the module docstring
TORCH_ASGD = ASGDConvention(schedule_precision="compute")
REFERENCE_ASGD = ASGDConvention()

DEFAULTS = {"lr": 1e-2, "lambd": 1e-4, "alpha": 0.75, "t0": 1e6, "weight_decay": 0.0, "maximize": False}
# lambd*eta is the per-step decay p*(1 - lambd*eta), a decay coefficient like wd; alpha is the
# schedule's exponent and t0 the step averaging starts after: neither is held near 0 or 1
ROLES = {"lr": Role(STEP_SIZE), "lambd": Role(DECAY, "lambd"), "alpha": Role(NO_PRECISION_ROLE),
         "t0": Role(NO_PRECISION_ROLE), "weight_decay": Role(DECAY, "wd"), "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES)


def schedule(lr, lambd, alpha, t0, t, like=None, precision: str = "float64") -> tuple:
    """(eta, mu) after step t: the next step's step size and averaging weight. Under
    precision="compute" eta is formed as 0-dim array operations of `like`'s type, in torch
    foreach's order (an error-tracking array (oracle.compare.measuring.errmodel) then counts
    each rounding); mu is always one division of Python numbers (torch reads t as a float)."""
    mu = np.float64(1.0 / max(1.0, t - t0))
    if precision == "compute":
        # lambd*lr is a Python product, then one tensor op per operator; `lr / tensor` is
        # Tensor.__rdiv__, reciprocal() times lr: two roundings
        step = np.full_like(like, t, shape=())
        return 1.0 / (step * (lambd * lr) + 1.0) ** alpha * lr, mu
    return np.float64(lr / math.pow(1.0 + lambd * lr * t, alpha)), mu


def update(p, g, st, hp, t, conv: ASGDConvention):
    """One ASGD update of one param; returns (new p, new state entry)."""
    lr, lambd, alpha, t0, wd = held(hp, conv, "lr", "lambd", "alpha", "t0", "weight_decay")
    st = dict(st)
    eta, mu = st.get("eta", np.float64(lr)), st.get("mu", np.float64(1.0))
    g = add_l2(ascent(g, hp), p, wd)
    p = decay_decoupled(p, eta, lambd) - eta * g
    ax = st.get("ax", np.zeros_like(p))
    st["ax"] = ax + mu * (p - ax)
    st["eta"], st["mu"] = schedule(lr, lambd, alpha, t0, t, p, conv.schedule_precision)
    return p, st


def step(params, grads, state: OptState, hparams, conv: ASGDConvention = TORCH_ASGD,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv), conv.counter_format,
                 elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py). lambd = 1 makes the step-size schedule observable in 20 steps.
FORMS = {
    "counter": {
        "param": ref("one counter per param, advanced when it has a grad (torch.optim.ASGD)"),
        "group": Form(DEVIATION, "one counter per group: a param without a grad on some steps gets another "
                                 "eta and mu (the shared counter torch's foreach path used before PR #126375)",
                      probe={"lambd": 1.0}),
        "none": Form(DEVIATION, "no step counter: eta and mu need t", probe={"lambd": 1.0}),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "hyperparameters held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
    "schedule_precision": {
        "float64": ref("eta's schedule on the host in float64"),
        "compute": Form(EQUIVALENT, "eta's schedule formed in the compute dtype: the same value, other rounding "
                                    "(torch's foreach, compiled and capturable paths)"),
    },
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter: exact up to 2**24 steps (torch); its saturation is judged "
                                    "by the long-horizon scenario", steps=300, probe={"lambd": 1.0}),
        "bfloat16": Form(DEVIATION, "a bfloat16 counter stops at 256: eta and mu frozen from there",
                         steps=300, probe={"lambd": 1.0}),
    },
}

SPECS = (OptimizerSpec(name="asgd", step=step, validate=validate, convention=TORCH_ASGD, reference=REFERENCE_ASGD,
                       state_keys=("ax",),
                       forms=FORMS, defaults=DEFAULTS, roles=ROLES, options=frozenset({"maximize"}),
                       counter_hparams=("lambd",),
                       summary="ASGD, averaged SGD with a decaying step size (torch.optim.ASGD)",
                       presets={"torch.asgd": TORCH_ASGD},
                       complex_form="components"),)
