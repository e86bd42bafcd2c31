"""The one bit-for-bit diff: everything an optimizer holds, before vs after.

Used wherever two runs must agree exactly: a checkpoint continuation against
the uninterrupted run (roundtrip, checkpoint scenario, rank shards), and
"nothing changed" checks (construction, skipped steps, inputs left alone).
"""
from __future__ import annotations

import numpy as np
from ..lazy_torch import torch

from ..measuring.checks import CheckResult, Finding, same_bits


def plain(v):
    """A 1-element tensor as its Python number; anything else unchanged."""
    return v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v


def state_bits(opt) -> dict:
    """Everything an optimizer holds, as cloned tensors and plain values, keyed
    by a printable name ("group 0 step", "group 0 param 1 exp_avg", ...)."""
    out = {}
    for g, group in enumerate(opt.param_groups):
        out[f"group {g} step"] = plain(group.get("step"))
        for i, p in enumerate(group["params"]):
            out[f"group {g} param {i} param"] = p.detach().clone()
            for key, val in opt.state.get(p, {}).items():
                out.update(_entry_bits(f"group {g} param {i} {key}", val))
    return out


def _entry_bits(name: str, val) -> dict:
    """One state entry: a tensor cloned; a wrapper tensor subclass (torchao's quantized state) as the
    plain tensors it is made of (__tensor_flatten__: codes, scale, qmap), each compared bit for bit."""
    if not isinstance(val, torch.Tensor):
        return {name: val}
    if type(val) is not torch.Tensor and hasattr(val, "__tensor_flatten__"):
        inner, _ = val.__tensor_flatten__()
        return {k: v for attr in inner for k, v in _entry_bits(f"{name}.{attr}", getattr(val, attr)).items()}
    return {name: val.detach().clone()}


def _canon(name: str, v):
    """Lazily created zero state equals no state: an absent counter is 0."""
    if v is None and name.endswith(" step"):
        return 0
    return v


def compare_bits(res: CheckResult, step, expected: dict, got: dict, detail: str, strict: bool = False,
                 keep: int = 5) -> None:
    """Bitwise equality of two state_bits() snapshots.

    Lenient (default): an absent entry equals zeros / counter 0, since state
    created lazily as zeros is the same state. strict: an entry present on
    one side only is a finding (a checkpoint must carry everything), and so
    is a tensor on another device or a counter of another type.
    """
    for name in sorted(set(expected) | set(got)):
        res.compared += 1
        if strict and (name not in expected or name not in got):
            res.fail(Finding(res.check, step, name, expected=_describe(expected.get(name), name in expected),
                             got=_describe(got.get(name), name in got), detail=f"{detail}: present on one side only"),
                     keep)
            continue
        a, b = expected.get(name), got.get(name)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and not _is_counter(name, a, strict):
            if not same_bits(a, b) or (strict and a.device != b.device):
                res.fail(bits_finding(res.check, step, name, b, a, detail), keep)
        elif isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor) and not strict:
            ref = a if isinstance(a, torch.Tensor) else b  # absent (None) against lazily created zeros
            a, b = (torch.zeros_like(ref) if x is None else x for x in (a, b))
            if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
                res.fail(Finding(res.check, step, name, expected=repr(a), got=repr(b), detail=detail), keep)
            elif not same_bits(a, b):
                res.fail(bits_finding(res.check, step, name, b, a, detail), keep)
        elif not _same_value(a, b, name, strict):
            res.fail(Finding(res.check, step, name, expected=_shown(name, a), got=_shown(name, b), detail=detail), keep)


def _shown(name: str, v):
    """A plain value as itself, a tensor of several elements by its dtype, shape and device."""
    p = plain(v)
    return _describe(p) if isinstance(p, torch.Tensor) else _canon(name, p)


def _is_counter(name: str, t, strict: bool) -> bool:
    """A 1-element counter tensor: compared as a number (and dtype) in strict mode."""
    return strict and name.endswith(" step") and t.numel() == 1


def _same_value(a, b, name: str, strict: bool) -> bool:
    """Plain values (and 1-element tensors, e.g. counters): equal, NaN == NaN;
    strict also asks for the same kind (a float counter is not an int one)."""
    if strict and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype != b.dtype:
        return False
    pa, pb = plain(a), plain(b)
    if not strict:
        pa, pb = _canon(name, pa), _canon(name, pb)
    elif type(pa) is not type(pb) and not (isinstance(pa, (int, float)) and isinstance(pb, (int, float))):
        return False
    return _equal(pa, pb)


def _equal(a, b) -> bool:
    """Equal values, looking into lists, tuples and dicts (a group's values may hold tensors): tensors
    bit for bit, NaN equal to NaN, and anything whose == is not a truth value unequal."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_bits(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype \
            and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() \
            and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    try:
        return bool(a == b)
    except (RuntimeError, ValueError, TypeError):  # an array-like whose == is elementwise
        return False


def _describe(v, present: bool = True) -> str:
    if not present:
        return "<absent>"
    if isinstance(v, torch.Tensor):
        return f"{v.dtype} {tuple(v.shape)} {v.device}"
    return repr(v)


def bits_finding(check, step, name, got, ref, detail) -> Finding:
    """The first differing element of two tensors, with how many differ."""
    if got.dtype != ref.dtype or got.shape != ref.shape or got.device != ref.device:
        return Finding(check, step, name, expected=_describe(ref), got=_describe(got), detail=detail)
    a, b = got.detach().double().cpu().reshape(-1), ref.detach().double().cpu().reshape(-1)
    diff = (a != b) & ~(a.isnan() & b.isnan())
    idx = int(diff.nonzero()[0]) if diff.any() else 0
    return Finding(check, step, name, (idx,), float(b[idx]), float(a[idx]),
                   detail=f"{detail}: {int(diff.sum())} of {a.numel()} elements differ")


__all__ = ["bits_finding", "compare_bits", "plain", "state_bits"]
