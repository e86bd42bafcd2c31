"""torch.optim's own implementations: forloop, foreach and fused, for every
optimizer whose comparison record names a torch class."""
from __future__ import annotations

from dataclasses import replace

import oracle

from . import classes
from .base import Target, torch_scaled_step

# Deviations torch makes by design (scenario checks; oracle.compare.scenarios.common.finish).
# (Its float32 step counter is not a deviation but part of its convention: float32_counter below.)
TORCH_DECLARED = (
    ("flags",
     "torch's Optimizer.load_state_dict rebuilds param_groups from the checkpoint's groups, so the "
     "checkpoint's foreach/fused/capturable values replace the constructed ones and the continuation "
     "runs the checkpoint's path (torch/optim/optimizer.py, load_state_dict.update_group)"),
)

# (path, constructor flags, compute): forloop and foreach on bf16/fp16 params
# round every operation to the param dtype; the fused path computes in fp32
# unless the record says otherwise (with its reason there).
PATHS = (("forloop", {"foreach": False}, "storage"), ("foreach", {"foreach": True}, "storage"),
         ("fused", {"fused": True}, None))
# The paths that take complex params (the update on torch.view_as_real, oracle complex_form "components"):
# torch 2.13's fused kernels refuse them ("`fused=True` requires all the params to be floating point
# Tensors", torch/optim/optimizer.py _device_dtype_check_for_fused), so its fused targets skip complex cases.
COMPLEX_PATHS = ("forloop", "foreach")
REAL = ("float32", "bfloat16", "float16")


def path_dtypes(name: str, path: str) -> tuple:
    """The dtypes a torch path takes for this optimizer: complex ones too where both torch's path and the
    spec have a complex form."""
    takes = path in COMPLEX_PATHS and oracle.SPECS[name].complex_form is not None
    return REAL + (("complex64", "complex128") if takes else ())


def float32_counter(conv):
    """torch keeps the counter as a 0-dim float32 tensor (optimizer._get_scalar_dtype()): it holds
    integers exactly only up to 2**24, so from step 16777216 on it stops advancing (bias corrections
    there are 1 - beta**t ~ 1 either way). Optimizers whose update never reads a counter have no field."""
    return replace(conv, counter_format="float32") if hasattr(conv, "counter_format") else conv


def accepted_options(cls: classes.ClassInfo, optimizer: str) -> frozenset:
    """The spec's options this class's constructor takes."""
    return frozenset(o for o in oracle.SPECS[optimizer].options if o in cls.parameters)


def torch_targets(records: dict) -> list[Target]:
    """records: optimizer name -> its comparison record (oracle.compare.optimizers)."""
    out = []
    for name, rec in records.items():
        if rec.torch_class is None:
            continue
        cls = classes.info(rec.torch_class)  # read by a worker, where the CLI imports no torch
        params = cls.parameters
        for path, flags, compute in PATHS:
            if path == "forloop" and "foreach" not in params:
                flags = {}  # a class with one path and no flag for it (torch.optim.Muon): its forloop
            if not all(k in params for k in flags):
                continue  # e.g. an optimizer without a fused path
            out.append(Target(
                name=f"torch.{name}.{path}", optimizer=name, make=classes.lazy_make(rec.torch_class, **flags),
                convention=float32_counter(oracle.SPECS[name].convention), devices=("cpu", "cuda"),
                dtypes=path_dtypes(name, path),
                compute=compute or rec.torch_fused_compute, options=accepted_options(cls, name),
                scaling=torch_scaled_step if path == "fused" else None, declared=TORCH_DECLARED,
                no_dtensor=rec.torch_fused_no_dtensor if path == "fused" else "",
                notes=f"torch {classes.torch_version()} {cls.name}({', '.join(f'{k}={v}' for k, v in flags.items())})"))
    return out


__all__ = ["COMPLEX_PATHS", "PATHS", "TORCH_DECLARED", "accepted_options", "float32_counter", "torch_targets"]
