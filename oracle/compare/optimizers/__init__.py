"""One comparison record per optimizer: how the engine exercises it.

The specification's record (oracle.spec.OptimizerSpec) says what an optimizer
computes; this one says how to test it: the hyperparameter configs, which
(config, layout, regime) triples make up its case matrix, the hyperparameters
scenarios use, the fp16 input policy, and torch's class for it if torch has
one. Each module here defines RECORDS; `records()` collects them, so the CLI's
choices, the case matrix and the torch targets all derive from these records
and no optimizer name is spelled in engine code.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Fp16Policy:
    """Inputs an fp16 case needs to stay meaningful.

    fp16 holds v = (1-b2)*g^2 only for |g| >~ 0.25 (min normal 6e-5): below
    that a path storing v in fp16 divides by an underflowed v (torch's own
    tests force eps = 0.1 for fp16), so fp16 cases use unit-scale grads, and
    "tiny" means |g| ~ eps at that scale. eps must be an fp16 normal for paths
    adding it in fp16 (1e-8 rounds to 0 there and m/0 gives inf): fp16 cases
    raise eps to at least min_eps where the optimizer has an eps.
    """

    grad_scale: float = 1.0
    min_eps: float = 1e-4
    tiny: dict = field(default_factory=lambda: {"grad_scale": 0.3, "eps": 0.3})


@dataclass(frozen=True)
class CompareRecord:
    """optimizer:   the oracle.spec name.
    configs:        config name -> hyperparameters (all groups); the options a
                    config needs are derived: its keys that the spec lists as
                    options, set to a non-default value.
    plan:           (config, layout, regime) triples; together they cover
                    every config, layout and regime, each regime paired with
                    the config whose convention it exposes.
    scenario_hparams: the base hyperparameters scenarios run with.
    torch_class:    "torch.optim.Name" when torch has this optimizer: it then
                    gets torch's forloop, foreach and fused targets.
    torch_fused_compute: the compute precision torch's fused path is judged
                    by ("float32" = fp32 math rounded on store), with a reason
                    next to it wherever it is not.
    torch_fused_no_dtensor: why torch's fused path cannot take DTensor params
                    (FSDP2's), "" when it can (Target.no_dtensor).
    extra_targets:  a function returning further targets this optimizer alone
                    brings (a library op with no other home).
    """

    optimizer: str
    configs: dict
    plan: tuple
    scenario_hparams: dict
    fp16: Fp16Policy = Fp16Policy()
    torch_class: str | None = None
    torch_fused_compute: str = "float32"
    torch_fused_no_dtensor: str = ""
    extra_targets: Callable[[], list] | None = None


def records() -> dict[str, CompareRecord]:
    """Every comparison record, by optimizer name, in the spec registry's order."""
    return dict(_records())


@functools.lru_cache(maxsize=1)
def _records() -> tuple:
    """Found once per process: a case reads its record at every step, and listing this package's
    modules each time cost 0.27 ms a call (5% of an inference)."""
    import oracle
    found: dict[str, CompareRecord] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for rec in getattr(module, "RECORDS", ()):
            if rec.optimizer not in oracle.SPECS:
                raise RuntimeError(f"comparison record for {rec.optimizer!r}, which oracle.spec does not define")
            found[rec.optimizer] = rec
    return tuple((name, found[name]) for name in oracle.SPECS if name in found)


def record(optimizer: str) -> CompareRecord:
    try:
        return records()[optimizer]
    except KeyError:
        raise ValueError(f"no comparison record for {optimizer!r}; known: {', '.join(records())}") from None


__all__ = ["CompareRecord", "Fp16Policy", "record", "records"]
