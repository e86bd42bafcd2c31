"""Wrapped: torch's distributed wrappers around the optimizer, real processes.

One scenario per wrapper (oracle.compare.scenarios.torch_wrappers.WRAPPERS), all run
by run_wrapped: the wrapper is its parameter. Each world size runs in
forked gloo ranks (oracle.compare.isolation.ranks); every reshard pair continues, at
its destination world size, the checkpoint its source world size saved.
"""
from __future__ import annotations

import os
import pickle
import time

from ..lazy_torch import torch

from ..isolation import ranks
from ..measuring.checks import CheckResult
from .torch_wrappers import WRAPPERS
from . import Scenario
from .common import finish, guarded, new_result, skip, unavailable
from .rank_skew import merge_ranks, rank_skew_hparams, target_spec

WRAPPED_STEPS = (3, 2)  # steps before the checkpoint, steps after it


@guarded
def run_wrapped(target, device="cpu", seed=0, wrapper="ddp_bucket_view", worlds=None, timeout=120.0):
    """A torch distributed wrapper around the target's optimizer (gloo, worlds 1, 2, 4).

    Checks on every rank: construction (nothing changes before the first
    step), checkpoint_init (taking the wrapper's checkpoint state dict before
    the first step, on a fresh setup, changes nothing), lockstep + counters (the optimizer holding the rank's state
    against the oracle, on the grads the wrapper produced), allreduce (the
    data-parallel grad is the exact mean of the global batch), sync (all
    ranks hold the same full params after each step) and reshard (state
    saved whole at one world size, continued at another, equals the
    uninterrupted run bit for bit, counters included). Sharded (FSDP2)
    params, grads and state are read whole (DTensor.full_tensor)."""
    timeout = timeout + target.start_s  # each rank compiles afresh (Target.start_s)
    t0 = time.perf_counter()
    spec = WRAPPERS[wrapper]
    worlds = tuple(worlds or spec.worlds)
    hp = rank_skew_hparams(target.optimizer)
    result = new_result(target, wrapper, "fp32/" + "+".join(f"w{w}" for w in worlds), "float32", hp, seed,
                        sum(WRAPPED_STEPS))
    reason = unavailable(target, device)
    if reason is None and device != "cpu":
        reason = "the wrapped scenario runs gloo ranks on CPU"
    if reason is None and not torch.distributed.is_available():
        reason = "torch.distributed is not available in this torch build"
    if reason is None and spec.dtensor and target.no_dtensor:
        reason = f"{wrapper} hands the optimizer DTensor params, and {target.name} cannot take them: {target.no_dtensor}"
    if reason:
        return skip(result, reason)
    checks: dict = {}
    pairs = [(a, b) for a, b in spec.reshards if a in worlds and b in worlds]
    with ranks.workdir(f"wrapped_{wrapper}_") as tmp:
        for world in worlds:
            err = _launch(target, spec, checks, tmp, world, {"mode": "run"}, seed, hp, timeout)
            if err:
                return _error(result, f"world {world}: {err}", t0)
        for src, dst in pairs:
            err = _launch(target, spec, checks, tmp, dst, {"mode": "resume", "src_world": src,
                                                          "ckpt": os.path.join(tmp, f"ckpt_w{src}"),
                                                          "final": os.path.join(tmp, f"final_w{src}.pt")},
                          seed, hp, timeout, label=f"world {src}->{dst}")
            if err:
                return _error(result, f"reshard {src}->{dst}: {err}", t0)
    notes = [] if pairs else ["reshard part skipped: no (source, destination) pair among the worlds run"]
    return finish(target, result, checks, t0, notes)


def _launch(target, spec, checks, tmp, world, extra, seed, hp, timeout, label=None):
    from . import wrapped_worker
    out = os.path.join(tmp, f"{extra['mode']}_w{world}_{extra.get('src_world', '')}")
    os.makedirs(out)
    job = {"seed": seed, "hparams": hp, "steps": WRAPPED_STEPS, "device": "cpu", "out": out,
           "ckpt_out": os.path.join(tmp, f"ckpt_w{world}"), "final_out": os.path.join(tmp, f"final_w{world}.pt"),
           **extra}
    env = ranks.rank_env(world)
    # A forked child inherits an initialized default process group (one DeepSpeed
    # set up in this process, say) and could neither start its own nor drop the
    # inherited one (its shutdown waits on threads fork did not copy): such a
    # parent spawns fresh interpreters that find the target and wrapper by name.
    if torch.distributed.is_initialized():
        name = target_spec(target)
        if name is None:
            return (f"this process already has a default process group, so ranks must be spawned, and "
                    f"{target.name} cannot be found by name in a fresh interpreter (not a registry target "
                    f"or an impl:module:Name spec)")
        job.update(spec=name, optimizer=target.optimizer, convention=target.convention, wrapper=spec.name)
        path = os.path.join(out, "job.pkl")
        with open(path, "wb") as fh:
            pickle.dump(job, fh)
        per_rank, err = ranks.spawn(ranks.python_module("oracle.compare.scenarios.wrapped_worker", path), world,
                                    out, timeout, env)
    else:
        per_rank, err = ranks.fork(wrapped_worker.forked, lambda rank: (job, rank, world, target, spec, env), world,
                                   out, timeout, env)
    if err:
        return err
    merge_ranks(checks, per_rank, label or f"world {world}")
    return None


def _error(result, text, t0):
    result.status, result.reason = "error", text
    result.checks = {"error": CheckResult("error", passed=False, note=text)}
    result.seconds = time.perf_counter() - t0
    return result


def _scenario(name: str) -> Scenario:
    def run(target, device="cpu", seed=0, **kwargs):
        return run_wrapped(target, device, seed, wrapper=name, **kwargs)
    run.__name__ = f"run_{name}"
    doc = (run_wrapped.__doc__ or "").split("\n\n")
    run.__doc__ = f"{WRAPPERS[name].doc}: " + doc[0].split(": ", 1)[0] + ".\n\n" + "\n\n".join(doc[1:])
    return Scenario(name, run.__doc__.split("\n\n")[0].strip(), run, in_default=False)


SCENARIOS = tuple(_scenario(name) for name in WRAPPERS)
