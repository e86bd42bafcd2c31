"""Float64 NumPy specification of the optimizers (Adam, AdamW, Adagrad, LAMB, ...).

Plain NumPy; importing this package never imports torch. Each optimizer is a
module with a pure `step(params, grads, state, hparams, conv, scaling)` and a
`SPECS` record (oracle.spec); `conv` holds the conventions implementations
legitimately differ on. `oracle.SPECS` is every optimizer, found from those
records, never listed by hand.
"""
from ._lazy import from_module, on_first_use
from .spec import OptimizerSpec, registry

# Read on first use (PEP 562), not at import: `import oracle` is then a few milliseconds, without NumPy,
# so the comparison CLI starts its worker processes before it has loaded the specification.
# SPECS: dict[str, OptimizerSpec], every optimizer.
__getattr__ = on_first_use(globals(), "oracle", {
    "SPECS": registry, "storage": from_module("oracle.storage"),
    **{name: from_module("oracle.common", name) for name in ("GradScaling", "OptState", "on_components")}})


def spec(optimizer: str) -> OptimizerSpec:
    """The record of one optimizer; ValueError naming the known ones."""
    specs = globals().get("SPECS") or __getattr__("SPECS")
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
