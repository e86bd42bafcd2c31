"""The model the wrapper scenarios train on each rank (oracle.compare.scenarios.torch_wrappers): torch
nn.Modules, so defining them imports torch. Only the rank processes import this module (wrapped_worker);
the wrappers' table, which the CLI reads to list the scenario's sub-cases, does not."""
from __future__ import annotations

import torch


class Leaf(torch.nn.Module):
    """One param and its term of the loss: a module of its own, so that FSDP2 can
    shard it as a layer (its forward is what triggers the per-layer all-gather)."""

    def __init__(self, p: torch.Tensor):
        super().__init__()
        self.w = torch.nn.Parameter(p.detach().clone())

    def forward(self, x):
        return (self.w * x).sum()


class Holder(torch.nn.Module):
    """A model that is only its params: loss = sum over params of (p * x_p).sum(),
    so the local grad of p is exactly the data x_p. Each param lives in a Leaf."""

    def __init__(self, groups: list[list[torch.Tensor]]):
        super().__init__()
        self.groups = groups
        self.leaves = torch.nn.ModuleList(Leaf(p) for ps in groups for p in ps)

    def layers(self) -> list[list[Leaf]]:
        out, k = [], 0
        for ps in self.groups:
            out.append(list(self.leaves[k:k + len(ps)]))
            k += len(ps)
        return out

    def param_groups(self) -> list[list[torch.nn.Parameter]]:
        """Read afresh on every call: FSDP2 replaces the registered params by DTensors."""
        return [[leaf.w for leaf in row] for row in self.layers()]

    def forward(self, data):
        out = None
        for row, xs in zip(self.layers(), data):
            for leaf, x in zip(row, xs):
                term = leaf(x)
                out = term if out is None else out + term
        return out
