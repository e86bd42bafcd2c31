"""Scenarios: situations the case matrix cannot express, each checked against
the oracle and reported as a oracle.compare.run.CaseResult.

    SCENARIOS[name].run(target, device, seed) -> CaseResult

case = "scenario:<name>/<variant>"; checks = {check name: CheckResult} whose
Findings name the step, the tensor, the expected and the observed value. A
scenario an implementation cannot express returns status "skip" with the
reason; a part of a scenario it cannot express is named in the check's note
and in `reason` (status stays pass/fail on what did run). docs/scenarios.md
says what each scenario checks and which real defect it catches.

Deviations a target makes by design are declared on it (Target.declared:
(check, reason) pairs): such a check still runs, its findings are kept in the
note and in `reason`, and the row says "declared". Known defects of a library
are in reports/known.toml (oracle.compare.known): the check still fails and
`reason` names the entry.
"""
from __future__ import annotations

import copy
import io
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import torch

import oracle
from oracle.common import GradScaling, OptState
from oracle.storage import round_to

from .checks import CheckResult, Finding, compare_exact, compare_tensor, same_bits, tolerance
from .errmodel import Bounded, unit_roundoff
from .readback import math_params, read
from .run import TORCH_DTYPES, CaseResult, _plain, counters_only, set_grads
from .wrappers import MasterWeights


@dataclass(frozen=True)
class Scenario:
    name: str
    doc: str
    run: Callable  # (target, device: str, seed: int) -> CaseResult


# Base hyperparameters per optimizer: decay on, so a spurious step or a
# decay applied to a frozen param moves the param.
HPARAMS = {"adam": {"lr": 1e-2, "weight_decay": 0.1}, "adamw": {"lr": 1e-2, "weight_decay": 0.1},
           "adagrad": {"lr": 1e-2, "weight_decay": 0.1}, "lamb": {"lr": 1e-2, "weight_decay": 0.01}}

def known(target_name: str, check: str, case: str | None = None) -> str | None:
    """The known-defect text (reports/known.toml, oracle.compare.known) for a failing check, if any."""
    from .known import note
    return note(target_name, check, case)


def declared(target, check: str) -> str | None:
    """The reason a target declares for deviating in `check` by design (Target.declared), if any."""
    return dict(getattr(target, "declared", ())).get(check)


# --- inputs ------------------------------------------------------------------

def rng(seed: int, *tags) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32("|".join(map(str, tags)).encode())])


def values(seed: int, shape, dtype: str, scale: float, *tags) -> np.ndarray:
    """float64 values exactly representable in `dtype`, from (seed, tags) alone."""
    return round_to(rng(seed, *tags).standard_normal(shape) * scale, dtype)


def tensor(x: np.ndarray, dtype: str, device: str, leaf=True) -> torch.Tensor:
    t = torch.tensor(np.asarray(x), dtype=TORCH_DTYPES[dtype], device=device)
    return t.requires_grad_() if leaf else t


def grad_values(seed, label, k, shape, dtype, scale=0.1):
    return values(seed, shape, dtype, scale, "grad", label, k)


# --- lockstep with the oracle ------------------------------------------------

class Lockstep:
    """Steps an optimizer and the float64 oracle side by side.

    Before each step the target's state is read; the oracle runs one step
    from it (with its own counters, `tracked`) on the same grads; values must
    lie within the derived per-element tolerance and counters must be equal.
    The compute precision is taken per param, so groups mixing dtypes work.
    `opt` may be a wrapper: `inner` is what holds param_groups and state.
    """

    def __init__(self, target, opt, hparams: list[dict], values_check: CheckResult,
                 counters_check: CheckResult, label: str = "", inner=None):
        self.target, self.opt, self.inner = target, opt, inner if inner is not None else opt
        self.module = oracle.SPECS[target.optimizer]
        self.hparams = list(hparams)
        self.values, self.counters, self.label = values_check, counters_check, label
        self.tracked = OptState.empty([g["params"] for g in self.inner.param_groups])

    def grow(self, hparams: dict) -> None:
        """A group was added with add_param_group: the oracle gains it too."""
        self.hparams.append(hparams)
        self.tracked.group_step.append(0)
        self.tracked.params.append([{} for _ in self.inner.param_groups[len(self.tracked.params)]["params"]])

    def set_counters(self, n: int) -> None:
        self.tracked.group_step = [n] * len(self.tracked.group_step)
        for sts in self.tracked.params:
            for st in sts:
                st["step"] = n

    def step(self, k: int, grads, scaling: GradScaling | None = None, do_step: Callable | None = None):
        before = read(self.inner, self.target.state_names)
        hps = self.module.validate(self.hparams)
        computes = [[self.target.compute_dtype(before.dtypes[g][i]["param"]) for i in range(len(ps))]
                    for g, ps in enumerate(before.params)]
        expected = {}
        for compute in {c for row in computes for c in row} or {"float32"}:
            u = unit_roundoff(compute)
            params = [[Bounded(p, None, u) for p in ps] for ps in math_params(before)]
            bgrads = [[None if gr is None else Bounded(gr, None, u) for gr in gs] for gs in grads]
            state = OptState(list(self.tracked.group_step),
                             [[{**{key: Bounded(v, None, u) for key, v in st.items() if key != "master_param"},
                                **({"step": self.tracked.params[g][i]["step"]}
                                   if "step" in self.tracked.params[g][i] else {})}
                               for i, st in enumerate(sts)] for g, sts in enumerate(before.state)])
            expected[compute] = self.module.step(params, bgrads, state, hps, self.target.convention, scaling)
        (do_step or self.opt.step)()
        after = read(self.inner, self.target.state_names)
        any_exp = next(iter(expected.values()))[1]
        self.tracked = counters_only(any_exp)
        self._compare(k, before, after, expected, computes)
        self._check_counters(k, after)
        return before, after

    def _compare(self, k, before, after, expected, computes):
        got_params, old_params = math_params(after), math_params(before)
        for g, row in enumerate(computes):
            for i, compute in enumerate(row):
                exp_params, exp_state = expected[compute]
                ep = exp_params[g][i]
                master = "master_param" in after.state[g][i]
                storage = after.dtypes[g][i]["master_param" if master else "param"]
                name = f"{self.label}group {g} param {i}"
                compare_tensor(self.values, k, f"{name} {'master' if master else 'param'}", ep.v,
                               got_params[g][i], old_params[g][i], tolerance(ep.e, ep.v, storage, compute), storage)
                if master:
                    rounded = round_to(after.state[g][i]["master_param"], after.dtypes[g][i]["param"])
                    compare_tensor(self.values, k, f"{name} param (= master rounded)", rounded, after.params[g][i],
                                   before.params[g][i], 0.0, after.dtypes[g][i]["param"])
                for key, ev in exp_state.params[g][i].items():
                    if key == "step":
                        continue
                    if key not in after.state[g][i]:
                        self.values.fail(Finding(self.values.check, k, f"{name} {key}", detail="state entry missing"))
                        continue
                    st_dtype = after.dtypes[g][i][key]
                    old = before.state[g][i].get(key, np.zeros_like(ev.v))
                    compare_tensor(self.values, k, f"{name} {key}", ev.v, after.state[g][i][key], old,
                                   tolerance(ev.e, ev.v, st_dtype, compute), st_dtype)

    def _check_counters(self, k, snap):
        res = self.counters
        if self.target.convention.counter == "group":
            for g, want in enumerate(self.tracked.group_step):
                got = snap.group_steps[g]
                compare_exact(res, k, f"{self.label}group {g} step", want, got,
                              "" if got is not None else "missing in param_groups (saved as null)")
            return
        for g, sts in enumerate(self.tracked.params):
            for i, st in enumerate(sts):
                want, got = st.get("step", 0), snap.param_steps[g][i]
                compare_exact(res, k, f"{self.label}group {g} param {i} step", want,
                              0 if got is None and want == 0 else got)


# --- results -----------------------------------------------------------------

# target name -> the Target, noted by new_result so that finish (given the result only) can read
# the target's declared deviations
_TARGETS: dict = {}


def new_result(target, name: str, variant: str, dtype: str, hparams, seed: int, steps: int) -> CaseResult:
    _TARGETS[target.name] = target
    return CaseResult(target.name, f"scenario:{name}/{variant}", target.optimizer, dtype, hparams, seed, steps)


def skip(result: CaseResult, reason: str) -> CaseResult:
    result.status, result.reason = "skip", reason
    return result


def finish(result: CaseResult, checks: dict, t0: float, notes: list[str] = ()) -> CaseResult:
    result.checks = dict(checks)
    declared_notes = []
    for name, c in result.checks.items():
        reason = declared(_TARGETS.get(result.target), name)
        if reason and not c.passed:
            shown = "; ".join(f"step {f.step} {f.tensor}: expected {f.expected}, got {f.got}" for f in c.findings[:3])
            c.note = (c.note + " " if c.note else "") + f"declared deviation ({reason}); findings: {shown}"
            c.passed = True
            c.findings = []
            declared_notes.append(f"{name}: declared deviation")
    if not all(c.passed for c in result.checks.values()):
        result.status = "fail"
    known_notes = [f"{name}: {text}" for name, c in result.checks.items()
                   if not c.passed and (text := known(result.target, name, result.case))]
    result.reason = "; ".join([*known_notes, *notes, *declared_notes])
    result.seconds = time.perf_counter() - t0
    return result


def guarded(fn):
    """A scenario that raises becomes status "error" with the traceback."""
    def run(target, device: str = "cpu", seed: int = 0, **kwargs) -> CaseResult:
        t0 = time.perf_counter()
        try:
            return fn(target, device, seed, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a crashing target is a result
            name = fn.__name__.removeprefix("run_")
            result = new_result(target, name, "error", "", [], seed, 0)
            result.status, result.reason = "error", f"{type(exc).__name__}: {exc}"
            result.checks = {"error": CheckResult("error", passed=False, note=traceback.format_exc(limit=-4))}
            result.seconds = time.perf_counter() - t0
            return result
    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def unavailable(target, device: str, dtypes=("float32",), options=()) -> str | None:
    reason = target.unavailable(device)
    if reason is None and target.optimizer not in HPARAMS:
        reason = f"no scenario hyperparameters for {target.optimizer}"
    if reason is None and target.make is None:
        reason = f"{target.name} cannot be built"
    missing = [d for d in dtypes if d not in target.dtypes]
    if reason is None and missing:
        reason = f"{target.name} does not support {', '.join(missing)}"
    return reason


def build(target, groups: list[list], hparams: list[dict]):
    return target.make([{"params": ps, **hp} for ps, hp in zip(groups, hparams)], {})



def state_bits(opt) -> dict:
    """Everything an optimizer holds, as cloned tensors and plain values, keyed
    by a printable name; for bitwise before/after comparisons."""
    out = {}
    for g, group in enumerate(opt.param_groups):
        out[f"group {g} step"] = _plain(group.get("step"))
        for i, p in enumerate(group["params"]):
            out[f"group {g} param {i} param"] = p.detach().clone()
            for key, val in opt.state.get(p, {}).items():
                out[f"group {g} param {i} {key}"] = val.detach().clone() if isinstance(val, torch.Tensor) else val
    return out



def _canon(name: str, v):
    """Lazily created zero state equals no state: compare absent as zero."""
    if v is None and name.endswith(" step"):
        return 0
    return v


def compare_bits(res: CheckResult, step, before: dict, after: dict, detail: str) -> None:
    """Bitwise equality of two state_bits() snapshots; absent == zeros/0."""
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        res.compared += 1
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            ref = a if isinstance(a, torch.Tensor) else b
            a = torch.zeros_like(ref) if a is None else a
            b = torch.zeros_like(ref) if b is None else b
            if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
                res.fail(Finding(res.check, step, name, expected=repr(a), got=repr(b), detail=detail))
            elif a.numel() == 1 and name.endswith(" step"):
                if a.item() != b.item():
                    res.fail(Finding(res.check, step, name, expected=a.item(), got=b.item(), detail=detail))
            elif not same_bits(a, b):
                res.fail(_bits_finding(res.check, step, name, b, a, detail))
        elif _canon(name, a) != _canon(name, b):
            res.fail(Finding(res.check, step, name, expected=_canon(name, a), got=_canon(name, b), detail=detail))


def _bits_finding(check, step, name, got, ref, detail) -> Finding:
    if got.dtype != ref.dtype or got.shape != ref.shape or got.device != ref.device:
        return Finding(check, step, name, expected=f"{ref.dtype} {tuple(ref.shape)} {ref.device}",
                       got=f"{got.dtype} {tuple(got.shape)} {got.device}", detail=detail)
    a, b = got.detach().double().cpu().reshape(-1), ref.detach().double().cpu().reshape(-1)
    diff = (a != b) & ~(a.isnan() & b.isnan())
    idx = int(diff.nonzero()[0]) if diff.any() else 0
    return Finding(check, step, name, (idx,), float(b[idx]), float(a[idx]),
                   detail=f"{detail}: {int(diff.sum())} of {a.numel()} elements differ")


# --- 1. rank_skew ------------------------------------------------------------

RANK_SKEW_WORLDS = (2, 4)
RANK_SKEW_STEPS = (3, 3)  # steps before the checkpoint, steps after resuming


def target_spec(target) -> str | None:
    """How a worker process finds the target again: a builtin name or an impl spec."""
    if target.name.startswith("impl:"):
        return target.name
    from .targets import builtin_targets
    return target.name if any(t.name == target.name for t in builtin_targets()) else None


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
    spawn = spawn or device.startswith("cuda")
    if spec is None and spawn:
        return skip(result, f"{target.name} cannot be reconstructed in a spawned worker process "
                            "(neither a builtin target nor an impl:module:Name spec); CUDA needs spawn")
    checks, notes = {}, []
    for world in worlds:
        per_rank, err = launch_ranks(spec, target, device, seed, world, timeout, spawn)
        if err:
            result.status, result.reason = "error", f"world {world}: {err}"
            result.checks = {"error": CheckResult("error", passed=False, note=err)}
            result.seconds = time.perf_counter() - t0
            return result
        for rank, rank_checks in enumerate(per_rank):
            for name, c in rank_checks.items():
                merged = checks.setdefault(name, CheckResult(name))
                merged.compared += c.compared
                merged.worst_ratio = max(merged.worst_ratio, c.worst_ratio)
                if c.note and rank == 0:
                    merged.note = (merged.note + " | " if merged.note else "") + f"world {world}: {c.note}"
                for f in c.findings:
                    merged.fail(replace(f, tensor=f"world {world} {f.tensor}"), keep=8)
                if not c.passed:
                    merged.passed = False
    return finish(result, checks, t0, notes)


def rank_skew_hparams(optimizer: str) -> list[dict]:
    base = HPARAMS.get(optimizer, {})
    return [dict(base), {**base, "weight_decay": 0.0}]


def _free_port() -> int:
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_ranks(spec, target, device, seed, world, timeout, spawn=False):
    """Start `world` worker processes (oracle.compare.dist_scenario); returns
    ([per-rank {check: CheckResult}], error text or None).

    On CPU the workers are forked from this process (no torch re-import, a
    few hundred ms per world; the target object is inherited). On CUDA,
    which cannot be forked once initialized, they are fresh interpreters
    that find the target again by name."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory(prefix="rank_skew_") as tmp:
        job = {"spec": spec, "optimizer": target.optimizer, "convention": target.convention, "seed": seed,
               "device": device, "steps": RANK_SKEW_STEPS, "hparams": rank_skew_hparams(target.optimizer),
               "out": tmp}
        with open(os.path.join(tmp, "job.pkl"), "wb") as fh:
            pickle.dump(job, fh)
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
               "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([root, os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])])}
        # A forked child inherits an initialized default process group (e.g. one
        # DeepSpeed set up in this process) and could not start its own.
        inherited = torch.distributed.is_available() and torch.distributed.is_initialized()
        if not spawn and not inherited and "fork" in __import__("multiprocessing").get_all_start_methods():
            return _fork_ranks(job, target, world, env, tmp, timeout)
        procs = []
        for rank in range(world):
            log = open(os.path.join(tmp, f"rank{rank}.log"), "w")
            procs.append((subprocess.Popen([sys.executable, "-m", "oracle.compare.dist_scenario", os.path.join(tmp, "job.pkl")],
                                           env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                                           stdout=log, stderr=subprocess.STDOUT, cwd=os.getcwd()), log))
        deadline, err = time.monotonic() + timeout, None
        for rank, (proc, log) in enumerate(procs):
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                err = err or f"rank {rank} did not finish within {timeout:.0f} s"
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
        out = []
        for rank, (proc, _) in enumerate(procs):
            path = os.path.join(tmp, f"rank{rank}.pkl")
            if proc.returncode != 0 or not os.path.exists(path):
                with open(os.path.join(tmp, f"rank{rank}.log")) as fh:
                    tail = fh.read()[-3000:]
                err = err or f"rank {rank} exited with {proc.returncode}:\n{tail}"
                continue
            with open(path, "rb") as fh:
                out.append(pickle.load(fh))
        return out, err


def _fork_ranks(job, target, world, env, tmp, timeout):
    import multiprocessing
    from . import dist_scenario
    import torch.distributed.distributed_c10d  # noqa: F401
    # Warm up in the parent so that the workers inherit it: the first optimizer
    # __init__ imports torch._dynamo, the first step may load an extension (seconds each).
    warm = torch.zeros(2, requires_grad=True)
    warm.grad = torch.zeros(2)
    target.make([{"params": [warm], **job["hparams"][0]}], {}).step()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=dist_scenario.forked, args=(job, rank, world, target, env), daemon=True)
             for rank in range(world)]
    for p in procs:
        p.start()
    deadline, err = time.monotonic() + timeout, None
    for rank, p in enumerate(procs):
        p.join(max(1.0, deadline - time.monotonic()))
        if p.is_alive():
            err = err or f"rank {rank} did not finish within {timeout:.0f} s"
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    out = []
    for rank, p in enumerate(procs):
        path = os.path.join(tmp, f"rank{rank}.pkl")
        if p.exitcode != 0 or not os.path.exists(path):
            log = os.path.join(tmp, f"rank{rank}.log")
            tail = open(log).read()[-3000:] if os.path.exists(log) else ""
            err = err or f"rank {rank} exited with {p.exitcode}:\n{tail}"
            continue
        with open(path, "rb") as fh:
            out.append(pickle.load(fh))
    return out, err


# --- 2. construction ---------------------------------------------------------

def _construction_checks(res: CheckResult, target, opt, params, values_before, hp, label: str, masters=None,
                         init_res: CheckResult | None = None) -> None:
    """Constructing changed nothing: params (and masters) bit-identical to the
    inputs, counters 0 or absent, no moments, eager accumulators at their
    initial value, state_dict() allocating nothing."""
    inner = opt.optimizer if hasattr(opt, "optimizer") and not isinstance(opt, torch.optim.Optimizer) else opt
    for g, ps in enumerate(params):
        for i, p in enumerate(ps):
            res.compared += 1
            if not same_bits(p.detach(), values_before[g][i]):
                res.fail(_bits_finding(res.check, 0, f"{label}group {g} param {i} param", p.detach(),
                                       values_before[g][i], "changed by construction"))
            if masters is not None:
                m = masters[g][i]
                widened = values_before[g][i].to(m.dtype)
                res.compared += 1
                if not same_bits(m.detach(), widened):
                    res.fail(_bits_finding(res.check, 0, f"{label}group {g} param {i} master", m.detach(), widened,
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
                elif key == "sum":
                    init = hp[g].get("initial_accumulator_value", 0.0)
                    (init_res or res).compared += 1
                    if not isinstance(val, torch.Tensor) or bool((val != init).any()):
                        (init_res or res).fail(Finding((init_res or res).check, 0, name, expected=init,
                                         got=float(val.flatten()[0]) if isinstance(val, torch.Tensor) and val.numel() else repr(val),
                                         detail="eager accumulator not at initial_accumulator_value"))
                elif key in ("master_param", "master", "fp32_param"):
                    if not same_bits(val, p.detach().to(val.dtype)):
                        res.fail(_bits_finding(res.check, 0, name, val, p.detach().to(val.dtype),
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
                        res.fail(_bits_finding(res.check, 0, f"{name} {key}", got, val.to(m.dtype),
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
    extra = sum(1 for st in osd["state"].values() for k in st if k not in ("step", "sum", "master_param"))
    if extra:
        res.fail(Finding(res.check, 0, f"{label}state_dict", expected="no moments", got=f"{extra} entries",
                         detail="state_dict() before the first step holds moments"))


@guarded
def run_construction(target, device="cpu", seed=0, wrapper=MasterWeights, wrapped_dtypes=("bfloat16", "float16")):
    """Constructing an optimizer, and a mixed-precision wrapper around one,
    changes nothing; the first real update equals the oracle's step 1."""
    t0 = time.perf_counter()
    hp = [dict(HPARAMS.get(target.optimizer, {})), {**HPARAMS.get(target.optimizer, {}), "weight_decay": 0.0}]
    if target.optimizer == "adagrad" and "initial_accumulator_value" in target.options:
        hp[1]["initial_accumulator_value"] = 0.1
    result = new_result(target, "construction", "fp32+wrapped", "float32", hp, seed, 1)
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    checks = {n: CheckResult(n) for n in ("construction", "first_step", "counters", "wrapper", "eager_state",
                                          "eager_init")}
    notes = []
    shapes = [[(6, 5), (7,)], [(4,)]]

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
                    checks["first_step"].fail(_bits_finding("first_step", 1, f"{label}group {g} param {i} param",
                                                            p.detach(), want, "model param != master rounded"))
    if not checks["eager_init"].compared:
        del checks["eager_init"]
    return finish(result, checks, t0, notes)


# --- 3. checkpoint -----------------------------------------------------------

CKPT_STEPS, CKPT_EXTRA = 20, 3
FLAG_KEYS = ("foreach", "fused", "capturable", "differentiable")


def _ckpt_setup(target, dtype, device, seed, hp):
    shapes = [[(8, 4), (5,)], [(6,)]]
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
    hp = [dict(HPARAMS.get(target.optimizer, {})), {**HPARAMS.get(target.optimizer, {}), "weight_decay": 0.0}]
    result = new_result(target, "checkpoint", "+".join(d[:4] for d in dtypes), "float32", hp, seed,
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
    return finish(result, checks, t0, notes)


def _compare_runs(res, at, label, opt, ref, detail):
    a, b = state_bits(opt), state_bits(ref)
    compare_bits(res, at, {f"{label}{k}": v for k, v in b.items()}, {f"{label}{k}": v for k, v in a.items()}, detail)


def _cross_source(target):
    """Another implementation writing the same checkpoint format, or None."""
    from .targets import torch_targets
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


# --- 4. grad_scaling ---------------------------------------------------------

SCALE = 1024.0  # a power of two: scaling and unscaling are exact


@guarded
def run_grad_scaling(target, device="cpu", seed=0):
    """found_inf leaves everything bitwise unchanged (first step and later);
    inv_scale is applied exactly once."""
    t0 = time.perf_counter()
    hp = [{**HPARAMS.get(target.optimizer, {}), "eps": 1e-3}]  # |g| ~ eps: the grad's scale shows in the update
    # (step, found_inf, loss scale); steps 6-7: found_inf without a grad scale (PyTorch #95847)
    steps = [(1, True, SCALE), (2, False, SCALE), (3, False, SCALE), (4, True, SCALE), (5, False, SCALE),
             (6, True, 1.0), (7, False, 1.0)]
    result = new_result(target, "grad_scaling", "fp32/scale1024+1", "float32", hp, seed, len(steps))
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    if target.scaling is None:
        return skip(result, f"{target.name} has no grad-scaling interface (target.scaling is None)")
    checks = {n: CheckResult(n) for n in ("found_inf", "scaled_step", "counters")}
    shapes = [(6, 4), (9,)]
    params = [[tensor(values(seed, s, "float32", 1.0, "scaling", i), "float32", device) for i, s in enumerate(shapes)]]
    opt = build(target, params, hp)
    ls = Lockstep(target, opt, hp, checks["scaled_step"], checks["counters"])
    for k, inf, scale in steps:
        grads = [[grad_values(seed, ("scaling", i), k, s, "float32", 1e-3) * scale for i, s in enumerate(shapes)]]
        if inf:
            grads[0][0] = grads[0][0].copy()
            grads[0][0].flat[0] = np.inf
        set_grads(params, grads)
        if inf:
            before = state_bits(opt)
            target.scaling(opt, 1.0 / scale, True)
            compare_bits(checks["found_inf"], k, before, state_bits(opt), f"changed by a step with found_inf (step {k})")
            checks["found_inf"].compared += 1
        else:
            ls.step(k, grads, GradScaling(inv_scale=1.0 / scale),
                    do_step=lambda: target.scaling(opt, 1.0 / scale, False))
    return finish(result, checks, t0)


# --- 5. irregular ------------------------------------------------------------

def _irregular_layouts():
    """name -> (groups of (label, shape, dtype), grad-None steps per label, steps)."""
    f = "float32"
    return {
        "grad_none": ([[("a", (5, 3), f), ("frozen", (4,), f), ("skip4", (6,), f)]],
                      {"frozen": (1, 2, 3), "skip4": (4,)}, 6),
        "zero_numel": ([[("z0", (0,), f), ("a", (5,), f), ("z1", (0, 3), f), ("b", (3, 2), f), ("z2", (0,), f)]], {}, 3),
        "scalar": ([[("s", (), f), ("a", (4,), f)]], {}, 3),
        "noncontiguous": ([[("nc_t", (5, 4), f), ("a", (3,), f), ("nc_s", (7,), f)]], {}, 3),
        "mixed_dtypes": ([[("f32", (5,), "float32"), ("bf16", (6,), "bfloat16"), ("f16", (4,), "float16")]], {}, 3),
        "add_param_group": ([[("a", (5, 2), f)]], {}, 5),
    }


def _noncontiguous(x: np.ndarray, dtype, device, kind):
    """A leaf tensor with the values of x that is not contiguous."""
    dt = TORCH_DTYPES[dtype]
    if kind == "t":  # a transposed layout
        t = torch.empty(x.shape[::-1], dtype=dt, device=device).t()
    else:  # every other element of a larger buffer
        t = torch.empty(2 * x.size, dtype=dt, device=device)[::2].view(x.shape)
    with torch.no_grad():
        t.copy_(torch.tensor(x, dtype=dt))
    return t.detach().requires_grad_()


@guarded
def run_irregular(target, device="cpu", seed=0):
    """grad None (frozen/unfrozen), zero-numel tensors first/middle/last, 0-dim
    params, non-contiguous params and grads, mixed dtypes in one group, a
    group added after construction: every step checked against the oracle."""
    t0 = time.perf_counter()
    base = dict(HPARAMS.get(target.optimizer, {}))
    result = new_result(target, "irregular", "mixed", "float32", [base], seed, 0)
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    checks, notes = {}, []
    for name, (groups, none, steps) in _irregular_layouts().items():
        res = checks[name] = CheckResult(name)
        dtypes = {d for g in groups for _, _, d in g}
        missing = dtypes - set(target.dtypes)
        if missing:
            res.note = f"skipped: {target.name} does not support {', '.join(sorted(missing))}"
            notes.append(f"{name} skipped ({res.note[9:]})")
            continue
        hp = [{**base, "eps": 1e-3}] if name == "mixed_dtypes" else [dict(base)]
        params = []
        for g, group in enumerate(groups):
            row = []
            for label, shape, dt in group:
                x = values(seed, shape, dt, 1.0, "irregular", name, label)
                row.append(_noncontiguous(x, dt, device, label[-1]) if label.startswith("nc_") else tensor(x, dt, device))
            params.append(row)
        layout = [[(label, shape, dt) for label, shape, dt in group] for group in groups]
        try:
            opt = build(target, params, hp)
        except Exception as exc:  # noqa: BLE001
            if name == "noncontiguous" and "contiguous" in str(exc):
                res.note = f"skipped: construction refused non-contiguous params: {type(exc).__name__}: {exc}"
                notes.append(f"{name} skipped (refused: {exc})")
            else:
                res.fail(Finding(name, 0, f"[{name}] constructor", expected="an optimizer", got=type(exc).__name__,
                                 detail=str(exc)[:300]))
            continue
        ls = Lockstep(target, opt, hp, res, res, f"[{name}] ")
        ptrs = {(g, i): (p.data_ptr(), p.stride()) for g, ps in enumerate(params) for i, p in enumerate(ps)}
        for k in range(1, steps + 1):
            if name == "add_param_group" and k == 3:
                x = values(seed, (3, 3), "float32", 1.0, "irregular", name, "late")
                late = tensor(x, "float32", device)
                late_hp = {**base, "weight_decay": 0.0, "lr": base.get("lr", 1e-2) * 0.5}
                opt.add_param_group({"params": [late], **late_hp})
                params.append([late])
                layout.append([("late", (3, 3), "float32")])
                ls.grow(late_hp)
            grads = []
            for g, group in enumerate(layout):
                row = []
                for label, shape, dt in group:
                    scale = 1.0 if dt == "float16" else 0.1
                    row.append(None if k in none.get(label, ()) else grad_values(seed, ("irr", name, label), k, shape, dt, scale))
                grads.append(row)
            for g, (ps, gs, lay) in enumerate(zip(params, grads, layout)):
                for p, gr, (label, shape, dt) in zip(ps, gs, lay):
                    if gr is None:
                        p.grad = None
                    elif label.startswith("nc_"):
                        p.grad = _noncontiguous(gr, dt, device, "s" if label[-1] == "t" else "t").detach()
                    else:
                        p.grad = torch.tensor(gr, dtype=p.dtype, device=p.device)
            try:
                ls.step(k, grads)
            except Exception as exc:  # noqa: BLE001 - reported in this sub-case, the others still run
                if name == "noncontiguous" and k == 1 and "contiguous" in str(exc):
                    # refused with a reason: the implementation cannot express it (not silently wrong)
                    res.note = f"skipped: step() refused non-contiguous tensors: {type(exc).__name__}: {exc}"
                    notes.append(f"{name} skipped (refused: {exc})")
                else:
                    res.fail(Finding(name, k, f"[{name}] step()", expected="an update", got=type(exc).__name__,
                                     detail=str(exc)[:300]))
                break
            for (g, i), (ptr, stride) in ptrs.items():
                p = params[g][i]
                res.compared += 1
                if (p.data_ptr(), p.stride()) != (ptr, stride):
                    res.fail(Finding(name, k, f"[{name}] group {g} param {i} storage", expected=f"{ptr:#x} {stride}",
                                     got=f"{p.data_ptr():#x} {p.stride()}",
                                     detail="the param was replaced, not updated in place (views of it go stale)"))
    return finish(result, checks, t0, notes)


# --- 6. long_horizon ---------------------------------------------------------

HORIZONS = (2 ** 8, 2 ** 11, 2 ** 24)
HORIZON_STEPS = 4  # start at N - 2: the counter crosses N


def _set_counter(opt, n: int) -> None:
    """Counters set to n keeping their type (tensor dtype/device, int, float)."""
    def cast(old):
        if isinstance(old, torch.Tensor):
            return torch.full_like(old, n)
        return type(old)(n)
    for group in opt.param_groups:
        if group.get("step") is not None:
            group["step"] = cast(group["step"])
        for p in group["params"]:
            st = opt.state.get(p)
            if st and "step" in st:
                st["step"] = cast(st["step"])


@guarded
def run_long_horizon(target, device="cpu", seed=0, horizons=HORIZONS):
    """Counters started near 2^8, 2^11, 2^24 keep counting exactly and bias
    correction matches the oracle started from the same counter."""
    t0 = time.perf_counter()
    hp = [dict(HPARAMS.get(target.optimizer, {}))]
    if target.optimizer == "adagrad" and "lr_decay" in target.options:
        hp[0]["lr_decay"] = 1e-3  # the counter enters the update through the lr decay
    result = new_result(target, "long_horizon", "fp32/" + "+".join(f"2^{int(math.log2(n))}" for n in horizons),
                        "float32", hp, seed, 1 + HORIZON_STEPS)
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    checks = {}
    shapes = [(5, 4), (3,)]
    for n in horizons:
        values_check = checks[f"lockstep@{n}"] = CheckResult(f"lockstep@{n}")
        counters_check = checks[f"counters@{n}"] = CheckResult(f"counters@{n}")
        params = [[tensor(values(seed, s, "float32", 1.0, "horizon", i), "float32", device) for i, s in enumerate(shapes)]]
        opt = build(target, params, hp)
        ls = Lockstep(target, opt, hp, values_check, counters_check, f"[from {n - 2}] ")
        grads = [[grad_values(seed, ("horizon", i), 1, s, "float32") for i, s in enumerate(shapes)]]
        set_grads(params, grads)
        ls.step(1, grads)
        _set_counter(opt, n - 2)
        ls.set_counters(n - 2)
        for k in range(n - 1, n - 1 + HORIZON_STEPS):
            grads = [[grad_values(seed, ("horizon", i), k, s, "float32") for i, s in enumerate(shapes)]]
            set_grads(params, grads)
            ls.step(k, grads)
    return finish(result, checks, t0)


# --- 7. inputs_unchanged -----------------------------------------------------

def _configs(target):
    base = dict(HPARAMS.get(target.optimizer, {}))
    out = [("wd", base)]
    if "maximize" in target.options:
        out.append(("maximize", {**base, "maximize": True}))
    if "amsgrad" in target.options:
        out.append(("amsgrad", {**base, "amsgrad": True}))
    return out


@guarded
def run_inputs_unchanged(target, device="cpu", seed=0, steps=3):
    """Grads, their tensors and the caller's hyperparameters are unchanged by step()."""
    t0 = time.perf_counter()
    configs = _configs(target)
    result = new_result(target, "inputs_unchanged", "fp32+bf16/" + "+".join(c for c, _ in configs), "float32",
                        [hp for _, hp in configs], seed, steps)
    reason = unavailable(target, device)
    if reason:
        return skip(result, reason)
    res = CheckResult("inputs_unchanged")
    shapes = [(6, 3), (5,)]
    for dtype in ("float32", "bfloat16"):
        if dtype not in target.dtypes:
            continue
        for cname, hp in configs:
            label = f"[{dtype} {cname}] "
            params = [[tensor(values(seed, s, dtype, 1.0, "inputs", i), dtype, device) for i, s in enumerate(shapes)]]
            opt = build(target, params, [hp])
            for k in range(1, steps + 1):
                grads = [[grad_values(seed, ("inputs", i), k, s, dtype) for i, s in enumerate(shapes)]]
                set_grads(params, grads)
                gts = [p.grad for p in params[0]]
                copies = [g.detach().clone() for g in gts]
                caller = [{key: copy.deepcopy(v) for key, v in group.items() if key not in ("params", "step")}
                          for group in opt.param_groups]
                opt.step()
                for i, (p, g, c) in enumerate(zip(params[0], gts, copies)):
                    res.compared += 2
                    if p.grad is not g:
                        res.fail(Finding("inputs_unchanged", k, f"{label}group 0 param {i} grad", expected="same tensor",
                                         got="replaced", detail="step() replaced p.grad"))
                    if not same_bits(g, c):
                        res.fail(_bits_finding("inputs_unchanged", k, f"{label}group 0 param {i} grad", g, c,
                                               "grad modified by step()"))
                for gi, (group, was) in enumerate(zip(opt.param_groups, caller)):
                    for key, val in was.items():
                        res.compared += 1
                        if not _same_value(group.get(key), val):
                            res.fail(Finding("inputs_unchanged", k, f"{label}group {gi} {key}", expected=repr(val),
                                             got=repr(group.get(key)), detail="hyperparameter modified by step()"))
    return finish(result, {"inputs_unchanged": res}, t0)


def _same_value(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_bits(a, b)
    return type(a) is type(b) and a == b


# --- the registry --------------------------------------------------------------

def _scenario(name, fn) -> Scenario:
    return Scenario(name, (fn.__doc__ or "").strip().split("\n\n")[0], fn)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    _scenario("rank_skew", run_rank_skew),
    _scenario("construction", run_construction),
    _scenario("checkpoint", run_checkpoint),
    _scenario("grad_scaling", run_grad_scaling),
    _scenario("irregular", run_irregular),
    _scenario("long_horizon", run_long_horizon),
    _scenario("inputs_unchanged", run_inputs_unchanged),
)}

__all__ = ["SCENARIOS", "Scenario", "Lockstep", "run_rank_skew", "run_construction", "run_checkpoint",
           "run_grad_scaling", "run_irregular", "run_long_horizon", "run_inputs_unchanged"]
