"""Rprop in float64: the specification (torch.optim.Rprop).

Per element, for a param p with grad g, in torch's order of operations (torch/optim/rprop.py,
_single_tensor_rprop; the iRprop- of Igel & Huesken 2000, "Improving the Rprop Learning Algorithm",
on Riedmiller & Braun 1993). State: prev (the previous grad as used, 0 before the first step) and
step_size (each element's own step, lr before the first step: torch fills it with the group's lr
when the state is made, so a later change of lr has no effect):

    g   <- -g                                  if maximize
    s    = sign(g * prev)
    eta  = etaplus where s > 0, etaminus where s < 0, 1 where s == 0
    step_size <- min(max(step_size * eta, step_size_min), step_size_max)   (torch's clamp_)
    g   <- 0 where s < 0                       form="irprop-" (torch: where eta == etaminus, the same
                                               elements since etaminus < 1 < etaplus); form="rprop-"
                                               keeps g (Igel & Huesken 2000, Rprop-)
    p   <- p - sign(g) * step_size
    prev <- g

No hyperparameter enters arithmetic but through step_size: lr (its first value) and the etas are
held in the param's format (torch fills step_size with lr and writes etaplus/etaminus into a tensor of
the grad's dtype: oracle.common.filled), the bounds in the compute dtype. The signs are exact
where g*prev does not underflow. Nothing reads the step counter torch keeps per param.
The foreach path computes sign(g*prev) and negates it under maximize: the same signs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import GradScaling, OptState, ascent, check_counter, drive, held, filled
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, Form, ref
from .hparams import check_range, validated
from .spec import NO_PRECISION_ROLE, STEP_SIZE, OptimizerSpec, Role

FORMS_ = ("irprop-", "rprop-")


@dataclass(frozen=True)
class RpropConvention:
    """Defaults: torch.optim.Rprop."""

    form: str = "irprop-"
    counter: str = "param"
    fp32_hparams: bool = False
    # torch keeps state['step'] as a float32 tensor: it stops at 2**24 (the long_horizon scenario
    # checks the counter's format even though the update never reads it)
    counter_format: str = "exact"

    def __post_init__(self):
        if self.form not in FORMS_:
            raise ValueError(f"form must be one of {FORMS_}, got {self.form!r}")
        check_counter(self.counter, self.counter_format)


TORCH_RPROP = RpropConvention()
RPROP_MINUS = RpropConvention(form="rprop-")

DEFAULTS = {"lr": 1e-2, "etas": (0.5, 1.2), "step_sizes": (1e-6, 50.0), "maximize": False}
# etas scale the per-element step (a factor, not a decay rate held near 1); step_sizes are clamp bounds
ROLES = {"lr": Role(STEP_SIZE),
         "etas": (Role(NO_PRECISION_ROLE, "etaminus"), Role(NO_PRECISION_ROLE, "etaplus")),
         "step_sizes": (Role(NO_PRECISION_ROLE, "step_size_min"), Role(NO_PRECISION_ROLE, "step_size_max")),
         "maximize": Role(NO_PRECISION_ROLE)}


def check_etas_and_bounds(g: int, hp: dict) -> None:
    """torch's rule 0 < etaminus < 1 < etaplus; and step_size_min <= step_size_max (torch does not
    check it: a reversed pair would clamp every step to step_size_max)."""
    etaminus, etaplus = hp["etas"]
    check_range(g, "etas[0]", etaminus, low=0.0, high=1.0, low_open=True, high_open=True)
    check_range(g, "etas[1]", etaplus, low=1.0, low_open=True)
    lo, hi = hp["step_sizes"]
    if lo > hi:
        raise ValueError(f"group {g}: step_sizes={tuple(hp['step_sizes'])!r} must have step_size_min <= "
                         "step_size_max")


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES, check_etas_and_bounds)


def clamp(x, lo, hi):
    """torch's clamp_(lo, hi) = min(max(x, lo), hi), as selections (each element keeps its own error)."""
    x = np.where(x < lo, lo, x)
    return np.where(x > hi, hi, x)


def update(p, g, st, hp, conv: RpropConvention):
    """One Rprop update of one param; returns (new p, new state entry)."""
    lr, (etaminus, etaplus), (lo, hi) = held(hp, conv, "lr", "etas", "step_sizes")
    st = {"prev": np.zeros_like(p), "step_size": filled(p, lr), **st}
    g = ascent(g, hp)
    s = np.sign(g * st["prev"])
    # torch writes the etas into sign's tensor, of the grad's dtype: held in the state format
    eta = np.where(s > 0, filled(p, etaplus), np.where(s < 0, filled(p, etaminus), 1.0))
    step_size = st["step_size"] = clamp(st["step_size"] * eta, lo, hi)
    if conv.form == "irprop-":
        g = np.where(s < 0, 0.0, g)
    st["prev"] = g
    return p - np.sign(g) * step_size, st


def step(params, grads, state: OptState, hparams, conv: RpropConvention = TORCH_RPROP,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], conv), conv.counter_format,
                 elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "form": {
        "irprop-": ref("iRprop- (Igel & Huesken 2000, Fig. 3): the grad zeroed where its sign flipped, so the "
                       "next step neither shrinks nor moves it (torch.optim.Rprop)"),
        "rprop-": Form(DEVIATION, "Rprop- (Igel & Huesken 2000, Fig. 2) under the name of torch's iRprop-: a "
                                  "flipped sign is kept, so the element moves back at once and its step shrinks "
                                  "again on the next step"),
    },
    "counter": {
        "param": ref("a per-param counter that nothing reads (torch.optim.Rprop keeps state['step'])"),
        "group": Form(EQUIVALENT, "a per-group counter that nothing reads"),
        "none": Form(EQUIVALENT, "no counter: nothing reads one"),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "lr, etas and step-size bounds held as float32: rounding of the inputs "
                                            "only", roundoff=FP32_HPARAMS)},
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter (torch): it stops at 2**24, and nothing reads it"),
        "bfloat16": Form(EQUIVALENT, "a bfloat16 counter: it stops at 256, and nothing reads it"),
    },
}

SPECS = (OptimizerSpec(name="rprop", step=step, validate=validate, convention=TORCH_RPROP, forms=FORMS,
                       state_keys=("prev", "step_size"), defaults=DEFAULTS, roles=ROLES,
                       options=frozenset({"maximize"}),
                       summary="Rprop, per-element step sizes from grad signs (torch.optim.Rprop, iRprop-)",
                       presets={"torch.rprop": TORCH_RPROP},
                       complex_form="components"),)
