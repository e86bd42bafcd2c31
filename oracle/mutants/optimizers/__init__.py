"""Each optimizer's own controls and mutants, one module per optimizer, found by themselves.

Adding an optimizer adds its module here (docs/adding-an-optimizer.md) and touches no list: a module
defines `CONTROLS` (correct bases, written on oracle.mutants.base's one step loop) and `MUTANTS`
(each a control with one defect that shipped somewhere, declaring PROVENANCE, DESCRIPTION and EXPECT
as oracle.mutants.catalog's do). The six optimizers that came first keep theirs in base.py and
catalog.py; `oracle.mutants.controls()` and `mutants()` return both.
"""
from __future__ import annotations

import importlib
import pkgutil


def collected(attr: str) -> list:
    """`attr` (CONTROLS or MUTANTS) of every module in this package, in module-name order."""
    out = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        out.extend(getattr(module, attr, ()))
    return out


__all__ = ["collected"]
