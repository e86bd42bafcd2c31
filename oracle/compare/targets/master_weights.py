"""A minimal, correct mixed-precision wrapper: FP32 master weights around an
optimizer that was built over low-precision (FP16/BF16) model params.

This is the shape of DeepSpeed's ZeRO-0 FP16/BF16 optimizers and of most
training frameworks: the user builds `Adagrad(model.parameters())`, the
framework wraps it, swaps every group's params for FP32 masters and moves any
state the optimizer already created onto those masters.

    construction  masters = params widened to fp32 (exact); group["params"]
                  now hold the masters; eagerly created state (torch Adagrad
                  creates `sum` and `step` in __init__) is re-keyed to the
                  master, low-precision float tensors of the param's dtype
                  widened to fp32, the counter and non-tensor entries kept as
                  they are. No step is taken: counters stay 0, no moments are
                  allocated, no decay is applied.
    step()        grad -> master.grad (widened; None stays None), the inner
                  optimizer steps the masters, masters are rounded back into
                  the model params (one rounding, to nearest even).

The scenarios take the wrapper class as a parameter, so a test can pass a
deliberately broken one (tests/broken/scenario_mutants.py).
"""
from __future__ import annotations

from ..lazy_torch import no_grad, torch


class MasterWeights:
    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self.model_groups = [list(g["params"]) for g in optimizer.param_groups]
        self.master_groups = []
        for group, params in zip(optimizer.param_groups, self.model_groups):
            masters = [self._master(p) for p in params]
            for p, m in zip(params, masters):
                if m is not p and p in optimizer.state:
                    optimizer.state[m] = self._migrate(optimizer.state.pop(p), p, m)
            group["params"] = masters
            self.master_groups.append(masters)

    @staticmethod
    def _master(p: torch.Tensor) -> torch.Tensor:
        if p.dtype in (torch.float32, torch.float64):
            return p  # already full precision: the param is its own master
        return p.detach().to(torch.float32).clone().requires_grad_(p.requires_grad)

    @staticmethod
    def _migrate(state: dict, p: torch.Tensor, m: torch.Tensor) -> dict:
        """Eager state of `p` re-keyed to its master: floating tensors stored in
        the param's dtype are widened; counters and anything else kept."""
        out = {}
        for key, val in state.items():
            if (key != "step" and isinstance(val, torch.Tensor) and val.is_floating_point()
                    and val.dtype == p.dtype):
                val = val.to(dtype=m.dtype, device=m.device)
            out[key] = val
        return out

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def masters(self):
        return [list(g) for g in self.master_groups]

    @no_grad
    def step(self, closure=None):
        for params, masters in zip(self.model_groups, self.master_groups):
            for p, m in zip(params, masters):
                if m is p:
                    continue
                m.grad = None if p.grad is None else p.grad.detach().to(m.dtype)
        loss = self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        for params, masters in zip(self.model_groups, self.master_groups):
            for p, m in zip(params, masters):
                if m is not p:
                    p.copy_(m)
        return loss

    def zero_grad(self, set_to_none: bool = True):
        for params in self.model_groups:
            for p in params:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.zero_()
        self.optimizer.zero_grad(set_to_none)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(),
                "masters": [[m.detach().clone() for m in g] for g in self.master_groups]}

    def load_state_dict(self, sd: dict) -> None:
        with torch.no_grad():
            for masters, saved in zip(self.master_groups, sd["masters"]):
                for m, s in zip(masters, saved):
                    m.copy_(s)
            for params, masters in zip(self.model_groups, self.master_groups):
                for p, m in zip(params, masters):
                    if m is not p:
                        p.copy_(m)
        self.optimizer.load_state_dict(sd["optimizer"])


__all__ = ["MasterWeights"]
