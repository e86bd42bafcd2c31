"""Fused multi-tensor optimizers (C++ on CPU, CUDA on GPU) whose per-element
math is written once (csrc/optim_math.h) and verified against the float64
oracle. The conventions they implement are `CONVENTIONS`; `OPTIMIZERS` maps
each oracle optimizer name to the class and constructor flags that implement it.
"""
from .adagrad import FusedAdagrad
from ._ext import build_lock, import_library
from .adam import FusedAdam
from .checkpoint import load_checkpoint
from .conventions import CONVENTIONS, convention_of
from .lamb import FusedLAMB
from .lion import FusedLion
from .sgd import FusedSGD

OPTIMIZERS = {
    "adamw": (FusedAdam, {"adam_w_mode": True}),
    "adam": (FusedAdam, {"adam_w_mode": False}),
    "adagrad": (FusedAdagrad, {}),
    "lamb": (FusedLAMB, {}),
    "sgd": (FusedSGD, {}),
    "lion": (FusedLion, {}),
}

__all__ = ["CONVENTIONS", "OPTIMIZERS", "FusedAdagrad", "FusedAdam", "FusedLAMB", "FusedLion", "FusedSGD",
           "build_lock", "convention_of", "import_library", "load_checkpoint"]
