"""Stochastic rounding of a stored param, judged per element and in distribution.

A target that declares `rounding="stochastic"` (oracle.compare.targets.base.Target) stores the float32
result x of its update in a narrower format by rounding it toward zero or away from zero at random.
torchao 0.18 (`bf16_stochastic_round=True`, optim/quant_utils.py `_fp32_to_bf16_sr`) keeps x's upper
16 bits (toward zero) and adds one bf16 ULP (away from zero) when a uniform 16-bit integer is below x's
low 16 bits: away with probability p = (low 16 bits) / 2^16 = |x - toward(x)| / spacing, exactly.
The expectation of the stored value is then x itself (Connolly, Higham, Mary 2021, "Stochastic
rounding and its probabilistic backward error analysis", SIAM J. Sci. Comput. 43(1)).

1. Exact, per element (`compare_neighbours`, check `rounding`): with v the oracle's float64 value and
   B its derived bound (twice the running compute bound, as the lockstep check uses), the stored value
   s must be a grid neighbour of some value within B of v:

       RD(v - B) <= s <= RU(v + B)          RD / RU: round down / up to the storage grid

   Any other value is a finding; errors in ULPs of the storage format.

2. In distribution, over a case (`distribution_test`): for each element whose interval [v - B, v + B]
   lies inside one grid cell [g0, g1] of one sign, s is g0 or g1 and P(away) lies in [p_lo, p_hi]:
   the interval's distances from the toward-zero end over the cell, widened outward to the 2^-16
   granularity of the random integer (2^-(24 - 8); float32 to fp16 would be 2^-13). Elements whose
   [p_lo, p_hi] is wider than MAX_WIDTH (a bound near the grid spacing) are left out. Elements are
   grouped by the midpoint of their interval into BINS equal bins of [0, 1]; consecutive bins are merged
   until a group's variance bound sum(max p(1-p) over [p_lo, p_hi]) reaches MIN_VARIANCE (a short
   remainder joins the last group; with under MIN_VARIANCE in all, no test is run and the note says so).
   Group j, with A its count of "away" and mu_lo, mu_hi the sums of p_lo, p_hi, fails when

       A > mu_hi + t_j   or   A < mu_lo - t_j,      t_j = L/3 + sqrt(L^2/9 + 2 L s2_j),  L = ln(2G / ALPHA)

   (G groups, two tails each: Bonferroni). t_j is Bernstein's inequality for a sum of independent
   [0, 1] variables, P(|A - mu| >= t) <= 2 exp(-t^2 / (2 (s2 + t/3))), so the family false-alarm rate is
   at most ALPHA = 1e-6 for any sizes, given independent draws (later steps' p depend on earlier
   outcomes, a martingale for which Freedman's inequality gives the same bound at a fixed variance
   level; the data-dependent level and grouping are not accounted for). The normal approximation
   z = norm.isf(ALPHA / 2G) is not used to decide: at a group variance of 25 and p = 0.01 its exact
   binomial tail is 1.8e-6 against the 5e-8 it stands for (scipy.stats.binom; tests/test_stochastic.py).
   The note reports each group's z = (A - mu) / sqrt(s2) and its normal tail for reading.

   Detection power (POWER, measured by tests/test_stochastic.py): with P(away) uniform on (0, 1),
   round-to-nearest is rejected from 367 elements, truncation from 169, a probability read from 15
   bits instead of 16 from 367 (max over 10 seeds); a bias of 2^-16 (comparing <= for <) would need
   about 1e11 and is not detectable. A case of the `blocks` layout gives ~250000 bf16 roundings.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from oracle.storage import FORMATS, canonical, quantum

from .checks import CheckResult, Finding

ALPHA = 1e-6          # family false-alarm rate of the distribution test, per case
BINS = 10             # equal bins of the rounding-away probability
MIN_VARIANCE = 25.0   # a group is tested only once its variance bound reaches this
MAX_WIDTH = 1 / BINS  # wider probability intervals (a bound near the grid spacing) say too little: left out
# detection power: the fewest elements (P(away) uniform on (0, 1), known to 1e-4) at which the test
# rejects each wrong rule, max over seeds 0-9, measured by tests/test_stochastic.py::test_detection_power
# (docs/targets.md). "<=" for "<" (P(away) 2^-16 too high) would need ~1e11: a stated blind spot.
POWER = {"nearest": 367, "truncation": 169, "15-bit probability": 367}


def round_down(x, storage: str) -> np.ndarray:
    """The largest value of the storage grid <= x (x / spacing is exact: a power-of-two scaling)."""
    x = np.asarray(x, dtype=np.float64)
    q = quantum(x, storage)
    return np.floor(x / q) * q


def round_up(x, storage: str) -> np.ndarray:
    """The smallest value of the storage grid >= x."""
    x = np.asarray(x, dtype=np.float64)
    q = quantum(x, storage)
    return np.ceil(x / q) * q


def granularity(storage: str, compute: str) -> float:
    """The step of the rounding probability: one over 2^(bits the store drops)."""
    return 2.0 ** -(FORMATS[canonical(compute)][0] - FORMATS[canonical(storage)][0])


# --- 1. per element ----------------------------------------------------------------------------

def allowed_range(v, bound, storage: str) -> tuple[np.ndarray, np.ndarray]:
    """[RD(v - B), RU(v + B)]: every grid value a stochastic rounding of a value within B of v can be."""
    v = np.asarray(v, dtype=np.float64)
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), v.shape)
    with np.errstate(invalid="ignore"):
        return round_down(v - b, storage), round_up(v + b, storage)


def compare_neighbours(res: CheckResult, step, tensor: str, v, bound, got, old, storage: str) -> None:
    """The exact check: each stored value within allowed_range (module docstring, 1)."""
    v, got, old = (np.asarray(a, dtype=np.float64) for a in (v, got, old))
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), v.shape)
    if got.shape != v.shape:
        res.fail(Finding(res.check, step, tensor, detail=f"shape {got.shape}, expected {v.shape}"))
        return
    if v.size == 0:
        return
    judged = np.isfinite(v) & np.isfinite(bound)   # the finite check owns non-finite results
    lo, hi = allowed_range(np.where(judged, v, 0.0), np.where(judged, bound, 0.0), storage)
    room = np.where(got >= v, hi - v, v - lo)       # how far s may lie on its side of v
    dist = np.abs(got - v)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(dist == 0, 0.0, np.where(room > 0, dist / room, np.inf))
    ratio = np.where(judged, np.nan_to_num(ratio, nan=np.inf), 0.0)
    res.compared += int(judged.sum())
    res.unbounded += int((~judged).sum())
    _record(res, step, tensor, v, got, old, lo, hi, ratio, dist, room, storage)


def _record(res, step, tensor, v, got, old, lo, hi, ratio, dist, room, storage) -> None:
    q = quantum(np.maximum(np.abs(old), np.abs(v)), storage)
    delta = np.abs(v - old)
    with np.errstate(invalid="ignore", divide="ignore"):
        power = np.where((delta > 0) & np.isfinite(delta), np.maximum(hi - v, v - lo) / delta, np.inf)
    res.power = min(res.power, float(np.min(power)))
    worst = int(np.argmax(ratio))
    idx = np.unravel_index(worst, v.shape)
    err, allowed = float(dist[idx] / q[idx]), float(room[idx] / q[idx])
    if ratio[idx] >= res.worst_ratio:
        res.worst_ratio, res.worst_error, res.worst_bound = float(ratio[idx]), err, allowed
    res.record(step, float(ratio[idx]), err, allowed, (dist / q)[np.isfinite(ratio)])
    bad = ratio > 1.0
    if bad.any():
        res.fail(Finding(
            res.check, step, tensor, tuple(int(i) for i in idx), float(v[idx]), float(got[idx]), err, allowed,
            f"stored {float(got[idx])!r} is no {storage} neighbour of a value within the bound of the expected "
            f"{float(v[idx])!r} (allowed [{float(lo[idx])!r}, {float(hi[idx])!r}]); "
            f"{int(bad.sum())} of {v.size} elements"))


# --- 2. in distribution ------------------------------------------------------------------------

def samples(v, bound, got, storage: str, compute: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p_lo, p_hi, away) for the elements whose bound interval lies in one grid cell of one sign and
    whose stored value is one of that cell's ends (module docstring, 2)."""
    v, got = np.asarray(v, dtype=np.float64), np.asarray(got, dtype=np.float64).ravel()
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), v.shape).ravel()
    v = v.ravel()
    ok = np.isfinite(v) & np.isfinite(b)
    lo, hi = v - np.where(ok, b, 0.0), v + np.where(ok, b, 0.0)
    g0, g1 = round_down(np.where(ok, lo, 0.0), storage), round_up(np.where(ok, hi, 0.0), storage)
    cell = g1 - g0
    one_cell = ok & (cell > 0) & (cell == quantum(np.where(g0 >= 0, g0, g1), storage)) & ((g0 >= 0) | (g1 <= 0))
    positive = g0 >= 0
    toward, away_end = np.where(positive, g0, g1), np.where(positive, g1, g0)
    near, far = np.where(positive, lo, -hi), np.where(positive, hi, -lo)   # |x| range of the interval
    with np.errstate(invalid="ignore", divide="ignore"):
        d_lo = (near - np.abs(toward)) / cell
        d_hi = (far - np.abs(toward)) / cell
    step = granularity(storage, compute)
    p_lo = np.clip(np.floor(d_lo / step) * step, 0.0, 1.0)
    p_hi = np.clip(np.ceil(d_hi / step) * step, 0.0, 1.0)
    on_end = (got == toward) | (got == away_end)
    keep = one_cell & on_end
    return p_lo[keep], p_hi[keep], (got == away_end)[keep]


@dataclass
class Samples:
    """The distribution test's data, gathered over a case's steps."""

    p_lo: list = field(default_factory=list)
    p_hi: list = field(default_factory=list)
    away: list = field(default_factory=list)

    def add(self, p_lo, p_hi, away) -> None:
        self.p_lo.append(np.asarray(p_lo, dtype=np.float64))
        self.p_hi.append(np.asarray(p_hi, dtype=np.float64))
        self.away.append(np.asarray(away, dtype=bool))

    def arrays(self):
        cat = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dtype=dt)  # noqa: E731
        return cat(self.p_lo, np.float64), cat(self.p_hi, np.float64), cat(self.away, bool)


def max_variance(p_lo, p_hi) -> np.ndarray:
    """max of p(1 - p) over [p_lo, p_hi] per element (1/4 where the interval holds 1/2)."""
    p_lo, p_hi = np.asarray(p_lo), np.asarray(p_hi)
    ends = np.maximum(p_lo * (1 - p_lo), p_hi * (1 - p_hi))
    return np.where((p_lo <= 0.5) & (p_hi >= 0.5), 0.25, ends)


def groups(p_lo, p_hi, bins: int = BINS, min_variance: float = MIN_VARIANCE) -> list[np.ndarray]:
    """Element indices per tested group: bins of the interval midpoint, merged until each group's
    variance bound reaches min_variance; [] when all of them together do not."""
    mid = (np.asarray(p_lo) + np.asarray(p_hi)) / 2
    which = np.minimum((mid * bins).astype(np.int64), bins - 1)
    var = max_variance(p_lo, p_hi)
    out, current, acc = [], [], 0.0
    for b in range(bins):
        idx = np.flatnonzero(which == b)
        current.append(idx)
        acc += float(var[idx].sum())
        if acc >= min_variance:
            out.append(np.concatenate(current))
            current, acc = [], 0.0
    if current and out:
        out[-1] = np.concatenate([out[-1], *current])
    return out


def bernstein_threshold(variance: float, alpha_each: float) -> float:
    """The t at which Bernstein's two-sided bound 2 exp(-t^2 / (2 (variance + t/3))) equals alpha_each."""
    L = math.log(2.0 / alpha_each)
    return L / 3.0 + math.sqrt(L * L / 9.0 + 2.0 * L * variance)


@dataclass
class GroupResult:
    p_range: tuple      # (smallest p_lo, largest p_hi) of its elements
    n: int
    away: int
    mu_lo: float
    mu_hi: float
    variance: float     # the bound s2
    threshold: float    # t
    z: float            # (A - mu) / sqrt(s2) outside [mu_lo, mu_hi], 0 inside: for reading

    @property
    def rejected(self) -> bool:
        return self.away > self.mu_hi + self.threshold or self.away < self.mu_lo - self.threshold


def distribution_test(p_lo, p_hi, away, alpha: float = ALPHA, bins: int = BINS,
                      min_variance: float = MIN_VARIANCE) -> list[GroupResult]:
    """One GroupResult per tested group (module docstring, 2); [] when nothing can be tested."""
    p_lo, p_hi, away = np.asarray(p_lo), np.asarray(p_hi), np.asarray(away, dtype=bool)
    narrow = p_hi - p_lo <= MAX_WIDTH
    p_lo, p_hi, away = p_lo[narrow], p_hi[narrow], away[narrow]
    found = groups(p_lo, p_hi, bins, min_variance)
    out = []
    for idx in found:
        s2 = float(max_variance(p_lo[idx], p_hi[idx]).sum())
        a, lo, hi = int(away[idx].sum()), float(p_lo[idx].sum()), float(p_hi[idx].sum())
        t = bernstein_threshold(s2, alpha / len(found))
        z = (a - hi if a > hi else a - lo if a < lo else 0.0) / math.sqrt(s2)
        out.append(GroupResult((float(p_lo[idx].min()), float(p_hi[idx].max())), idx.size, a, lo, hi, s2, t, z))
    return out


def judge_distribution(res: CheckResult, data: Samples, tensor: str = "params (stochastic rounding)") -> None:
    """Run the distribution test on a case's samples into `res`: a finding per rejected group, the
    groups in the note."""
    from scipy.stats import norm
    p_lo, p_hi, away = data.arrays()
    found = distribution_test(p_lo, p_hi, away)
    if not found:
        res.note = _join(res.note, f"distribution test not run: {p_lo.size} elements in one grid cell, variance "
                                   f"bound {float(max_variance(p_lo, p_hi).sum()):.3g} < {MIN_VARIANCE:g}")
        return
    used = sum(g.n for g in found)
    lines = [f"distribution test over {used} of {p_lo.size} roundings (P(away) known within {MAX_WIDTH:g}), "
             f"{len(found)} group(s), family false-alarm rate {ALPHA:g} (Bernstein, Bonferroni):"]
    for g in found:
        lines.append(f"  p in [{g.p_range[0]:.3f}, {g.p_range[1]:.3f}]: {g.away} of {g.n} away, expected "
                     f"[{g.mu_lo:.1f}, {g.mu_hi:.1f}] +- {g.threshold:.1f}; z = {g.z:+.2f} "
                     f"(normal tail {norm.sf(abs(g.z)):.2g}){'  REJECTED' if g.rejected else ''}")
        if g.rejected:
            res.fail(Finding(res.check, None, tensor, expected=[round(g.mu_lo, 3), round(g.mu_hi, 3)], got=g.away,
                             detail=f"{g.away} of {g.n} roundings with P(away) in [{g.p_range[0]:.3f}, "
                                    f"{g.p_range[1]:.3f}] went away from zero, expected [{g.mu_lo:.1f}, "
                                    f"{g.mu_hi:.1f}] +- {g.threshold:.1f} (false-alarm rate {ALPHA:g} per case): "
                                    f"not stochastic rounding with P(away) = the dropped fraction"))
    worst = max(found, key=lambda g: abs(g.z))
    lines.append(f"{sum(g.rejected for g in found)} of {len(found)} group(s) rejected; largest |z| {abs(worst.z):.2f} "
                 f"at p in [{worst.p_range[0]:.3f}, {worst.p_range[1]:.3f}]")
    res.note = _join(res.note, "\n".join(lines))


def _join(a: str, b: str) -> str:
    return f"{a}\n{b}" if a else b


__all__ = ["ALPHA", "BINS", "MAX_WIDTH", "MIN_VARIANCE", "POWER", "GroupResult", "Samples", "allowed_range", "bernstein_threshold",
           "compare_neighbours", "distribution_test", "granularity", "groups", "judge_distribution", "max_variance",
           "round_down", "round_up", "samples"]
