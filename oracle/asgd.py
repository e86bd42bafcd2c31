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

    def __post_init__(self):
        check_counter(self.counter, self.counter_format)


TORCH_ASGD = ASGDConvention()

DEFAULTS = {"lr": 1e-2, "lambd": 1e-4, "alpha": 0.75, "t0": 1e6, "weight_decay": 0.0, "maximize": False}
# lambd*eta is the per-step decay p*(1 - lambd*eta), a decay coefficient like wd; alpha is the
# schedule's exponent and t0 the step averaging starts after: neither is held near 0 or 1
ROLES = {"lr": Role(STEP_SIZE), "lambd": Role(DECAY, "lambd"), "alpha": Role(NO_PRECISION_ROLE),
         "t0": Role(NO_PRECISION_ROLE), "weight_decay": Role(DECAY, "wd"), "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES)


def schedule(lr, lambd, alpha, t0, t) -> tuple:
    """(eta, mu) after step t: the next step's step size and averaging weight."""
    return np.float64(lr / math.pow(1.0 + lambd * lr * t, alpha)), np.float64(1.0 / max(1.0, t - t0))


def update(p, g, st, hp, t, conv: ASGDConvention):
    """One ASGD update of one param; returns (new p, new state entry)."""
    lr, lambd, alpha, t0, wd = held(hp, conv, "lr", "lambd", "alpha", "t0", "weight_decay")
    st = dict(st)
    eta, mu = st.get("eta", np.float64(lr)), st.get("mu", np.float64(1.0))
    g = add_l2(ascent(g, hp), p, wd)
    p = decay_decoupled(p, eta, lambd) - eta * g
    ax = st.get("ax", np.zeros_like(p))
    st["ax"] = ax + mu * (p - ax)
    st["eta"], st["mu"] = schedule(lr, lambd, alpha, t0, t)
    return p, st


def step(params, grads, state: OptState, hparams, conv: ASGDConvention = TORCH_ASGD,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv), conv.counter_format)


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
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter: exact up to 2**24 steps (torch); its saturation is judged "
                                    "by the long-horizon scenario", steps=300, probe={"lambd": 1.0}),
        "bfloat16": Form(DEVIATION, "a bfloat16 counter stops at 256: eta and mu frozen from there",
                         steps=300, probe={"lambd": 1.0}),
    },
}

SPECS = (OptimizerSpec(name="asgd", step=step, validate=validate, convention=TORCH_ASGD, state_keys=("ax",),
                       forms=FORMS, defaults=DEFAULTS, roles=ROLES, options=frozenset({"maximize"}),
                       counter_hparams=("lambd",),
                       summary="ASGD, averaged SGD with a decaying step size (torch.optim.ASGD)",
                       presets={"torch.asgd": TORCH_ASGD}),)
