"""Float64 NumPy specification of Adam, AdamW, Adagrad and LAMB.

Plain NumPy; importing this package never imports torch. Each optimizer is a
module with a pure `step(params, grads, state, hparams, conv, scaling)`;
`conv` holds the conventions implementations legitimately differ on.
"""
from . import adagrad, adam, lamb, storage
from .common import GradScaling, OptState

# name -> (module, the convention the name means by default)
OPTIMIZERS = {
    "adam": (adam, adam.TORCH_ADAM),
    "adamw": (adam, adam.TORCH_ADAMW),
    "adagrad": (adagrad, adagrad.TORCH_ADAGRAD),
    "lamb": (lamb, lamb.APEX_LAMB),
}


def step(optimizer: str, params, grads, state, hparams, conv=None, scaling=None):
    """Dispatch by optimizer name: one step, returns (new params, new state)."""
    try:
        module, default = OPTIMIZERS[optimizer]
    except KeyError:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {sorted(OPTIMIZERS)}") from None
    return module.step(params, grads, state, hparams, default if conv is None else conv, scaling)


__all__ = ["OPTIMIZERS", "GradScaling", "OptState", "adagrad", "adam", "lamb", "step", "storage"]
