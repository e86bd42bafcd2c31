"""Adadelta in float64: the specification.

Per element, for a param p with grad g, in this order (Zeiler 2012,
Algorithm 1, with a step size lr that the paper fixes at 1; torch.optim.Adadelta's
order of operations, _single_tensor_adadelta):

    g     <- -g                                if maximize
    g     <- g + wd*p                          L2 decay (torch; only when wd != 0)
    v     <- rho*v + (1-rho)*g^2               state square_avg, starts at 0
    std   <- sqrt(v + eps)                     RMS[g]_t
    delta <- sqrt(a + eps) / std * g           RMS[dx]_{t-1} / RMS[g]_t * g (a: the old acc_delta)
    a     <- rho*a + (1-rho)*delta^2           state acc_delta, starts at 0: the unscaled delta
                                               is accumulated, lr applies to the param only
    p     <- p - lr*delta

lr multiplies only the param's step, never the accumulated delta: torch,
tf.keras.optimizers.Adadelta and optax.adadelta (scale_by_adadelta, then the
learning rate) agree, and with lr = 1 this is the paper's rule (TF issue
#8528). torch keeps a per-param `step` counter that the update never reads.

torch's foreach path (_multi_tensor_adadelta) performs the same operations in
the same order; it differs from the forloop path in rounding only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import GradScaling, OptState, add_l2, ascent, check_counter, drive, ema_square, held
from .forms import EQUIVALENT, FP32_HPARAMS, Form, ref
from .hparams import validated
from .spec import DECAY, GUARD, NO_PRECISION_ROLE, SECOND_MOMENT_RATE, STEP_SIZE, OptimizerSpec, Role


@dataclass(frozen=True)
class AdadeltaConvention:
    """Defaults: torch.optim.Adadelta."""

    counter: str = "param"
    fp32_hparams: bool = False
    # how the (unread) counter is stored: torch's float32 tensor stops at 2**24
    counter_format: str = "exact"

    def __post_init__(self):
        check_counter(self.counter, self.counter_format)


TORCH_ADADELTA = AdadeltaConvention()

DEFAULTS = {"lr": 1.0, "rho": 0.9, "eps": 1e-6, "weight_decay": 0.0, "maximize": False}
# rho decays both running averages of squares (the grad's and the step's): a second-moment rate
ROLES = {"lr": Role(STEP_SIZE), "rho": Role(SECOND_MOMENT_RATE, "rho"), "eps": Role(GUARD),
         "weight_decay": Role(DECAY, "wd"), "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES)


def update(p, g, st, hp, conv: AdadeltaConvention):
    """One Adadelta update of one param; returns (new p, new state entry)."""
    lr, rho, eps, wd = held(hp, conv, "lr", "rho", "eps", "weight_decay")
    st = dict(st)
    g = add_l2(ascent(g, hp), p, wd)
    v = st["square_avg"] = ema_square(st.get("square_avg", np.zeros_like(p)), g, rho)
    a = st.get("acc_delta", np.zeros_like(p))
    delta = np.sqrt(a + eps) / np.sqrt(v + eps) * g
    st["acc_delta"] = ema_square(a, delta, rho)
    return p - lr * delta, st


def step(params, grads, state: OptState, hparams, conv: AdadeltaConvention = TORCH_ADADELTA,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], conv), conv.counter_format,
                 elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "counter": {
        "param": ref("a per-param counter that nothing reads (torch.optim.Adadelta)"),
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

SPECS = (OptimizerSpec(name="adadelta", step=step, validate=validate, convention=TORCH_ADADELTA,
                       state_keys=("square_avg", "acc_delta"), forms=FORMS, defaults=DEFAULTS, roles=ROLES,
                       options=frozenset({"maximize"}),
                       summary="Adadelta (Zeiler 2012; torch.optim.Adadelta)",
                       presets={"torch.adadelta": TORCH_ADADELTA},
                       complex_form="components"),)
