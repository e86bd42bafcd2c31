"""FusedSGD: torch.optim.SGD's update in one multi-tensor kernel per dtype and group.

Per element (oracle/sgd.py, decay "l2", first_step "copy"):

    g   <- g * inv_scale
    g   <- -g                               maximize
    g   <- g + wd*p                         when wd != 0 (L2, as torch)
    buf <- g                                the param's first step with momentum (torch's convention)
    buf <- mu*buf + (1-dampening)*g         later steps
    g   <- g + mu*buf (nesterov) or buf     when momentum != 0
    p   <- p - lr*g

momentum_buffer exists only while momentum != 0, as in torch, and a param
without one takes the first-step form: so a group whose momentum is raised
from 0 starts its buffers the way torch does. Unlike torch, the group keeps a
counter (group["step"], advancing on every step like the other fused
optimizers); the update does not read it.

Not capturable: the first step is told from the buffer's absence on the host,
which a found_inf read on the device could not undo.
"""
from __future__ import annotations

import torch

from oracle.sgd import check_nesterov

from .base import Bucket, FusedOptimizer, StepArgs


class FusedSGD(FusedOptimizer):
    SPEC = "sgd"  # its hyperparameters have the roles oracle.sgd declares (validation shared)
    OPTIONAL_MOMENTS = ("momentum_buffer",)
    FLAGS = frozenset({"maximize"})
    OPTIONS = ("dampening", "nesterov", "maximize")

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, *,
                 maximize=False, master_weights=True, moment_dtype=torch.float32):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, master_weights=master_weights,
                        moment_dtype=moment_dtype)
        super().__init__(params, defaults)

    def _check_hparams(self, gi: int, group: dict) -> None:
        super()._check_hparams(gi, group)
        check_nesterov(gi, group)

    def _init_moments(self, group: dict, p: torch.Tensor, state: dict) -> None:
        pass  # the buffer is made in _update, where its first step is known

    def _update(self, group: dict, b: Bucket, args: StepArgs) -> None:
        if group["momentum"] == 0:
            self._call(group, args, b, range(len(b.params)), with_buffer=False, first=False)
            return
        fresh = [k for k, s in enumerate(b.states) if "momentum_buffer" not in s]
        old = [k for k, s in enumerate(b.states) if "momentum_buffer" in s]
        for k in fresh:  # zeros, though the first-step kernel writes before it reads
            b.states[k]["momentum_buffer"] = torch.zeros_like(b.params[k], dtype=group["moment_dtype"],
                                                              memory_format=torch.contiguous_format)
        self._call(group, args, b, fresh, with_buffer=True, first=True)
        self._call(group, args, b, old, with_buffer=True, first=False)

    def _call(self, group: dict, args: StepArgs, b: Bucket, idx, with_buffer: bool, first: bool) -> None:
        """One kernel call for the params of `b` at indices `idx`."""
        idx = list(idx)
        if not idx:
            return
        step, lr, inv_scale = args.host()
        pick = lambda xs: [xs[k] for k in idx] if xs else []  # noqa: E731
        bufs = [b.states[k]["momentum_buffer"] for k in idx] if with_buffer else []
        args.call("sgd", pick(b.grads), pick(b.params), bufs, pick(b.models), lr, float(group["momentum"]),
                  float(group["dampening"]), float(group["weight_decay"]), bool(group["nesterov"]),
                  bool(group["maximize"]), first, step, inv_scale)
