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

import io
import traceback
from dataclasses import dataclass, field

import numpy as np
from ..lazy_torch import torch

import oracle
from oracle.common import OptState, state_shape
from oracle.storage import quantum, round_to

from . import cases as C
from .bitwise import compare_bits, state_bits
from ..measuring.phases import phase
from ..measuring.checks import FAILING, STATUSES, CheckResult, Finding, coarser, compare_tensor, compare_tensors  # noqa: F401
from ..measuring.errmodel import Bounded, as_bounded, unit_roundoff
from .guards import allocate
from .hazards import case_hazards
from .lockstep import Lockstep, new_state_format
from ..measuring.quantized_state import format_of, is_quantized, store as store_quantized, ulp_dtype
from ..measuring.readback import Snapshot, counter_location, math_params, to_numpy, to_tensor

DTYPES = ("float32", "bfloat16", "float16", "float64", "complex64", "complex128")  # torch names them alike


def torch_dtype(name: str):
    """The torch dtype of a format name (a function, not a table: the table would import torch with
    this module, which the CLI imports too: oracle.compare.lazy_torch)."""
    if name not in DTYPES:
        raise KeyError(name)
    return getattr(torch, name)
CHECKS = ("lockstep", "quantized", "rounding", "finite", "bounds", "trajectory", "counters", "schema", "roundtrip")

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
    status: str = "pass"        # one of STATUSES
    reason: str = ""
    checks: dict = field(default_factory=dict)  # name -> CheckResult
    seconds: float = 0.0
    repro: str = ""             # a command reproducing this row, where `python -m oracle.compare` cannot
    hazards: list = field(default_factory=list)  # representability hazards (oracle.compare.checking.hazards), as dicts


# --- building --------------------------------------------------------------

def make_params(case: C.Case, seed: int, device: str, guards: list | None = None) -> list:
    """The case's params; with `guards`, each inside a guarded buffer (oracle.compare.checking.guards) whose
    Guard is appended there."""
    dt = torch_dtype(case.dtype)
    if guards is None:
        return [[to_tensor(p, dt, device).requires_grad_() for p in group]
                for group in C.initial_params(case, seed)]
    out = []
    for g, group in enumerate(C.initial_params(case, seed)):
        row = []
        for i, p in enumerate(group):
            view, guard = allocate(p, dt, device, f"group {g} param {i} param")
            guards.append(guard)
            row.append(view.requires_grad_())
        out.append(row)
    return out


def build(target, case: C.Case, params) -> torch.optim.Optimizer:
    groups = [{"params": ps, **hp} for ps, hp in zip(params, case.group_hparams())]
    return target.make(groups, case.base_hparams())


class Refused(Exception):
    """The target's constructor refuses this case's hyperparameters (lr = 0, unusual betas) while it
    takes the spec's defaults for the same keys: the case is a skip that says so, not an error."""


def build_or_refuse(target, case: C.Case, params) -> torch.optim.Optimizer:
    try:
        return build(target, case, params)
    except Exception as exc:  # noqa: BLE001 - which exception a constructor raises is its own choice
        hps, defaults = case.base_hparams(), oracle.SPECS[case.optimizer].defaults
        base = {k: defaults.get(k, v) for k, v in hps.items()}

        def takes(hp):
            try:
                target.make([{"params": ps, **hp} for ps in params], hp)
                return True
            except Exception:  # noqa: BLE001
                return False
        if not takes(base):
            raise  # it refuses the defaults too: a crash, reported as such
        changed = [k for k, v in hps.items() if v != base[k]]
        refused = [k for k in changed if not takes({**base, k: hps[k]})] or changed
        said = f"{type(exc).__name__}: {exc}" if str(exc).strip() else type(exc).__name__
        raise Refused(f"{target.name}'s constructor refuses {', '.join(f'{k}={hps[k]!r}' for k in refused)} "
                      f"({said}); it takes the defaults") from exc


def set_grads(params, grads, guards: list | None = None) -> None:
    """p.grad from float64 values; with `guards`, each grad inside a guarded buffer, its Guard and a
    copy of its values appended there as (guard, copy)."""
    for g_, (ps, gs) in enumerate(zip(params, grads)):
        for i, (p, g) in enumerate(zip(ps, gs)):
            if g is None:
                p.grad = None
            elif guards is None:
                p.grad = to_tensor(g, p.dtype, p.device)
            else:
                view, guard = allocate(g, p.dtype, p.device, f"group {g_} param {i} grad")
                guards.append((guard, view.detach().clone()))
                p.grad = view


def seed_rounding(target, seed: int) -> None:
    """A target that rounds stochastically draws from torch's generator: every run of a case (the
    checked run, the round-trip runs, the hazard measurements) starts it from the case's seed, so they
    draw the same numbers and a reloaded run can be compared with the uninterrupted one bit for bit."""
    if target.rounding == "stochastic":
        torch.manual_seed(seed)


def free_run(target, case: C.Case, seed: int, device: str, hparams: list[dict]) -> list:
    """The target's params (flat float64, per group) after the case's steps from its initial values,
    with these hyperparameters and no checks (oracle.compare.checking.hazards measures effects with it)."""
    seed_rounding(target, seed)
    params = make_params(case, seed, device)
    opt = target.make([{"params": ps, **hp} for ps, hp in zip(params, hparams)], dict(hparams[0]) if hparams else {})
    for k in range(1, case.steps + 1):
        set_grads(params, C.grads_at(case, seed, k))
        opt.step()
    return [np.concatenate([to_numpy(p).ravel() for p in ps]) if ps else np.zeros(0)
            for ps in params]


# --- checks ----------------------------------------------------------------

def check_schema(res: CheckResult, case, target, where: str | None, snap: Snapshot, touched) -> None:
    """State keys, dtypes, shapes and devices as the target's convention says; `where`: the counters'
    location (counter_location of the optimizer), `snap` its state after the run."""
    if where is not None and where != target.convention.counter:
        res.fail(Finding("schema", None, "counters", expected=target.convention.counter, got=where,
                         detail="counter location differs from the declared convention"))
    spec = oracle.SPECS[case.optimizer]
    for g, sts in enumerate(snap.state):
        for i, st in enumerate(sts):
            if not touched[g][i]:
                continue
            shape = snap.params[g][i].shape
            want_keys = list(spec.state_keys_for(case.base_hparams(), shape)) + (
                ["master_param"] if target.masters and case.dtype != "float32" else [])
            for key in want_keys:
                res.compared += 1
                if key not in st:
                    res.fail(Finding("schema", None, f"group {g} param {i}", expected=key, got=sorted(st),
                                     detail="state entry missing"))
                    continue
                if st[key].shape != state_shape(key, shape):
                    res.fail(Finding("schema", None, f"group {g} param {i} {key}", expected=state_shape(key, shape),
                                     got=st[key].shape, detail="shape"))
                want_dtype = (snap.dtypes[g][i]["param"] if target.state_dtype == "param" and key != "master_param"
                              else "float32")
                want_dtype = quantized_dtype(target, key, st[key].size) or want_dtype
                if snap.dtypes[g][i][key] != want_dtype:
                    res.fail(Finding("schema", None, f"group {g} param {i} {key}", expected=want_dtype,
                                     got=snap.dtypes[g][i][key], detail="dtype"))
                if snap.devices[g][i][key] != snap.devices[g][i]["param"]:
                    res.fail(Finding("schema", None, f"group {g} param {i} {key}", expected=snap.devices[g][i]["param"],
                                     got=snap.devices[g][i][key], detail="device"))


def quantized_dtype(target, key: str, numel: int) -> str | None:
    """The snapshot dtype a quantized entry must have ("q:<format>"), None where it is not kept
    quantized (a tensor under the format's size threshold keeps float32 state)."""
    from oracle.quantized import FORMATS
    for entry in target.quantized:
        if entry.name == key and FORMATS[entry.fmt].quantizes(numel):
            return f"q:{entry.fmt}"
    return None


def store(x: Bounded, storage: str, compute: str, state_u: float | None = None, param: bool = False) -> Bounded:
    """Round what the target stores; both sides round, so up to one ULP apart (a quantized entry:
    through its format, oracle.compare.measuring.quantized_state.store). param: a param, which carries
    what rules read of its formats (Bounded's store_u, and state_u, the format its state is kept in);
    a state entry carries neither, as the lockstep's do."""
    [out] = stored([as_bounded(x, compute)], storage, compute, [(state_u, True) if param else None])
    return out


def stored(xs: list, storage: str, compute: str, params: list) -> list:
    """store() of each Bounded of `xs` in one format, the rounding done once over all of them concatenated
    (elementwise: each element rounds as alone). params[k]: (state_u, True) where xs[k] is a param."""
    if is_quantized(storage):
        return [store_quantized(x, format_of(storage)) for x in xs]
    v = round_to(np.concatenate([np.ravel(x.v) for x in xs]), storage)
    e = np.concatenate([np.ravel(x.e) for x in xs]) + (quantum(v, storage) if coarser(storage, compute) else 0.0)
    out, a = [], 0
    for x, param in zip(xs, params):
        b = a + x.v.size
        vk, ek = v[a:b].reshape(x.v.shape), e[a:b].reshape(x.v.shape)
        out.append(Bounded(vk, ek, x.u) if param is None else
                   Bounded(vk, ek, x.u, state_u=param[0], store_u=unit_roundoff(storage)))
        a = b
    return out


def trajectory_store(params, state: OptState, snap: Snapshot, compute: str, state_u: float | None = None):
    """The oracle's step rounded as the target stores it (its `snap` after the step), one rounding pass
    per stored format (stored); params keep `state_u`, as at the start (Rprop's filled etas round in the
    state's format at every step)."""
    items: dict = {}  # storage -> [(where, value, param)]; where: ("p", g, i) or ("s", g, i, key)
    for g, group in enumerate(params):
        for i, p in enumerate(group):
            key = "master_param" if "master_param" in snap.state[g][i] else "param"
            items.setdefault(snap.dtypes[g][i][key], []).append((("p", g, i), p, (state_u, True)))
    for g, sts in enumerate(state.params):
        for i, st in enumerate(sts):
            for key, v in st.items():
                if key != "step" and key in snap.dtypes[g][i]:
                    items.setdefault(snap.dtypes[g][i][key], []).append((("s", g, i, key), v, None))
    out_p = [list(group) for group in params]
    for storage, entries in items.items():
        done = stored([as_bounded(x, compute) for _, x, _ in entries], storage, compute, [p for _, _, p in entries])
        for (where, _, _), x in zip(entries, done):
            if where[0] == "p":
                out_p[where[1]][where[2]] = x
            else:
                state.params[where[1]][where[2]][where[3]] = x
    return out_p, state


def check_trajectory(res: CheckResult, k, traj_params, traj_state, snap: Snapshot, old_params) -> None:
    got = math_params(snap)
    batch = []  # one elementwise pass for the step (compare_tensors)
    for g, group in enumerate(traj_params):
        for i, p in enumerate(group):
            key = "master_param" if "master_param" in snap.state[g][i] else "param"
            batch.append((f"group {g} param {i} {'master' if key != 'param' else 'param'}", p.v, got[g][i],
                          old_params[g][i], 2.0 * p.e, snap.dtypes[g][i][key], True))
            for skey, v in traj_state.params[g][i].items():
                if skey != "step" and skey in snap.state[g][i]:
                    batch.append((f"group {g} param {i} {skey}", v.v, snap.state[g][i][skey], np.zeros_like(v.v),
                                  2.0 * v.e, ulp_dtype(snap.dtypes[g][i][skey]), True))
    compare_tensors(res, k, batch)


class Trajectory:
    """The trajectory check's oracle: running free from the case's initial values (Adagrad's
    accumulator the group's initial_accumulator_value, not the target's), rounding what the target
    stores after every step (its `after` snapshot's dtypes), error bounds propagated step to step."""

    def __init__(self, target, case: C.Case, seed: int):
        self.spec, self.convention = oracle.SPECS[case.optimizer], target.convention
        self.compute = target.compute_dtype(case.dtype)
        self.u = unit_roundoff(self.compute)
        self.hps = self.spec.validate(case.group_hparams())
        initial = C.initial_params(case, seed)
        self.state_u = state_u = unit_roundoff(new_state_format(target, {"param": case.dtype}))
        self.params = [[Bounded(p, None, self.u, state_u=state_u, store_u=unit_roundoff(case.dtype)) for p in group]
                       for group in initial]
        self.state = OptState.empty(initial)
        self.stepped = None  # this step's oracle result, where the lockstep's call computed it (Lockstep._stacked)

    def bounded(self, grads) -> list:
        """The step's grads as this oracle takes them (Bounded in its compute format)."""
        return [[None if g is None else g if isinstance(g, Bounded) and g.u == self.u else Bounded(getattr(g, "v", g),
                                                                                                    None, self.u)
                 for g in gs] for gs in grads]

    def step(self, res: CheckResult, k: int, grads, before: Snapshot, after: Snapshot) -> None:
        with phase("oracle and error model"):
            if self.stepped is not None:
                (params, state), self.stepped = self.stepped, None
            else:
                params, state = self.spec.step(self.params, self.bounded(grads), self.state, self.hps, self.convention)
            self.params, self.state = trajectory_store(params, state, after, self.compute, self.state_u)
        with phase("comparing"):
            check_trajectory(res, k, self.params, self.state, after, math_params(before))


def touched_by(touched: list, grads) -> list:
    """[g][i]: whether the param has had a grad by now (the schema check's state is due there)."""
    return [[t or g is not None for t, g in zip(ts, gs)] for ts, gs in zip(touched, grads)]


# --- the run -----------------------------------------------------------------

class FailedEarly(Exception):
    """A run with `fail_fast` checks stopped at the step where one of them failed: nothing later in
    the run can make it pass (a check once failed stays failed)."""


def lockstep_run(target, case: C.Case, seed: int, device: str, res: dict, fail_fast=(), record: list | None = None):
    """Steps the target `case.steps` times with all per-step checks, then
    EXTRA_STEPS more unchecked; returns the optimizer and its params. fail_fast: check names; when
    one of them has failed after a step, FailedEarly ends the run there. record: see Lockstep; after
    the checked steps it also receives ("end", counter location, final snapshot), what the schema
    check reads (replay_case)."""
    trajectory = Trajectory(target, case, seed)  # first: it validates the hyperparameters
    guards: list = []
    seed_rounding(target, seed)
    params = make_params(case, seed, device, guards)
    opt = build_or_refuse(target, case, params)
    ls = Lockstep(target, opt, case.group_hparams(), res["lockstep"], res["counters"], schema=res["schema"],
                  finite=res["finite"], quantized=res["quantized"], rounding=res["rounding"], record=record)
    if record is not None:
        record.append(opt.param_groups)  # first: the run's groups (replay reads their shape)
    touched = [[False] * len(group) for group in params]
    after = None  # what the last checked step left: the next one's state before it (only grads are set between)
    for k in range(1, case.steps + EXTRA_STEPS + 1):
        grads = C.grads_at(case, seed, k)
        grad_guards: list = []
        set_grads(params, grads, grad_guards)
        if k > case.steps:
            opt.step()
            continue
        before, after = ls.step(k, grads, before=after, rider=trajectory)
        for guard in guards + [gg for gg, _ in grad_guards]:
            guard.check(res["bounds"], k)
        touched = touched_by(touched, grads)
        trajectory.step(res["trajectory"], k, grads, before, after)
        if any(not res[name].passed for name in fail_fast):
            raise FailedEarly(k)
    ls.finish()
    where, final = counter_location(opt), target.read(opt)
    check_schema(res["schema"], case, target, where, final, touched)
    if record is not None:
        record.append(("end", where, final))
    return opt, params


def replay_case(target, case: C.Case, seed: int, groups, steps: list, end: tuple, res: dict,
                fail_fast: bool = False) -> None:
    """lockstep_run's judgement of `target` on a recorded run of the same case (its `record`): the
    lockstep, counter, schema and trajectory findings a checked run would make, into `res` (the checks
    that read only the target's run, finite and bounds, are the recording's own). fail_fast: stop
    at the first finding, as a fail_fast run would (the verdict only: the lockstep steps are judged
    before the trajectory's, since a wrong convention mostly fails lockstep at its first step)."""
    from .lockstep import replayer
    ls = replayer(target, groups, case.group_hparams(), res)
    failed = (lambda: not all(c.passed for c in res.values())) if fail_fast else (lambda: False)
    for k, grads, before, after in steps:
        ls.judge(k, before, after, ls.expected(before, grads))
        if failed():
            return
    trajectory = Trajectory(target, case, seed)
    touched = [[False] * len(group["params"]) for group in groups]
    for k, grads, before, after in steps:
        touched = touched_by(touched, grads)
        trajectory.step(res["trajectory"], k, grads, before, after)
        if failed():
            return
    _, where, final = end
    check_schema(res["schema"], case, target, where, final, touched)


def reload(target, case, seed, device, opt, params):
    """state_dict -> torch.save/load(weights_only) -> a fresh optimizer over
    fresh params holding the same values -> load_state_dict."""
    buf = io.BytesIO()
    torch.save({"opt": opt.state_dict(), "params": [[p.detach().clone() for p in g] for g in params]}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True, map_location=device)
    fresh = [[p.clone().requires_grad_() for p in g] for g in ckpt["params"]]
    new = build(target, case, fresh)
    new.load_state_dict(ckpt["opt"])  # torch.load made it: nothing else holds these tensors
    return new, fresh


def roundtrip_run(target, case, seed, device, at: int, reference_params, reference_opt, res: CheckResult):
    """Save at step `at`, reload, continue to the reference's end; compare bitwise."""
    seed_rounding(target, seed)
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
    compare_bits(res, at, state_bits(reference_opt), state_bits(opt),
                 f"reloaded at step {at}, against the uninterrupted run", strict=True)


def not_taken(target, case: C.Case) -> str | None:
    """Why the case cannot run on this constructor: it sets a hyperparameter the constructor has no
    parameter for, to other than the spec's default (at the default it is simply not passed)."""
    defaults = oracle.SPECS[case.optimizer].defaults
    set_ = sorted(k for hp in case.group_hparams() for k, v in hp.items()
                  if k in target.absent and v != defaults.get(k))
    if not set_:
        return None
    return f"{target.name}'s constructor takes no {', '.join(dict.fromkeys(set_))} (the case sets it)"


def run_case(target, case: C.Case, seed: int, device: str = "cpu", checks=CHECKS,
             fail_fast: bool = False, record: list | None = None) -> CaseResult:
    """One matrix case with `checks`. fail_fast: stop at the first step where one of them fails, for a
    caller that needs the verdict only (inference's probes, teach): the row then holds the findings up
    to that step, and no hazards (a passing row neither: they are never a verdict) or round trips.
    record: a list that receives the run's param_groups, then each checked step (Lockstep.record), then
    what the schema check read (lockstep_run); a recorded run is for a verdict too: no hazards."""
    import time
    t0 = time.perf_counter()
    result = CaseResult(target.name, case.name, case.optimizer, case.dtype, case.group_hparams(), seed, case.steps)
    reason = target.unavailable(device)
    if reason is None and case.dtype not in target.dtypes:
        reason = f"{target.name} does not support {case.dtype} (it takes {', '.join(target.dtypes)})"
    if reason is None:
        reason = target.outside_subset(case.name)
    if reason is None and not case.options <= target.options:
        reason = f"{target.name} does not support {', '.join(sorted(case.options - target.options))}"
    if reason is None:
        reason = not_taken(target, case)
    if reason is not None:
        result.status, result.reason = "skip", reason
        return result
    res = {name: CheckResult(name) for name in CHECKS}
    try:
        with phase("matrix case: inputs, steps past the checks"):
            opt, params = lockstep_run(target, case, seed, device, res, checks if fail_fast else (), record)
        if not fail_fast and record is None:
            with phase("matrix case: hazard measurements"):
                result.hazards = case_hazards(target, case, seed, device, free_run)
        if "roundtrip" in checks:
            with phase("matrix case: checkpoint round trips"):
                for at in (0, case.steps):
                    roundtrip_run(target, case, seed, device, at, params, opt, res["roundtrip"])
    except FailedEarly:
        pass  # failed: the checks below say so
    except Refused as exc:
        result.status, result.reason = "skip", str(exc)
        result.seconds = time.perf_counter() - t0
        return result
    except Exception as exc:  # noqa: BLE001 - a crashing target is a result, not the end of the sweep
        result.status = "error"
        result.reason = f"{type(exc).__name__}: {exc}"
        result.checks = {k: v for k, v in res.items() if v.compared}
        result.checks["error"] = CheckResult("error", passed=False, note=traceback.format_exc(limit=-3))
        result.seconds = time.perf_counter() - t0
        return result
    # the quantized and rounding checks appear on rows whose target keeps quantized state or rounds
    # stochastically
    result.checks = {k: v for k, v in res.items()
                     if k in checks and (k not in ("quantized", "rounding") or v.compared)}
    if not all(c.passed for c in result.checks.values()):
        result.status = "fail"
    result.seconds = time.perf_counter() - t0
    return result
