"""Adagrad in float64: the specification.

Per element, for a param p with grad g at step t (t counts from 1), in this
order (Duchi et al. 2011; torch.optim.Adagrad's order of operations):

    g   <- -g                                  if maximize
    g   <- g + wd*p                            decay="l2"       (torch)
    clr <- lr / (1 + (t-1)*lr_decay)
    h   <- h + g^2                             h starts at initial_accumulator_value
           h + (g + wd*p)^2                    decay="accumulator" (the decay enters the
                                               accumulator only, as DeepSpeedCPUAdagrad was
                                               read in docs/conventions.md; its
                                               0.19.8 kernel is in fact "l2", see
                                               oracle/compare/targets/deepspeed.py)
    std <- sqrt(h) + eps                       eps_mode="outside"  (torch, apex, DeepSpeed)
           sqrt(h + eps)                       eps_mode="inside"   (optax: rsqrt(h + eps))
    p   <- p - clr * g/std                     decay "l2" and "accumulator" (raw g in the numerator)
    p   <- p - clr * (g/std + wd*p)            decay="decoupled"   (apex adagrad_w_mode)

torch creates `sum` (and its counter) for every param in __init__; that is a
state-schema matter for the harness. Here a param's accumulator is created
on its first step, equal to what an eager one would hold then.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import GradScaling, OptState, check_counter, check_flag, check_range, drive, maybe_fp32, with_defaults
from .spec import OptimizerSpec

DECAYS = ("l2", "decoupled", "accumulator")
EPS_MODES = ("outside", "inside")


@dataclass(frozen=True)
class AdagradConvention:
    """Defaults: torch.optim.Adagrad."""

    decay: str = "l2"
    eps_mode: str = "outside"
    counter: str = "param"
    fp32_hparams: bool = False

    def __post_init__(self):
        if self.decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, got {self.decay!r}")
        if self.eps_mode not in EPS_MODES:
            raise ValueError(f"eps_mode must be one of {EPS_MODES}, got {self.eps_mode!r}")
        check_counter(self.counter)


TORCH_ADAGRAD = AdagradConvention()
OPTAX_ADAGRAD = AdagradConvention(eps_mode="inside")
ACCUMULATOR_DECAY_ADAGRAD = AdagradConvention(decay="accumulator")
# DeepSpeedCPUAdagrad 0.19.8 as measured: torch's L2 form, hyperparameters held as float32.
DEEPSPEED_ADAGRAD = AdagradConvention(decay="l2", fp32_hparams=True)

DEFAULTS = {"lr": 1e-2, "lr_decay": 0.0, "weight_decay": 0.0, "initial_accumulator_value": 0.0,
            "eps": 1e-10, "maximize": False}


def validate(hparams: list[dict]) -> list[dict]:
    out = []
    for g, hp in enumerate(hparams):
        hp = with_defaults(g, hp, DEFAULTS)
        check_flag(g, "maximize", hp["maximize"])
        for name in ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"):
            check_range(g, name, hp[name], low=0.0)
        out.append(hp)
    return out


def update(p, g, st, hp, t, conv: AdagradConvention):
    """One Adagrad update of one param; returns (new p, new state entry)."""
    f = lambda x: maybe_fp32(x, conv.fp32_hparams)  # noqa: E731
    lr, eps, wd, lr_decay = f(hp["lr"]), f(hp["eps"]), f(hp["weight_decay"]), f(hp["lr_decay"])
    st = dict(st)
    h = st.get("sum", np.full_like(p, f(hp["initial_accumulator_value"])))
    if hp["maximize"]:
        g = -g
    if conv.decay == "l2":
        g = g + wd * p
    clr = lr / (1.0 + (t - 1) * lr_decay)
    acc_g = g + wd * p if conv.decay == "accumulator" else g
    h = st["sum"] = h + acc_g * acc_g
    std = np.sqrt(h) + eps if conv.eps_mode == "outside" else np.sqrt(h + eps)
    u = g / std
    if conv.decay == "decoupled":
        u = u + wd * p
    return p - clr * u, st


def step(params, grads, state: OptState, hparams, conv: AdagradConvention = TORCH_ADAGRAD,
         scaling: GradScaling | None = None):
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv))


SPECS = (OptimizerSpec(name="adagrad", step=step, validate=validate, convention=TORCH_ADAGRAD, state_keys=("sum",), defaults=DEFAULTS,
                       options=frozenset({"lr_decay", "initial_accumulator_value", "maximize"}),
                       eager_state={"sum": "initial_accumulator_value"}, counter_hparams=("lr_decay",),
                       summary="Adagrad (torch.optim.Adagrad)"),)
