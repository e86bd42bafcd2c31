"""The one lockstep engine: an optimizer and the float64 oracle, step by step.

Before each step the target's state is read; the oracle runs one step from
it (with its own counters) on the same grads, on error-carrying arrays
(oracle.compare.measuring.errmodel), and the target's result must lie within the derived
per-element tolerance. Counters must be equal, exactly. The oracle keeps its
own counters, so a wrong counter shows both as a counter finding and in the
values it corrupts (bias correction).

Used by the case matrix (oracle.compare.checking.case_run) and by every scenario, so both
judge the same way: the compute precision is taken per param (groups mixing
dtypes work), a state entry the oracle has and the target lacks fails the
`schema` check where the caller keeps one (the values check otherwise), and
"param = its master rounded" is checked exactly, without detection power.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

import oracle
from oracle.common import GradScaling, OptState, equal_hparams
from oracle.storage import round_to

from ..measuring.phases import phase
from ..measuring.checks import REORDER_FACTOR, CheckResult, Finding, coarser, compare_exact, compare_tensors, tolerance
from ..measuring.errmodel import Bounded, as_bounded, unit_roundoff
from .finite import check_finite, culprit
from ..measuring.quantized_state import compare_quantized, is_quantized
from ..measuring.readback import Snapshot, math_params
from ..measuring.stochastic import Samples, compare_neighbours, judge_distribution, samples


def counters_only(state: OptState) -> OptState:
    return OptState(list(state.group_step),
                    [[{"step": st["step"]} if "step" in st else {} for st in group] for group in state.params])


def check_counters(res: CheckResult, k: int, counter: str, tracked: OptState, snap: Snapshot, label: str = "") -> None:
    """Every counter the convention keeps equals the oracle's, exactly."""
    if counter == "none":
        return
    if counter == "group":
        for g, want in enumerate(tracked.group_step):
            got = snap.group_steps[g]
            compare_exact(res, k, f"{label}group {g} step", want, got,
                          "" if got is not None else "missing in param_groups (would be saved as null)")
        return
    for g, sts in enumerate(tracked.params):
        for i, st in enumerate(sts):
            want, got = st.get("step", 0), snap.param_steps[g][i]
            compare_exact(res, k, f"{label}group {g} param {i} step", want, 0 if got is None and want == 0 else got)


def new_state_format(target, dtypes: dict) -> str:
    """The format a target creates a param's state in: the param's dtype (torch) or its declared one."""
    return dtypes["param"] if target.state_dtype == "param" else target.state_dtype


def _same_hparams(a: list, b: list) -> bool:
    """Two runs' validated hyperparameters, group by group, are equal (then they may share a call)."""
    return len(a) == len(b) and all(equal_hparams(x, y) for x, y in zip(a, b))


class Lockstep:
    """Steps an optimizer and the oracle side by side.

    target: the Target (its convention, compute precision, state names).
    opt: what step() is called on; `inner` holds param_groups and state
        (a wrapper's inner optimizer), `opt` itself by default.
    values / counters / schema / finite / quantized / rounding: the CheckResults findings go to
        (schema, finite, quantized and rounding default to values).
    """

    def __init__(self, target, opt, hparams: list[dict], values: CheckResult, counters: CheckResult,
                 label: str = "", inner=None, schema: CheckResult | None = None, finite: CheckResult | None = None,
                 quantized: CheckResult | None = None, rounding: CheckResult | None = None, record: list | None = None):
        self.target, self.opt, self.inner = target, opt, inner if inner is not None else opt
        self.spec = oracle.SPECS[target.optimizer]
        self.hparams = list(hparams)
        self.values, self.counters, self.label = values, counters, label
        self.schema = schema if schema is not None else values
        self.finite = finite if finite is not None else values
        self.quantized = quantized if quantized is not None else values
        self.rounding = rounding if rounding is not None else values
        self.rounded = Samples()  # stochastically rounded params, for the distribution test (finish)
        self.tracked = OptState.empty([g["params"] for g in self.inner.param_groups])
        self.record = record  # a list: each checked step's (k, grads, before, after) is appended (replay)

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

    def read(self) -> Snapshot:
        return self.target.read(self.inner)

    def oracle_state(self, before: Snapshot, wrap) -> OptState:
        """The oracle's state from `before`: the target's state entries (wrapped), the oracle's counters."""
        return OptState(list(self.tracked.group_step),
                        [[{**{key: wrap(v) for key, v in st.items() if key != "master_param"},
                           **({"step": self.tracked.params[g][i]["step"]}
                              if "step" in self.tracked.params[g][i] else {})}
                          for i, st in enumerate(sts)] for g, sts in enumerate(before.state)])

    def expected(self, before: Snapshot, grads, scaling: GradScaling | None = None, rider=None) -> dict:
        """compute dtype -> the oracle's (params, state) from `before`, as Bounded arrays. rider: another
        oracle run of this target's step on the same grads (case_run.Trajectory), stepped in the same call
        where it can be (see _stacked)."""
        hps = self.spec.validate(self.hparams)  # remembered per hparams (oracle.hparams.validated)
        out = {}
        computes = {c for row in self.computes(before) for c in row} or {"float32"}
        for compute in computes:
            u = unit_roundoff(compute)
            params = [[Bounded(p, None, u, state_u=unit_roundoff(new_state_format(self.target, before.dtypes[g][i])),
                               store_u=unit_roundoff(before.dtypes[g][i]["param"]))
                       for i, p in enumerate(ps)] for g, ps in enumerate(math_params(before))]
            bgrads = [[None if gr is None else Bounded(gr, None, u) for gr in gs] for gs in grads]
            state = self.oracle_state(before, lambda v: Bounded(v, None, u))
            if rider is not None and scaling is None and computes == {rider.compute} and _same_hparams(rider.hps, hps):
                out[compute] = self._stacked(params, bgrads, state, hps, rider)
            else:
                out[compute] = self.spec.step(params, bgrads, state, hps, self.target.convention, scaling)
        return out

    def _stacked(self, params, bgrads, state: OptState, hps, rider):
        """This step and the rider's in one oracle call, the rider's groups after these: an elementwise
        rule (no `reduces`) reads nothing across groups, and groups with equal hyperparameters share
        NumPy calls (oracle.common.drive), so both cost about what one did. The rider keeps its result
        (rider.stepped). Where the call raises, each runs on its own: a failure of one is not the other's."""
        if self.spec.reduces:
            return self.spec.step(params, bgrads, state, hps, self.target.convention)
        n = len(params)
        try:
            both, st = self.spec.step(params + rider.params, bgrads + rider.bounded(bgrads), OptState(
                state.group_step + rider.state.group_step, state.params + rider.state.params), hps + hps,
                self.target.convention)
        except Exception:  # noqa: BLE001 - the oracle refuses one of them: say which, apart
            return self.spec.step(params, bgrads, state, hps, self.target.convention)
        rider.stepped = (both[n:], OptState(st.group_step[n:], st.params[n:]))
        return both[:n], OptState(st.group_step[:n], st.params[:n])

    def explain(self, before: Snapshot, grads, scaling, g: int, i: int, index: tuple) -> str | None:
        """The operation that makes element (g, i, index) non-finite in the target's compute arithmetic."""
        compute = self.computes(before)[g][i]
        return culprit(self.spec, self.target.convention, self.spec.validate(self.hparams), math_params(before),
                       grads, self.oracle_state(before, lambda v: v), compute, (g, i, index), scaling)

    def computes(self, snap: Snapshot) -> list:
        return [[self.target.compute_dtype(snap.dtypes[g][i]["param"]) for i in range(len(ps))]
                for g, ps in enumerate(snap.params)]

    def step(self, k: int, grads, scaling: GradScaling | None = None, do_step: Callable | None = None,
             before: Snapshot | None = None, rider=None):
        """One checked step; returns the snapshots before and after it. before: the state as the caller
        last read it, where nothing but assigning grads has run since (the previous step's `after`): not
        read again. rider: see expected."""
        if before is None:
            with phase("reading state back"):
                before = self.read()
        with phase("oracle and error model"):
            expected = self.expected(before, grads, scaling, rider)
        with phase("target step"):
            (do_step or self.opt.step)()
        with phase("reading state back"):
            after = self.read()
        with phase("comparing"):
            check_finite(self.finite, k, before, after, grads,
                         lambda g, i, index: self.explain(before, grads, scaling, g, i, index))
            self.judge(k, before, after, expected)
        if self.record is not None and scaling is None and do_step is None:
            self.record.append((k, grads, before, after))
        return before, after

    def judge(self, k, before: Snapshot, after: Snapshot, expected: dict) -> None:
        """The step's values and counters against the oracle's `expected` (the oracle's counters advance)."""
        self.tracked = counters_only(next(iter(expected.values()))[1])
        self.compare(k, before, after, expected)
        check_counters(self.counters, k, self.target.convention.counter, self.tracked, after, self.label)

    def compare(self, k, before: Snapshot, after: Snapshot, expected: dict) -> None:
        got_params, old_params = math_params(after), math_params(before)
        # value comparisons are batched (compare_tensors: one elementwise pass for the step); the batch is
        # compared before anything else records a finding, so every CheckResult sees the same order
        batch: list = []

        def flush():
            compare_tensors(self.values, k, batch)
            batch.clear()

        for g, row in enumerate(self.computes(after)):
            for i, compute in enumerate(row):
                exp_params, exp_state = expected[compute]
                ep = exp_params[g][i]
                master = "master_param" in after.state[g][i]
                storage = after.dtypes[g][i]["master_param" if master else "param"]
                name = f"{self.label}group {g} param {i}"
                if self.target.rounding == "stochastic" and not master and coarser(storage, compute):
                    flush()
                    self.compare_stochastic(k, f"{name} param", ep, got_params[g][i], old_params[g][i], storage, compute)
                else:
                    batch.append((f"{name} {'master' if master else 'param'}", ep.v, got_params[g][i],
                                  old_params[g][i], tolerance(ep.e, ep.v, storage, compute), storage, True))
                if master:
                    rounded = round_to(after.state[g][i]["master_param"], after.dtypes[g][i]["param"])
                    batch.append((f"{name} param (= master rounded)", rounded, after.params[g][i],
                                  before.params[g][i], 0.0, after.dtypes[g][i]["param"], False))
                for key, ev in exp_state.params[g][i].items():
                    if key == "step":
                        continue
                    if key not in after.state[g][i]:
                        flush()
                        self.schema.fail(Finding(self.schema.check, k, f"{name} {key}", detail="state entry missing"))
                        continue
                    st_dtype = after.dtypes[g][i][key]
                    ev = as_bounded(ev, compute)
                    old = before.state[g][i].get(key, np.zeros_like(ev.v))
                    if is_quantized(st_dtype):
                        flush()
                        compare_quantized(self.quantized, k, f"{name} {key}", ev, after.quant[g][i][key], old)
                        continue
                    batch.append((f"{name} {key}", ev.v, after.state[g][i][key], old,
                                  tolerance(ev.e, ev.v, st_dtype, compute), st_dtype, True))
        flush()

    def compare_stochastic(self, k, tensor: str, ep: Bounded, got, old, storage: str, compute: str) -> None:
        """A stochastically rounded param: a neighbour of a value within the compute bound (no store
        rounding in it: the rounding is what is judged), its sample kept for the distribution test."""
        bound = REORDER_FACTOR * np.broadcast_to(np.asarray(ep.e, dtype=np.float64), np.shape(ep.v))
        compare_neighbours(self.rounding, k, tensor, ep.v, bound, got, old, storage)
        self.rounded.add(*samples(ep.v, bound, got, storage, compute))

    def finish(self) -> None:
        """After the last checked step: the distribution test over every stochastic rounding seen."""
        if self.rounded.p_lo:
            judge_distribution(self.rounding, self.rounded)


def replayer(target, groups, hparams: list[dict], res: dict) -> Lockstep:
    """A Lockstep that judges `target` on a recorded run (Lockstep.record: the same target's steps,
    judged under another convention) with `judge(k, before, after, expected(before, grads))`: the
    lockstep, schema and counter findings a checked run would make at those steps, into `res`'s
    CheckResults of those names (quantized-state and rounding findings are left out, as a probe leaves
    them; finite ones are the recorded run's own). `groups`: the recorded run's param_groups (their shape)."""
    ignored = CheckResult("ignored")
    return Lockstep(target, _Groups(groups), hparams, res["lockstep"], res["counters"], schema=res["schema"],
                    finite=ignored, quantized=ignored, rounding=ignored)


class _Groups:
    """What Lockstep reads of an optimizer it does not step: its param_groups."""

    def __init__(self, groups):
        self.param_groups = groups


__all__ = ["Lockstep", "check_counters", "counters_only", "new_state_format", "replayer"]
