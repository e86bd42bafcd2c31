"""A catalog of deliberately broken optimizers, each reproducing one defect
that shipped in a widely used library (oracle.mutants.catalog), and the correct
bases they break (oracle.mutants.base, the controls). `python -m oracle.mutants`
runs the suite against all of them (oracle.mutants.killmatrix); docs/mutants.md.
"""
from __future__ import annotations

from dataclasses import replace

from .base import CONTROLS as _FIRST_CONTROLS


def controls() -> list:
    """Every correct base: base.py's and each optimizer module's (oracle.mutants.optimizers)."""
    from .optimizers import collected
    return [*_FIRST_CONTROLS, *collected("CONTROLS")]


def mutants() -> list:
    """Every hand-written mutant: catalog.py's and each optimizer module's."""
    from .catalog import MUTANTS
    from .optimizers import collected
    return [*MUTANTS, *collected("MUTANTS")]


def scaled_step(opt, inv_scale, found_inf):
    """The harness's grad-scaling hook for classes declaring ORACLE_SCALING."""
    opt.step(inv_scale=inv_scale, found_inf=found_inf)


def target_for(cls):
    """A harness Target for a catalog or base class, through the same entry a
    user's optimizer takes (oracle.compare.targets.load_impl), plus the two attributes
    load_impl does not read yet: ORACLE_STATE_DTYPE and ORACLE_SCALING."""
    from oracle.compare.targets import load_impl
    t = load_impl(f"{cls.__module__}:{cls.__name__}")
    return replace(t, state_dtype=getattr(cls, "ORACLE_STATE_DTYPE", "param"),
                   scaling=scaled_step if getattr(cls, "ORACLE_SCALING", False) else None)


__all__ = ["controls", "mutants", "scaled_step", "target_for"]
