"""One declarative record per optimizer: what the specification says it is.

Each update-rule module (adam, adagrad, lamb, ...) ends with

    SPECS = (OptimizerSpec(name="adamw", step=step, convention=TORCH_ADAMW, ...),)

and `registry()` collects them by importing every module of this package
that defines SPECS. Nothing else lists optimizers: the comparison package,
the CLI's choices and the mutants' checks all read this registry, so a new
optimizer is one new module here (plus its comparison record,
oracle/compare/optimizers/).
"""
from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from typing import Callable


# What a hyperparameter is to the update. Code that judges every optimizer alike (the precision hazards,
# oracle.compare.checking.hazards) reads these, never a hyperparameter's name: RMSprop's alpha and Adam's beta2
# are both the decay rate of a second moment and are held alike.
STEP_SIZE = "step size"                      # the update is proportional to it (lr)
GUARD = "denominator guard"                  # added where a denominator may be 0 (eps)
DECAY = "weight decay coefficient"           # lr * it is the per-step decay; p * (1 - lr * it) when decoupled
FIRST_MOMENT_RATE = "first-moment decay rate"    # m <- rate * m + (1 - rate) * g
SECOND_MOMENT_RATE = "second-moment decay rate"  # v <- rate * v + (1 - rate) * g^2 ((1 - rate) held on its own)
INTERPOLATION = "update interpolation weight"    # the update follows rate * m + (1 - rate) * g (Lion's beta1)
MOMENTUM_RATE = "momentum decay rate"        # buf <- rate * buf + g (SGD's momentum, Lion's beta2)
STEP_SIZE_DECAY = "step-size decay"          # lr / (1 + (t - 1) * it) (Adagrad's lr_decay)
INITIAL_ACCUMULATOR = "initial accumulator"  # the accumulator's value before the first step
NO_PRECISION_ROLE = "no precision role"      # a flag, a clip threshold, a bound: nothing held near 0 or 1
RATES = (FIRST_MOMENT_RATE, SECOND_MOMENT_RATE, INTERPOLATION)  # in [0, 1)
ROLES = (STEP_SIZE, GUARD, DECAY, FIRST_MOMENT_RATE, SECOND_MOMENT_RATE, INTERPOLATION, MOMENTUM_RATE,
         STEP_SIZE_DECAY, INITIAL_ACCUMULATOR, NO_PRECISION_ROLE)

# How an optimizer may treat complex params (OptimizerSpec.complex_form). "components": every real
# update rule applied to the (re, im) pairs, torch.view_as_real's view (every torch.optim optimizer that
# takes complex params, torch 2.13; docs/oracle.md "Complex params").
COMPLEX_FORMS = ("components",)


@dataclass(frozen=True)
class Role:
    """A hyperparameter's role; how a hazard writes it (its name when `symbol` is empty); the range
    validation holds a number to (oracle.hparams: [low, inf), low None for any finite number; [0, 1)
    for a decay rate or weight), or checked=False where the optimizer's own validate bounds it by
    another hyperparameter (LAMB's max_coeff >= min_coeff)."""

    what: str
    symbol: str = ""
    low: float | None = 0.0
    checked: bool = True

    def __post_init__(self):
        if self.what not in ROLES:
            raise ValueError(f"unknown hyperparameter role {self.what!r}; one of {', '.join(ROLES)}")


@dataclass(frozen=True)
class OptimizerSpec:
    """The specification's view of one optimizer.

    name:        the name users type (`--optimizer adamw`).
    step:        step(params, grads, state, hparams, conv, scaling) -> (params, state).
    validate:    validate(hparams per group) -> the groups' hyperparameters with
                 defaults filled in; ValueError naming the group otherwise.
    convention:  the convention the name means when nothing else is declared
                 (torch's for torch's optimizers, apex's for LAMB).
    state_keys:  the array state every param carries once it has stepped,
                 in torch's names (exp_avg, sum, momentum_buffer, ...).
    optional_state: state keys present only when a hyperparameter is truthy,
                 as {key: hyperparameter} (max_exp_avg_sq: amsgrad).
    defaults:    every hyperparameter with its default; validation rejects
                 any other key.
    options:     hyperparameters that not every implementation accepts
                 (a target lists the ones it has; cases needing others skip).
    eager_state: state keys an implementation may create at construction,
                 before any step, with their initial hyperparameter
                 (torch Adagrad's `sum` <- initial_accumulator_value).
    counter_hparams: hyperparameters whose effect depends on the step counter
                 (lr_decay), so the long-horizon scenario can exercise them.
    reference / forms: see oracle.forms.
    presets:     named conventions real libraries follow, {name: convention} (what inference chooses
                 among and a report can name: oracle.compare.targets.conventions.catalog). A library
                 whose evidence lives in its target module declares its own there (PRESETS).
    layout:      layout(param shape) -> the state keys a param of that shape carries, where that
                 depends on its shape (Adafactor: row_var and col_var from 2 dims on, variance below;
                 their shapes: oracle.common.state_shape); None: every key, for every param.
    roles:       every hyperparameter's Role, {name: Role}, or a tuple of Roles for a tuple-valued
                 one (betas); every key of `defaults` has one (checked here).
    complex_form: what the optimizer does to complex params: None (the default: no complex form is
                 specified, and complex params are refused, as torch's Adafactor and Muon refuse them),
                 or one of COMPLEX_FORMS. "components": torch's, the real update applied to the param,
                 grad and state viewed as (re, im) pairs (torch.view_as_real), so a second moment keeps
                 re^2 and im^2 apart, not |g|^2 (oracle.common.on_components; docs/oracle.md).
    param_ranks: the param ranks the optimizer takes (Muon: (2,)); None for any. Every shape the
                 engine and the forms' standard problem make is given to it through `shaped`.
    reduces:     the update of an element reads other elements (a norm, a row mean, a matmul), so
                 a compiler splits the step into several kernels whose buffers between them keep
                 the param's dtype (oracle.compare.targets.compiled); False: purely elementwise.
    """

    name: str
    step: Callable
    validate: Callable
    convention: object
    state_keys: tuple
    defaults: dict
    options: frozenset = frozenset()
    optional_state: dict = field(default_factory=dict)
    eager_state: dict = field(default_factory=dict)
    counter_hparams: tuple = ()
    summary: str = ""
    # The algorithm's reference form, and every value of every convention option classified against
    # it (oracle.forms: equivalent, variant with its citation, or deviation). None: `convention`.
    reference: object = None
    forms: dict = field(default_factory=dict)
    presets: dict = field(default_factory=dict)
    roles: dict = field(default_factory=dict)
    layout: Callable | None = None
    complex_form: str | None = None
    param_ranks: tuple | None = None
    reduces: bool = False

    def __post_init__(self):
        if self.complex_form not in (None, *COMPLEX_FORMS):
            raise ValueError(f"optimizer {self.name!r}: complex_form must be None or one of {COMPLEX_FORMS}, "
                             f"got {self.complex_form!r}")
        if self.reference is None:
            object.__setattr__(self, "reference", self.convention)
        missing = sorted(set(self.defaults) - set(self.roles))
        extra = sorted(set(self.roles) - set(self.defaults))
        if missing or extra:
            raise ValueError(f"optimizer {self.name!r}: roles must name every hyperparameter of defaults"
                             + (f"; no role for {', '.join(missing)}" if missing else "")
                             + (f"; roles for unknown {', '.join(extra)}" if extra else ""))

    def roles_of(self, hparams: dict) -> list[tuple[str, Role, object]]:
        """(symbol, role, value) of every scalar hyperparameter in `hparams`, tuple components apart."""
        out = []
        for name, role in self.roles.items():
            if name not in hparams:
                continue
            if isinstance(role, tuple):
                out += [(r.symbol or f"{name}[{i}]", r, v) for i, (r, v) in enumerate(zip(role, hparams[name]))]
            else:
                out.append((role.symbol or name, role, hparams[name]))
        return out

    def state_keys_for(self, hparams: dict, shape: tuple | None = None) -> tuple:
        """The array state keys a param carries under these hyperparameters (and, given its shape,
        those its layout keeps for that shape)."""
        extra = tuple(k for k, hp in self.optional_state.items() if hparams.get(hp))
        keys = self.state_keys + extra
        if shape is None or self.layout is None:
            return keys
        kept = self.layout(tuple(shape))
        return tuple(k for k in keys if k in kept)


def shaped(shape: tuple, ranks: tuple | None) -> tuple:
    """`shape` as an optimizer taking params of `ranks` only is given it: unchanged where its rank is
    taken (or any is); else, for an optimizer of matrices (ranks (2,)), a matrix of as many elements:
    the first dim by the rest (how Jordan's Muon flattens a conv filter: g.view(len(g), -1)), a
    vector as a tall matrix as near square as its length allows (so the tall-matrix path is taken),
    a scalar as 1 x 1."""
    shape = tuple(shape)
    if ranks is None or len(shape) in ranks:
        return shape
    if tuple(ranks) != (2,):
        raise ValueError(f"no rule to give a {len(shape)}-d shape to an optimizer of ranks {ranks}")
    if len(shape) == 0:
        return (1, 1)
    if len(shape) > 2:
        return (shape[0], math.prod(shape[1:]))
    n = shape[0]
    cols = max((d for d in range(1, math.isqrt(n) + 1) if n % d == 0), default=1)
    return (n // cols, cols)


def _declares_specs(info) -> bool:
    """Whether a module of this package assigns SPECS at module level: the package also holds entry
    points (oracle.testing, oracle.pytest_plugin) whose imports (pytest) a plain `import oracle` must
    not need."""
    return assigns(info, "SPECS")


def assigns(info, name: str) -> bool:
    """Whether the module `info` (pkgutil.ModuleInfo) assigns `name` at module level (`X = ...`,
    `X: tuple = ...`, `X += ...`), read from its parsed source without importing it."""
    import ast
    spec = info.module_finder.find_spec(info.name)
    origin = getattr(spec, "origin", None)
    try:
        with open(origin, "rb") as fh:
            tree = ast.parse(fh.read(), filename=origin)
    except (OSError, TypeError, ValueError, SyntaxError):
        return True  # no readable source (or not parseable here): import it and look
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def registry() -> dict[str, OptimizerSpec]:
    """Every optimizer the specification defines, by name, in module order."""
    import oracle
    out: dict[str, OptimizerSpec] = {}
    for info in pkgutil.iter_modules(oracle.__path__):
        if info.ispkg or info.name.startswith("_") or not _declares_specs(info):
            continue
        module = importlib.import_module(f"oracle.{info.name}")
        for spec in getattr(module, "SPECS", ()):
            if spec.name in out:
                raise RuntimeError(f"optimizer {spec.name!r} is specified twice")
            out[spec.name] = spec
    return out


__all__ = ["COMPLEX_FORMS", "OptimizerSpec", "RATES", "ROLES", "Role", "assigns", "registry", "shaped"]
