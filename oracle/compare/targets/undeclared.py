"""Outside optimizers judged without declarations: pytorch-optimizer's Lamb, Lion and AdamW,
torch-optimizer's Lamb, lion-pytorch's Lion.

These targets declare no convention: each is fingerprinted first (oracle.compare.inference.infer,
Target.infer), exactly as a user's undeclared `--impl` is, and judged by what inference finds;
the report prints the inferred convention. They are how the suite shows that it judges an outside
optimizer fairly, and what it finds in a popular collection.

    pip install --no-deps 'pytorch-optimizer>=4.1,<4.2'    # --no-deps: it must not replace torch
    pip install --no-deps torch-optimizer==0.3.0 pytorch-ranger==0.1.1 'lion-pytorch>=0.2.5,<0.3'

pytorch-optimizer 4.1.0, read from its sources (optimizer/lamb.py, optimizer/lion.py):
  Lamb    group['step'] int; m, v in the param dtype; decay p *= 1 - lr*wd (weight_decouple) after the
          moments; u = m/(sqrt(v) + eps); step size lr/bc1 (adam_debias off; v never debiased);
          r = min(||p||, 10)/(||u|| + eps), 1 when either norm is 0; pre_norm (global grad scaling)
          off by default, so max_grad_norm is unused; rectify off.
  Lion    group['step'] int; the reference sign update with decoupled decay.
  AdamW   pytorch_optimizer.AdamW is torch.optim.AdamW itself (re-exported), kept as a control:
          inference must find torch's own convention for it.
torch-optimizer 0.3.0 (torch_optimizer/lamb.py; its package imports pytorch-ranger):
  Lamb    per-param int step; u = m/(sqrt(v) + eps) + wd*p; r = min(||p||, 10)/||u||, 1 when either
          norm is 0; no bias correction (debias=False); refuses lr = 0.
lion-pytorch 0.2 (lion_pytorch/lion_pytorch.py): the reference Lion; refuses lr = 0.
What each is inferred as, and why that is right, is checked against float64 transcriptions of these
rules in tests/test_outside_libraries.py.
The AdamW-family optimizers with their own update (AdamP, StableAdamW, AdamS, ...) are other
algorithms, which the oracle does not specify: not targets.
"""
from __future__ import annotations

import functools
import importlib.util

from .base import Target
from .bitsandbytes_torchao import _version, make_factory

INSTALL = "pip install --no-deps 'pytorch-optimizer>=4.1,<4.2'"
LIBRARIES = {  # import name -> (distribution, how to install it without touching torch)
    "pytorch_optimizer": ("pytorch-optimizer", INSTALL),
    "torch_optimizer": ("torch-optimizer", "pip install --no-deps torch-optimizer==0.3.0 pytorch-ranger==0.1.1"),
    "lion_pytorch": ("lion-pytorch", "pip install --no-deps 'lion-pytorch>=0.2.5,<0.3'"),
}


@functools.lru_cache(maxsize=None)
def unavailable(module: str = "pytorch_optimizer") -> str | None:
    dist, install = LIBRARIES[module]
    if importlib.util.find_spec(module) is None:
        return f"{dist} is not installed ({install})"
    try:
        importlib.import_module(module)  # importing is the check
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable here"
        return f"{dist} failed to import: {type(exc).__name__}: {exc}"
    return None


def _requires(device: str, module: str = "pytorch_optimizer") -> str | None:
    return unavailable(module)


# (target name, oracle optimizer, class, hyperparameters the class takes)
OPTIMIZERS = (
    ("pytorch_optimizer.lamb", "lamb", "pytorch_optimizer.Lamb",
     {"lr", "betas", "eps", "weight_decay", "grad_averaging", "max_grad_norm", "maximize"}),
    ("pytorch_optimizer.lion", "lion", "pytorch_optimizer.Lion", {"lr", "betas", "weight_decay", "maximize"}),
    ("pytorch_optimizer.adamw", "adamw", "pytorch_optimizer.AdamW",
     {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"}),
    ("torch_optimizer.lamb", "lamb", "torch_optimizer.Lamb", {"lr", "betas", "eps", "weight_decay"}),
    ("lion_pytorch.lion", "lion", "lion_pytorch.Lion", {"lr", "betas", "weight_decay"}),
)


def _taking(make, absent: frozenset):
    """make(groups, defaults) without the hyperparameters the class has no parameter for: a case that
    sets one to other than its default is a skip (Target.absent), one at its default is not passed."""
    def drop(d):
        return {k: v for k, v in dict(d).items() if k not in absent}
    return lambda groups, defaults: make([drop(g) for g in groups], drop(defaults))


def outside_targets() -> list[Target]:
    """Imports nothing: each target skips, saying why, where its library is missing."""
    import oracle
    out = []
    for name, optimizer, cls, keys in OPTIMIZERS:
        module = cls.partition(".")[0]
        dist = LIBRARIES[module][0]
        version = _version(dist)
        spec = oracle.SPECS[optimizer]
        absent = frozenset(k for k in spec.defaults if k not in keys)
        out.append(Target(
            name=name, optimizer=optimizer, convention=spec.convention, infer=True,
            make=_taking(make_factory(cls, keys, f"{dist} {cls}", spec.defaults), absent),
            absent=absent,
            devices=("cpu", "cuda"), options=frozenset(o for o in spec.options if o in keys),
            requires=functools.partial(_requires, module=module), in_default=False,
            notes=f"{dist} {version} {cls.rpartition('.')[2]}: conventions inferred, not declared"))
    return out


__all__ = ["INSTALL", "LIBRARIES", "OPTIMIZERS", "outside_targets", "unavailable"]
