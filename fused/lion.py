"""FusedLion: Lion (Chen et al. 2023) in one multi-tensor kernel per dtype and group.

Per element (oracle/lion.py, sign_zero "zero"):

    g <- g * inv_scale;  g <- -g (maximize)
    c <- b1*m + (1-b1)*g
    p <- p * (1 - lr*wd)                decoupled decay, before the update
    p <- p - lr*sign(c)                 sign(0) = 0: an element with c = 0 only decays
    m <- b2*m + (1-b2)*g

The state is exp_avg alone (DeepSpeed's CPU Lion also allocates an unused
exp_avg_sq; this does not). The counter is per group, advancing on every step
like the other fused optimizers; the update does not read it.
"""
from __future__ import annotations

import torch

from .base import Bucket, FusedOptimizer, StepArgs


class FusedLion(FusedOptimizer):
    SPEC = "lion"  # its hyperparameters have the roles oracle.lion declares (validation shared)
    OPTIONS = ("maximize",)  # oracle options it implements (the comparison engine reads it)
    MOMENTS = ("exp_avg",)
    FLAGS = frozenset({"maximize"})

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, *, maximize=False, capturable=False,
                 master_weights=True, moment_dtype=torch.float32):
        defaults = dict(lr=lr, betas=betas, weight_decay=weight_decay, maximize=maximize, capturable=capturable,
                        master_weights=master_weights, moment_dtype=moment_dtype)
        super().__init__(params, defaults)

    def _init_moments(self, group: dict, p: torch.Tensor, state: dict) -> None:
        state["exp_avg"] = torch.zeros_like(p, dtype=group["moment_dtype"], memory_format=torch.contiguous_format)

    def _update(self, group: dict, b: Bucket, args: StepArgs) -> None:
        step, lr, inv_scale = args.host()
        beta1, beta2 = group["betas"]
        args.call("lion", b.grads, b.params, [s["exp_avg"] for s in b.states], b.models, lr, float(beta1),
                  float(beta2), float(group["weight_decay"]), bool(group["maximize"]), step, inv_scale)
