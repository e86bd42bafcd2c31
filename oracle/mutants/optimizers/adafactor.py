"""Adafactor: torch.optim.Adafactor as the control, and defects that shipped in other Adafactors."""
from __future__ import annotations

import math

import torch

from oracle.adafactor import TORCH_ADAFACTOR
from oracle.mutants.base import _Base
from oracle.mutants.catalog import Mutant


class TorchAdafactor(_Base):
    """torch.optim.Adafactor (oracle.adafactor.TORCH_ADAFACTOR), fp32 math, one rounding on store:
    beta2_t = 1 - t^c, rho = min(lr, 1/sqrt(t)), alpha = max(eps2, RMS(p))*rho; p *= 1 - lr*wd;
    row/col means of g^2 into row_var [..., R, 1] and col_var [..., 1, C] from 2 dims on (variance
    below); v_hat = r*c/max(mean(r), eps1); u = g/sqrt(max(v_hat, eps1^2)); p -= alpha*u/max(1, RMS(u)/d).
    State in the param dtype; a per-param counter; eps1 = None is finfo(param dtype).eps."""

    ORACLE_OPTIMIZER = "adafactor"
    ORACLE_CONVENTION = TORCH_ADAFACTOR
    ORACLE_OPTIONS = frozenset({"maximize"})

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0,
                 maximize=False):
        if not lr >= 0.0 or not beta2_decay <= 0.0 or not d >= 1.0 or not weight_decay >= 0.0:
            raise ValueError(f"Invalid hyperparameters: lr={lr}, beta2_decay={beta2_decay}, d={d}, "
                             f"weight_decay={weight_decay}")
        if (eps[0] is not None and not eps[0] >= 0.0) or not eps[1] >= 0.0:
            raise ValueError(f"Invalid eps: {eps}")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d,
                                      weight_decay=weight_decay, maximize=maximize))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0, dtype=torch.float64)
            dt = self._state_dtype(p)
            if p.dim() >= 2:
                st["row_var"] = p.new_zeros((*p.shape[:-1], 1), dtype=dt)
                st["col_var"] = p.new_zeros((*p.shape[:-2], 1, p.shape[-1]), dtype=dt)
            else:
                st["variance"] = torch.zeros_like(p, dtype=dt)
        return st

    @staticmethod
    def _rms(x):
        return x.norm().item() / math.sqrt(x.numel()) if x.numel() else 0.0

    def _normalizer(self, r, c, eps1):
        """The factored estimate's denominator (r [..., R, 1], c [..., 1, C]): the rows' mean, clamped at eps1."""
        return r.mean(dim=-2, keepdim=True).clamp_min(eps1)

    def _second_moment(self, st, g, rate, eps1):
        """The new moving averages (stored) and v_hat."""
        if g.dim() < 2:
            v = st["variance"].float().mul_(rate).add_(g * g, alpha=1 - rate)
            st["variance"].copy_(v)
            return v.clone()
        r = st["row_var"].float().mul_(rate).add_((g * g).mean(dim=-1, keepdim=True), alpha=1 - rate)
        c = st["col_var"].float().mul_(rate).add_((g * g).mean(dim=-2, keepdim=True), alpha=1 - rate)
        st["row_var"].copy_(r)
        st["col_var"].copy_(c)
        return r * c / self._normalizer(r, c, eps1)

    def _update(self, p, st, group):
        st["step"] += 1
        t = float(st["step"])
        eps1, eps2 = group["eps"]
        eps1 = torch.finfo(p.dtype).eps if eps1 is None else eps1
        g = -self._grad(p, group) if group["maximize"] else self._grad(p, group)
        pf = self._master(p, st)
        if p.numel() == 0:
            return
        rate = 1 - t ** group["beta2_decay"]
        alpha = max(eps2, self._rms(pf)) * min(group["lr"], 1 / math.sqrt(t))
        if group["weight_decay"] != 0:
            pf.mul_(1 - group["lr"] * group["weight_decay"])
        u = self._second_moment(st, g, rate, eps1).clamp_min_(eps1 * eps1).rsqrt_().mul_(g)
        pf.add_(u, alpha=-alpha / max(1.0, self._rms(u) / group["d"]))
        self._store(p, st, pf)


class Timm2749AdafactorTallRowNorm(Mutant, TorchAdafactor):
    PROVENANCE = ("huggingface/pytorch-image-models PR #2749 ('Fix AdafactorBigVision dropping the factored row "
                  "normalization for tall matrices'): the rows' mean was taken over the wrong axis when the "
                  "larger dimension comes first")
    DESCRIPTION = ("for a param with more rows than columns the row factor is normalised by itself (each row's "
                   "own value instead of the rows' mean): v_hat = c, the row statistics are lost")
    EXPECT = ("lockstep", "param", 1, "")

    def _normalizer(self, r, c, eps1):
        if r.shape[-2] > c.shape[-1]:  # more rows than columns
            return r.clamp_min(eps1)  # r / r: the rows' scale never reaches v_hat
        return super()._normalizer(r, c, eps1)


CONTROLS = [TorchAdafactor]
MUTANTS = [Timm2749AdafactorTallRowNorm]
