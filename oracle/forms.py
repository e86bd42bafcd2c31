"""Forms and deviations: what each value of each convention option is, decided by the oracle.

Implementations of one algorithm differ in the options of its convention (oracle.adam.AdamConvention
and the others). Each value of each option is one of three kinds:

    equivalent  the same exact-arithmetic update as the algorithm's reference form, other rounding
                (sqrt(v)/sqrt(bc2) + eps versus sqrt(v/bc2) + eps, float32 hyperparameters, where
                1 - beta^t is formed, the counter's dtype below its saturation)
    variant     a documented form of the named algorithm: the citation says where (the paper's
                section, or a library's documented option: bias_correction=False, eps_root, ...)
    deviation   anything else. It stays expressible, so a report can say whose behaviour an
                implementation matches, but a row judged under it is never a plain pass: its
                status is "deviation", with the size measured here (`measure`).

Each optimizer's spec lists its table (OptimizerSpec.forms: option -> value -> Form) and its
reference convention (OptimizerSpec.reference). tests/test_forms.py runs every classified value
against the reference in float64 on the standard problem below and checks the kind: an
"equivalent" value agrees to roundoff, a "variant" or "deviation" value is observable (differs by
far more than roundoff), and every value an option allows is classified. The kinds are therefore
not a matter of opinion about a library: a library's shipped behaviour that is not a documented
form of the algorithm is a deviation, named after that library.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields, replace

import numpy as np

from .common import OptState

EQUIVALENT, VARIANT, DEVIATION = "equivalent", "variant", "deviation"
KINDS = (EQUIVALENT, VARIANT, DEVIATION)
# A value key of a form table that stands for every value not listed (a continuous option such as
# LAMB's norm_upper: inf is the reference, any finite bound the paper's phi).
OTHER = "*"


@dataclass(frozen=True)
class Form:
    """One value of one convention option.

    kind:   EQUIVALENT, VARIANT or DEVIATION.
    cite:   where it is documented (variants), why it is the same update (equivalents), or what it
            does instead and who ships it (deviations).
    probe:  hyperparameters under which the value is observable on the standard problem (amsgrad
            forms need amsgrad=True); the classification test and `measure` use them.
    steps:  how long the classification test runs (a counter's dtype shows only past 2**8).
    needs:  other options set with it for it to mean anything (clamp_lower needs clamp).
    roundoff: how close an equivalent form must come (relative, per tensor): float64 roundoff, or
            the float32 rounding of the inputs for a form that rounds the hyperparameters.
    """

    kind: str
    cite: str
    probe: dict = field(default_factory=dict)
    steps: int = 20
    needs: dict = field(default_factory=dict)
    roundoff: float = 1e-10

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")


# lr, betas, eps and wd rounded to float32 (2**-24 relative each), carried through the steps.
FP32_HPARAMS = 1e-5


def ref(cite: str) -> Form:
    """The reference value of an option: equivalent to itself by definition."""
    return Form(EQUIVALENT, cite)


def form_of(spec, option: str, value) -> Form:
    """The classification of `value` for `option` of this optimizer; KeyError when unclassified."""
    table = spec.forms[option]
    if value in table:
        return table[value]
    if OTHER in table:
        return table[OTHER]
    raise KeyError(f"{spec.name}: {option}={value!r} is not classified (oracle/{spec.name}.py forms)")


def differing(spec, conv) -> list[tuple[str, object]]:
    """(option, value) for every option of `conv` that differs from the spec's reference."""
    return [(f.name, getattr(conv, f.name)) for f in fields(conv)
            if getattr(conv, f.name) != getattr(spec.reference, f.name)]


def deviations(spec, conv) -> list[tuple[str, object, Form]]:
    """(option, value, Form) for every option value of `conv` that is a deviation for this optimizer."""
    out = []
    for option, value in differing(spec, conv):
        form = form_of(spec, option, value)
        if form.kind == DEVIATION:
            out.append((option, value, form))
    return out


def kind(spec, conv) -> str:
    """The convention's kind: DEVIATION if any option is one, VARIANT if any is, else EQUIVALENT."""
    kinds = {form_of(spec, o, v).kind for o, v in differing(spec, conv)}
    return DEVIATION if DEVIATION in kinds else VARIANT if VARIANT in kinds else EQUIVALENT


# --- the standard problem -------------------------------------------------------------------------

SHAPES = ((24,), (4, 6), (9,))
ZERO_GRADS = 3


def _problem(seed: int = 20240601):
    """A closed-loop problem: noisy grads of a diagonal quadratic, so trajectories that part stay
    parted. The third tensor gets no grad on every third step (a per-param counter then lags a
    per-group one) and its weights are small (a trust ratio far below 1); the first tensor's norm
    is above 10 (a bound on the weight norm shows) and its first ZERO_GRADS elements never get a
    nonzero grad (what a rule does with an exactly zero grad and state shows)."""
    rng = np.random.default_rng(seed)
    p0 = [rng.normal(0.0, s, shape) for s, shape in zip((3.0, 0.5, 0.05), SHAPES)]
    curv = [rng.uniform(0.5, 2.0, shape) for shape in SHAPES]
    centre = [rng.normal(0.0, 1.0, shape) for shape in SHAPES]
    noise = rng.normal(0.0, 0.1, (400, sum(int(np.prod(s)) for s in SHAPES)))
    return p0, curv, centre, noise


def _grads(params, k, problem):
    _, curv, centre, noise = problem
    out, at = [], 0
    for i, (p, a, c) in enumerate(zip(params, curv, centre)):
        n = p.size
        g = a * (p - c) + noise[(k - 1) % len(noise), at:at + n].reshape(p.shape)
        if i == 0:
            g.ravel()[:ZERO_GRADS] = 0.0
        at += n
        out.append(None if i == 2 and k % 3 == 0 else g)
    return out


def standard_hparams(spec, probe: dict | None = None) -> dict:
    """The spec's defaults with decay on (so decay forms show) and the probe's overrides."""
    hp = dict(spec.defaults)
    if "weight_decay" in hp:
        hp["weight_decay"] = 0.1
    if "momentum" in hp and not isinstance(hp["momentum"], tuple):  # SGD: a momentum buffer to see
        hp["momentum"] = 0.9
    if spec.name in ("sgd", "adagrad"):
        hp["lr"] = 1e-2
    return {**hp, **(probe or {})}


def _shaped_problem(spec):
    """The standard problem with each tensor shaped as the optimizer takes it (oracle.spec.shaped:
    Muon's are matrices); the same values."""
    from .spec import shaped
    p0, curv, centre, noise = _problem()
    shape = lambda xs: [x.reshape(shaped(x.shape, spec.param_ranks)) for x in xs]  # noqa: E731
    return shape(p0), shape(curv), shape(centre), noise


def trajectory(spec, conv, steps: int, hparams: dict) -> list[list[np.ndarray]]:
    """The params (flattened per step) after each of `steps` steps of the standard problem, float64."""
    problem = _shaped_problem(spec)
    params = [[p.copy() for p in problem[0]]]
    state = OptState.empty(params)
    out = [np.concatenate([p.ravel() for p in params[0]])]
    for k in range(1, steps + 1):
        grads = [_grads(params[0], k, problem)]
        params, state = spec.step(params, grads, state, [hparams], conv)
        out.append(np.concatenate([p.ravel() for p in params[0]]))
    return out


# --- sizing a deviation ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Size:
    """A deviation's effect against the reference form on the standard problem, float64."""

    step1: float      # ||update at step 1|| / the reference's
    step20: float     # the same at step 20, each along its own trajectory
    dist20: float     # ||p - p_ref|| / ||p_ref|| after 20 steps
    dist100: float

    def words(self) -> str:
        return (f"step size x{self.step1:.3g} at step 1, x{self.step20:.3g} at step 20; params "
                f"{self.dist20:.2g} apart after 20 steps, {self.dist100:.2g} after 100 (relative)")

    def to_json(self) -> dict:
        return {"step1": self.step1, "step20": self.step20, "dist20": self.dist20, "dist100": self.dist100}


def _ratio(a: float, b: float) -> float:
    return a / b if b else (1.0 if a == 0 else math.inf)


@functools.lru_cache(maxsize=256)
def measure(spec_name: str, conv, probe: tuple = ()) -> Size:
    """How far `conv` is from the same convention with its deviating options put back to the
    reference's values, in float64 on the standard problem (with a deviation's probe hyperparameters)."""
    import oracle
    spec = oracle.SPECS[spec_name]
    back = replace(conv, **{o: getattr(spec.reference, o) for o, _, _ in deviations(spec, conv)})
    hp = standard_hparams(spec, dict(probe))
    got, want = trajectory(spec, conv, 100, hp), trajectory(spec, back, 100, hp)
    step = lambda tr, k: float(np.linalg.norm(tr[k] - tr[k - 1]))  # noqa: E731
    dist = lambda k: _ratio(float(np.linalg.norm(got[k] - want[k])), float(np.linalg.norm(want[k])))  # noqa: E731
    return Size(_ratio(step(got, 1), step(want, 1)), _ratio(step(got, 20), step(want, 20)), dist(20), dist(100))


def probe_of(spec, conv) -> tuple:
    """The deviations' probe hyperparameters, hashable (for `measure`)."""
    merged: dict = {}
    for _, _, form in deviations(spec, conv):
        merged.update(form.probe)
    return tuple(sorted(merged.items()))


def describe(spec, conv) -> str:
    """The deviations of `conv`, each named with what it does, and their measured size; "" if none."""
    devs = deviations(spec, conv)
    if not devs:
        return ""
    names = "; ".join(f"{o}={v!r}: {form.cite}" for o, v, form in devs)
    return f"{names} ({measure(spec.name, conv, probe_of(spec, conv)).words()})"


# --- the classification as a table (docs/oracle.md, "Forms and deviations") -------------------------

def rows(spec) -> list[tuple[str, str, str, str]]:
    """(option, value, kind, why) for every classified value of this optimizer's options, the reference
    value first; a deviation's why ends with its size measured against the reference."""
    out = []
    for option, table in spec.forms.items():
        ref_value = getattr(spec.reference, option)
        for value, form in sorted(table.items(), key=lambda vf: vf[0] != ref_value):
            why = form.cite
            if form.kind == DEVIATION and value != OTHER:
                why += size_words(spec, option, value, form)
            label = "any other" if value == OTHER else f"`{value!r}`" + (" (reference)" if value == ref_value else "")
            out.append((option, label, form.kind, why))
    return out


def size_words(spec, option: str, value, form: Form) -> str:
    """" (step size x..., ...)" for a deviation alone on the reference, "" where it cannot run alone
    on the standard problem (a counter scope the update needs)."""
    if form.steps > 100:  # the sizes below are taken over 100 steps
        return f" (shows only past step 100: the classification test runs {form.steps} steps)"
    try:
        conv = replace(spec.reference, **{option: value, **form.needs})
        return f" ({measure(spec.name, conv, probe_of(spec, conv)).words()})"
    except (TypeError, ValueError):
        return ""


def markdown() -> str:
    """Every optimizer's table of forms, as docs/oracle.md carries it (tests/test_docs.py compares them)."""
    import oracle
    out = []
    for name, spec in oracle.SPECS.items():
        out += [f"#### {name}", "", "| option | value | class | citation, reason or size |", "|---|---|---|---|"]
        out += [f"| `{o}` | {v} | {k} | {w.replace('|', '/')} |" for o, v, k, w in rows(spec)]
        out.append("")
    return "\n".join(out)


__all__ = ["DEVIATION", "EQUIVALENT", "KINDS", "OTHER", "VARIANT", "Form", "Size", "deviations", "describe",
           "differing", "form_of", "kind", "markdown", "measure", "probe_of", "ref", "rows", "size_words",
           "standard_hparams", "trajectory"]

