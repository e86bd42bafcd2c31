"""Muon: torch.optim.Muon as the control, and defects that shipped in Muon implementations."""
from __future__ import annotations

import math

import torch

from oracle.mutants.base import _Base
from oracle.mutants.catalog import Mutant
from oracle.muon import DEFAULTS, TORCH_MUON, adjusted_lr


class TorchMuon(_Base):
    """torch.optim.Muon (oracle.muon.TORCH_MUON): the buffer and the decay in fp32 math with one
    rounding on store, the Newton-Schulz iteration in bfloat16 as torch runs it (its input a bf16
    copy, tall matrices transposed, X / max(||X||, eps), X <- a*X + (b*S + c*S@S) @ X with S = X@X^T).
    State in the param dtype; no counter."""

    ORACLE_OPTIMIZER = "muon"
    ORACLE_CONVENTION = TORCH_MUON
    ORACLE_OPTIONS = frozenset({"nesterov", "ns_coefficients", "ns_steps", "adjust_lr_fn"})

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=DEFAULTS["ns_coefficients"], eps=1e-7, ns_steps=5, adjust_lr_fn=None):
        for name, value in (("lr", lr), ("weight_decay", weight_decay), ("momentum", momentum), ("eps", eps)):
            if not value >= 0.0:
                raise ValueError(f"Invalid {name} value: {value}")
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                                      ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps,
                                      adjust_lr_fn=adjust_lr_fn))
        for group in self.param_groups:
            if any(p.ndim != 2 for p in group["params"]):
                raise ValueError("Muon only supports 2D parameters")

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["momentum_buffer"] = torch.zeros_like(p, dtype=self._state_dtype(p),
                                                     memory_format=torch.preserve_format)
        return st

    def _ns_input(self, g, buf, group):
        """What is orthogonalized: lerp(g, buf, mu) with nesterov, else the buffer (a copy)."""
        return g.lerp(buf, group["momentum"]) if group["nesterov"] else buf.clone()

    def _orthogonalize(self, m, group):
        a, b, c = group["ns_coefficients"]
        x = m.bfloat16()
        tall = x.size(0) > x.size(1)
        x = x.T if tall else x
        x = x / x.norm().clamp(min=group["eps"])
        for _ in range(group["ns_steps"]):
            s = x @ x.T
            x = torch.addmm(x, torch.addmm(s, s, s, beta=b, alpha=c), x, beta=a)
        return x.T if tall else x

    def _scale(self, group, shape) -> float:
        return adjusted_lr(group["lr"], tuple(shape), group["adjust_lr_fn"])

    def _update(self, p, st, group):
        g = self._grad(p, group)
        buf = st["momentum_buffer"].float().lerp_(g, 1 - group["momentum"])
        o = self._orthogonalize(self._ns_input(g, buf, group), group)
        pf = self._master(p, st).mul_(1 - group["lr"] * group["weight_decay"])
        pf.add_(o.float(), alpha=-self._scale(group, p.shape))
        self._store(p, st, pf)
        st["momentum_buffer"].copy_(buf)


class Torch194664BufferNormalized(Mutant, TorchMuon):
    PROVENANCE = ("pytorch/pytorch PR #194664 ('[optim][muon] fix momentum buffer aliasing in Newton-Schulz'; "
                  "torch 2.13 ships it: reports/known/torch_muon_bf16_buffer_normalized_in_place.py)")
    DESCRIPTION = ("without nesterov the buffer itself is the NS input and is divided by its norm in place "
                   "(grad.bfloat16() is no copy of a bf16 buffer)")
    EXPECT = ("lockstep", "momentum_buffer", 1, "no_nesterov")

    def _ns_input(self, g, buf, group):
        if group["nesterov"]:
            return super()._ns_input(g, buf, group)
        return buf.div_(buf.norm().clamp(min=group["eps"]))


class Optax1249NoShapeScale(Mutant, TorchMuon):
    PROVENANCE = ("google-deepmind/optax PR #1249 ('Fix scaling factor in muon': optax.contrib.muon lacked "
                  "the sqrt(max(1, d_out/d_in)) factor of Jordan's implementation)")
    DESCRIPTION = "the update is not scaled by sqrt(max(1, A/B)): tall matrices step too short"
    EXPECT = ("lockstep", "param", 1, "")

    def _scale(self, group, shape) -> float:
        if group["adjust_lr_fn"] == "match_rms_adamw":
            return super()._scale(group, shape)
        return group["lr"]


class Kozistr371MatchRmsKeepsShapeScale(Mutant, TorchMuon):
    PROVENANCE = ("kozistr/pytorch_optimizer #371, fixed by PR #373 (Muon's adjusted lr multiplied Moonshot's "
                  "0.2*sqrt(max(A, B)) by Jordan's sqrt(max(1, A/B)) as well)")
    DESCRIPTION = "match_rms_adamw's 0.2*sqrt(max(A, B)) times sqrt(max(1, A/B)): tall matrices step too far"
    EXPECT = ("lockstep", "param", 1, "match_rms")

    def _scale(self, group, shape) -> float:
        rows, cols = shape
        extra = math.sqrt(max(1.0, rows / cols)) if group["adjust_lr_fn"] == "match_rms_adamw" else 1.0
        return super()._scale(group, shape) * extra


CONTROLS = [TorchMuon]
MUTANTS = [Torch194664BufferNormalized, Optax1249NoShapeScale, Kozistr371MatchRmsKeepsShapeScale]
