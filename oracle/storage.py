"""Storage formats: exact round-to-nearest-even from float64, and ULPs.

The oracle computes in float64 and rounds only what an implementation
stores ("float64 math, round on store"). Rounding is done here with exact
power-of-two arithmetic, not through casts, so bfloat16 needs no library and
float64 -> bfloat16 is rounded once (a cast through float32 would round twice).

A format is (significand bits incl. the implicit one, min normal exponent,
max exponent), as in IEEE 754. A complex dtype is stored as two components of
a real format (re, im), as torch.view_as_real shows it: rounding, spacing and
ULPs apply per component, and the float64 form of a complex array is its
(re, im) pairs in a last dimension of 2 (`as_pairs`, `as_complex`).
"""
from __future__ import annotations

import numpy as np

FORMATS = {
    "float64": (53, -1022, 1023),
    "float32": (24, -126, 127),
    "bfloat16": (8, -126, 127),
    "float16": (11, -14, 15),
}
# complex dtype -> the real format of each of its components
COMPLEX = {"complex64": "float32", "complex128": "float64"}
ALIASES = {"fp64": "float64", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16",
           "half": "float16", "float": "float32", "double": "float64", "cfloat": "complex64",
           "cdouble": "complex128"}


def canonical(dtype) -> str:
    """Normalize 'bf16', 'torch.bfloat16', np.float32, ... to a FORMATS or COMPLEX key."""
    name = str(dtype).replace("torch.", "")
    name = ALIASES.get(name, name)
    if name not in FORMATS and name not in COMPLEX:
        raise ValueError(f"unsupported storage dtype {dtype!r}; expected one of {sorted(FORMATS) + sorted(COMPLEX)}")
    return name


def component(dtype) -> str:
    """The real format values of `dtype` are rounded in: its own, or a complex dtype's component format."""
    name = canonical(dtype)
    return COMPLEX.get(name, name)


def is_complex(dtype) -> bool:
    return canonical(dtype) in COMPLEX


def as_pairs(z) -> np.ndarray:
    """A complex array as float64 (re, im) pairs in a new last dimension (torch.view_as_real's layout)."""
    z = np.asarray(z, dtype=np.complex128)
    return np.stack([z.real, z.imag], axis=-1)


def as_complex(x) -> np.ndarray:
    """(re, im) pairs in the last dimension back to a complex128 array (the inverse of as_pairs)."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[-1:] != (2,):
        raise ValueError(f"(re, im) pairs need a last dimension of 2, got shape {x.shape}")
    z = np.empty(x.shape[:-1], dtype=np.complex128)
    z.real, z.imag = x[..., 0], x[..., 1]  # not x0 + 1j*x1: 1j*inf is nan+infj
    return z


_EXPONENT = np.int64(0x7FF0000000000000)  # a float64's exponent field


def quantum(x, dtype) -> np.ndarray:
    """Spacing of the format at |x| (the ULP of x; the subnormal step at 0). For a non-finite x:
    2**-bits (what frexp's exponent 0 gives; never used as a spacing)."""
    bits, emin, _ = FORMATS[component(dtype)]
    x = np.asarray(x, dtype=np.float64)
    # 2**floor(log2|x|), exactly: x's exponent field alone (0 below float64's normal range, inf for
    # inf and NaN); a multiple of a power of two, so the scaling is exact too
    scale = (x.view(np.int64) & _EXPONENT).view(np.float64)
    q = np.maximum(scale * 2.0 ** (1 - bits), 2.0 ** (emin + 1 - bits))
    infinite = np.isinf(q)
    if np.count_nonzero(infinite):  # .any() costs four times as much on a small array
        q = np.where(infinite, 2.0 ** -bits, q)
    return q


def round_to(x, dtype) -> np.ndarray:
    """Round float64 values to `dtype` (nearest, ties to even); returns float64. A complex dtype rounds
    each component: `x` is then its (re, im) pairs, or any real array of its components."""
    name = component(dtype)
    x = np.asarray(x, dtype=np.float64)
    if name == "float64":
        return x.copy()
    bits, _, emax = FORMATS[name]
    q = quantum(x, name)
    with np.errstate(invalid="ignore", over="ignore"):  # overflow near float64's max: inf, as below
        r = np.rint(x / q) * q  # x / q is exact (power of two); rint is ties-to-even
    largest = (2.0 - 2.0 ** (1 - bits)) * 2.0 ** emax
    r = np.where(np.abs(r) > largest, np.copysign(np.inf, x), r)
    return np.where(np.isfinite(x), r, x)


def scaled_ulps(got, expected, scale, dtype) -> np.ndarray:
    """|got - expected| in ULPs of `dtype` taken at magnitude `scale`.

    Measuring in ULPs of the operand magnitude (not of the result) keeps the
    unit meaningful where the result cancels to near zero. Equal values
    (NaN vs NaN, inf vs inf of the same sign) are 0; any other non-finite
    disagreement is inf.
    """
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got - expected) / quantum(scale, dtype)
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))
