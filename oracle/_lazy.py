"""Package attributes read on first use (PEP 562): `oracle` and `fused` name what they export without
importing it, so that importing the package stays cheap (no NumPy, no torch) for a process that only
needs part of it (the comparison CLI, which starts its workers first thing)."""
from __future__ import annotations

import importlib


def at_path(path: str):
    """The attribute at an import path such as torch.optim.AdamW (importing its module)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def from_module(module: str, name: str | None = None):
    """What `name` of `module` is (the module itself for None), read when first asked for."""
    def read():
        loaded = importlib.import_module(module)
        return loaded if name is None else getattr(loaded, name)
    return read


def on_first_use(namespace: dict, package: str, readers: dict):
    """A module-level __getattr__ for `package`: the first read of a name in `readers` calls its reader
    and keeps the value in the package's namespace (later reads do not reach __getattr__)."""
    def __getattr__(name: str):
        read = readers.get(name)
        if read is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = read()
        return value
    return __getattr__
