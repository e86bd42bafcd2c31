"""Fused multi-tensor optimizers (C++ on CPU, CUDA on GPU) whose per-element
math is written once (csrc/optim_math.h) and verified against the float64
oracle. The conventions they implement are `CONVENTIONS`; `OPTIMIZERS` maps
each oracle optimizer name to the class and constructor flags that implement it,
`CLASSES` the same with the class's import path.

The optimizer classes (and with them torch) are imported when first named:
`CONVENTIONS` and `CLASSES` are plain data, which the comparison engine's CLI
reads to list our targets without importing torch (oracle.compare.lazy_torch).
"""
from oracle._lazy import at_path, from_module, on_first_use

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
class_of = at_path  # the class at a CLASSES path (importing its module, and torch)


def _optimizers() -> dict:
    return {opt: (class_of(path), dict(flags)) for opt, (path, flags) in CLASSES.items()}


# what each name below is read from, imported at its first use (PEP 562)
__getattr__ = on_first_use(globals(), "fused", {
    "OPTIMIZERS": _optimizers,
    **{name: from_module(f"fused.{module}", name) for name, module in (
        ("FusedAdagrad", "adagrad"), ("FusedAdam", "adam"), ("FusedLAMB", "lamb"), ("FusedLion", "lion"),
        ("FusedSGD", "sgd"), ("build_lock", "_ext"), ("import_library", "_ext"), ("load_checkpoint", "checkpoint"))}})


__all__ = ["CLASSES", "CONVENTIONS", "OPTIMIZERS", "FusedAdagrad", "FusedAdam", "FusedLAMB", "FusedLion", "FusedSGD",
           "build_lock", "class_of", "convention_of", "import_library", "load_checkpoint"]
