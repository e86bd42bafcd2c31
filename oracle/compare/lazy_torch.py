"""torch for the modules that the CLI imports and only the workers run.

The CLI lists targets and scenarios and plans a run; the case runs, the scenarios' steps and the
readback run in worker processes, which import torch first thing. Importing torch in the CLI as well
cost about a second of CPU on a 2-core machine, while the workers' own imports were competing for
the same cores. So those modules name `torch` through a stand-in (`from ..lazy_torch import torch`)
that imports it the first time an attribute is read, and a worker, once it has imported torch and the
engine, puts the real module in the stand-in's place (bind): a read through the stand-in costs about
0.6 us, a module attribute 0.05.

Module-level uses of torch (a class deriving from torch.nn.Module, a decorator applied at definition
time) would import it at once: they live in modules the CLI does not import (scenarios.torch_modules),
or use `no_grad` below.
"""
from __future__ import annotations

import functools
import importlib
import sys


class LazyModule:
    """Stands for the module `name` until an attribute is read; then reads it from the module."""

    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        module = sys.modules.get(self._name)
        if module is None:
            module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<stand-in for module {self._name!r}>"


torch = LazyModule("torch")


def no_grad(fn):
    """`@torch.no_grad()` for a method defined at import time: torch is imported at the first call."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)
    return run


def bind(prefix: str = "oracle.") -> int:
    """In a process that has imported torch (a worker): replace every module-level stand-in in the
    modules under `prefix` by its module; returns how many names were replaced. A module imported
    later keeps its stand-in, which works the same, only slower."""
    replaced = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith(prefix) or module is None:
            continue
        namespace = vars(module)
        for key, value in list(namespace.items()):
            if isinstance(value, LazyModule):
                namespace[key] = importlib.import_module(value._name)
                replaced += 1
    return replaced


__all__ = ["LazyModule", "bind", "no_grad", "torch"]
