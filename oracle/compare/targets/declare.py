"""A target's conventions as one named record (a catalog preset plus the axes implementations vary
independently), how a target is judged as following one, and the class attributes that declare it.

Convention inference (oracle.compare.inference.infer) produces these; user targets (oracle.compare.targets.user_impl)
apply them, in the CLI's process and, through the environment, in its worker processes.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, fields, replace

@dataclass(frozen=True)
class Candidate:
    """One named convention: a catalog preset (or a form of the reference, "reference+option=value")
    with the axes real implementations vary independently. `explained` is False for the nearest
    convention of a target that no candidate explains, with the probes that separate it."""

    preset: str
    convention: object
    compute: str = "float32"
    state_dtype: str = "param"
    masters: bool = False
    explained: bool = True
    separating: str = ""
    # (implementation key, canonical name) pairs found by value (oracle.compare.checking.statenames)
    state_names: tuple = ()

    def label(self) -> str:
        parts = [self.preset, f"counter={self.convention.counter}", f"compute={self.compute}",
                 f"state_dtype={self.state_dtype}"]
        if self.masters:
            parts.append("masters")
        if getattr(self.convention, "counter_format", "exact") != "exact":
            parts.append(f"counter_format={self.convention.counter_format}")
        return " ".join(parts)

    def to_json(self) -> dict:
        return {"preset": self.preset, "counter": self.convention.counter,
                "counter_format": getattr(self.convention, "counter_format", "exact"), "compute": self.compute,
                "state_dtype": self.state_dtype, "masters": self.masters, "explained": self.explained,
                "separating": self.separating, "convention_type": type(self.convention).__name__,
                "state_names": [list(pair) for pair in self.state_names],
                "options": {f.name: _plain(getattr(self.convention, f.name)) for f in fields(self.convention)}}

    @classmethod
    def from_json(cls, d: dict) -> "Candidate":
        conv = convention_from(d)
        return cls(d["preset"], conv, d["compute"], d["state_dtype"], d["masters"], d.get("explained", True),
                   d.get("separating", ""), tuple(tuple(pair) for pair in d.get("state_names", ())))


def _plain(value):
    """An option's value as strict JSON holds it (report.json has no Infinity)."""
    return "inf" if value == math.inf else value


def convention_from(d: dict):
    """The convention a Candidate's JSON records: every option's value, on its convention type (a
    preset's name alone would not do: inference also finds forms that are no preset)."""
    import oracle
    types = {type(s.reference).__name__: type(s.reference) for s in oracle.SPECS.values()}
    options = {k: tuple(v) if isinstance(v, list) else math.inf if v == "inf" else v for k, v in d["options"].items()}
    return types[d["convention_type"]](**options)


# What judging reads of a target that a declaration (or inference) sets: a Candidate's fields of these names.
JUDGED = ("convention", "compute", "state_dtype", "masters")


def apply(target, cand: Candidate):
    """The target judged as following `cand` (and reading its state under the names found for it)."""
    names = {"state_names": cand.state_names} if cand.state_names else {}
    return replace(target, **{name: getattr(cand, name) for name in JUDGED}, **names)


def declaration(optimizer: str, cand: Candidate) -> str:
    """The class attributes that declare `cand`, ready to paste into the optimizer's class body."""
    conv = cand.convention
    lines = [f"ORACLE_OPTIMIZER = {optimizer!r}",
             f"ORACLE_CONVENTION = {type(conv).__module__}.{conv!r}  # preset {cand.preset}",
             f"ORACLE_COMPUTE = {cand.compute!r}", f"ORACLE_STATE_DTYPE = {cand.state_dtype!r}",
             f"ORACLE_MASTERS = {cand.masters!r}"]
    if cand.state_names:
        lines.append(f"ORACLE_STATE_NAMES = {dict(cand.state_names)!r}")
    return "\n".join(lines)


ENV = "ORACLE_INFERRED"


def export(chosen: dict) -> None:
    """spec -> Candidate (as JSON), for worker processes: they rebuild the same target."""
    os.environ[ENV] = json.dumps(chosen)


def imported(name: str) -> Candidate | None:
    """The candidate this run chose for the target named `name`, if any."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    d = json.loads(raw).get(name)
    return Candidate.from_json(d) if d else None


def with_inferred(target):
    """The target as this run judges it: with the convention inferred for it, where one was (and,
    where none explains it, the nearest one, its rows marked unexplained: oracle.compare.checking.deviation)."""
    cand = imported(target.name) if target.infer else None
    return target if cand is None else judged_as(target, cand)


def judged_as(target, cand: Candidate):
    """`apply`, and a nearest convention (not explained) marks the target's failing rows unexplained."""
    judged = apply(target, cand)
    return judged if cand.explained else replace(judged, unexplained=cand.label())


__all__ = ["with_inferred", "judged_as", "ENV", "JUDGED", "Candidate", "apply", "declaration", "export", "imported"]
