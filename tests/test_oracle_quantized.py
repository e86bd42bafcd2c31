"""oracle.quantized: code books built as the libraries build them, blockwise quantization bit for bit
where the library is nearest-code, and the decision-boundary rule the quantized checks rest on."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from oracle import quantized as Q

F32 = np.float32


def _wide(rng, n, signed=True):
    """float32 values over ten decades, some exact zeros and repeated values (ties of absmax)."""
    x = (rng.uniform(-1, 1, n) if signed else rng.uniform(0, 1, n)).astype(F32)
    x *= F32(10.0) ** rng.integers(-9, 1, n).astype(F32)
    x[:300] = 0
    x[5000:5100] = 3.0
    return x


@pytest.mark.parametrize("steps", [2, 3, 5, 9, 17, 33, 65, 129, 257])
def test_linspace_is_torchs(steps):
    assert np.array_equal(Q.linspace_f32(0.1, 1.0, steps), torch.linspace(0.1, 1.0, steps).numpy())


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("bits", [(7, 8), (3, 4)])
def test_dynamic_maps_are_the_libraries(signed, bits):
    """Both libraries' create_dynamic_map, bit for bit (bitsandbytes only builds 8-bit maps)."""
    ours = Q.dynamic_map(signed, *bits)
    quant_utils = pytest.importorskip("torchao.optim.quant_utils")
    assert np.array_equal(ours, np.array(quant_utils.create_dynamic_map(signed, *bits), dtype=F32))
    if bits == (7, 8):
        functional = pytest.importorskip("bitsandbytes.functional")
        assert np.array_equal(ours, functional.create_dynamic_map(signed=signed).numpy())


def test_torchaos_unsigned_4bit_map_is_linear_without_zero():
    subclass_4bit = pytest.importorskip("torchao.optim.subclass_4bit")
    fmt = Q.FORMATS["torchao.linear4u"]
    assert np.array_equal(fmt.codes, np.array(subclass_4bit.get_qmap_unsigned(), dtype=F32))
    assert fmt.codes.min() == 1 / 16 and not fmt.zero


def test_e4m3_values_are_torchs():
    every = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    assert np.array_equal(Q.e4m3_values(), np.unique(every[np.isfinite(every)]))
    assert Q.e4m3_values().max() == Q.E4M3_MAX


@pytest.mark.parametrize("name", [n for n in Q.FORMATS if n.startswith("torchao.")])
def test_quantize_is_torchaos_bit_for_bit(name):
    """codes, scales and the values read back equal torchao's own functions over ten decades."""
    fmt = Q.FORMATS[name]
    x = _wide(np.random.default_rng(0), 8192, fmt.signed)
    q, s = Q.quantize(x, fmt)
    t = torch.from_numpy(x)
    if name == "torchao.fp8":
        from torchao.optim.subclass_fp8 import quantize_fp8
        codes, scale = quantize_fp8(t, fmt.block)
        got_q = np.searchsorted(fmt.codes, codes.float().numpy())
        back = (codes.float().view(-1, fmt.block) * scale.view(-1, 1)).view(-1).numpy()
    else:
        quant_utils = pytest.importorskip("torchao.optim.quant_utils")
        qmap = torch.from_numpy(fmt.codes.copy())  # the format's own map (linear4u's too)
        scaled, scale = quant_utils.scale_tensor(t, fmt.block)
        quantizer = quant_utils.quantize_8bit_with_qmap if fmt.bits == 8 else quant_utils.quantize_4bit_with_qmap
        codes = quantizer(scaled, qmap)
        got_q = codes.numpy().astype(np.int64)
        back = quant_utils.dequant_with_qmap(codes, qmap, scale).numpy()
    assert np.array_equal(s, scale.numpy())
    assert np.array_equal(q, got_q), int((q != got_q).sum())
    assert np.array_equal(Q.dequantize(q, s, fmt), back.astype(np.float64))


@pytest.mark.parametrize("name", list(Q.FORMATS))
def test_the_code_is_the_nearest(name):
    """Against exact float64 distances: the chosen code is a nearest one, or within float32
    rounding of a tie."""
    fmt = Q.FORMATS[name]
    x = _wide(np.random.default_rng(1), 4096, fmt.signed)
    nv = Q.normalized(x, fmt).astype(np.float64)
    q, _ = Q.quantize(x, fmt)
    codes = fmt.codes.astype(np.float64)
    finite = ~np.isnan(nv)
    best = np.abs(nv[:, None] - codes[None, :]).min(axis=1)
    chosen = np.abs(nv - codes[q.reshape(-1)])
    assert np.all(chosen[finite] <= best[finite] + 2 * np.spacing(np.abs(nv[finite]).astype(F32)))


def test_bnb_scale_is_the_plain_absmax_and_a_zero_block_reads_back_as_zero():
    fmt = Q.FORMATS["bnb.dynamic8"]
    x = np.zeros(512, dtype=F32)
    x[300] = -2.5
    q, s = Q.quantize(x, fmt)
    assert s.tolist() == [0.0, 2.5]
    back = Q.dequantize(q, s, fmt)
    # the signed map's lowest code is -0.99297 (no -1): the absmax element reads back smaller
    assert np.all(back[:256] == 0.0) and np.all(back[256:300] == 0.0)
    assert back[300] == F32(fmt.codes[0] * F32(2.5)) and fmt.codes[0] > -1


def test_torchao_floors_the_scale():
    fmt = Q.FORMATS["torchao.dynamic8"]
    _, s = Q.quantize(np.zeros(256, dtype=F32), fmt)
    assert s.tolist() == [Q.TINY_SCALE]
    _, s8 = Q.quantize(np.full(256, 448.0, dtype=F32), Q.FORMATS["torchao.fp8"])
    assert s8.tolist() == [1.0]


@pytest.mark.parametrize("name", list(Q.FORMATS))
def test_outside_ambiguous_elements_no_value_within_the_bound_changes_the_code(name):
    """The rule the quantized checks rest on: wherever `ambiguous` says no, every value within the
    bound (x and its block's scale perturbed together, at the extremes) quantizes to the same code;
    and the rule is not vacuous: with a bound of 1e-3 relative some elements are ambiguous."""
    fmt = Q.FORMATS[name]
    rng = np.random.default_rng(2)
    x = _wide(rng, 2048, fmt.signed).astype(np.float64)
    bound = np.abs(x) * 1e-3 + 1e-30
    amb = Q.ambiguous(x, bound, fmt)
    assert 0 < amb.sum() < amb.size
    q, _ = Q.quantize(x.astype(F32), fmt)
    for trial in range(20):
        pert = x + bound * rng.uniform(-1, 1, x.size) * (trial % 2 or rng.integers(0, 2, x.size))
        if not fmt.signed:
            pert = np.abs(pert)
        qp, _ = Q.quantize(pert.astype(F32), fmt)
        changed = (qp != q) & ~amb
        assert not changed.any(), (trial, np.flatnonzero(changed)[:5])


@pytest.mark.parametrize("name", list(Q.FORMATS))
def test_every_code_a_value_within_the_bound_takes_lies_in_code_range(name):
    """code_range holds every code a correct implementation may store, also where the bound spans
    several codes (a trajectory's carried error, dense codes near 0): a bound of 5% relative plus an
    absolute part reaches past one neighbour for many elements, and no perturbed value leaves the range."""
    fmt = Q.FORMATS[name]
    rng = np.random.default_rng(3)
    x = _wide(rng, 2048, fmt.signed).astype(np.float64)
    bound = np.abs(x) * 5e-2 + 1e-3 * np.abs(x).max()
    lo, hi = Q.code_range(x, bound, fmt)
    q, _ = Q.quantize(x.astype(F32), fmt)
    q = q.reshape(-1)
    assert np.all((lo <= q) & (q <= hi))
    assert np.sum(hi - lo >= 2) > 10, "the bound never spans more than one boundary: the test shows nothing"
    for trial in range(20):
        pert = x + bound * rng.uniform(-1, 1, x.size) * (trial % 2 or rng.integers(0, 2, x.size))
        if not fmt.signed:
            pert = np.abs(pert)
        qp, _ = Q.quantize(pert.astype(F32), fmt)
        qp = qp.reshape(-1)
        out = (qp < lo) | (qp > hi)
        assert not out.any(), (trial, np.flatnonzero(out)[:5])


def test_exact_values_are_unambiguous_away_from_ties():
    fmt = Q.FORMATS["torchao.dynamic8"]
    x = np.linspace(-1, 1, 256 * 4)
    amb = Q.ambiguous(x, 0.0, fmt)
    assert amb.mean() < 0.05


@pytest.mark.parametrize("name", list(Q.FORMATS))
def test_every_format_passes_its_own_code_book_invariants(name):
    fmt = Q.FORMATS[name]
    assert Q.code_book_problems(fmt.codes, fmt) == []
    assert fmt.codes.size == 2 ** fmt.bits or name == "torchao.fp8"


def test_code_book_invariants_name_what_is_wrong():
    fmt = Q.FORMATS["bnb.dynamic8"]
    codes = fmt.codes.copy()
    assert any("not sorted" in p for p in Q.code_book_problems(codes[::-1], fmt))
    assert any("16 codes" in p for p in Q.code_book_problems(Q.FORMATS["torchao.dynamic4"].codes, fmt))
    no_zero = codes.copy()
    no_zero[no_zero == 0] = 1e-9
    assert any("0 is not a code" in p for p in Q.code_book_problems(no_zero, fmt))
    off = codes.copy()
    off[200] = np.nextafter(off[200], F32(2))
    assert any("code 200" in p for p in Q.code_book_problems(off, fmt))


@pytest.mark.parametrize("numel, quantized", [(4095, False), (4096, True), (4096 + 1, True)])
def test_small_tensors_keep_float32_state(numel, quantized):
    assert Q.FORMATS["bnb.dynamic8"].quantizes(numel) is quantized
    # torchao also needs whole blocks
    assert Q.FORMATS["torchao.dynamic8"].quantizes(numel) is (quantized and numel % 256 == 0)


@pytest.mark.parametrize("name", list(Q.FORMATS))
def test_a_stored_trajectory_value_bounds_every_correct_read_back(name):
    """The trajectory's store through a format (quantized_state.store) keeps the error it carries:
    for any value within that error, stored and read back by the format, the read-back lies within
    the stored bound of the oracle's read-back. The carried error here spans several codes for many
    elements (one code step, as it once was, lost the rest: torchao AdamW8bit's bf16 zero_grads
    trajectory at seeds 1 and 2)."""
    from oracle.compare.measuring.checks import REORDER_FACTOR
    from oracle.compare.measuring.errmodel import Bounded
    from oracle.compare.measuring.quantized_state import store
    fmt = Q.FORMATS[name]
    rng = np.random.default_rng(4)
    x = _wide(rng, 4096, fmt.signed).astype(np.float64)
    e = (np.abs(x) * 2e-2 + 1e-4 * np.abs(x).max()) / REORDER_FACTOR
    out = store(Bounded(x, e, 2.0 ** -24), fmt)
    q, _ = Q.quantize(x.astype(F32), fmt)
    lo, hi = Q.code_range(x, REORDER_FACTOR * e, fmt)
    assert np.sum(hi - lo >= 2) > 10, "the carried error never spans two codes: the test shows nothing"
    for trial in range(20):
        y = x + e * rng.uniform(-1, 1, x.size) * (trial % 2 or rng.integers(0, 2, x.size))
        if not fmt.signed:
            y = np.abs(y)
        miss = np.abs(Q.round_trip(y.astype(F32), fmt) - out.v) > out.e
        assert not miss.any(), (trial, np.flatnonzero(miss)[:5])
