"""RAdam: a correct torch.optim.RAdam on the shared step loop, and a defect that shipped."""
from __future__ import annotations

import math

import torch

from oracle.mutants.base import _Base
from oracle.mutants.catalog import Mutant
from oracle.radam import TORCH_RADAM, rectification


class TorchRAdam(_Base):
    """torch.optim.RAdam semantics (oracle.radam.TORCH_RADAM), fp32 math, one rounding on store: per-param
    float64 counter, moments in the param dtype; rho_t > 5: m/bc1 * lr * sqrt(bc2)/(sqrt(v) + eps) * r,
    otherwise m/bc1 * lr."""

    ORACLE_OPTIMIZER = "radam"
    ORACLE_CONVENTION = TORCH_RADAM
    ORACLE_OPTIONS = frozenset({"maximize", "decoupled_weight_decay"})

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled_weight_decay=False, maximize=False):
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if not value >= 0.0:
                raise ValueError(f"Invalid {name} value: {value}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Invalid betas: {betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0, dtype=torch.float64)
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            self._init_master(p, st)

    def _apply(self, pf, m_hat, v, group, t):
        """The step: rectified adaptive past the threshold, SGD with momentum before it."""
        lr, b2 = group["lr"], group["betas"][1]
        r = rectification(b2, t)
        if r is None:
            pf.sub_(m_hat * lr)
            return
        pf.sub_(m_hat * lr * (math.sqrt(1 - b2 ** t) / (v.sqrt() + group["eps"])) * r)

    def _update(self, p, st, group):
        st["step"] += 1
        t = int(st["step"].item())
        b1, b2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        g = self._grad(p, group)
        g = -g if group["maximize"] else g
        pf = self._master(p, st)
        if wd != 0 and group["decoupled_weight_decay"]:
            pf.mul_(1 - lr * wd)
        elif wd != 0:
            g = g.add(pf, alpha=wd)
        m = st["exp_avg"].float().lerp_(g, 1 - b1)
        v = st["exp_avg_sq"].float().mul_(b2).addcmul_(g, g, value=1 - b2)
        self._apply(pf, m / (1 - b1 ** t), v, group, t)
        self._store(p, st, pf)
        st["exp_avg"].copy_(m)
        st["exp_avg_sq"].copy_(v)


class Ranger6ThresholdMismatch(Mutant, TorchRAdam):
    PROVENANCE = "lessw2020/Ranger-Deep-Learning-Optimizer #6 (fixed there)"
    DESCRIPTION = ("two thresholds: the step size's rectification at rho_t > 5 but the adaptive branch at "
                   "rho_t > 4, so at 4 < rho_t <= 5 an Adam step lr*m_hat/(sqrt(v) + eps) without sqrt(bc2)")
    EXPECT = ("lockstep", "param", 5, "")

    def _apply(self, pf, m_hat, v, group, t):
        b2 = group["betas"][1]
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
        if 4 < rho_t <= 5:  # the unrectified step size 1/bc1, applied over the adaptive denominator
            pf.sub_(m_hat * group["lr"] / (v.sqrt() + group["eps"]))
            return
        super()._apply(pf, m_hat, v, group, t)


CONTROLS = [TorchRAdam]
MUTANTS = [Ranger6ThresholdMismatch]
