"""Quantized optimizer state as a storage format: code books, blockwise quantization, and where a
stored code is decided by the rounding of what precedes it.

8-bit optimizers (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization",
arXiv:2110.02861) keep each moment as one code per element plus one float32 scale per block of
`block` consecutive elements (the flattened tensor, its last block possibly short):

    s_b   = max |x_i|  over block b                          the block's absmax
    n_i   = x_i / s_b                                        in [-1, 1], one float32 division
    q_i   = the code of the code book nearest to n_i         (the tie rule is the library's)
    x'_i  = code[q_i] * s_b                                  what the next step reads back

The oracle stores state this way exactly as it stores bf16 (oracle.storage): it quantizes what it
stores and dequantizes what it reads. Every operation above is one float32 rounding, emulated here
with NumPy float32 arithmetic, so the codes are the library's bit for bit when the input is.

Formats, as read from the pinned sources:

- `bnb.dynamic8` / `bnb.dynamic8u` (bitsandbytes 0.50, functional.create_dynamic_map, CPU kernel
  csrc/common.cpp quantize_block): the signed / unsigned dynamic map, 256 codes; s_b the plain
  absmax (0 for an all-zero block: then n is NaN, the kernel stores code 0 and the block reads back
  as 0); nearest by float32 distances, the upper neighbour only when strictly nearer (ties down).
  Block 256 on the CPU backend (backends/cpu/ops.py, `blocksize = 256`). Tensors under
  `min_8bit_size` = 4096 elements keep 32-bit state (optim/optimizer.py).
- `torchao.dynamic8` / `torchao.dynamic8u` (torchao 0.18, optim/quant_utils.py, subclass_8bit.py):
  the same maps (built the same way, no padding); s_b = max(absmax, 1e-12); the code found by
  binary search then rounded up when n - code[k] >= (code[k+1] - code[k]) * 0.5 (ties up); block
  256. `torchao.dynamic4`: the 16-code signed map create_dynamic_map(True, 3, 4), block 128, two
  codes per byte (subclass_4bit.py); `torchao.linear4u` (its unsigned 4-bit map, for the second
  moment): linspace(0, 1, 17)[1:], sixteen evenly spaced codes without 0 (the smallest is 1/16, so
  a zero second moment reads back as absmax/16; Li et al. 2023, "Memory Efficient Optimizers with
  4-bit States", arXiv:2309.01507, the zero-point problem). A tensor is quantized only when it has >= 4096
  elements and its size is a multiple of the block (optim/adam.py `_new_buffer`).
- `torchao.fp8` (subclass_fp8.py): s_b = max(absmax, 1e-12) / 448 and the stored value n as
  float8_e4m3fn (round to nearest even, 3 fraction bits, normal exponents -6..8, max 448); block 256.

A code is decided by which side of a decision boundary n falls on: the midpoint between two
neighbouring codes (for e4m3 the midpoint between neighbouring representable values). Where the
oracle's n lies within its error bound of a boundary, either neighbour is a correct code
(`ambiguous`), and where the bound spans several boundaries every code between (`code_range`);
everywhere else exactly one is.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

F32 = np.float32
E4M3_MAX = 448.0
TINY_SCALE = float(F32(1e-12))   # torchao's clip(1e-12), as a float32


# --- code books ------------------------------------------------------------------------------

def linspace_f32(start: float, end: float, steps: int) -> np.ndarray:
    """torch.linspace(start, end, steps) in float32 as torch 2.13's CPU kernel computes it
    (aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp): step = (end - start) / (steps - 1); the
    first half start + step*i, the second end - step*(steps-1-i), each as built for x86-64 with
    FMA: the product and the sum rounded once (a fused multiply-add; evaluated separately, codes
    of linspace(0.1, 1, 9) and longer differ by one float32 ulp, tests/test_oracle_quantized.py)."""
    start, end = F32(start), F32(end)
    step = np.float64(F32(F32(end - start) / F32(steps - 1)))
    i = np.arange(steps, dtype=np.float64)
    low = (np.float64(start) + step * i).astype(F32)     # exact in float64, then one rounding
    high = (np.float64(end) - step * (steps - 1 - i)).astype(F32)
    return np.where(i < steps // 2, low, high).astype(F32)


def dynamic_map(signed: bool = True, max_exponent_bits: int = 7, total_bits: int = 8) -> np.ndarray:
    """The dynamic map (Dettmers 2016, arXiv:1511.04561) as bitsandbytes and torchao build it: per
    exponent i, the midpoints of a float32 linspace(0.1, 1) scaled by 10**(i - max_exponent_bits + 1)
    (a float32 product), both signs when signed; then 0 and 1; sorted. 2**total_bits float32 codes."""
    data = []
    non_sign_bits = total_bits - 1
    for i in range(max_exponent_bits):
        items = 2 ** (i + non_sign_bits - max_exponent_bits + (0 if signed else 1)) + 1
        b = linspace_f32(0.1, 1.0, items)
        means = (b[:-1] + b[1:]) / F32(2.0)
        scaled = F32(10.0 ** (-(max_exponent_bits - 1) + i)) * means
        data += list(scaled) + (list(-scaled) if signed else [])
    extra = 2 ** (non_sign_bits - max_exponent_bits) - 1
    if extra > 0:
        b = linspace_f32(0.1, 1.0, extra + 1)
        scaled = F32(10.0 ** (-(max_exponent_bits - 1) + max_exponent_bits - 1)) * ((b[:-1] + b[1:]) / F32(2.0))
        data += list(scaled) + (list(-scaled) if signed else [])
    data += [F32(0.0), F32(1.0)]
    if len(data) != 2 ** total_bits:
        raise ValueError(f"dynamic map of {len(data)} codes, expected {2 ** total_bits}")
    return np.sort(np.array(data, dtype=F32))


def e4m3_values() -> np.ndarray:
    """Every finite float8_e4m3fn value, sorted (no infinities; S.1111.111 is NaN, so the largest
    is 1.75 * 2**8 = 448); subnormals are m * 2**-9."""
    mags = [m * 2.0 ** -9 for m in range(8)]
    mags += [(1 + m / 8) * 2.0 ** e for e in range(-6, 9) for m in range(8) if not (e == 8 and m == 7)]
    mags = np.array(sorted(set(mags)))
    return np.concatenate([-mags[::-1], mags[1:]]).astype(F32)


# --- formats -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class QuantFormat:
    """One library's quantized storage.

    code:       the code book (float32 values in code order); for "e4m3" the representable values
    block:      elements per scale
    scale:      "absmax" (s = max|x|), "absmax_floor" (s = max(max|x|, 1e-12)),
                "absmax_floor_e4m3" (s = max(max|x|, 1e-12) / 448)
    ties:       "down" (the upper neighbour only when strictly nearer) or "up" (upper when
                n - code[k] >= half the gap); "even" for e4m3 (round to nearest even)
    min_numel:  tensors with fewer elements keep float32 state
    whole_blocks: a tensor is quantized only when its size is a multiple of the block
    bits:       bits per code (4: two codes per byte)
    zero:       whether 0 is a code
    """

    name: str
    code: tuple = field(repr=False)
    block: int
    scale: str
    ties: str
    min_numel: int = 4096
    whole_blocks: bool = False
    bits: int = 8
    signed: bool = True
    zero: bool = True
    source: str = ""

    @property
    def codes(self) -> np.ndarray:
        return np.asarray(self.code, dtype=F32)

    def quantizes(self, numel: int) -> bool:
        """Whether a tensor of `numel` elements is stored quantized (else float32)."""
        return numel >= self.min_numel and (not self.whole_blocks or numel % self.block == 0)


def _fmt(name, code, block, scale, ties, **kw) -> QuantFormat:
    return QuantFormat(name, tuple(float(c) for c in code), block, scale, ties, **kw)


FORMATS = {f.name: f for f in (
    _fmt("bnb.dynamic8", dynamic_map(True), 256, "absmax", "down", source="bitsandbytes 0.50 CPU"),
    _fmt("bnb.dynamic8u", dynamic_map(False), 256, "absmax", "down", signed=False,
         source="bitsandbytes 0.50 CPU"),
    _fmt("torchao.dynamic8", dynamic_map(True), 256, "absmax_floor", "up", whole_blocks=True,
         source="torchao 0.18 subclass_8bit"),
    _fmt("torchao.dynamic8u", dynamic_map(False), 256, "absmax_floor", "up", whole_blocks=True, signed=False,
         source="torchao 0.18 subclass_8bit"),
    _fmt("torchao.dynamic4", dynamic_map(True, 3, 4), 128, "absmax_floor", "up", whole_blocks=True, bits=4,
         source="torchao 0.18 subclass_4bit"),
    _fmt("torchao.linear4u", linspace_f32(0.0, 1.0, 17)[1:], 128, "absmax_floor", "up", whole_blocks=True, bits=4,
         signed=False, zero=False, source="torchao 0.18 subclass_4bit"),
    _fmt("torchao.fp8", e4m3_values(), 256, "absmax_floor_e4m3", "even", whole_blocks=True,
         source="torchao 0.18 subclass_fp8"),
)}


# --- quantize / dequantize -----------------------------------------------------------------------

def _blocks(x: np.ndarray, block: int) -> tuple[np.ndarray, int]:
    """x flattened into rows of `block` (the last padded with zeros, which change no absmax)."""
    flat = np.asarray(x, dtype=F32).reshape(-1)
    n = flat.size
    rows = -(-n // block)
    padded = np.zeros(rows * block, dtype=F32)
    padded[:n] = flat
    return padded.reshape(rows, block), n


def scales(x, fmt: QuantFormat) -> np.ndarray:
    """The float32 scale of each block of x (x as float32)."""
    rows, _ = _blocks(x, fmt.block)
    s = np.abs(rows).max(axis=1) if rows.size else np.zeros(0, dtype=F32)
    if fmt.scale == "absmax":
        return s.astype(F32)
    s = np.maximum(s, F32(TINY_SCALE))
    return (s / F32(E4M3_MAX)).astype(F32) if fmt.scale == "absmax_floor_e4m3" else s.astype(F32)


def normalized(x, fmt: QuantFormat, s: np.ndarray | None = None) -> np.ndarray:
    """n = x / s per element, one float32 division (NaN where s is 0: bitsandbytes' zero block)."""
    rows, n = _blocks(x, fmt.block)
    s = scales(x, fmt) if s is None else np.asarray(s, dtype=F32)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rows / s[:, None]).astype(F32).reshape(-1)[:n]


def nearest(nv: np.ndarray, fmt: QuantFormat) -> np.ndarray:
    """The code index of each normalized value under the format's rule (float32 arithmetic)."""
    code = fmt.codes
    nv = np.asarray(nv, dtype=F32)
    nan = np.isnan(nv)
    safe = np.where(nan, F32(0.0), nv)
    k = np.clip(np.searchsorted(code, safe, side="right") - 1, 0, code.size - 1)
    up = np.minimum(k + 1, code.size - 1)
    lo, hi = code[k], code[up]
    if fmt.ties == "down":
        go_up = np.abs(safe - hi).astype(F32) < np.abs(safe - lo).astype(F32)
    elif fmt.ties == "up":
        go_up = (safe - lo).astype(F32) >= ((hi - lo).astype(F32) * F32(0.5)).astype(F32)
    else:  # "even": exact midpoint goes to the code whose last fraction bit is 0
        d_lo, d_hi = safe.astype(np.float64) - lo, hi - safe.astype(np.float64)
        tie = d_lo == d_hi
        go_up = np.where(tie, _even_is_upper(lo, hi), d_hi < d_lo)
    q = np.where(go_up & (k < code.size - 1), up, k)
    return np.where(nan, 0, q).astype(np.int64)


def _even_is_upper(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For neighbouring e4m3 values: whether the upper one's significand (an integer in units of
    its own spacing) is even; of two neighbours exactly one is."""
    v = np.abs(np.asarray(hi, dtype=np.float64))
    _, e = np.frexp(v)
    spacing = np.ldexp(1.0, np.maximum(e - 1, -6) - 3)
    return np.rint(v / spacing).astype(np.int64) % 2 == 0


def quantize(x, fmt: QuantFormat) -> tuple[np.ndarray, np.ndarray]:
    """(codes as int64 indices into the code book, one per element in x's shape; float32 scales)."""
    s = scales(x, fmt)
    q = nearest(normalized(x, fmt, s), fmt)
    return q.reshape(np.shape(x)), s


def dequantize(q, s, fmt: QuantFormat, shape=None) -> np.ndarray:
    """code[q] * s per element in float32 (what a library reads back), as float64."""
    q = np.asarray(q).reshape(-1)
    s = np.asarray(s, dtype=F32)
    block_of = np.arange(q.size) // fmt.block
    out = (fmt.codes[q] * s[block_of]).astype(F32)
    return out.astype(np.float64).reshape(q.shape if shape is None else shape)


def round_trip(x, fmt: QuantFormat) -> np.ndarray:
    """What the next step reads after x was stored: dequantize(quantize(x))."""
    q, s = quantize(x, fmt)
    return dequantize(q, s, fmt, np.shape(x))


# --- decision boundaries -----------------------------------------------------------------------

def boundaries(fmt: QuantFormat) -> np.ndarray:
    """The decision boundaries between neighbouring codes in the normalized domain (midpoints)."""
    code = fmt.codes.astype(np.float64)
    return (code[:-1] + code[1:]) / 2.0


def _normalized_error(x, bound, fmt: QuantFormat) -> tuple[np.ndarray, np.ndarray]:
    """(n, err) per element, flattened: the oracle's normalized value x/s and the bound of |n' - n|
    for any correct implementation's n' (x within `bound`, the block's scale within the bound of the
    element that sets it, two float32 ulps of n for the division and the library's comparison); err
    is inf where the block's scale may be 0 (that block reads back as 0 whatever its codes)."""
    x = np.asarray(x, dtype=np.float64)
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), x.shape).reshape(-1)
    x = x.reshape(-1)
    rows, n = _blocks(x, fmt.block)
    brow, _ = _blocks(b, fmt.block)
    s = scales(x, fmt).astype(np.float64)
    absmax = np.abs(rows).max(axis=1).astype(np.float64) if rows.size else np.zeros(0)
    # n' - n = (dx - n*ds)/(s + ds) exactly, with |dx| <= b and the scale's relative change
    # |ds|/s <= r = (largest bound in the block)/absmax (plus the e4m3 scale's own float32 rounding)
    with np.errstate(invalid="ignore", divide="ignore"):
        bs = brow.max(axis=1) if brow.size else np.zeros(0)
        r = np.where(bs == 0, 0.0, bs / absmax)
        if fmt.scale == "absmax_floor_e4m3":
            r = r + 2.0 ** -24
        r = np.where(r < 1.0, r, np.inf)   # a scale that may reach 0 decides no code
        nv = (rows / s[:, None]).reshape(-1)[:n]
        err = ((brow / s[:, None] + np.abs(rows / s[:, None]) * r[:, None]) / (1.0 - r[:, None])).reshape(-1)[:n]
    err = np.nan_to_num(err, nan=np.inf) + 2.0 * np.spacing(np.abs(nv).astype(F32)).astype(np.float64)
    return nv, err


def code_range(x, bound, fmt: QuantFormat) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) per element, flattened: the lowest and highest code index a correct implementation
    may store, i.e. the codes nearest the ends of the normalized value's error interval. The nearest
    code is monotone in n for a fixed scale, so every correct code lies between them; an end exactly
    on a decision boundary counts both of its codes. A bound spanning several codes (a trajectory's
    error carried over many steps, or dense codes near 0) allows all of them, not one."""
    nv, err = _normalized_error(x, bound, fmt)
    edges = boundaries(fmt)
    with np.errstate(invalid="ignore"):
        lo = np.searchsorted(edges, nv - err, side="left")
        hi = np.searchsorted(edges, nv + err, side="right")
    unknown = np.isnan(nv) | ~np.isfinite(err)   # NaN: a zero scale
    return np.where(unknown, 0, lo), np.where(unknown, edges.size, hi)


def ambiguous(x, bound, fmt: QuantFormat) -> np.ndarray:
    """Per element: True where a correct implementation may store another code than the nearest to
    the oracle's value, i.e. the normalized value's error interval contains a decision boundary."""
    lo, hi = code_range(x, bound, fmt)
    return lo != hi


# --- invariants ------------------------------------------------------------------------------

def code_book_problems(values, fmt: QuantFormat) -> list[str]:
    """What is wrong with a code book a target uses, against the format's: sorted, the documented
    size, covering the documented range, 0 a code exactly where the format has it, equal to the
    format's codes."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    want = fmt.codes.astype(np.float64)
    out = []
    if v.size != want.size:
        out.append(f"{v.size} codes, the format has {want.size}")
    if np.any(np.diff(v) < 0):
        out.append("codes not sorted")
    if np.any(v == 0.0) != fmt.zero:
        out.append("0 is not a code" if fmt.zero else "0 is a code, the format has none")
    if v.size and (v.max() != want.max() or v.min() != want.min()):
        out.append(f"range [{v.min():.6g}, {v.max():.6g}], the format's is [{want.min():.6g}, {want.max():.6g}]")
    if v.size == want.size and not np.array_equal(v, want):
        k = int(np.flatnonzero(v != want)[0])
        out.append(f"code {k} is {v[k]!r}, the format's is {want[k]!r}")
    return out


__all__ = ["E4M3_MAX", "FORMATS", "QuantFormat", "ambiguous", "boundaries", "code_book_problems", "code_range", "dequantize",
           "dynamic_map", "e4m3_values", "linspace_f32", "nearest", "normalized", "quantize", "round_trip",
           "scales"]
