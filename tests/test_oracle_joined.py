"""An elementwise rule runs once over the error-carrying params of groups with equal hyperparameters,
concatenated (oracle.common._joined):
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


def _run(spec, formats, steps=3, groups=1, lrs=None):
    """`groups` groups of the SHAPES params (each its own values), every option set, group g at lrs[g]."""
    rng = np.random.default_rng(11)
    shapes = [shaped(s, spec.param_ranks) for s in SHAPES]
    params = [[_bounded(rng.standard_normal(s), f) for s, f in zip(shapes, formats)] for _ in range(groups)]
    state = OptState.empty(params)
    [hp] = every_option(spec)
    hps = [hp if lr is None else {**hp, "lr": lr} for lr in (lrs or [None] * groups)]
    for k in range(steps):
        grads = [[None if (k == 1 and i == 3) else _bounded(rng.standard_normal(s), f)  # a param skips a step
                  for i, (s, f) in enumerate(zip(shapes, formats))] for _ in range(groups)]
        params, state = spec.step(params, grads, state, hps, spec.convention)
    return params, state


def _assert_same_runs(together, alone):
    (together_p, together_st), (alone_p, alone_st) = together, alone
    assert together_st.group_step == alone_st.group_step
    for ga, gb, sa_, sb_ in zip(together_p, alone_p, together_st.params, alone_st.params):
        for a, b in zip(ga, gb):
            assert _same(a, b)
        for sa, sb in zip(sa_, sb_):
            assert sa.keys() == sb.keys()
            for key in sa:
                assert _same(sa[key], sb[key]), key


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
    monkeypatch.setattr(common, "_joined", lambda *a, **k: joined.append(len(a[1])) or real(*a, **k))
    together = _run(spec, formats)
    monkeypatch.setattr(common, "_join_key", lambda *a: None)  # every param alone
    _assert_same_runs(together, _run(spec, formats))
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


@pytest.mark.parametrize("name", sorted(oracle.SPECS))
def test_alike_groups_join_and_equal_their_own_calls(name, monkeypatch):
    """Groups with equal hyperparameters share calls (the engine stacks a checked step and its trajectory
    as groups); a group at another lr never shares one. Either way each param is what its own call gives."""
    spec = oracle.SPECS[name]
    if "lr" not in spec.defaults:
        pytest.skip(f"{name} has no lr")
    formats = ("float32",) * 4
    for lrs, most in (([0.01, 0.01, 0.01], 3 * len(SHAPES)), ([0.01, 0.02], len(SHAPES))):
        joined = []
        real = common._joined
        monkeypatch.setattr(common, "_joined", lambda *a, **k: joined.append(len(a[1])) or real(*a, **k))
        together = _run(spec, formats, groups=len(lrs), lrs=lrs)
        monkeypatch.setattr(common, "_join_key", lambda *a: None)
        _assert_same_runs(together, _run(spec, formats, groups=len(lrs), lrs=lrs))
        monkeypatch.undo()
        assert max(joined, default=0) <= most
        if name in ("adam", "adamw", "sgd", "adagrad", "lion", "rmsprop", "rprop") and len(set(lrs)) == 1:
            assert max(joined) > len(SHAPES)  # not vacuous: params of different groups shared a call


def test_alike_compares_hyperparameters_whole():
    assert common._alike([{"lr": 0.1}, {"lr": 0.2}, {"lr": 0.1}]) == [0, 1, 0]
    assert common._alike([{"lr": float("nan")}, {"lr": float("nan")}]) == [0, 1]
    assert common._alike([{"lr": 0.1, "betas": (0.9, 0.99)}, {"lr": 0.1, "betas": (0.9, 0.999)}]) == [0, 1]
    # plain values compare directly, anything else through NumPy, with the same answers
    assert common._alike([{"lr": 1}, {"lr": 1.0}, {"lr": True}, {"lr": np.float64(1.0)}]) == [0, 0, 0, 0]
    assert common._alike([{"w": np.array([1.0, 2.0])}, {"w": np.array([1.0, 2.0])}, {"w": np.array([1.0, 3.0])}]) \
        == [0, 0, 2]
    assert common._alike([{"lr": np.float64("nan")}, {"lr": np.float64("nan")}]) == [0, 1]
    assert common._alike([{"lr": 0.1}, {"lr": 0.1, "eps": 1e-8}]) == [0, 1]
