"""Targets: the implementations under test.

base        the Target record and the helpers every library module uses
torch_optim torch.optim's forloop / foreach / fused paths, from the records
fused       our own kernels (fused.OPTIMIZERS)
deepspeed   DeepSpeed's CPU ops and engine wrappers
extra       bitsandbytes, torchao
gpu         CUDA-only libraries (apex, TransformerEngine, DeepSpeed CUDA ops)
user        a user's optimizer (--impl)
conventions every named convention preset, by library

The registry of every target by name is oracle.compare.registry (above
these modules and the optimizers' comparison records).
"""
from .base import Target, with_counter
from .user_impl import load_impl, probe_import

__all__ = ["Target", "load_impl", "probe_import", "with_counter"]
