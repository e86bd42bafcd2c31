"""NAdam: a correct torch.optim.NAdam on the shared step loop, and a defect that shipped."""
from __future__ import annotations

import torch

from oracle.mutants.base import _Base
from oracle.mutants.catalog import Mutant
from oracle.nadam import TORCH_NADAM


class TorchNAdam(_Base):
    """torch.optim.NAdam semantics (oracle.nadam.TORCH_NADAM), fp32 math, one rounding on store: per-param
    float64 counter and mu_product (exact, as torch under a float64 default dtype), moments in the param
    dtype, decay by decoupled_weight_decay (none at wd == 0), two-term step over sqrt(v/bc2) + eps."""

    ORACLE_OPTIMIZER = "nadam"
    ORACLE_CONVENTION = TORCH_NADAM
    ORACLE_OPTIONS = frozenset({"maximize", "momentum_decay", "decoupled_weight_decay"})

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, maximize=False):
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay),
                            ("momentum_decay", momentum_decay)):
            if not value >= 0.0:
                raise ValueError(f"Invalid {name} value: {value}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Invalid betas: {betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0, dtype=torch.float64)
            st["mu_product"] = torch.tensor(1.0, dtype=torch.float64)
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            self._init_master(p, st)

    def _mus(self, group, t):
        """(mu_t, mu_{t+1}) of Dozat's schedule."""
        b1, psi = group["betas"][0], group["momentum_decay"]
        return b1 * (1.0 - 0.5 * 0.96 ** (t * psi)), b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * psi))

    def _step_sizes(self, st, group, mu, mu_next):
        """(grad coefficient, momentum coefficient) after mu_product <- mu_product*mu."""
        st["mu_product"] *= mu
        prod = float(st["mu_product"])
        return group["lr"] * (1.0 - mu) / (1.0 - prod), group["lr"] * mu_next / (1.0 - prod * mu_next)

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
        denom = (v / (1 - b2 ** t)).sqrt_().add_(group["eps"])
        c_grad, c_m = self._step_sizes(st, group, *self._mus(group, t))
        pf.addcdiv_(g, denom, value=-c_grad).addcdiv_(m, denom, value=-c_m)
        self._store(p, st, pf)
        st["exp_avg"].copy_(m)
        st["exp_avg_sq"].copy_(v)


class TorchSharp1154MuProductNext(Mutant, TorchNAdam):
    PROVENANCE = "dotnet/TorchSharp #1154 (fixed by PR #1155)"
    DESCRIPTION = ("the momentum term's mu_product_next = mu_product*mu*mu_next with mu_product already "
                   "multiplied by mu: mu counted twice (PyTorch: mu_product*mu_next)")
    EXPECT = ("lockstep", "param", 1, "")

    def _step_sizes(self, st, group, mu, mu_next):
        c_grad, _ = super()._step_sizes(st, group, mu, mu_next)
        prod = float(st["mu_product"])
        return c_grad, group["lr"] * mu_next / (1.0 - prod * mu * mu_next)


CONTROLS = [TorchNAdam]
MUTANTS = [TorchSharp1154MuProductNext]
