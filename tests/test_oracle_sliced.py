"""An elementwise rule on a large param runs in cache-sized slices (oracle.common._sliced): the result
must be the whole-array result bit for bit, for every optimizer, its state (per-element and per-param
scalars) and counters included, and the caller's arrays must come back unshared."""
import numpy as np
import pytest

import oracle
import oracle.common as common
from oracle.spec import shaped
from oracle.common import OptState

N = 1000  # > the slice size set below, and not a multiple of it: a short last slice


def _hparams(spec) -> dict:
    hp = {"weight_decay": 0.1} if "weight_decay" in spec.defaults else {}
    # every boolean option on, so the state entries it adds are sliced too (amsgrad's maximum, ...)
    hp.update({k: True for k, v in spec.defaults.items() if v is False and k not in ("maximize", "nesterov")})
    return hp


def _run(spec, slice_size, monkeypatch, steps=3):
    monkeypatch.setattr(common, "SLICE", slice_size)
    rng = np.random.default_rng(5)
    shapes = [shaped((N,), spec.param_ranks), shaped((7,), spec.param_ranks)]  # Muon takes matrices only
    params = [[rng.standard_normal(s) for s in shapes]]
    state = OptState.empty(params)
    hp = [_hparams(spec)]
    try:
        spec.validate(hp)
    except ValueError:
        hp = [{}]
    for _ in range(steps):
        grads = [[rng.standard_normal(s) for s in shapes]]
        params, state = spec.step(params, grads, state, hp, spec.convention)
    return params, state


@pytest.mark.parametrize("name", sorted(oracle.SPECS))
def test_sliced_equals_whole(name, monkeypatch):
    spec = oracle.SPECS[name]
    calls = []
    real = common._sliced
    monkeypatch.setattr(common, "_sliced", lambda *a, **k: calls.append(1) or real(*a, **k))
    sliced_p, sliced_st = _run(spec, 64, monkeypatch)
    whole_p, whole_st = _run(spec, 1 << 62, monkeypatch)
    for a, b in zip(sliced_p[0], whole_p[0]):
        assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    assert sliced_st.group_step == whole_st.group_step
    for sa, sb in zip(sliced_st.params[0], whole_st.params[0]):
        assert sa.keys() == sb.keys()
        for key in sa:
            assert np.shape(sa[key]) == np.shape(sb[key]) and np.array_equal(sa[key], sb[key], equal_nan=True), key
    if calls:  # an elementwise rule: the large param took the sliced path, the small one did not
        assert len(calls) == 3


def test_elementwise_rules_are_sliced():
    """Not vacuous: the rules the oracle declares elementwise take the sliced path."""
    sliced = []
    for name, spec in oracle.SPECS.items():
        real = common._sliced
        common._sliced = lambda *a, **k: sliced.append(name) or real(*a, **k)
        try:
            shape = shaped((common.SLICE + 1,), spec.param_ranks)
            p = [[np.ones(shape)]]
            spec.step(p, [[np.ones(shape)]], OptState.empty(p), [{}], spec.convention)
        finally:
            common._sliced = real
    assert {"adam", "adamw", "sgd", "adagrad", "lion"} <= set(sliced)
    assert "lamb" not in sliced  # its trust ratio is a norm over the whole param


def test_results_never_share_the_callers_arrays():
    """No copy is made up front; what would come back shared is copied at the end (a param without a
    grad, its state, every array under found_inf)."""
    p = [[np.ones(5), np.ones(5)]]
    st = OptState([0], [[{}, {"exp_avg": np.zeros(5), "exp_avg_sq": np.zeros(5), "step": 1}]])
    for scaling in (None, common.GradScaling(1.0, True)):
        new, new_st = oracle.step("adamw", p, [[np.ones(5), None]], st, [{}], scaling=scaling)
        for a, b in zip(new[0], p[0]):
            assert not np.may_share_memory(a, b)
        for key, v in new_st.params[0][1].items():
            if key != "step":
                assert not np.may_share_memory(v, st.params[0][1][key])
