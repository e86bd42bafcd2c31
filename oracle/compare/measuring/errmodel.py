"""Running error analysis: the tolerance of each element, derived from the
oracle's own update math.

`Bounded` is a float64 array that carries, per element, a bound on the
absolute error an implementation computing the same expression in a lower
precision (unit roundoff `u`) can accumulate. Each arithmetic operation
rounds once: |fl(x op y) - (x op y)| <= u*|x op y|, and the errors of its
operands propagate to first order with exact partial derivatives (Wilkinson's
running error bound), plus half the smallest subnormal where the result
underflows. Scalars (hyperparameters, bias corrections) enter with
error u*|c|, as a kernel holding them in the compute dtype sees them.

Passing `Bounded` arrays through the oracle's update functions (they use only
+ - * /, sqrt, maximum, square, sum and mean
(whole or along axes), where, and matmul for Muon's Newton-Schulz iteration) gives a bound for exactly the operations
the specification performs, in its order: the op count of the compute dtype
is the oracle's op count, never a tuned number.
"""
from __future__ import annotations

import math

import numpy as np

from oracle.storage import FORMATS, component


def as_bounded(x, compute: str):
    """x as a Bounded value: a plain number is what the oracle began a scalar state with on its own
    (NAdam's mu_product = 1 times the first factor), one rounding in the compute dtype away from exact."""
    if isinstance(x, Bounded):
        return x
    u = unit_roundoff(compute)
    v = np.asarray(x, dtype=np.float64)
    return Bounded(v, u * np.abs(v) + underflow_floor(u), u)


class Bounded(np.lib.mixins.NDArrayOperatorsMixin):
    __array_priority__ = 100

    def __init__(self, value, err=None, u=0.0, eta=None, state_u=None, store_u=None):
        self.v = np.asarray(value, dtype=np.float64)
        self.e = np.zeros_like(self.v) if err is None else np.asarray(err, dtype=np.float64)
        self.u = u
        # absolute error floor of one rounding: half the smallest subnormal of
        # the compute format (underflow), derived from u when not given
        self.eta = underflow_floor(u) if eta is None else eta
        # unit roundoff of the format the implementation stores this param's state in, where it
        # differs from the compute dtype (a float32-math kernel keeping bf16 state); None: the same.
        # Only an input param carries it: it decides how filled rounds a constant.
        self.state_u = state_u
        # unit roundoff of the format the implementation stores this value in (an input param: its dtype),
        # where known: what a rule reading finfo(param.dtype) sees (machine_epsilon)
        self.store_u = store_u

    def machine_epsilon(self) -> float:
        """finfo(dtype).eps = 2u of the format this value is stored in (oracle.common.machine_epsilon:
        torch Adafactor's eps1 = None); the compute format's where the storage is not known."""
        u = self.store_u if self.store_u is not None else self.u
        return 2.0 * u if u > 0 else float(np.finfo(np.float64).eps)

    def filled(self, value):
        """A tensor the implementation fills with a constant inside a step, in its state format
        (oracle.common.filled: Rprop's step_size <- lr, torch Rprop's etas in the grad's dtype), shaped
        like this param. Filled in the compute dtype and held there: one rounding (u). Held in another
        format (state_u): that format's rounding too, since the step then reads the stored value (a bf16
        step_size is lr rounded to bf16; compiled torch Rprop multiplies by etaplus = 1.2 as bf16 1.203125)."""
        v = np.full_like(self.v, value, dtype=np.float64)
        rel, floor = self.u, self.eta
        if self.state_u is not None and self.state_u != self.u:
            rel, floor = self.u + self.state_u, self.eta + underflow_floor(self.state_u)
        return Bounded(v, np.where(v != 0, rel * np.abs(v) + floor, 0.0), self.u, self.eta)

    # --- construction helpers
    def _lift(self, x):
        if isinstance(x, Bounded):
            return x
        if type(x) in (float, int):  # a hyperparameter or per-step scalar: the same few, step after step
            key = (x, self.u, self.eta)
            lifted = _LIFTED.get(key)
            if lifted is None:
                lifted = self._lift_array(x)
                if math.isfinite(x):  # nan is never equal to itself: it would never be found again
                    if len(_LIFTED) >= LIFTED_KEPT:
                        _LIFTED.clear()
                    _LIFTED[key] = lifted
            return lifted
        return self._lift_array(x)

    def _lift_array(self, x):
        x = np.asarray(x, dtype=np.float64)
        return Bounded(x, self.u * np.abs(x) + self.eta, self.u, self.eta)  # a constant held in the compute dtype

    def _round(self, v, e):
        """v rounded once: e plus u|v| and the underflow floor (under the caller's np.errstate)."""
        return _new(v, e + self.u * np.abs(v) + self.eta, self.u, self.eta)

    # --- numpy protocol
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            return NotImplemented
        rule = _UFUNCS.get(ufunc)
        if rule is None:
            return NotImplemented
        return rule(self, *[self._lift(x) for x in inputs])

    def __array_function__(self, func, types, args, kwargs):
        rule = _FUNCTIONS.get(func)
        if rule is None:
            return NotImplemented
        return rule(*args, **kwargs)

    # --- python scalar protocol: used for branches on norms (== 0) and math.sqrt
    def __float__(self):
        return float(self.v)

    def __bool__(self):
        return bool(self.v)

    @property
    def shape(self):
        return self.v.shape

    @property
    def T(self):
        """The transpose: a view, exact."""
        return Bounded(self.v.T, self.e.T, self.u, self.eta, self.state_u)

    def converted(self, target):
        """This value as an implementation continues with it in another format (oracle.common.computed_in:
        torch's Muon runs its Newton-Schulz iteration in bfloat16 on float32 params). target: a format
        name, or a Bounded whose compute format is meant. Into a narrower format the conversion rounds
        once (u|v| and that format's underflow floor; exact zeros stay exact); into a wider one it is
        exact. Every later operation rounds with the new format's unit roundoff."""
        if isinstance(target, str):
            u, eta = unit_roundoff(target), underflow_floor(unit_roundoff(target))
        else:  # an array: its compute format (a plain array carries none: stay in this one)
            u, eta = getattr(target, "u", self.u), getattr(target, "eta", self.eta)
        e = self.e
        if u > self.u:
            e = np.where(_exact_zero(self), 0.0, e + u * np.abs(self.v) + eta)
        return Bounded(self.v, e, u, eta)

    def copy(self):
        return Bounded(self.v.copy(), self.e.copy(), self.u, self.eta, self.state_u, self.store_u)

    # --- joining (oracle.common.drive runs an elementwise rule once over a group's params)
    def join_key(self) -> tuple:
        """What values joined into one array must share: every attribute besides the elements."""
        return (self.u, self.eta, self.state_u, self.store_u)

    @classmethod
    def joined(cls, parts: list) -> "Bounded":
        """The parts (equal join_key) flattened and concatenated: values and errors alike."""
        first = parts[0]
        return Bounded(np.concatenate([np.ravel(x.v) for x in parts]), np.concatenate([np.ravel(x.e) for x in parts]),
                       first.u, first.eta, first.state_u, first.store_u)

    def piece(self, a: int, b: int, shape) -> "Bounded":
        """Elements a:b of a joined (flat) value, shaped back into one part's shape."""
        return Bounded(self.v[a:b].reshape(shape), self.e[a:b].reshape(shape), self.u, self.eta, self.state_u,
                       self.store_u)


def _operators(rule):
    """a OP b and b OP a for a Bounded a, straight to the rule: what NDArrayOperatorsMixin's operator ->
    ufunc -> __array_ufunc__ would reach, without the dispatch (the error model's cost is per call)."""
    return (lambda self, other: rule(self, self, self._lift(other)),
            lambda self, other: rule(self, self._lift(other), self))


# Scalars lifted to Bounded, shared (no rule changes an operand; each returns a new Bounded).
_LIFTED: dict = {}
LIFTED_KEPT = 4096


def _new(v, e, u: float, eta: float) -> Bounded:
    """Bounded(v, e, u, eta) for a rule's own results: skips __init__'s conversions where v and e are
    already float64 arrays (a rule's arithmetic on them; a 0-d operation's NumPy scalar is converted)."""
    b = object.__new__(Bounded)
    b.v = v if type(v) is np.ndarray else np.asarray(v, dtype=np.float64)
    b.e = e if type(e) is np.ndarray else np.asarray(e, dtype=np.float64)
    b.u, b.eta, b.state_u, b.store_u = u, eta, None, None
    return b


def _exact_zero(a):
    """Elements that are exactly 0 with no error: an input or result held exactly. Kept on the value
    (None: which ones not yet known), since a value is an operand more than once (a lifted scalar:
    in every step); its .v and .e are never changed in place, only replaced (_keep_exact_zeros)."""
    zero = getattr(a, "_zero", None)
    if zero is None:
        zero = a._zero = (a.v == 0) & (a.e == 0)
    return zero


def _keep_exact_zeros(r, where):
    """A result that is exactly 0 in every evaluation order (x*0 for a finite x, 0 + 0)
    is not rounded: no u*|v| and no underflow floor. Without this an exactly-zero
    Lion c = b1*0 + (1-b1)*0 carried an eta-sized interval and sign(c) stayed open,
    so sign(0) = 0 and copysign(1, +0) = +1 were both accepted."""
    if np.count_nonzero(where):  # np.count_nonzero: a quarter of .any()'s cost on a small mask
        r.e = np.where(where, 0.0, r.e)
        r._zero = None
    return r


def _add(s, a, b):
    with np.errstate(invalid="ignore", over="ignore"):
        r = s._round(a.v + b.v, a.e + b.e)
    return _keep_exact_zeros_of_both(r, a, b)


def _sub(s, a, b):
    with np.errstate(invalid="ignore", over="ignore"):
        r = s._round(a.v - b.v, a.e + b.e)
    return _keep_exact_zeros_of_both(r, a, b)


def _keep_exact_zeros_of_both(r, a, b):
    """0 + 0 and 0 - 0 stay exact (_keep_exact_zeros); most operands hold no exact zero at all."""
    za = _exact_zero(a)
    return _keep_exact_zeros(r, za & _exact_zero(b)) if np.count_nonzero(za) else r


def _finite(a):
    return np.isfinite(a.v) & np.isfinite(a.e)


def _mul(s, a, b):
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 in a bound is an unbounded element
        r = s._round(a.v * b.v, np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e)
    za, zb = _exact_zero(a), _exact_zero(b)
    if not (np.count_nonzero(za) or np.count_nonzero(zb)):  # no exact zero on either side: nothing to keep
        return r
    return _keep_exact_zeros(r, (za & _finite(b)) | (zb & _finite(a)))


def _div(s, a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        q = a.v / b.v
        margin = np.abs(b.v) - b.e
        e = np.where(margin > 0, (a.e + np.abs(q) * b.e) / np.where(margin > 0, margin, 1.0), np.inf)
        return s._round(q, e)


def _sqrt(s, a):
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.sqrt(a.v)
        low = np.sqrt(np.maximum(a.v - a.e, 0.0))
        denom = r + low
        e = np.where(denom > 0, a.e / np.where(denom > 0, denom, 1.0), np.sqrt(a.e))
        return s._round(r, e)


def _neg(s, a):
    return Bounded(-a.v, a.e, s.u, s.eta)


def _square(s, a):
    return _mul(s, a, a)


def _power(s, a, b):
    """a**n. An integer n is a step counter, held exactly: relative error n times a's, plus
    one rounding. A non-integer n is a hyperparameter (ASGD's alpha) held in the compute
    dtype, so its own error adds |r·ln a|·e_n; and a non-integer power is a libm/SLEEF call
    that is faithful, not correctly rounded (within 1 ULP: glibc powf, SLEEF's u10 pow), so
    it rounds twice over (2u, not u)."""
    n = b.v
    integer = np.all(np.mod(n, 1.0) == 0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        r = a.v ** n
        rel = np.where(a.v != 0, a.e / np.abs(np.where(a.v != 0, a.v, 1.0)), 0.0)
        e = np.abs(n) * np.abs(r) * rel
        if integer:
            return s._round(r, e)
        e = e + np.abs(r * np.log(np.abs(np.where(a.v != 0, a.v, 1.0)))) * b.e
        return s._round(r, e + s.u * np.abs(r))


def _absolute(s, a):
    """|a| is exact: a's error carries over unchanged."""
    return Bounded(np.abs(a.v), a.e, s.u, s.eta)


def _maximum(s, a, b):
    return Bounded(np.maximum(a.v, b.v), np.maximum(a.e, b.e), s.u, s.eta)


def _reduced(x, axis) -> int:
    """How many elements each output of a reduction over `axis` (None: all of x) adds up."""
    if axis is None:
        return max(x.v.size, 1)
    axes = axis if isinstance(axis, tuple) else (axis,)
    return max(math.prod(x.v.shape[a] for a in axes), 1)


def _sum(x, axis=None, keepdims=False, **_):
    """Sum (over `axis`, as NumPy's: the whole array, one axis or a tuple, keepdims) with a
    reduction-order-agnostic bound: any summation tree of depth d errs by at most d*u*sum|x_i|
    (Higham 2002, eq. 4.4: the recursive form's gamma_{n-1} with n-1 the tree's depth);
    d = ceil(log2 n) covers pairwise and blocked reductions, +8 levels for serial runs inside
    vector lanes. Each output element is bounded by its own terms (a row sum by its row)."""
    x = x if isinstance(x, Bounded) else Bounded(x)
    n = _reduced(x, axis)
    depth = math.ceil(math.log2(n)) + 8 if n > 1 else 0
    v = np.sum(x.v, axis=axis, keepdims=keepdims)
    spread = np.sum(x.e, axis=axis, keepdims=keepdims) + depth * (
        x.u * np.sum(np.abs(x.v), axis=axis, keepdims=keepdims) + x.eta)
    return Bounded(v, spread, x.u, x.eta)


def _mean(x, axis=None, keepdims=False, **_):
    """The sum over `axis` divided by the count (an exact integer held in the compute dtype:
    one more rounding), as torch's mean and Adafactor's norm(g)^2 / n form it."""
    x = x if isinstance(x, Bounded) else Bounded(x)
    n = float(_reduced(x, axis))
    # an integer count is exact in a format of p significand bits up to 2**p = 2/u
    count = Bounded(n, 0.0 if x.u == 0 or n <= 2.0 / x.u else x.u * n, x.u, x.eta)
    return _div(x, _sum(x, axis, keepdims), count)


def _like(fill):
    def make(x, fill_value=None, **kwargs):
        val = fill if fill_value is None else fill_value
        ref = x.v if isinstance(x, Bounded) else np.asarray(x)
        u = getattr(x, "u", 0.0)
        # shape=() makes a 0-dim scalar (ASGD's per-param eta) as NumPy's full_like does
        arr = np.full_like(ref, val, dtype=np.float64, shape=kwargs.get("shape"))
        # a constant the kernel holds in its compute dtype (0 is exact)
        return Bounded(arr, np.where(arr != 0, u * np.abs(arr) + underflow_floor(u), 0.0), u)
    return make


# A matmul in a format narrower than float32 accumulates in float32 and rounds its result once into
# that format. Measured on torch 2.13's CPU kernels (oneDNN/MKL, AVX512): a bf16 or fp16 A @ B equals
# (A.float() @ B.float()).to(dtype) bit for bit wherever both sum in the same order (all of 20 random
# trials at 8x8x8 ... 4x4x4096; 12 of 20 at 64x64x1000, the rest one ULP apart: another fp32 order),
# and bf16 addmm(C, A, B, beta, alpha) equals the fp32 beta*C + alpha*(A@B) rounded once (50 of 50).
# Measured on CPU only: on CUDA torch allows bf16/fp16 GEMMs reduced-precision split-K reductions by
# default (torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction), which this rule does
# not cover. float32 and float64 accumulate in their own format.
ACCUMULATOR = "float32"


def gamma(n: int, u: float) -> float:
    """gamma_n = n*u/(1 - n*u): the relative bound of a length-n dot product summed in any order
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Lemma 3.1 and eq. 3.5); inf once
    n*u >= 1, where the lemma says nothing."""
    return n * u / (1.0 - n * u) if n * u < 1.0 else math.inf


def _matmul(s, a, b):
    """A @ B for 2-D A (m x n) and B (n x k), elementwise:

        |A'B' - AB|          <= |A| |dB| + |dA| |B| + |dA| |dB|          the inputs' errors, exactly
        |fl_acc(A'B') - A'B'| <= gamma_n(u_acc) |A'| |B'| + n eta_acc     the accumulation, any order
        |fl(y) - y|           <= u |y| + eta                              the result rounded into the
                                                                          compute format (only where it
                                                                          is narrower than u_acc's)

    with |A'| <= |A| + |dA|, and u_acc = the accumulator's unit roundoff (ACCUMULATOR). An entry whose
    row and column are exact zeros stays an exact zero."""
    u_acc = min(s.u, unit_roundoff(ACCUMULATOR))
    n = a.v.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        r = a.v @ b.v
        mag = (np.abs(a.v) + a.e) @ (np.abs(b.v) + b.e)
        prop = np.abs(a.v) @ b.e + a.e @ np.abs(b.v) + a.e @ b.e
        acc = gamma(n, u_acc) * mag + np.where(mag > 0, n * underflow_floor(u_acc), 0.0)
        e = prop + acc
        if s.u > u_acc:
            e = e + s.u * (np.abs(r) + e) + s.eta
    return Bounded(r, np.where(mag > 0, e, 0.0), s.u, s.eta)


def _norm(x, *args, **kwargs):
    return np.sqrt(_sum(_mul(x, x, x)))


def _sign(s, a):
    """sign(a) is exact where a's interval excludes zero (or a is an exact 0);
    elsewhere the implementation may return any of -1, 0, 1: error 1 + |r|."""
    r = np.sign(a.v)
    settled = (np.abs(a.v) > a.e) | ((a.v == 0) & (a.e == 0))
    return Bounded(r, np.where(settled, 0.0, 1.0 + np.abs(r)), s.u, s.eta)


def _copysign(s, mag, sgn):
    """copysign(mag, sgn): mag's error where sgn's sign is settled, else the other sign is possible."""
    r = np.copysign(mag.v, sgn.v)
    settled = (np.abs(sgn.v) > sgn.e) | (sgn.e == 0)
    return Bounded(r, np.where(settled, mag.e, 2.0 * np.abs(mag.v) + mag.e), s.u, s.eta)


def _where(cond, x, y):
    """np.where with the branch chosen by the float64 values (cond is a plain
    bool array: comparisons on Bounded compare values). The error of each
    element is its chosen operand's; a literal 0 is exact."""
    ref = x if isinstance(x, Bounded) else y
    def lift(a):
        if isinstance(a, Bounded):
            return a
        a = np.asarray(a, dtype=np.float64)
        return Bounded(a, np.where(a != 0, ref.u * np.abs(a) + ref.eta, 0.0), ref.u, ref.eta)
    a, b = lift(x), lift(y)
    c = np.asarray(cond, dtype=bool)
    return Bounded(np.where(c, a.v, b.v), np.where(c, a.e, b.e), ref.u, ref.eta)


for _name, _rule in (("add", _add), ("sub", _sub), ("mul", _mul), ("truediv", _div)):
    _op, _rop = _operators(_rule)
    setattr(Bounded, f"__{_name}__", _op)
    setattr(Bounded, f"__r{_name}__", _rop)
Bounded.__neg__ = lambda self: _neg(self, self)
del _name, _rule, _op, _rop


def _compare(op):
    return lambda s, a, b: op(a.v, b.v)


_UFUNCS = {np.equal: _compare(np.equal), np.not_equal: _compare(np.not_equal), np.less: _compare(np.less),
           np.greater: _compare(np.greater), np.less_equal: _compare(np.less_equal),
           np.greater_equal: _compare(np.greater_equal), np.add: _add, np.subtract: _sub, np.multiply: _mul, np.true_divide: _div, np.sqrt: _sqrt,
           np.negative: _neg, np.square: _square, np.maximum: _maximum, np.absolute: _absolute, np.power: _power,
           np.sign: _sign, np.copysign: _copysign, np.matmul: _matmul}
_FUNCTIONS = {np.shape: lambda x: x.v.shape, np.iscomplexobj: lambda x: False, np.sum: _sum, np.mean: _mean, np.zeros_like: _like(0.0), np.full_like: _like(None), np.linalg.norm: _norm,
              np.where: _where}


def unit_roundoff(dtype: str) -> float:
    """u = 2**-p for a format with p significand bits (a complex dtype's: its components')."""
    return 2.0 ** -FORMATS[component(dtype)][0]


def underflow_floor(u: float) -> float:
    """Half the smallest subnormal of the format whose unit roundoff is u:
    below the normal range a rounding errs by up to this absolute amount."""
    for bits, emin, _ in FORMATS.values():
        if 2.0 ** -bits == u:
            return 2.0 ** (emin - bits)
    return 0.0


def exact(x, u: float) -> Bounded:
    """An input the implementation holds exactly (its own stored value)."""
    return Bounded(np.asarray(x, dtype=np.float64), None, u)
