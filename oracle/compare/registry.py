"""Every target the engine knows, found by name: one place, used by the CLI,
the worker processes, the scenarios and the kill matrix alike. It sits above
both the targets (one module per library) and the optimizers' comparison
records, which may bring targets of their own.

Listing imports none of the third-party libraries: each library's targets
skip themselves, with the reason, when the library or the device is missing.
"""
from __future__ import annotations

import fnmatch

from .optimizers import records
from .targets.base import Target
from .targets.user_impl import load_impl, probe_import


def builtin_targets() -> list[Target]:
    """torch's paths and our fused kernels: always listed, usable on CPU."""
    from .targets.fused import fused_targets
    from .targets.torch_optim import torch_targets
    return torch_targets(records()) + fused_targets()


def every_target() -> list[Target]:
    """Built-in targets, third-party libraries', and those an optimizer's record brings."""
    from .targets.compiled import compiled_targets
    from .targets.deepspeed import deepspeed_targets
    from .targets.bitsandbytes_torchao import extra_targets
    from .targets.gpu import gpu_targets
    from .targets.lowbit import lowbit_targets
    from .targets.undeclared import outside_targets
    own = [t for rec in records().values() if rec.extra_targets for t in rec.extra_targets()]
    return (builtin_targets() + compiled_targets(records()) + deepspeed_targets() + extra_targets() + lowbit_targets()
            + gpu_targets() + outside_targets() + own)


def class_paths() -> list[str]:
    """Every optimizer class the target list reads (oracle.compare.targets.classes): torch's, named by
    the optimizers' records, and our fused ones."""
    import fused
    named = [rec.torch_class for rec in records().values() if rec.torch_class]
    return list(dict.fromkeys(named + [path for path, _ in fused.CLASSES.values()]))


def find(name: str, optimizer: str | None = None, listed: dict | None = None) -> Target:
    """The target with this name ('impl:module:Name' loads a user optimizer). listed: a caller's
    by_name(every_target()), kept where the list is the same at every call (a worker's jobs)."""
    from .targets.declare import with_inferred
    if name.startswith("impl:"):
        return load_impl(name[5:], optimizer=optimizer)
    target = (listed if listed is not None else by_name(every_target())).get(name)
    if target is None:
        raise LookupError(f"no target named {name!r}")
    return with_inferred(target)


def by_name(targets) -> dict:
    """{name: target}, the first target of a name where several share it (as find takes it)."""
    out: dict = {}
    for target in targets:
        out.setdefault(target.name, target)
    return out


def select(patterns: list[str], optimizers: list[str], explicit: bool) -> list[Target]:
    """Targets of these optimizers whose names match a pattern; a sweep that
    names no pattern (explicit=False) leaves out targets not in_default."""
    return [t for t in every_target() if t.optimizer in optimizers
            and any(fnmatch.fnmatch(t.name, p) for p in patterns) and (t.in_default or explicit)]




def torch_targets() -> list[Target]:
    """torch.optim's forloop / foreach / fused paths for every record naming a torch class."""
    from .targets.torch_optim import torch_targets as make
    return make(records())


__all__ = ["builtin_targets", "by_name", "class_paths", "every_target", "find", "load_impl", "probe_import", "select", "torch_targets"]
