"""DeepSpeed engine scenarios: deepspeed.initialize over torch.distributed (gloo),
world size 1 and 2, bf16 model, ZeRO stage 0 and 1, with torch AdamW, torch
Adagrad and DeepSpeedCPUAdam (adamw_mode=True) as the client optimizer.

    python -m oracle.compare --optimizer all --target 'deepspeed.engine.*' --report-dir reports/deepspeed_engine
    python -m oracle.compare --optimizer adamw --target deepspeed.engine.zero0.bf16.adamw --scenario engine_construction

Scenarios (one oracle.compare.checking.case_run.CaseResult per target x world x variant):

engine_construction  after deepspeed.initialize, before any step: every fp32
    master (the rank's fragment of it under ZeRO 1) equals the initial model
    value exactly, the model params are unchanged, no counter has advanced
    (optimizer state "step", param-group "step", engine global_steps /
    global_samples / skipped_steps), no moments exist (torch Adagrad's
    eagerly created "sum" must still hold initial_accumulator_value), and the
    inner optimizer keeps the client's param groups and hyperparameters.
    Checks: masters, params, counters, state, hparams.
engine_roundtrip     run N steps with fixed grads, engine.save_checkpoint,
    build a fresh engine, engine.load_checkpoint, run M more steps; compare
    with an uninterrupted N+M-step run bit for bit: fp32 masters, moments and
    every other state tensor, counters (each must exist on both sides), bf16
    model params, inner hyperparameters, loss-scaler fields. Variant save@0
    saves before any step. Checks: checkpoint (the loaded engine equals the
    saving engine at the save point), roundtrip (final state equals the
    uninterrupted run's), counters (every optimizer counter and
    engine.global_steps equals the number of real steps taken).

World size 2 runs two real processes (`python -m oracle.compare.scenarios.deepspeed_engine
--worker JOB.pkl`, through oracle.compare.isolation.ranks) over gloo on 127.0.0.1; every rank checks its own state
(tensor names start with "rank r") and pickles {spec: checks} for the parent,
which merges the ranks into one row. Both ranks see the same grads, so the
data-parallel average is the grad itself.

The targets are oracle.compare.targets.deepspeed.engine_targets(); every
row carries the `python -m oracle.compare` command that reproduces it.
"""
from __future__ import annotations

import fnmatch
import os
import pickle
import sys
import time
import traceback
from dataclasses import dataclass

import numpy as np

from ..isolation import ranks
from ..checking.bitwise import compare_bits, plain as _plain
from ..measuring.checks import CheckResult, Finding
from ..checking.case_run import CaseResult
from . import Scenario

SCENARIOS = ("engine_construction", "engine_roundtrip")
ZERO_STAGES = (0, 1)
OPTIMIZERS = ("adamw", "adagrad", "cpu_adamw")  # oracle.compare.targets.deepspeed._client_optimizer names
WORLDS = (1, 2)
DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
N_STEPS, M_STEPS = 3, 2
SEED = 0
OPTIMIZER_KIND = {"adamw": "adamw", "adagrad": "adagrad", "cpu_adamw": "adamw"}
CLIENT_DOC = {"adamw": "torch.optim.AdamW", "adagrad": "torch.optim.Adagrad",
              "cpu_adamw": "deepspeed.ops.adam.DeepSpeedCPUAdam(adamw_mode=True)"}

# Known defects seen here (seed 002, ZeRO-0 + torch Adagrad, ZeRO-1 + torch Adagrad) are entries of
# reports/known.toml; a failing row's reason quotes the matching entry (oracle.compare.checking.known.note).


@dataclass(frozen=True)
class Spec:
    scenario: str
    zero: int
    optimizer: str
    world: int
    variant: str = ""          # roundtrip: "save@N" / "save@0"; construction: ""
    dtype: str = "bfloat16"

    @property
    def target(self) -> str:
        return f"deepspeed.engine.zero{self.zero}.{DTYPES[self.dtype]}.{self.optimizer}"

    @property
    def case(self) -> str:
        return f"scenario:{self.scenario}/world{self.world}" + (f"-{self.variant}" if self.variant else "")

    def repro(self) -> str:
        return (f"python -m oracle.compare --optimizer {OPTIMIZER_KIND[self.optimizer]} --target {self.target} "
                f"--scenario {self.scenario} --case '{self.case}'")


def matrix(scenarios=SCENARIOS, zeros=ZERO_STAGES, optimizers=OPTIMIZERS, worlds=WORLDS, dtypes=("bfloat16",),
           variants=None, n=N_STEPS) -> list[Spec]:
    out = []
    for dtype in dtypes:
        for world in worlds:
            for zero in zeros:
                for opt in optimizers:
                    for sc in scenarios:
                        if sc == "engine_construction":
                            out.append(Spec(sc, zero, opt, world, "", dtype))
                        else:
                            for v in (variants or (f"save@{n}", "save@0")):
                                out.append(Spec(sc, zero, opt, world, v, dtype))
    return out


# --- engines -------------------------------------------------------------------

def _engine_class():
    """EngineRun, one rank's engine (world_size set from the spec)."""
    from ..targets.deepspeed import EngineRun

    def engine(optimizer, zero_stage, dtype, world):
        return EngineRun(optimizer, zero_stage, dtype, world_size=world)
    return engine


def init_dist() -> tuple[int, int]:
    """torch.distributed over gloo: world size 1 in this process unless RANK/WORLD_SIZE are set."""
    from datetime import timedelta

    from ..targets.deepspeed import configure_env, init_distributed, init_single_process
    configure_env()
    if "WORLD_SIZE" in os.environ and os.environ["WORLD_SIZE"] != "1":
        init_distributed(timeout=timedelta(seconds=90))
    else:
        init_single_process()
    import torch.distributed as tdist
    return tdist.get_rank(), tdist.get_world_size()


def grads_for(run, seed: int, k: int) -> list:
    """Fixed grads of step k (1-based), representable in the model dtype."""
    from oracle.storage import round_to
    rng = np.random.default_rng([seed, k])
    return [[round_to(rng.standard_normal(tuple(p.shape)), run.dtype) for p in ps] for ps in run.params]


def run_steps(run, seed: int, ks) -> None:
    for k in ks:
        run.step(grads_for(run, seed, k))


def slots(run, rank: int):
    """What this rank holds per model param: (g, i, lo, hi, master view, {state key: view or value},
    counter owner label). lo:hi are the elements of the flattened param held here."""
    import torch
    w, out = run.wrapper, []
    if hasattr(w, "single_partition_of_fp32_groups"):  # ZeRO 1/2: the rank's flat partition
        for g, ps in enumerate(run.params):
            flat32, flat16 = w.single_partition_of_fp32_groups[g], w.bit16_groups_flat[g]
            part = w.parallel_partitioned_bit16_groups[g][rank]
            es = flat16.element_size()
            start = (part.data_ptr() - flat16.data_ptr()) // es
            st = run.inner.state.get(flat32, {})
            for i, p in enumerate(ps):
                off = (p.data_ptr() - flat16.data_ptr()) // es
                a, b = max(off, start), min(off + p.numel(), start + flat32.numel())
                if b <= a:
                    continue
                sl = slice(a - start, b - start)
                out.append((g, i, a - off, b - off, flat32.view(-1)[sl],
                            {k: (v.view(-1)[sl] if torch.is_tensor(v) and v.dim() > 0 else v) for k, v in st.items()},
                            f"group {g} partition"))
        return out
    for g, ps in enumerate(run.params):  # stage 0: every rank holds whole masters
        for i, p in enumerate(ps):
            m, st = run._master_and_state(g, i)
            out.append((g, i, 0, p.numel(), None if m is None else m.view(-1),
                        {k: (v.reshape(-1) if torch.is_tensor(v) and v.dim() > 0 else v) for k, v in st.items()},
                        f"group {g} param {i}"))
    return out


def _clone(v):
    import torch
    if torch.is_tensor(v):
        return v.detach().cpu().clone()
    return v


COUNTER_FIELDS = ("global_steps", "global_samples", "skipped_steps")
HPARAM_KEYS = ("lr", "weight_decay", "betas", "eps", "initial_accumulator_value", "lr_decay", "bias_correction")


def snapshot(run, rank: int) -> dict:
    """Everything this rank holds, keyed by a printable name: tensors (cloned) and plain values.
    Counters are named '... step' or 'engine <field>'."""
    out = {}
    pre = f"rank {rank} "
    for f in COUNTER_FIELDS:
        out[pre + f"engine {f}"] = getattr(run.engine, f, "<absent>")
    for g, ps in enumerate(run.params):
        for i, p in enumerate(ps):
            out[pre + f"group {g} param {i} model param ({run.dtype})"] = _clone(p)
    seen_counters = set()
    for g, i, lo, hi, m, st, owner in slots(run, rank):
        where = f"[{lo}:{hi}]"
        if m is not None:
            out[pre + f"group {g} param {i} fp32 master{where}"] = _clone(m)
        for k, v in st.items():
            if k == "step" or not hasattr(v, "dim") or v.dim() == 0:
                if (owner, k) not in seen_counters:
                    seen_counters.add((owner, k))
                    out[pre + f"{owner} {k}"] = _clone(v)
            else:
                out[pre + f"group {g} param {i} {k}{where}"] = _clone(v)
    for g, grp in enumerate(run.inner.param_groups):
        for k, v in grp.items():
            if k != "params":
                out[pre + f"inner group {g} {k}"] = _clone(v)
    scaler = getattr(run.wrapper, "loss_scaler", None)
    for holder, label in ((run.wrapper, "wrapper"), (scaler, "loss_scaler")):
        for f in ("cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis"):
            v = getattr(holder, f, None) if holder is not None else None
            if isinstance(v, (int, float)) or hasattr(v, "dim"):
                out[pre + f"{label} {f}"] = _clone(v)
    return out



def compare_snapshots(res: CheckResult, step, want: dict, got: dict, detail: str) -> None:
    """Bit-for-bit equality; a name present on one side only is a finding (every counter must exist)."""
    compare_bits(res, step, want, got, detail, strict=True, keep=8)


def construction_checks(spec: Spec, rank: int) -> dict:
    from oracle.storage import round_to
    Engine = _engine_class()
    run = Engine(spec.optimizer, spec.zero, spec.dtype, spec.world)
    try:
        checks = {n: CheckResult(n) for n in ("masters", "params", "counters", "state", "hparams")}
        pre = f"rank {rank} "
        why = "after deepspeed.initialize, before any step"
        init = [[round_to(p, spec.dtype) for p in g] for g in run.initial]
        for g, ps in enumerate(run.params):
            for i, p in enumerate(ps):
                _exact(checks["params"], pre + f"group {g} param {i} model param ({spec.dtype})", init[g][i],
                       p.detach().double().numpy(), why + ": the model param must hold its initial value")
        counters_seen = set()
        acc0 = {"adagrad": 0.0}.get(spec.optimizer)  # torch Adagrad's initial_accumulator_value
        for g, i, lo, hi, m, st, owner in slots(run, rank):
            where = f"[{lo}:{hi}]"
            want = init[g][i].reshape(-1)[lo:hi]
            if m is None:
                checks["masters"].fail(Finding("masters", 0, pre + f"group {g} param {i} fp32 master",
                                               detail="master could not be read back"))
            else:
                _exact(checks["masters"], pre + f"group {g} param {i} fp32 master{where}", want,
                       m.detach().double().numpy(), why + ": master must equal the initial value (no decay)")
            for k, v in st.items():
                if k == "step" or not hasattr(v, "dim") or v.dim() == 0:
                    if (owner, k) in counters_seen:
                        continue
                    counters_seen.add((owner, k))
                    checks["counters"].compared += 1
                    if _plain(v) != 0:
                        checks["counters"].fail(Finding("counters", 0, pre + f"{owner} {k}", expected=0,
                                                        got=_plain(v), detail=why + ": counter advanced"), keep=8)
                    continue
                name = pre + f"group {g} param {i} {k}{where}"
                if k == "sum" and acc0 is not None:  # created eagerly by torch Adagrad itself
                    _exact(checks["state"], name, np.full(hi - lo, acc0), v.detach().double().numpy(),
                           why + ": Adagrad's accumulator must hold initial_accumulator_value")
                else:
                    checks["state"].compared += 1
                    nz = v.detach().double().numpy()
                    checks["state"].fail(Finding(
                        "state", 0, name, expected="<absent>", got=f"{str(v.dtype).replace('torch.', '')} tensor, "
                        f"max abs {float(np.max(np.abs(nz))) if nz.size else 0.0:.6g}",
                        detail=why + ": optimizer state created before the first real step"), keep=8)
        for g, grp in enumerate(run.inner.param_groups):
            if "step" in grp:
                checks["counters"].compared += 1
                if _plain(grp["step"]) != 0:
                    checks["counters"].fail(Finding("counters", 0, pre + f"inner group {g} step", expected=0,
                                                    got=_plain(grp["step"]), detail=why), keep=8)
        for f in COUNTER_FIELDS:
            checks["counters"].compared += 1
            v = getattr(run.engine, f, None)
            if v != 0:
                checks["counters"].fail(Finding("counters", 0, pre + f"engine {f}", expected=0, got=v, detail=why),
                                        keep=8)
        h = checks["hparams"]
        h.compared += 1
        if len(run.inner.param_groups) != len(run.hparams):
            h.fail(Finding("hparams", 0, pre + "inner optimizer param groups", expected=len(run.hparams),
                           got=len(run.inner.param_groups), detail=f"inner optimizer is "
                           f"{type(run.inner).__name__}{' (the client object)' if run.inner is run.client else ' (not the client object)'}"),
                   keep=8)
        for g, hp in enumerate(run.hparams):
            got = run.inner.param_groups[g] if g < len(run.inner.param_groups) else {}
            for k, v in hp.items():
                h.compared += 1
                if got.get(k) != v:
                    h.fail(Finding("hparams", 0, pre + f"inner group {g} {k}", expected=v, got=got.get(k),
                                   detail="client param group's hyperparameter not kept"), keep=8)
        in_groups = {id(p) for grp in run.inner.param_groups for p in grp["params"]}
        model = {id(p): (g, i) for g, ps in enumerate(run.params) for i, p in enumerate(ps)}
        for key, st in run.inner.state.items():
            if id(key) not in in_groups:
                checks["state"].compared += 1
                what = (f"model param group {model[id(key)][0]} param {model[id(key)][1]}" if id(key) in model
                        else f"a {str(key.dtype).replace('torch.', '')} tensor {tuple(key.shape)}")
                checks["state"].fail(Finding(
                    "state", 0, pre + f"inner optimizer state keyed by {what}", expected="<absent>",
                    got=f"keys {sorted(st)}", detail=why + ": state entry for a tensor outside the inner optimizer's "
                    "param groups (torch's Optimizer.state_dict() raises KeyError on it)"), keep=8)
        checks["state"].note = (f"wrapper {type(run.wrapper).__name__}, inner {type(run.inner).__name__}"
                                f"{' (client object)' if run.inner is run.client else ''}")
        return checks
    finally:
        run.close()


def _exact(res: CheckResult, name: str, want, got, detail: str) -> None:
    want, got = np.asarray(want, np.float64).reshape(-1), np.asarray(got, np.float64).reshape(-1)
    res.compared += want.size
    if want.shape != got.shape:
        res.fail(Finding(res.check, 0, name, detail=f"shape {got.shape}, expected {want.shape}"), keep=8)
        return
    bad = ~((want == got) & (np.signbit(want) == np.signbit(got)))
    if bad.any():
        idx = int(np.argmax(bad))
        res.fail(Finding(res.check, 0, name, (idx,), float(want[idx]), float(got[idx]),
                         detail=f"{detail}; {int(bad.sum())} of {want.size} elements differ "
                                f"(max abs delta {float(np.max(np.abs(got - want))):.6g})"), keep=8)


class Phase:
    """Where a scenario is, so an exception names the engine call that raised."""

    def __init__(self):
        self.where = ""

    def __call__(self, where: str) -> None:
        self.where = where

    def error(self, exc: Exception) -> Exception:
        if isinstance(exc, PhaseError):
            return exc
        text = str(exc)
        if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], int):
            text = "an int key (the id() of a tensor, as torch's Optimizer.state_dict() looks it up)"
        return PhaseError(f"{self.where} raised {type(exc).__name__}: {text}")


class PhaseError(RuntimeError):
    pass


def roundtrip_checks(spec: Spec, rank: int, workdir: str, n: int = N_STEPS, m: int = M_STEPS,
                     seed: int = SEED, ref_cache: dict | None = None) -> dict:
    import torch.distributed as tdist
    Engine = _engine_class()
    save_at = int(spec.variant.split("@")[1]) if spec.variant else n
    total = n + m
    checks = {c: CheckResult(c) for c in ("checkpoint", "roundtrip", "counters")}
    key = (spec.zero, spec.optimizer, spec.dtype, total, seed)
    phase = Phase()
    if ref_cache is not None and key in ref_cache:
        ref_final = ref_cache[key]
    else:
        phase("uninterrupted run: deepspeed.initialize")
        ref = Engine(spec.optimizer, spec.zero, spec.dtype, spec.world)
        try:
            for k in range(1, total + 1):
                phase(f"uninterrupted run: engine step {k} (forward/backward/step)")
                ref.step(grads_for(ref, seed, k))
            ref_final = snapshot(ref, rank)
        except Exception as exc:
            raise phase.error(exc) from exc
        finally:
            ref.close()
        if ref_cache is not None:
            ref_cache[key] = ref_final
    ckpt = os.path.join(workdir, f"ckpt-zero{spec.zero}-{spec.optimizer}-{spec.dtype}-{spec.variant}")
    try:
        phase("saving run: deepspeed.initialize")
        saver = Engine(spec.optimizer, spec.zero, spec.dtype, spec.world)
        try:
            for k in range(1, save_at + 1):
                phase(f"saving run: engine step {k} (forward/backward/step)")
                saver.step(grads_for(saver, seed, k))
            saved = snapshot(saver, rank)
            phase(f"saving run: engine.save_checkpoint at step {save_at}")
            saver.engine.save_checkpoint(ckpt, tag=f"step{save_at}")
        finally:
            saver.close()
        tdist.barrier()
        phase("resumed run: deepspeed.initialize")
        loader = Engine(spec.optimizer, spec.zero, spec.dtype, spec.world)
        try:
            phase(f"resumed run: engine.load_checkpoint of step {save_at}")
            loader.engine.load_checkpoint(ckpt, tag=f"step{save_at}")
            compare_snapshots(checks["checkpoint"], save_at, saved, snapshot(loader, rank),
                              f"fresh engine after load_checkpoint vs the saving engine at step {save_at}")
            for k in range(save_at + 1, total + 1):
                phase(f"resumed run: engine step {k} (forward/backward/step)")
                loader.step(grads_for(loader, seed, k))
            final = snapshot(loader, rank)
        finally:
            loader.close()
    except Exception as exc:
        raise phase.error(exc) from exc
    compare_snapshots(checks["roundtrip"], total, ref_final, final,
                      f"saved at step {save_at}, loaded into a fresh engine, {total - save_at} more steps; "
                      f"vs the uninterrupted {total}-step run")
    c = checks["counters"]
    for name, v in final.items():
        if name.endswith(" step") or " engine global_steps" in name:
            if name.startswith(f"rank {rank} inner group") and v is None:
                continue
            c.compared += 1
            if _plain(v) != total:
                c.fail(Finding("counters", total, name, expected=total, got=_plain(v),
                               detail=f"resumed run: {total} real engine steps taken (saved at {save_at})"), keep=8)
    for name, v in ref_final.items():
        if name.endswith(" step") and _plain(v) != total:
            c.compared += 1
            c.fail(Finding("counters", total, "uninterrupted " + name, expected=total, got=_plain(v),
                           detail=f"uninterrupted run: {total} real engine steps taken"), keep=8)
    return checks


def run_specs(specs, rank: int, workdir: str, n: int = N_STEPS, m: int = M_STEPS, seed: int = SEED) -> dict:
    """Runs specs in this process (every rank runs the same list); {spec: (checks | None, seconds, error)}."""
    out, ref_cache = {}, {}
    for spec in specs:
        t0 = time.perf_counter()
        try:
            if spec.scenario == "engine_construction":
                checks = construction_checks(spec, rank)
            else:
                checks = roundtrip_checks(spec, rank, workdir, n, m, seed, ref_cache)
            out[spec] = (checks, time.perf_counter() - t0, None)
        except Exception as exc:  # noqa: BLE001 - a crashing engine is a result
            head = str(exc) if isinstance(exc, PhaseError) else f"{type(exc).__name__}: {exc}"
            out[spec] = (None, time.perf_counter() - t0, f"{head}\n{traceback.format_exc()}")
    return out


# --- results ---------------------------------------------------------------------

def _known(spec: Spec, check: str) -> str | None:
    """The known-defect text (reports/known.toml) for a failing check of this spec's row, if any."""
    from ..checking.known import note
    return note(spec.target, check, spec.case)


def _unsupported(spec: Spec) -> str | None:
    from ..targets.deepspeed import deepspeed_unavailable, op_unavailable
    reason = deepspeed_unavailable()
    if reason:
        return reason
    if spec.optimizer.startswith("cpu_"):
        reason = op_unavailable("cpu_adagrad" if "adagrad" in spec.optimizer else "cpu_adam")
        if reason:
            return reason
    if spec.dtype == "float16":
        from deepspeed.accelerator import get_accelerator
        if not get_accelerator().is_fp16_supported():
            return "fp16 refused: the CPU accelerator reports is_fp16_supported() False (no oneDNN fp16 here)"
    return None


def to_result(spec: Spec, per_rank: list, n: int = N_STEPS, m: int = M_STEPS, seed: int = SEED) -> CaseResult:
    """Merge the ranks' (checks, seconds, error) for one spec into a CaseResult."""
    from ..targets.deepspeed import DEFAULT_HPARAMS
    steps = 0 if spec.scenario == "engine_construction" else n + m
    r = CaseResult(spec.target, spec.case, OPTIMIZER_KIND[spec.optimizer], spec.dtype,
                   [dict(h) for h in DEFAULT_HPARAMS], seed, steps)
    r.seconds = max((x[1] for x in per_rank if x), default=0.0)
    r.repro = spec.repro()
    errors = [f"rank {k}: {x[2]}" for k, x in enumerate(per_rank) if x is None or x[2]]
    if errors or any(x is None for x in per_rank):
        r.status = "error"
        text = "\n".join(e if e else f"rank {k}: no result" for k, e in enumerate(errors))
        r.checks = {"error": CheckResult("error", passed=False, note=text)}
        known = _known(spec, "error")
        r.reason = (f"{text.splitlines()[0][:400]}" + (f"; {known}" if known else "")
                    + f"; reproduce: {spec.repro()}")
        return r
    merged = {}
    for checks, _, _ in per_rank:
        for name, c in checks.items():
            if name not in merged:
                merged[name] = CheckResult(name, note=c.note)
            mc = merged[name]
            mc.compared += c.compared
            if not c.passed:
                mc.passed = False
            mc.findings.extend(c.findings[:8 if len(per_rank) == 1 else 4])
    r.checks = merged
    failed = [name for name, c in merged.items() if not c.passed]
    notes = [f"client {CLIENT_DOC[spec.optimizer]}, world size {spec.world}, ZeRO {spec.zero}, {spec.dtype}; "
             f"{merged[next(iter(merged))].note or ''}".rstrip("; ")]
    if failed:
        r.status = "fail"
        notes += sorted({text for f in failed if (text := _known(spec, f))})
        notes.append(f"failed checks: {', '.join(failed)}; reproduce: {spec.repro()}")
    r.reason = "; ".join(x for x in notes if x) if failed else ""
    return r


def skip_result(spec: Spec, reason: str, n: int = N_STEPS, m: int = M_STEPS, seed: int = SEED) -> CaseResult:
    from ..targets.deepspeed import DEFAULT_HPARAMS
    r = CaseResult(spec.target, spec.case, OPTIMIZER_KIND[spec.optimizer], spec.dtype,
                   [dict(h) for h in DEFAULT_HPARAMS], seed, 0 if spec.scenario == "engine_construction" else n + m)
    r.status, r.reason = "skip", reason
    return r


def run_world(specs, world: int, n: int = N_STEPS, m: int = M_STEPS, seed: int = SEED,
              timeout: float = 600.0) -> list[CaseResult]:
    """Run specs (all of the same world size) and return one CaseResult per spec.
    World 1 runs in this process; world > 1 spawns `world` worker processes."""
    specs = list(specs)
    results, todo = {}, []
    for spec in specs:
        reason = _unsupported(spec)
        if reason:
            results[spec] = skip_result(spec, reason, n, m, seed)
        else:
            todo.append(spec)
    if todo:
        with ranks.workdir("ds-engine-") as work:
            if world == 1:
                _, size = init_dist()
                if size != 1:
                    raise RuntimeError(f"this process already has a torch.distributed group of size {size}")
                got = run_specs(todo, 0, work, n, m, seed)
                for spec in todo:
                    results[spec] = to_result(spec, [got[spec]], n, m, seed)
            else:
                per_rank = _spawn(todo, world, work, n, m, seed, timeout)
                for spec in todo:
                    results[spec] = to_result(spec, [pr.get(spec) if pr else None for pr in per_rank], n, m, seed)
                    if results[spec].status == "error" and any(pr is None for pr in per_rank):
                        results[spec].checks["error"].note += "\n" + per_rank_logs(work, world)
    return [results[s] for s in specs]


def per_rank_logs(work: str, world: int) -> str:
    return "\n".join(f"--- rank {r} log (tail) ---\n{ranks.log_tail(work, r)}" for r in range(world))


def _spawn(specs, world, work, n, m, seed, timeout) -> list:
    job = os.path.join(work, "job.pkl")
    with open(job, "wb") as fh:
        pickle.dump({"specs": list(specs), "n": n, "m": m, "seed": seed, "out": work}, fh)
    out, _ = ranks.spawn(ranks.python_module("oracle.compare.scenarios.deepspeed_engine", "--worker", job), world, work, timeout,
                         ranks.rank_env(world, DS_ACCELERATOR="cpu"))
    return out


def worker(job_path: str) -> None:
    with open(job_path, "rb") as fh:
        job = pickle.load(fh)
    import torch
    torch.set_num_threads(1)
    rank, _ = init_dist()
    got = run_specs(job["specs"], rank, job["out"], job["n"], job["m"], job["seed"])
    with open(os.path.join(job["out"], f"rank{rank}.pkl"), "wb") as fh:
        pickle.dump(got, fh)
    import torch.distributed as tdist
    tdist.barrier()
    tdist.destroy_process_group()


def run_matrix(specs, n: int = N_STEPS, m: int = M_STEPS, seed: int = SEED, log=None) -> list[CaseResult]:
    out = {}
    for world in sorted({s.world for s in specs}):
        group = [s for s in specs if s.world == world]
        t0 = time.perf_counter()
        for r in run_world(group, world, n, m, seed):
            out[(r.target, r.case)] = r
        if log:
            log(f"world {world}: {len(group)} rows in {time.perf_counter() - t0:.1f} s")
    return [out[(s.target, s.case)] for s in specs]


def specs_for(target, scenario: str, n: int = N_STEPS) -> list[Spec]:
    """The rows an engine target gives in one scenario: its world sizes, and
    for engine_roundtrip a save after N steps and one before any step."""
    e = target.engine
    return matrix((scenario,), (e.zero,), (e.client,), e.worlds, (e.dtype,), n=n)


def engine_scenario(name: str) -> Scenario:
    def run(target, device="cpu", seed=SEED, pattern=None) -> list[CaseResult]:
        specs = [s for s in specs_for(target, name)
                 if pattern is None or fnmatch.fnmatch(s.case, pattern) or pattern in s.case]
        return run_matrix(specs, seed=seed)
    run.__doc__ = {"engine_construction": "after deepspeed.initialize, before any step, nothing has changed",
                   "engine_roundtrip": "engine save_checkpoint / load_checkpoint continues bit for bit"}[name]
    return Scenario(name, run.__doc__, run, engine=True)


SCENARIOS = tuple(engine_scenario(name) for name in ("engine_construction", "engine_roundtrip"))

__all__ = ["SCENARIOS", "Spec", "compare_snapshots", "construction_checks", "matrix", "roundtrip_checks",
           "run_matrix", "run_world", "snapshot", "specs_for"]


if __name__ == "__main__":
    # a rank of a world > 1 run: python -m oracle.compare.scenarios.deepspeed_engine --worker JOB.pkl
    from ..isolation.ranks import rank_started
    rank_started()  # die with the launcher
    if sys.argv[1:2] != ["--worker"] or len(sys.argv) != 3:
        sys.exit("usage: python -m oracle.compare.scenarios.deepspeed_engine --worker JOB.pkl (started by the engine scenarios)")
    worker(sys.argv[2])
    from ..isolation.processes import exit_now
    exit_now(0)  # the launcher waits for every rank's exit: not the teardown of DeepSpeed and torch
