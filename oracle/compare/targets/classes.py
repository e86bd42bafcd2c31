"""What the target list reads of the optimizer classes it wraps (torch.optim's, our fused ones): each
class's name, its constructor's parameters and the oracle options it declares.

Reading a class imports it, and torch with it (about a second of CPU). The CLI lists the targets to plan
a run and otherwise never needs torch, while each worker process imports torch first thing. So a
worker reads every class the list names (read_all of registry.class_paths) and sends that with its
"ready" message; the CLI takes it (learn) before it lists the targets. A process that has learned
nothing reads a class itself (info), so listing gives the same targets either way (tests/test_cli_without_torch.py). A target's
`make` imports its class when it builds an optimizer (lazy_make), which only a worker does.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from oracle._lazy import at_path


@dataclass(frozen=True)
class ClassInfo:
    name: str               # the class's __name__
    parameters: tuple       # its constructor's parameter names, in order
    options: tuple = ()     # the oracle options it declares (our fused classes' OPTIONS)


_KNOWN: dict[str, ClassInfo] = {}   # class path -> what was read of it, here or by a worker
_FACTS: dict[str, str] = {}         # "torch_version" as the worker that read the classes saw it


class_at = at_path  # the class at an import path such as torch.optim.AdamW (imports its module)


def read(path: str) -> ClassInfo:
    cls = class_at(path)
    return ClassInfo(cls.__name__, tuple(inspect.signature(cls).parameters), tuple(getattr(cls, "OPTIONS", ())))


def info(path: str) -> ClassInfo:
    """What the class at `path` is, learned from a worker or read here (once per process)."""
    known = _KNOWN.get(path)
    if known is None:
        known = _KNOWN[path] = read(path)
    return known


def torch_version() -> str:
    """torch.__version__, as the worker that read the classes saw it (else from torch here)."""
    if "torch_version" not in _FACTS:
        import torch
        _FACTS["torch_version"] = str(torch.__version__)
    return _FACTS["torch_version"]


def read_all(paths) -> dict:
    """In a process that has imported torch (a worker): {"classes": {path: ClassInfo}, "torch_version"}
    for these class paths (oracle.compare.registry.class_paths).
    A class that does not import is left out; a process listing the targets then tries it itself (the
    fused package's targets say why it is unusable)."""
    import torch
    out = {}
    for path in paths:
        try:
            out[path] = info(path)
        except Exception:  # noqa: BLE001 - reported where the targets are listed, by the same import
            continue
    # str(): torch.__version__ is torch's own str subclass, which would import torch where unpickled
    return {"classes": out, "torch_version": str(torch.__version__)}


def learn(facts: dict | None) -> None:
    """Take what a worker read (read_all)."""
    if facts:
        _KNOWN.update(facts.get("classes", {}))
        if facts.get("torch_version"):
            _FACTS["torch_version"] = facts["torch_version"]


def lazy_make(path: str, **flags):
    """A target's make: builds the optimizer of the class at `path` with these constructor flags."""
    def make(groups, defaults):
        return class_at(path)(groups, **{**defaults, **flags})
    return make


__all__ = ["ClassInfo", "class_at", "info", "lazy_make", "learn", "read", "read_all", "torch_version"]
