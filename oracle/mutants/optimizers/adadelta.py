"""Adadelta: torch.optim.Adadelta as the control, and a defect that shipped."""
from __future__ import annotations

import torch

from oracle.adadelta import TORCH_ADADELTA
from oracle.mutants.base import _Base
from oracle.mutants.catalog import Mutant


class TorchAdadelta(_Base):
    """torch.optim.Adadelta (oracle.adadelta.TORCH_ADADELTA), fp32 math, one rounding on store:
    g += wd*p (wd != 0); v = rho*v + (1-rho)*g^2; delta = sqrt(a + eps)/sqrt(v + eps)*g;
    a = rho*a + (1-rho)*delta^2; p -= lr*delta. State in the param dtype; a per-param counter
    nothing reads."""

    ORACLE_OPTIMIZER = "adadelta"
    ORACLE_CONVENTION = TORCH_ADADELTA
    ORACLE_OPTIONS = frozenset({"maximize"})

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, maximize=False):
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if not value >= 0.0:
                raise ValueError(f"Invalid {name} value: {value}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0, dtype=torch.float64)
            for key in ("square_avg", "acc_delta"):
                st[key] = torch.zeros_like(p, dtype=self._state_dtype(p), memory_format=torch.preserve_format)
        return st

    def _apply(self, pf, delta, group):
        """The param's step: p -= lr*delta."""
        pf.add_(delta, alpha=-group["lr"])

    def _update(self, p, st, group):
        st["step"] += 1
        rho, eps = group["rho"], group["eps"]
        g = self._grad(p, group)
        if group["maximize"]:
            g = -g
        pf = self._master(p, st)
        if group["weight_decay"] != 0:
            g = g.add(pf, alpha=group["weight_decay"])
        v = st["square_avg"].float().mul_(rho).addcmul_(g, g, value=1 - rho)
        a = st["acc_delta"].float()
        delta = a.add(eps).sqrt_().div_(v.add(eps).sqrt_()).mul_(g)
        a.mul_(rho).addcmul_(delta, delta, value=1 - rho)
        self._apply(pf, delta, group)
        self._store(p, st, pf)
        st["square_avg"].copy_(v)
        st["acc_delta"].copy_(a)


class Paddle49732AdadeltaIgnoresLr(Mutant, TorchAdadelta):
    PROVENANCE = "PaddlePaddle/Paddle PR #49732 ('[BUG Fixs] adadelta lr support': the kernel took no lr)"
    DESCRIPTION = "the learning rate never reaches the update: p -= delta whatever lr is"
    EXPECT = ("lockstep", "param", 1, "")

    def _apply(self, pf, delta, group):
        pf.sub_(delta)


CONTROLS = [TorchAdadelta]
MUTANTS = [Paddle49732AdadeltaIgnoresLr]
