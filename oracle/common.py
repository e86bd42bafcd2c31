"""Pieces shared by every update rule: state, counters, grad scaling, decay.

Parameters are given as groups, as in torch: `params[g][i]` is a float64
array, `grads[g][i]` a float64 array or None (no grad this step), and
`hparams[g]` the group's hyperparameters. Everything here is pure: inputs
are never mutated, new arrays are returned.
"""
from __future__ import annotations

import copy
import math
import numbers
import sys
import threading
from dataclasses import dataclass, field

import numpy as np

from .hparams import as_float as _float_or_inf, short as _short
from .storage import as_complex, as_pairs

# "none": no counter at all (torch SGD, the reference Lion implementations);
# an update rule that reads no t declares it so that state carries no "step".
COUNTERS = ("param", "group", "none")
# Counters are exact integers below 2**53: a float64 (math.pow(beta, t), the
# kernels' double(step)) holds every one of them, and the next step's too.
MAX_COUNTER = 2 ** 53
# How an implementation stores its counter, and so where counting stops.
# "exact": an integer (or a float64 below 2**53): t+1 is always exact.
# "float32" / "bfloat16": a float of 24 / 8 significand bits (torch keeps
# per-param counters as float32 tensors). t+1 is rounded to that format, to
# nearest with ties to even, so the counter saturates at 2**24 / 2**8: there
# t+1 is a tie between t and t+2 and rounds back to t (even significand), and
# every later step, bias corrections included, uses the saturated t.
COUNTER_FORMATS = {"exact": None, "float32": 24, "bfloat16": 8}
# State entries that are one number per param rather than one per element
# (torch NAdam's running product of its momentum coefficients; ASGD's step size and averaging weight).
SCALAR_STATE = ("mu_product", "eta", "mu")
# State entries that factor a param's second moment over its last two axes (Adafactor's row and
# column statistics, Shazeer & Stern 2018, sec. 3): the param's shape with one axis kept as 1, as
# torch.optim.Adafactor keeps them (keepdim): row_var reduces the last axis, col_var the one before.
# Only params of 2 or more dims carry them.
FACTORED_STATE = {"row_var": -1, "col_var": -2}


@dataclass
class OptState:
    """Optimizer state in canonical form.

    group_step: one exact integer counter per group (per-group convention:
        apex, TransformerEngine, our fused kernels); 0 before the first step.
    params: per group, per param, a dict of state entries. "step" (an int)
        lives here under the per-param convention (torch, DeepSpeed CPU ops);
        the arrays use torch's names: exp_avg, exp_avg_sq, max_exp_avg_sq, sum.
        An empty dict means the param has no state yet.
    """

    group_step: list[int] = field(default_factory=list)
    params: list[list[dict]] = field(default_factory=list)

    @classmethod
    def empty(cls, params) -> "OptState":
        return cls([0] * len(params), [[{} for _ in group] for group in params])

    def copy(self) -> "OptState":
        return copy.deepcopy(self)


@dataclass(frozen=True)
class GradScaling:
    """Mixed-precision grad scaling: grads are multiplied by inv_scale; when
    found_inf is set the whole step is skipped (params, state, counters)."""

    inv_scale: float = 1.0
    found_inf: bool = False


def state_shape(key: str, shape: tuple) -> tuple:
    """The shape state entry `key` has for a param of `shape`: the param's, a factored entry's
    (FACTORED_STATE) reduced axis kept as 1."""
    shape = tuple(shape)
    if key in FACTORED_STATE and len(shape) >= 2:
        axis = len(shape) + FACTORED_STATE[key]
        return shape[:axis] + (1,) + shape[axis + 1:]
    return shape


def machine_epsilon(like) -> float:
    """finfo(dtype).eps of the format an implementation holds `like` in (torch Adafactor's eps1 = None
    is torch.finfo(param.dtype).eps): float64's for a plain array; an array type that knows the format
    it stands for says its own (oracle.compare.measuring.errmodel.Bounded.machine_epsilon)."""
    own = getattr(like, "machine_epsilon", None)
    return float(own()) if own is not None else float(np.finfo(np.float64).eps)


def maybe_fp32(x: float, enabled: bool) -> float:
    """Hyperparameters as a kernel holding them in fp32 sees them."""
    return float(np.float32(x)) if enabled else float(x)


# --- the pieces every update rule composes (as optax composes transforms) -----------------------

def held(hp: dict, conv, *names):
    """The named hyperparameters as the kernel holds them: float32 under the convention's fp32_hparams
    (each component of a tuple such as betas), float64 otherwise; one value per name."""
    fp32 = getattr(conv, "fp32_hparams", False)
    out = tuple(tuple(maybe_fp32(x, fp32) for x in hp[n]) if isinstance(hp[n], (tuple, list)) else maybe_fp32(hp[n], fp32)
                for n in names)
    return out[0] if len(out) == 1 else out


def filled(like, value):
    """A tensor an implementation makes inside a step filled with a constant, in the format it keeps
    the param's state in (torch: the param's dtype): Rprop's step_size <- lr, and torch Rprop's sign
    tensor that etaplus/etaminus are written into. That format may be narrower than the compute dtype
    (bf16 state, fp32 math): an array type that knows it (oracle.compare.measuring.errmodel.Bounded.filled)
    rounds the constant there; a plain array is filled exactly."""
    fill = getattr(like, "filled", None)
    return fill(value) if fill is not None else np.full_like(like, value)


def computed_in(x, fmt):
    """x as an implementation that continues in another format holds it (torch's Muon runs its
    Newton-Schulz iteration in bfloat16 whatever the param's dtype). fmt: a format name of
    oracle.storage, or an array whose format is meant (back to the param's). The specification is
    exact arithmetic, so a plain float64 array is returned as it is; an array type that tracks
    rounding (oracle.compare.measuring.errmodel.Bounded.converted) adds the conversion's rounding and
    rounds what follows in that format."""
    convert = getattr(x, "converted", None)
    return convert(fmt) if convert is not None else x


def ascent(g, hp: dict):
    """maximize: the update climbs, as on -g (torch's maximize negates the grad first)."""
    return -g if hp.get("maximize") else g


def add_l2(g, p, wd, zero_decay: str = "skip"):
    """L2 decay folded into the grad, g + wd*p (at wd == 0 per ZERO_DECAYS)."""
    return g + wd * p if l2_applies(wd, zero_decay) else g


def decay_decoupled(p, lr, wd):
    """Decoupled decay applied to the param itself, p * (1 - lr*wd) (Loshchilov & Hutter 2019)."""
    return p * (1.0 - lr * wd)


def ema(old, new, rate):
    """An exponential moving average, rate*old + (1-rate)*new (a first moment; RMSprop's grad_avg)."""
    return rate * old + (1.0 - rate) * new


def ema_square(old, g, rate):
    """The moving average of squares, rate*old + (1-rate)*g^2 (a second moment: RMSprop's square_avg,
    Adadelta's square_avg and acc_delta)."""
    return rate * old + (1.0 - rate) * g * g


def decay_by_flag(p, g, lr, wd, decoupled: bool):
    """(p, g) after a weight decay chosen by a flag (torch's decoupled_weight_decay in NAdam and RAdam):
    decoupled on p or L2 into g; nothing at wd == 0 (torch's `if weight_decay != 0`)."""
    if float(wd) == 0.0:
        return p, g
    return (decay_decoupled(p, lr, wd), g) if decoupled else (p, add_l2(g, p, wd))


def bias_corrections(beta1: float, beta2: float, t: int, enabled: bool) -> tuple[float, float]:
    """(1 - beta1**t, 1 - beta2**t), or (1, 1) without bias correction.

    Computed with an exact integer power (math.pow on floats), never as a
    running product: t is an exact integer and the result must not depend on
    how the counter got there.
    """
    if not enabled:
        return 1.0, 1.0
    return 1.0 - math.pow(beta1, t), 1.0 - math.pow(beta2, t)


# The L2 term g + wd*p at weight_decay == 0: "skip" leaves it out (torch Adam/Adagrad/SGD,
# DeepSpeed's CPU kernels, bitsandbytes: `if weight_decay != 0`), "add" adds 0*p (apex,
# DeepSpeed's CUDA FusedAdam, optax add_decayed_weights). The two differ only where p is
# +-inf or NaN: 0*p is NaN there, so "add" turns the grad, the state and the param NaN, while
# "skip" leaves the param as it was and its state finite.
ZERO_DECAYS = ("skip", "add")


def l2_applies(wd, zero_decay: str) -> bool:
    """Whether the L2 term g + wd*p is formed (see ZERO_DECAYS)."""
    return zero_decay == "add" or float(wd) != 0.0


def check_counter(counter: str, counter_format: str = "exact") -> None:
    if counter not in COUNTERS:
        raise ValueError(f"counter must be one of {COUNTERS}, got {counter!r}")
    if counter_format not in COUNTER_FORMATS:
        raise ValueError(f"counter_format must be one of {tuple(COUNTER_FORMATS)}, got {counter_format!r}")


def round_integer(n: int, bits: int | None) -> int:
    """The integer n rounded to a float with `bits` significand bits (round to
    nearest, ties to even), in exact integer arithmetic; n itself for None."""
    if bits is None or n.bit_length() <= bits:
        return n
    drop = n.bit_length() - bits
    q, r = divmod(n, 1 << drop)
    half = 1 << (drop - 1)
    if r > half or (r == half and q % 2 == 1):
        q += 1
    return q << drop


def counter_saturation(counter_format: str) -> int | None:
    """The first counter value t with next_count(t) == t (2**bits), None for "exact"."""
    bits = COUNTER_FORMATS[counter_format]
    return None if bits is None else 1 << bits


def next_count(t: int, counter_format: str = "exact") -> int:
    """t + 1 as a counter stored in `counter_format` holds it (see COUNTER_FORMATS)."""
    return round_integer(t + 1, COUNTER_FORMATS[counter_format])


def check_structure(params, grads, state: OptState, hparams) -> None:
    """Shapes of the inputs agree; raises ValueError naming the first offender."""
    if not (len(params) == len(grads) == len(hparams) == len(state.params) == len(state.group_step)):
        raise ValueError(
            f"group count differs: params {len(params)}, grads {len(grads)}, hparams {len(hparams)}, "
            f"state {len(state.params)}/{len(state.group_step)}")
    for g, (ps, gs, ss) in enumerate(zip(params, grads, state.params)):
        if not (len(ps) == len(gs) == len(ss)):
            raise ValueError(f"group {g}: {len(ps)} params, {len(gs)} grads, {len(ss)} state entries")
        for i, (p, gr) in enumerate(zip(ps, gs)):
            if np.iscomplexobj(p) or (gr is not None and np.iscomplexobj(gr)):
                raise ValueError(f"group {g} param {i}: complex values are not supported here (oracle.step "
                                 "takes them for an optimizer whose spec declares a complex_form)")
            if gr is not None and np.shape(gr) != np.shape(p):
                raise ValueError(f"group {g} param {i}: grad shape {np.shape(gr)} != param shape {np.shape(p)}")
            if not isinstance(ss[i], dict):
                raise ValueError(f"group {g} param {i}: state must be a dict, got {type(ss[i]).__name__}")
            for key, value in ss[i].items():
                scalar_ok = key in SCALAR_STATE and np.shape(value) == ()
                want = state_shape(key, np.shape(p))
                if key != "step" and np.shape(value) != want and not scalar_ok:
                    what = f"param shape {np.shape(p)}" if want == np.shape(p) else f"{want} (param shape {np.shape(p)})"
                    raise ValueError(f"group {g} param {i}: state {key!r} shape {np.shape(value)} != {what}")


def as_float64(x, copy: bool = False):
    """Array-likes become float64 arrays (a new one when `copy`). Objects that
    implement numpy's protocols themselves (the harness's error-bounded arrays)
    pass through, so the same update math can also derive tolerances."""
    if hasattr(x, "__array_function__") and not isinstance(x, np.ndarray):
        return x
    return np.array(x, dtype=np.float64) if copy else np.asarray(x, dtype=np.float64)


def as_counter(where: str, value) -> int:
    """A stored step counter as an exact int. Accepted: ints (NumPy's too),
    floats with an integral value (torch keeps per-param counters as float
    tensors) and 0-d arrays of either, in [0, 2**53). Refused, with
    ValueError naming `where`: bools, fractional or non-finite floats,
    negatives (the step would use t <= 0: bias corrections 0, NaN params)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{where}={_short(value)} must be an integer counter ({type(value).__name__} given)")
    if not isinstance(value, numbers.Integral):
        x = float(value)
        if not (math.isfinite(x) and x.is_integer()):
            raise ValueError(f"{where}={_short(value)} must be an integer counter (an int or an integral float)")
    n = int(value)
    if not 0 <= n < MAX_COUNTER:
        raise ValueError(f"{where}={n} must be in [0, 2**53): the step uses counter + 1 >= 1, "
                         "exact in float64")
    return n


def as_float64_named(where: str, x, copy: bool = False):
    """as_float64, with a ValueError naming `where` for what is not a real array."""
    if hasattr(x, "__array_function__") and not isinstance(x, np.ndarray):
        return x
    if x is None or np.iscomplexobj(x):
        raise ValueError(f"{where}: expected a real float array, got {type(x).__name__}"
                         + (" (complex)" if x is not None else ""))
    try:
        return as_float64(x, copy=copy)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: not a float array ({type(x).__name__}): {e}") from None


def check_inv_scale(inv_scale) -> float:
    """GradScaling.inv_scale: a finite number > 0 (NaN, Inf, 0 or a negative
    value would silently turn every update into NaN, nothing, or its reverse)."""
    ok = (isinstance(inv_scale, numbers.Real) and not isinstance(inv_scale, (bool, np.bool_))
          and math.isfinite(_float_or_inf(inv_scale)) and inv_scale > 0)
    if not ok:
        raise ValueError(f"scaling: inv_scale={_short(inv_scale)} must be a finite number > 0")
    return float(inv_scale)


def canonical_state(state: OptState) -> OptState:
    """`state` as the update math expects it: counters exact ints (as_counter), every state array
    float64 (a float32 moment would otherwise drag the arithmetic down to float32). The lists and
    dicts are new; a float64 array is shared, not copied (the update math never writes into its
    inputs; drive's _unaliased copies what it would hand back shared). Error-tracking arrays pass
    through."""
    new = OptState(list(state.group_step), [[st if not isinstance(st, dict) else dict(st) for st in sts]
                                             for sts in state.params])
    new.group_step = [as_counter(f"group {g}: group_step", s) for g, s in enumerate(new.group_step)]
    for g, entries in enumerate(new.params):
        for i, st in enumerate(entries):
            if not isinstance(st, dict):
                raise ValueError(f"group {g} param {i}: state must be a dict, got {type(st).__name__}")
            for key, value in st.items():
                where = f"group {g} param {i}: state {key!r}"
                st[key] = as_counter(where, value) if key == "step" else as_float64_named(where, value)
    return new


def _shared(new, old) -> bool:
    return isinstance(new, np.ndarray) and isinstance(old, np.ndarray) and np.may_share_memory(new, old)


def _unaliased(new_params, new_state: OptState, params, state: OptState):
    """The step's result with every array that shares memory with the caller's inputs copied (a
    param without a grad, under found_inf every param, and state the rule kept as it was): the
    caller may then write into what it gets without changing what it gave, and the reverse."""
    for g, group in enumerate(new_params):
        for i, p in enumerate(group):
            if _shared(p, params[g][i]):
                group[i] = p.copy()
            old = state.params[g][i] if g < len(state.params) and i < len(state.params[g]) else {}
            st = new_state.params[g][i]
            for key, v in st.items():
                if _shared(v, old.get(key)):
                    st[key] = v.copy()
    return new_params, new_state


# Elements per slice when an elementwise rule runs on a large param (drive's `elementwise`): small
# enough that a slice's temporaries (two dozen float64 arrays for Adam) stay in a core's L2 cache.
# A whole-array rule on 16M elements allocates and page-faults a fresh 128 MB array per operation and
# streams each through memory; sliced, it runs at the speed of NumPy's in-place ops
# (benchmarks/bench_oracle.py measures both side by side).
# Just under 16384: a slice's temporaries must stay below glibc's 128 KiB mmap threshold. At exactly
# 16384 float64 (128 KiB) each temporary can be mmapped and unmapped, page faults and all: an
# in-cache Adam slice then took 309 us instead of 85 us (16128), and a 16M-element step 1.8x in-place
# NumPy instead of 1.5x.
SLICE = 16128

# A sliced step's outputs (param and per-element state, 128 MB each at 16M elements) are fresh arrays,
# and writing a fresh array page-faults it: about a third of a 16M-element Adam step, a cost the
# in-place floor never pays. The last outputs are kept here and handed out again once nothing but
# this list refers to them (the caller dropped them and every view of them, since a view holds its
# base): their memory is then unreachable from outside, so reusing it cannot change what a caller
# holds. Only arrays of RECYCLE_BYTES or more (below glibc's mmap threshold memory is reused anyway),
# and at most SPARE_BYTES of them kept idle.
RECYCLE_BYTES = 32 << 20
SPARE_BYTES = 512 << 20
_spares: list = []
_spares_lock = threading.Lock()


def _loop_refs() -> int:
    """What getrefcount reports in _output's loop for an array that only the list holds: 3 on CPython
    3.11 (the list's reference, the loop variable's, the argument's); measured, not assumed, since an
    interpreter that borrows references reports fewer, and a held array must never look free."""
    probe = [np.empty(0)]
    for a in reversed(probe):
        return sys.getrefcount(a)


_FREE_REFS = _loop_refs()


def _output(n: int) -> np.ndarray:
    """An uninitialised float64 array of n elements: a spare no one else holds, or a new one."""
    if n * 8 < RECYCLE_BYTES:
        return np.empty(n)
    with _spares_lock:
        out, kept, idle_bytes = None, [], 0
        for a in reversed(_spares):  # newest first: the oldest idle ones are let go
            if sys.getrefcount(a) <= _FREE_REFS:  # no one else holds it
                if out is None and a.size == n:
                    out = a
                    continue
                if idle_bytes + a.nbytes > SPARE_BYTES:
                    continue
                idle_bytes += a.nbytes
            kept.append(a)
        out = np.empty(n) if out is None else out
        _spares[:] = [*reversed(kept), out]
    return out


def _sliced(update, p, grad, st: dict):
    """`update(p, grad, st) -> (p, st)` of an elementwise rule run slice by slice over the flattened
    param, with the same result bit for bit (every operation is per element). State entries shaped
    like the param are sliced with it; any other entry (the counter, a per-param scalar) is the same
    in every slice, and the last slice's value is kept."""
    shape, n, size = np.shape(p), np.size(p), SLICE  # read at call time: a test or benchmark may set it
    flat = {key: np.ravel(v) for key, v in st.items() if np.shape(v) == shape}
    pf, gf = np.ravel(p), np.ravel(grad)
    out_p, out_st = _output(n), {}
    for a in range(0, n, size):
        b = min(a + size, n)
        new_p, new_st = update(pf[a:b], gf[a:b], {**st, **{key: v[a:b] for key, v in flat.items()}})
        out_p[a:b] = new_p
        for key, v in new_st.items():
            if np.shape(v) == (b - a,) and (key in flat or key not in st):
                if key not in out_st:
                    out_st[key] = _output(n)
                out_st[key][a:b] = v
            else:
                out_st[key] = v
    return out_p.reshape(shape), {key: v.reshape(shape) if np.shape(v) == (n,) else v for key, v in out_st.items()}


def _plain(*xs) -> bool:
    """No error-carrying array among xs (their arithmetic is not sliced)."""
    return not any(hasattr(x, "__array_function__") and not isinstance(x, np.ndarray) for x in xs)


def drive(params, grads, state, hparams, counter, scaling, update, counter_format="exact", elementwise=False):
    """Advance counters and apply `update(g, i, p, grad, st, t)` to every
    param that has a grad; returns (new params, new state).

    Counters: under "group" every group's counter advances on every step,
    empty groups and groups whose params all lack grads included; under
    "param" a param's counter advances only when it has a grad; under "none"
    nothing advances and `update` gets t=None (the rule must not read it).
    counter_format: how the counter is stored (COUNTER_FORMATS); a float32
    or bfloat16 counter stops at its saturation point.
    found_inf skips everything, counters included.
    elementwise: the rule computes each element from that element alone (no norm, no reduction, and
    nothing of `i`, the param's place): a large plain-float64 param then runs in cache-sized slices
    (_sliced), and the error-carrying params of groups with equal hyperparameters run in one call over
    their concatenation (_joined); the same result either way.
    """
    check_counter(counter, counter_format)
    check_structure(params, grads, state, hparams)
    # no copies here: what would come back shared with the caller's arrays is copied at the end
    new_params = [[as_float64_named(f"group {g} param {i}", p) for i, p in enumerate(group)]
                  for g, group in enumerate(params)]
    new_state = canonical_state(state)
    inv_scale = 1.0 if scaling is None else check_inv_scale(scaling.inv_scale)  # refused on skipped steps too
    if scaling is not None and scaling.found_inf:
        return _unaliased(new_params, new_state, params, state)
    # (hyperparameters' group, join key) -> [(g, i, grad, t)]: error-carrying params run in one call (_joined)
    joinable: dict = {}
    alike = _alike(hparams) if elementwise else []
    for g, group in enumerate(new_params):
        if counter == "group":
            new_state.group_step[g] = next_count(new_state.group_step[g], counter_format)
        for i, p in enumerate(group):
            grad = grads[g][i]
            if grad is None:
                continue
            st = new_state.params[g][i]
            if counter == "param":
                st["step"] = next_count(st.get("step", 0), counter_format)
            t = {"group": new_state.group_step[g], "param": st.get("step"), "none": None}[counter]
            grad = as_float64_named(f"group {g} param {i}: grad", grad)
            scaled = grad * inv_scale if inv_scale != 1.0 else grad
            key = _join_key(p, scaled, st, t) if elementwise else None
            if key is not None:
                joinable.setdefault((alike[g], key), []).append((g, i, scaled, t))
            elif elementwise and _plain(p, scaled, *st.values()) and np.size(p) > SLICE:
                rule = lambda p_, g_, st_, g=g, i=i, t=t: update(g, i, p_, g_, st_, t)  # noqa: E731
                new_params[g][i], new_state.params[g][i] = _sliced(rule, p, scaled, st)
            else:
                new_params[g][i], new_state.params[g][i] = update(g, i, p, scaled, st, t)
    for members in joinable.values():
        _joined(update, members, new_params, new_state.params)
    return _unaliased(new_params, new_state, params, state)


def _alike(hparams) -> list[int]:
    """Per group, the first group whose hyperparameters equal its own: an elementwise rule reads
    nothing else of the group, so params of alike groups may run in one call (a checked step and the
    trajectory beside it, stacked as groups: oracle.compare.checking.case_run)."""
    out: list[int] = []
    for g, hp in enumerate(hparams):
        out.append(next((h for h in out[:g] if equal_hparams(hparams[h], hp)), g))
    return out


_PLAIN = (float, int, bool, str)


def _equal_value(x, y) -> bool:
    # plain Python values compare directly (the same answer as np.all of their comparison, NaN unequal,
    # without NumPy's dispatch: this runs for every group of every oracle step)
    if type(x) in _PLAIN and type(y) in _PLAIN:
        return bool(x == y)
    return bool(np.all(x == y))


def equal_hparams(a, b) -> bool:
    """Hyperparameter dicts equal key for key (NaN never equal; an array value compares whole)."""
    try:
        return a.keys() == b.keys() and all(_equal_value(a[k], b[k]) for k in a)
    except (TypeError, ValueError):
        return False


def _joins(x) -> bool:
    """x is an array type that concatenates (oracle.compare.measuring.errmodel.Bounded: joined, piece,
    join_key)."""
    return hasattr(type(x), "joined")


def _join_key(p, grad, st: dict, t):
    """What the params of one group that run in one call must share (None: this one runs alone): the
    counter, the format attributes of the param, the grad and each param-shaped state entry (error-
    carrying arrays all), and any other state entry as a plain number of equal value."""
    shape = np.shape(p)
    if not (_joins(p) and _joins(grad)) or np.shape(grad) != shape or math.prod(shape) == 0:
        return None
    entries = []
    for key, v in st.items():
        if _joins(v) and np.shape(v) == shape:
            entries.append((key, v.join_key()))
        elif type(v) in (int, float):
            entries.append((key, "number", v))
        else:
            return None  # a per-param scalar array (NAdam's mu_product): not shared, so never joined
    return (t, p.join_key(), grad.join_key(), tuple(entries))


def _joined(update, members: list, params: list, states: list) -> None:
    """An elementwise rule on error-carrying params run once over their concatenation, the results
    split back per param. members: (g, i, grad, t) of params whose groups have equal hyperparameters
    and whose join keys are equal; params and states: per group. Every operation is per element, so
    each element's value and bound are the ones its own call computes, bit for bit
    (tests/test_oracle_joined.py); the cost of the error model is per NumPy call, so a step of k small
    params costs about one param's. One member, or results that do not split (a state entry not shaped
    like the concatenation), run param by param."""
    def alone():
        for g, i, grad, t in members:
            params[g][i], states[g][i] = update(g, i, params[g][i], grad, states[g][i], t)

    if len(members) < 2:
        return alone()
    g0, i0, _, t = members[0]
    sizes = [math.prod(np.shape(params[g][i])) for g, i, _, _ in members]
    n = sum(sizes)
    kind = type(params[g0][i0])
    st0 = states[g0][i0]
    joined_st = {key: (kind.joined([states[g][i][key] for g, i, _, _ in members]) if _joins(v) else v)
                 for key, v in st0.items()}
    new_p, new_st = update(g0, i0, kind.joined([params[g][i] for g, i, _, _ in members]),
                           kind.joined([grad for _, _, grad, _ in members]), joined_st, t)
    shared = {key for key, v in new_st.items() if not (_joins(v) and np.shape(v) == (n,))}
    if not (_joins(new_p) and np.shape(new_p) == (n,)) or any(
            type(new_st[key]) not in (int, float) for key in shared):
        return alone()
    a = 0
    for (g, i, _, _), size in zip(members, sizes):
        shape = np.shape(params[g][i])
        params[g][i] = new_p.piece(a, a + size, shape)
        states[g][i] = {key: (v if key in shared else v.piece(a, a + size, shape)) for key, v in new_st.items()}
        a += size


# --- complex params ---------------------------------------------------------------------------------

def on_components(step, params, grads, state: OptState, hparams, conv, scaling):
    """One step of a real update rule on complex params as torch takes them (complex_form
    "components"): each complex param, its grad and its array state become float64 (re, im) pairs
    (torch.view_as_real), `step` runs on them, and the param and its array state are made complex
    again. Every element-wise operation then acts on each component apart (a second moment holds
    re^2 and im^2, not |g|^2 = g*conj(g)), and a norm over a tensor sums re^2 + im^2 = |z|^2 per
    element: the complex norm. Scalar state (NAdam's mu_product, ASGD's eta, mu) stays real."""
    flags = complex_flags(params, grads)
    if not any(any(row) for row in flags):
        return step(params, grads, state, hparams, conv, scaling)
    pairs = [[as_pairs(p) if c else p for p, c in zip(ps, cs)] for ps, cs in zip(params, flags)]
    pgrads = [[None if gr is None else as_pairs(gr) if c else gr for gr, c in zip(gs, cs)]
              for gs, cs in zip(grads, flags)]
    new_params, new_state = step(pairs, pgrads, _state_as(state, flags, _pairs_entry), hparams, conv, scaling)
    back = [[as_complex(p) if c else p for p, c in zip(ps, cs)] for ps, cs in zip(new_params, flags)]
    return back, _state_as(new_state, flags, _complex_entry)


def complex_flags(params, grads) -> list[list[bool]]:
    """Per param, whether it is complex; ValueError where its grad is not of the same kind (torch
    requires a grad of the param's dtype)."""
    flags = []
    for g, (ps, gs) in enumerate(zip(params, grads)):
        row = [bool(np.iscomplexobj(p)) for p in ps]
        for i, (c, gr) in enumerate(zip(row, gs)):
            if gr is not None and bool(np.iscomplexobj(gr)) != c:
                raise ValueError(f"group {g} param {i}: a {'complex' if c else 'real'} param needs a "
                                 f"{'complex' if c else 'real'} grad")
        flags.append(row)
    return flags


def _pairs_entry(where: str, key: str, value):
    if key == "step" or key in SCALAR_STATE and np.shape(value) == ():
        return value
    if not np.iscomplexobj(value):
        raise ValueError(f"{where}: state {key!r} of a complex param must be complex")
    return as_pairs(value)


def _complex_entry(where: str, key: str, value):
    return value if key == "step" or key in SCALAR_STATE and np.shape(value) == () else as_complex(value)


def _state_as(state: OptState, flags, convert) -> OptState:
    """`state` with every entry of a complex param's state passed through convert(where, key, value)."""
    if len(state.params) != len(flags):
        return state  # the step itself names the mismatch (check_structure)
    new = state.copy()
    for g, (sts, cs) in enumerate(zip(new.params, flags)):
        for i, (st, c) in enumerate(zip(sts, cs)):
            if c and isinstance(st, dict):
                sts[i] = {k: convert(f"group {g} param {i}", k, v) for k, v in st.items()}
    return new
