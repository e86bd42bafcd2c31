"""One mutant per deviation the forms catalog names, derived from it, never listed.

oracle.forms classifies every value of every convention option of every optimizer; a value classified
DEVIATION is a library's behaviour that is not the named algorithm (bitsandbytes' Adam decaying like
AdamW, pytorch-optimizer's LAMB step size, DeepSpeed's copysign Lion, ...). For each one this module
builds an optimizer that commits exactly that deviation under the algorithm's name: its step is the
float64 oracle's, under the spec's reference form with that one option changed (plus what the form
`needs`), read from and rounded into the param's own storage each step; it declares nothing.

With inference on (`python -m oracle.mutants --undeclared`) each must be killed: inference may name
the deviation (the row's status is then "deviation", which fails) but no legitimate form may explain it.
A deviation the oracle cannot step (Adam's bias correction without a counter) is no update rule, so no
mutant: `UNSTEPPABLE` lists them with the oracle's own refusal.

The mutants are judged only with inference on: declared, each would declare the reference form and be
caught by lockstep, which tests nothing the catalog's hand-written mutants do not.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import replace

import numpy as np
import torch

from oracle.common import OptState, state_shape

UNSTEPPABLE: dict = {}   # class name -> why the oracle refuses to step that form


def _host(t):
    return t.detach().to("cpu", torch.float64).numpy().copy()


class OracleStepped(torch.optim.Optimizer):
    """An optimizer whose update is the oracle's under DEVIATION_CONVENTION; state in the param dtype,
    counters where the convention keeps them (a per-param `step`, or the group's `step`)."""

    ORACLE_OPTIMIZER = ""
    DEVIATION = ("", None)          # (option, value)
    DEVIATION_CONVENTION = None

    def __init__(self, params, **hyperparameters):
        import oracle
        spec = oracle.SPECS[self.ORACLE_OPTIMIZER]
        unknown = set(hyperparameters) - set(spec.defaults)
        if unknown:
            raise TypeError(f"unexpected hyperparameters {sorted(unknown)}")
        super().__init__(params, {**spec.defaults, **hyperparameters})

    def _spec(self):
        import oracle
        return oracle.SPECS[self.ORACLE_OPTIMIZER]

    def _host_state(self, p) -> dict:
        out = {}
        for key, value in self.state.get(p, {}).items():
            if key == "step":
                out[key] = int(value.item() if torch.is_tensor(value) else value)
            elif torch.is_tensor(value) and value.dim() == 0 and key not in self._spec().state_keys:
                out[key] = float(value.item())
            else:
                out[key] = _host(value) if torch.is_tensor(value) else value
        return out

    def _store(self, p, entry: dict) -> None:
        st = self.state[p]
        for key, value in entry.items():
            if key == "step":
                st[key] = torch.tensor(float(value), dtype=torch.float32)
            elif isinstance(value, (np.ndarray, np.generic)) and key in self._spec().state_keys + tuple(
                    self._spec().optional_state):
                st[key] = torch.from_numpy(np.array(value, dtype=np.float64)).to(p.device, p.dtype).reshape(state_shape(key, tuple(p.shape)))
            elif isinstance(value, (np.ndarray, np.generic)):
                # a derived scalar (ASGD's eta and mu): a float64 tensor, as a checkpoint loaded with
                # weights_only takes it (a numpy scalar is refused) and _host_state reads it back
                st[key] = torch.tensor(np.asarray(value, dtype=np.float64), device=p.device)
            else:
                st[key] = value

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        spec = self._spec()
        groups = self.param_groups
        params = [[_host(p) for p in g["params"]] for g in groups]
        grads = [[None if p.grad is None else _host(p.grad) for p in g["params"]] for g in groups]
        state = OptState([int(g.get("step", 0)) for g in groups],
                         [[self._host_state(p) for p in g["params"]] for g in groups])
        hparams = [{k: g[k] for k in spec.defaults} for g in groups]
        new_params, new_state = spec.step(params, grads, state, hparams, self.DEVIATION_CONVENTION)
        for gi, g in enumerate(groups):
            if self.DEVIATION_CONVENTION.counter == "group":
                g["step"] = new_state.group_step[gi]
            for p, value, entry in zip(g["params"], new_params[gi], new_state.params[gi]):
                if p.grad is None:
                    continue
                p.copy_(torch.from_numpy(np.array(value, dtype=np.float64)).to(p.device, p.dtype).reshape(p.shape))
                self._store(p, entry)
        return loss


def _init_taking(defaults: dict):
    """An __init__ whose signature names every hyperparameter of the spec, as a real optimizer's does
    (the engine passes a case's hyperparameters only to a constructor that names them)."""
    def __init__(self, params, **hyperparameters):
        OracleStepped.__init__(self, params, **hyperparameters)
    kw = inspect.Parameter.KEYWORD_ONLY
    __init__.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
         inspect.Parameter("params", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(k, kw, default=v) for k, v in defaults.items()])
    return __init__


def _steppable(spec, conv) -> str:
    """'' when the oracle steps `conv` on the standard problem, else its refusal."""
    from oracle import forms
    try:
        forms.trajectory(spec, conv, 2, forms.standard_hparams(spec))
    except Exception as exc:  # noqa: BLE001 - the oracle's refusal is the reason
        return f"{type(exc).__name__}: {exc}"
    return ""


def _class_name(optimizer: str, option: str, value) -> str:
    words = "".join(w.capitalize() for w in f"{option}_{value}".replace("-", "_").split("_"))
    return f"Deviation{optimizer.capitalize()}{words}"


def _build() -> list[type]:
    import oracle
    from oracle import forms
    out = []
    for name, spec in oracle.SPECS.items():
        reference = spec.reference or spec.convention
        for option, table in spec.forms.items():
            for value, form in table.items():
                if form.kind != forms.DEVIATION or value == forms.OTHER:
                    continue
                conv = replace(reference, **{option: value, **form.needs})
                cls_name = _class_name(name, option, value)
                refused = _steppable(spec, conv)
                if refused:
                    UNSTEPPABLE[cls_name] = refused
                    continue
                out.append(type(cls_name, (OracleStepped,), {
                    "__module__": __name__, "ORACLE_OPTIMIZER": name, "DEVIATION": (option, value),
                    "DEVIATION_CONVENTION": conv, "__init__": _init_taking(spec.defaults),
                    "__doc__": f"{name} with {option}={value!r}: {form.cite}"}))
    return out


DEVIATION_MUTANTS = _build()
for _cls in DEVIATION_MUTANTS:
    setattr(sys.modules[__name__], _cls.__name__, _cls)

__all__ = ["DEVIATION_MUTANTS", "OracleStepped", "UNSTEPPABLE"]
