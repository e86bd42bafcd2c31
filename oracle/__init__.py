"""Float64 NumPy specification of the optimizers (Adam, AdamW, Adagrad, LAMB, ...).

Plain NumPy; importing this package never imports torch. Each optimizer is a
module with a pure `step(params, grads, state, hparams, conv, scaling)` and a
`SPECS` record (oracle.spec); `conv` holds the conventions implementations
legitimately differ on. `SPECS` below is every optimizer, found from those
records, never listed by hand.
"""
from . import storage
from .common import GradScaling, OptState, on_components
from .spec import OptimizerSpec, registry

SPECS: dict[str, OptimizerSpec] = registry()


def spec(optimizer: str) -> OptimizerSpec:
    """The record of one optimizer; ValueError naming the known ones."""
    try:
        return SPECS[optimizer]
    except KeyError:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {sorted(SPECS)}") from None


def step(optimizer: str, params, grads, state=None, hparams=None, conv=None, scaling=None):
    """One step of the named optimizer; returns (new params, new state).

    state=None starts from no state (before the first step); hparams=None
    uses the optimizer's defaults for every group. Complex params are taken where the spec declares
    a complex_form (oracle.common.on_components), refused otherwise.
    """
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
