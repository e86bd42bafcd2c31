"""Rprop: a correct torch.optim.Rprop on the shared step loop, and a defect that shipped."""
from __future__ import annotations

import torch

from oracle.mutants.base import _Base
from oracle.mutants.catalog import Mutant
from oracle.rprop import TORCH_RPROP


class TorchRprop(_Base):
    """torch.optim.Rprop semantics (oracle.rprop.TORCH_RPROP, iRprop-), fp32 math, one rounding on store:
    prev and step_size in the param's dtype, as torch keeps them (step_size filled with lr when made, so
    on bf16 params it starts as lr rounded to bf16: the derived bound carries that rounding through
    oracle.common.filled), a per-param counter."""

    ORACLE_OPTIMIZER = "rprop"
    ORACLE_STATE_DTYPE = "param"
    ORACLE_CONVENTION = TORCH_RPROP
    ORACLE_OPTIONS = frozenset({"maximize"})

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), maximize=False):
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        super().__init__(params, dict(lr=lr, etas=etas, step_sizes=step_sizes, maximize=maximize))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0, dtype=torch.float64)
            st["prev"] = torch.zeros_like(p, dtype=self._state_dtype(p), memory_format=torch.preserve_format)
            st["step_size"] = torch.full_like(p, group["lr"], dtype=self._state_dtype(p))
            self._init_master(p, st)

    def _move(self, st, g, step_size):
        """The param's change: sign(g) * step_size (g zeroed where its sign flipped)."""
        return g.sign() * step_size

    def _update(self, p, st, group):
        st["step"] += 1
        etaminus, etaplus = group["etas"]
        g = self._grad(p, group)
        g = -g if group["maximize"] else g
        s = (g * st["prev"].float()).sign()
        eta = torch.where(s > 0, etaplus, torch.where(s < 0, etaminus, 1.0))
        step_size = (st["step_size"].float() * eta).clamp_(*group["step_sizes"])
        g = torch.where(s < 0, 0.0, g)
        pf = self._master(p, st)
        pf.sub_(self._move(st, g, step_size))
        self._store(p, st, pf)
        st["step_size"].copy_(step_size)
        st["prev"].copy_(g)


class Optax1725StaleUpdate(Mutant, TorchRprop):
    PROVENANCE = "google-deepmind/optax PR #1725 (scale_by_rprop returned the previous step's update)"
    DESCRIPTION = "each step applies the previous step's update sign(g)*step_size: zeros at step 1, one step late after"
    EXPECT = ("lockstep", "param", 1, "")

    def _move(self, st, g, step_size):
        # kept off the state dict (optax keeps it in its own state): the defect is the lag, not a key
        lasts = self.__dict__.setdefault("_last_updates", {})
        last = lasts.get(id(st), torch.zeros_like(g))
        lasts[id(st)] = g.sign() * step_size
        return last


CONTROLS = [TorchRprop]
MUTANTS = [Optax1725StaleUpdate]
