"""Float64 NumPy specification of the optimizers (Adam, AdamW, Adagrad, LAMB, ...).

Plain NumPy; importing this package never imports torch. Each optimizer is a
module with a pure `step(params, grads, state, hparams, conv, scaling)` and a
`SPECS` record (oracle.spec); `conv` holds the conventions implementations
legitimately differ on. `oracle.SPECS` is every optimizer, found from those
records, never listed by hand.
"""
import importlib

from .spec import OptimizerSpec, registry

# Read on first use (PEP 562), not at import: `import oracle` is then a few milliseconds, without NumPy,
# so the comparison CLI starts its worker processes before it has loaded the specification.
_LAZY = {"storage": "oracle.storage", "GradScaling": "oracle.common", "OptState": "oracle.common",
         "on_components": "oracle.common"}


def __getattr__(name: str):
    if name == "SPECS":  # every optimizer: SPECS: dict[str, OptimizerSpec]
        value = registry()
    elif name == "storage":
        value = importlib.import_module("oracle.storage")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'oracle' has no attribute {name!r}")
    globals()[name] = value  # read once
    return value


def spec(optimizer: str) -> OptimizerSpec:
    """The record of one optimizer; ValueError naming the known ones."""
    specs = __getattr__("SPECS") if "SPECS" not in globals() else globals()["SPECS"]
    try:
        return specs[optimizer]
    except KeyError:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {sorted(specs)}") from None


def step(optimizer: str, params, grads, state=None, hparams=None, conv=None, scaling=None):
    """One step of the named optimizer; returns (new params, new state).

    state=None starts from no state (before the first step); hparams=None
    uses the optimizer's defaults for every group. Complex params are taken where the spec declares
    a complex_form (oracle.common.on_components), refused otherwise.
    """
    from .common import OptState, on_components
    s = spec(optimizer)
    if state is None:
        state = OptState.empty(params)
    if hparams is None:
        hparams = [{} for _ in params]
    conv = s.convention if conv is None else conv
    if s.complex_form == "components":
        return on_components(s.step, params, grads, state, hparams, conv, scaling)
    return s.step(params, grads, state, hparams, conv, scaling)


__all__ = ["SPECS", "GradScaling", "OptState", "OptimizerSpec", "spec", "step", "storage"]
