"""Targets: the implementations under test.

base        the Target record and the helpers every library module uses
registry    every target by name (builtin_targets, every_target, find, select)
torch_optim torch.optim's forloop / foreach / fused paths, from the records
fused       our own kernels (fused.OPTIMIZERS)
deepspeed   DeepSpeed's CPU ops and engine wrappers
extra       bitsandbytes, torchao
gpu         CUDA-only libraries (apex, TransformerEngine, DeepSpeed CUDA ops)
user        a user's optimizer (--impl)
conventions every named convention preset, by library
"""
from .base import Target, with_counter
from .registry import builtin_targets, every_target, find, select
from .torch_optim import torch_targets
from .user import load_impl, probe_import

__all__ = ["Target", "builtin_targets", "every_target", "find", "load_impl", "probe_import", "select", "torch_targets",
           "with_counter"]
