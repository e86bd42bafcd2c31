"""Adamax: torch.optim.Adamax as the control, and a defect that shipped."""
from __future__ import annotations

import torch

from oracle.adamax import TORCH_ADAMAX
from oracle.mutants.base import _Base
from oracle.mutants.catalog import Mutant


class TorchAdamax(_Base):
    """torch.optim.Adamax (oracle.adamax.TORCH_ADAMAX), fp32 math, one rounding on store:
    g += wd*p (wd != 0); m = b1*m + (1-b1)*g; u = max(b2*u, |g| + eps); p -= lr/(1 - b1^t) * m/u.
    State in the param dtype; a per-param counter (float64: exact at any horizon)."""

    ORACLE_OPTIMIZER = "adamax"
    ORACLE_CONVENTION = TORCH_ADAMAX
    ORACLE_OPTIONS = frozenset({"maximize"})

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, maximize=False):
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if not value >= 0.0:
                raise ValueError(f"Invalid {name} value: {value}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Invalid betas: {betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0, dtype=torch.float64)
            for key in ("exp_avg", "exp_inf"):
                st[key] = torch.zeros_like(p, dtype=self._state_dtype(p), memory_format=torch.preserve_format)
        return st

    def _infinity_norm(self, u, g, group):
        """max(b2*u, |g| + eps): eps inside the max, as torch."""
        return torch.maximum(u.mul_(group["betas"][1]), g.abs().add_(group["eps"]))

    def _divisor(self, u, group):
        return u

    def _update(self, p, st, group):
        st["step"] += 1
        t = int(st["step"].item())
        b1 = group["betas"][0]
        g = self._grad(p, group)
        if group["maximize"]:
            g = -g
        pf = self._master(p, st)
        if group["weight_decay"] != 0:
            g = g.add(pf, alpha=group["weight_decay"])
        m = st["exp_avg"].float().lerp_(g, 1 - b1)
        u = self._infinity_norm(st["exp_inf"].float(), g, group)
        pf.addcdiv_(m, self._divisor(u, group), value=-group["lr"] / (1 - b1 ** t))
        self._store(p, st, pf)
        st["exp_avg"].copy_(m)
        st["exp_inf"].copy_(u)


class MXNet18532AdamaxNoEps(Mutant, TorchAdamax):
    PROVENANCE = "apache/mxnet PR #18532 ('add epsilon to adamax': its Adamax divided by u with no epsilon)"
    DESCRIPTION = "no eps anywhere: u = max(b2*u, |g|), so an element whose grads are all zero divides 0 by 0"
    EXPECT = ("lockstep", "exp_inf", 1, "")

    def _infinity_norm(self, u, g, group):
        return torch.maximum(u.mul_(group["betas"][1]), g.abs())


CONTROLS = [TorchAdamax]
MUTANTS = [MXNet18532AdamaxNoEps]
