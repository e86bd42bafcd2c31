"""Outside optimizers judged without declarations: pytorch-optimizer's Lamb, Lion and AdamW.

These targets declare no convention: each is fingerprinted first (oracle.compare.infer,
Target.infer), exactly as a user's undeclared `--impl` is, and judged by what inference finds;
the report prints the inferred convention. They are how the suite shows that it judges an outside
optimizer fairly, and what it finds in a popular collection.

    pip install --no-deps 'pytorch-optimizer>=4.1,<4.2'    # --no-deps: it must not replace torch

pytorch-optimizer 4.1.0, read from its sources (optimizer/lamb.py, optimizer/lion.py):
  Lamb    group['step'] int; m, v in the param dtype; decay p *= 1 - lr*wd (weight_decouple) after the
          moments; u = m/(sqrt(v) + eps); step size lr/bc1 (adam_debias off; v never debiased);
          r = min(||p||, 10)/(||u|| + eps), 1 when either norm is 0; pre_norm (global grad scaling)
          off by default, so max_grad_norm is unused; rectify off.
  Lion    group['step'] int; the reference sign update with decoupled decay.
  AdamW   pytorch_optimizer.AdamW is torch.optim.AdamW itself (re-exported), kept as a control:
          inference must find torch's own convention for it.
The AdamW-family optimizers with their own update (AdamP, StableAdamW, AdamS, ...) are other
algorithms, which the oracle does not specify: not targets.
"""
from __future__ import annotations

import functools
import importlib.util

from .base import Target
from .extra import _version, make_factory

INSTALL = "pip install --no-deps 'pytorch-optimizer>=4.1,<4.2'"


@functools.lru_cache(maxsize=None)
def unavailable() -> str | None:
    if importlib.util.find_spec("pytorch_optimizer") is None:
        return f"pytorch-optimizer is not installed ({INSTALL})"
    try:
        import pytorch_optimizer  # noqa: F401 - importing is the check
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable here"
        return f"pytorch-optimizer failed to import: {type(exc).__name__}: {exc}"
    return None


def _requires(device: str) -> str | None:
    return unavailable()


# (target name, oracle optimizer, class, hyperparameters the class takes)
OPTIMIZERS = (
    ("pytorch_optimizer.lamb", "lamb", "pytorch_optimizer.Lamb",
     {"lr", "betas", "eps", "weight_decay", "grad_averaging", "max_grad_norm", "maximize"}),
    ("pytorch_optimizer.lion", "lion", "pytorch_optimizer.Lion", {"lr", "betas", "weight_decay", "maximize"}),
    ("pytorch_optimizer.adamw", "adamw", "pytorch_optimizer.AdamW",
     {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"}),
)


def outside_targets() -> list[Target]:
    """Imports nothing: each target skips, saying why, where pytorch-optimizer is missing."""
    import oracle
    version = _version("pytorch-optimizer")
    out = []
    for name, optimizer, cls, keys in OPTIMIZERS:
        spec = oracle.SPECS[optimizer]
        out.append(Target(
            name=name, optimizer=optimizer, convention=spec.convention, infer=True,
            make=make_factory(cls, keys, f"pytorch-optimizer {cls}", spec.defaults),
            devices=("cpu", "cuda"), options=frozenset(o for o in spec.options if o in keys),
            requires=_requires, in_default=False,
            notes=f"pytorch-optimizer {version} {cls.rpartition('.')[2]}: conventions inferred, not declared"))
    return out


__all__ = ["INSTALL", "OPTIMIZERS", "outside_targets", "unavailable"]
