"""Cheap third-party CPU targets: bitsandbytes 32-bit optimizers and torchao's _AdamW.

Nothing here imports bitsandbytes or torchao at module import time:
`extra_targets()` returns Target objects whose `requires` says why a library
is unusable (never raises) and whose `make` imports it on first use.

Install (CPU, without touching torch; both wheels declare only torch/numpy/
packaging as runtime dependencies):

    pip install --no-deps 'bitsandbytes>=0.50,<0.51' 'torchao>=0.18,<0.19'

Conventions (read from the installed sources; paths relative to site-packages):

bitsandbytes 0.50.2, Adam32bit / AdamW32bit / Adagrad32bit on CPU
  dispatch  F.optimizer_update_32bit (functional.py:1080-1160) ->
            torch.ops.bitsandbytes.optimizer_update_32bit, CPU kernel
            _optimizer_update_32bit_cpu (backends/cpu/ops.py:345-451), plain
            torch ops on fp32 copies: g.float(), p.float(), state fp32,
            p.copy_(p_float) at the end (rounds p once on store).
  counter   state[p]["step"], a Python int, set to 0 in init_state and
            advanced in update_step only for params with a grad
            (optim/optimizer.py: Optimizer8bit.step, Optimizer2State.init_state /
            update_step)                                           -> counter="param"
  state     "state1"/"state2" (fp32, zeros_like(p, float32)) = exp_avg/exp_avg_sq;
            Adagrad: "state1" = sum. state_dict() moves them under
            "__bnb_optimizer_quant_state__" and load_state_dict moves them back.
  adam      m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; bc1 = 1-b1^t,
            c2 = sqrt(1-b2^t) (Python doubles); step_size = -lr*c2/bc1;
            if wd > 0: p *= 1-lr*wd (BEFORE the update; the update does not read p);
            p += step_size * m/(sqrt(v) + eps*c2)   (backends/cpu/ops.py:368-382)
            = p - lr/bc1 * m/(sqrt(v)/c2 + eps)             -> eps_mode="outside"
            The decay is DECOUPLED for both Adam32bit and AdamW32bit: the two
            classes differ only in the default weight_decay (0 vs 1e-2)
            (optim/adam.py, optim/adamw.py)                 -> decay="decoupled"
            bitsandbytes.optim.Adam with weight_decay > 0 is therefore AdamW,
            not torch.optim.Adam (L2).
            amsgrad is accepted by the constructor and ignored (never read);
            no maximize; bias correction always on.
            1-b1, 1-b2, lr*c2/bc1 are Python doubles, rounded once as op scalars
                                                            -> fp32_hparams=False
  adagrad   g' = g + wd*p (if wd > 0); h += g'^2; p -= lr*g'/(sqrt(h)+eps)
            (backends/cpu/ops.py:428-434) = torch's L2 form; lr_decay and
            initial_accumulator_value != 0 raise (optim/adagrad.py:173-176).
  dtypes    fp32, bf16, fp16 params; math fp32; state always fp32.
  Quantized-state (8-bit / 4-bit) variants are not targets: see docs/targets.md.

torchao 0.18.0, torchao.optim._AdamW (optim/adam.py:406-430, _AdamBase 19-160,
single_param_adam 163-209)
  counter   state[p]["step"] = torch.tensor(0.0) (float32, CPU), += 1 only for
            params with a grad                                  -> counter="param"
  update    compiled per param with torch.compile(single_param_adam, fullgraph=True):
            p32 = p.float() - lr*wd*p.float() (decoupled, before the moments);
            m = m.float().lerp(g, 1-b1); v = v.float().lerp(g^2, 1-b2);
            denom = sqrt(v)/sqrt(bc2) + eps; p32 -= lr*(m/bc1)/denom; bc from
            beta**step with step a float32 tensor                 -> TORCH_ADAMW form
            m, v, p are written back with copy_ (rounded once, to the param dtype)
  state     exp_avg / exp_avg_sq (and max_exp_avg_sq with amsgrad), zeros_like(p):
            the param dtype (block_size=inf disables the quantized subclasses)
  hparams   group["lr"] is converted to a float32 tensor (add_param_group); betas, eps, wd
            stay Python floats (1-b formed in double)              -> fp32_hparams=False
  options   amsgrad (running max of v, as torch); no maximize; no bias_correction flag.
  needs     a C++ compiler for inductor (torch.compile on CPU); the first step of each
            param shape compiles (seconds).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import shutil

from oracle.adagrad import AdagradConvention
from oracle.adam import AdamConvention

from .base import Target

# fp32_hparams=False: 1-beta etc. are formed in Python doubles and rounded once when they
# reach the fp32 tensor op (measured: declaring fp32 betas puts v 130 ULPs off at step 1).
BNB_ADAM = AdamConvention(decay="decoupled", eps_mode="outside", bias_correction=True, counter="param")
BNB_ADAGRAD = AdagradConvention(decay="l2", eps_mode="outside", counter="param")
# 1 - beta**step is formed in float32 (step is a float32 tensor; optim/adam.py:187-188)
# the step counter is a float32 tensor, as torch's (torchao/optim/adam.py keeps state["step"] float32)
TORCHAO_ADAMW = AdamConvention(decay="decoupled", eps_mode="outside", bias_correction=True, counter="param",
                               bias_correction_precision="compute", counter_format="float32")
# these libraries' named conventions (targets.conventions.catalog): preset -> (optimizer, convention)
PRESETS = {"bitsandbytes.adam": ("adam", BNB_ADAM), "torchao.adamw": ("adamw", TORCHAO_ADAMW),
           "bitsandbytes.adagrad": ("adagrad", BNB_ADAGRAD)}

# what a fresh process of a torchao optimizer needs before its first steps are done compiling: the
# rank scenarios' 2 and 4 ranks each compile on 2 cores (rank_skew's 120 s limit was exceeded by all
# four torchao targets on 2026-12-05)
TORCHAO_START_S = 300.0
INSTALL = "pip install --no-deps 'bitsandbytes>=0.50,<0.51' 'torchao>=0.18,<0.19'"

# bitsandbytes 0.50 logs a warning when imported on a CPU with AVX512-BF16 and without the optional
# `kernels` package (a 4-bit matmul kernel, backends/cpu/ops.py): nothing its optimizers use, and it
# was the first line a sweep printed. Only that message is dropped.
logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(
    lambda record: "gemm_4bit_forward" not in record.getMessage())

# torch-style keys: dropped when they hold torch's neutral value, refused otherwise
# (bias_correction's neutral value is True, every other key's is falsy)
_NEUTRAL = ("amsgrad", "maximize", "foreach", "fused", "capturable", "differentiable", "lr_decay",
            "initial_accumulator_value", "bias_correction")


def _neutral(key: str, value) -> bool:
    return value is True if key == "bias_correction" else not value


def translate(d: dict, accepted: set, lib: str, where: str) -> dict:
    """Keep the keys `lib` takes; drop torch keys at their neutral value; refuse the rest."""
    out = {}
    for k, v in d.items():
        if k == "params" or k in accepted:
            out[k] = v
        elif k in _NEUTRAL:
            if not _neutral(k, v):
                raise ValueError(f"{where}: {lib} does not support {k}={v!r}")
        else:
            raise ValueError(f"{where}: {lib} has no hyperparameter {k!r}")
    return out


def make_factory(cls_path: str, accepted: set, lib: str, oracle_defaults: dict, **flags):
    """make(groups, defaults) building `cls_path` with translated hyperparameters.
    Keys the library takes but the caller leaves out get the oracle's default, so a
    library default that differs from the oracle's (e.g. eps) cannot slip in."""
    def make(groups, defaults):
        mod, _, name = cls_path.rpartition(".")
        cls = getattr(importlib.import_module(mod), name)
        base = {k: v for k, v in oracle_defaults.items() if k in accepted}
        kw = {**base, **translate(dict(defaults), accepted, lib, "defaults")}
        gs = [translate(g, accepted, lib, f"param group {i}") for i, g in enumerate(groups)]
        return cls(gs, **kw, **flags)
    return make


@functools.lru_cache(maxsize=None)
def _version(dist: str) -> str:
    """The installed version (read from its metadata once per process: a worker lists the targets at
    every job, and each reading parses a METADATA file)."""
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # noqa: BLE001 - metadata missing means "unknown"
        return "none"


@functools.lru_cache(maxsize=None)
def bnb_unavailable() -> str | None:
    """None when bitsandbytes imports and has a CPU optimizer kernel. Never raises."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return f"bitsandbytes is not installed ({INSTALL})"
    try:
        import torch
        import bitsandbytes  # noqa: F401
        import bitsandbytes.functional as F
        p = torch.zeros(4)
        F.optimizer_update_32bit("adam", torch.ones(4), p, torch.zeros(4), 0.9, 1e-8, 1, 1e-3,
                                 torch.zeros(4), 0.999)
        if not torch.isfinite(p).all() or not (p != 0).all():
            return "bitsandbytes CPU optimizer kernel returned an unexpected result"
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable here"
        return f"bitsandbytes is not usable on CPU: {type(exc).__name__}: {exc}"
    return None


@functools.lru_cache(maxsize=None)
def torchao_unavailable() -> str | None:
    """None when torchao.optim._AdamW imports and torch.compile has a C++ compiler. Never raises."""
    if importlib.util.find_spec("torchao") is None:
        return f"torchao is not installed ({INSTALL})"
    if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        return "torchao._AdamW runs under torch.compile, which needs a C++ compiler on CPU (none found)"
    try:
        from torchao.optim import _AdamW  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"torchao.optim._AdamW failed to import: {type(exc).__name__}: {exc}"
    return None


def _cpu_only(check):
    def requires(device: str) -> str | None:
        if device != "cpu":
            return "this adapter is declared for cpu only"
        return check()
    return requires


def extra_targets() -> list[Target]:
    """bitsandbytes Adam32bit/AdamW32bit/Adagrad32bit and torchao _AdamW on CPU. Imports nothing."""
    from oracle import adagrad as oa
    from oracle import adam as oadam
    bnb = f"bitsandbytes {_version('bitsandbytes')} (conventions read from 0.50.2)"
    ao = f"torchao {_version('torchao')} (conventions read from 0.18.0)"
    adam_keys = {"lr", "betas", "eps", "weight_decay"}
    bnb_common = dict(devices=("cpu",), dtypes=("float32", "bfloat16", "float16"), compute="float32",
                      masters=False, state_dtype="float32", options=frozenset(),
                      requires=_cpu_only(bnb_unavailable),
                      no_dtensor="its update is one custom op (bitsandbytes.optimizer_update_32bit) with no DTensor "
                                 "sharding rule (NotImplementedError)")
    adam_names = (("state1", "exp_avg"), ("state2", "exp_avg_sq"))
    bnb_adam_notes = ("; CPU kernel backends/cpu/ops.py:345-451: fp32 math on copies, p rounded once "
                      "on store; decay p *= 1-lr*wd before the update for BOTH Adam32bit and AdamW32bit "
                      "(decoupled; bnb Adam with wd > 0 is AdamW); eps*sqrt(bc2) inside the division with "
                      "step size lr*sqrt(bc2)/bc1 = eps outside; counter state[p]['step'] int; state "
                      "'state1'/'state2' fp32; amsgrad accepted and ignored (refused here); no maximize")
    return [
        Target(name="bnb.adam32bit", optimizer="adam", convention=BNB_ADAM, state_names=adam_names,
               make=make_factory("bitsandbytes.optim.Adam32bit", adam_keys, "bitsandbytes Adam32bit",
                                 oadam.DEFAULTS), **bnb_common,
               notes=f"{bnb} Adam32bit" + bnb_adam_notes),
        Target(name="bnb.adamw32bit", optimizer="adamw", convention=BNB_ADAM, state_names=adam_names,
               make=make_factory("bitsandbytes.optim.AdamW32bit", adam_keys, "bitsandbytes AdamW32bit",
                                 oadam.DEFAULTS), **bnb_common,
               notes=f"{bnb} AdamW32bit" + bnb_adam_notes),
        Target(name="bnb.adagrad32bit", optimizer="adagrad", convention=BNB_ADAGRAD,
               state_names=(("state1", "sum"),),
               make=make_factory("bitsandbytes.optim.Adagrad32bit", {"lr", "eps", "weight_decay"},
                                 "bitsandbytes Adagrad32bit", oa.DEFAULTS), **bnb_common,
               notes=f"{bnb} Adagrad32bit: g' = g + wd*p; h += g'^2; p -= lr*g'/(sqrt(h)+eps) "
                     "(backends/cpu/ops.py:428-434) = torch L2; accumulator 'state1' fp32; counter "
                     "state[p]['step'] int; lr_decay / initial_accumulator_value != 0 raise "
                     "(optim/adagrad.py:173-176); no maximize"),
        Target(name="torchao.adamw", optimizer="adamw", convention=TORCHAO_ADAMW,
               make=make_factory("torchao.optim._AdamW", adam_keys | {"amsgrad"}, "torchao _AdamW",
                                 oadam.DEFAULTS),
               devices=("cpu",), dtypes=("float32", "bfloat16", "float16"), compute="float32",
               masters=False, state_dtype="param", options=frozenset({"amsgrad"}),
               requires=_cpu_only(torchao_unavailable),
               # torch.compile on every new optimizer: ~4 s a case on 2 cores, so it runs when
               # named (--target 'torchao.*'), not in the default sweep
               in_default=False, start_s=TORCHAO_START_S,
               notes=f"{ao} torchao.optim._AdamW (optim/adam.py:406-430): torch.compile'd "
                     "single_param_adam (adam.py:163-209) in fp32, p/m/v rounded once on store to the "
                     "param dtype; decoupled decay p - lr*wd*p before the moments; eps outside "
                     "sqrt(v)/sqrt(bc2)+eps; counter state[p]['step'] float32 CPU tensor; lr held as a "
                     "float32 tensor; amsgrad supported; no maximize; bf16_stochastic_round off"),
    ]


__all__ = ["BNB_ADAGRAD", "BNB_ADAM", "TORCHAO_ADAMW", "bnb_unavailable", "extra_targets", "make_factory",
           "torchao_unavailable", "translate"]
