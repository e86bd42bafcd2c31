"""Checkpoint: save, reload (another path, another device), continue, bit for bit."""
from __future__ import annotations

import copy
import io
import time
from dataclasses import replace

from ..lazy_torch import torch

from ..checking.bitwise import compare_bits, state_bits
from ..checking.cases import SHORT
from ..measuring.checks import CheckResult, Finding
from ..checking.lockstep import Lockstep
from ..checking.case_run import set_grads
from . import scenario
from .common import base_hparams, without_decay, build, declared, finish, grad_values, guarded, new_result, skip, tensor, unavailable, shaped_for, values


CKPT_STEPS, CKPT_EXTRA = 20, 3
FLAG_KEYS = ("foreach", "fused", "capturable", "differentiable")


def _ckpt_setup(target, dtype, device, seed, hp):
    shapes = shaped_for(target, [[(8, 4), (5,)], [(6,)]])
    scale = 1.0 if dtype == "float16" else 0.1

    def params():
        return [[tensor(values(seed, s, dtype, 1.0, "ckpt", g, i), dtype, device) for i, s in enumerate(ss)]
                for g, ss in enumerate(shapes)]

    def grads(k):
        return [[grad_values(seed, ("ckpt", g, i), k, s, dtype, scale) for i, s in enumerate(ss)]
                for g, ss in enumerate(shapes)]
    return params, grads


def _save_load(opt, params, map_location):
    buf = io.BytesIO()
    torch.save({"opt": opt.state_dict(), "params": [[p.detach().clone() for p in g] for g in params]}, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True, map_location=map_location)


def _load_into(target, ckpt, hp, device):
    fresh = [[p.to(device).clone().requires_grad_() for p in g] for g in ckpt["params"]]
    new = build(target, fresh, hp)
    new.load_state_dict(copy.deepcopy(ckpt["opt"]))
    return new, fresh


def _entries(opt):
    return {(g, i, key): val for g, group in enumerate(opt.param_groups) for i, p in enumerate(group["params"])
            for key, val in opt.state.get(p, {}).items() if isinstance(val, torch.Tensor)}


@guarded
def run_checkpoint(target, device="cpu", seed=0, dtypes=("float32", "bfloat16")):
    """Round-trips at step 0 and after 20 steps (map_location="cpu"), a
    checkpoint from another implementation sharing the format, capturable
    counters' device after load (CUDA only)."""
    t0 = time.perf_counter()
    hp = [dict((base_hparams(target.optimizer) or {})), without_decay(target.optimizer, base_hparams(target.optimizer) or {})]
    result = new_result(target, "checkpoint", "+".join(SHORT.get(d, d) for d in dtypes), "float32", hp, seed,
                        CKPT_STEPS + CKPT_EXTRA)
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    checks = {n: CheckResult(n) for n in ("roundtrip", "cross", "flags", "capturable")}
    notes = []
    total = CKPT_STEPS + CKPT_EXTRA
    for dtype in dtypes:
        if dtype not in target.dtypes:
            notes.append(f"{dtype} skipped: not supported by {target.name}")
            continue
        make_params, grads = _ckpt_setup(target, dtype, device, seed, hp)
        ref_params = make_params()
        ref = build(target, ref_params, hp)
        ref_dtypes = {}
        for k in range(1, total + 1):
            set_grads(ref_params, grads(k))
            ref.step()
            if k == CKPT_STEPS:
                ref_dtypes = {key: (v.dtype, v.device) for key, v in _entries(ref).items()}
        for at in (0, CKPT_STEPS):
            params = make_params()
            opt = build(target, params, hp)
            for k in range(1, total + 1):
                if k == at + 1:
                    saved = {key: (v.dtype, v.device) for key, v in _entries(opt).items()}
                    ckpt = _save_load(opt, params, "cpu")
                    opt, params = _load_into(target, ckpt, hp, device)
                    for key, v in _entries(opt).items():
                        want = saved.get(key)
                        checks["roundtrip"].compared += 1
                        if want is not None and (v.dtype, v.device) != want:
                            g, i, name = key
                            checks["roundtrip"].fail(Finding(
                                "roundtrip", at, f"[{dtype}] group {g} param {i} {name}",
                                expected=f"{want[0]} on {want[1]}", got=f"{v.dtype} on {v.device}",
                                detail=f"dtype/device changed by save + load(map_location='cpu') at step {at}"))
                set_grads(params, grads(k))
                opt.step()
            _compare_runs(checks["roundtrip"], at, f"[{dtype}] ", opt, ref, f"reloaded at step {at}, compared at {total}")
        del ref_dtypes
        _cross(checks, target, dtype, device, seed, hp, make_params, grads, notes)
    if device.startswith("cuda"):
        _capturable(checks["capturable"], target, device, seed, hp, notes)
    else:
        checks["capturable"].note = "skipped: capturable counters live on CUDA; nothing to check on CPU"
        notes.append("capturable part skipped on CPU (CUDA only)")
    checks = {k: v for k, v in checks.items() if v.compared or not v.passed or v.note}
    return finish(target, result, checks, t0, notes)


def _compare_runs(res, at, label, opt, ref, detail):
    a, b = state_bits(opt), state_bits(ref)
    compare_bits(res, at, {f"{label}{k}": v for k, v in b.items()}, {f"{label}{k}": v for k, v in a.items()}, detail)


def _cross_source(target):
    """Another implementation writing the same checkpoint format, or None."""
    from ..registry import torch_targets
    if not target.name.startswith("torch.") or target.convention.counter != "param":
        return None
    opt_name, path = target.name.split(".")[1:3]
    src = "fused" if path == "forloop" else "forloop"
    return next((t for t in torch_targets() if t.name == f"torch.{opt_name}.{src}"), None)


def _cross(checks, target, dtype, device, seed, hp, make_params, grads, notes):
    source = _cross_source(target)
    if source is None:
        if dtype == "float32":
            notes.append(f"cross-implementation part skipped: no other implementation shares {target.name}'s format")
        return
    params = make_params()
    src = build(source, params, hp)
    for k in range(1, CKPT_STEPS + 1):
        set_grads(params, grads(k))
        src.step()
    ckpt = _save_load(src, params, "cpu")
    fresh = [[p.to(device).clone().requires_grad_() for p in g] for g in ckpt["params"]]
    opt = build(target, fresh, hp)
    constructed = [{k: g.get(k) for k in FLAG_KEYS if k in g} for g in opt.param_groups]
    opt.load_state_dict(copy.deepcopy(ckpt["opt"]))
    label = f"[{dtype} {source.name} -> {target.name}] "
    for g, (want, group) in enumerate(zip(constructed, opt.param_groups)):
        for key, val in want.items():
            checks["flags"].compared += 1
            if group.get(key) != val:
                checks["flags"].fail(Finding("flags", CKPT_STEPS, f"{label}group {g} {key}", expected=val,
                                             got=group.get(key),
                                             detail="the loaded optimizer does not run the path it was constructed with"))
    running = target
    if not all(group.get(k) == v for want, group in zip(constructed, opt.param_groups) for k, v in want.items()) \
            and declared(target, "flags"):
        # declared: the continuation runs the checkpoint's path, so its numerics are the source's
        running = replace(target, compute=source.compute)
        checks["cross"].note = (f"continuation runs {source.name}'s path (flags taken from the checkpoint); "
                                f"checked with its compute model ({source.compute})")
    ls = Lockstep(running, opt, hp, checks["cross"], checks["cross"], label)
    ls.set_counters(CKPT_STEPS)
    for k in range(CKPT_STEPS + 1, CKPT_STEPS + CKPT_EXTRA + 1):
        gr = grads(k)
        set_grads(fresh, gr)
        ls.step(k, gr)


def _capturable(res, target, device, seed, hp, notes):
    hp_c = [{**h, "capturable": True} for h in hp]
    make_params, grads = _ckpt_setup(target, "float32", device, seed, hp)
    try:
        params = make_params()
        opt = build(target, params, hp_c)
    except (TypeError, ValueError, RuntimeError) as exc:
        notes.append(f"capturable part skipped: {target.name} does not take capturable=True ({exc})")
        res.note = f"skipped: {type(exc).__name__}: {exc}"
        return
    ref_params = make_params()
    ref = build(target, ref_params, hp_c)
    for k in range(1, 4):
        set_grads(ref_params, grads(k))
        ref.step()
    for k in range(1, 3):
        set_grads(params, grads(k))
        opt.step()
    ckpt = _save_load(opt, params, "cpu")
    opt, params = _load_into(target, ckpt, hp_c, device)
    for g, group in enumerate(opt.param_groups):
        for i, p in enumerate(group["params"]):
            step = opt.state.get(p, {}).get("step", group.get("step"))
            res.compared += 1
            if isinstance(step, torch.Tensor) and step.device != p.device:
                res.fail(Finding("capturable", 2, f"group {g} param {i} step", expected=str(p.device),
                                 got=str(step.device), detail="capturable counter not on the param's device after load"))
    set_grads(params, grads(3))
    opt.step()
    _compare_runs(res, 2, "[capturable] ", opt, ref, "capturable, reloaded at step 2")


SCENARIO = scenario("checkpoint", run_checkpoint)
