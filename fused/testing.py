"""Helpers for checking fused optimizers against the oracle, in ULPs.

Errors are measured in ULPs of a storage format taken at the operands'
magnitude (oracle.storage.scaled_ulps), so an update that cancels to near
zero is not judged by the ULP of its tiny result.
"""
from __future__ import annotations

import numpy as np
import torch

from oracle.storage import scaled_ulps


def as_f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy().copy()


def assert_ulps(got, expected, scale, dtype: str, budget: float, what: str) -> float:
    """Raise AssertionError (with the worst element, its values and the share
    over budget) when |got - expected| exceeds `budget` ULPs of `dtype` at
    magnitude `scale`; returns the worst error."""
    got = as_f64(got) if isinstance(got, torch.Tensor) else np.asarray(got, np.float64)
    expected = np.asarray(expected, np.float64)
    if got.shape != expected.shape:
        raise AssertionError(f"{what}: shape {got.shape} != expected {expected.shape}")
    if got.size == 0:
        return 0.0
    err = scaled_ulps(got, expected, np.broadcast_to(scale, got.shape), dtype)
    worst = float(err.max())
    if not worst <= budget:
        idx = np.unravel_index(int(np.argmax(err)), err.shape)
        over = int(np.count_nonzero(err > budget))
        raise AssertionError(
            f"{what}: {over}/{err.size} elements over {budget} {dtype} ULPs; worst {worst:.3g} ULPs at {idx}: "
            f"got {got[idx]!r}, expected {expected[idx]!r}, scale {np.broadcast_to(scale, got.shape)[idx]!r}")
    return worst
