"""A user's optimizer as a target: `--impl package.module:Name`.

Which optimizer it implements comes from `--optimizer` or the class attribute
ORACLE_OPTIMIZER, never from the class name (NAdamW is not AdamW, AdamP is not
Adam). Its conventions default to the spec's for that optimizer; class
attributes declare others: ORACLE_CONVENTION, ORACLE_COMPUTE ("float32" or
"storage"), ORACLE_MASTERS, ORACLE_STATE_DTYPE, ORACLE_DTYPES, ORACLE_DEVICES,
ORACLE_OPTIONS and ORACLE_SCALING (step() takes inv_scale= and found_inf=).
"""
from __future__ import annotations

import importlib
import inspect

import oracle

from .base import Target, scaled_step_kwargs


def resolve(spec: str):
    """The object named by 'package.module:Name'; ValueError saying why not."""
    if ":" not in spec:
        raise ValueError(f"--impl expects 'package.module:Name', got {spec!r}")
    mod_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--impl {spec}: cannot import: {exc}") from exc


def which_optimizer(spec: str, obj, optimizer: str | None) -> str:
    declared = getattr(obj, "ORACLE_OPTIMIZER", None)
    if declared is not None and optimizer is not None and declared != optimizer:
        raise ValueError(f"--impl {spec} declares ORACLE_OPTIMIZER = {declared!r} but --optimizer {optimizer} "
                         f"was given; drop one")
    name = declared or optimizer
    if name is None:
        raise ValueError(f"--impl {spec}: which optimizer does it implement? Pass --optimizer NAME (one of "
                         f"{', '.join(oracle.SPECS)}) or set ORACLE_OPTIMIZER = 'NAME' on the class")
    if name not in oracle.SPECS:
        raise ValueError(f"--impl {spec}: unknown optimizer {name!r}; expected one of {', '.join(oracle.SPECS)}")
    return name


def load_impl(spec: str, optimizer: str | None = None, convention=None) -> Target:
    """Build a target from 'package.module:Name' (an Optimizer subclass taking
    torch's constructor signature, or a factory returning one).

    The counter location is detected from state_dict() after the first step
    (oracle.compare.readback); the remaining conventions are the spec's for
    that optimizer unless the class declares `ORACLE_CONVENTION`.
    """
    return from_object(resolve(spec), spec, optimizer, convention)


def from_object(obj, spec: str, optimizer: str | None = None, convention=None) -> Target:
    """load_impl for an object in hand (oracle.testing): `spec` names it ('module:Name' where it is
    importable, so the repro command works)."""
    opt = which_optimizer(spec, obj, optimizer)
    conv = convention or getattr(obj, "ORACLE_CONVENTION", None) or oracle.SPECS[opt].convention
    options = getattr(obj, "ORACLE_OPTIONS", None)
    if options is None:
        params = inspect.signature(obj).parameters if callable(obj) else {}
        options = {o for o in oracle.SPECS[opt].options if o in params}
    return Target(name=f"impl:{spec}", optimizer=opt, make=lambda groups, defaults: obj(groups, **defaults),
                  convention=conv, devices=tuple(getattr(obj, "ORACLE_DEVICES", ("cpu", "cuda"))),
                  dtypes=tuple(getattr(obj, "ORACLE_DTYPES", ("float32", "bfloat16", "float16"))),
                  compute=getattr(obj, "ORACLE_COMPUTE", "float32"),
                  masters=getattr(obj, "ORACLE_MASTERS", False), options=frozenset(options),
                  state_dtype=getattr(obj, "ORACLE_STATE_DTYPE", "param"),
                  scaling=scaled_step_kwargs if getattr(obj, "ORACLE_SCALING", False) else None,
                  notes=f"user optimizer {spec}")


__all__ = ["from_object", "load_impl", "resolve", "which_optimizer"]
