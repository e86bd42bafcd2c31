"""Construction: an optimizer (and a mixed-precision wrapper) change nothing before the first step."""
from __future__ import annotations

import copy
import time

from ..lazy_torch import torch

import oracle

from oracle.storage import round_to

from ..checking.bitwise import bits_finding, plain as _plain
from ..measuring.checks import CheckResult, Finding, same_bits
from ..checking.lockstep import Lockstep
from ..checking.case_run import set_grads
from ..targets.master_weights import MasterWeights
from . import scenario
from .common import base_hparams, without_decay, build, finish, grad_values, guarded, new_result, skip, tensor, unavailable, shaped_for, values


def held(init, val, model_param, state_dtype: str):
    """The initial value as the state can hold it: a bfloat16 accumulator filled with 0.1 holds
    0.100097656, and keeps it when a wrapper widens it onto an FP32 master; state kept in float32
    (state_dtype "float32") holds 0.1 as float32 does."""
    if not (isinstance(val, torch.Tensor) and val.is_floating_point()):
        return init
    first = model_param.dtype if state_dtype == "param" else torch.float32
    return float(torch.tensor(float(init), dtype=first).to(val.dtype))


def _construction_checks(res: CheckResult, target, opt, params, values_before, hp, label: str, masters=None,
                         init_res: CheckResult | None = None) -> None:
    """Constructing changed nothing: params (and masters) bit-identical to the
    inputs, counters 0 or absent, no moments, eager accumulators at their
    initial value, state_dict() allocating nothing."""
    inner = opt.optimizer if hasattr(opt, "optimizer") and not isinstance(opt, torch.optim.Optimizer) else opt
    eager = oracle.SPECS[target.optimizer].eager_state  # state key -> the hyperparameter it starts at
    for g, ps in enumerate(params):
        for i, p in enumerate(ps):
            res.compared += 1
            if not same_bits(p.detach(), values_before[g][i]):
                res.fail(bits_finding(res.check, 0, f"{label}group {g} param {i} param", p.detach(),
                                       values_before[g][i], "changed by construction"))
            if masters is not None:
                m = masters[g][i]
                widened = values_before[g][i].to(m.dtype)
                res.compared += 1
                if not same_bits(m.detach(), widened):
                    res.fail(bits_finding(res.check, 0, f"{label}group {g} param {i} master", m.detach(), widened,
                                           "master differs from the model param after construction"))
    for g, group in enumerate(inner.param_groups):
        step = _plain(group.get("step"))
        res.compared += 1
        if step not in (None, 0):
            res.fail(Finding(res.check, 0, f"{label}group {g} step", expected="0 or absent", got=step,
                             detail="counter advanced by construction"))
        for i, p in enumerate(group["params"]):
            for key, val in inner.state.get(p, {}).items():
                name = f"{label}group {g} param {i} {key}"
                res.compared += 1
                if key == "step":
                    if _plain(val) != 0:
                        res.fail(Finding(res.check, 0, name, expected=0, got=_plain(val),
                                         detail="counter advanced by construction"))
                elif key in eager:
                    init = hp[g].get(eager[key], oracle.SPECS[target.optimizer].defaults.get(eager[key], 0.0))
                    init = held(init, val, params[g][i], target.state_dtype)
                    (init_res or res).compared += 1
                    if not isinstance(val, torch.Tensor) or bool((val != init).any()):
                        (init_res or res).fail(Finding((init_res or res).check, 0, name, expected=init,
                                         got=float(val.flatten()[0]) if isinstance(val, torch.Tensor) and val.numel() else repr(val),
                                         detail=f"eager state not at {eager[key]}"))
                elif key in ("master_param", "master", "fp32_param"):
                    if not same_bits(val, p.detach().to(val.dtype)):
                        res.fail(bits_finding(res.check, 0, name, val, p.detach().to(val.dtype),
                                               "eager master differs from the param"))
                elif isinstance(val, torch.Tensor) and val.is_floating_point() and val.numel() and bool(val.any()):
                    res.fail(Finding(res.check, 0, name, expected="absent or zeros", got=float(val.flatten()[0]),
                                     detail="moment holds values before the first step"))


def _eager_state_checks(res: CheckResult, orig: dict, wrapper, label: str) -> None:
    """Eager state of the model params ended up on the FP32 masters."""
    inner = wrapper.optimizer
    for g, (params, masters) in enumerate(zip(wrapper.model_groups, wrapper.master_groups)):
        for i, (p, m) in enumerate(zip(params, masters)):
            name = f"{label}group {g} param {i}"
            before = orig.get((g, i), {})
            if m is not p and p in inner.state:
                res.fail(Finding(res.check, 0, f"{name} state", expected="keyed by the FP32 master",
                                 got="still keyed by the model param", detail="eager state not migrated"))
            st = inner.state.get(m, {})
            for key, val in before.items():
                res.compared += 1
                got = st.get(key)
                if got is None:
                    res.fail(Finding(res.check, 0, f"{name} {key}", expected="present", got="missing",
                                     detail="eager state lost by the wrapper"))
                elif key == "step" or not isinstance(val, torch.Tensor):
                    ok = (type(got) is type(val) and (not isinstance(val, torch.Tensor)
                          or (got.dtype == val.dtype and got.device == val.device and same_bits(got, val)))
                          and (isinstance(val, torch.Tensor) or got == val))
                    if not ok:
                        res.fail(Finding(res.check, 0, f"{name} {key}", expected=_describe(val), got=_describe(got),
                                         detail="counter / non-tensor entry not preserved"))
                elif val.is_floating_point() and val.dtype == p.dtype and m.dtype != p.dtype:
                    if got.dtype != m.dtype or got.device != m.device:
                        res.fail(Finding(res.check, 0, f"{name} {key}", expected=f"{m.dtype} on {m.device}",
                                         got=f"{got.dtype} on {got.device}",
                                         detail="eager state not moved to the FP32 master in FP32"))
                    elif not same_bits(got, val.to(m.dtype)):
                        res.fail(bits_finding(res.check, 0, f"{name} {key}", got, val.to(m.dtype),
                                               "eager state changed by the wrapper's construction"))


def _describe(v):
    return f"tensor({v.dtype}, {v.device}) = {_plain(v) if v.numel() == 1 else '...'}" if isinstance(v, torch.Tensor) else repr(v)


def _materialized(res: CheckResult, opt, inner, label: str) -> None:
    """state_dict() before the first step must allocate nothing."""
    keys_before = {id(p): sorted(st) for p, st in inner.state.items()}
    n_before = len(inner.state)
    sd = opt.state_dict()
    keys_after = {id(p): sorted(st) for p, st in inner.state.items()}
    res.compared += 1
    if keys_after != keys_before or len(inner.state) != n_before:
        res.fail(Finding(res.check, 0, f"{label}state", expected=f"{n_before} entries", got=f"{len(inner.state)}",
                         detail="state_dict() created optimizer state"))
    osd = sd.get("optimizer", sd)
    eager = {k for s in oracle.SPECS.values() for k in s.eager_state}
    extra = sum(1 for st in osd["state"].values() for k in st if k not in ("step", "master_param", *eager))
    if extra:
        res.fail(Finding(res.check, 0, f"{label}state_dict", expected="no moments", got=f"{extra} entries",
                         detail="state_dict() before the first step holds moments"))


@guarded
def run_construction(target, device="cpu", seed=0, wrapper=MasterWeights, wrapped_dtypes=("bfloat16", "float16")):
    """Constructing an optimizer, and a mixed-precision wrapper around one,
    changes nothing; the first real update equals the oracle's step 1."""
    t0 = time.perf_counter()
    hp = [dict((base_hparams(target.optimizer) or {})), without_decay(target.optimizer, base_hparams(target.optimizer) or {})]
    # a group's own initial value for eagerly created state (Adagrad's `sum`),
    # unlike the constructor's, shows whether the group's value is used
    for hparam in oracle.SPECS[target.optimizer].eager_state.values():
        if hparam in target.options:
            hp[1][hparam] = 0.1
    result = new_result(target, "construction", "fp32+wrapped", "float32", hp, seed, 1)
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    checks = {n: CheckResult(n) for n in ("construction", "first_step", "counters", "wrapper", "eager_state",
                                          "eager_init")}
    notes = []
    shapes = shaped_for(target, [[(6, 5), (7,)], [(4,)]])

    def make_params(dtype):
        vals = [[values(seed, s, dtype, 1.0, "construction", g, i) for i, s in enumerate(ss)]
                for g, ss in enumerate(shapes)]
        return vals, [[tensor(v, dtype, device) for v in vs] for vs in vals]

    def first_grads(dtype):
        return [[grad_values(seed, ("c", g, i), 1, s, dtype, 1.0 if dtype == "float16" else 0.1)
                 for i, s in enumerate(ss)] for g, ss in enumerate(shapes)]

    # the bare optimizer
    for dtype in ("float32", "bfloat16"):
        if dtype not in target.dtypes:
            continue
        _, params = make_params(dtype)
        before = [[p.detach().clone() for p in ps] for ps in params]
        opt = build(target, params, hp)
        label = f"[bare {dtype}] "
        _construction_checks(checks["construction"], target, opt, params, before, hp, label,
                             init_res=checks["eager_init"])
        _materialized(checks["construction"], opt, opt, label)
        grads = first_grads(dtype)
        set_grads(params, grads)
        Lockstep(target, opt, hp, checks["first_step"], checks["counters"], label).step(1, grads)

    # the wrapper: FP32 masters over low-precision model params
    if wrapper is None:
        notes.append("wrapper part skipped: no wrapper class given")
    for dtype in wrapped_dtypes if wrapper is not None else ():
        if dtype not in target.dtypes:
            notes.append(f"wrapper over {dtype} skipped: {target.name} does not take {dtype} params")
            continue
        _, params = make_params(dtype)
        before = [[p.detach().clone() for p in ps] for ps in params]
        opt = build(target, params, hp)
        orig = {(g, i): {k: (v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v))
                         for k, v in opt.state.get(p, {}).items()}
                for g, ps in enumerate(params) for i, p in enumerate(ps)}
        w = wrapper(opt)
        label = f"[wrapped {dtype}] "
        _construction_checks(checks["wrapper"], target, w, params, before, hp, label, masters=w.masters(),
                             init_res=checks["eager_init"])
        _eager_state_checks(checks["eager_state"], orig, w, label)
        _materialized(checks["wrapper"], w, w.optimizer, label)
        grads = first_grads(dtype)
        set_grads(params, grads)
        ls = Lockstep(target, w, hp, checks["first_step"], checks["counters"], label, inner=w.optimizer)
        try:
            ls.step(1, [[None if g is None else round_to(g, "float32") for g in gs] for gs in grads])
        except Exception as exc:  # noqa: BLE001 - a wrapper that cannot step is a finding of this check
            checks["first_step"].fail(Finding("first_step", 1, f"{label}step()", expected="an update",
                                              got=f"{type(exc).__name__}", detail=str(exc)[:300]))
            continue
        for g, (ps, ms) in enumerate(zip(params, w.masters())):
            for i, (p, m) in enumerate(zip(ps, ms)):
                checks["first_step"].compared += 1
                want = m.detach().to(p.dtype)
                if not same_bits(p.detach(), want):
                    checks["first_step"].fail(bits_finding("first_step", 1, f"{label}group {g} param {i} param",
                                                            p.detach(), want, "model param != master rounded"))
    if not checks["eager_init"].compared:
        del checks["eager_init"]
    return finish(target, result, checks, t0, notes)


SCENARIO = scenario("construction", run_construction)
