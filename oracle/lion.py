"""Lion in float64: the specification.

Per element, for a param p with grad g (Chen et al. 2023, "Symbolic Discovery of
Optimization Algorithms", Program 1 / Algorithm 2), in this order:

    g <- -g                                    if maximize
    c <- b1*m + (1-b1)*g                       the update's interpolation
    p <- p * (1 - lr*wd)                       decoupled decay, applied first
    p <- p - lr*sign(c)
    m <- b2*m + (1-b2)*g                       the momentum, with the raw g (not c)

The paper writes the decay into the update, p - lr*(sign(c) + wd*p), which is the
same in exact arithmetic; the decay-first order is the one of the PyTorch code in
google/automl, lucidrains/lion-pytorch and DeepSpeed's CPU Lion (read), so that is
the order of operations a float32 kernel is held to here.

m (state "exp_avg") starts at 0. sign(0) is the one legitimate choice:
    sign_zero="zero"       sign(0) = 0: an element whose c is exactly 0 only decays
                           (torch.sign, jnp.sign, np.sign; the reference implementations)
    sign_zero="copysign"   sign(c) = copysign(1, c): +0 -> +1, -0 -> -1 (a kernel that builds
                           -lr*sign(c) as copysign(lr, c), as DeepSpeed's CPU Lion does (read))
A NaN c gives NaN under "zero" (np.sign; torch.sign gives 0 there, which would hide a NaN
moment) and +-1 by its sign bit under "copysign".

Nothing in the update reads a step counter. The reference implementations keep none
(counter="none", the default); DeepSpeed's CPU Lion keeps state["step"] per param
("param"), our fused kernels one per group ("group").

Defaults lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0: google/automl lion_pytorch.py,
lucidrains/lion-pytorch and pytorch-optimizer's Lion, as read from their sources
(DeepSpeedCPULion defaults differ: lr=1e-3, betas=(0.9, 0.999)).

sign() is discontinuous: an element whose c is within rounding of 0 may take either
sign in a lower-precision kernel. The update is written with NumPy ufuncs only
(np.sign, np.copysign), so an error-carrying array type can pass through and say
where that is.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import (GradScaling, OptState, ascent, check_counter, decay_decoupled, drive, held)
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, VARIANT, Form, ref
from .hparams import validated
from .spec import DECAY, FIRST_MOMENT_RATE, INTERPOLATION, NO_PRECISION_ROLE, STEP_SIZE, OptimizerSpec, Role

SIGN_ZEROS = ("zero", "copysign")


@dataclass(frozen=True)
class LionConvention:
    """Defaults: the paper's reference implementation (google/automl, lucidrains)."""

    sign_zero: str = "zero"
    counter: str = "none"
    fp32_hparams: bool = False

    def __post_init__(self):
        if self.sign_zero not in SIGN_ZEROS:
            raise ValueError(f"sign_zero must be one of {SIGN_ZEROS}, got {self.sign_zero!r}")
        check_counter(self.counter)


REFERENCE_LION = LionConvention()
COPYSIGN_LION = LionConvention(sign_zero="copysign")
# DeepSpeedCPULion as read: copysign, a per-param counter (unused by the math), float32 hyperparameters.
DEEPSPEED_LION = LionConvention(sign_zero="copysign", counter="param", fp32_hparams=True)

DEFAULTS = {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 0.0, "maximize": False}
# beta1 weighs the momentum against the grad in the update's sign; beta2 is the momentum's own rate
ROLES = {"lr": Role(STEP_SIZE), "betas": (Role(INTERPOLATION, "beta1"), Role(FIRST_MOMENT_RATE, "beta2")),
         "weight_decay": Role(DECAY, "wd"), "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES)


def interpolate(m, g, beta):
    """beta*m + (1-beta)*g: the update direction (beta1) and the new momentum (beta2)."""
    return beta * m + (1.0 - beta) * g


def sign(c, sign_zero: str):
    return np.sign(c) if sign_zero == "zero" else np.copysign(1.0, c)


def update(p, g, st, hp, conv: LionConvention):
    """One Lion update of one param; returns (new p, new state entry)."""
    lr, wd, (b1, b2) = held(hp, conv, "lr", "weight_decay", "betas")
    st = dict(st)
    m = st.get("exp_avg", np.zeros_like(p))
    g = ascent(g, hp)
    c = interpolate(m, g, b1)
    p = decay_decoupled(p, lr, wd)
    p = p - lr * sign(c, conv.sign_zero)
    st["exp_avg"] = interpolate(m, g, b2)
    return p, st


def step(params, grads, state: OptState, hparams, conv: LionConvention = REFERENCE_LION,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], conv), elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "sign_zero": {
        "zero": ref("Chen et al. 2023, Program 1: sign(0) = 0 (jnp.sign; google/automl, lion-pytorch)"),
        "copysign": Form(DEVIATION, "sign(0) = +-1: an element whose interpolation is exactly 0 (no grad, no "
                                    "momentum yet) moves by lr every step (DeepSpeed's CPU Lion)"),
    },
    "counter": {
        "none": ref("no counter: nothing reads one (the reference implementations)"),
        "param": Form(EQUIVALENT, "a per-param counter that nothing reads (DeepSpeed's CPU Lion)"),
        "group": Form(EQUIVALENT, "a per-group counter that nothing reads (our fused kernels)"),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "hyperparameters held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
}

SPECS = (OptimizerSpec(name="lion", step=step, validate=validate, convention=REFERENCE_LION, forms=FORMS,
                       state_keys=("exp_avg",), defaults=DEFAULTS, roles=ROLES, options=frozenset({"maximize"}),
                       summary="Lion, sign of an interpolated momentum (Chen et al. 2023)",
                       presets={"reference.lion": REFERENCE_LION, "deepspeed.cpu_lion": DEEPSPEED_LION}),)
