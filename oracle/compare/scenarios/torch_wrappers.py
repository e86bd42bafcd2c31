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
    fsdp2             FSDP2 fully_shard of the root, fp32; fsdp2_layers: each
    fsdp2_layers      param's Leaf sharded, then the root; fsdp2_bf16: per
    fsdp2_bf16        layer with MixedPrecisionPolicy(bf16 params, fp32
                      reduce). Params, grads and state are DTensor shards
                      (dim 0; a param with fewer rows than ranks is empty on
                      some), read whole through a Gathered view. Checkpoints:
                      get/set_optimizer_state_dict(full_state_dict=True).
    dcp_reshard       FSDP2 per layer; checkpoints are
                      torch.distributed.checkpoint's sharded dcp.save/dcp.load,
                      resharded 4->2, 4->1, 2->4, 1->4.

Wrappers that cannot run here would be listed in UNAVAILABLE with the reason
(docs/wrappers.md); every wrapper named so far runs on CPU.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..lazy_torch import torch

if TYPE_CHECKING:  # the model is defined where only rank processes import it
    from .torch_modules import Holder


def full(t):
    """The whole tensor behind a (possibly sharded) one: DTensor.full_tensor() is a
    collective, so every rank must call this for the same tensors in the same order."""
    from torch.distributed.tensor import DTensor
    return t.full_tensor() if isinstance(t, DTensor) else t


class GatheredState(Mapping):
    """opt.state seen through full params: an entry is gathered when it is read.

    Which params have state, and which sharded entries, is agreed by all ranks
    first (one all_gather_object): a rank whose optimizer skipped a param (an
    empty shard, say) still takes part in the gathers, contributing zeros for
    its shard, so the view cannot deadlock or mismatch collectives; its own
    plain entries (the counter) stay missing, which the counter check reports."""

    def __init__(self, opt, sharded: dict):
        self.opt, self.sharded = opt, sharded
        mine = [None if p not in opt.state else
                {k: str(v.dtype) for k, v in opt.state[p].items() if _is_dtensor(v)}
                for _, p in sharded.values()]
        everyone = [mine]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            everyone = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(everyone, mine)
        self.sharded_keys = {}  # id(full param) -> {sharded key: dtype name}, for params some rank has state for
        for j, (fp, _) in enumerate(sharded.values()):
            rows = [row[j] for row in everyone if row[j] is not None]
            if rows:
                self.sharded_keys[id(fp)] = {k: d for row in reversed(rows) for k, d in row.items()}

    def _param(self, fp):
        hit = self.sharded.get(id(fp))
        if hit is None or hit[0] is not fp or id(fp) not in self.sharded_keys:
            raise KeyError("no state")
        return hit[1]

    def __getitem__(self, fp) -> dict:
        p = self._param(fp)
        own = self.opt.state[p] if p in self.opt.state else {}
        out = {k: v for k, v in own.items() if not _is_dtensor(v)}
        for key, dtype in sorted(self.sharded_keys[id(fp)].items()):
            out[key] = full(own[key] if key in own else _zeros_like_shard(p, getattr(torch, dtype.split(".")[-1])))
        return out

    def __iter__(self):
        return (fp for fp, _ in self.sharded.values() if id(fp) in self.sharded_keys)

    def __len__(self) -> int:
        return len(self.sharded_keys)


def _is_dtensor(v) -> bool:
    from torch.distributed.tensor import DTensor
    return isinstance(v, DTensor)


def _zeros_like_shard(p, dtype):
    """A DTensor laid out like param p, zeros in this rank's shard."""
    from torch.distributed.tensor import DTensor
    return DTensor.from_local(torch.zeros(p.to_local().shape, dtype=dtype), p.device_mesh, p.placements,
                              shape=p.shape, stride=p.stride())


class Gathered:
    """An optimizer over DTensor params as the oracle sees it: param_groups and
    state hold the full tensors (gathered on every access, a collective), the
    counters as they are (FSDP2 keeps them as plain per-rank tensors). Read-only:
    what the lockstep and the construction checks read instead of the optimizer."""

    def __init__(self, opt: torch.optim.Optimizer):
        self.opt = opt
        self._sharded = {}  # id(full param handed out) -> the optimizer's own param

    @property
    def param_groups(self) -> list[dict]:
        groups = []
        self._sharded = {}
        for group in self.opt.param_groups:
            ps = []
            for p in group["params"]:
                fp = full(p.detach())
                self._sharded[id(fp)] = (fp, p)
                ps.append(fp)
            groups.append({**group, "params": ps})
        return groups

    @property
    def state(self) -> "GatheredState":
        """Keyed by the full params of the last param_groups read; each entry gathered when read."""
        if not self._sharded:
            self.param_groups  # noqa: B018 - builds the key map
        return GatheredState(self.opt, self._sharded)

    def state_dict(self):
        return self.opt.state_dict()


@dataclass
class Wrapped:
    """One rank's training setup.

    model: what forward/backward run through (the DDP or FSDP module).
    params: the model params, per group, as the model holds them (full
    tensors, or DTensor shards under FSDP2: read them through `full`).
    opt: what step() is called on; inner: what holds this rank's state as the
    oracle reads it (the target-built optimizer, or a Gathered view of it);
    local: per group, the positions i of the params `inner` steps on this rank
    (in inner.param_groups order).
    full_state_dict(): collective, the whole optimizer state (on rank 0; None
    or {} elsewhere where the wrapper gathers), what the final states compare.
    save(folder) / restore(folder): collective, the wrapper's own checkpoint
    of the optimizer state; restore may run at another world size.
    checkpoint_state(): collective, the state dict the wrapper's checkpoint
    would write now (called on a fresh setup before any step: it must change nothing).
    """

    model: torch.nn.Module
    params: list
    opt: object
    inner: object
    local: list
    full_state_dict: Callable = None
    save: Callable = None
    restore: Callable = None
    checkpoint_state: Callable = None


@dataclass(frozen=True)
class DistWrapper:
    name: str
    doc: str
    build: Callable  # (target, module: Holder, hparams: list[dict]) -> Wrapped
    worlds: tuple = (1, 2, 4)
    # (source world, destination world): checkpoint saved at one, continued at the other
    reshards: tuple = ((4, 2), (4, 1), (1, 4))
    dtensor: bool = False  # the optimizer is handed DTensor params (FSDP2)


def _positions(module_groups, inner_groups) -> list:
    ids = [{id(p): i for i, p in enumerate(ps)} for ps in module_groups]
    return [[ids[g][id(p)] for p in group["params"]] for g, group in enumerate(inner_groups)]


def _groups(module: Holder, hparams):
    return [{"params": ps, **hp} for ps, hp in zip(module.param_groups(), hparams)]


def _whole_file(w: Wrapped, full: Callable, load: Callable) -> None:
    """Checkpoints as one file of the whole state, written by rank 0, read by every rank."""
    import os

    def save(folder):
        sd = full()
        if torch.distributed.get_rank() == 0:
            torch.save(sd, os.path.join(folder, "optim.pt"))
        torch.distributed.barrier()

    def restore(folder):
        load(torch.load(os.path.join(folder, "optim.pt"), weights_only=True))

    w.full_state_dict, w.save, w.restore, w.checkpoint_state = full, save, restore, full


def build_ddp(target, module: Holder, hparams) -> Wrapped:
    from torch.nn.parallel import DistributedDataParallel as DDP
    # ~64 bytes a bucket: several buckets, so most grads are views at a nonzero offset
    model = DDP(module, gradient_as_bucket_view=True, bucket_cap_mb=64 / 2 ** 20)
    opt = target.make(_groups(module, hparams), {})
    w = Wrapped(model, module.param_groups(), opt, opt, _positions(module.param_groups(), opt.param_groups))
    _whole_file(w, opt.state_dict, opt.load_state_dict)
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
    _whole_file(w, full, zero.load_state_dict)
    return w


def fsdp2_builder(per_layer: bool, bf16: bool, dcp: bool) -> Callable:
    """FSDP2 (fully_shard on a CPU device mesh of the whole world): every param
    sharded on dim 0 (rank r holds rows [r*ceil(n/W), ...), empty past the end),
    the target's optimizer built on the DTensor params. per_layer: each Leaf is
    a shard group of its own (an all-gather per layer), else the root is the only
    one. bf16: MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32):
    the sharded fp32 params are the masters the optimizer steps, forward and
    backward run on their bf16 all-gathered copies, and the grads are cast to
    fp32 before the reduce-scatter (the mean over ranks), so the optimizer sees
    fp32 grads. dcp: checkpoints are torch.distributed.checkpoint's sharded ones
    (dcp.save/dcp.load of get_optimizer_state_dict), else a whole-state file
    (get_optimizer_state_dict(full_state_dict=True) on rank 0,
    set_optimizer_state_dict(full_state_dict=True) on every rank)."""

    def build(target, module: Holder, hparams) -> Wrapped:
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                             set_optimizer_state_dict)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
        policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16
                  else MixedPrecisionPolicy())
        if per_layer:
            for leaf in module.leaves:
                fully_shard(leaf, mesh=mesh, mp_policy=policy)
        fully_shard(module, mesh=mesh, mp_policy=policy)
        opt = target.make(_groups(module, hparams), {})
        every = [list(range(len(ps))) for ps in module.param_groups()]
        w = Wrapped(module, module.param_groups(), opt, Gathered(opt), every)
        whole = StateDictOptions(full_state_dict=True, cpu_offload=True)

        def full_sd():
            return get_optimizer_state_dict(module, opt, options=whole)

        def load_full(sd):
            set_optimizer_state_dict(module, opt, sd, options=StateDictOptions(full_state_dict=True))

        _whole_file(w, full_sd, load_full)
        w.checkpoint_state = lambda: get_optimizer_state_dict(module, opt)
        if dcp:
            _dcp(w, module, opt)
        return w

    return build


def _dcp(w: Wrapped, module, opt) -> None:
    """torch.distributed.checkpoint: every rank writes its own shards; loading
    at another world size reads the slices of them its new shards cover."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    def save(folder):
        dcp.save({"optim": get_optimizer_state_dict(module, opt)}, checkpoint_id=folder)

    def restore(folder):
        # the template's tensors (allocated by a zero-lr step inside
        # get_optimizer_state_dict) are overwritten, counters included
        sd = {"optim": get_optimizer_state_dict(module, opt)}
        dcp.load(sd, checkpoint_id=folder)
        set_optimizer_state_dict(module, opt, sd["optim"])

    w.save, w.restore = save, restore


WRAPPERS = {
    "ddp_bucket_view": DistWrapper("ddp_bucket_view", "DDP(gradient_as_bucket_view=True), small buckets", build_ddp),
    "zero_redundancy": DistWrapper("zero_redundancy", "ZeroRedundancyOptimizer (ZeRO-1) over DDP", build_zero),
    "fsdp2": DistWrapper("fsdp2", "FSDP2 fully_shard of the root only, fp32",
                         fsdp2_builder(per_layer=False, bf16=False, dcp=False), dtensor=True),
    "fsdp2_layers": DistWrapper("fsdp2_layers", "FSDP2 fully_shard per layer and root, fp32",
                                fsdp2_builder(per_layer=True, bf16=False, dcp=False), dtensor=True),
    "fsdp2_bf16": DistWrapper("fsdp2_bf16", "FSDP2 per layer, MixedPrecisionPolicy(bf16 params, fp32 reduce)",
                              fsdp2_builder(per_layer=True, bf16=True, dcp=False), dtensor=True),
    "dcp_reshard": DistWrapper("dcp_reshard", "FSDP2 per layer, torch.distributed.checkpoint sharded save/load",
                               fsdp2_builder(per_layer=True, bf16=False, dcp=True),
                               reshards=((4, 2), (4, 1), (2, 4), (1, 4)), dtensor=True),
}

# Wrappers the task names that are not run (yet), with why: the report and docs carry this text.
UNAVAILABLE: dict = {}

__all__ = ["DistWrapper", "Gathered", "UNAVAILABLE", "WRAPPERS", "Wrapped", "build_ddp",
           "build_zero", "fsdp2_builder", "full"]
