"""Our own kernels (the `fused` package): one target per entry of fused.CLASSES."""
from __future__ import annotations

from . import classes
from .base import Target, scaled_step_kwargs, unusable


# fused.base refuses DTensor params (its kernels read each param's own storage)
STORAGE_KERNEL = "its kernels read each param's own storage: DTensor params are refused (TypeError)"

def fused_targets() -> list[Target]:
    try:
        import fused
        table = {name: (path, classes.info(path), flags) for name, (path, flags) in fused.CLASSES.items()}
    except Exception as exc:  # noqa: BLE001 - any failure to load means "not available", with the reason
        import oracle
        reason = f"fused package unavailable: {type(exc).__name__}: {exc}"
        return [unusable(f"fused.{n}", n, reason) for n in oracle.SPECS]
    return [Target(name=f"fused.{name}", optimizer=name, convention=fused.CONVENTIONS[name],
                   make=classes.lazy_make(path, **flags), masters=True, compute="float32", state_dtype="float32",
                   devices=("cpu", "cuda"), options=frozenset(cls.options),
                   scaling=scaled_step_kwargs, no_dtensor=STORAGE_KERNEL,
                   notes=f"our fused {cls.name}({', '.join(f'{k}={v}' for k, v in flags.items())})")
            for name, (path, cls, flags) in table.items()]


__all__ = ["fused_targets"]
