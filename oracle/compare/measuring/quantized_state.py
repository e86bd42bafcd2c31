"""Quantized optimizer state in the engine; the format itself is oracle.quantized.

A target that keeps a moment quantized declares one QuantEntry per such state entry: its canonical
name, its format, and how to read its codes, block scales and code book out of a param's state.
The readback dequantizes exactly what the target reads back (its own code book times its scale,
in float32), so lockstep starts each oracle step from the target's own state, as for any dtype.

After a step the oracle's new moment x (with its derived bound b) is judged by the `quantized`
check, not by ULPs:
  - code book: the one the target holds passes oracle.quantized.code_book_problems (sorted, the
    format's size and range, 0 a code, equal to the format's codes);
  - scales: each block's scale within the bound of the oracle's (the block's largest element bound,
    plus the float32 rounding of torchao's division by 448);
  - codes: equal to the oracle's wherever x lies farther than b from a decision boundary; within one
    code where it does not (such elements are counted as `unbounded`: the compute precision does not
    decide them); any code in a block whose scale is 0 on both sides (it reads back as 0).
Errors are counted in codes. The detection power is the smallest relative error of an update that
moves a decided element's code: its distance to the nearest boundary over |x - x_old|.

The trajectory stores the oracle's state through the format (store): the value read back, with a
bound of |code| times the scale's bound, plus one code step where the code is not decided.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from oracle import quantized as Q

from .checks import REORDER_FACTOR, CheckResult, Finding
from .errmodel import Bounded

PREFIX = "q:"  # a snapshot's dtype for a quantized entry: "q:<format>"


def is_quantized(dtype: str) -> bool:
    return str(dtype).startswith(PREFIX)


def format_of(dtype: str) -> Q.QuantFormat:
    return Q.FORMATS[str(dtype)[len(PREFIX):]]


def ulp_dtype(dtype: str) -> str:
    """The float format errors are measured in: a quantized entry is read back in float32."""
    return "float32" if is_quantized(dtype) else dtype


@dataclass
class QuantRead:
    """One quantized entry as a target holds it."""

    fmt: str                   # oracle.quantized.FORMATS key
    codes: np.ndarray          # int64 code indices, the param's shape
    scales: np.ndarray         # float32, one per block
    book: np.ndarray | None    # the code book the target holds (float32); None where it keeps none (fp8)
    keys: tuple                # the state keys this entry is made of

    def values(self) -> np.ndarray:
        """What the target reads back: book[code] * scale in float32, as float64."""
        fmt = Q.FORMATS[self.fmt]
        book = fmt.codes if self.book is None else np.asarray(self.book, dtype=np.float32)
        flat = self.codes.reshape(-1)
        block = np.arange(flat.size) // fmt.block
        out = (book[flat] * self.scales.astype(np.float32)[block]).astype(np.float32)
        return out.astype(np.float64).reshape(self.codes.shape)


@dataclass(frozen=True)
class QuantEntry:
    """A state entry a target may keep quantized: `read(state)` gives its QuantRead, or None where
    this param keeps it unquantized (a tensor below the format's size threshold)."""

    name: str
    fmt: str
    read: Callable


def _host(t) -> np.ndarray:
    return t.detach().to("cpu").numpy()


def bnb_entry(name: str, fmt: str, codes: str, absmax: str, qmap: str) -> QuantEntry:
    """bitsandbytes' 8-bit blockwise state: uint8 codes under `codes`, float32 block absmax under
    `absmax`, the code book under `qmap` (optim/optimizer.py init_state)."""
    def read(st):
        import torch  # here, not when the entry is declared: the CLI lists the targets without torch
        c = st.get(codes)
        if not isinstance(c, torch.Tensor) or c.dtype != torch.uint8:
            return None
        return QuantRead(fmt, _host(c).astype(np.int64), _host(st[absmax]).astype(np.float32),
                         _host(st[qmap]).astype(np.float32), (codes, absmax, qmap))
    return QuantEntry(name, fmt, read)


def torchao_entry(name: str, fmt: str) -> QuantEntry:
    """torchao's low-bit state: a tensor subclass under the moment's own name holding `codes`,
    `scale` (and `qmap` for the dynamic maps). 4-bit codes are packed two per byte, the first in the
    high nibble (subclass_4bit.py); fp8 codes are float8_e4m3fn values."""
    def read(st):
        t = st.get(name)
        if t is None or not hasattr(t, "codes") or not hasattr(t, "scale"):
            return None
        f = Q.FORMATS[fmt]
        if fmt == "torchao.fp8":
            values = _host(t.codes.float()).reshape(-1)
            codes = np.searchsorted(f.codes, values.astype(np.float32))
            book = None
        elif f.bits == 4:
            packed = _host(t.codes).reshape(-1).astype(np.int64)
            codes = np.stack([packed >> 4, packed & 0xF], axis=1).reshape(-1)
            book = _host(t.qmap).astype(np.float32)
        else:
            codes, book = _host(t.codes).reshape(-1).astype(np.int64), _host(t.qmap).astype(np.float32)
        return QuantRead(fmt, codes.reshape(tuple(t.shape)), _host(t.scale).astype(np.float32), book, (name,))
    return QuantEntry(name, fmt, read)


# --- the check ------------------------------------------------------------------------------

def _block_max(x: np.ndarray, block: int) -> np.ndarray:
    flat = np.asarray(x, dtype=np.float64).reshape(-1)
    rows = -(-flat.size // block)
    padded = np.zeros(rows * block)
    padded[:flat.size] = flat
    return padded.reshape(rows, block).max(axis=1) if rows else np.zeros(0)


def scale_bound(bound: np.ndarray, s: np.ndarray, fmt: Q.QuantFormat) -> np.ndarray:
    """The bound of each block's scale: its largest element bound (the absmax of values each within
    its bound), over 448 and plus one float32 rounding for the e4m3 scale."""
    bs = _block_max(bound, fmt.block)
    if fmt.scale == "absmax_floor_e4m3":
        bs = bs / Q.E4M3_MAX + np.spacing(np.abs(s).astype(np.float32)).astype(np.float64)
    return bs


def compare_quantized(res: CheckResult, step, tensor: str, ev: Bounded, got: QuantRead, old) -> None:
    """The quantized check of one entry after one step (module docstring)."""
    fmt = Q.FORMATS[got.fmt]
    x = np.asarray(ev.v, dtype=np.float64)
    bound = REORDER_FACTOR * np.broadcast_to(np.asarray(ev.e, dtype=np.float64), x.shape)
    if got.codes.shape != x.shape:
        res.fail(Finding(res.check, step, tensor, detail=f"codes of shape {got.codes.shape}, expected {x.shape}"))
        return
    if got.book is not None:
        problems = Q.code_book_problems(got.book, fmt)
        if problems:
            res.fail(Finding(res.check, step, f"{tensor} code book", detail="; ".join(problems)))
    q_exp, s_exp = Q.quantize(x, fmt)
    _compare_scales(res, step, tensor, s_exp, got.scales, scale_bound(bound, s_exp, fmt))
    _compare_codes(res, step, tensor, x, bound, q_exp, s_exp, got, old)


def _compare_scales(res, step, tensor, want, got, tol) -> None:
    res.compared += want.size
    if got.shape != want.shape:
        res.fail(Finding(res.check, step, f"{tensor} scales", detail=f"{got.size} scales, expected {want.size}"))
        return
    diff = np.abs(got.astype(np.float64) - want)
    bad = diff > tol
    if bad.any():
        b = int(np.argmax(bad))
        res.fail(Finding(res.check, step, f"{tensor} scales", (b,), float(want[b]), float(got[b]),
                         detail=f"block {b}'s scale off by {diff[b]:.3g} > bound {tol[b]:.3g}; "
                                f"{int(bad.sum())} of {want.size} blocks"))


def _compare_codes(res, step, tensor, x, bound, q_exp, s_exp, got: QuantRead, old) -> None:
    fmt = Q.FORMATS[got.fmt]
    lo, hi = (r.reshape(x.shape) for r in Q.code_range(x, bound, fmt))
    amb = lo != hi
    nblock = np.arange(x.size).reshape(x.shape) // fmt.block
    zero = (s_exp[nblock] == 0) & (got.scales[nblock] == 0) if got.scales.shape == s_exp.shape else np.zeros_like(amb)
    d = np.abs(got.codes - q_exp)
    # every code in [lo, hi] is correct: the allowance is the distance to the farther end
    wrong_side = np.where(got.codes < q_exp, q_exp - lo, hi - q_exp)
    allowed = np.where(zero, np.inf, wrong_side.astype(np.float64))
    wrong = d > allowed
    res.compared += x.size
    res.unbounded += int(np.sum(amb & ~zero))
    res.power = min(res.power, _power(x, old, amb | zero, s_exp[nblock], fmt))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(wrong, np.inf, np.where(np.isfinite(allowed) & (allowed > 0), d / np.maximum(allowed, 1), 0.0))
    worst = int(np.argmax(ratio))
    idx = np.unravel_index(worst, x.shape) if x.size else ()
    if x.size:
        res.record(step, float(ratio.reshape(-1)[worst]), float(d.reshape(-1)[worst]),
                   float(allowed.reshape(-1)[worst]), d[~np.isinf(allowed)])
        if ratio.reshape(-1)[worst] >= res.worst_ratio:
            res.worst_ratio = float(ratio.reshape(-1)[worst])
            res.worst_error, res.worst_bound = float(d.reshape(-1)[worst]), float(allowed.reshape(-1)[worst])
    if not wrong.any():
        return
    book = fmt.codes
    n = Q.normalized(x, fmt, s_exp).reshape(x.shape)
    res.fail(Finding(
        res.check, step, f"{tensor} codes", tuple(int(i) for i in idx),
        float(book[q_exp[idx]] * s_exp[nblock[idx]]), float(got.values()[idx]), float(d[idx]), float(allowed[idx]),
        f"code {int(got.codes[idx])} stored, the nearest to x/scale = {float(n[idx]):.6g} is {int(q_exp[idx])} "
        f"({'within' if amb[idx] else 'farther than'} its bound of a decision boundary); "
        f"{int(wrong.sum())} of {x.size} codes wrong, {int(amb.sum())} undecided by the bound (errors in codes)"))


def _power(x, old, undecided, s, fmt: Q.QuantFormat) -> float:
    """min over decided elements of (distance to the nearest decision boundary) / |x - old|."""
    n = np.where(s > 0, x / np.where(s > 0, s, 1.0), 0.0).reshape(-1)
    edges = Q.boundaries(fmt)
    k = np.searchsorted(edges, n)
    dist = np.minimum(np.abs(n - edges[np.clip(k - 1, 0, edges.size - 1)]),
                      np.abs(edges[np.clip(k, 0, edges.size - 1)] - n)) * s.reshape(-1)
    delta = np.abs(x - np.asarray(old, dtype=np.float64)).reshape(-1)
    ok = ~undecided.reshape(-1) & (delta > 0) & np.isfinite(delta)
    return float(np.min(dist[ok] / delta[ok])) if ok.any() else float("inf")


# --- the trajectory -------------------------------------------------------------------------

def store(x: Bounded, fmt: Q.QuantFormat) -> Bounded:
    """The oracle's value stored through the format and read back, with what the target's read-back
    may differ by: the farthest code it may hold (Q.code_range) from the oracle's, plus that code's
    magnitude times the scale's bound."""
    v = np.asarray(x.v, dtype=np.float64)
    e = np.broadcast_to(np.asarray(x.e, dtype=np.float64), v.shape)
    if not fmt.quantizes(v.size):
        return x
    q, s = Q.quantize(v, fmt)
    back = Q.dequantize(q, s, fmt, v.shape)
    block = np.arange(v.size).reshape(v.shape) // fmt.block
    bs = scale_bound(REORDER_FACTOR * e, s, fmt)[block]
    codes = fmt.codes.astype(np.float64)
    # the codes a correct target may hold: every code between the nearest codes of the interval's
    # ends (a carried error spanning several codes allows all of them, not one neighbour)
    lo, hi = (r.reshape(v.shape) for r in Q.code_range(v, REORDER_FACTOR * e, fmt))
    spread = np.maximum(np.abs(codes[hi] - codes[q]), np.abs(codes[q] - codes[lo])) * s[block]
    with np.errstate(invalid="ignore"):  # code 0 reads back as 0 whatever the scale (inf bound included)
        far = np.maximum(np.abs(codes[lo]), np.abs(codes[hi]))
        scale_part = np.where(far == 0, 0.0, far * bs)
    return Bounded(back, scale_part + spread, x.u)


__all__ = ["PREFIX", "QuantEntry", "QuantRead", "bnb_entry", "compare_quantized", "format_of", "is_quantized",
           "store", "torchao_entry", "ulp_dtype"]
