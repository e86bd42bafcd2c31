"""FusedAdagrad, one multi-tensor kernel per dtype and group.

Per element, at the group's step t (oracle/adagrad.py, eps "outside"):

    g   <- g * inv_scale
    g   <- g + wd*p                              adagrad_w_mode=False (L2, torch)
    h   <- h + g^2                               h starts at initial_accumulator_value
    clr <- lr / (1 + (t-1)*lr_decay)
    p   <- p - clr * g/(sqrt(h) + eps)           L2
    p   <- p - clr * (g/(sqrt(h) + eps) + wd*p)  adagrad_w_mode=True (apex, decoupled)

Unlike torch.optim.Adagrad, `sum` is created on a param's first step, not in
__init__, and the counter is per group.
"""
from __future__ import annotations

import torch

from .base import Bucket, FusedOptimizer, StepArgs


class FusedAdagrad(FusedOptimizer):
    SPEC = "adagrad"  # its hyperparameters have the roles oracle.adagrad declares (validation shared)
    MOMENTS = ("sum",)
    # oracle options this class implements (the comparison engine reads it)
    OPTIONS = ("lr_decay", "initial_accumulator_value")
    NONNEGATIVE = ("sum",)

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                 eps=1e-10, adagrad_w_mode=False, maximize=False, *, capturable=False, master_weights=True,
                 moment_dtype=torch.float32):
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps,
                        adagrad_w_mode=adagrad_w_mode, maximize=maximize, capturable=capturable,
                        master_weights=master_weights, moment_dtype=moment_dtype)
        super().__init__(params, defaults)

    def _init_moments(self, group: dict, p: torch.Tensor, state: dict) -> None:
        state["sum"] = torch.full_like(p, float(group["initial_accumulator_value"]), dtype=group["moment_dtype"],
                                       memory_format=torch.contiguous_format)

    def _update(self, group: dict, b: Bucket, args: StepArgs) -> None:
        step, lr, inv_scale = args.host()
        args.call("adagrad", b.grads, b.params, [s["sum"] for s in b.states], b.models, lr,
                  float(group["lr_decay"]), float(group["eps"]), float(group["weight_decay"]),
                  bool(group["adagrad_w_mode"]), step, inv_scale)
