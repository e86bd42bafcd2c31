"""Adam on complex params: torch.optim.Adam's forloop as the control, and the complex defect it shipped.

The control is written here, not on oracle.mutants.base's fp32 loop (whose `p.grad.float()` would drop
an imaginary part): torch ops in the param's own dtype, as torch's forloop runs them, so it declares
compute "storage" and the dtypes it takes, complex64 among them. The mutant differs only on complex
params; on real ones both are the same code.
"""
from __future__ import annotations

import math

import torch

from oracle.adam import TORCH_ADAM
from oracle.mutants.catalog import Mutant


class TorchComplexAdam(torch.optim.Optimizer):
    """torch.optim.Adam's forloop (oracle.adam.TORCH_ADAM, complex_form "components"): maximize and L2
    decay on the complex grad, then every moment and the update on torch.view_as_real's (re, im) pairs,
    so v holds re^2 and im^2 per component. A per-param float64 step counter (exact at any horizon)."""

    ORACLE_OPTIMIZER = "adam"
    ORACLE_CONVENTION = TORCH_ADAM
    ORACLE_COMPUTE = "storage"
    ORACLE_DTYPES = ("float32", "complex64")
    ORACLE_DEVICES = ("cpu", "cuda")
    ORACLE_OPTIONS = frozenset({"maximize"})

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, maximize=False):
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if not value >= 0.0:
                raise ValueError(f"Invalid {name} value: {value}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Invalid betas: {betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _views(self, *tensors):
        """The tensors the moments and the update are formed on: (re, im) pairs of complex ones."""
        return [torch.view_as_real(t) if t.is_complex() else t for t in tensors]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, group)
        return loss

    def _state(self, p):
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0, dtype=torch.float64)
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return st

    def _update(self, p, group):
        st = self._state(p)
        st["step"] += 1
        t = int(st["step"].item())
        (b1, b2), lr, wd = group["betas"], group["lr"], group["weight_decay"]
        g = -p.grad if group["maximize"] else p.grad
        if wd != 0:
            g = g.add(p, alpha=wd)
        x, g, m, v = self._views(p, g, st["exp_avg"], st["exp_avg_sq"])
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v.sqrt() / math.sqrt(1 - b2 ** t)).add_(group["eps"])
        x.addcdiv_(m, denom, value=-lr / (1 - b1 ** t))


class Torch59998ComplexSquare(Mutant, TorchComplexAdam):
    PROVENANCE = ("pytorch/pytorch #59998 (torch.optim.Adam took a complex param's v from grad*grad; #65711 "
                  "settled on treating complex params as (re, im) pairs, Adam's in PR #80279)")
    DESCRIPTION = ("the update formed on the complex tensors, not their view_as_real: v accumulates the complex "
                   "square g*g = (re^2 - im^2) + 2i*re*im, and its complex square root divides m")
    EXPECT = ("lockstep", "exp_avg_sq", 1, "/c64/")

    def _views(self, *tensors):
        return list(tensors)


CONTROLS = [TorchComplexAdam]
MUTANTS = [Torch59998ComplexSquare]
