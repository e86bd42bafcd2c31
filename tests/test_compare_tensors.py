"""compare_tensors (a step's tensors compared in one elementwise pass) leaves a CheckResult exactly as
comparing the same tensors one by one with compare_tensor does: findings and their order, the worst
element, detection power, counts, series and histogram."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oracle.compare.measuring.checks import CheckResult, compare_tensor, compare_tensors
from oracle.storage import quantum, round_to


def _items(rng, kinds):
    """Tensors of the kinds a step compares: passing, failing, unbounded, NaN, a shape mismatch, empty,
    an exact identity (power=False), other storage formats and shapes."""
    items = []
    for n, kind in enumerate(kinds):
        shape = [(7,), (3, 5), (), (2, 2, 3)][n % 4]
        storage = "bfloat16" if kind == "bf16" else "float32"
        expected = round_to(rng.standard_normal(shape), storage)
        old = expected + rng.standard_normal(shape) * 1e-2
        tol = 2.0 * quantum(expected, storage)
        got = expected + rng.uniform(-1.5, 1.5, shape) * quantum(expected, storage)  # within 1.5 ULPs
        got = np.where(rng.uniform(size=shape) < 0.3, expected, got)  # some exactly equal
        power = True
        if kind == "fail":
            got = got + 50 * quantum(expected, storage)
        elif kind == "unbounded":
            tol = np.where(rng.uniform(size=shape) < 0.5, np.inf, tol)
        elif kind == "nan":
            got = np.where(rng.uniform(size=shape) < 0.5, np.nan, got)
            expected = np.where(rng.uniform(size=shape) < 0.5, np.nan, expected)
        elif kind == "shape":
            got = np.zeros((4,))
        elif kind == "empty":
            expected, got, old, tol = (np.zeros((0, 3)),) * 4
        elif kind == "exact":
            tol, power = 0.0, False
        items.append((f"tensor {n} {kind}", expected, got, old, tol, storage, power))
    return items


KINDS = ["pass", "fail", "unbounded", "nan", "shape", "empty", "exact", "bf16", "fail", "pass"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("step", [1, None])
def test_one_pass_over_a_step_equals_tensor_by_tensor(seed, step):
    rng = np.random.default_rng(seed)
    kinds = list(rng.permutation(KINDS))
    items = _items(rng, kinds)
    history = _items(np.random.default_rng(100 + seed), ["pass", "fail"])  # an earlier step already recorded
    one, batched = CheckResult("lockstep"), CheckResult("lockstep")
    for res in (one, batched):
        for item in history:
            compare_tensor(res, 0 if step is not None else None, *item)
    for item in items:
        compare_tensor(one, step, *item)
    compare_tensors(batched, step, items)
    assert not one.passed and one.findings  # the inputs fail somewhere: the comparison is not vacuous
    assert repr(dataclasses.asdict(batched)) == repr(dataclasses.asdict(one))  # repr: NaN equals NaN


def test_an_empty_batch_changes_nothing():
    res = CheckResult("lockstep")
    compare_tensors(res, 3, [])
    assert dataclasses.asdict(res) == dataclasses.asdict(CheckResult("lockstep"))


def test_histogram_bins_by_exponent_are_the_searched_ones():
    """The large-array path (exponents) and the small one (binary search) put every value in the bin
    HIST_EDGES defines: edges <= x, exact zeros first, inf and NaN last."""
    from oracle.compare.measuring import checks
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2 ** 63, size=4000, dtype=np.uint64)  # every positive exponent, NaNs and infs
    edges = np.array(checks.HIST_EDGES)
    specials = np.concatenate([edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf),
                               [0.0, -0.0, np.inf, np.nan, 5e-324, 1e308, -1.0]])
    values = np.concatenate([bits.view(np.float64), specials, np.abs(rng.standard_normal(2000)) * 2.0 ** 10])
    want = np.array([0 if not v > 0 and not np.isnan(v) else len(edges) if not np.isfinite(v)
                     else int(np.sum(edges <= v)) for v in values])
    assert values.size >= checks._BY_EXPONENT
    assert np.array_equal(checks.histogram_bins(values), want)
    small = [checks.histogram_bins(values[i:i + 500]) for i in range(0, values.size, 500)]
    assert np.array_equal(np.concatenate(small), want)
