"""CUDA-only targets: torch's capturable paths, NVIDIA apex, TransformerEngine and
DeepSpeed's CUDA FusedAdam / FusedLamb.

Nothing here imports apex, transformer_engine or deepspeed at module import
time. `gpu_targets()` returns Target objects with devices=("cuda",); their
`requires` returns the reason a target cannot run (no CUDA, library or its
CUDA extension missing, DeepSpeed on the wrong accelerator) and never raises;
`make` imports the library on first use. Exercised by `tox -e gpu`
(scripts/gpu_suite.py -> `python -m oracle.compare --device cuda`); on CPU the
tests only check listing and skipping (tests/test_gpu_targets.py).

Hyperparameters arrive torch-style; each adapter keeps the ones the library's
constructor takes, drops torch-only flags at their neutral value (amsgrad=False,
maximize=False, foreach/fused/capturable unset, ...), refuses them otherwise, and
fills keys the case leaves out with the ORACLE's defaults (DeepSpeed FusedLamb's
own eps default is 1e-8, the oracle's LAMB default 1e-6). Keys that the
declared convention makes irrelevant are dropped (min_coeff/max_coeff for apex
LAMB, which has no clamp; max_grad_norm for DeepSpeed FusedLamb, whose clipping
needs caller-supplied norms: it is passed 0 = off, as DEEPSPEED_LAMB declares).

Conventions (sources read; paths relative to each repository / site-packages):

torch Adam/AdamW, capturable (torch 2.13, torch/optim/adam.py)
  foreach+capturable and fused+capturable: state[p]["step"] a float32 tensor ON THE
  PARAM'S DEVICE, per param, advanced only with a grad; lr may be a tensor; same
  math as the non-capturable path (TORCH_ADAM / TORCH_ADAMW); foreach rounds after
  every op ("storage"), fused computes in fp32 ("float32").

apex.optimizers.FusedAdam (apex/optimizers/fused_adam.py, csrc/multi_tensor_adam.cu)
  __init__(params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
           adam_w_mode=True, weight_decay=0., amsgrad=False, set_grad_none=True,
           capturable=False, use_master=False); amsgrad=True raises.
  counter   group["step"]: int, += 1 every step() (int32 CUDA tensor [1] when capturable,
            advanced by (overflow_buf != 1))                  -> counter="group"
  state     exp_avg / exp_avg_sq = zeros_like(p).float()     -> state_dtype float32
  math      fp32 (MATH_T float); bc1/bc2 from float betas on the host;
            L2 (adam_w_mode=False): g += wd*p; AdamW: u = (m/bc1)/(sqrt(v/bc2)+eps) + wd*p,
            p -= lr*u                           -> decay "l2" / "decoupled_update",
                                                   eps_mode "outside_corrected", fp32_hparams
  dtypes    fp16, bf16, fp32 params (float64 raises). use_master (fp16 + capturable only)
            builds masters from `params` before the base class sees them and fails on
            param-group dicts: not a target.
apex.optimizers.FusedLAMB (apex/optimizers/fused_lamb.py, csrc/multi_tensor_lamb.cu)
  __init__(params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6,
           weight_decay=0.01, amsgrad=False, adam_w_mode=True, grad_averaging=True,
           set_grad_none=True, max_grad_norm=1.0, use_nvlamb=False) -> APEX_LAMB
  global grad norm over every group; max_grad_norm read from self.defaults only
  (constructor-wide); group["step"] int advanced for every group; moments
  zeros_like(p) (param dtype); fp16 and fp32 params only (bf16 raises).
apex.optimizers.FusedAdagrad (apex/optimizers/fused_adagrad.py, csrc/multi_tensor_adagrad.cu)
  __init__(params, lr=1e-2, eps=1e-10, weight_decay=0., set_grad_none=True,
           adagrad_w_mode=False); state "sum" = zeros_like(p) (param dtype); NO counter
  at all (the harness's counter check has no "none" convention: declared "param",
  the counters check reports the absent counter); fp16/fp32 params only.
  L2: g += wd*p; h += g^2; p -= lr*g/(sqrt(h)+eps)               -> decay "l2"
  W mode: p -= lr*(g/(sqrt(h)+eps) + wd*p)                       -> decay "decoupled"

transformer_engine.pytorch.optimizers.FusedAdam
  (transformer_engine/pytorch/optimizers/fused_adam.py, read at 2.x main)
  __init__(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, *,
           bias_correction=True, adam_w_mode=True, capturable=False, master_weights=False,
           master_weight_dtype=fp32, exp_avg_dtype=fp32, exp_avg_sq_dtype=fp32,
           use_decoupled_grad=False, store_param_remainders=False)
  math = apex's (multi_tensor_adam from transformer_engine_torch) -> APEX_ADAMW / l2 variant.
  counter   group["step"] int (int32 CUDA tensor when capturable)  -> counter="group"
  state     created for every param on the first step(), grad or not (initialize_state
            runs before the grad check); exp_avg/exp_avg_sq fp32 by default; with
            master_weights a fp32 "master_param" that the update runs on (masters=True).
            exp_avg_dtype=bf16 stores bf16 moments (fp32 math, copy_ on store); fp16/fp8
            moments are stored SCALED by a per-tensor factor (self._scales): not readable
            as values by oracle.compare.measuring.readback, so not targets.
  dtypes    fp32, fp16, bf16 params (a mix of fp16 and bf16 in one group raises).

deepspeed.ops.adam.FusedAdam on CUDA (deepspeed 0.19.8: ops/adam/fused_adam.py,
  csrc/adam/multi_tensor_adam.cu)
  __init__(params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
           adam_w_mode=True, weight_decay=0., amsgrad=False, set_grad_none=True)
  math      multi_tensor_adam.cu:97-112 = apex's: L2 g += wd*p, or u = m̂/(sqrt(v̂)+eps) + wd*p;
            bc from std::pow on the host (:144-147)  -> "l2"/"decoupled_update", "outside_corrected"
  counter   state[p]["step"] per param, initialized from group.get("step", 0)
            (fused_adam.py:150-153), but step() increments only `state` of the LAST param
            with a grad, once per dtype present, and passes it for all (fused_adam.py:177-193).
            Declared: the intended per-param counter, so the harness reports the deviation.
  state     exp_avg / exp_avg_sq = zeros_like(p): the PARAM dtype (fused_adam.py:155-157)
  dtypes    fp16, bf16, fp32.
deepspeed.ops.lamb.FusedLamb on CUDA (ops/lamb/fused_lamb.py, csrc/lamb/fused_lamb_cuda_kernel.cu)
  __init__(params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
           eps_inside_sqrt=False, weight_decay=0., max_grad_norm=0., max_coeff=10.0,
           min_coeff=0.01, amsgrad=False) -> DEEPSPEED_LAMB
  counter   state[p]["step"] int per param, only with a grad (fused_lamb.py:147-162)
  math      m, v uncorrected; u = m/(sqrt(v)+eps) + wd*p (kernel :219-235); step size
            lr*sqrt(bc2)/bc1 (:363-369); ratio clamp(||p||/||u||, min_coeff, max_coeff), 1 if a
            norm is 0 (:288-296). max_grad_norm > 0 needs grad_norms passed to step()
            (fused_lamb.py:133-137, None otherwise -> TypeError).
  dtypes    fp32 params only: fp16 grads require fp32 params (kernel :371-374), bf16 is not
            dispatched.
  DeepSpeed picks its accelerator once per process: the CPU DeepSpeed targets set
  DS_ACCELERATOR=cpu (oracle.compare.targets.deepspeed.configure_env), so these targets skip,
  saying so, in a process that ran those.
"""
from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import replace

from oracle.adam import APEX_ADAMW, TORCH_ADAM, TORCH_ADAMW, AdamConvention
from oracle.adagrad import AdagradConvention
from oracle.lamb import APEX_LAMB, DEEPSPEED_LAMB

from . import classes
from .base import Target, torch_scaled_step as _torch_scaled_step
from .bitsandbytes_torchao import _version, make_factory
from .torch_optim import TORCH_DECLARED, float32_counter

# apex's and DeepSpeed's CUDA kernels add wd*p in L2 mode whatever wd is (zero_decay="add").
APEX_ADAM = AdamConvention(decay="l2", eps_mode="outside_corrected", counter="group", fp32_hparams=True,
                           zero_decay="add")
APEX_ADAGRAD = AdagradConvention(decay="l2", eps_mode="outside", counter="param", fp32_hparams=True,
                                 zero_decay="add")
APEX_ADAGRAD_W = AdagradConvention(decay="decoupled", eps_mode="outside", counter="param", fp32_hparams=True)
DS_CUDA_ADAMW = AdamConvention(decay="decoupled_update", eps_mode="outside_corrected", counter="param",
                               fp32_hparams=True)
DS_CUDA_ADAM = AdamConvention(decay="l2", eps_mode="outside_corrected", counter="param", fp32_hparams=True,
                              zero_decay="add")
# these libraries' named conventions (targets.conventions.catalog): preset -> (optimizer, convention)
PRESETS = {"apex.adam": ("adam", APEX_ADAM), "deepspeed.cuda.adamw": ("adamw", DS_CUDA_ADAMW),
           "deepspeed.cuda.adam": ("adam", DS_CUDA_ADAM), "apex.adagrad": ("adagrad", APEX_ADAGRAD),
           "apex.adagrad_w": ("adagrad", APEX_ADAGRAD_W)}

ADAM_KEYS = {"lr", "betas", "eps", "weight_decay", "bias_correction"}
ADAGRAD_KEYS = {"lr", "eps", "weight_decay"}
APEX_LAMB_KEYS = {"lr", "betas", "eps", "weight_decay", "bias_correction", "grad_averaging", "max_grad_norm"}
DS_LAMB_KEYS = {"lr", "betas", "eps", "weight_decay", "bias_correction", "min_coeff", "max_coeff"}


def _cuda_reason() -> str | None:
    try:
        import torch
        if not torch.cuda.is_available():
            return "CUDA is not available"
    except Exception as exc:  # noqa: BLE001
        return f"torch.cuda failed: {type(exc).__name__}: {exc}"
    return None


def _guarded(check):
    """requires(device) for a CUDA-only target: device, CUDA, then `check()`; never raises."""
    def requires(device: str) -> str | None:
        if not str(device).startswith("cuda"):
            return f"CUDA-only target, asked for {device}"
        try:
            return _cuda_reason() or check()
        except Exception as exc:  # noqa: BLE001 - requires must never raise
            return f"{type(exc).__name__}: {exc}"
    return requires


@functools.lru_cache(maxsize=None)
def apex_unavailable() -> str | None:
    if importlib.util.find_spec("apex") is None:
        return "apex is not installed (build NVIDIA/apex with --cuda_ext; see docs/targets.md)"
    try:
        from apex.multi_tensor_apply import multi_tensor_applier
    except Exception as exc:  # noqa: BLE001
        return f"apex failed to import: {type(exc).__name__}: {exc}"
    if not getattr(multi_tensor_applier, "available", False):
        return "apex is installed without its CUDA extensions (amp_C); rebuild with --cuda_ext"
    return None


@functools.lru_cache(maxsize=None)
def te_unavailable() -> str | None:
    if importlib.util.find_spec("transformer_engine") is None:
        return "transformer_engine is not installed (pip install 'transformer_engine[pytorch]')"
    try:
        from transformer_engine.pytorch.optimizers import FusedAdam  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"transformer_engine.pytorch.optimizers.FusedAdam failed to import: {type(exc).__name__}: {exc}"
    return None


_DS_BUILDERS = {"fused_adam": "FusedAdamBuilder", "fused_lamb": "FusedLambBuilder"}


@functools.lru_cache(maxsize=None)
def _ds_cuda_unavailable(op: str) -> str | None:
    if importlib.util.find_spec("deepspeed") is None:
        return "deepspeed is not installed (pip install --no-build-isolation 'deepspeed>=0.19,<0.20')"
    acc = os.environ.get("DS_ACCELERATOR")
    if acc not in (None, "", "cuda"):
        return (f"DS_ACCELERATOR={acc!r} in this process (the CPU DeepSpeed targets set 'cpu'); run the CUDA "
                "DeepSpeed targets in a process where it is unset or 'cuda'")
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        from deepspeed.ops import op_builder
    except Exception as exc:  # noqa: BLE001
        return f"deepspeed failed to import: {type(exc).__name__}: {exc}"
    if get_accelerator().device_name() != "cuda":
        return f"deepspeed accelerator is {get_accelerator().device_name()!r}, not cuda"
    if tuple(int(x) for x in deepspeed.__version__.split(".")[:2]) != (0, 19):
        return f"deepspeed {deepspeed.__version__}: conventions were read from 0.19.x"
    builder = getattr(op_builder, _DS_BUILDERS[op])()
    if not builder.is_compatible(verbose=False):
        return f"deepspeed op {op} is not compatible with this system (CUDA toolkit / compiler)"
    return None


def _ds_make(cls_path, keys, lib, defaults, **flags):
    inner = make_factory(cls_path, keys, lib, defaults, **flags)

    def strip(d: dict) -> dict:
        # max_grad_norm: the declared convention has no global clipping, and DeepSpeed's needs
        # step(grad_norms=...), so it is left at 0 (off). grad_averaging=True is what DeepSpeed
        # always does; False is refused by translate().
        return {k: v for k, v in d.items() if k != "max_grad_norm" and not (k == "grad_averaging" and v)}

    def make(groups, hparams):
        return inner([strip(g) for g in groups], strip(hparams))
    return make


def _apex_lamb_make(groups, hparams):
    """apex FusedLAMB has no ratio clamp (APEX_LAMB.clamp=False): min_coeff/max_coeff are dropped."""
    from oracle import lamb as ol
    inner = make_factory("apex.optimizers.FusedLAMB", APEX_LAMB_KEYS, "apex FusedLAMB", ol.DEFAULTS)
    strip = lambda d: {k: v for k, v in d.items() if k not in ("min_coeff", "max_coeff")}  # noqa: E731
    return inner([strip(g) for g in groups], strip(hparams))


def gpu_targets() -> list[Target]:
    """Every CUDA-only adapter. Cheap: imports no third-party library."""
    from oracle import adagrad as oa
    from oracle import adam as oadam
    from oracle import lamb as ol
    out = []
    # --- torch capturable -------------------------------------------------------
    for opt_name, cls_path, conv in (("adam", "torch.optim.Adam", TORCH_ADAM), ("adamw", "torch.optim.AdamW", TORCH_ADAMW)):
        for path, flags, compute in (("foreach_capturable", {"foreach": True, "capturable": True}, "storage"),
                                     ("fused_capturable", {"fused": True, "capturable": True}, "float32")):
            # foreach+capturable forms 1 - beta**step with _foreach_pow on the float32 step
            # tensors (float32 math); the fused kernel takes double betas (fused_adam_utils.cuh)
            bc = "compute" if path == "foreach_capturable" else "float64"
            out.append(Target(
                name=f"torch.{opt_name}.{path}", optimizer=opt_name, make=classes.lazy_make(cls_path, **flags),
                convention=float32_counter(replace(conv, bias_correction_precision=bc)), devices=("cuda",),
                compute=compute,
                options=frozenset({"amsgrad", "maximize"}), requires=_guarded(lambda: None),
                scaling=_torch_scaled_step if "fused" in flags else None, declared=TORCH_DECLARED,
                notes=f"torch {classes.torch_version()} {cls_path.rpartition('.')[2]}({', '.join(f'{k}={v}' for k, v in flags.items())}): "
                      "state[p]['step'] float32 on the param's device (torch/optim/adam.py _init_group)"))
    # --- apex -----------------------------------------------------------------------
    apex_req = _guarded(apex_unavailable)
    apex_ver = f"apex {_version('apex')} (read: apex main)"
    for opt_name, conv, w in (("adamw", APEX_ADAMW, True), ("adam", APEX_ADAM, False)):
        for suffix, extra in (("", {}), (".capturable", {"capturable": True})):
            out.append(Target(
                name=f"apex.fused_adam.{opt_name}{suffix}", optimizer=opt_name, convention=conv,
                make=make_factory("apex.optimizers.FusedAdam", ADAM_KEYS, "apex FusedAdam", oadam.DEFAULTS,
                                  adam_w_mode=w, **extra),
                devices=("cuda",), dtypes=("float32", "bfloat16", "float16"), compute="float32",
                state_dtype="float32", requires=apex_req,
                notes=f"{apex_ver} FusedAdam(adam_w_mode={w}{', capturable=True' if extra else ''}): "
                      "apex/optimizers/fused_adam.py; group['step'] "
                      + ("int32 CUDA tensor [1], lr a CUDA tensor" if extra else "int")
                      + "; moments zeros_like(p).float(); csrc/multi_tensor_adam.cu: fp32 math, eps outside "
                      "sqrt(v/bc2), AdamW decay wd*p added to the update; amsgrad raises"))
    out.append(Target(
        name="apex.fused_lamb", optimizer="lamb", convention=APEX_LAMB, make=_apex_lamb_make,
        devices=("cuda",), dtypes=("float32", "float16"), compute="float32", state_dtype="param",
        requires=apex_req,
        notes=f"{apex_ver} FusedLAMB: apex/optimizers/fused_lamb.py (global grad norm over all groups, "
              "max_grad_norm from self.defaults only, group['step'] int for every group, moments in the "
              "param dtype, bf16 raises); csrc/multi_tensor_lamb.cu"))
    for suffix, conv, w in (("", APEX_ADAGRAD, False), (".w", APEX_ADAGRAD_W, True)):
        out.append(Target(
            name=f"apex.fused_adagrad{suffix}", optimizer="adagrad", convention=conv,
            make=make_factory("apex.optimizers.FusedAdagrad", ADAGRAD_KEYS, "apex FusedAdagrad", oa.DEFAULTS,
                              adagrad_w_mode=w),
            devices=("cuda",), dtypes=("float32", "float16"), compute="float32", state_dtype="param",
            requires=apex_req,
            notes=f"{apex_ver} FusedAdagrad(adagrad_w_mode={w}): apex/optimizers/fused_adagrad.py; state "
                  "'sum' in the param dtype; NO step counter (declared 'param': the counters check reports "
                  "its absence); csrc/multi_tensor_adagrad.cu"))
    # --- TransformerEngine ------------------------------------------------------------
    te_req = _guarded(te_unavailable)
    te_ver = f"transformer_engine {_version('transformer_engine')} (read: TE main 2.x)"
    te_path = "transformer_engine.pytorch.optimizers.FusedAdam"
    te_variants = (
        ("adamw", APEX_ADAMW, {"adam_w_mode": True}, {}),
        ("adam", APEX_ADAM, {"adam_w_mode": False}, {}),
        ("adamw.master", APEX_ADAMW, {"adam_w_mode": True, "master_weights": True}, {"masters": True}),
        ("adamw.capturable", APEX_ADAMW, {"adam_w_mode": True, "capturable": True}, {}),
        ("adamw.capturable_master", APEX_ADAMW, {"adam_w_mode": True, "capturable": True, "master_weights": True},
         {"masters": True}),
        ("adamw.bf16_moments", APEX_ADAMW,
         {"adam_w_mode": True, "exp_avg_dtype": "bfloat16", "exp_avg_sq_dtype": "bfloat16"},
         {"dtypes": ("bfloat16",), "state_dtype": "param"}),
    )
    for suffix, conv, flags, extra in te_variants:
        opt_name = "adam" if suffix == "adam" else "adamw"
        out.append(Target(
            name=f"te.fused_adam.{suffix}", optimizer=opt_name, convention=conv,
            make=_te_make(te_path, flags, oadam.DEFAULTS),
            devices=("cuda",), compute="float32", requires=te_req,
            **{"dtypes": ("float32", "bfloat16", "float16"), "state_dtype": "float32", **extra},
            notes=f"{te_ver} FusedAdam({', '.join(f'{k}={v}' for k, v in flags.items())}): "
                  "transformer_engine/pytorch/optimizers/fused_adam.py; apex's kernel math; group['step']; "
                  "state created for grad-None params too; master weights saved as 'master_param'"))
    # --- DeepSpeed on CUDA ----------------------------------------------------------------
    ds_ver = f"deepspeed {_version('deepspeed')} (read: 0.19.8)"
    for opt_name, conv, w in (("adamw", DS_CUDA_ADAMW, True), ("adam", DS_CUDA_ADAM, False)):
        out.append(Target(
            name=f"deepspeed.fused_adam.cuda.{opt_name}", optimizer=opt_name, convention=conv,
            make=make_factory("deepspeed.ops.adam.FusedAdam", ADAM_KEYS, "DeepSpeed FusedAdam", oadam.DEFAULTS,
                              adam_w_mode=w),
            devices=("cuda",), dtypes=("float32", "bfloat16", "float16"), compute="float32", state_dtype="param",
            requires=_guarded(functools.partial(_ds_cuda_unavailable, "fused_adam")),
            notes=f"{ds_ver} FusedAdam(adam_w_mode={w}) on CUDA: csrc/adam/multi_tensor_adam.cu:97-112 (apex "
                  "math); declared per-param counter, but step() advances only the last param's "
                  "state['step'] (ops/adam/fused_adam.py:177-193); moments in the param dtype (:155-157)"))
    out.append(Target(
        name="deepspeed.fused_lamb.cuda", optimizer="lamb", convention=DEEPSPEED_LAMB,
        make=_ds_make("deepspeed.ops.lamb.FusedLamb", DS_LAMB_KEYS, "DeepSpeed FusedLamb", ol.DEFAULTS),
        devices=("cuda",), dtypes=("float32",), compute="float32", state_dtype="param",
        requires=_guarded(functools.partial(_ds_cuda_unavailable, "fused_lamb")),
        notes=f"{ds_ver} FusedLamb: ops/lamb/fused_lamb.py (state[p]['step'] per param, max_grad_norm needs "
              "step(grad_norms=...): passed 0 = off, grad_averaging not supported); "
              "csrc/lamb/fused_lamb_cuda_kernel.cu (step size lr*sqrt(bc2)/bc1 :363-369, ratio clamped to "
              "[min_coeff, max_coeff] :288-296); fp32 params only"))
    return out


def _te_make(path, flags, oracle_defaults):
    def make(groups, hparams):
        import torch
        f = {k: (getattr(torch, v) if k.endswith("_dtype") and isinstance(v, str) else v) for k, v in flags.items()}
        return make_factory(path, ADAM_KEYS, "TransformerEngine FusedAdam", oracle_defaults, **f)(groups, hparams)
    return make


__all__ = ["APEX_ADAGRAD", "APEX_ADAGRAD_W", "APEX_ADAM", "DS_CUDA_ADAM", "DS_CUDA_ADAMW", "apex_unavailable",
           "gpu_targets", "te_unavailable"]
