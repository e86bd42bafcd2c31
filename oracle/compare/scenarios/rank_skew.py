"""Rank skew: a group empty on some ranks, sharded checkpoints, real processes."""
from __future__ import annotations

import os
import pickle
import time
from dataclasses import replace

from ..lazy_torch import torch


from ..isolation import ranks
from ..measuring.checks import CheckResult
from . import scenario
from .common import base_hparams, without_decay, finish, guarded, new_result, skip, shaped_for, unavailable


RANK_SKEW_WORLDS = (2, 4)
RANK_SKEW_STEPS = (3, 3)  # steps before the checkpoint, steps after resuming


def target_spec(target) -> str | None:
    """How a worker process finds the target again: a registry name (built-in, third-party or an
    optimizer record's own) or an impl spec; None for a target the registry does not list."""
    if target.name.startswith("impl:"):
        return target.name
    from ..registry import every_target
    return target.name if any(t.name == target.name for t in every_target()) else None


@guarded
def run_rank_skew(target, device="cpu", seed=0, worlds=RANK_SKEW_WORLDS, timeout=120.0, spawn=False):
    """Rank skew: real processes (gloo on CPU, NCCL on CUDA), 2 and 4 ranks.

    Group 0 (decay) is populated on every rank; group 1 (no decay: norm
    weights) only on even ranks, as under pipeline/expert parallelism. After
    K steps every rank saves its shard; on resume rank r takes over the
    optimizer shard of rank r+1 (param_groups with their counters, group 0's
    state) while keeping its own norm weights and their state. Counters,
    values (oracle lockstep) and the saved counters are checked on every rank,
    and the resumed run must equal the uninterrupted one bit for bit.
    """
    t0 = time.perf_counter()
    steps = sum(RANK_SKEW_STEPS)
    result = new_result(target, "rank_skew", "fp32/" + "+".join(f"w{w}" for w in worlds), "float32",
                        rank_skew_hparams(target.optimizer), seed, steps)
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    spec = target_spec(target)
    spawn = spawn or device.startswith("cuda") or bool(target.no_fork)
    if spec is None and spawn:
        return skip(result, f"{target.name} cannot be reconstructed in a spawned worker process "
                            "(neither a builtin target nor an impl:module:Name spec); "
                            + (target.no_fork or "CUDA needs spawn"))
    checks, notes = {}, []
    for world in worlds:
        per_rank, err = launch_ranks(spec, target, device, seed, world, timeout + target.start_s, spawn)
        if err:
            result.status, result.reason = "error", f"world {world}: {err}"
            result.checks = {"error": CheckResult("error", passed=False, note=err)}
            result.seconds = time.perf_counter() - t0
            return result
        merge_ranks(checks, per_rank, f"world {world}")
    return finish(target, result, checks, t0, notes)


def merge_ranks(checks: dict, per_rank: list, label: str) -> None:
    """Fold every rank's {check: CheckResult} into `checks`: counts, worst
    measures, rank 0's notes, findings prefixed with `label` (e.g. "world 2")."""
    for rank, rank_checks in enumerate(per_rank):
        for name, c in rank_checks.items():
            merged = checks.setdefault(name, CheckResult(name))
            merged.compared += c.compared
            merged.merge_measures(c)  # worst ratio with its error and bound, per-step series
            if c.note and rank == 0:
                merged.note = (merged.note + " | " if merged.note else "") + f"{label}: {c.note}"
            for f in c.findings:
                merged.fail(replace(f, tensor=f"{label} {f.tensor}"), keep=8)
            if not c.passed:
                merged.passed = False


def rank_skew_hparams(optimizer: str) -> list[dict]:
    base = (base_hparams(optimizer) or {})
    return [dict(base), without_decay(optimizer, base)]


def launch_ranks(spec, target, device, seed, world, timeout, spawn=False):
    """`world` worker processes (oracle.compare.scenarios.rank_worker) through the one
    launcher (oracle.compare.isolation.ranks); returns ([per-rank {check: CheckResult}],
    error text or None).

    On CPU the workers are forked from this process (no torch re-import, a
    few hundred ms per world; the target object is inherited). On CUDA,
    which cannot be forked once initialized, they are fresh interpreters
    that find the target again by name."""
    with ranks.workdir("rank_skew_") as tmp:
        job = {"spec": spec, "optimizer": target.optimizer, "convention": target.convention, "seed": seed,
               "device": device, "steps": RANK_SKEW_STEPS, "hparams": rank_skew_hparams(target.optimizer),
               "out": tmp}
        with open(os.path.join(tmp, "job.pkl"), "wb") as fh:
            pickle.dump(job, fh)
        env = ranks.rank_env(world)
        # A forked child inherits an initialized default process group (e.g. one
        # DeepSpeed set up in this process) and could not start its own.
        inherited = torch.distributed.is_available() and torch.distributed.is_initialized()
        if not spawn and not inherited and "fork" in __import__("multiprocessing").get_all_start_methods():
            from . import rank_worker
            _warm_up(target, job)
            out, err = ranks.fork(rank_worker.forked, lambda rank: (job, rank, world, target, env), world, tmp,
                                  timeout, env)
        else:
            out, err = ranks.spawn(ranks.python_module("oracle.compare.scenarios.rank_worker", os.path.join(tmp, "job.pkl")),
                                   world, tmp, timeout, env)
        return [o for o in out if o is not None], err


def _warm_up(target, job) -> None:
    """Run one step in the parent so that forked workers inherit what the first
    optimizer __init__ (torch._dynamo) and first step (an extension) load."""
    import torch.distributed.distributed_c10d  # noqa: F401
    shape = shaped_for(target, [(2,)])[0]  # a param the optimizer takes (Muon's: a matrix)
    warm = torch.zeros(shape, requires_grad=True)
    warm.grad = torch.zeros(shape)
    target.make([{"params": [warm], **job["hparams"][0]}], {}).step()


SCENARIO = scenario("rank_skew", run_rank_skew)
