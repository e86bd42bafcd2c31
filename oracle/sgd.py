"""SGD with momentum in float64: the specification.

Per element, for a param p with grad g, in this order (torch.optim.SGD's
algorithm and order of operations; Sutskever et al. 2013 for Nesterov):

    g   <- -g                                  if maximize
    g   <- g + wd*p                            decay="l2"          (torch; only when wd != 0)
    p   <- p * (1 - lr*wd)                     decay="decoupled"   (SGDW, the decay scaled by lr
                                               as in torch AdamW)
    when momentum != 0:
        buf <- g                               first step, first_step="copy"      (torch: no dampening
                                               on the first step)
        buf <- mu*buf + (1-dampening)*g        later steps; and the first step under
                                               first_step="dampened" (buf starts at 0, so
                                               buf = (1-dampening)*g)
        g   <- g + mu*buf                      nesterov (torch's form: the new buf)
        g   <- buf                             otherwise
    p   <- p - lr*g

"First step" means: the param has no momentum_buffer yet. torch keeps no
step counter for SGD, so the torch convention's counter is "none"; the
buffer's absence is the only state that marks the first step, and it exists
only while momentum != 0 (a group whose momentum is 0 creates no state).
Nothing here reads a counter: a convention with counter "param" or "group"
only keeps one, as kernels with a per-group counter do.

torch skips the L2 term when wd == 0 instead of adding 0*p: for an infinite
param 0*p is NaN, which would reach the grad and the buffer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import (GradScaling, OptState, add_l2, as_float64, ascent, check_counter, decay_decoupled, drive,
                     held)
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, VARIANT, Form, ref
from .hparams import validated
from .spec import DECAY, MOMENTUM_RATE, NO_PRECISION_ROLE, STEP_SIZE, OptimizerSpec, Role

DECAYS = ("l2", "decoupled")
FIRST_STEPS = ("copy", "dampened")


@dataclass(frozen=True)
class SGDConvention:
    """Defaults: torch.optim.SGD."""

    decay: str = "l2"
    first_step: str = "copy"
    counter: str = "none"
    fp32_hparams: bool = False

    def __post_init__(self):
        if self.decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, got {self.decay!r}")
        if self.first_step not in FIRST_STEPS:
            raise ValueError(f"first_step must be one of {FIRST_STEPS}, got {self.first_step!r}")
        check_counter(self.counter)


TORCH_SGD = SGDConvention()
# The buffer as an exponential moving average started at zero: dampening
# applies from the first step.
ZERO_BUFFER_SGD = SGDConvention(first_step="dampened")
DECOUPLED_SGD = SGDConvention(decay="decoupled")

DEFAULTS = {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False,
            "maximize": False}
# dampening weighs the grad by (1 - dampening) after the first step (not yet read as a hazard); any finite
# number, as torch takes any (NaN refused here)
ROLES = {"lr": Role(STEP_SIZE), "momentum": Role(MOMENTUM_RATE), "weight_decay": Role(DECAY, "wd"),
         "dampening": Role(NO_PRECISION_ROLE, low=None), "nesterov": Role(NO_PRECISION_ROLE),
         "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and check like torch's constructor; ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES, check_nesterov)


def check_nesterov(g: int, hp: dict) -> None:
    """torch's rule, shared with fused.sgd: nesterov needs momentum and no dampening."""
    if hp["nesterov"] and (hp["momentum"] <= 0 or hp["dampening"] != 0):
        raise ValueError(f"group {g}: nesterov requires momentum > 0 and dampening == 0, got momentum="
                         f"{hp['momentum']!r}, dampening={hp['dampening']!r}")


def momentum_buffer(p, g, st, mu, dampening, conv: SGDConvention):
    """The new buffer from the decayed grad g."""
    if "momentum_buffer" not in st and conv.first_step == "copy":
        return as_float64(g, copy=True)  # a copy: g may be the caller's grad array
    buf = st.get("momentum_buffer", np.zeros_like(p))
    return mu * buf + (1.0 - dampening) * g


def update(p, g, st, hp, conv: SGDConvention):
    """One SGD update of one param; returns (new p, new state entry)."""
    lr, mu, dampening, wd = held(hp, conv, "lr", "momentum", "dampening", "weight_decay")
    st = dict(st)
    g = ascent(g, hp)
    if conv.decay == "l2":
        g = add_l2(g, p, wd)
    elif conv.decay == "decoupled":
        p = decay_decoupled(p, lr, wd)
    if mu != 0:
        buf = st["momentum_buffer"] = momentum_buffer(p, g, st, mu, dampening, conv)
        g = g + mu * buf if hp["nesterov"] else buf
    return p - lr * g, st


def step(params, grads, state: OptState, hparams, conv: SGDConvention = TORCH_SGD,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], conv), elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "decay": {
        "l2": ref("SGD with L2 regularisation in the gradient (torch.optim.SGD)"),
        "decoupled": Form(VARIANT, "decoupled decay p*(1 - lr*wd): SGDW, Loshchilov & Hutter 2019, Algorithm 1"),
    },
    "first_step": {
        "copy": ref("the buffer starts as the first grad, undampened (torch.optim.SGD; Sutskever et al. 2013)"),
        "dampened": Form(DEVIATION, "the buffer starts at 0 and the first grad is dampened: the first step is "
                                    "(1 - dampening) times too small (mlx #440 before its fix)",
                         probe={"dampening": 0.5}),
    },
    "counter": {
        "none": ref("no counter: nothing reads one"),
        "param": Form(EQUIVALENT, "a per-param counter that nothing reads"),
        "group": Form(EQUIVALENT, "a per-group counter that nothing reads (our fused kernels)"),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "hyperparameters held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
}

SPECS = (OptimizerSpec(name="sgd", step=step, validate=validate, convention=TORCH_SGD, state_keys=(), forms=FORMS,
                       defaults=DEFAULTS, roles=ROLES, options=frozenset({"dampening", "nesterov", "maximize"}),
                       optional_state={"momentum_buffer": "momentum"},
                       summary="SGD with momentum (torch.optim.SGD)",
                       presets={"torch.sgd": TORCH_SGD, "decoupled.sgd": DECOUPLED_SGD},
                       complex_form="components"),)
