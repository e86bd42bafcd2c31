"""PyTorch's distributed training wrappers around an optimizer, as parameters
of the `wrapped` scenario (oracle.compare.scenarios.wrapped): what EngineSpec
is to DeepSpeed's engines, DistWrapper is to torch's own wrappers.

A DistWrapper builds, on one rank of a running process group, the training
setup around a target's optimizer over a model holding the given param
groups, and says how its optimizer state is saved whole and loaded again
(possibly at another world size). The scenario does the rest the same way
for every wrapper: construction side effects, oracle lockstep on the
optimizer that holds this rank's state, the grads' data-parallel average,
every rank holding the same full params, counters, and a checkpoint saved at
one world size and continued at another.

    ddp_bucket_view   DistributedDataParallel(gradient_as_bucket_view=True,
                      small buckets): every p.grad is a view into a flat
                      bucket at an offset; the target's optimizer steps all
                      params on every rank.
    zero_redundancy   torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO-1)
                      over DDP: each rank's local optimizer (a target-built
                      one) steps the params its partition holds, then the
                      owners broadcast. A group with fewer params than ranks
                      is empty on some ranks. Checkpoints go through
                      consolidate_state_dict(to=0).

Wrappers that cannot run here are listed in UNAVAILABLE with the reason
(docs/wrappers.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


class Holder(torch.nn.Module):
    """A model that is only its params: loss = sum over params of (p * x_p).sum(),
    so the local grad of p is exactly the data x_p."""

    def __init__(self, groups: list[list[torch.Tensor]]):
        super().__init__()
        self.groups = groups
        for g, ps in enumerate(groups):
            for i, p in enumerate(ps):
                self.register_parameter(f"g{g}p{i}", torch.nn.Parameter(p.detach().clone()))

    def param_groups(self) -> list[list[torch.nn.Parameter]]:
        return [[getattr(self, f"g{g}p{i}") for i in range(len(ps))] for g, ps in enumerate(self.groups)]

    def forward(self, data):
        out = None
        for ps, xs in zip(self.param_groups(), data):
            for p, x in zip(ps, xs):
                term = (p * x).sum()
                out = term if out is None else out + term
        return out


@dataclass
class Wrapped:
    """One rank's training setup.

    model: what forward/backward run through (the DDP module).
    params: the full model params, per group (every rank holds all of them).
    opt: what step() is called on; inner: the optimizer holding this rank's
    state (the target-built one); local: per group, the positions i of the
    params `inner` steps on this rank (in inner.param_groups order).
    """

    model: torch.nn.Module
    params: list
    opt: object
    inner: torch.optim.Optimizer
    local: list

    def full_state_dict(self):
        """Collective: the whole optimizer state (on rank 0; None elsewhere where the wrapper gathers)."""
        return self._full()

    _full: Callable = None
    load: Callable = None  # load(full state dict) on every rank


@dataclass(frozen=True)
class DistWrapper:
    name: str
    doc: str
    build: Callable  # (target, module: Holder, hparams: list[dict]) -> Wrapped
    worlds: tuple = (1, 2, 4)
    # (source world, destination world): checkpoint saved at one, continued at the other
    reshards: tuple = ((4, 2), (4, 1), (1, 4))


def _positions(module_groups, inner_groups) -> list:
    ids = [{id(p): i for i, p in enumerate(ps)} for ps in module_groups]
    return [[ids[g][id(p)] for p in group["params"]] for g, group in enumerate(inner_groups)]


def _groups(module: Holder, hparams):
    return [{"params": ps, **hp} for ps, hp in zip(module.param_groups(), hparams)]


def build_ddp(target, module: Holder, hparams) -> Wrapped:
    from torch.nn.parallel import DistributedDataParallel as DDP
    # ~64 bytes a bucket: several buckets, so most grads are views at a nonzero offset
    model = DDP(module, gradient_as_bucket_view=True, bucket_cap_mb=64 / 2 ** 20)
    opt = target.make(_groups(module, hparams), {})
    w = Wrapped(model, module.param_groups(), opt, opt, _positions(module.param_groups(), opt.param_groups))
    w._full = opt.state_dict
    w.load = opt.load_state_dict
    return w


def build_zero(target, module: Holder, hparams) -> Wrapped:
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(module)

    def local(params, **defaults):  # ZeRO builds this rank's optimizer through the target
        return target.make(params, defaults)

    zero = ZeroRedundancyOptimizer(_groups(module, hparams), optimizer_class=local)
    w = Wrapped(model, module.param_groups(), zero, zero.optim,
                _positions(module.param_groups(), zero.optim.param_groups))

    def full():
        zero.consolidate_state_dict(to=0)
        return zero.state_dict() if torch.distributed.get_rank() == 0 else None
    w._full = full
    w.load = zero.load_state_dict
    return w


WRAPPERS = {
    "ddp_bucket_view": DistWrapper("ddp_bucket_view", "DDP(gradient_as_bucket_view=True), small buckets", build_ddp),
    "zero_redundancy": DistWrapper("zero_redundancy", "ZeroRedundancyOptimizer (ZeRO-1) over DDP", build_zero),
}

# Wrappers the task names that are not run (yet), with why: the report and docs carry this text.
UNAVAILABLE = {
    "fsdp2": "FSDP2 (fully_shard) is not wired into the wrapped scenario yet: its optimizer state is DTensor "
             "shards, which the lockstep needs gathered to full tensors (DTensor.full_tensor) per param",
    "dcp_reshard": "torch.distributed.checkpoint (get/set_optimizer_state_dict) resharding is not wired in yet; "
                   "ZeroRedundancyOptimizer's consolidate_state_dict path is checked at 4->2, 4->1, 1->4",
}

__all__ = ["DistWrapper", "Holder", "UNAVAILABLE", "WRAPPERS", "Wrapped", "build_ddp", "build_zero"]
