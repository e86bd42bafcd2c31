"""An elementwise rule runs once over a group's error-carrying params concatenated (oracle.common._joined):
every param's value, derived error bound and state must be what its own call gives, bit for bit, for
every optimizer (state entries of every boolean option included), and params that cannot share a call
(other formats, a per-param scalar state entry, another counter) run apart."""
import numpy as np
import pytest

import oracle
import oracle.common as common
from oracle.common import OptState
from oracle.compare.measuring.errmodel import Bounded, unit_roundoff
from oracle.spec import shaped

from tests.oracle_options import every_option

SHAPES = [(7,), (3, 4), (), (5,)]


def _bounded(x, fmt="float32", state_fmt="float32"):
    return Bounded(x, None, unit_roundoff(fmt), state_u=unit_roundoff(state_fmt), store_u=unit_roundoff(fmt))


def _run(spec, formats, steps=3):
    rng = np.random.default_rng(11)
    shapes = [shaped(s, spec.param_ranks) for s in SHAPES]
    params = [[_bounded(rng.standard_normal(s), f) for s, f in zip(shapes, formats)]]
    state = OptState.empty(params)
    hp = every_option(spec)
    for k in range(steps):
        grads = [[None if (k == 1 and i == 3) else _bounded(rng.standard_normal(s), f)  # a param skips a step
                  for i, (s, f) in enumerate(zip(shapes, formats))]]
        params, state = spec.step(params, grads, state, hp, spec.convention)
    return params, state


def _same(a, b) -> bool:
    if isinstance(a, Bounded):
        return (isinstance(b, Bounded) and a.shape == b.shape and np.array_equal(a.v, b.v, equal_nan=True)
                and np.array_equal(a.e, b.e, equal_nan=True) and a.join_key() == b.join_key())
    return type(a) is type(b) and np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("formats", [("float32",) * 4, ("float32", "bfloat16", "float32", "bfloat16")])
@pytest.mark.parametrize("name", sorted(oracle.SPECS))
def test_joined_equals_param_by_param(name, formats, monkeypatch):
    spec = oracle.SPECS[name]
    joined = []
    real = common._joined
    monkeypatch.setattr(common, "_joined", lambda *a, **k: joined.append(len(a[2])) or real(*a, **k))
    together_p, together_st = _run(spec, formats)
    monkeypatch.setattr(common, "_join_key", lambda *a: None)  # every param alone
    alone_p, alone_st = _run(spec, formats)
    for a, b in zip(together_p[0], alone_p[0]):
        assert _same(a, b)
    assert together_st.group_step == alone_st.group_step
    for sa, sb in zip(together_st.params[0], alone_st.params[0]):
        assert sa.keys() == sb.keys()
        for key in sa:
            assert _same(sa[key], sb[key]), key
    if name in ("adam", "adamw", "sgd", "adagrad", "lion", "rmsprop", "rprop"):  # not vacuous
        assert max(joined) >= 2
        if formats[1] != formats[0]:  # bfloat16 and float32 params never share a call
            assert max(joined) <= 2


def test_a_per_param_scalar_state_entry_is_never_joined():
    """NAdam's mu_product is one number per param: params holding it run apart."""
    p = _bounded(np.ones(3))
    st = {"mu_product": _bounded(np.float64(0.9)), "exp_avg": _bounded(np.zeros(3))}
    assert common._join_key(p, _bounded(np.ones(3)), st, 1) is None
    assert common._join_key(p, _bounded(np.ones(3)), {"exp_avg": _bounded(np.zeros(3)), "step": 2}, 2) is not None
