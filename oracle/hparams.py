"""Hyperparameter validation, written once: the oracle's `validate` functions and the fused package's
constructors (fused.base, which first reads a 1-element tensor's number) check alike, from the roles
each spec declares (oracle.spec.Role), with one message form:

    group 1: lr=inf must be >= 0.0 and finite
    group 1: betas[0]=1.0 must be [0.0, 1.0)
    group 1: amsgrad='yes' must be True or False
"""
from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Mapping

import numpy as np

from .spec import RATES


def short(value, limit: int = 40) -> str:
    """repr(value), cut to `limit` characters (10**400 has 401 digits)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_real(value) -> bool:
    """A real number that is not a bool (Python or NumPy): lr=True is a mistake, not 1.0."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def as_float(value) -> float:
    """float(value), an int beyond float range as inf."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def check_range(group: int, name: str, value, low=0.0, high=None, high_open=False, low_open=False) -> None:
    """ValueError naming the group unless `value` is a finite real number in range (low None: any)."""
    if not is_real(value):
        raise ValueError(f"group {group}: {name}={short(value)} must be a real number ({type(value).__name__} given)")
    x = as_float(value)
    ok = math.isfinite(x) and (low is None or (x > low if low_open else x >= low))
    if ok and high is not None:
        ok = x < high if high_open else x <= high
    if not ok:
        if high is not None:
            bound = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        elif low is None:
            bound = "finite"
        else:
            bound = f"{'>' if low_open else '>='} {low} and finite"
        raise ValueError(f"group {group}: {name}={short(value)} must be {bound}")


def check_flag(group: int, name: str, value) -> None:
    """A switch: True or False (NumPy bools too). A string such as "False" would be truthy, and an int
    is most likely a misplaced number."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"group {group}: {name}={short(value)} must be True or False")


def check_tuple(group: int, name: str, value, roles: tuple, check=check_range) -> None:
    """A tuple-valued hyperparameter (betas): one value per role, each in its role's range."""
    try:
        ok = isinstance(value, (tuple, list, np.ndarray)) and len(tuple(value)) == len(roles)
    except TypeError:
        ok = False
    if not ok:
        symbols = ", ".join(r.symbol or f"{name}[{k}]" for k, r in enumerate(roles))
        kind = "a pair" if len(roles) == 2 else f"{len(roles)} values"
        raise ValueError(f"group {group}: {name} must be {kind} ({symbols}), got {value!r}")
    for k, (role, v) in enumerate(zip(roles, value)):
        if role.checked:  # checked=False: the optimizer's own validate holds it (Adafactor's eps1 may be None)
            check(group, f"{name}[{k}]", v, **bounds(role))


def bounds(role) -> dict:
    """check_range's bounds for a role: [0, 1) for a decay rate or weight, else [role.low, inf)."""
    if role.what in RATES:
        return {"low": 0.0, "high": 1.0, "high_open": True}
    return {"low": role.low}


def check_roles(group: int, hp: Mapping, roles: dict, defaults: dict | None = None, check=check_range,
                flags: bool = True) -> None:
    """Every hyperparameter of `hp` that has a role, held to it: a switch (a bool default in `defaults`)
    is True or False (when `flags`), a tuple one value per role, a number within its role's bounds.
    A role with checked=False is left to the optimizer's own validate (a bound set by another one)."""
    for name, role in roles.items():
        if name not in hp:
            continue
        if isinstance(role, tuple):
            check_tuple(group, name, hp[name], role, check)
        elif defaults is not None and isinstance(defaults.get(name), bool):
            if flags:
                check_flag(group, name, hp[name])
        elif role.checked:
            check(group, name, hp[name], **bounds(role))


def with_defaults(group: int, hp, defaults: dict) -> dict:
    """One group's hyperparameters over the optimizer's defaults. A key the optimizer does not have is
    refused (a typo such as `lrr` would otherwise silently run with the default lr), naming the group
    and the closest key."""
    if not isinstance(hp, Mapping):
        raise ValueError(f"group {group}: hyperparameters must be a dict, got {type(hp).__name__}")
    for key in hp:
        if key not in defaults:
            close = difflib.get_close_matches(str(key), [str(k) for k in defaults], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"group {group}: unknown hyperparameter {key!r}{hint} "
                             f"(this optimizer has {', '.join(sorted(defaults))})")
    return {**defaults, **hp}


def validated(hparams: list, defaults: dict, roles: dict, extra=None) -> list[dict]:
    """Each group's hyperparameters with defaults filled in and held to their roles; `extra(group, hp)`
    checks what relates several of them (SGD's nesterov needs momentum). ValueError naming the group.
    Remembered per (spec, hparams as written): a step of the oracle validates, and a
    checked run takes thousands of steps with the same few (each caller gets its own dicts)."""
    try:  # by repr: 1, 1.0 and True are equal keys but not equal hyperparameters (a flag must be a bool)
        key = (id(defaults), id(roles), id(extra), repr([sorted(hp.items()) for hp in hparams]))
    except (TypeError, AttributeError):  # not dicts, or keys that do not sort: not remembered
        return _validated(hparams, defaults, roles, extra)
    done = _VALIDATED.get(key)
    if done is None:
        done = _validated(hparams, defaults, roles, extra)
        if len(_VALIDATED) >= VALIDATED_KEPT:
            _VALIDATED.clear()
        _VALIDATED[key] = done
    return [dict(hp) for hp in done]


_VALIDATED: dict = {}
VALIDATED_KEPT = 4096


def _validated(hparams: list, defaults: dict, roles: dict, extra=None) -> list[dict]:
    out = []
    for g, hp in enumerate(hparams):
        hp = with_defaults(g, hp, defaults)
        check_roles(g, hp, roles, defaults)
        if extra is not None:
            extra(g, hp)
        out.append(hp)
    return out


__all__ = ["as_float", "bounds", "check_flag", "check_range", "check_roles", "check_tuple", "is_real", "short", "validated",
           "with_defaults"]
