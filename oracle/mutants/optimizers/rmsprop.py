"""RMSprop: torch.optim.RMSprop as the control, and a defect that shipped."""
from __future__ import annotations

import torch

from oracle.mutants.base import _Base
from oracle.mutants.catalog import Mutant
from oracle.rmsprop import TORCH_RMSPROP


class TorchRMSprop(_Base):
    """torch.optim.RMSprop (oracle.rmsprop.TORCH_RMSPROP), fp32 math, one rounding on store:
    g += wd*p (wd != 0); v = alpha*v + (1-alpha)*g^2; centered: ga = alpha*ga + (1-alpha)*g and
    avg = sqrt(v - ga^2) + eps, else sqrt(v) + eps; momentum: buf = mu*buf + g/avg, p -= lr*buf;
    else p -= lr*g/avg. State in the param dtype; a per-param step counter nothing reads."""

    ORACLE_OPTIMIZER = "rmsprop"
    ORACLE_CONVENTION = TORCH_RMSPROP
    ORACLE_OPTIONS = frozenset({"centered", "maximize"})

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
                 maximize=False):
        for name, value in (("lr", lr), ("eps", eps), ("momentum", momentum), ("weight_decay", weight_decay),
                            ("alpha", alpha)):
            if not value >= 0.0:
                raise ValueError(f"Invalid {name} value: {value}")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0, dtype=torch.float64)
            keys = ["square_avg"] + ["momentum_buffer"] * (group["momentum"] > 0) + ["grad_avg"] * group["centered"]
            for key in keys:
                st[key] = torch.zeros_like(p, dtype=self._state_dtype(p), memory_format=torch.preserve_format)
        return st

    def _square_avg(self, st, g, group):
        """The new second moment, alpha*v + (1-alpha)*g^2."""
        alpha = group["alpha"]
        return st["square_avg"].float().mul_(alpha).addcmul_(g, g, value=1 - alpha)

    def _denominator(self, st, v, g, group):
        """sqrt(v) + eps, or sqrt(v - ga^2) + eps when centered (grad_avg stored here)."""
        if not group["centered"]:
            return v.sqrt().add_(group["eps"])
        ga = st["grad_avg"].float().mul_(group["alpha"]).add_(g, alpha=1 - group["alpha"])
        st["grad_avg"].copy_(ga)
        return v.addcmul(ga, ga, value=-1).sqrt_().add_(group["eps"])

    def _update(self, p, st, group):
        st["step"] += 1
        g = self._grad(p, group)
        if group["maximize"]:
            g = -g
        pf = self._master(p, st)
        if group["weight_decay"] != 0:
            g = g.add(pf, alpha=group["weight_decay"])
        v = self._square_avg(st, g, group)
        avg = self._denominator(st, v, g, group)
        if group["momentum"] > 0:
            buf = st["momentum_buffer"].float().mul_(group["momentum"]).addcdiv_(g, avg)
            st["momentum_buffer"].copy_(buf)
            pf.add_(buf, alpha=-group["lr"])
        else:
            pf.addcdiv_(g, avg, value=-group["lr"])
        self._store(p, st, pf)
        st["square_avg"].copy_(v)


class Fastbook342SquareAvgUndampened(Mutant, TorchRMSprop):
    PROVENANCE = "fastai/fastbook PR #342 (16_accel_sgd: average_sqr_grad missed the (1 - sqr_mom) term)"
    DESCRIPTION = "square average accumulated as alpha*v + g^2, without the (1 - alpha) weight on the new g^2"
    EXPECT = ("lockstep", "param", 1, "")

    def _square_avg(self, st, g, group):
        return st["square_avg"].float().mul_(group["alpha"]).addcmul_(g, g)


CONTROLS = [TorchRMSprop]
MUTANTS = [Fastbook342SquareAvgUndampened]
