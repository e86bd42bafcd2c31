"""oracle.storage against independent ground truth: NumPy's float64 -> float32/float16 casts
(single, correctly rounded conversions) and torch's float32 -> bfloat16 cast on every bf16
bit pattern."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from oracle.storage import quantum, round_to, scaled_ulps

NP = {"float32": np.float32, "float16": np.float16}
UINT = {"float32": np.uint32, "float16": np.uint16}


def edge_values(dtype, rng):
    """float64 values around every interesting point of `dtype`: random values over the whole
    exponent range (normals and subnormals), exact midpoints between neighbours and one
    float64 ULP either side of them, and the overflow boundary."""
    ftype, utype = NP[dtype], UINT[dtype]
    info = np.finfo(ftype)
    nbits = 8 * np.dtype(ftype).itemsize
    bits = rng.integers(0, 2 ** nbits - 1, size=20000, dtype=np.uint64).astype(utype)
    x = bits.view(ftype)
    x = x[np.isfinite(x)]
    lo = x.astype(np.float64)
    with np.errstate(over="ignore"):
        hi = np.nextafter(x, np.copysign(ftype(np.inf), x)).astype(np.float64)  # next away from 0 (inf at the top)
    finite_hi = np.isfinite(hi)
    mid = (lo[finite_hi] + hi[finite_hi]) / 2  # exact in float64
    # the top: midpoint between the largest finite value and the next power of two (rounds to inf)
    top = float(info.max) + (float(info.max) - float(np.nextafter(info.max, ftype(0)))) / 2
    assert np.isfinite(top)
    specials = np.array([top, -top, float(info.max), np.finfo(np.float64).max, float(info.tiny), float(info.smallest_subnormal),
                         float(info.smallest_subnormal) / 2, float(info.smallest_subnormal) / 2 * 3,
                         0.0, -0.0, 1e300, -1e300, 5e-324])
    random = rng.standard_normal(5000) * np.exp2(rng.uniform(info.minexp - info.nmant - 2, info.maxexp + 1, 5000))
    with np.errstate(over="ignore"):  # float64's max steps to inf: kept, round_to must pass it through
        return np.concatenate([lo, mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf), specials,
                               np.nextafter(specials, np.inf), np.nextafter(specials, -np.inf), random])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_round_to_matches_numpy_casts(dtype):
    rng = np.random.default_rng(0)
    x = edge_values(dtype, rng)
    with np.errstate(over="ignore"):
        want = x.astype(NP[dtype]).astype(np.float64)
    got = round_to(x, dtype)
    assert got.dtype == np.float64
    bad = ~((got == want) & (np.signbit(got) == np.signbit(want)))
    assert not bad.any(), f"{bad.sum()} mismatches, first {x[bad][:5]!r}: got {got[bad][:5]!r} want {want[bad][:5]!r}"
    # ties to even: 1 + half an ULP rounds down to 1, 1 + 3 half-ULPs up to 1 + 2 ULPs
    eps = float(np.finfo(NP[dtype]).eps)
    assert round_to(1 + eps / 2, dtype) == 1.0 and round_to(1 + 1.5 * eps, dtype) == 1 + 2 * eps


def test_round_to_special_values():
    for dtype in ("float64", "float32", "bfloat16", "float16"):
        x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0])
        got = round_to(x, dtype)
        assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])
        assert got[3] == 0 and not np.signbit(got[3]) and got[4] == 0 and np.signbit(got[4])
    assert round_to(1e300, "bfloat16") == np.inf and round_to(-1e300, "float16") == -np.inf
    x = np.array([1.0, 2.0])
    assert round_to(x, "float64") is not x


def bf16_table():
    """Every finite bf16 value (as float32) with its neighbour away from zero."""
    bits = np.arange(2 ** 16, dtype=np.uint32)
    x = (bits << 16).view(np.float32)
    finite = np.isfinite(x)
    x, b = x[finite], bits[finite]
    nb = ((b + 1) << 16).view(np.float32)  # next pattern: next magnitude, same sign (inf after the max)
    return x, nb


def torch_bf16(x32: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(x32)).to(torch.bfloat16).to(torch.float32).numpy().astype(np.float64)


def test_bfloat16_all_patterns_against_torch():
    x, nb = bf16_table()
    # every finite pattern round-trips
    np.testing.assert_array_equal(round_to(x.astype(np.float64), "bf16"), x.astype(np.float64))
    # midpoints, as float32 (exact: bf16 has 8 significand bits, float32 24), one float32 ULP
    # either side; the neighbour of the largest finite value is inf, whose "midpoint" is the
    # overflow threshold (2 - 2^-8) * 2^127
    top = np.float32((2 - 2.0 ** -8) * 2.0 ** 127)
    mid = np.where(np.isfinite(nb), ((x.astype(np.float64) + nb.astype(np.float64)) / 2), np.copysign(top, x))
    mid32 = mid.astype(np.float32)
    assert np.array_equal(mid32.astype(np.float64), mid)
    cases = {"midpoint": mid32,
             "above": np.nextafter(mid32, np.copysign(np.float32(np.inf), x)),
             "below": np.nextafter(mid32, np.float32(0) * x)}
    for name, v in cases.items():
        want = torch_bf16(v)
        got = round_to(v.astype(np.float64), "bfloat16")
        bad = ~((got == want) & (np.signbit(got) == np.signbit(want)))
        assert not bad.any(), f"{name}: {bad.sum()} mismatches, first {v[bad][:4]!r} got {got[bad][:4]} want {want[bad][:4]}"
    # ties to even, checked against the table itself: the even one of (x, nb) wins
    even = ((x.view(np.uint32) >> 16) & 1) == 0
    np.testing.assert_array_equal(round_to(mid, "bf16"), np.where(even, x, nb).astype(np.float64))
    # float64 values a hair (one float64 ULP) off the midpoint are rounded once, not via float32
    # (a cast through float32 would land on the midpoint and tie to even)
    away = np.nextafter(mid, np.copysign(np.inf, mid))
    toward = np.nextafter(mid, 0.0)
    np.testing.assert_array_equal(round_to(away, "bf16"), nb.astype(np.float64))
    np.testing.assert_array_equal(round_to(toward, "bf16"), x.astype(np.float64))
    # overflow: the largest finite bf16 is (2 - 2^-7) * 2^127
    big = (2 - 2.0 ** -7) * 2.0 ** 127
    assert round_to(big, "bf16") == big and round_to(float(top), "bf16") == np.inf
    assert round_to(np.nextafter(float(top), 0), "bf16") == big


def test_quantum_is_the_spacing():
    rng = np.random.default_rng(1)
    for dtype in ("float32", "float16"):
        ftype, utype = NP[dtype], UINT[dtype]
        nbits = 8 * np.dtype(ftype).itemsize
        x = rng.integers(0, 2 ** nbits - 1, size=20000, dtype=np.uint64).astype(utype).view(ftype)
        top = np.finfo(ftype).max  # np.spacing(max) is inf; the spacing below it is the ULP
        x = x[np.isfinite(x) & (np.abs(x) != top)]
        x = np.concatenate([x, np.array([0, np.finfo(ftype).tiny], ftype)])
        assert quantum(float(top), dtype) == float(top) - float(np.nextafter(top, ftype(0)))
        np.testing.assert_array_equal(quantum(x.astype(np.float64), dtype),
                                      np.abs(np.spacing(np.abs(x))).astype(np.float64), err_msg=dtype)
    x = rng.standard_normal(1000) * 10.0 ** rng.integers(-300, 300, 1000)
    np.testing.assert_array_equal(quantum(x, "float64"), np.spacing(np.abs(x)))
    # bfloat16: the distance to the next pattern, for every finite pattern below the max
    xb, nb = bf16_table()
    ok = np.isfinite(nb)
    np.testing.assert_array_equal(quantum(xb[ok].astype(np.float64), "bf16"),
                                  np.abs(nb[ok].astype(np.float64) - xb[ok].astype(np.float64)))


def test_scaled_ulps():
    assert scaled_ulps(1.0 + 2 ** -23, 1.0, 1.0, "float32") == 1.0
    assert scaled_ulps(1e-10, 0.0, 1.0, "bf16") == pytest.approx(1e-10 / 2 ** -7)
    got = scaled_ulps([np.nan, np.inf, np.inf, 1.0], [np.nan, np.inf, -np.inf, np.nan], 1.0, "fp16")
    np.testing.assert_array_equal(got, [0, 0, np.inf, np.inf])


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16", "complex64"])
def test_quantum_is_the_spacing_at_every_float64_pattern(dtype):
    """quantum reads a float64's exponent field; against the definition with math.frexp, element by
    element: 2**(max(exponent, emin) - (bits - 1)) for a finite x (the subnormal step below the normal
    range and at 0), 2**-bits for inf and NaN."""
    import math
    from oracle.storage import FORMATS, component, quantum
    bits, emin, _ = FORMATS[component(dtype)]
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.integers(-2**63, 2**63 - 1, 20000, dtype=np.int64).view(np.float64),
                        rng.standard_normal(2000) * 10.0 ** rng.integers(-320, 300, 2000),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 2.0 ** -1022, 2.0 ** -149, 2.0 ** -126, 65504.0]])

    def spacing(v):
        if not math.isfinite(v):
            return 2.0 ** -bits
        exponent = math.frexp(v)[1] - 1 if v != 0 else emin
        return 2.0 ** (max(exponent, emin) - (bits - 1))
    want = np.array([spacing(float(v)) for v in x])
    assert np.array_equal(quantum(x, dtype), want)
    assert np.array_equal(quantum(x[:22000].reshape(20, -1)[:, ::3], dtype), want[:22000].reshape(20, -1)[:, ::3])  # strided
    assert quantum(3.0, dtype) == spacing(3.0)
