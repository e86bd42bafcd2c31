"""Comparisons against the oracle and what a failure looks like.

Tolerances are per element and derived (oracle.compare.errmodel): the running error
bound of the oracle's own expression evaluated in the target's compute
dtype, doubled, plus the rounding of the stored result. Errors are reported
in ULPs of the storage dtype taken at the operand magnitude
(max(|old|, |new|)), which stays meaningful where the result cancels.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from oracle.storage import FORMATS, canonical, quantum, scaled_ulps

# An implementation may evaluate the specification's expression in another,
# algebraically equal order (torch's lerp for m, lr/bc1 folded into one
# scalar, sqrt(v)/sqrt(bc2) vs sqrt(v/bc2)): each reordering moves at most one
# rounding per operation, which a factor of 2 on the first-order bound covers.
REORDER_FACTOR = 2.0


@dataclass
class Finding:
    """One element that failed a check: enough to locate and fix it."""

    check: str
    step: int | None
    tensor: str
    index: tuple | None = None
    expected: object = None
    got: object = None
    error_ulps: float | None = None
    bound_ulps: float | None = None
    detail: str = ""


@dataclass
class CheckResult:
    check: str
    passed: bool = True
    compared: int = 0           # elements (or counters) compared
    worst_ratio: float = 0.0    # max error / bound
    worst_error: float = 0.0    # ULPs, at the worst ratio
    worst_bound: float = 0.0
    power: float = float("inf")  # smallest relative update error that would be caught
    unbounded: int = 0          # elements whose result the compute precision does not determine
    findings: list = field(default_factory=list)
    note: str = ""

    def fail(self, finding: Finding, keep: int = 5) -> None:
        self.passed = False
        if len(self.findings) < keep:
            self.findings.append(finding)


def coarser(storage: str, compute: str) -> bool:
    return FORMATS[canonical(storage)][0] < FORMATS[canonical(compute)][0]


def tolerance(bound_err, expected, storage: str, compute: str) -> np.ndarray:
    """Absolute tolerance per element: reordering-safe compute bound plus the
    store rounding (half a ULP of the stored format) when storing loses bits."""
    store = 0.5 * quantum(expected, storage) if coarser(storage, compute) else 0.0
    return REORDER_FACTOR * np.asarray(bound_err) + store


def compare_tensor(result: CheckResult, step, tensor: str, expected, got, old, tol, storage: str,
                   power: bool = True) -> None:
    """Elementwise |got - expected| <= tol; records worst ratio, detection power
    (min tol/|expected - old|) and the worst failing element."""
    expected, got, old = (np.asarray(x, dtype=np.float64) for x in (expected, got, old))
    if expected.shape != got.shape:
        result.fail(Finding(result.check, step, tensor, detail=f"shape {got.shape}, expected {expected.shape}"))
        return
    if expected.size == 0:
        return
    tol = np.broadcast_to(np.asarray(tol, dtype=np.float64), expected.shape)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        diff = np.abs(got - expected)
        same = (got == expected) | (np.isnan(got) & np.isnan(expected))
        ratio = np.where(same, 0.0, np.where(tol > 0, diff / tol, np.inf))
        ratio = np.where(np.isnan(ratio), np.inf, ratio)
        ratio = np.where(np.isfinite(tol), ratio, 0.0)  # no bound derivable: not compared, counted
        delta = np.abs(expected - old)
        power_at = np.where((delta > 0) & np.isfinite(delta), tol / delta, np.inf)
    unbounded = ~np.isfinite(tol)
    result.unbounded += int(np.sum(unbounded))
    result.compared += expected.size - int(np.sum(unbounded))
    if power:  # exact identities (param = rounded master) say nothing about update errors
        result.power = min(result.power, float(np.min(power_at)))
    flat = int(np.argmax(ratio))
    idx = np.unravel_index(flat, expected.shape)
    worst = float(ratio[idx])
    scale = np.maximum(np.abs(old), np.abs(expected))
    if worst >= result.worst_ratio:
        result.worst_ratio = worst
        result.worst_error = float(scaled_ulps(got[idx], expected[idx], scale[idx], storage))
        result.worst_bound = float(tol[idx] / quantum(scale[idx], storage))
    if worst > 1.0:
        result.fail(Finding(
            result.check, step, tensor, tuple(int(i) for i in idx), float(expected[idx]), float(got[idx]),
            float(scaled_ulps(got[idx], expected[idx], scale[idx], storage)),
            float(tol[idx] / quantum(scale[idx], storage)),
            f"{int(np.sum(ratio > 1))} of {expected.size} elements out of bound"))


def compare_exact(result: CheckResult, step, tensor: str, expected, got, detail: str = "") -> None:
    """Counters and other exact quantities."""
    result.compared += 1
    if expected != got:
        result.fail(Finding(result.check, step, tensor, expected=expected, got=got, detail=detail))


def same_bits(a, b) -> bool:
    """Bitwise equality of two tensors (NaNs with equal payloads compare equal)."""
    import torch
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.detach().cpu().contiguous().view(width), b.detach().cpu().contiguous().view(width)))
