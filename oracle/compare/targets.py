"""Targets: an optimizer implementation plus the conventions it declares.

A target builds a torch optimizer from parameter groups, and the harness
steps it and reads its state back in canonical form (oracle.compare.readback).
Anything that is a `torch.optim.Optimizer` works: torch's own paths, our
fused kernels, third-party libraries, a user's class passed with --impl.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, replace
from typing import Callable

import torch

import oracle
from oracle.adagrad import AdagradConvention
from oracle.adam import AdamConvention
from oracle.lamb import LambConvention


@dataclass(frozen=True)
class Target:
    """One implementation under test.

    make(param_groups, defaults) -> torch.optim.Optimizer, where
        param_groups is torch's list of {"params": [...], **hparams}.
    convention: the oracle convention the implementation declares.
    compute: "float32" when the per-element math runs in fp32 and rounds on
        store (fused kernels, fp32 paths); "storage" when each op rounds to
        the param dtype (torch forloop/foreach on bf16/fp16 params).
    masters: keeps FP32 master weights for low-precision params.
    options: optimizer options this target accepts (amsgrad, maximize, ...).
    requires: returns None if usable on `device`, else the reason it is not.
    """

    name: str
    optimizer: str
    make: Callable
    convention: object
    devices: tuple = ("cpu",)
    dtypes: tuple = ("float32", "bfloat16", "float16")
    compute: str = "float32"
    masters: bool = False
    state_dtype: str = "param"  # dtype of moments/accumulators: "param" (torch) or "float32"
    state_names: tuple = ()     # (implementation key, canonical name) pairs, see readback.read
    options: frozenset = frozenset()
    requires: Callable[[str], str | None] = lambda device: None
    notes: str = ""
    scaling: Callable | None = None  # step(opt, inv_scale, found_inf) if grad scaling is supported
    in_default: bool = True  # part of a sweep that names no --target
    declared: tuple = ()     # (check, reason) pairs: deviations by design; the check runs, findings go to its note

    def unavailable(self, device: str) -> str | None:
        if device not in self.devices:
            return f"{self.name} does not run on {device}"
        if device == "cuda" and not torch.cuda.is_available():
            return "CUDA is not available"
        return self.requires(device)

    def read(self, opt):
        from .readback import read
        return read(opt, self.state_names)

    def compute_dtype(self, storage: str) -> str:
        return storage if self.compute == "storage" else "float32"


def _torch_make(cls, **flags):
    def make(groups, defaults):
        return cls(groups, **{**defaults, **flags})
    return make


def _torch_scaled_step(opt, inv_scale, found_inf):
    """torch's fused path reads grad_scale/found_inf attributes set by GradScaler."""
    dev = opt.param_groups[0]["params"][0].device if opt.param_groups[0]["params"] else "cpu"
    opt.grad_scale = torch.tensor(1.0 / inv_scale, dtype=torch.float32, device=dev)
    opt.found_inf = torch.tensor(float(found_inf), dtype=torch.float32, device=dev)
    try:
        opt.step()
    finally:
        del opt.grad_scale, opt.found_inf


# torch's fused Adam/AdamW compute in fp32 and round p, m, v once on store.
# Loosened for fused Adagrad: on bf16/fp16 params it deviates from "fp32 math,
# round on store" by up to 16 bf16 ULPs in `sum` at step 1 with wd = 0.1
# (measured: adagrad/bf16/wd0.1/single/normal, seed 0), as if the L2-decayed
# grad and the accumulator were rounded to the param dtype mid-update, so its
# bound is that of a path computing in the storage dtype.
FUSED_COMPUTE = {"adam": "float32", "adamw": "float32", "adagrad": "storage"}
TORCH_CLASSES = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "adagrad": torch.optim.Adagrad}
TORCH_OPTIONS = {"adam": {"amsgrad", "maximize"}, "adamw": {"amsgrad", "maximize"},
                 "adagrad": {"lr_decay", "initial_accumulator_value", "maximize"}}
# Deviations torch makes by design (scenario checks; oracle.compare.scenarios.finish).
TORCH_DECLARED = (
    ("flags",
     "torch's Optimizer.load_state_dict rebuilds param_groups from the checkpoint's groups, so the "
     "checkpoint's foreach/fused/capturable values replace the constructed ones and the continuation "
     "runs the checkpoint's path (torch/optim/optimizer.py, load_state_dict.update_group)"),
    ("counters@16777216",
     "torch keeps the counter as a 0-dim float32 tensor (optimizer._get_scalar_dtype()); float32 holds "
     "integers exactly only up to 2**24, so from step 16777216 on it stops advancing (16777216 + 1 "
     "rounds back to 16777216). Bias corrections there are 1 - beta**t ~ 1 either way"),
)


def torch_targets() -> list[Target]:
    """torch.optim Adam, AdamW, Adagrad in forloop, foreach and fused form."""
    out = []
    for opt_name, cls in TORCH_CLASSES.items():
        conv = oracle.SPECS[opt_name].convention
        for path, flags, compute in (("forloop", {"foreach": False}, "storage"),
                                     ("foreach", {"foreach": True}, "storage"),
                                     ("fused", {"fused": True}, FUSED_COMPUTE[opt_name])):
            out.append(Target(
                name=f"torch.{opt_name}.{path}", optimizer=opt_name, make=_torch_make(cls, **flags),
                convention=conv, devices=("cpu", "cuda"), compute=compute,
                options=frozenset(TORCH_OPTIONS[opt_name]),
                scaling=_torch_scaled_step if path == "fused" else None,
                declared=TORCH_DECLARED,
                notes=f"torch {torch.__version__} {cls.__name__}({', '.join(f'{k}={v}' for k, v in flags.items())})"))
    return out


def _fused_targets() -> list[Target]:
    """Our own kernels (fused/); skipped with the reason when they cannot load."""
    try:
        import fused
        conventions = fused.CONVENTIONS
        classes = {"adamw": (fused.FusedAdam, {"adam_w_mode": True}), "adam": (fused.FusedAdam, {"adam_w_mode": False}),
                   "adagrad": (fused.FusedAdagrad, {}), "lamb": (fused.FusedLAMB, {})}
    except Exception as exc:  # noqa: BLE001 - any failure to load means "not available", with the reason
        reason = f"fused package unavailable: {type(exc).__name__}: {exc}"
        return [Target(name=f"fused.{n}", optimizer=n, make=None, convention=None,
                       requires=lambda d, r=reason: r) for n in ("adamw", "adam", "adagrad", "lamb")]
    options = {"adagrad": frozenset({"lr_decay", "initial_accumulator_value"})}
    return [Target(name=f"fused.{name}", optimizer=name, convention=conventions[name], make=_torch_make(cls, **flags),
                   masters=True, compute="float32", state_dtype="float32", devices=("cpu", "cuda"),
                   options=options.get(name, frozenset()), scaling=_fused_scaled_step,
                   notes=f"our fused {cls.__name__}({', '.join(f'{k}={v}' for k, v in flags.items())})")
            for name, (cls, flags) in classes.items()]


def _fused_scaled_step(opt, inv_scale, found_inf):
    opt.step(inv_scale=inv_scale, found_inf=found_inf)


def builtin_targets() -> list[Target]:
    return torch_targets() + _fused_targets()


# --- user optimizers -------------------------------------------------------

def infer_optimizer(obj) -> str | None:
    name = getattr(obj, "__name__", "").lower()
    for key in ("adamw", "adagrad", "lamb", "adam"):
        if key in name:
            return key
    return None


def load_impl(spec: str, optimizer: str | None = None, convention=None) -> Target:
    """Build a target from 'package.module:Name' (an Optimizer subclass taking
    torch's constructor signature, or a factory returning one).

    The counter location is detected from state_dict() after the first step
    (oracle.compare.readback); the remaining conventions default to torch's for
    that optimizer unless the class declares `ORACLE_CONVENTION`.
    """
    if ":" not in spec:
        raise ValueError(f"--impl expects 'package.module:Name', got {spec!r}")
    mod_name, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--impl {spec}: cannot import: {exc}") from exc
    opt = optimizer or getattr(obj, "ORACLE_OPTIMIZER", None) or infer_optimizer(obj)
    if opt not in oracle.SPECS:
        raise ValueError(f"--impl {spec}: cannot tell which optimizer it implements; "
                         f"set ORACLE_OPTIMIZER on it or pass --optimizer")
    conv = convention or getattr(obj, "ORACLE_CONVENTION", None) or oracle.SPECS[opt].convention
    options = getattr(obj, "ORACLE_OPTIONS", None)
    if options is None:
        params = inspect.signature(obj).parameters if callable(obj) else {}
        options = {o for o in TORCH_OPTIONS.get(opt, ()) if o in params}
    return Target(name=f"impl:{spec}", optimizer=opt, make=lambda groups, defaults: obj(groups, **defaults),
                  convention=conv, devices=tuple(getattr(obj, "ORACLE_DEVICES", ("cpu", "cuda"))),
                  dtypes=tuple(getattr(obj, "ORACLE_DTYPES", ("float32", "bfloat16", "float16"))),
                  compute=getattr(obj, "ORACLE_COMPUTE", "float32"),
                  masters=getattr(obj, "ORACLE_MASTERS", False), options=frozenset(options),
                  state_dtype=getattr(obj, "ORACLE_STATE_DTYPE", "param"),
                  # ORACLE_SCALING: step() takes inv_scale= and found_inf= keywords
                  scaling=_fused_scaled_step if getattr(obj, "ORACLE_SCALING", False) else None,
                  notes=f"user optimizer {spec}")


def with_counter(target: Target, counter: str) -> Target:
    """The same target with its declared counter location replaced."""
    return replace(target, convention=replace(target.convention, counter=counter))


__all__ = ["Target", "AdagradConvention", "AdamConvention", "LambConvention", "builtin_targets",
           "load_impl", "torch_targets", "with_counter"]
