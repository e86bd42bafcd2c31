"""Targets: the implementations under test.

base        the Target record and the helpers every library module uses
torch_optim torch.optim's forloop / foreach / fused paths, from the records
compiled    torch.compile'd optimizer steps
fused       our own kernels (fused.OPTIMIZERS)
deepspeed   DeepSpeed's CPU ops and engine wrappers
bitsandbytes_torchao  bitsandbytes' 32-bit optimizers and torchao's _AdamW (cheap CPU third parties)
undeclared  outside optimizers judged by inferred conventions (pytorch-optimizer, torch-optimizer, lion-pytorch)
gpu         CUDA-only libraries (apex, TransformerEngine, DeepSpeed CUDA ops)
user_impl   a user's optimizer (--impl)
declare     a target's conventions as one named record, and the class attributes that declare it
conventions every named convention preset, by library
lowbit      quantized-state optimizers (bitsandbytes 8-bit, torchao low-bit)
master_weights  a minimal, correct FP32-master mixed-precision wrapper

The registry of every target by name is oracle.compare.registry (above
these modules and the optimizers' comparison records).
"""
__all__ = ["Target", "load_impl", "probe_import", "with_counter"]

_HOMES = {"Target": "base", "with_counter": "base", "load_impl": "user_impl", "probe_import": "user_impl"}


def __getattr__(name: str):
    """The names above, imported on first use: they import torch (a second), and the CLI reads what it
    needs of .declare (torch-free) before it starts its first worker, whose imports should not wait."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
