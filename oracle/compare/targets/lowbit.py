"""Optimizers that keep their moments quantized: bitsandbytes' 8-bit blockwise optimizers and
torchao's 8-bit, 4-bit and FP8 AdamW, on CPU. Their state is judged through its format
(oracle.quantized; the check: oracle.compare.measuring.quantized_state).

Read from the installed sources (paths relative to site-packages):

bitsandbytes 0.50.2, Adam8bit / AdamW8bit / Lion8bit (optim_bits=8, block_wise=True)
  state     optim/optimizer.py Optimizer2State/1State.init_state: a param with >= min_8bit_size
            (4096) elements keeps state1/state2 as uint8 codes, qmap1 the signed dynamic map,
            qmap2 the unsigned one (F.create_dynamic_map), absmax1/absmax2 one float32 per 256
            elements; a smaller param keeps float32 state1/state2 (the 32-bit kernel).
  update    backends/cpu/ops.py _optimizer_update_8bit_blockwise_cpu: dequantize (code * absmax,
            float32), the Adam / Lion update in float32 on those values, p rounded once on store,
            then the new moments quantized blockwise (block 256) by the CPU quantizer
            (csrc/common.cpp quantize_block: absmax, x / absmax, nearest code). Adam: decay
            p *= 1 - lr*wd (if wd > 0) before the update for Adam8bit as for AdamW8bit (decoupled,
            as the 32-bit classes); denom = sqrt(v)/sqrt(1 - b2^t) + eps; p -= lr/(1 - b1^t) * m/denom.
            Lion: p *= 1 - lr*wd; p -= lr*sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g.
  counter   state[p]["step"], a Python int per param.
torchao 0.18.0, optim.AdamW8bit / AdamW4bit / AdamWFp8 (optim/adam.py)
  state     `_new_buffer`: a param with >= 4096 elements and a whole number of blocks keeps
            exp_avg / exp_avg_sq as OptimState8bit (signed / unsigned dynamic map, block 256),
            OptimState4bit (block 128, two codes a byte: exp_avg the 16-code
            signed dynamic map, exp_avg_sq sixteen linear codes 1/16..1 without 0) or OptimStateFp8
            (float8_e4m3fn, block 256, scale absmax/448); otherwise zeros_like(p).
  update    single_param_adam under torch.compile, the float32 moments written back through the
            subclass's copy_ (quantize); the param update uses the float32 moments before
            quantization. Decoupled decay; counter state[p]["step"] a float32 tensor.
  SR        bf16_stochastic_round=True (bf16 params): p.copy_(_fp32_to_bf16_sr(p_f32))
            (optim/quant_utils.py): away from zero when torch.randint(0, 2^16) < the low 16 bits.

On CUDA (targets named *.cuda, devices=("cuda",), selected by the GPU pipeline's
`--optimizer all --device cuda`; never run here: no GPU). Known, read from the sources:
bitsandbytes  the same Python (optim/optimizer.py, identical to the 0.50.2 development head) and
            backends/cuda/ops.py _optimizer_update_8bit_blockwise_impl, which passes every
            hyperparameter as ct.c_float (float32: fp32_hparams) and the step as c_int32, to
            csrc/kernels.cu (tag 0.50.1; its optimizer kernels are unchanged at the 0.50.2 head):
            kOptimizerStatic8bit2StateBlockwise / 1StateBlockwise launched with BLOCKSIZE_2STATE =
            BLOCKSIZE_1STATE = 256 and one element per thread (csrc/ops.cu): block 256, as on CPU.
            Adam: correction1 = 1 - __powf(beta1, step), correction2 = sqrtf(1 - __powf(beta2, step))
            in float32 on the device (bias_correction_precision "compute"; __powf is the fast
            intrinsic), step_size = __fdividef(-lr*correction2, correction1); p = (T)(p + step_size *
            m / (sqrt(v) + correction2*eps)) THEN, if wd > 0, p = (T)(p*(1 - lr*wd)): the decay after
            the update (decay="decoupled_after", where the CPU backend decays before it), and for
            bf16/fp16 params p rounded to its dtype twice.
            Lion: p = (T)(p*(1 - lr*wd)) before the update, the update lr*sgn(...) held in the grad's
            dtype T (for bf16 params lr*sign is a bf16 value), p = (T)(p - that).
            Quantize: n = __fdividef(x, absmax) (approximate division, 2 float32 ULPs), the code by
            quantize_2D's binary search with midpoints (lo + hi)*0.5f, a tie going to the search's
            last pivot; then a signed code whose sign differs from x's is moved one code toward x's
            sign (a negative moment nearer 0 than half the smallest negative code is stored as that
            code, not 0). Non-finite grads zero both moments and leave p.
            PagedAdamW8bit: the same kernel; state in cudaMallocManaged memory only for params of
            >= 1e5 elements (get_state_buffer), none of which the case matrix has.
torchao     the same Python under torch.compile with Triton kernels; SR draws torch.randint on the
            CUDA generator (seeded by torch.manual_seed like the CPU one).
Unverified (no GPU here): the Triton kernels' rounding (FMA contraction, division and sqrt),
__powf's error, the tie rule and the sign rule above against the `quantized` check's nearest-code
formats (the sign rule is expected to show as one-code errors on such moments), the double rounding
of bf16/fp16 params against a bound that allows one.
"""
from __future__ import annotations

import functools
import importlib.util
from dataclasses import replace

from oracle.lion import REFERENCE_LION

from ..measuring.quantized_state import bnb_entry, torchao_entry
from .base import Target
from .bitsandbytes_torchao import BNB_ADAM, TORCHAO_ADAMW, TORCHAO_START_S, _cpu_only, _version, bnb_unavailable, make_factory, torchao_unavailable

# bitsandbytes' Lion: torch.sign (sign(0) = 0), decay before the update, a per-param int counter (the
# reference form with its counter kept: no preset of its own, inference crosses counter locations)
BNB_LION = replace(REFERENCE_LION, counter="param")

BNB_ADAM_STATE = (bnb_entry("exp_avg", "bnb.dynamic8", "state1", "absmax1", "qmap1"),
                  bnb_entry("exp_avg_sq", "bnb.dynamic8u", "state2", "absmax2", "qmap2"))
BNB_LION_STATE = (bnb_entry("exp_avg", "bnb.dynamic8", "state1", "absmax1", "qmap1"),)

# the cases whose params are large enough to be quantized (and one under the threshold), the
# library defaults, and the regimes that expose decay and exact zeros: torchao compiles every
# param shape on its first step (seconds), so its low-bit targets run these only
TORCHAO_SUBSET = ("*/blocks/*", "*/single/normal")


def _bnb(name: str, optimizer: str, cls: str, convention, keys: set, defaults: dict, quantized: tuple) -> Target:
    return Target(
        name=name, optimizer=optimizer, convention=convention, quantized=quantized,
        state_names=(("state1", quantized[0].name),) + ((("state2", "exp_avg_sq"),) if len(quantized) > 1 else ()),
        make=make_factory(f"bitsandbytes.optim.{cls}", keys, f"bitsandbytes {cls}", defaults),
        devices=("cpu",), dtypes=("float32", "bfloat16", "float16"), compute="float32", state_dtype="float32",
        requires=_cpu_only(bnb_unavailable),
        no_dtensor="its update is one custom op (bitsandbytes.optimizer_update_8bit_blockwise) with no DTensor "
                   "sharding rule",
        notes=f"bitsandbytes {_version('bitsandbytes')} {cls} (read from 0.50.2): blockwise 8-bit state "
              "(block 256, dynamic maps) for params of >= 4096 elements, float32 state below; update in "
              "float32 on the dequantized moments (backends/cpu/ops.py _optimizer_update_8bit_blockwise_cpu)")


def _torchao(name: str, cls: str, exp_avg: str, exp_avg_sq: str, defaults: dict, **flags) -> Target:
    return Target(
        name=name, optimizer="adamw", convention=TORCHAO_ADAMW,
        quantized=(torchao_entry("exp_avg", exp_avg), torchao_entry("exp_avg_sq", exp_avg_sq)),
        make=make_factory(f"torchao.optim.{cls}", {"lr", "betas", "eps", "weight_decay", "amsgrad"},
                          f"torchao {cls}", defaults, **flags),
        devices=("cpu",), dtypes=("float32", "bfloat16"), compute="float32", state_dtype="param",
        options=frozenset({"amsgrad"}), requires=_cpu_only(torchao_unavailable), in_default=False,
        start_s=TORCHAO_START_S,
        subset=TORCHAO_SUBSET,
        subset_reason="torch.compile compiles each param shape on its first step (seconds a case on 2 cores)",
        no_dtensor="its state subclasses are not DTensor-aware here",
        notes=f"torchao {_version('torchao')} {cls} (read from 0.18.0): quantized exp_avg ({exp_avg}) and "
              f"exp_avg_sq ({exp_avg_sq}) for params of >= 4096 elements and whole blocks, the param dtype "
              "below; single_param_adam under torch.compile, float32 math")


# bitsandbytes' CUDA kernel: decay after the update, float32 hyperparameters and bias correction (above)
BNB_ADAM_CUDA = replace(BNB_ADAM, decay="decoupled_after", fp32_hparams=True, bias_correction_precision="compute")
BNB_LION_CUDA = replace(BNB_LION, fp32_hparams=True)
CUDA_NOTE = "; on CUDA: conventions read from the sources, never run here (this module's docstring: known and unverified)"


def _cuda(t: Target, requires, **changes) -> Target:
    """The CUDA form of a CPU low-bit target: CUDA only, in the default sweep (the GPU pipeline runs
    `--device cuda` without --target), its library's CUDA check."""
    return replace(t, name=f"{t.name}.cuda", devices=("cuda",), requires=requires, in_default=True,
                   notes=t.notes + CUDA_NOTE, **changes)


def lowbit_cuda_targets(cpu: list[Target]) -> list[Target]:
    """bitsandbytes' Adam8bit, AdamW8bit, Lion8bit, PagedAdamW8bit and torchao's AdamW8bit (and its SR
    form), AdamW4bit, AdamWFp8 on CUDA. Imports neither library."""
    from oracle import adam as oadam
    from .gpu import _guarded
    by = {t.name: t for t in cpu}
    bnb = _guarded(bnb_cuda_unavailable)
    ao = _guarded(torchao_cuda_unavailable)
    adam_keys = {"lr", "betas", "eps", "weight_decay"}
    paged = _bnb("bnb.paged_adamw8bit", "adamw", "PagedAdamW8bit", BNB_ADAM, adam_keys, oadam.DEFAULTS,
                 BNB_ADAM_STATE)
    out = [_cuda(by[n], bnb, convention=BNB_ADAM_CUDA) for n in ("bnb.adam8bit", "bnb.adamw8bit")]
    out += [_cuda(by["bnb.lion8bit"], bnb, convention=BNB_LION_CUDA), _cuda(paged, bnb, convention=BNB_ADAM_CUDA)]
    out += [_cuda(by[n], ao) for n in ("torchao.adamw8bit", "torchao.adamw4bit", "torchao.adamwfp8",
                                       "torchao.adamw8bit.sr")]
    return out


@functools.lru_cache(maxsize=None)
def bnb_cuda_unavailable() -> str | None:
    """None when bitsandbytes loaded a CUDA library with its 8-bit blockwise Adam kernel. Never raises;
    called only once CUDA is known to be available."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return "bitsandbytes is not installed"
    try:
        from bitsandbytes.cextension import lib
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable here"
        return f"bitsandbytes failed to import: {type(exc).__name__}: {exc}"
    if not hasattr(lib, "cadam_8bit_blockwise_grad_fp32"):
        return "bitsandbytes loaded no CUDA library (its 8-bit blockwise Adam kernel is missing)"
    return None


def torchao_cuda_unavailable() -> str | None:
    """torchao's optimizers on CUDA need what they need on CPU (they compile with Triton there)."""
    return torchao_unavailable()


def lowbit_targets() -> list[Target]:
    """bitsandbytes' 8-bit Adam, AdamW and Lion, torchao's AdamW8bit (also with bf16 stochastic rounding),
    AdamW4bit and AdamWFp8, on CPU and (lowbit_cuda_targets) on CUDA. Imports neither library."""
    from oracle import adam as oadam
    from oracle import lion as olion
    adam_keys = {"lr", "betas", "eps", "weight_decay"}
    cpu = [
        _bnb("bnb.adam8bit", "adam", "Adam8bit", BNB_ADAM, adam_keys, oadam.DEFAULTS, BNB_ADAM_STATE),
        _bnb("bnb.adamw8bit", "adamw", "AdamW8bit", BNB_ADAM, adam_keys, oadam.DEFAULTS, BNB_ADAM_STATE),
        _bnb("bnb.lion8bit", "lion", "Lion8bit", BNB_LION, {"lr", "betas", "weight_decay"}, olion.DEFAULTS,
             BNB_LION_STATE),
        _torchao("torchao.adamw8bit", "AdamW8bit", "torchao.dynamic8", "torchao.dynamic8u", oadam.DEFAULTS),
        _torchao("torchao.adamw4bit", "AdamW4bit", "torchao.dynamic4", "torchao.linear4u", oadam.DEFAULTS),
        _torchao("torchao.adamwfp8", "AdamWFp8", "torchao.fp8", "torchao.fp8", oadam.DEFAULTS),
        _torchao_sr(oadam.DEFAULTS),
    ]
    return cpu + lowbit_cuda_targets(cpu)


def _torchao_sr(defaults: dict) -> Target:
    """torchao's AdamW8bit with bf16_stochastic_round=True: bf16 params only (the flag does nothing for
    others), the float32 result rounded stochastically on store (the `rounding` check)."""
    base = _torchao("torchao.adamw8bit.sr", "AdamW8bit", "torchao.dynamic8", "torchao.dynamic8u", defaults,
                    bf16_stochastic_round=True)
    return replace(base, dtypes=("bfloat16",), rounding="stochastic",
                   notes=base.notes + "; bf16_stochastic_round=True: p rounded from float32 to bf16 toward zero, "
                         "or away with probability (low 16 bits of the float32) / 2^16 drawn by torch.randint "
                         "(optim/quant_utils.py _fp32_to_bf16_sr)")


__all__ = ["BNB_ADAM_CUDA", "BNB_LION", "BNB_LION_CUDA", "bnb_cuda_unavailable", "lowbit_cuda_targets", "lowbit_targets"]
