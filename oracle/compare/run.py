"""Run one case against one target: lockstep, trajectory, counters, schema,
checkpoint round-trip.

Lockstep: before each step the target's state is read, the oracle runs one
step from it on the same grads, and the target's result must lie within the
derived tolerance. The oracle keeps its own counters, so a wrong counter shows
both as a counter finding and in the values it corrupts (bias correction).
Trajectory: the oracle runs free from the initial values, rounding what the
target stores after every step, with error bounds propagated step to step.
"""
from __future__ import annotations

import copy
import io
import traceback
from dataclasses import dataclass, field

import numpy as np
import torch

import oracle
from oracle.common import OptState
from oracle.storage import quantum, round_to

from . import cases as C
from .checks import CheckResult, Finding, coarser, compare_exact, compare_tensor, same_bits, tolerance
from .errmodel import Bounded, unit_roundoff
from .readback import Snapshot, counter_location, math_params

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                "float64": torch.float64}
CHECKS = ("lockstep", "trajectory", "counters", "schema", "roundtrip")
STATE_KEYS = {"adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq"), "adagrad": ("sum",),
              "lamb": ("exp_avg", "exp_avg_sq")}
EXTRA_STEPS = 3  # continuation length after a checkpoint reload


@dataclass
class CaseResult:
    target: str
    case: str
    optimizer: str
    dtype: str
    hparams: list
    seed: int
    steps: int
    status: str = "pass"        # pass | fail | skip | error
    reason: str = ""
    checks: dict = field(default_factory=dict)  # name -> CheckResult
    seconds: float = 0.0
    repro: str = ""             # a command reproducing this row, where `python -m oracle.compare` cannot


# --- building --------------------------------------------------------------

def make_params(case: C.Case, seed: int, device: str) -> list:
    dt = TORCH_DTYPES[case.dtype]
    return [[torch.tensor(p, dtype=dt, device=device).requires_grad_() for p in group]
            for group in C.initial_params(case, seed)]


def build(target, case: C.Case, params) -> torch.optim.Optimizer:
    groups = [{"params": ps, **hp} for ps, hp in zip(params, case.group_hparams())]
    return target.make(groups, case.base_hparams())


def set_grads(params, grads) -> None:
    for ps, gs in zip(params, grads):
        for p, g in zip(ps, gs):
            p.grad = None if g is None else torch.tensor(g, dtype=p.dtype, device=p.device)


def bounded(x, u):
    return None if x is None else Bounded(x, None, u)


def oracle_input(snap: Snapshot, tracked: OptState, u: float) -> OptState:
    """The target's arrays with the oracle's own counters."""
    params = []
    for g, sts in enumerate(snap.state):
        row = []
        for i, st in enumerate(sts):
            entry = {k: bounded(v, u) for k, v in st.items() if k != "master_param"}
            if "step" in tracked.params[g][i]:
                entry["step"] = tracked.params[g][i]["step"]
            row.append(entry)
        params.append(row)
    return OptState(list(tracked.group_step), params)


def counters_only(state: OptState) -> OptState:
    return OptState(list(state.group_step),
                    [[{"step": st["step"]} if "step" in st else {} for st in group] for group in state.params])


# --- checks ----------------------------------------------------------------

def check_step(res: dict, k: int, case, target, before: Snapshot, after: Snapshot, exp_params, exp_state):
    """Lockstep comparison of one step."""
    compute = target.compute_dtype(case.dtype)
    got_params, old_params = math_params(after), math_params(before)
    for g, group in enumerate(exp_params):
        for i, ep in enumerate(group):
            has_master = "master_param" in after.state[g][i]
            storage = after.dtypes[g][i]["master_param" if has_master else "param"]
            tol = tolerance(ep.e, ep.v, storage, compute)
            compare_tensor(res["lockstep"], k, f"group {g} param {i} {'master' if has_master else 'param'}",
                           ep.v, got_params[g][i], old_params[g][i], tol, storage)
            if has_master:
                rounded = round_to(after.state[g][i]["master_param"], after.dtypes[g][i]["param"])
                compare_tensor(res["lockstep"], k, f"group {g} param {i} param (= master rounded)",
                               rounded, after.params[g][i], before.params[g][i], 0.0, after.dtypes[g][i]["param"],
                               power=False)
            for key, ev in exp_state.params[g][i].items():
                if key == "step":
                    continue
                if key not in after.state[g][i]:
                    res["schema"].fail(Finding("schema", k, f"group {g} param {i} {key}", detail="missing"))
                    continue
                storage = after.dtypes[g][i][key]
                old = before.state[g][i].get(key, np.zeros_like(ev.v))
                compare_tensor(res["lockstep"], k, f"group {g} param {i} {key}", ev.v, after.state[g][i][key],
                               old, tolerance(ev.e, ev.v, storage, compute), storage)


def check_counters(res: CheckResult, k: int, conv, tracked: OptState, snap: Snapshot) -> None:
    if conv.counter == "group":
        for g, want in enumerate(tracked.group_step):
            got = snap.group_steps[g]
            detail = "" if got is not None else "missing in param_groups (would be saved as null)"
            compare_exact(res, k, f"group {g} step", want, got, detail)
        return
    for g, sts in enumerate(tracked.params):
        for i, st in enumerate(sts):
            want, got = st.get("step", 0), snap.param_steps[g][i]
            got = 0 if got is None and want == 0 else got
            compare_exact(res, k, f"group {g} param {i} step", want, got)


def check_schema(res: CheckResult, case, target, opt, snap: Snapshot, touched) -> None:
    """State keys, dtypes, shapes and devices as the target's convention says."""
    where = counter_location(opt)
    if where is not None and where != target.convention.counter:
        res.fail(Finding("schema", None, "counters", expected=target.convention.counter, got=where,
                         detail="counter location differs from the declared convention"))
    keys = list(STATE_KEYS[case.optimizer])
    if case.optimizer in ("adam", "adamw") and case.hparams.get("amsgrad"):
        keys.append("max_exp_avg_sq")
    for g, sts in enumerate(snap.state):
        for i, st in enumerate(sts):
            if not touched[g][i]:
                continue
            want_keys = keys + (["master_param"] if target.masters and case.dtype != "float32" else [])
            for key in want_keys:
                res.compared += 1
                if key not in st:
                    res.fail(Finding("schema", None, f"group {g} param {i}", expected=key, got=sorted(st),
                                     detail="state entry missing"))
                    continue
                if st[key].shape != snap.params[g][i].shape:
                    res.fail(Finding("schema", None, f"group {g} param {i} {key}", expected=snap.params[g][i].shape,
                                     got=st[key].shape, detail="shape"))
                want_dtype = (snap.dtypes[g][i]["param"] if target.state_dtype == "param" and key != "master_param"
                              else "float32")
                if snap.dtypes[g][i][key] != want_dtype:
                    res.fail(Finding("schema", None, f"group {g} param {i} {key}", expected=want_dtype,
                                     got=snap.dtypes[g][i][key], detail="dtype"))
                if snap.devices[g][i][key] != snap.devices[g][i]["param"]:
                    res.fail(Finding("schema", None, f"group {g} param {i} {key}", expected=snap.devices[g][i]["param"],
                                     got=snap.devices[g][i][key], detail="device"))


def store(x: Bounded, storage: str, compute: str) -> Bounded:
    """Round what the target stores; both sides round, so up to one ULP apart."""
    v = round_to(x.v, storage)
    e = x.e + (quantum(v, storage) if coarser(storage, compute) else 0.0)
    return Bounded(v, e, x.u)


def trajectory_store(params, state: OptState, snap: Snapshot, compute: str):
    out_p = []
    for g, group in enumerate(params):
        row = []
        for i, p in enumerate(group):
            key = "master_param" if "master_param" in snap.state[g][i] else "param"
            row.append(store(p, snap.dtypes[g][i][key], compute))
        out_p.append(row)
    for g, sts in enumerate(state.params):
        for i, st in enumerate(sts):
            for key, v in st.items():
                if key != "step" and key in snap.dtypes[g][i]:
                    st[key] = store(v, snap.dtypes[g][i][key], compute)
    return out_p, state


def check_trajectory(res: CheckResult, k, traj_params, traj_state, snap: Snapshot, old_params) -> None:
    got = math_params(snap)
    for g, group in enumerate(traj_params):
        for i, p in enumerate(group):
            key = "master_param" if "master_param" in snap.state[g][i] else "param"
            compare_tensor(res, k, f"group {g} param {i} {'master' if key != 'param' else 'param'}", p.v, got[g][i],
                           old_params[g][i], 2.0 * p.e, snap.dtypes[g][i][key])
            for skey, v in traj_state.params[g][i].items():
                if skey != "step" and skey in snap.state[g][i]:
                    compare_tensor(res, k, f"group {g} param {i} {skey}", v.v, snap.state[g][i][skey],
                                   np.zeros_like(v.v), 2.0 * v.e, snap.dtypes[g][i][skey])


# --- the run -----------------------------------------------------------------

def lockstep_run(target, case: C.Case, seed: int, device: str, res: dict):
    """Steps the target `case.steps` times with all per-step checks, then
    EXTRA_STEPS more unchecked; returns the optimizer and its params."""
    module = oracle.SPECS[case.optimizer]
    conv, compute = target.convention, target.compute_dtype(case.dtype)
    u = unit_roundoff(compute)
    hps = module.validate(case.group_hparams())
    params = make_params(case, seed, device)
    opt = build(target, case, params)
    tracked = OptState.empty(params)
    # The trajectory starts from the oracle's own initial state (Adagrad's
    # accumulator = the group's initial_accumulator_value), not the target's.
    traj_params = [[Bounded(p, None, u) for p in group] for group in C.initial_params(case, seed)]
    traj_state = OptState.empty(params)
    touched = [[False] * len(group) for group in params]
    for k in range(1, case.steps + EXTRA_STEPS + 1):
        grads = C.grads_at(case, seed, k)
        set_grads(params, grads)
        if k > case.steps:
            opt.step()
            continue
        before = target.read(opt)
        bgrads = [[bounded(g, u) for g in gs] for gs in grads]
        exp_params, exp_state = module.step(
            [[Bounded(p, None, u) for p in group] for group in math_params(before)],
            bgrads, oracle_input(before, tracked, u), hps, conv)
        opt.step()
        after = target.read(opt)
        tracked = counters_only(exp_state)
        touched = [[t or g is not None for t, g in zip(ts, gs)] for ts, gs in zip(touched, grads)]
        check_step(res, k, case, target, before, after, exp_params, exp_state)
        check_counters(res["counters"], k, conv, tracked, after)
        old = math_params(before)
        traj_params, traj_state = module.step(traj_params, bgrads, traj_state, hps, conv)
        traj_params, traj_state = trajectory_store(traj_params, traj_state, after, compute)
        check_trajectory(res["trajectory"], k, traj_params, traj_state, after, old)
    check_schema(res["schema"], case, target, opt, target.read(opt), touched)
    return opt, params


def reload(target, case, seed, device, opt, params):
    """state_dict -> torch.save/load(weights_only) -> a fresh optimizer over
    fresh params holding the same values -> load_state_dict."""
    buf = io.BytesIO()
    torch.save({"opt": opt.state_dict(), "params": [[p.detach().clone() for p in g] for g in params]}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True, map_location=device)
    fresh = [[p.clone().requires_grad_() for p in g] for g in ckpt["params"]]
    new = build(target, case, fresh)
    new.load_state_dict(copy.deepcopy(ckpt["opt"]))
    return new, fresh


def roundtrip_run(target, case, seed, device, at: int, reference_params, reference_opt, res: CheckResult):
    """Save at step `at`, reload, continue to the reference's end; compare bitwise."""
    params = make_params(case, seed, device)
    opt = build(target, case, params)
    total = case.steps + EXTRA_STEPS
    for k in range(1, total + 1):
        if k == at + 1:
            opt, params = reload(target, case, seed, device, opt, params)
        set_grads(params, C.grads_at(case, seed, k))
        opt.step()
    if at >= total:
        opt, params = reload(target, case, seed, device, opt, params)
    ref_state = [[reference_opt.state.get(p, {}) for p in g] for g in reference_params]
    for g, group in enumerate(params):
        for i, p in enumerate(group):
            res.compared += 1
            if not same_bits(p, reference_params[g][i]):
                res.fail(_bits_finding(at, f"group {g} param {i} param", p, reference_params[g][i]))
            st = opt.state.get(p, {})
            for key, ref in ref_state[g][i].items():
                got = st.get(key)
                if isinstance(ref, torch.Tensor):
                    if not isinstance(got, torch.Tensor) or not same_bits(got, ref) or got.device != ref.device:
                        res.fail(_bits_finding(at, f"group {g} param {i} {key}", got, ref))
                elif got != ref:
                    res.fail(Finding("roundtrip", at, f"group {g} param {i} {key}", expected=ref, got=_plain(got),
                                     detail=f"reloaded at step {at}"))
    for g, (a, b) in enumerate(zip(opt.param_groups, reference_opt.param_groups)):
        if _plain(a.get("step")) != _plain(b.get("step")):
            res.fail(Finding("roundtrip", at, f"group {g} step", expected=_plain(b.get("step")),
                             got=_plain(a.get("step")), detail=f"reloaded at step {at}"))


def _plain(v):
    return v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v


def _bits_finding(at, tensor, got, ref) -> Finding:
    if not isinstance(got, torch.Tensor):
        return Finding("roundtrip", at, tensor, expected="tensor", got=repr(got), detail="missing after reload")
    if got.dtype != ref.dtype or got.shape != ref.shape or got.device != ref.device:
        return Finding("roundtrip", at, tensor, expected=f"{ref.dtype} {tuple(ref.shape)} {ref.device}",
                       got=f"{got.dtype} {tuple(got.shape)} {got.device}", detail=f"reloaded at step {at}")
    a, b = got.detach().double().cpu().reshape(-1), ref.detach().double().cpu().reshape(-1)
    diff = (a != b) & ~(a.isnan() & b.isnan())
    idx = int(diff.nonzero()[0]) if diff.any() else 0
    return Finding("roundtrip", at, tensor, (idx,), float(b[idx]), float(a[idx]),
                   detail=f"reloaded at step {at}: {int(diff.sum())} elements differ from the uninterrupted run")


def run_case(target, case: C.Case, seed: int, device: str = "cpu", checks=CHECKS) -> CaseResult:
    import time
    t0 = time.perf_counter()
    result = CaseResult(target.name, case.name, case.optimizer, case.dtype, case.group_hparams(), seed, case.steps)
    reason = target.unavailable(device)
    if reason is None and case.dtype not in target.dtypes:
        reason = f"{target.name} does not support {case.dtype}"
    if reason is None and not case.options <= target.options:
        reason = f"{target.name} does not support {', '.join(sorted(case.options - target.options))}"
    if reason is not None:
        result.status, result.reason = "skip", reason
        return result
    res = {name: CheckResult(name) for name in CHECKS}
    try:
        opt, params = lockstep_run(target, case, seed, device, res)
        if "roundtrip" in checks:
            for at in (0, case.steps):
                roundtrip_run(target, case, seed, device, at, params, opt, res["roundtrip"])
    except Exception as exc:  # noqa: BLE001 - a crashing target is a result, not the end of the sweep
        result.status = "error"
        result.reason = f"{type(exc).__name__}: {exc}"
        result.checks = {k: v for k, v in res.items() if v.compared}
        result.checks["error"] = CheckResult("error", passed=False, note=traceback.format_exc(limit=-3))
        result.seconds = time.perf_counter() - t0
        return result
    result.checks = {k: v for k, v in res.items() if k in checks}
    if not all(c.passed for c in result.checks.values()):
        result.status = "fail"
    result.seconds = time.perf_counter() - t0
    return result
