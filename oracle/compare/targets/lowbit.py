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
"""
from __future__ import annotations

from dataclasses import replace

from oracle.lion import REFERENCE_LION

from ..measuring.quantized_state import bnb_entry, torchao_entry
from .base import Target
from .bitsandbytes_torchao import BNB_ADAM, TORCHAO_ADAMW, _cpu_only, _version, bnb_unavailable, make_factory, torchao_unavailable

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
        subset=TORCHAO_SUBSET,
        subset_reason="torch.compile compiles each param shape on its first step (seconds a case on 2 cores)",
        no_dtensor="its state subclasses are not DTensor-aware here",
        notes=f"torchao {_version('torchao')} {cls} (read from 0.18.0): quantized exp_avg ({exp_avg}) and "
              f"exp_avg_sq ({exp_avg_sq}) for params of >= 4096 elements and whole blocks, the param dtype "
              "below; single_param_adam under torch.compile, float32 math")


def lowbit_targets() -> list[Target]:
    """bitsandbytes' 8-bit Adam, AdamW and Lion, torchao's AdamW8bit (also with bf16 stochastic rounding),
    AdamW4bit and AdamWFp8. Imports neither library."""
    from oracle import adam as oadam
    from oracle import lion as olion
    adam_keys = {"lr", "betas", "eps", "weight_decay"}
    return [
        _bnb("bnb.adam8bit", "adam", "Adam8bit", BNB_ADAM, adam_keys, oadam.DEFAULTS, BNB_ADAM_STATE),
        _bnb("bnb.adamw8bit", "adamw", "AdamW8bit", BNB_ADAM, adam_keys, oadam.DEFAULTS, BNB_ADAM_STATE),
        _bnb("bnb.lion8bit", "lion", "Lion8bit", BNB_LION, {"lr", "betas", "weight_decay"}, olion.DEFAULTS,
             BNB_LION_STATE),
        _torchao("torchao.adamw8bit", "AdamW8bit", "torchao.dynamic8", "torchao.dynamic8u", oadam.DEFAULTS),
        _torchao("torchao.adamw4bit", "AdamW4bit", "torchao.dynamic4", "torchao.linear4u", oadam.DEFAULTS),
        _torchao("torchao.adamwfp8", "AdamWFp8", "torchao.fp8", "torchao.fp8", oadam.DEFAULTS),
        _torchao_sr(oadam.DEFAULTS),
    ]


def _torchao_sr(defaults: dict) -> Target:
    """torchao's AdamW8bit with bf16_stochastic_round=True: bf16 params only (the flag does nothing for
    others), the float32 result rounded stochastically on store (the `rounding` check)."""
    base = _torchao("torchao.adamw8bit.sr", "AdamW8bit", "torchao.dynamic8", "torchao.dynamic8u", defaults,
                    bf16_stochastic_round=True)
    return replace(base, dtypes=("bfloat16",), rounding="stochastic",
                   notes=base.notes + "; bf16_stochastic_round=True: p rounded from float32 to bf16 toward zero, "
                         "or away with probability (low 16 bits of the float32) / 2^16 drawn by torch.randint "
                         "(optim/quant_utils.py _fp32_to_bf16_sr)")


__all__ = ["BNB_LION", "lowbit_targets"]
