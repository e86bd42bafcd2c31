"""Worker process of the rank_skew scenario (oracle.compare.scenarios.rank_skew).

    python -m oracle.compare.scenarios.rank_worker JOB.pkl     with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set

Global model, W ranks: decay tensors D_0..D_{W-1} (group 0), norm weights
N_0..N_{W/2-1} (group 1, no decay). Phase 1 (K steps): rank r owns D_r and,
on even ranks, N_{r/2}; odd ranks hold an empty group 1. Every rank saves
its optimizer shard. Phase 2 (E steps): rank r takes over the shard of
rank src = (r+1) % W (its param_groups with their counters, D_src and its
state) and keeps its own norm weights with their state: an even rank's
populated group 1 gets its counter from an odd rank's empty group 1.

Checked on every rank: oracle lockstep (values and counters) in both phases,
every saved group's counter (per-group convention: present, never None,
equal to K), and the resumed run against an uninterrupted run of the same
layout, bit for bit. Results go to <out>/rank<r>.pkl as {check: CheckResult}.
"""
from __future__ import annotations

import copy
import os
import pickle
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from ..checking.bitwise import compare_bits, state_bits
from ..measuring.checks import CheckResult, compare_exact
from ..checking.lockstep import Lockstep
from .common import grad_values, tensor, values


def find_target(spec: str, optimizer: str, convention):
    from dataclasses import replace

    from ..registry import every_target, load_impl
    if spec.startswith("impl:"):
        return load_impl(spec[5:], optimizer=optimizer, convention=convention)
    target = next(t for t in every_target() if t.name == spec)
    return replace(target, convention=convention)


def layout(world: int, rank: int, phase: int):
    """(decay tensor names, norm tensor names) this rank holds in a phase."""
    decay = [f"D{rank if phase == 1 else (rank + 1) % world}"]
    norm = [f"N{rank // 2}"] if rank % 2 == 0 else []
    return decay, norm


SHAPES = {"D": (4, 3), "N": (3,)}


def ranks_of(target):
    import oracle
    return oracle.SPECS[target.optimizer].param_ranks


def shape_of(name: str, ranks) -> tuple:
    """The tensor's shape as the optimizer takes params of `ranks` (oracle.spec.shaped: Muon's matrices)."""
    from oracle.spec import shaped
    return shaped(SHAPES[name[0]], ranks)


def make(seed, names, device, ranks=None):
    return [tensor(values(seed, shape_of(n, ranks), "float32", 1.0, "rank_skew", n), "float32", device) for n in names]


def grads_for(seed, names, k, ranks=None):
    return [grad_values(seed, ("rank_skew", n), k, shape_of(n, ranks), "float32") for n in names]


def set_grads(groups, names, seed, k, ranks=None):
    grads = [grads_for(seed, ns, k, ranks) for ns in names]
    for ps, gs in zip(groups, grads):
        for p, g in zip(ps, gs):
            p.grad = torch.tensor(g, dtype=p.dtype, device=p.device)
    return grads


def counters_of(sd) -> list:
    """Per group: the group counter, or the per-param counters, as saved."""
    out = []
    for group in sd["param_groups"]:
        if "step" in group:
            out.append(_plain(group["step"]))
        else:
            out.append([_plain(sd["state"].get(i, {}).get("step")) for i in group["params"]])
    return out


def _plain(v):
    from ..measuring.readback import counter_value
    return counter_value(v) if isinstance(v, (torch.Tensor, int, float)) else v


def forked(job: dict, rank: int, world: int, target, env: dict) -> None:
    """Entry point of a forked worker (CPU): the target object is inherited."""
    import traceback
    os.environ.update({**env, "RANK": str(rank), "LOCAL_RANK": str(rank)})
    code = 0
    try:
        torch.set_num_threads(1)
        run_rank(job, rank, world, target, teardown=False)
    except BaseException:  # noqa: BLE001 - reported through the log and the exit code
        with open(os.path.join(job["out"], f"rank{rank}.log"), "a") as fh:
            fh.write(traceback.format_exc())
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(job_path: str) -> None:
    """Entry point of a spawned worker: the target is reconstructed by name."""
    with open(job_path, "rb") as fh:
        job = pickle.load(fh)
    run_rank(job, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))


def run_rank(job: dict, rank: int, world: int, target=None, teardown: bool = True) -> None:
    device = job["device"]
    if device.startswith("cuda"):
        device = f"cuda:{rank % torch.cuda.device_count()}"
        torch.cuda.set_device(device)
    backend = "nccl" if device.startswith("cuda") and torch.cuda.device_count() >= world else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    if target is None:
        target = find_target(job["spec"], job["optimizer"], job["convention"])
    seed, hp, (K, E) = job["seed"], job["hparams"], job["steps"]
    checks = {n: CheckResult(n) for n in ("lockstep", "counters", "checkpoint", "resume")}
    per_group = target.convention.counter == "group"
    label = f"rank {rank} "

    # phase 1
    names = layout(world, rank, 1)
    params = [make(seed, ns, device, ranks_of(target)) for ns in names]
    opt = target.make([{"params": ps, **h} for ps, h in zip(params, hp)], {})
    ls = Lockstep(target, opt, hp, checks["lockstep"], checks["counters"], label)
    for k in range(1, K + 1):
        grads = set_grads(params, names, seed, k, ranks_of(target))
        ls.step(k, grads)
    sd = opt.state_dict()
    for g, group in enumerate(sd["param_groups"]):
        if target.convention.counter == "none":  # nothing to save (torch SGD); values still checked below
            continue
        if per_group:
            got = _plain(group.get("step"))
            compare_exact(checks["checkpoint"], K, f"{label}group {g} step ({'empty' if not group['params'] else 'populated'})",
                          K, got, "counter missing from the saved shard (null)" if got is None else "")
        else:
            for i in group["params"]:
                compare_exact(checks["checkpoint"], K, f"{label}group {g} param {i} step", K,
                              _plain(sd["state"].get(i, {}).get("step")))
    torch.save({"opt": sd, "names": names, "params": [[p.detach().cpu().clone() for p in ps] for ps in params]},
               os.path.join(job["out"], f"shard{rank}.pt"))
    table = [None] * world
    dist.all_gather_object(table, counters_of(sd))
    dist.barrier()

    # phase 2: rank r loads the optimizer shard of rank r+1
    src = (rank + 1) % world
    theirs = torch.load(os.path.join(job["out"], f"shard{src}.pt"), weights_only=True, map_location=device)
    mine = torch.load(os.path.join(job["out"], f"shard{rank}.pt"), weights_only=True, map_location=device)
    names = layout(world, rank, 2)

    def lookup(ckpt, name):
        flat = [n for ns in ckpt["names"] for n in ns]
        ids = [i for g in ckpt["opt"]["param_groups"] for i in g["params"]]
        j = flat.index(name)
        value = [p for ps in ckpt["params"] for p in ps][j]
        return value, ckpt["opt"]["state"].get(ids[j], {})

    merged = {"state": {}, "param_groups": []}
    params, idx = [], 0
    for g, ns in enumerate(names):
        row, ids = [], []
        for n in ns:
            value, st = lookup(theirs if n.startswith("D") else mine, n)
            row.append(value.to(device).clone().requires_grad_())
            if st:
                merged["state"][idx] = copy.deepcopy(st)
            ids.append(idx)
            idx += 1
        params.append(row)
        merged["param_groups"].append({**copy.deepcopy(theirs["opt"]["param_groups"][g]), "params": ids})
    opt = target.make([{"params": ps, **h} for ps, h in zip(params, hp)], {})
    opt.load_state_dict(merged)
    ls = Lockstep(target, opt, hp, checks["lockstep"], checks["counters"], label + "(resumed) ")
    ls.set_counters(K)
    for k in range(K + 1, K + E + 1):
        grads = set_grads(params, names, seed, k, ranks_of(target))
        ls.step(k, grads)

    # the uninterrupted run of the phase-2 layout
    ref_params = [make(seed, ns, device, ranks_of(target)) for ns in names]
    ref = target.make([{"params": ps, **h} for ps, h in zip(ref_params, hp)], {})
    for k in range(1, K + E + 1):
        set_grads(ref_params, names, seed, k, ranks_of(target))
        ref.step()
    compare_bits(checks["resume"], K + E, {f"{label}{k}": v for k, v in state_bits(ref).items()},
                 {f"{label}{k}": v for k, v in state_bits(opt).items()},
                 f"resumed from rank {src}'s shard at step {K}; compared with the uninterrupted run")
    final = [None] * world
    dist.all_gather_object(final, counters_of(opt.state_dict()))
    if rank == 0:
        checks["checkpoint"].note = f"saved counters per rank at step {K}: {table}; after resume: {final}"
    with open(os.path.join(job["out"], f"rank{rank}.pkl"), "wb") as fh:
        pickle.dump(checks, fh)
    dist.barrier()
    # A forked rank ends in os._exit right after (teardown=False): destroying the gloo group while the
    # other ranks exit aborted a rank once in CI ("terminate called without an active exception",
    # exit -6) after it had written its results; the OS closes the group's sockets either way.
    if teardown:
        dist.destroy_process_group()


if __name__ == "__main__":
    from ..isolation.ranks import rank_started
    rank_started()  # die with the launcher
    main(sys.argv[1])
