"""Our own kernels (the `fused` package): one target per entry of fused.OPTIMIZERS."""
from __future__ import annotations

from .base import Target, scaled_step_kwargs, torch_make, unusable


# fused.base refuses DTensor params (its kernels read each param's own storage)
STORAGE_KERNEL = "its kernels read each param's own storage: DTensor params are refused (TypeError)"

def fused_targets() -> list[Target]:
    try:
        import fused
        table = fused.OPTIMIZERS
    except Exception as exc:  # noqa: BLE001 - any failure to load means "not available", with the reason
        import oracle
        reason = f"fused package unavailable: {type(exc).__name__}: {exc}"
        return [unusable(f"fused.{n}", n, reason) for n in oracle.SPECS]
    return [Target(name=f"fused.{name}", optimizer=name, convention=fused.CONVENTIONS[name],
                   make=torch_make(cls, **flags), masters=True, compute="float32", state_dtype="float32",
                   devices=("cpu", "cuda"), options=frozenset(getattr(cls, "OPTIONS", ())),
                   scaling=scaled_step_kwargs, no_dtensor=STORAGE_KERNEL,
                   notes=f"our fused {cls.__name__}({', '.join(f'{k}={v}' for k, v in flags.items())})")
            for name, (cls, flags) in table.items()]


__all__ = ["fused_targets"]
