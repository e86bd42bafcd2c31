"""LR schedule: the learning rate changes between steps, as a scheduler changes it."""
from __future__ import annotations

import time

from ..lazy_torch import torch

from ..measuring.checks import CheckResult, Finding
from ..checking.lockstep import Lockstep
from ..checking.case_run import set_grads
from . import scenario
from .common import base_hparams, without_decay, build, finish, grad_values, guarded, new_result, skip, tensor, unavailable, shaped_for, values

# step -> factor on the base lr from that step on (set in param_groups before the step, as
# torch.optim.lr_scheduler does): a decay, a warm restart above the base, and lr = 0
SCHEDULE = {1: 1.0, 3: 0.5, 5: 2.0, 7: 0.0}
LR_STEPS = 8


def frames(opt) -> int | None:
    """Frames compiled for a compiled step (oracle.compare.targets.compiled.CompiledStep), else None."""
    return getattr(getattr(opt, "step", None), "frames", None)


@guarded
def run_lr_schedule(target, device="cpu", seed=0):
    """The lr in param_groups changes at steps 3, 5 and 7 (x0.5, x2, 0) and
    every step must use the lr current at that step: lockstep against the
    oracle stepped with the same schedule. Catches a step that keeps an lr it
    read once (a compiled graph with the old lr baked in, a kernel caching its
    hyperparameters at construction). For a compiled step the note says how
    many frames were compiled: a recompilation per new lr value, or one graph
    taking lr as an input."""
    t0 = time.perf_counter()
    base = dict(base_hparams(target.optimizer) or {})
    hp = [base, without_decay(target.optimizer, base)]
    result = new_result(target, "lr_schedule", "fp32/" + ",".join(f"x{f:g}@{k}" for k, f in SCHEDULE.items()),
                        "float32", hp, seed, LR_STEPS)
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    checks = {n: CheckResult(n) for n in ("lockstep", "counters", "lr")}
    shapes = shaped_for(target, [[(5, 4), (3,)], [(6,)]])
    params = [[tensor(values(seed, s, "float32", 1.0, "lr_schedule", g, i), "float32", device)
               for i, s in enumerate(ss)] for g, ss in enumerate(shapes)]
    opt = build(target, params, hp)
    ls = Lockstep(target, opt, hp, checks["lockstep"], checks["counters"])
    seen = []
    for k in range(1, LR_STEPS + 1):
        if k in SCHEDULE:
            for g, group in enumerate(opt.param_groups):
                new = base["lr"] * SCHEDULE[k]
                if isinstance(group["lr"], torch.Tensor):
                    group["lr"].fill_(new)  # a tensor lr (torchao, capturable paths) is changed in place
                else:
                    group["lr"] = new
                ls.hparams[g] = {**ls.hparams[g], "lr": new}
        grads = [[grad_values(seed, ("lr_schedule", g, i), k, s, "float32") for i, s in enumerate(ss)]
                 for g, ss in enumerate(shapes)]
        set_grads(params, grads)
        ls.step(k, grads)
        _lr_kept(checks["lr"], k, opt, ls.hparams)
        seen.append(frames(opt))
    notes = []
    if seen[-1] is not None:
        checks["lr"].note = (f"compiled frames after each step: {seen} "
                             f"({seen[-1]} graph(s) for {len(set(SCHEDULE.values()))} lr values)")
        notes.append(f"compiled {seen[-1]} frame(s) over {len(SCHEDULE)} lr values")
    return finish(target, result, checks, t0, notes)


def _lr_kept(res: CheckResult, k: int, opt, hparams) -> None:
    """The step leaves the scheduled lr in param_groups (nothing overwrites it)."""
    for g, group in enumerate(opt.param_groups):
        res.compared += 1
        want = hparams[g]["lr"]
        if isinstance(group["lr"], torch.Tensor):  # a tensor lr holds the schedule's value in its own dtype
            want = float(torch.tensor(want, dtype=group["lr"].dtype))
        if float(group["lr"]) != want:
            res.fail(Finding(res.check, k, f"group {g} lr", expected=want, got=float(group["lr"]),
                             detail="the step changed the lr in param_groups"))


SCENARIO = scenario("lr_schedule", run_lr_schedule)
