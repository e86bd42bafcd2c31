"""The `finite` check: finite inputs must give finite results, whatever the convention.

A convention excuses rounding, never a NaN or an inf: with finite params, grads and state and
valid hyperparameters, a target whose step leaves a non-finite value fails `finite`, even where
the oracle evaluated in that target's arithmetic predicts the same NaN (the convention is then
hazardous, not the target excused).

The finding names the first non-finite element, its inputs (p, g, state) and the operation that
produced the non-finite value. That operation is found by re-running the specification's update
on `Rounded` arrays: float64 values rounded to the target's compute format after every operation,
with every constant (hyperparameters, derived scalars) rounded to that format as a kernel holding
it there sees it. The first operation whose result at the element is non-finite while its operands
there are finite is the culprit ("0 / (sqrt(0) + eps=1e-08 -> 0 in float16) = nan in float16").
"""
from __future__ import annotations

import numpy as np

from oracle.common import OptState
from oracle.storage import round_to

from ..measuring.checks import CheckResult, Finding

SYMBOLS = {np.add: "+", np.subtract: "-", np.multiply: "*", np.true_divide: "/", np.power: "**"}
FUNCTIONS = {np.sqrt: "sqrt", np.negative: "-", np.square: "square", np.maximum: "max", np.sign: "sign",
             np.copysign: "copysign", np.absolute: "abs"}
COMPARISONS = (np.equal, np.not_equal, np.less, np.greater, np.less_equal, np.greater_equal)


def _g(x: float) -> str:
    return f"{x:.4g}"


class Trace:
    """What one traced evaluation watches: the element `index` of the param tagged `tag`, the
    compute format, the hyperparameter names for constants, and the first culprit found."""

    def __init__(self, dtype: str, tag, index: tuple, shape: tuple, names: dict):
        self.dtype, self.tag, self.index, self.shape, self.names = dtype, tag, index, shape, names
        self.found: str | None = None

    def at(self, x) -> float | None:
        """x's value at the watched element: the element of a param-shaped array, a scalar's value."""
        v = x.v if isinstance(x, (Rounded, Const)) else np.asarray(x)
        if v.shape == self.shape:
            return float(v[self.index])
        return float(v.reshape(-1)[0]) if v.size == 1 else None

    def const_text(self, c: "Const") -> str:
        name = self.names.get(c.original)
        text = f"{name}={_g(c.original)}" if name else _g(c.original)
        stored = c.v.item()
        return text if _g(stored) == _g(c.original) else f"{text} -> {_g(stored)} in {self.dtype}"

    def render(self, x, depth: int) -> str:
        if isinstance(x, Const):
            return self.const_text(x)
        value = self.at(x)
        shown = "?" if value is None else _g(value)
        if x.name:
            return f"{x.name}={shown}"
        if depth <= 0 or x.op is None:
            return shown
        op, args = x.op
        if op in SYMBOLS and len(args) == 2:
            return f"({self.render(args[0], depth - 1)} {SYMBOLS[op]} {self.render(args[1], depth - 1)})"
        return f"{FUNCTIONS.get(op, getattr(op, '__name__', 'op'))}({', '.join(self.render(a, depth - 1) for a in args)})"

    def observe(self, op, args, result: "Rounded") -> None:
        if self.found is not None or result.tag != self.tag:
            return
        got = self.at(result)
        if got is None or np.isfinite(got):
            return
        operands = [self.at(a) for a in args]
        if any(v is None or not np.isfinite(v) for v in operands):
            return
        if op in SYMBOLS and len(args) == 2:
            text = f"{self.render(args[0], 2)} {SYMBOLS[op]} {self.render(args[1], 2)}"
        else:
            text = f"{FUNCTIONS.get(op, getattr(op, '__name__', 'op'))}({', '.join(self.render(a, 2) for a in args)})"
        self.found = f"{text} = {_g(got)} in {self.dtype}"


class Const:
    """A constant as the kernel holds it: rounded to the compute format, its original kept."""

    def __init__(self, value, dtype: str):
        self.original = float(np.asarray(value, dtype=np.float64).reshape(-1)[0]) if np.size(value) == 1 else None
        self.v = round_to(np.asarray(value, dtype=np.float64), dtype)


class Rounded(np.lib.mixins.NDArrayOperatorsMixin):
    """float64 values rounded to `trace.dtype` after every operation, with the operation that made
    them (one level deep: enough to render the culprit's operands)."""

    __array_priority__ = 100

    def __init__(self, value, trace: Trace, tag=None, name: str | None = None, op=None):
        self.v = np.asarray(value, dtype=np.float64)
        self.trace, self.tag, self.name, self.op = trace, tag, name, op

    def _operand(self, x):
        if isinstance(x, Rounded):
            return x
        c = Const(x, self.trace.dtype)
        return c if c.original is not None else Rounded(c.v, self.trace)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            return NotImplemented
        args = [self._operand(x) for x in inputs]
        values = [a.v for a in args]
        if ufunc in COMPARISONS:
            return ufunc(*values)
        if ufunc not in SYMBOLS and ufunc not in FUNCTIONS:
            return NotImplemented
        with np.errstate(all="ignore"):
            out = round_to(ufunc(*values), self.trace.dtype)
        tag = next((a.tag for a in args if isinstance(a, Rounded) and a.tag is not None), None)
        result = Rounded(out, self.trace, tag, op=(ufunc, args))
        self.trace.observe(ufunc, args, result)
        return result

    def __array_function__(self, func, types, args, kwargs):
        rule = _FUNCTIONS.get(func)
        return NotImplemented if rule is None else rule(*args, **kwargs)

    def __float__(self):
        return float(self.v)

    def __bool__(self):
        return bool(self.v)

    @property
    def shape(self):
        return self.v.shape

    def copy(self):
        return Rounded(self.v.copy(), self.trace, self.tag, self.name, self.op)


def _sum(x, axis=None, **_):
    with np.errstate(all="ignore"):
        return Rounded(round_to(np.sum(x.v), x.trace.dtype), x.trace, x.tag, op=(np.sum, [x]))


def _like(fill):
    def make(x, fill_value=None, **_):
        value = fill if fill_value is None else fill_value
        return Rounded(round_to(np.full_like(x.v, value, dtype=np.float64), x.trace.dtype), x.trace, x.tag)
    return make


def _norm(x, *args, **kwargs):
    return np.sqrt(_sum(x * x))


_FUNCTIONS = {np.shape: lambda x: x.v.shape, np.iscomplexobj: lambda x: False, np.sum: _sum,
              np.zeros_like: _like(0.0), np.full_like: _like(None), np.linalg.norm: _norm}


def _names(hparams: list[dict]) -> dict:
    """Constant value -> hyperparameter name (betas by position), for the culprit's text."""
    names = {}
    for hp in hparams:
        for key, value in hp.items():
            if key == "betas":
                names.update({float(value[0]): "beta1", float(value[1]): "beta2"})
            elif isinstance(value, float) and value not in (0.0, 1.0):
                names.setdefault(value, key)
    return names


def culprit(spec, convention, hparams: list[dict], params, grads, state: OptState, compute: str, where: tuple,
            scaling=None) -> str | None:
    """The operation of `spec`'s update, evaluated in `compute` arithmetic from these inputs, that first
    makes element `where` = (group, param, index) non-finite; None when that evaluation stays finite."""
    g0, i0, index = where
    trace = Trace(compute, (g0, i0), index, np.shape(params[g0][i0]), _names(hparams))
    tp = [[Rounded(p, trace, (g, i), "p") for i, p in enumerate(ps)] for g, ps in enumerate(params)]
    tg = [[None if gr is None else Rounded(gr, trace, (g, i), "g") for i, gr in enumerate(gs)]
          for g, gs in enumerate(grads)]
    ts = OptState(list(state.group_step),
                  [[{key: (v if key == "step" else Rounded(v, trace, (g, i), key)) for key, v in st.items()}
                    for i, st in enumerate(sts)] for g, sts in enumerate(state.params)])
    try:
        spec.step(tp, tg, ts, hparams, convention, scaling)
    except Exception as exc:  # noqa: BLE001 - the explanation is best-effort; the finding stands without it
        return trace.found or f"(the specification in {compute} arithmetic raised {type(exc).__name__}: {exc})"
    return trace.found


def all_finite(arrays) -> bool:
    return all(a is None or bool(np.isfinite(np.asarray(a, dtype=np.float64)).all()) for a in arrays)


def first_nonfinite(after) -> tuple | None:
    """(group, param, key, index, value) of the first non-finite element of a snapshot's params and state."""
    for g, ps in enumerate(after.params):
        for i, p in enumerate(ps):
            tensors = [("param", p), *((k, v) for k, v in after.state[g][i].items())]
            for key, arr in tensors:
                a = np.asarray(arr, dtype=np.float64)
                bad = ~np.isfinite(a)
                if a.size and bad.any():
                    index = tuple(int(j) for j in np.unravel_index(int(np.argmax(bad)), a.shape))
                    return g, i, key, index, float(a[index]) if a.ndim else float(a)
    return None


def inputs_text(before, grads, g: int, i: int, index: tuple) -> str:
    """The element's inputs: p, g and each state entry before the step."""
    def at(a):
        return _g(float(np.asarray(a, dtype=np.float64)[index]))
    parts = [f"p={at(before.params[g][i])}", "g=None" if grads[g][i] is None else f"g={at(grads[g][i])}"]
    parts += [f"{key}={at(v)}" for key, v in before.state[g][i].items()]
    return ", ".join(parts)


def check_finite(res: CheckResult, k, before, after, grads, explain) -> None:
    """Fails `res` at the first non-finite element of `after` when everything in `before` and the
    grads is finite; `explain(g, i, index)` names the operation (or None)."""
    res.compared += sum(np.size(p) for ps in after.params for p in ps)
    inputs = [p for ps in before.params for p in ps] + [x for gs in grads for x in gs]
    inputs += [v for sts in before.state for st in sts for v in st.values()]
    if not all_finite(inputs):
        return
    first = first_nonfinite(after)
    if first is None:
        return
    g, i, key, index, value = first
    why = explain(g, i, index)
    cause = (f"produced by {why}" if why else
             "the specification evaluated in the target's arithmetic stays finite here: no operation of it explains "
             "this value")
    res.fail(Finding(res.check, k, f"group {g} param {i} {key}", index, "finite", value, None, None,
                     f"non-finite from finite inputs ({inputs_text(before, grads, g, i, index)}); {cause}"))


__all__ = ["Const", "Rounded", "Trace", "check_finite", "culprit", "first_nonfinite"]
