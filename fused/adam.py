"""FusedAdam: Adam and AdamW in one multi-tensor kernel per dtype and group.

Per element, at the group's step t (oracle/adam.py, eps "outside"):

    g  <- g * inv_scale
    g  <- g + wd*p                    adam_w_mode=False (L2, torch Adam)
    p  <- p * (1 - lr*wd)             adam_w_mode=True  (decoupled, torch AdamW)
    m  <- b1*m + (1-b1)*g;   v <- b2*v + (1-b2)*g^2
    p  <- p - lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)     bc = 1 - b^t, or 1 without bias_correction

Unlike apex FusedAdam (decay added to the update, eps added to sqrt(v/bc2))
this follows torch's order; the counter is per group, as in apex.
amsgrad and maximize are not supported.
"""
from __future__ import annotations

import torch

from .base import Bucket, FusedOptimizer, StepArgs


class FusedAdam(FusedOptimizer):
    SPEC = "adam"  # its hyperparameters have the roles oracle.adam declares (validation shared)
    MOMENTS = ("exp_avg", "exp_avg_sq")
    NONNEGATIVE = ("exp_avg_sq",)

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                 adam_w_mode=True, weight_decay=0.0, amsgrad=False, maximize=False, *,
                 capturable=False, master_weights=True, moment_dtype=torch.float32):
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, adam_w_mode=adam_w_mode,
                        weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize, capturable=capturable,
                        master_weights=master_weights, moment_dtype=moment_dtype)
        super().__init__(params, defaults)

    def _init_moments(self, group: dict, p: torch.Tensor, state: dict) -> None:
        for key in ("exp_avg", "exp_avg_sq"):
            state[key] = torch.zeros_like(p, dtype=group["moment_dtype"], memory_format=torch.contiguous_format)

    def _update(self, group: dict, b: Bucket, args: StepArgs) -> None:
        step, lr, inv_scale = args.host()
        beta1, beta2 = group["betas"]
        args.call("adam", b.grads, b.params, [s["exp_avg"] for s in b.states],
                  [s["exp_avg_sq"] for s in b.states], b.models, lr, float(beta1), float(beta2),
                  float(group["eps"]), float(group["weight_decay"]), bool(group["adam_w_mode"]),
                  bool(group["bias_correction"]), step, inv_scale)
