"""Representability hazards: hyperparameters and derived constants the target's compute arithmetic
cannot hold.

Static: for a target, a case and a dtype, every hyperparameter and derived constant (eps, lr, wd,
lr*wd, 1 - lr*wd, the betas, lr_decay terms, ...) is rounded to the format the target computes in
(Target.compute_dtype; float32 first where the convention holds hyperparameters as float32), as the
error model (oracle.compare.measuring.errmodel) holds constants. A quantity is hazardous when it

    rounds to 0                 its magnitude carries it (eps, lr, lr*wd) and it underflows
    rounds to 1                 its distance from 1 carries it (betas, 1 - lr*wd) and that is lost
    loses more than half its bits   a subnormal with fewer than p/2 significand bits, or a value
                                near 1 whose distance from 1 keeps fewer than p/2 bits

and each hazard says its consequence in words. A hazard that changes results (rounds to 0 or 1) is
measured on the case (`measure`): over its steps, the fraction of the float64 oracle's weight decay
(or of its update) the target actually applied.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from oracle.storage import FORMATS, component, quantum, round_to

KINDS = ("rounds to 0", "rounds to 1", "loses more than half its bits")


@dataclass(frozen=True)
class Quantity:
    """A constant the kernel holds: its name, exact value, whether its magnitude ("value") or its
    distance from 1 ("complement") carries it, what is lost if it rounds away, and what that loss
    affects ("decay" or "update")."""

    name: str
    value: float
    form: str
    lost: str
    affects: str = "update"


@dataclass(frozen=True)
class Hazard:
    quantity: str
    value: float
    stored: float
    compute: str
    kind: str
    consequence: str
    affects: str
    changes_results: bool
    relative_error: float

    def as_dict(self) -> dict:
        return asdict(self)


def significand_bits(x: float, dtype: str) -> int:
    """Significand bits the format keeps for |x| (fewer than p in the subnormal range)."""
    bits, emin, _ = FORMATS[component(dtype)]
    e = math.floor(math.log2(abs(x)))
    return bits - max(0, emin - e)


def complement_bits(x: float, dtype: str) -> float:
    """Bits of 1 - x the format keeps when it holds x (x near 1): log2 of (1 - x) in ULPs at x."""
    return math.log2(abs(1.0 - x) / float(quantum(x, dtype))) + 1.0


def relative_error(value: float, stored: float, form: str) -> float:
    """How far off the quantity that carries the constant is when the kernel holds `stored` for
    `value`: |x' - x| / |x| for a magnitude, of 1 - x for a complement (1 = all of it lost)."""
    want, got = (1.0 - value, 1.0 - stored) if form == "complement" else (value, stored)
    return abs(got - want) / abs(want)


def classify(q: Quantity, dtype: str) -> tuple[str, float] | None:
    """(kind, stored value) of a hazardous quantity in `dtype`, or None."""
    x = q.value
    if x == 0 or (q.form == "complement" and x == 1.0):
        return None  # exact, and what was asked for
    stored = float(round_to(x, dtype))
    half = FORMATS[component(dtype)][0] / 2
    if q.form == "value":
        if stored == 0:
            return "rounds to 0", stored
        return ("loses more than half its bits", stored) if significand_bits(x, dtype) < half else None
    if stored == 1.0:
        return "rounds to 1", stored
    return ("loses more than half its bits", stored) if complement_bits(x, dtype) < half else None


def _f32(x: float, enabled: bool) -> float:
    return float(np.float32(x)) if enabled else float(x)


def quantities(optimizer: str, hp: dict, convention, steps: int) -> list[Quantity]:
    """The constants one group's hyperparameters give this optimizer's kernel, read from the roles its
    spec declares (oracle.spec.Role), never from the hyperparameters' names."""
    import importlib

    import oracle
    S = importlib.import_module("oracle.spec")  # the module (oracle.spec is also a function)
    fp32 = getattr(convention, "fp32_hparams", False)
    held = [(sym, role.what, _f32(v, fp32)) for sym, role, v in oracle.SPECS[optimizer].roles_of(hp)
            if role.what != S.NO_PRECISION_ROLE and v is not None]
    lr = next(((sym, v) for sym, what, v in held if what == S.STEP_SIZE), None)
    out = []
    for sym, what, v in held:
        out += _role_quantities(S, sym, what, v, lr, convention, steps)
    return out


def _role_quantities(S, sym: str, what: str, v: float, lr, convention, steps: int) -> list[Quantity]:
    """What a kernel holds for one hyperparameter of role `what` (lr: the step size's (symbol, value))."""
    if what == S.STEP_SIZE:
        return [Quantity(sym, v, "value", "the update is lost: params never move")]
    if what == S.GUARD:
        return [Quantity(sym, v, "value",
                         f"{sym} is lost: where the denominator it guards is 0 (a zero grad) the update divides 0 by 0")]
    if what == S.FIRST_MOMENT_RATE:
        return [Quantity(sym, v, "complement", f"1 - {sym} = 0: the first moment stops following the grads")]
    if what == S.SECOND_MOMENT_RATE:
        return [Quantity(sym, v, "complement", f"1 - {sym} = 0: the second moment stops following the squared grads"),
                Quantity(f"1 - {sym}", 1.0 - v, "value",
                         f"the squared grad's weight (1 - {sym}) is lost: the second moment stays 0")]
    if what == S.INTERPOLATION:
        return [Quantity(sym, v, "complement", f"1 - {sym} = 0: the update stops following the grads")]
    if not v:
        return []  # the roles below are off at 0, and 0 is exact
    if what == S.DECAY:
        out = [Quantity(sym, v, "value", "weight decay is lost", "decay")]
        if lr is not None:
            out.append(Quantity(f"{lr[0]}*{sym}", lr[1] * v, "value", f"the per-step decay {lr[0]}*{sym} is lost", "decay"))
            # decoupled decay multiplies p by (1 - lr*wd): held near 1, its distance from 1 carries it
            if getattr(convention, "decay", "decoupled") == "decoupled":
                out.append(Quantity(f"1 - {lr[0]}*{sym}", 1.0 - lr[1] * v, "complement",
                                    f"decoupled decay is lost: p * (1 - {lr[0]}*{sym}) leaves p unchanged", "decay"))
        return out
    if what == S.MOMENTUM_RATE:
        return [Quantity(sym, v, "complement", "the momentum buffer never decays")]
    if what == S.STEP_SIZE_DECAY:
        out = [Quantity(sym, v, "value", "the learning-rate decay is lost")]
        if lr is not None:
            out.append(Quantity(f"{lr[0]}/(1+{steps - 1}*{sym})", lr[1] / (1.0 + (steps - 1) * v), "value",
                                "the decayed learning rate is lost"))
        return out
    if what == S.INITIAL_ACCUMULATOR:
        return [Quantity(sym, v, "value", "the initial accumulator is lost")]
    raise ValueError(f"hazards know no role {what!r}")


def consequence(q: Quantity, kind: str, stored: float, compute: str) -> str:
    """The hazard in words: what is lost, or how few bits are left."""
    if kind != KINDS[2]:
        return f"{q.lost}: {q.name} = {q.value:.8g} {kind} in {compute}"
    p = FORMATS[component(compute)][0]
    off = f"off by {relative_error(q.value, stored, q.form):.2%}"
    if q.form == "complement":
        bits = max(0.0, complement_bits(q.value, compute))
        return (f"{q.name} = {q.value:.8g} is held as {stored:.8g} in {compute}: its distance from 1 is "
                f"{1 - stored:.5g} instead of {1 - q.value:.5g} ({bits:.0f} of {p} bits kept, {off})")
    return (f"{q.name} = {q.value:.4g} is a {compute} subnormal held as {stored:.4g} "
            f"({significand_bits(q.value, compute)} of {p} bits kept, {off})")


def analyze(optimizer: str, group_hparams: list[dict], convention, compute: str, steps: int) -> list[Hazard]:
    """Every hazardous quantity of every group (each once), in `compute` arithmetic."""
    import oracle
    found: dict[str, Hazard] = {}
    for hp in oracle.SPECS[optimizer].validate(group_hparams):
        for q in quantities(optimizer, hp, convention, steps):
            hit = classify(q, compute)
            if hit is None or q.name in found:
                continue
            kind, stored = hit
            found[q.name] = Hazard(q.name, q.value, stored, compute, kind, consequence(q, kind, stored, compute),
                                   q.affects, kind != KINDS[2], relative_error(q.value, stored, q.form))
    return list(found.values())


# --- the measured effect ---------------------------------------------------------------------------

def _oracle_run(target, case, seed: int, hparams: list[dict]):
    """The float64 oracle's params after the case's steps (the target's convention, no rounding)."""
    import oracle
    from oracle.common import OptState

    from . import cases as C
    spec = oracle.SPECS[case.optimizer]
    params = C.initial_params(case, seed)
    state = OptState.empty(params)
    for k in range(1, case.steps + 1):
        params, state = spec.step(params, C.grads_at(case, seed, k), state, hparams, target.convention)
    return [np.concatenate([np.asarray(p).ravel() for p in ps]) if ps else np.zeros(0) for ps in params]


def _fraction(got: np.ndarray, want: np.ndarray) -> float:
    """How much of `want` `got` applied: the projection <got, want> / <want, want> (1 = all of it)."""
    denom = float(np.dot(want, want))
    if denom == 0:
        return float("nan")
    with np.errstate(all="ignore"):
        return float(np.dot(got, want) / denom)


def measure(target, case, seed: int, device: str, affects: str, free_run) -> dict:
    """`free_run(target, case, seed, device, hparams)` gives the target's params (flat, per group)
    after the case's steps (oracle.compare.checking.case_run.free_run). The fraction of the oracle's weight decay (affects="decay": the difference the decay makes,
    with vs without it) or of its update (the params' total movement) the target applied over the
    case's steps."""
    from . import cases as C
    hps = case.group_hparams()
    start = [np.concatenate([np.asarray(p).ravel() for p in ps]) if ps else np.zeros(0)
             for ps in C.initial_params(case, seed)]
    got, want = free_run(target, case, seed, device, hps), _oracle_run(target, case, seed, hps)
    if affects == "decay":
        no_wd = [{**hp, "weight_decay": 0.0} for hp in hps]
        got0, want0 = free_run(target, case, seed, device, no_wd), _oracle_run(target, case, seed, no_wd)
        delta_got = np.concatenate([a - b for a, b in zip(got, got0)])
        delta_want = np.concatenate([a - b for a, b in zip(want, want0)])
        of = "weight decay"
    else:
        delta_got = np.concatenate([a - s for a, s in zip(got, start)])
        delta_want = np.concatenate([a - s for a, s in zip(want, start)])
        of = "update"
    return {"of": of, "steps": case.steps, "fraction": _fraction(delta_got, delta_want)}


def case_hazards(target, case, seed: int, device: str, free_run=None) -> list[dict]:
    """The hazards of this target on this case, each with its measured effect where it changes results
    (one measurement per effect kind)."""
    compute = target.compute_dtype(case.dtype)
    found = analyze(case.optimizer, case.group_hparams(), target.convention, compute, case.steps)
    effects: dict[str, dict] = {}
    out = []
    for h in found:
        row = h.as_dict()
        if free_run is not None and h.changes_results:
            if h.affects not in effects:
                try:
                    effects[h.affects] = measure(target, case, seed, device, h.affects, free_run)
                except Exception as exc:  # noqa: BLE001 - a measurement that cannot run is said, not fatal
                    effects[h.affects] = {"of": h.affects, "steps": case.steps, "fraction": None,
                                          "error": f"{type(exc).__name__}: {exc}"}
            row["effect"] = effects[h.affects]
        out.append(row)
    return out


def summarize(results) -> list[dict]:
    """report.json's `hazards` section: one entry per (target, dtype, quantity, kind), with the cases
    it was found in and the measured effects."""
    rows: dict[tuple, dict] = {}
    for r in results:
        get = (lambda k: r.get(k)) if isinstance(r, dict) else (lambda k: getattr(r, k, None))  # noqa: E731
        for h in get("hazards") or []:
            target, dtype = get("target"), get("dtype")
            key = (target, dtype, h["quantity"], h["kind"], h["value"])
            row = rows.setdefault(key, {"target": target, "optimizer": get("optimizer"), "dtype": dtype,
                                        "compute": h["compute"], "quantity": h["quantity"], "value": h["value"],
                                        "stored": h["stored"], "kind": h["kind"], "consequence": h["consequence"],
                                        "changes_results": h["changes_results"], "cases": [], "effects": []})
            if "relative_error" in h:
                row["relative_error"] = h["relative_error"]
            row["cases"].append(get("case"))
            if "effect" in h:
                row["effects"].append({"case": get("case"), **h["effect"]})
    return list(rows.values())


def entries(doc: dict) -> list[dict]:
    """A report document's `hazards` section (rebuilt from its results for a report written without one)."""
    from .summary import jsonable
    return doc["hazards"] if "hazards" in doc else jsonable(summarize(doc["results"]))


def _effect_text(effects: list[dict]) -> str:
    """The measured effects' range ("" when none was measured)."""
    if not effects:
        return ""
    fractions = [e["fraction"] for e in effects
                 if isinstance(e.get("fraction"), (int, float)) and math.isfinite(e["fraction"])]
    shown = "non-finite" if not fractions else f"{min(fractions):.3g}" + (
        f" to {max(fractions):.3g}" if max(fractions) != min(fractions) else "")
    return f"; measured: applied {shown} of the oracle's {effects[0]['of']} over {effects[0]['steps']} steps"


def line(h: dict) -> str:
    """One line of report.html for a `hazards` entry (one target, one dtype)."""
    return (f"{h['target']} {h['dtype']} (computes in {h['compute']}): {h['consequence']} "
            f"[{len(h['cases'])} case(s), e.g. `{h['cases'][0]}`]{_effect_text(h['effects'])}")


def _add(seq: list, items) -> None:
    seq.extend(x for x in items if x not in seq)


def grouped(rows: list[dict]) -> list[dict]:
    """`hazards` entries that say the same thing (optimizer, compute format, quantity, kind, value)
    merged across targets and dtypes, so that a constant every path holds the same way is one line,
    not one per target. Hazards that change results come first, then the larger losses of precision."""
    groups: dict[tuple, dict] = {}
    same = ("optimizer", "compute", "quantity", "kind", "consequence", "value", "stored", "changes_results")
    for h in rows:
        # the consequence holds value and stored to 8 digits: float32-held hyperparameters (lr*wd of
        # float32 lr and wd) differ from float64 ones in the last bits and still say the same thing
        key = tuple(h[k] for k in same[:5])
        g = groups.setdefault(key, {**{k: h[k] for k in same}, "relative_error": h.get("relative_error"),
                                    "targets": [], "dtypes": [], "cases": [], "effects": []})
        _add(g["targets"], [h["target"]])
        _add(g["dtypes"], [h["dtype"]])
        _add(g["cases"], h["cases"])
        g["effects"] += [{"target": h["target"], **e} for e in h["effects"]]
    return sorted(groups.values(), key=lambda g: (not g["changes_results"], -(g["relative_error"] or 0.0)))


# A loss of precision that moves the constant by less than this is folded into one line of report.md:
# the lockstep bounds already hold the constant as the target does, so it fails nothing, and a decay
# rate or step size 0.1% off (1 - 1e-5 in float32) is far below what a reader would act on.
NOTICEABLE = 0.01


def noticeable(g: dict) -> bool:
    """Changes results, or moves the constant by NOTICEABLE or more (unknown counts as noticeable)."""
    error = g.get("relative_error")
    return g["changes_results"] or error is None or error >= NOTICEABLE


def folded_line(small: list[dict]) -> str:
    """report.md's one line for the `grouped` hazards that are not `noticeable`."""
    worst = max(small, key=lambda g: g["relative_error"])
    targets = {t for g in small for t in g["targets"]}
    return (f"{len(small)} more constant(s) in {len(targets)} target(s) keep fewer than half their bits but move by "
            f"less than {NOTICEABLE:.0%} (largest: {worst['quantity']} = {worst['value']:.8g} in {worst['compute']}, "
            f"off by {worst['relative_error']:.2%}); listed in report.html")


def group_line(g: dict, shown: int = 3) -> str:
    """One line of report.md for a `grouped` hazard: what is lost, where, and its measured effect."""
    names = ", ".join(g["targets"][:shown]) + (f" and {len(g['targets']) - shown} more" if len(g["targets"]) > shown
                                               else "")
    return (f"{g['optimizer']} {'/'.join(g['dtypes'])} params computed in {g['compute']}: {g['consequence']} "
            f"[{len(g['targets'])} target(s): {names}; {len(g['cases'])} case(s), e.g. `{g['cases'][0]}`]"
            f"{_effect_text(g['effects'])}")


__all__ = ["Hazard", "KINDS", "NOTICEABLE", "Quantity", "analyze", "case_hazards", "classify", "group_line", "grouped", "line", "measure",
           "noticeable", "folded_line", "relative_error", "summarize"]
