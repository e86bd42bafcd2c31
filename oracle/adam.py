"""Adam and AdamW in float64: the specification.

Per element, for a param p with grad g at step t (t counts from 1), in this
order (Kingma & Ba 2015, Algorithm 1; Loshchilov & Hutter 2019 for AdamW):

    g  <- -g                                   if maximize
    g  <- g + wd*p                             decay="l2"          (torch Adam)
    p  <- p * (1 - lr*wd)                      decay="decoupled"   (torch AdamW)
    m  <- b1*m + (1-b1)*g
    v  <- b2*v + (1-b2)*g^2
    v' <- max(v'_prev, v) if amsgrad else v    (running max of the raw v, as torch)
    bc1, bc2 = 1-b1^t, 1-b2^t   (both 1 when bias_correction is off)
    denom:
        eps_mode="outside"            sqrt(v')/sqrt(bc2) + eps      (torch)
        eps_mode="outside_corrected"  sqrt(v'/bc2) + eps            (apex, TE, DeepSpeed FusedAdam)
        eps_mode="inside"             sqrt(v'/bc2 + eps)
    u  <- (m/bc1) / denom
    u  <- u + wd*p                             decay="decoupled_update" (apex/TE adam_w_mode:
                                               the decay joins the update, scaled by lr with it)
    p  <- p - lr*u

The two "outside" forms differ only by rounding in exact arithmetic; they are
separate options because a kernel's float32 error differs between them.
Counter conventions are in oracle.common.drive.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import (GradScaling, OptState, bias_corrections, check_betas, check_counter, check_flag, check_range,
                     drive, maybe_fp32, with_defaults)
from .spec import OptimizerSpec

DECAYS = ("l2", "decoupled", "decoupled_update")
EPS_MODES = ("outside", "outside_corrected", "inside")
BC_PRECISIONS = ("float64", "compute")


@dataclass(frozen=True)
class AdamConvention:
    """What an implementation legitimately chooses. Defaults: torch.optim.AdamW."""

    decay: str = "decoupled"
    eps_mode: str = "outside"
    bias_correction: bool = True
    counter: str = "param"
    fp32_hparams: bool = False  # kernel holds lr, betas, eps, wd as float32
    # Where 1 - beta^t is formed: "float64" on the host (torch CPU, apex, TE), or
    # "compute" in the kernel's compute dtype (torch's CUDA fused and capturable
    # paths, torchao). The values are the same in exact arithmetic; with
    # "compute" the derived tolerance carries the rounding of beta^t through the
    # cancellation in 1 - beta2^t (about 1/(1 - beta2^t) times larger early on).
    bias_correction_precision: str = "float64"

    def __post_init__(self):
        if self.bias_correction_precision not in BC_PRECISIONS:
            raise ValueError(f"bias_correction_precision must be one of {BC_PRECISIONS}, "
                             f"got {self.bias_correction_precision!r}")
        if self.decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, got {self.decay!r}")
        if self.eps_mode not in EPS_MODES:
            raise ValueError(f"eps_mode must be one of {EPS_MODES}, got {self.eps_mode!r}")
        check_counter(self.counter)


TORCH_ADAM = AdamConvention(decay="l2")
TORCH_ADAMW = AdamConvention(decay="decoupled")
APEX_ADAMW = AdamConvention(decay="decoupled_update", eps_mode="outside_corrected", counter="group",
                            fp32_hparams=True)

DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
            "amsgrad": False, "maximize": False}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and check ranges; raises ValueError naming the group."""
    out = []
    for g, hp in enumerate(hparams):
        hp = with_defaults(g, hp, DEFAULTS)
        for name in ("amsgrad", "maximize"):
            check_flag(g, name, hp[name])
        check_range(g, "lr", hp["lr"], low=0.0)
        check_betas(g, hp["betas"])
        check_range(g, "eps", hp["eps"], low=0.0)
        check_range(g, "weight_decay", hp["weight_decay"], low=0.0)
        out.append(hp)
    return out


def init_state(p: np.ndarray, hp: dict) -> dict:
    st = {"exp_avg": np.zeros_like(p), "exp_avg_sq": np.zeros_like(p)}
    if hp["amsgrad"]:
        st["max_exp_avg_sq"] = np.zeros_like(p)
    return st


def moments(st, g, b1, b2, b3):
    """m <- b1*m + b3*g (b3 = 1-b1 for Adam); v <- b2*v + (1-b2)*g^2."""
    return b1 * st["exp_avg"] + b3 * g, b2 * st["exp_avg_sq"] + (1.0 - b2) * g * g


def denominator(v, bc2, eps, eps_mode):
    if eps_mode == "outside":
        return np.sqrt(v) / np.sqrt(bc2) + eps
    if eps_mode == "outside_corrected":
        return np.sqrt(v / bc2) + eps
    return np.sqrt(v / bc2 + eps)


def update(p, g, st, hp, t, conv: AdamConvention):
    """One Adam(W) update of one param; returns (new p, new state entry)."""
    f = lambda x: maybe_fp32(x, conv.fp32_hparams)  # noqa: E731
    lr, eps, wd = f(hp["lr"]), f(hp["eps"]), f(hp["weight_decay"])
    b1, b2 = f(hp["betas"][0]), f(hp["betas"][1])
    st = {**init_state(p, hp), **st}
    if hp["maximize"]:
        g = -g
    if conv.decay == "l2":
        g = g + wd * p
    elif conv.decay == "decoupled":
        p = p * (1.0 - lr * wd)
    m, v = st["exp_avg"], st["exp_avg_sq"] = moments(st, g, b1, b2, 1.0 - b1)
    if hp["amsgrad"]:
        v = st["max_exp_avg_sq"] = np.maximum(st["max_exp_avg_sq"], v)
    bc1, bc2 = bias_corrections(b1, b2, t, conv.bias_correction)
    if conv.bias_correction and conv.bias_correction_precision == "compute":
        # the same values, as array operations so that an error-tracking array
        # type (oracle.compare.errmodel) sees the power and the cancellation
        bc1, bc2 = (1.0 - np.full_like(p, b) ** t for b in (b1, b2))
    u = (m / bc1) / denominator(v, bc2, eps, conv.eps_mode)
    if conv.decay == "decoupled_update":
        u = u + wd * p
    return p - lr * u, st


def step(params, grads, state: OptState, hparams, conv: AdamConvention = TORCH_ADAMW,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv))


def _spec(name, conv, summary):
    return OptimizerSpec(name=name, step=step, validate=validate, convention=conv, state_keys=("exp_avg", "exp_avg_sq"),
                         defaults=DEFAULTS, options=frozenset({"amsgrad", "maximize"}),
                         optional_state={"max_exp_avg_sq": "amsgrad"}, summary=summary)


SPECS = (_spec("adam", TORCH_ADAM, "Adam, L2 decay (torch.optim.Adam)"),
         _spec("adamw", TORCH_ADAMW, "AdamW, decoupled decay (torch.optim.AdamW)"))
