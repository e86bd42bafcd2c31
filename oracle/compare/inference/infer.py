"""Convention inference: which legitimate convention does an undeclared optimizer follow?

An implementation that declares nothing is fingerprinted before it is judged. The candidates are a
finite, named set: every preset of its optimizer in oracle.compare.targets.conventions (the library
conventions), crossed with the counter locations, then with the precision axes (compute arithmetic,
state dtype, FP32 masters) and the counter's dtype. The probes are short runs of the case matrix's own
rows, whose inputs were designed so that two conventions differ by far more than the derived bound
(tiny grads for eps placement, lr*wd = 0.05 for the decay form, early steps for bias correction,
bf16/fp16 params for the arithmetic); the long-horizon scenario probes the counter's dtype.

A candidate is accepted only if it explains every probe; the first one in the catalog's order wins
and the others that also explain every probe are listed. Within the precision axes the strictest
(float32 arithmetic, state in the param's dtype, no masters) is tried first, so a looser model never
hides what a tighter one would catch. An implementation no candidate explains is judged against the
nearest one (fewest unexplained probes), and the report names it with the probes that separate it.

Inference cannot explain away a defect: the candidates are conventions real libraries follow, every
one is judged by the same checks with the same bounds, and the verdict on the full matrix comes after.

    python -m oracle.compare.inference.infer MODULE:NAME --optimizer adamw      # print the inferred declaration
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pickle
import sys
import time
from dataclasses import dataclass, field, fields, replace

from ..targets.declare import Candidate, apply, declaration

# (compute, state_dtype, masters), strictest first: float32 arithmetic is checked against a bound a
# storage-arithmetic model would widen by orders of magnitude.
PRECISIONS = (("float32", "param", False), ("float32", "float32", False), ("float32", "float32", True),
              ("float32", "param", True), ("storage", "param", False))
COUNTERS = ("param", "group")
PROBE_STEPS = 4          # early steps: bias corrections are far from 1
PROBE_CHECKS = ("lockstep", "finite", "bounds", "trajectory", "counters", "schema")  # all but roundtrip
# what no convention may excuse (oracle.compare.checking.finite, oracle.compare.checking.guards): never "taught"
UNEXCUSABLE = ("finite", "bounds")
# probes run first: they separate most presets at the first case
FIRST_REGIMES = ("large_decay", "tiny_grads", "normal")
LOW_PRECISION_REGIMES = ("normal", "large_decay", "tiny_grads", "small_params")
SATURATION = "counters@16777216"  # the long-horizon check a float32 counter fails
# and, where the update reads t visibly at 2**24 (ASGD's eta and mu: 1/t relative), the values there
SATURATION_VALUES = "lockstep@16777216"


@dataclass
class Probe:
    name: str
    passed: bool
    finding: str = ""
    skipped: bool = False  # the constructor refused the probe's hyperparameters, or step() raised: no evidence


@dataclass
class Inference:
    """What inference concluded about one target."""

    target: str
    optimizer: str
    chosen: Candidate | None = None      # explains every probe
    nearest: Candidate | None = None     # when none does: the fewest unexplained probes
    separating: list = field(default_factory=list)  # Probes the nearest fails
    also: list = field(default_factory=list)        # other candidates explaining every probe (labels)
    tried: int = 0
    probes: int = 0
    seconds: float = 0.0
    declared: tuple = ()                 # axes the target declared (not inferred)
    state_names: tuple = ()              # (implementation key, canonical name) found by value

    @property
    def used(self) -> Candidate | None:
        return self.chosen or self.nearest

    def to_json(self) -> dict:
        used = self.used
        if used is not None and self.chosen is None:  # the nearest: its rows are judged "unexplained"
            used = replace(used, explained=False, separating="; ".join(
                f"{p.name}: {p.finding}" for p in self.separating[:3]))
        return {"target": self.target, "optimizer": self.optimizer, "explained": self.chosen is not None,
                "candidate": used.to_json() if used else None, "label": used.label() if used else None,
                "deviation": deviation_text(self.optimizer, used.convention) if used else "",
                "declaration": declaration(self.optimizer, used) if used else None,
                "separating": [{"probe": p.name, "finding": p.finding} for p in self.separating],
                "also_consistent": list(self.also), "declared_axes": list(self.declared),
                "state_names": {k: v for k, v in self.state_names},
                "candidates_tried": self.tried, "probe_runs": self.probes, "seconds": round(self.seconds, 2)}

    def lines(self) -> list[str]:
        return lines(self.to_json())


def deviation_text(optimizer: str, conv) -> str:
    """What makes `conv` a deviation from the named algorithm, with its size; "" for a legitimate form."""
    import oracle
    from oracle import forms
    return forms.describe(oracle.SPECS[optimizer], conv)


SEPARATING_SHOWN = 3  # probes a person reads first; report.json's "inferred" keeps them all


def lines(d: dict) -> list[str]:
    """An inference (as report.json records it) for a person: the convention and how to declare it, or
    the nearest convention and the probes that separate it."""
    if d["explained"]:
        out = [f"{d['target']}: inferred convention {d['label']} ({d['probe_runs']} probe runs over "
               f"{d['candidates_tried']} candidates, {d['seconds']:.1f} s); to declare it, add to the class:"]
        out += ["    " + line for line in d["declaration"].splitlines()]
        if d["also_consistent"]:
            out.append(f"  also consistent with every probe: {', '.join(d['also_consistent'])}")
        if d.get("deviation"):
            out.append(f"  no legitimate form explains it; that convention is a DEVIATION from {d['optimizer']}: "
                       f"{d['deviation']}")
        return out
    if not d["candidate"]:
        return [f"{d['target']}: no candidate convention could be tried"]
    out = [f"{d['target']}: NO known convention explains it; judged against the nearest, {d['label']}, "
           f"which these probes separate from it:"]
    out += [f"    {p['probe']}: {p['finding']}" for p in d["separating"][:SEPARATING_SHOWN]]
    if len(d["separating"]) > SEPARATING_SHOWN:
        out.append(f"    ... and {len(d['separating']) - SEPARATING_SHOWN} more (report.json: inferred)")
    return out


# --- probes --------------------------------------------------------------------------------------

def probe_cases(target, dtypes) -> list:
    """The matrix rows, shortened to PROBE_STEPS, that the target can run, discriminating ones first."""
    from ..checking import cases as C
    out = []
    for dtype in dtypes:
        if dtype not in target.dtypes:
            continue
        rows = [c for c in C.cases(target.optimizer, (dtype,), PROBE_STEPS) if c.options <= target.options]
        if dtype != "float32":
            rows = [c for c in rows if c.regime in LOW_PRECISION_REGIMES]
        rank = {r: i for i, r in enumerate(FIRST_REGIMES)}
        out += sorted(rows, key=lambda c: rank.get(c.regime, len(rank)))
    return out


# The probe running now (monotonic start, case name), read by the --probe-timeout watchdog; its
# limit (None: not watched) arms faulthandler per probe as a GIL-free last resort.
_running: list = [None, ""]
_probe_limit_s: list = [None]


@contextlib.contextmanager
def watched(name: str):
    """Run the body as one probe under the --probe-timeout watchdog (watch_probes)."""
    import faulthandler
    limit = _probe_limit_s[0]
    _running[:] = [time.monotonic(), name]
    if limit:
        faulthandler.dump_traceback_later(limit + BACKSTOP_S, exit=True)
    try:
        yield
    finally:
        _running[:] = [None, ""]
        if limit:
            faulthandler.cancel_dump_traceback_later()


def run_probe(target, case, seed: int, device: str, verdict_only: bool = False) -> Probe:
    """verdict_only: the caller needs only whether the probe passes (and is evidence), not every
    finding: the run stops at its first failing step (run_case's fail_fast). A failure that listed
    defects account for is run again in full, since only the whole run says whether every check
    it fails is listed. A target that would crash at a later step makes the early failure evidence
    where the full run was no evidence (an error row): a candidate already wrong before the crash."""
    from ..checking.explain import describe
    from ..checking.case_run import run_case
    with watched(case.name):
        res = run_case(target, case, seed, device, checks=PROBE_CHECKS, fail_fast=verdict_only)
    if verdict_only and res.status == "fail" and known_defects(target.name, case.name, res):
        return run_probe(target, case, seed, device)
    if res.status == "pass":
        return Probe(case.name, True)
    if res.status == "skip":
        return Probe(case.name, True, res.reason, skipped=True)
    if res.status == "error":
        # the target raised: a crash under every candidate alike (torch Adafactor on an empty param)
        # tells no convention from another; the judged run reports it
        return Probe(case.name, False, res.reason, skipped=True)
    defects = known_defects(target.name, case.name, res)
    if defects:
        # a listed defect of this target fails the probe under every candidate alike: no evidence
        # (the judged run reports it as known, and as fixed once it stops failing)
        return Probe(case.name, False, defects, skipped=True)
    return Probe(case.name, False, describe(res))


SCREEN = True  # off: every candidate's probes are real runs (tests/test_infer.py compares the two)


class Screen:
    """Judges a candidate convention on a probe from a recorded run of the target, without running it
    again. The candidates of one search differ only in what judges the target (its convention and
    precision axes), never in how it runs, so the target's run of a probe case is recorded once
    (run_case's `record`: its state before and after each checked step, and at the end) and each
    candidate's checks are replayed on it (case_run.replay_case): lockstep, counters, schema and
    trajectory from the oracle under that candidate; finite and bounds, which read only the target's
    run, are the recording's. That is the verdict the candidate's own run would reach. The run is
    recorded twice and used only if both are the same bit for bit (a target that does not repeat
    itself is never screened); a recording that failed finite or bounds, or did not run every step,
    is not used; nor one of a target whose probe failures a known defect may account for (run_probe
    treats those differently). A replay the oracle refuses (it raises) is left to a real run."""

    def __init__(self, seed: int, device: str):
        self.seed, self.device = seed, device
        self.recorded: dict = {}  # case name -> (groups, steps, end, finite and bounds), or None: not screenable

    def judge(self, target, case) -> Probe | None:
        """The Probe `target`'s own verdict-only run of `case` would give; None: run it."""
        from ..checking.case_run import CaseResult, replay_case
        from ..checking.explain import describe
        from ..measuring.checks import CheckResult
        rec = self.recording(target, case)
        if rec is None:
            return None
        groups, steps, end, recorded, fingerprint = rec
        key = (fingerprint, judged_by(target), case.name, case.steps, self.seed)
        if key in _JUDGED:
            return _JUDGED[key]
        res = {name: CheckResult(name) for name in PROBE_CHECKS if name not in recorded} | recorded
        try:
            with watched(case.name):
                replay_case(target, case, self.seed, groups, steps, end, res, fail_fast=True)
        except Exception:  # noqa: BLE001 - the oracle refuses this convention here: the real run says how
            return None
        if all(c.passed for c in res.values()):
            probe = Probe(case.name, True)
        else:
            result = CaseResult(target.name, case.name, case.optimizer, case.dtype, case.group_hparams(), self.seed,
                                case.steps, status="fail", checks={name: res[name] for name in PROBE_CHECKS})
            probe = Probe(case.name, False, describe(result))
        if len(_JUDGED) >= JUDGED_KEPT:
            _JUDGED.clear()
        _JUDGED[key] = probe
        return probe

    def recording(self, target, case):
        if case.name not in self.recorded:
            self.recorded[case.name] = self._record(target, case)
        return self.recorded[case.name]

    def _record(self, target, case):
        from ..checking import known
        from ..checking.case_run import run_case
        if any(known.note(target.name, check, case.name) for check in (*PROBE_CHECKS, "error")):
            return None
        runs = []
        for _ in range(2):
            record: list = []
            with watched(case.name):
                result = run_case(target, case, self.seed, self.device, checks=PROBE_CHECKS, record=record)
            if result.status not in ("pass", "fail") or len(record) != case.steps + 2:
                return None  # skipped, refused or raised: not every step was recorded
            if not (result.checks["finite"].passed and result.checks["bounds"].passed):
                return None  # every candidate fails alike; the real run says where first
            runs.append(record)
        (groups, *steps, end), (_, *again, end2) = runs
        same = end[1] == end2[1] and same_snapshot(end[2], end2[2]) and all(
            k1 == k2 and same_snapshot(b1, b2) and same_snapshot(a1, a2)
            for (k1, _, b1, a1), (k2, _, b2, a2) in zip(steps, again))
        if not same:
            return None
        # what the judgement reads of the recording, as bytes: equal bytes, equal recordings
        shapes = [[tuple(p.shape) for p in g["params"]] for g in groups]
        fingerprint = hashlib.sha256(pickle.dumps((shapes, steps, end), protocol=5)).digest()
        return groups, steps, end, {n: result.checks[n] for n in ("finite", "bounds")}, fingerprint


# A probe's verdict on a recording is a function of the recording, of what judges the target and of
# the case: remembered per process by the recording's bytes, so a target that runs a probe exactly as
# an earlier one did (a mutant away from its defect, the same class under another name) is judged
# there without its oracle replayed (run_all's mutants: most of their probes).
_JUDGED: dict = {}
JUDGED_KEPT = 100_000
UNJUDGING = ("name", "notes")  # the Target fields no check reads


def judged_by(target) -> tuple:
    """What of a target its checks read (all but its name, its notes and its callables)."""
    return tuple((f.name, v) for f in fields(target)
                 if f.name not in UNJUDGING and not callable(v := getattr(target, f.name)))


def same_snapshot(a, b) -> bool:
    """Two readbacks of a target's state hold the same values bit for bit (NaNs alike), dtypes and counters."""
    import numpy as np

    def arrays(x, y):
        return x.shape == y.shape and np.array_equal(x.view(np.uint64) if x.dtype == np.float64 else x,
                                                     y.view(np.uint64) if y.dtype == np.float64 else y)
    if (a.dtypes, a.param_steps, a.group_steps, a.extra_keys) != (b.dtypes, b.param_steps, b.group_steps, b.extra_keys):
        return False
    for pa, pb, sa, sb in zip((p for g in a.params for p in g), (p for g in b.params for p in g),
                              (s for g in a.state for s in g), (s for g in b.state for s in g)):
        if not arrays(np.asarray(pa), np.asarray(pb)) or sa.keys() != sb.keys():
            return False
        if not all(arrays(np.asarray(sa[key]), np.asarray(sb[key])) for key in sa):
            return False
    return True


def known_defects(target: str, case: str, res) -> str:
    """The known-defect notes (reports/known.toml, or --known's file) that account for every check
    `res` fails; "" when any failing check is unaccounted for."""
    from ..checking import known
    notes = [known.note(target, check, case) for check in known.failing_checks(res)]
    return "; ".join(dict.fromkeys(notes)) if notes and all(notes) else ""


def explains(target, probes, seed: int, device: str, stop_early: bool = True, runs: list | None = None,
             screen: "Screen | None" = None) -> list:
    """The probes `target` fails (at most one when stop_early); `runs` counts the probe runs (a probe a
    screen judges counts as one). A probe the constructor refuses is no evidence; when it refuses every
    one, that is the failure."""
    failed, skipped = [], []
    for case in probes:
        p = screen.judge(target, case) if screen is not None and stop_early else None
        p = p or run_probe(target, case, seed, device, verdict_only=stop_early)
        if runs is not None:
            runs.append(case.name)
        if p.skipped:
            skipped.append(p)
        elif not p.passed:
            failed.append(p)
            if stop_early:
                break
    if probes and len(skipped) == len(probes):
        return [Probe(skipped[0].name, False, f"no probe ran: {skipped[0].finding}")]
    return failed


# --- candidates ----------------------------------------------------------------------------------

def conventions_for(optimizer: str, declared_conv=None) -> list[tuple[str, object]]:
    """(name, convention) candidates, legitimate forms first and most common first: every catalog
    preset that is no deviation (oracle.forms), then the forms one option away from the reference
    or from one of those presets, then two options away from the reference (MAX_FORMS in all); each
    crossed with the counter locations. A declared convention is the only one."""
    if declared_conv is not None:
        from ..targets.conventions import named
        return [(named(optimizer, declared_conv) or "declared", declared_conv)]
    import oracle
    spec = oracle.SPECS[optimizer]
    legit, _ = presets(spec)
    bases = [("reference", spec.reference)] + legit
    out = Unique()
    for name, conv in legit:
        out.add(name, conv)
    for base_name, base in bases:
        for option, value in single_changes(spec, base, legitimate=True):
            out.add(f"{base_name}+{option}={value!r}", replace(base, **{option: value}))
    for (o1, v1), (o2, v2) in pairs(single_changes(spec, spec.reference, legitimate=True)):
        out.add(f"reference+{o1}={v1!r}+{o2}={v2!r}", replace(spec.reference, **{o1: v1, o2: v2}))
    return out.items[:MAX_FORMS]


def deviations_for(optimizer: str) -> list[tuple[str, object]]:
    """The deviation candidates, tried only once every legitimate form has failed: the catalog's
    deviation presets (each named after the library that ships it), then each deviation value one
    option away from the reference and from every legitimate preset."""
    import oracle
    spec = oracle.SPECS[optimizer]
    legit, devs = presets(spec)
    out = Unique()
    for name, conv in devs:
        out.add(name, conv)
    for base_name, base in [("reference", spec.reference)] + legit:
        for option, value in single_changes(spec, base, legitimate=False):
            out.add(f"{base_name}+{option}={value!r}", replace(base, **{option: value}))
    return out.items[:MAX_FORMS]


# Candidates per search (each costs at least one short probe run; most fail the first one).
MAX_FORMS = 400
# Options not searched as forms: the counter location is crossed with every candidate, and the
# counter's dtype is probed on its own by the long-horizon scenario (counter_format below).
CROSSED = ("counter", "counter_format")


class Unique:
    """(name, convention) pairs in insertion order, each convention once per counter location."""

    def __init__(self):
        self.items, self.seen = [], set()

    def add(self, name, conv):
        for counter in dict.fromkeys((conv.counter, *COUNTERS)):
            try:
                c = replace(conv, counter=counter)
            except ValueError:
                continue
            if c not in self.seen:
                self.seen.add(c)
                self.items.append((name, c))


def presets(spec) -> tuple[list, list]:
    """The catalog presets of this optimizer: (legitimate ones, deviations)."""
    from oracle import forms

    from ..targets.conventions import catalog
    mine = [(name, conv) for name, (opt, conv) in catalog().items() if opt == spec.name]
    return ([p for p in mine if forms.kind(spec, p[1]) != forms.DEVIATION],
            [p for p in mine if forms.kind(spec, p[1]) == forms.DEVIATION])


def single_changes(spec, base, legitimate: bool) -> list[tuple[str, object]]:
    """(option, value) for every value of every searched option other than base's, of the legitimate
    kinds (equivalent, variant) or of the deviation kind; only values that make a valid convention
    with base's other options."""
    from oracle import forms
    out = []
    for option, table in spec.forms.items():
        if option in CROSSED:
            continue
        for value, form in table.items():
            value = form.needs.get(option, value) if value == forms.OTHER else value
            if value == getattr(base, option) or (form.kind == forms.DEVIATION) == legitimate:
                continue
            try:
                replace(base, **{option: value, **{k: v for k, v in form.needs.items() if k != option}})
            except ValueError:
                continue
            out.append((option, value))
    return out


def pairs(changes):
    """Every pair of changes to two different options."""
    return [(a, b) for i, a in enumerate(changes) for b in changes[i + 1:] if a[0] != b[0]]


def precisions(declared: dict) -> list[tuple]:
    keep = [(c, s, m) for c, s, m in PRECISIONS
            if declared.get("compute", c) == c and declared.get("state_dtype", s) == s
            and declared.get("masters", m) == m]
    return keep or [(declared.get("compute", "float32"), declared.get("state_dtype", "param"),
                     declared.get("masters", False))]


def infer(target, device: str = "cpu", seed: int = 0, declared: dict | None = None, dtypes=None) -> Inference:
    """Fingerprint `target` (its declared axes fixed; see module docstring); `dtypes` limits the
    low-precision probes to the param dtypes that will be judged (default: all)."""
    t0 = time.perf_counter()
    declared = declared or {}
    inf = Inference(target.name, target.optimizer, declared=tuple(sorted(declared)))
    fp32 = probe_cases(target, ("float32",))
    low = probe_cases(target, [d for d in ("bfloat16", "float16") if dtypes is None or d in dtypes])
    compute0, state0, masters0 = precisions(declared)[0]
    # state kept under other names is named by value first, so that every candidate reads it
    from ..checking import statenames
    if target.state_names:
        names = target.state_names
    else:
        probe = statenames.probe_case(target, fp32)
        with watched(f"state names on {probe.name}" if probe else "state names"):
            names = statenames.found(target, fp32, seed, device)
    inf.state_names = names

    runs: list = []
    # the candidates share how the target runs (they differ in what judges it): one recorded run per probe serves all
    screen = Screen(seed, device) if SCREEN else None

    def judge(cand, probes, screen=None):
        inf.tried += 1
        return explains(apply(target, replace(cand, state_names=names)), probes, seed, device, runs=runs,
                        screen=screen)

    # 1. the arithmetic convention, on float32 probes (where the precision axes do not matter):
    # every legitimate form first, a library's deviation only when none explains the target
    passing, scored = [], []
    groups = [conventions_for(target.optimizer, declared.get("convention"))]
    if "convention" not in declared:
        groups.append(deviations_for(target.optimizer))
    for group in groups:
        for preset, conv in group:
            cand = Candidate(preset, conv, compute0, state0, masters0)
            failed = judge(cand, fp32, screen)
            if failed:
                scored.append((cand, failed))
            else:
                passing.append(cand)
        if passing:
            break
    target = replace(target, state_names=names)
    if not passing:
        inf.nearest, inf.separating = nearest(target, scored, fp32, seed, device, runs)
        return done(inf, runs, t0)
    best = passing[0]
    # (the precision axes are settled for the first only: the others are named by preset and counter)
    inf.also = [f"{c.preset} counter={c.convention.counter}" for c in passing[1:]]
    # 2. the precision axes, on bf16/fp16 probes
    chosen = None
    tried_low = []
    for compute, state, masters in precisions(declared):
        cand = replace(best, compute=compute, state_dtype=state, masters=masters)
        failed = judge(cand, low, screen) if low else []
        if not failed:
            chosen = cand
            break
        tried_low.append((cand, failed))
    if chosen is None:
        inf.nearest, inf.separating = nearest(target, tried_low, low, seed, device, runs)
        return done(inf, runs, t0)
    # 3. the counter's dtype: a float32 counter stops at 2**24 (long-horizon scenario)
    if "convention" not in declared:
        chosen = counter_format(target, chosen, seed, device)
    inf.chosen = chosen
    return done(inf, runs, t0)


def done(inf: Inference, runs: list, t0: float) -> Inference:
    inf.probes, inf.seconds = len(runs), time.perf_counter() - t0
    if inf.state_names:
        inf.chosen = inf.chosen and replace(inf.chosen, state_names=inf.state_names)
        inf.nearest = inf.nearest and replace(inf.nearest, state_names=inf.state_names)
    return inf


def nearest(target, scored, probes, seed, device, runs):
    """Of (candidate, failed probes) pairs, each stopped at its first failing probe: the one that got
    furthest through the probes (the first in catalog order on a tie), with every probe it fails."""
    order = [c.name for c in probes]
    cand = max(scored, key=lambda cf: order.index(cf[1][0].name))[0]
    return cand, explains(apply(target, cand), probes, seed, device, stop_early=False, runs=runs)


def counter_format(target, cand: Candidate, seed: int, device: str) -> Candidate:
    """The candidate with a float32 step counter when its counter stops at exactly 2**24 and nothing
    else in the long-horizon scenario differs (but the values at that horizon, where the update reads
    t: ASGD's schedule), and the float32 form then passes it; unchanged otherwise (a counter failing
    elsewhere stays a failure)."""
    from ..scenarios.long_horizon import run_long_horizon
    if not hasattr(cand.convention, "counter_format"):
        return cand
    res = run_long_horizon(apply(target, cand), device, seed)
    failed = {n for n, c in res.checks.items() if not c.passed}
    if res.status != "fail" or SATURATION not in failed or not failed <= {SATURATION, SATURATION_VALUES}:
        return cand
    if not all(f.got == 2 ** 24 for f in res.checks[SATURATION].findings if f.got is not None):
        return cand
    f32 = replace(cand, convention=replace(cand.convention, counter_format="float32"))
    return f32 if run_long_horizon(apply(target, f32), device, seed).status == "pass" else cand


# --- failing rows that teach -----------------------------------------------------------------------

ATTRS = {"compute": "ORACLE_COMPUTE", "state_dtype": "ORACLE_STATE_DTYPE", "masters": "ORACLE_MASTERS"}
AXIS_WORDS = {("compute", "storage"): "storage-dtype arithmetic (every operation rounded to the param dtype)",
              ("compute", "float32"): "float32 arithmetic", ("state_dtype", "float32"): "float32 state",
              ("state_dtype", "param"): "state in the param's dtype", ("masters", True): "FP32 master weights",
              ("masters", False): "no master weights"}


def single_axis_changes(target, dtype: str) -> list[tuple[str, object, object]]:
    """(axis, value, target judged with that one axis changed), for every axis of the target's convention
    and the precision axes, the values real implementations use (the catalog's) and no others."""
    from ..targets.conventions import catalog
    out = []
    if dtype != "float32":
        out.append(("compute", "storage" if target.compute == "float32" else "float32", None))
        out.append(("state_dtype", "float32" if target.state_dtype == "param" else "param", None))
        out.append(("masters", not target.masters, None))
    out = [(axis, value, replace(target, **{axis: value})) for axis, value, _ in out]
    conv = target.convention
    for f in fields(conv):
        values = [getattr(c, f.name) for opt, c in catalog().values() if type(c) is type(conv)]
        if isinstance(getattr(conv, f.name), bool):
            values.append(not getattr(conv, f.name))
        for value in dict.fromkeys(values):
            if value != getattr(conv, f.name):
                out.append((f"convention.{f.name}", value, replace(target, convention=replace(conv, **{f.name: value}))))
    return out


def teach(target, case, seed: int, device: str, failing=()) -> str:
    """For a failing matrix row: the single-axis change of convention under which the same case passes
    every check, in words a person can act on; "" when none does, or when a check no convention may
    excuse (a non-finite value, a write outside a tensor) is among the `failing` ones."""
    from ..checking.case_run import run_case
    if set(failing) & set(UNEXCUSABLE):
        return ""
    for axis, value, alt in single_axis_changes(target, case.dtype):
        if run_case(alt, case, seed, device, checks=PROBE_CHECKS, fail_fast=True).status != "pass":
            continue
        if axis.startswith("convention."):
            name = axis.split(".", 1)[1]
            return (f"passes with {name}={value!r} instead of {getattr(target.convention, name)!r}; declare "
                    f"ORACLE_CONVENTION = {type(target.convention).__module__}."
                    f"{replace(target.convention, **{name: value})!r} if intended")
        words = AXIS_WORDS.get((axis, value), f"{axis}={value!r}")
        return f"passes as {words}; declare {ATTRS[axis]} = {value!r} if intended"
    return ""


# --- command line ----------------------------------------------------------------------------------

PROBE_EXIT = 3  # a probe ran past --probe-timeout
BACKSTOP_S = 10.0  # faulthandler ends a probe this long after the watchdog should have


def watch_probes(limit_s: float, poll_s: float = 0.5) -> None:
    """A daemon thread that ends this process (status PROBE_EXIT, the probe named on stderr) when one
    probe has run longer than `limit_s`: a step that never returns holds the main thread, so only
    another thread can notice. A step stuck in native code that holds the GIL stops that thread
    too: faulthandler's timer (its own C thread) then ends the process a little later, with every
    thread's traceback on stderr."""
    import threading
    _probe_limit_s[0] = limit_s

    def watch():
        while True:
            time.sleep(poll_s)
            started, name = _running
            if started is not None and time.monotonic() - started > limit_s:
                print(f"error: probe {name} ran past {limit_s:g} s (the --timeout of one case)", file=sys.stderr,
                      flush=True)
                os._exit(PROBE_EXIT)
    threading.Thread(target=watch, name="probe-timeout", daemon=True).start()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m oracle.compare.inference.infer",
                                description="Fingerprint an optimizer and print the convention it follows.")
    p.add_argument("target", metavar="MODULE:NAME|TARGET", help="an optimizer class, or a target's name")
    p.add_argument("--optimizer", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--probe-timeout", type=float, default=None, metavar="S",
                   help="give up (exit 3) when one probe runs longer than this: the CLI passes its --timeout, "
                        "so a hanging optimizer costs one case's time here, not the whole inference budget")
    args = p.parse_args(argv)
    if args.probe_timeout:
        watch_probes(args.probe_timeout)
    from ..checking import case_run as run
    from ..isolation import tamper  # noqa: F401 - loaded before the snapshot, as in a worker
    from ..targets.declare import ENV
    from ..targets.user_impl import declared_axes, load_impl, resolve
    os.environ.pop(ENV, None)  # judge it afresh, not as an earlier inference left it
    clean = tamper.snapshot()  # before the target's module is imported
    try:
        if ":" in args.target:
            target = load_impl(args.target, optimizer=args.optimizer, inferred=False)
            declared = declared_axes(resolve(args.target))
        else:
            from ..registry import find
            target, declared = find(args.target, args.optimizer), {}
    except (ValueError, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    inf = infer(target, args.device, args.seed, declared=declared)
    changes = tamper.changed(clean)
    if changes:  # its probes ran against what it changed: no inference is worth reporting
        print(f"error: {tamper.reason(changes)}", file=sys.stderr)
        return 4
    print(json.dumps(inf.to_json(), indent=1) if args.json else "\n".join(inf.lines()))
    return 0 if inf.chosen is not None else 1


if __name__ == "__main__":
    from ..isolation.processes import behind_shield, die_with_launcher, exit_now
    die_with_launcher()  # started by the CLI: do not outlive it
    behind_shield()  # the target's code runs here: a signal to its parent must not reach the CLI
    exit_now(main())  # the CLI waits for this exit: not a second of torch's teardown
