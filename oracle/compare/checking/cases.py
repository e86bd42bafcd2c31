"""The case matrix: named, seeded inputs designed to make each convention observable.

A case is a record (as in torch's OptimizerInfo): hyperparameters per group,
a layout of parameter shapes, an input regime, a dtype and a step count.
Inputs are generated from (seed, case name) alone, so a case name and a seed
reproduce the case exactly in a fresh process.
"""
from __future__ import annotations

import fnmatch
import zlib
from dataclasses import dataclass, field

import numpy as np

import oracle
from oracle.spec import GUARD, shaped
from oracle.storage import is_complex, round_to

from ..optimizers import record, records

REAL_DTYPES = ("float32", "bfloat16", "float16")
# Complex params (torch's complex64, complex128), for optimizers whose spec declares a complex form: each
# component is rounded, compared and measured in ULPs of its real format (oracle.storage.COMPLEX), and
# the oracle computes on (re, im) pairs (oracle.common.on_components). complex64 runs by default;
# complex128 only when asked for (--dtype complex128).
COMPLEX_DTYPES = ("complex64", "complex128")
DTYPES = REAL_DTYPES + ("complex64",)
# The config holding the library's default hyperparameters: run as they are in every dtype (the fp16
# policy's raised eps would hide exactly the hazards it exists to show).
DEFAULTS_CONFIG = "defaults"
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "complex64": "c64", "complex128": "c128"}

# Layouts: per group, the param shapes; a group with no shapes is empty.
# grad_none[(g, i)] lists the steps (1-based) on which that param has no grad.
LAYOUTS = {
    "single": {"groups": [[(8, 16), (33,)]]},
    "two_groups": {"groups": [[(8, 16), (5,)], [(7,)]], "no_decay_group": 1},
    "empty_group": {"groups": [[(16, 8)], [], [(9,)]]},
    # as a rank sees it when its share of the no-decay group is empty (PP/EP)
    "rank_skew": {"groups": [[(16, 8), (3, 3)], []], "no_decay_group": 1},
    "zero_numel_last": {"groups": [[(8, 8), (5,), (0,)]]},
    "grad_none": {"groups": [[(8, 8), (6,)]], "grad_none": {(0, 1): (1, 2, 5)}},
    "scalar": {"groups": [[(), (4,)]]},
    "many_shapes": {"groups": [[(3, 5, 7), (1,), (64,)], [(2, 1, 3)]]},
    # params large enough for blockwise-quantized state (>= 4096 elements, oracle.quantized): whole
    # 256-element blocks, a short last block, and one param under the threshold (float32 state)
    "blocks": {"groups": [[(64, 128), (4096 + 77,), (100,)]]},
}


@dataclass(frozen=True)
class Regime:
    """How params and grads are drawn. Scales are per dtype where the format's
    range forces it (fp16 cannot hold 1e-9)."""

    param_scale: float = 1.0
    grad_scale: float = 0.1
    zero_params: bool = False
    zero_grad_fraction: float = 0.0
    hparams: dict = field(default_factory=dict)  # regime-imposed hyperparameters
    doc: str = ""


REGIMES = {
    "normal": Regime(doc="unit params, grads ~0.1"),
    "tiny_grads": Regime(grad_scale=1e-8, hparams={"eps": 1e-8},
                         doc="|g| ~ eps: eps placement changes the update at first order"),
    "small_params": Regime(param_scale=1e-3, zero_params=True,
                           doc="zero and small params: the update is not hidden under p's rounding"),
    "large_decay": Regime(hparams={"lr": 0.1, "weight_decay": 0.5},
                          doc="lr*wd = 0.05: decay form and its order relative to the update"),
    "zero_grads": Regime(zero_grad_fraction=0.5, doc="half the grad elements exactly zero"),
    "lr0": Regime(hparams={"lr": 0.0}, doc="lr = 0: params must not move; state and counters still advance"),
    "lr0_zero_grads": Regime(zero_grad_fraction=0.5, hparams={"lr": 0.0},
                             doc="lr = 0 where v = 0: forms dividing by lr give 0/0 (PyTorch #126514)"),
}
@dataclass(frozen=True)
class Case:
    optimizer: str
    dtype: str
    config: str          # name of the hyperparameter config
    hparams: dict        # base hyperparameters (all groups)
    layout: str
    regime: str
    steps: int = 20
    options: frozenset = frozenset()  # optimizer options the case needs (amsgrad, ...)

    @property
    def name(self) -> str:
        return f"{self.optimizer}/{SHORT[self.dtype]}/{self.config}/{self.layout}/{self.regime}"

    def base_hparams(self) -> dict:
        """The config's hyperparameters with the regime's on top: what the
        constructor gets (some options, e.g. LAMB's max_grad_norm and torch
        Adagrad's initial_accumulator_value, are read only from there).
        Regime hyperparameters the optimizer does not have are left out."""
        spec, policy = oracle.SPECS[self.optimizer], record(self.optimizer).fp16
        base = with_regime(self.optimizer, self.hparams, REGIMES[self.regime].hparams)
        if self.dtype == "float16" and "eps" in spec.defaults and self.config != DEFAULTS_CONFIG:
            base = (fp16_eps(self.optimizer, base) if self.regime != "tiny_grads"
                    else with_eps(self.optimizer, base, policy.tiny["eps"]))
        return base

    def group_hparams(self) -> list[dict]:
        """Hyperparameters per group: the base, and wd = 0 in the layout's no-decay group (for an optimizer
        that has a weight decay: Rprop has none and refuses the key)."""
        base = self.base_hparams()
        groups = LAYOUTS[self.layout]["groups"]
        nd = LAYOUTS[self.layout].get("no_decay_group")
        no_decay = {"weight_decay": 0.0} if "weight_decay" in oracle.SPECS[self.optimizer].defaults else {}
        return [{**base, **(no_decay if g == nd else {})} for g in range(len(groups))]


def needed_options(optimizer: str, hparams: dict) -> frozenset:
    """The options a config needs: its keys that the spec lists as options,
    set to something other than their default."""
    spec = oracle.SPECS[optimizer]
    return frozenset(k for k, v in hparams.items() if k in spec.options and v != spec.defaults.get(k))


def fp16_eps(optimizer: str, hp: dict) -> dict:
    """`hp` with eps raised to the optimizer's fp16 policy minimum (its comparison record), as every
    fp16 case but the library-defaults rows has it: eps = 1e-8 rounds to 0 in fp16 and a zero grad
    then divides 0 by 0 (the defaults rows show that hazard; the rest judge the update)."""
    return with_eps(optimizer, hp, record(optimizer).fp16.min_eps, floor=True)


def with_regime(optimizer: str, hp: dict, imposed: dict) -> dict:
    """`hp` with a regime's (or a scenario's) hyperparameters on top, those the optimizer has; its eps
    through with_eps."""
    spec = oracle.SPECS[optimizer]
    out = {**hp, **{k: v for k, v in imposed.items() if k in spec.defaults and k != "eps"}}
    return with_eps(optimizer, out, imposed["eps"]) if "eps" in imposed else out


def with_eps(optimizer: str, hp: dict, value: float, floor: bool = False) -> dict:
    """`hp` with the optimizer's eps set to `value` (floor: raised to at least it); unchanged where it
    has none. A tuple-valued eps (torch Adafactor's (eps1, eps2)) has its denominator-guard components
    set, as the spec's roles say, the others kept; a guard left None there (the implementation's own
    default, finfo(dtype).eps, above any floor used here) is set, never raised."""
    spec = oracle.SPECS[optimizer]
    if "eps" not in spec.defaults:
        return dict(hp)
    current, role = hp.get("eps", spec.defaults["eps"]), spec.roles["eps"]

    def guard(v):
        if not floor:
            return value
        return v if v is None else max(v, value)
    if not isinstance(role, tuple):
        return {**hp, "eps": guard(current)}
    return {**hp, "eps": tuple(guard(v) if r.what == GUARD else v for r, v in zip(role, current))}


def complex_plan(plan: tuple) -> tuple:
    """The plan entries a complex dtype runs: the first (the record's main config) and the first with
    large lr*wd (torch's forloop Adam forms the decay on the complex tensor, before view_as_real). The
    components form reuses every real rule, so the real dtypes' full plan already covers the arithmetic;
    these two show that complex params are taken, stored and updated per component."""
    decay = [entry for entry in plan if entry[2] == "large_decay"]
    return tuple(dict.fromkeys(plan[:1] + tuple(decay[:1])))


def plan_for(optimizer: str, dtype: str) -> tuple:
    """The (config, layout, regime) triples a dtype runs: the record's plan; for a complex dtype its
    complex_plan, or nothing where the spec declares no complex form."""
    plan = record(optimizer).plan
    if not is_complex(dtype):
        return plan
    return complex_plan(plan) if oracle.SPECS[optimizer].complex_form is not None else ()


def value_shape(shape: tuple, dtype: str) -> tuple:
    """The float64 shape of a param's values: a complex one's (re, im) pairs add a last dimension of 2."""
    return (*shape, 2) if is_complex(dtype) else tuple(shape)


def cases(optimizer: str, dtypes=DTYPES, steps: int = 20, pattern: str | None = None) -> list[Case]:
    out = []
    rec = record(optimizer)
    for dtype in dtypes:
        for config, layout, regime in plan_for(optimizer, dtype):
            hp = rec.configs[config]
            case = Case(optimizer, dtype, config, hp, layout, regime, steps, needed_options(optimizer, hp))
            if pattern is None or fnmatch.fnmatch(case.name, pattern) or pattern in case.name:
                out.append(case)
    return out


def find_case(name: str, steps: int = 20) -> Case:
    """The case with exactly this name (as printed in reports)."""
    optimizer = name.split("/")[0]
    if optimizer not in records():
        raise ValueError(f"no case named {name!r}")
    for case in cases(optimizer, REAL_DTYPES + COMPLEX_DTYPES, steps=steps):
        if case.name == name:
            return case
    raise ValueError(f"no case named {name!r}")


# --- inputs --------------------------------------------------------------

def _rng(seed: int, case: Case, *tag) -> np.random.Generator:
    key = "|".join(map(str, (case.optimizer, case.dtype, case.config, case.layout, case.regime) + tag))
    return np.random.default_rng([seed, zlib.crc32(key.encode())])


def layout_shapes(case: Case) -> list[list[tuple]]:
    """The layout's shapes per group, as the case's optimizer takes params (oracle.spec.shaped: Muon's
    as matrices of as many elements; every other optimizer's unchanged)."""
    ranks = oracle.SPECS[case.optimizer].param_ranks
    return [[shaped(s, ranks) for s in shapes] for shapes in LAYOUTS[case.layout]["groups"]]


def _copied(groups) -> list[list]:
    return [[None if a is None else a.copy() for a in group] for group in groups]


def initial_params(case: Case, seed: int) -> list[list[np.ndarray]]:
    """float64 values exactly representable in the case's dtype (the caller's own copy)."""
    return _copied(_drawn(_initial_params, case, seed))


def grads_at(case: Case, seed: int, step: int) -> list[list]:
    """Grads for 1-based `step`, in the case's dtype; None where the layout says so (the caller's own copy)."""
    return _copied(_drawn(_grads_at, case, seed, step))


# Drawn once per process and copied out: every target of a sweep, every inference probe and every round
# trip of a case asks for the same draws (a fresh generator per draw cost 150 us of a 400 us step).
# Keyed by what the draws depend on (_rng's key, the regime, the layout), not by the steps or hparams.
_DRAWN: dict = {}
DRAWN_KEPT = 8192


def _drawn(draw, case: Case, *args):
    key = (draw.__name__, case.optimizer, case.dtype, case.config, case.layout, case.regime, *args)
    out = _DRAWN.get(key)
    if out is None:
        if len(_DRAWN) >= DRAWN_KEPT:
            _DRAWN.clear()
        out = _DRAWN[key] = draw(case, *args)
    return out


def _initial_params(case: Case, seed: int) -> list[list[np.ndarray]]:
    regime = REGIMES[case.regime]
    rng = _rng(seed, case, "params")
    out = []
    for shapes in layout_shapes(case):
        group = []
        for k, shape in enumerate(shapes):
            shape = value_shape(shape, case.dtype)
            p = rng.standard_normal(shape) * regime.param_scale
            if regime.zero_params and k == 0:
                p = np.zeros(shape)
            group.append(round_to(p, case.dtype))
        out.append(group)
    return out


def _grads_at(case: Case, seed: int, step: int) -> list[list]:
    regime = REGIMES[case.regime]
    scale = regime.grad_scale
    if case.dtype == "float16":
        policy = record(case.optimizer).fp16
        scale = policy.tiny["grad_scale"] if case.regime == "tiny_grads" else max(scale, policy.grad_scale)
    rng = _rng(seed, case, "grads", step)
    none = LAYOUTS[case.layout].get("grad_none", {})
    out = []
    for g, shapes in enumerate(layout_shapes(case)):
        group = []
        for i, shape in enumerate(shapes):
            shape = value_shape(shape, case.dtype)
            gr = rng.standard_normal(shape) * scale
            if regime.zero_grad_fraction:
                gr = np.where(rng.random(shape) < regime.zero_grad_fraction, 0.0, gr)
            group.append(None if step in none.get((g, i), ()) else round_to(gr, case.dtype))
        out.append(group)
    return out
