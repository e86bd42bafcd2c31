"""Pieces shared by every update rule: state, counters, grad scaling, decay.

Parameters are given as groups, as in torch: `params[g][i]` is a float64
array, `grads[g][i]` a float64 array or None (no grad this step), and
`hparams[g]` the group's hyperparameters. Everything here is pure: inputs
are never mutated, new arrays are returned.
"""
from __future__ import annotations

import copy
import math
import numbers
from dataclasses import dataclass, field

import numpy as np

# "none": no counter at all (torch SGD, the reference Lion implementations);
# an update rule that reads no t declares it so that state carries no "step".
COUNTERS = ("param", "group", "none")


@dataclass
class OptState:
    """Optimizer state in canonical form.

    group_step: one exact integer counter per group (per-group convention:
        apex, TransformerEngine, our fused kernels); 0 before the first step.
    params: per group, per param, a dict of state entries. "step" (an int)
        lives here under the per-param convention (torch, DeepSpeed CPU ops);
        the arrays use torch's names: exp_avg, exp_avg_sq, max_exp_avg_sq, sum.
        An empty dict means the param has no state yet.
    """

    group_step: list[int] = field(default_factory=list)
    params: list[list[dict]] = field(default_factory=list)

    @classmethod
    def empty(cls, params) -> "OptState":
        return cls([0] * len(params), [[{} for _ in group] for group in params])

    def copy(self) -> "OptState":
        return copy.deepcopy(self)


@dataclass(frozen=True)
class GradScaling:
    """Mixed-precision grad scaling: grads are multiplied by inv_scale; when
    found_inf is set the whole step is skipped (params, state, counters)."""

    inv_scale: float = 1.0
    found_inf: bool = False


def maybe_fp32(x: float, enabled: bool) -> float:
    """Hyperparameters as a kernel holding them in fp32 sees them."""
    return float(np.float32(x)) if enabled else float(x)


def bias_corrections(beta1: float, beta2: float, t: int, enabled: bool) -> tuple[float, float]:
    """(1 - beta1**t, 1 - beta2**t), or (1, 1) without bias correction.

    Computed with an exact integer power (math.pow on floats), never as a
    running product: t is an exact integer and the result must not depend on
    how the counter got there.
    """
    if not enabled:
        return 1.0, 1.0
    return 1.0 - math.pow(beta1, t), 1.0 - math.pow(beta2, t)


def check_counter(counter: str) -> None:
    if counter not in COUNTERS:
        raise ValueError(f"counter must be one of {COUNTERS}, got {counter!r}")


def check_structure(params, grads, state: OptState, hparams) -> None:
    """Shapes of the inputs agree; raises ValueError naming the first offender."""
    if not (len(params) == len(grads) == len(hparams) == len(state.params) == len(state.group_step)):
        raise ValueError(
            f"group count differs: params {len(params)}, grads {len(grads)}, hparams {len(hparams)}, "
            f"state {len(state.params)}/{len(state.group_step)}")
    for g, (ps, gs, ss) in enumerate(zip(params, grads, state.params)):
        if not (len(ps) == len(gs) == len(ss)):
            raise ValueError(f"group {g}: {len(ps)} params, {len(gs)} grads, {len(ss)} state entries")
        for i, (p, gr) in enumerate(zip(ps, gs)):
            if np.iscomplexobj(p) or (gr is not None and np.iscomplexobj(gr)):
                raise ValueError(f"group {g} param {i}: complex values are not supported")
            if gr is not None and np.shape(gr) != np.shape(p):
                raise ValueError(f"group {g} param {i}: grad shape {np.shape(gr)} != param shape {np.shape(p)}")
            for key, value in ss[i].items():
                if key != "step" and np.shape(value) != np.shape(p):
                    raise ValueError(f"group {g} param {i}: state {key!r} shape {np.shape(value)} "
                                     f"!= param shape {np.shape(p)}")


def check_betas(group: int, betas) -> None:
    """A pair, each in [0, 1)."""
    if len(tuple(betas)) != 2:
        raise ValueError(f"group {group}: betas must be a pair (beta1, beta2), got {betas!r}")
    for k, b in enumerate(betas):
        check_range(group, f"betas[{k}]", b, low=0.0, high=1.0, high_open=True)


def as_float64(x, copy: bool = False):
    """Array-likes become float64 arrays (a new one when `copy`). Objects that
    implement numpy's protocols themselves (the harness's error-bounded arrays)
    pass through, so the same update math can also derive tolerances."""
    if hasattr(x, "__array_function__") and not isinstance(x, np.ndarray):
        return x
    return np.array(x, dtype=np.float64) if copy else np.asarray(x, dtype=np.float64)


def check_range(group: int, name: str, value, low=None, high=None, high_open=False) -> None:
    """Hyperparameter range check with a message naming the group."""
    ok = isinstance(value, numbers.Real) and not math.isnan(value)  # numbers.Real: NumPy scalars too
    if ok and low is not None:
        ok = value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        bound = f"[{low}, inf)" if high is None else f"[{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"group {group}: {name}={value!r} is outside {bound}")


def drive(params, grads, state, hparams, counter, scaling, update):
    """Advance counters and apply `update(g, i, p, grad, st, t)` to every
    param that has a grad; returns (new params, new state).

    Counters: under "group" every group's counter advances on every step,
    empty groups and groups whose params all lack grads included; under
    "param" a param's counter advances only when it has a grad; under "none"
    nothing advances and `update` gets t=None (the rule must not read it).
    found_inf skips everything, counters included.
    """
    check_counter(counter)
    check_structure(params, grads, state, hparams)
    # copies: a param without a grad (or every param, under found_inf) is returned as is,
    # and must not alias the caller's array
    new_params = [[as_float64(p, copy=True) for p in group] for group in params]
    new_state = state.copy()
    if scaling is not None and scaling.found_inf:
        return new_params, new_state
    inv_scale = 1.0 if scaling is None else float(scaling.inv_scale)
    for g, group in enumerate(new_params):
        if counter == "group":
            new_state.group_step[g] += 1
        for i, p in enumerate(group):
            grad = grads[g][i]
            if grad is None:
                continue
            st = new_state.params[g][i]
            if counter == "param":
                st["step"] = st.get("step", 0) + 1
            t = {"group": new_state.group_step[g], "param": st.get("step"), "none": None}[counter]
            scaled = as_float64(grad) * inv_scale if inv_scale != 1.0 else as_float64(grad)
            new_params[g][i], new_state.params[g][i] = update(g, i, p, scaled, st, t)
    return new_params, new_state
