"""Comparisons against the oracle and what a failure looks like.

Tolerances are per element and derived (oracle.compare.measuring.errmodel): the running error
bound of the oracle's own expression evaluated in the target's compute
dtype, doubled, plus the rounding of the stored result. Errors are reported
in ULPs of the storage dtype taken at the operand magnitude
(max(|old|, |new|)), which stays meaningful where the result cancels.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from oracle.storage import FORMATS, component, quantum

# An implementation may evaluate the specification's expression in another,
# algebraically equal order (torch's lerp for m, lr/bc1 folded into one
# scalar, sqrt(v)/sqrt(bc2) vs sqrt(v/bc2)): each reordering moves at most one
# rounding per operation, which a factor of 2 on the first-order bound covers.
REORDER_FACTOR = 2.0

# Per-element errors of the worst step, counted in ULP bins (report.html's histogram): exactly 0,
# (0, 2^-8), then one bin per power of two [2^k, 2^(k+1)) up to [2^24, inf) (inf/NaN included).
HIST_EDGES = (0.0, *(2.0 ** k for k in range(-8, 25)))
_EDGES = np.array(HIST_EDGES)
_BY_EXPONENT = 1024  # from this many elements on, bins are read off the exponent (histogram_bins)
_OFFSET = 1 - int(np.log2(HIST_EDGES[1]))  # x in [2^(k-1), 2^k) has k + _OFFSET edges <= x


def histogram_bins(errors: np.ndarray) -> np.ndarray:
    """Each error's HIST_EDGES bin: 0 for an exact 0, len(HIST_EDGES) for inf and NaN, else the number
    of edges <= it. The edges past 0 are powers of two, so a large array's bins are its exponents
    (x in [2^(k-1), 2^k): bin k + _OFFSET, clipped to the first and last bins), one pass instead of a binary
    search per element; a small one searches (fewer NumPy calls). Both give the same bins
    (tests/test_compare_tensors.py)."""
    if errors.size < _BY_EXPONENT:
        bins = np.searchsorted(_EDGES, np.where(np.isnan(errors), np.inf, errors), side="right")
    else:
        _, exponent = np.frexp(errors)
        bins = np.clip(exponent + _OFFSET, 1, len(HIST_EDGES))
        bins[~np.isfinite(errors)] = len(HIST_EDGES)
    bins[errors <= 0] = 0
    return bins


# Row statuses that fail a run: a numerical or exact check failed, the target raised, the row passed
# only under a library's deviation (oracle.compare.checking.deviation), or no legitimate form explains the
# target (oracle.compare.inference.infer) and the row fails under the nearest one. RAN: the row ran to its end.
FAILING = ("fail", "error", "deviation", "unexplained")
RAN = ("pass", "fail", "deviation", "unexplained")
STATUSES = ("pass", *FAILING, "skip")


# Check names by severity, most severe first: a row's one-line reason leads with its most severe
# failing check and failure listings put the most severe rows first (oracle.compare.checking.explain). Silent
# corruption outranks a loud crash, a crash outranks wrong bookkeeping, and a result a little off the
# numerical bound ranks last. "deviation" is a row status (numerics pass, the convention is a
# library deviation), ranked here by name. A scenario's suffixed name ("counters@16777216") ranks by
# its prefix; a name not listed ranks with the numerical checks (lockstep, trajectory, masters, ...).
SEVERITY = (
    ("bounds",),            # memory outside a tensor written (oracle.compare.checking.guards)
    ("finite",),            # non-finite output from finite input (oracle.compare.checking.finite)
    ("inputs_unchanged",),  # the caller's grads or hyperparameters modified
    ("error",),             # the target raised or crashed
    ("counters", "schema", "roundtrip", "checkpoint", "checkpoint_init", "resume", "cross", "flags",
     "capturable", "reshard", "state", "hparams", "lr", "found_inf", "construction", "wrapper",
     "eager_state", "eager_init", "sync"),  # bookkeeping, state layout, checkpoints: exact checks
    ("deviation",),         # numerics pass, the convention is a library deviation
)
NUMERIC_RANK = len(SEVERITY)  # lockstep, trajectory and every name not in SEVERITY
_RANK = {name: rank for rank, names in enumerate(SEVERITY) for name in names}


def severity(name: str) -> int:
    """A check name's rank in SEVERITY (0: most severe); suffixed names rank by their prefix."""
    return _RANK.get(str(name).split("@", 1)[0], NUMERIC_RANK)


@dataclass
class Finding:
    """One element that failed a check: enough to locate and fix it."""

    check: str
    step: int | None
    tensor: str
    index: tuple | None = None
    expected: object = None
    got: object = None
    error_ulps: float | None = None
    bound_ulps: float | None = None
    detail: str = ""


@dataclass
class CheckResult:
    check: str
    passed: bool = True
    compared: int = 0           # elements (or counters) compared
    worst_ratio: float = 0.0    # max error / bound
    worst_error: float = 0.0    # ULPs, at the worst ratio
    worst_bound: float = 0.0
    power: float = float("inf")  # smallest relative update error that would be caught
    unbounded: int = 0          # elements whose result the compute precision does not determine
    findings: list = field(default_factory=list)
    note: str = ""
    # step -> [worst ratio, its error ULPs, its bound ULPs] over that step's tensors (report.html plots)
    series: dict = field(default_factory=dict)
    # step -> element counts per HIST_EDGES bin (len(HIST_EDGES) + 1: the exact zeros first); only the
    # worst step is kept (and the step being filled)
    histogram: dict = field(default_factory=dict)

    def fail(self, finding: Finding, keep: int = 5) -> None:
        self.passed = False
        if len(self.findings) < keep:
            self.findings.append(finding)

    def worst_step(self):
        """The step whose worst element has the highest error/bound ratio (None before any)."""
        return max(self.series, key=lambda k: self.series[k][0], default=None)

    def record(self, step, ratio: float, error_ulps: float, bound_ulps: float, errors_ulps) -> None:
        """One tensor compared at `step`: its worst element (ratio, error, bound) and every element's
        error in ULPs (finite-bound elements only)."""
        if step is None:
            return
        self.record_worst(step, ratio, error_ulps, bound_ulps)
        self.count_errors(step, errors_ulps)

    def record_worst(self, step, ratio: float, error_ulps: float, bound_ulps: float) -> None:
        """record's first half: the step's worst element; a step seen for the first time takes a histogram
        row, and only the worst step's row is kept besides it."""
        if step not in self.series or ratio > self.series[step][0]:
            self.series[step] = [ratio, error_ulps, bound_ulps]
        if step not in self.histogram:
            worst = self.worst_step()
            self.histogram = {k: v for k, v in self.histogram.items() if k == worst}
            self.histogram[step] = [0] * (len(HIST_EDGES) + 1)

    def count_errors(self, step, errors_ulps) -> None:
        """record's second half: per-element errors (ULPs) added to the step's histogram row."""
        added = np.bincount(histogram_bins(np.asarray(errors_ulps, dtype=np.float64).ravel()),
                            minlength=len(HIST_EDGES) + 1)
        self.histogram[step] = (np.asarray(self.histogram[step]) + added).tolist()

    def merge_measures(self, other: "CheckResult", step_offset: int = 0) -> None:
        """Take another CheckResult's worst element, series and histogram (scenarios merging ranks)."""
        if other.worst_ratio >= self.worst_ratio:
            self.worst_ratio, self.worst_error, self.worst_bound = other.worst_ratio, other.worst_error, other.worst_bound
        for k, v in other.series.items():
            if k + step_offset not in self.series or v[0] > self.series[k + step_offset][0]:
                self.series[k + step_offset] = list(v)
        worst = self.worst_step()
        self.histogram = {k + step_offset: v for k, v in other.histogram.items() if k + step_offset == worst} \
            or {k: v for k, v in self.histogram.items() if k == worst}


def coarser(storage: str, compute: str) -> bool:
    return FORMATS[component(storage)][0] < FORMATS[component(compute)][0]


def tolerance(bound_err, expected, storage: str, compute: str) -> np.ndarray:
    """Absolute tolerance per element: reordering-safe compute bound plus the
    store rounding (half a ULP of the stored format) when storing loses bits."""
    store = 0.5 * quantum(expected, storage) if coarser(storage, compute) else 0.0
    return REORDER_FACTOR * np.asarray(bound_err) + store


def compare_tensor(result: CheckResult, step, tensor: str, expected, got, old, tol, storage: str,
                   power: bool = True) -> None:
    """Elementwise |got - expected| <= tol; records worst ratio, detection power
    (min tol/|expected - old|) and the worst failing element."""
    compare_tensors(result, step, [(tensor, expected, got, old, tol, storage, power)])


@dataclass
class _Segment:
    """One tensor of compare_tensors: its place in the concatenation and what its records need."""

    tensor: str
    shape: tuple
    start: int
    stop: int
    storage: str
    power: bool


def compare_tensors(result: CheckResult, step, items) -> None:
    """compare_tensor over several tensors, items = [(tensor, expected, got, old, tol, storage, power)]:
    the same effect on `result` as comparing them one by one in order (the same findings in the same
    order, worst element, detection power, series and histogram), with the elementwise work done once
    over all of them concatenated. A step's params and state are small tensors, so comparing costs per
    NumPy call rather than per element: one pass instead of one per tensor."""
    order: list = []  # per item in order: a shape Finding, or its segment's index in `segments`
    segments: list[_Segment] = []
    parts: tuple[list, list, list, list] = ([], [], [], [])
    n = 0
    for tensor, expected, got, old, tol, storage, power in items:
        expected, got, old = (np.asarray(x, dtype=np.float64) for x in (expected, got, old))
        if expected.shape != got.shape:
            order.append(Finding(result.check, step, tensor, detail=f"shape {got.shape}, expected {expected.shape}"))
            continue
        if expected.size == 0:
            continue
        tol = np.asarray(tol, dtype=np.float64)
        for part, x in zip(parts, (expected, got, old, tol)):
            part.append((x if x.shape == expected.shape else np.broadcast_to(x, expected.shape)).ravel())
        order.append(len(segments))
        segments.append(_Segment(tensor, expected.shape, n, n + expected.size, storage, power))
        n += expected.size
    m = _measure(*(p[0] if len(p) == 1 else np.concatenate(p) for p in parts), segments) if segments else None
    for item in order:
        if isinstance(item, Finding):
            result.fail(item)
        else:
            _record_segment(result, step, segments[item], m)
    if m is not None:
        result.unbounded += m["unbounded"]
        result.compared += n - m["unbounded"]
        if m["power"] is not None:
            result.power = min(result.power, m["power"])
        if step is not None:
            result.count_errors(step, m["errors"] if m["every_bounded"] else m["errors"][m["bounded"]])


def _measure(expected, got, old, tol, segments: list[_Segment]) -> dict:
    """The elementwise part of compare_tensors on flat, concatenated arrays: each element's error/bound
    ratio (0 where equal or unbounded, inf where non-finite and unequal), its error in ULPs of its
    tensor's storage at the operand magnitude, and the detection power over the tensors that count it."""
    bounded = np.isfinite(tol)
    every_bounded = bool(bounded.all())
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        diff = np.abs(got - expected)
        same = got == expected
        nan_got = np.isnan(got)
        if np.count_nonzero(nan_got):
            same |= nan_got & np.isnan(expected)
        ratio = np.where(same, 0.0, np.where(tol > 0, diff / tol, np.inf))
        ratio[np.isnan(ratio)] = np.inf
        if not every_bounded:
            ratio[~bounded] = 0.0  # no bound derivable: not compared, counted
        power = None
        if any(s.power for s in segments):  # exact identities (param = rounded master) say nothing about update errors
            delta = np.abs(expected - old)
            power_at = np.where((delta > 0) & np.isfinite(delta), tol / delta, np.inf)
            for s in segments:
                if not s.power:
                    power_at[s.start:s.stop] = np.inf
            power = float(np.min(power_at))
        scale = np.maximum(np.abs(old), np.abs(expected))
        storages = {s.storage for s in segments}
        if len(storages) == 1:
            q = quantum(scale, segments[0].storage)
        else:
            q = np.empty_like(scale)
            for s in segments:
                q[s.start:s.stop] = quantum(scale[s.start:s.stop], s.storage)
        errors = np.where(same, 0.0, diff / q)  # = scaled_ulps, for every element at once
    errors[np.isnan(errors)] = np.inf
    return {"expected": expected, "got": got, "tol": tol, "ratio": ratio, "q": q, "errors": errors,
            "bounded": bounded, "every_bounded": every_bounded, "power": power,
            "unbounded": 0 if every_bounded else int(np.sum(~bounded))}


def _record_segment(result: CheckResult, step, s: _Segment, m: dict) -> None:
    """One tensor's worst element, series point and finding (compare_tensor's per-tensor part)."""
    ratio = m["ratio"][s.start:s.stop]
    flat = int(np.argmax(ratio))
    at = s.start + flat
    worst = float(ratio[flat])
    err_ulps, bound_ulps = float(m["errors"][at]), float(m["tol"][at] / m["q"][at])
    if worst >= result.worst_ratio:
        result.worst_ratio, result.worst_error, result.worst_bound = worst, err_ulps, bound_ulps
    if step is not None:
        result.record_worst(step, worst, err_ulps, bound_ulps)
    if worst > 1.0:
        idx = np.unravel_index(flat, s.shape)
        result.fail(Finding(
            result.check, step, s.tensor, tuple(int(i) for i in idx), float(m["expected"][at]), float(m["got"][at]),
            err_ulps, bound_ulps, f"{int(np.sum(ratio > 1))} of {s.stop - s.start} elements out of bound"))


def compare_exact(result: CheckResult, step, tensor: str, expected, got, detail: str = "") -> None:
    """Counters and other exact quantities."""
    result.compared += 1
    if expected != got:
        result.fail(Finding(result.check, step, tensor, expected=expected, got=got, detail=detail))


def bit_words(t):
    """A tensor's bits as integers of its element size, on the CPU; a complex tensor's per component,
    (re, im) in a last dimension of 2 (complex128 is wider than any integer dtype)."""
    import torch
    t = t.detach().cpu()
    t = torch.view_as_real(t) if t.is_complex() else t
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(width)


def same_bits(a, b) -> bool:
    """Bitwise equality of two tensors (NaNs with equal payloads compare equal)."""
    import torch
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    return bool(torch.equal(bit_words(a), bit_words(b)))
