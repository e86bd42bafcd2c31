"""Fused multi-tensor optimizers (C++ on CPU, CUDA on GPU) whose per-element
math is written once (csrc/optim_math.h) and verified against the float64
oracle. The conventions they implement are `CONVENTIONS`.
"""
from .adagrad import FusedAdagrad
from .adam import FusedAdam
from .checkpoint import load_checkpoint
from .conventions import CONVENTIONS, convention_of
from .lamb import FusedLAMB

__all__ = ["CONVENTIONS", "FusedAdagrad", "FusedAdam", "FusedLAMB", "convention_of", "load_checkpoint"]
