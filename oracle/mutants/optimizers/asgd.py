"""ASGD: torch.optim.ASGD as the control, and a defect that shipped."""
from __future__ import annotations

import torch

from oracle.asgd import TORCH_ASGD
from oracle.mutants.base import _Base
from oracle.mutants.catalog import Mutant


class TorchASGD(_Base):
    """torch.optim.ASGD (oracle.asgd.TORCH_ASGD), fp32 math, one rounding on store:
    g += wd*p (wd != 0); p *= 1 - lambd*eta; p -= eta*g; ax += mu*(p - ax); then
    eta = lr/(1 + lambd*lr*t)^alpha and mu = 1/max(1, t - t0) from the param's own counter.
    ax in the param dtype; step, eta and mu float64 scalar tensors."""

    ORACLE_OPTIMIZER = "asgd"
    ORACLE_CONVENTION = TORCH_ASGD
    ORACLE_OPTIONS = frozenset({"maximize"})

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0, maximize=False):
        for name, value in (("lr", lr), ("weight_decay", weight_decay)):
            if not value >= 0.0:
                raise ValueError(f"Invalid {name} value: {value}")
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      maximize=maximize))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0, dtype=torch.float64)
            st["eta"] = torch.tensor(float(group["lr"]), dtype=torch.float64)
            st["mu"] = torch.tensor(1.0, dtype=torch.float64)
            st["ax"] = torch.zeros_like(p, dtype=self._state_dtype(p), memory_format=torch.preserve_format)
        return st

    def _per_param(self, group, params) -> list[tuple]:
        for p in params:
            self.state[p]["step"] += 1
        return [(self._count(group, params, p),) for p in params]

    def _count(self, group, params, p) -> int:
        """The counter eta and mu are computed from: the param's own."""
        return int(self.state[p]["step"].item())

    def _update(self, p, st, group, t):
        g = self._grad(p, group)
        if group["maximize"]:
            g = -g
        pf = self._master(p, st)
        if group["weight_decay"] != 0:
            g = g.add(pf, alpha=group["weight_decay"])
        eta, mu = float(st["eta"]), float(st["mu"])
        pf.mul_(1 - group["lambd"] * eta).add_(g, alpha=-eta)
        ax = st["ax"].float()
        ax.add_(pf.sub(ax).mul_(mu))
        self._store(p, st, pf)
        st["ax"].copy_(ax)
        lr, lambd = group["lr"], group["lambd"]
        st["eta"].fill_(lr / (1 + lambd * lr * t) ** group["alpha"])
        st["mu"].fill_(1 / max(1, t - group["t0"]))


class Torch125440SharedStep(Mutant, TorchASGD):
    PROVENANCE = ("pytorch/pytorch PR #125440 / #126375 ('[optim] Fix: wrong ASGD implementation': the foreach "
                  "path assumed every param of a group has the same step)")
    DESCRIPTION = "eta and mu of every param computed from the first param's counter"
    EXPECT = ("lockstep", "", None, "grad_none")

    def _count(self, group, params, p) -> int:
        return int(self.state[params[0]]["step"].item())


CONTROLS = [TorchASGD]
MUTANTS = [Torch125440SharedStep]
