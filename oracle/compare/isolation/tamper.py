"""What a target's code may not change in the process that judges it.

A target runs in the same process as the oracle and the checks (a worker, or the CLI under
--no-isolate). A target that replaces `oracle.adam.update` or `numpy.abs`, or sets torch's default
dtype, in its constructor or step would otherwise change the verdict of its own rows (a wrong optimizer
passing) and of every later job in that process (correct ones failing), so a verdict would depend on
--jobs. This module takes a snapshot before any target code runs:

- every module-level function and class of every loaded `oracle` module, and of numpy, numpy.linalg,
  numpy.random and math (by identity: a replaced attribute is a different object);
- the process-wide numeric settings the oracle and the checks read: torch's default dtype, grad mode,
  deterministic-algorithms flag, NumPy's floating-point error handling.

`settle(snapshot)` before a job puts the settings back (so one job's settings never reach the next);
`changed(snapshot)` after it names whatever differs. A job after which anything changed is not judged:
its row is an error naming the change, the originals are put back, and a worker is retired (a fresh
one runs the rest), so the rows of other targets are judged exactly as under any other --jobs.
"""
from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass, field

import numpy as np

WATCHED_MODULES = ("numpy", "numpy.linalg", "numpy.random", "math")


def _watched() -> list[tuple[str, types.ModuleType]]:
    mods = [(n, sys.modules[n]) for n in WATCHED_MODULES if n in sys.modules]
    mods += [(n, m) for n, m in sorted(sys.modules.items())
             if m is not None and (n == "oracle" or n.startswith("oracle."))]
    return mods


def _members(module) -> dict:
    out = {}
    for name, value in list(vars(module).items()):
        if name.startswith("__"):
            continue
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type, np.ufunc)):
            out[name] = value
    return out


def _settings() -> dict:
    import torch
    return {"torch default dtype": torch.get_default_dtype(), "torch grad mode": torch.is_grad_enabled(),
            "torch deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
            "numpy error handling": tuple(sorted(np.geterr().items()))}


@dataclass
class Snapshot:
    members: dict = field(default_factory=dict)    # module name -> {attribute: object}
    settings: dict = field(default_factory=dict)


def snapshot() -> Snapshot:
    import oracle
    # the specification is read on first use (oracle.__getattr__): load every optimizer module now, or
    # one imported later (by the target itself) would escape the snapshot and could be replaced unseen
    oracle.SPECS  # noqa: B018 - the read loads the modules
    return Snapshot({name: _members(m) for name, m in _watched()}, _settings())


def changed(snap: Snapshot) -> list[str]:
    """What differs from the snapshot: "oracle.adam.update replaced", "torch default dtype
    torch.float32 -> torch.float64", ... (modules imported since are taken as they are)."""
    out = []
    for name, members in snap.members.items():
        module = sys.modules.get(name)
        if module is None:
            out.append(f"module {name} removed from sys.modules")
            continue
        now = vars(module)
        for attr, original in members.items():
            if now.get(attr) is not original:
                out.append(f"{name}.{attr} replaced")
    now = _settings()
    out += [f"{k} {v} -> {now[k]}" for k, v in snap.settings.items() if now[k] != v]
    return out


def settle(snap: Snapshot) -> None:
    """Put back every watched attribute and setting the snapshot holds."""
    import torch
    for name, members in snap.members.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        for attr, original in members.items():
            if vars(module).get(attr) is not original:
                setattr(module, attr, original)
    s = snap.settings
    torch.set_default_dtype(s["torch default dtype"])
    torch.set_grad_enabled(s["torch grad mode"])
    if torch.are_deterministic_algorithms_enabled() != s["torch deterministic algorithms"]:
        # only when changed: its first call imports half of torch's compiler stack (1.6 s per process)
        torch.use_deterministic_algorithms(s["torch deterministic algorithms"])
    np.seterr(**dict(s["numpy error handling"]))


def reason(changes: list[str]) -> str:
    shown = "; ".join(changes[:4]) + (f"; +{len(changes) - 4} more" if len(changes) > 4 else "")
    return (f"tampered: the target changed the process that judges it ({shown}); this row is not judged "
            "(a target may not replace the oracle's, NumPy's or math's functions or change torch's or NumPy's "
            "global numeric settings)")


__all__ = ["Snapshot", "changed", "reason", "settle", "snapshot"]
_ = math  # math is watched through sys.modules; imported so it is loaded before the snapshot
