"""Every named convention preset, by library: the finite set of conventions
real implementations are known to follow (what inference chooses among, and
what a report can name). Each preset is defined where its evidence is: the
specification's own presets in oracle/<optimizer>.py, a library's in its
target module here.

A preset names a library that follows it. An oracle option that no current
library uses (SGD's dampened first step, mlx #440 before its fix; Lion's
copysign on its own, which only DeepSpeed's CPU Lion uses, with its per-param
counter) stays declarable but is not a preset: inference would otherwise
explain the very defect that option describes (the mutation gate, run with
--undeclared, checks that it does not).
"""
from __future__ import annotations

import functools


def catalog() -> dict[str, tuple[str, object]]:
    """preset name -> (oracle optimizer, convention): every spec's own presets (OptimizerSpec.presets),
    then those of the target modules of this package that declare PRESETS (a library's evidence
    lives there), in module order. An optimizer with no preset at all is represented by its reference
    form, "<name>.reference", so that inference always has a candidate."""
    return dict(_catalog())


@functools.lru_cache(maxsize=1)
def _catalog() -> tuple:
    import oracle
    out: dict = {}
    for spec in oracle.SPECS.values():
        for name, conv in spec.presets.items():
            _add(out, name, (spec.name, conv), f"oracle spec {spec.name!r}")
    for module in library_modules():
        for name, (optimizer, conv) in module.PRESETS.items():
            _add(out, name, (optimizer, conv), module.__name__)
    for spec in oracle.SPECS.values():
        if not any(opt == spec.name for opt, _ in out.values()):
            out[f"{spec.name}.reference"] = (spec.name, spec.reference)
    return tuple(out.items())


def _add(out: dict, name: str, entry: tuple, where: str) -> None:
    if name in out:
        raise RuntimeError(f"convention preset {name!r} is named twice (again in {where})")
    out[name] = entry


def library_modules() -> list:
    """The modules of this package that assign PRESETS (found from their source, then imported)."""
    import importlib
    import pkgutil

    from oracle.spec import assigns

    from .. import targets
    return [importlib.import_module(f"{targets.__name__}.{info.name}") for info in pkgutil.iter_modules(targets.__path__)
            if not info.ispkg and assigns(info, "PRESETS")]


def named(optimizer: str, convention) -> str | None:
    """The preset's name for a convention, if it is one."""
    return next((name for name, (opt, conv) in catalog().items() if opt == optimizer and conv == convention), None)


__all__ = ["catalog", "library_modules", "named"]
