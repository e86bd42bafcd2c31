"""Worker process of the wrapped scenario (oracle.compare.scenarios.wrapped): one
rank of a torch.distributed (gloo) run of a DistWrapper around a target.

Data: per step k and param, a global batch of 4 contributions c_j, each n/256
for an integer |n| <= 64. Rank r of W takes its 4/W of them and its local
grad is their mean; DDP averages the local grads. All of that is exact in
float32 for W in {1, 2, 4}, so the grad every rank sees is the same for every
world size (the continuation of a checkpoint at another world size can equal
the uninterrupted run bit for bit) and equals the float64 mean exactly.

mode "run" (world W): construct (check: nothing changed; on a second,
fresh setup, taking the wrapper's checkpoint state dict before any step
changes nothing either), K steps in lockstep with the oracle, save a
checkpoint the wrapper's way (DistWrapper: one whole-state file, or
torch.distributed.checkpoint shards), E more steps, save the final state.
mode "resume" (world W'): restore the checkpoint saved at step K by a run at
another world size, E steps in lockstep, then the final state must equal
that run's final state bit for bit. Results go to <out>/rank<r>.pkl as
{check: CheckResult}.

Under FSDP2 params, grads and optimizer state are DTensor shards: every
check reads their full tensors (torch_wrappers.full, a collective, so every
rank reads the same tensors in the same order).
"""
from __future__ import annotations

import os
import pickle
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from ..checking.bitwise import compare_bits
from ..measuring.checks import CheckResult, Finding, same_bits
from .torch_wrappers import full
from ..checking.lockstep import Lockstep
from .common import rng, shaped_for, tensor, values

SHAPES = [[(4, 3), (5,), (3, 2), (6,), (2, 2)], [(3,)]]  # group 1: one norm weight, empty on all ranks but one
BATCH = 4  # global contributions per step


def contributions(seed: int, g: int, i: int, k: int, shapes=SHAPES) -> np.ndarray:
    """The BATCH contributions to param (g, i)'s grad at step k: n/256, |n| <= 64."""
    shape = shapes[g][i]
    return rng(seed, "wrapped", g, i, k).integers(-64, 65, size=(BATCH, *shape)) / 256.0


def local_data(seed: int, k: int, rank: int, world: int, shapes=SHAPES) -> list:
    share = BATCH // world
    return [[contributions(seed, g, i, k, shapes)[rank * share:(rank + 1) * share].mean(axis=0)
             for i in range(len(ss))] for g, ss in enumerate(shapes)]


def global_grads(seed: int, k: int, shapes=SHAPES) -> list:
    return [[contributions(seed, g, i, k, shapes).mean(axis=0) for i in range(len(ss))] for g, ss in enumerate(shapes)]


def initial(seed: int, device: str, shapes=SHAPES) -> list:
    return [[tensor(values(seed, s, "float32", 1.0, "wrapped", g, i), "float32", device, leaf=False)
             for i, s in enumerate(ss)] for g, ss in enumerate(shapes)]


def shapes_of(target) -> list:
    """SHAPES as the target's optimizer takes params (Muon: each as a matrix of as many elements)."""
    return shaped_for(target, SHAPES)


def forked(job: dict, rank: int, world: int, target, wrapper, env: dict) -> None:
    """Entry point of a forked worker: target and wrapper are inherited."""
    import traceback
    os.environ.update({**env, "RANK": str(rank), "LOCAL_RANK": str(rank)})
    code = 0
    try:
        torch.set_num_threads(1)
        run_rank(job, rank, world, target, wrapper, teardown=False)
    except BaseException:  # noqa: BLE001 - reported through the log and the exit code
        with open(os.path.join(job["out"], f"rank{rank}.log"), "a") as fh:
            fh.write(traceback.format_exc())
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(job_path: str) -> None:
    """Entry point of a spawned worker: target and wrapper are found again by name."""
    from .torch_wrappers import WRAPPERS
    from .rank_worker import find_target
    with open(job_path, "rb") as fh:
        job = pickle.load(fh)
    torch.set_num_threads(1)
    target = find_target(job["spec"], job["optimizer"], job["convention"])
    run_rank(job, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), target, WRAPPERS[job["wrapper"]])


def run_rank(job: dict, rank: int, world: int, target, wrapper, teardown: bool = True) -> None:
    from .torch_modules import Holder
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    seed, hp, (K, E), device = job["seed"], job["hparams"], job["steps"], job["device"]
    checks = {n: CheckResult(n) for n in ("construction", "checkpoint_init", "lockstep", "counters", "allreduce",
                                          "sync", "reshard")}
    label = f"rank {rank} "
    resume = job["mode"] == "resume"
    saved = torch.load(os.path.join(job["ckpt"], "params.pt"), weights_only=True) if resume else None
    shapes = shapes_of(target)
    start = [[t.clone() for t in ts] for ts in saved] if resume else initial(seed, device, shapes)
    if not resume:
        _checkpoint_init(checks["checkpoint_init"], target, wrapper.build(target, Holder(start), hp), start, label)
    w = wrapper.build(target, Holder(start), hp)
    if not resume:
        _construction(checks["construction"], target, w, start, hp, label)
    else:
        w.restore(job["ckpt"])
    ls = Lockstep(target, w.opt, hp, checks["lockstep"], checks["counters"], label, inner=w.inner)
    if resume:
        ls.set_counters(K)
    first = K + 1 if resume else 1
    for k in range(first, K + E + 1):
        _backward(w, seed, k, rank, world, shapes)
        grads = _check_grads(checks["allreduce"], w, seed, k, label, shapes)
        local = [[grads[g][i] for i in pos] for g, pos in enumerate(w.local)]
        ls.step(k, local)
        _check_sync(checks["sync"], w, k, world, label)
        if k == K and not resume:
            _save(w, job["ckpt_out"], rank)
    layout, held = [None] * world, [None] * world
    dist.all_gather_object(layout, [len(ps) for ps in w.local])
    dist.all_gather_object(held, [_local(p).numel() for ps in w.params for p in ps])
    checks["lockstep"].note = (f"params per group stepped by each rank: {layout}; elements of each param held "
                               f"by each rank: {held}; grads: {_storages(w)}")
    final = w.full_state_dict()
    params = _full_params(w)
    if resume and rank == 0:
        ref = torch.load(job["final"], weights_only=True)
        compare_bits(checks["reshard"], K + E, _bits(ref["opt"], ref["params"]), _bits(final, params),
                     f"saved at step {K} at world {job['src_world']}, continued at world {world}; "
                     f"against the uninterrupted world-{job['src_world']} run")
    elif not resume and rank == 0:
        torch.save({"opt": final, "params": params}, job["final_out"])
    with open(os.path.join(job["out"], f"rank{rank}.pkl"), "wb") as fh:
        pickle.dump({k: v for k, v in checks.items() if v.compared or not v.passed or v.note}, fh)
    dist.barrier()
    # A forked rank ends in os._exit right after (teardown=False): destroying the gloo group while the
    # other ranks exit aborted a rank once in CI ("terminate called without an active exception",
    # exit -6) after it had written its results; the OS closes the group's sockets either way.
    if teardown:
        dist.destroy_process_group()


def _local(t):
    """This rank's part of a tensor (its shard under FSDP2)."""
    return t.to_local() if hasattr(t, "to_local") else t


def _full_params(w) -> list:
    """Collective: the whole params, per group (detached copies)."""
    return [[full(p.detach()).clone() for p in ps] for ps in w.params]


def _storages(w) -> str:
    """How this rank's grads are laid out after a backward: distinct storages and views at an offset."""
    grads = [_local(p.grad) for ps in w.params for p in ps if p.grad is not None]
    if not grads:
        return "no grads yet"
    storages = {g.untyped_storage().data_ptr() for g in grads}
    offset = sum(1 for g in grads if g.storage_offset() != 0)
    return f"{len(grads)} grads in {len(storages)} storage(s), {offset} at a nonzero offset"


def _construction(res: CheckResult, target, w, start, hp, label) -> None:
    """Building the wrapper changed no param and created no counter or moment."""
    from .construction import _construction_checks, _materialized
    for g, ps in enumerate(_full_params(w)):
        for i, p in enumerate(ps):
            res.compared += 1
            if not same_bits(p, start[g][i]):
                res.fail(Finding(res.check, 0, f"{label}group {g} param {i} param", expected="unchanged",
                                 got="changed", detail="changed by the wrapper's construction"))
    # the params `inner` steps, in its order (whole tensors under a Gathered view); w.local maps them to start
    local_params = [group["params"] for group in w.inner.param_groups]
    local_start = [[start[g][i] for i in pos] for g, pos in enumerate(w.local)]
    _construction_checks(res, target, w.inner, local_params, local_start, hp, label)
    _materialized(res, w.inner, w.inner, label)


def _checkpoint_init(res: CheckResult, target, w, start, label) -> None:
    """Taking the wrapper's checkpoint state dict before the first step (a
    checkpoint at step 0) changes nothing: no param, no counter, no state
    entry beyond the optimizer's eager ones. `w` is a fresh setup, dropped after."""
    import oracle
    w.checkpoint_state()
    eager = set(oracle.SPECS[target.optimizer].eager_state)
    for g, ps in enumerate(_full_params(w)):
        for i, p in enumerate(ps):
            res.compared += 1
            if not same_bits(p, start[g][i]):
                res.fail(Finding(res.check, 0, f"{label}group {g} param {i} param", expected="unchanged",
                                 got="changed", detail="changed by the checkpoint state dict before any step"))
    for g, group in enumerate(w.inner.param_groups):
        res.compared += 1
        if group.get("step") not in (None, 0):
            res.fail(Finding(res.check, 0, f"{label}group {g} step", expected="0 or absent", got=group["step"],
                             detail="counter advanced by the checkpoint state dict before any step"))
        for i, p in enumerate(group["params"]):
            for key, val in w.inner.state.get(p, {}).items():
                res.compared += 1
                if key == "step" and float(val) != 0:
                    res.fail(Finding(res.check, 0, f"{label}group {g} param {i} step", expected="0 or absent",
                                     got=float(val), detail="counter advanced by the checkpoint state dict "
                                                            "before any step (a fake zero-lr step)"))
                elif (key not in ("step", *eager) and isinstance(val, torch.Tensor) and val.is_floating_point()
                      and val.numel() and bool(val.any())):
                    # zero moments are what the first step would start from; values are not
                    res.fail(Finding(res.check, 0, f"{label}group {g} param {i} {key}", expected="absent or zeros",
                                     got=float(val.flatten()[val.flatten() != 0][0]),
                                     detail="state given values by the checkpoint state dict before any step"))


def _backward(w, seed, k, rank, world, shapes=SHAPES) -> None:
    for ps in w.params:
        for p in ps:
            if p.grad is not None:
                p.grad.zero_()  # keep bucket views (set_to_none would drop them)
    data = [[torch.tensor(x, dtype=torch.float32) for x in xs] for xs in local_data(seed, k, rank, world, shapes)]
    w.model(data).backward()


def _check_grads(res: CheckResult, w, seed, k, label, shapes=SHAPES) -> list:
    """Every grad equals the float64 mean of the global batch, exactly; returns them as float64."""
    want = global_grads(seed, k, shapes)
    out = []
    for g, ps in enumerate(w.params):
        row = []
        for i, p in enumerate(ps):
            got = full(p.grad.detach()).double().numpy().copy()
            res.compared += got.size
            if not np.array_equal(got, want[g][i]):
                j = int(np.flatnonzero(got.ravel() != want[g][i].ravel())[0])
                res.fail(Finding(res.check, k, f"{label}group {g} param {i} grad", (j,), float(want[g][i].ravel()[j]),
                                 float(got.ravel()[j]), detail="data-parallel average differs from the exact mean"))
            row.append(got)
        out.append(row)
    return out


def _check_sync(res: CheckResult, w, k, world, label) -> None:
    """After the step every rank holds the same full params (rank 0's, bit for bit)."""
    for g, ps in enumerate(w.params):
        for i, p in enumerate(ps):
            mine = full(p.detach())
            ref = mine.clone()
            dist.broadcast(ref, src=0)
            res.compared += 1
            if not same_bits(mine, ref):
                res.fail(Finding(res.check, k, f"{label}group {g} param {i} param", expected="rank 0's value",
                                 got="differs", detail=f"ranks disagree after the step (world {world})"))


def _save(w, folder, rank) -> None:
    """Collective: the params whole (rank 0, what the resumed run is built from) and the wrapper's checkpoint."""
    params = _full_params(w)
    os.makedirs(folder, exist_ok=True)
    if rank == 0:
        torch.save(params, os.path.join(folder, "params.pt"))
    dist.barrier()
    w.save(folder)
    dist.barrier()


def _bits(sd, params) -> dict:
    """A whole optimizer state dict and the params it belongs to, named like state_bits()."""
    out = {}
    for g, group in enumerate(sd["param_groups"]):
        out[f"group {g} step"] = group.get("step")
        for i, idx in enumerate(group["params"]):
            out[f"group {g} param {i} param"] = params[g][i].detach().clone()
            for key, val in sd["state"].get(idx, {}).items():
                out[f"group {g} param {i} {key}"] = val
    return out


if __name__ == "__main__":
    from ..isolation.ranks import rank_started
    rank_started()  # die with the launcher
    main(sys.argv[1])
