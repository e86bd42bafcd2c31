"""Fused multi-tensor optimizers (C++ on CPU, CUDA on GPU) whose per-element
math is written once (csrc/optim_math.h) and verified against the float64
oracle. The conventions they implement are `CONVENTIONS`; `OPTIMIZERS` maps
each oracle optimizer name to the class and constructor flags that implement it,
`CLASSES` the same with the class's import path.

The optimizer classes (and with them torch) are imported when first named:
`CONVENTIONS` and `CLASSES` are plain data, which the comparison engine's CLI
reads to list our targets without importing torch (oracle.compare.lazy_torch).
"""
import importlib

from .conventions import CONVENTIONS, convention_of

# optimizer name -> (the class that implements it, as module.Name; its constructor flags)
CLASSES = {
    "adamw": ("fused.adam.FusedAdam", {"adam_w_mode": True}),
    "adam": ("fused.adam.FusedAdam", {"adam_w_mode": False}),
    "adagrad": ("fused.adagrad.FusedAdagrad", {}),
    "lamb": ("fused.lamb.FusedLAMB", {}),
    "sgd": ("fused.sgd.FusedSGD", {}),
    "lion": ("fused.lion.FusedLion", {}),
}

# what each name below is read from, imported at its first use
_LAZY = {"FusedAdagrad": "fused.adagrad", "FusedAdam": "fused.adam", "FusedLAMB": "fused.lamb",
         "FusedLion": "fused.lion", "FusedSGD": "fused.sgd", "build_lock": "fused._ext",
         "import_library": "fused._ext", "load_checkpoint": "fused.checkpoint"}


def class_of(path: str):
    """The class at a CLASSES path (importing its module, and torch)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def __getattr__(name: str):
    if name == "OPTIMIZERS":
        value = {opt: (class_of(path), dict(flags)) for opt, (path, flags) in CLASSES.items()}
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'fused' has no attribute {name!r}")
    globals()[name] = value  # read once
    return value


__all__ = ["CLASSES", "CONVENTIONS", "OPTIMIZERS", "FusedAdagrad", "FusedAdam", "FusedLAMB", "FusedLion", "FusedSGD",
           "build_lock", "class_of", "convention_of", "import_library", "load_checkpoint"]
