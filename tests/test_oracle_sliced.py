"""An elementwise rule on a large param runs in cache-sized slices (oracle.common._sliced): the result
must be the whole-array result bit for bit, for every optimizer, its state (per-element and per-param
scalars) and counters included, and the caller's arrays must come back unshared."""
import weakref

import numpy as np
import pytest

import oracle
import oracle.common as common
from oracle.spec import shaped
from oracle.common import OptState

from tests.oracle_options import every_option

N = 1000  # > the slice size set below, and not a multiple of it: a short last slice


def _run(spec, slice_size, monkeypatch, steps=3):
    monkeypatch.setattr(common, "SLICE", slice_size)
    rng = np.random.default_rng(5)
    shapes = [shaped((N,), spec.param_ranks), shaped((7,), spec.param_ranks)]  # Muon takes matrices only
    params = [[rng.standard_normal(s) for s in shapes]]
    state = OptState.empty(params)
    hp = every_option(spec)
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


def test_recycled_outputs_never_touch_what_a_caller_holds(monkeypatch):
    """Large outputs are recycled (oracle.common._output): an output the caller still holds, whole or
    through a view, is never handed out again, and one it dropped is (the point of recycling)."""
    monkeypatch.setattr(common, "SLICE", 64)
    monkeypatch.setattr(common, "RECYCLE_BYTES", 0)
    monkeypatch.setattr(common, "_spares", [])
    rng = np.random.default_rng(3)
    p = [[rng.standard_normal(1000)]]
    state = OptState.empty(p)
    held, snapshots, bases = [], [], []
    for k in range(6):
        new, state = oracle.step("adamw", p, [[rng.standard_normal(1000)]], state, [{}])
        base = new[0][0].base  # _sliced's flat output; the param is a reshaped view of it
        assert base is not None and not any(base is h.base or base is h for h in held)
        bases.append(weakref.ref(base))
        if k in (0, 2):  # keep two steps' params, once whole and once through a view
            held.append(new[0][0] if k == 0 else new[0][0][10:20])
            snapshots.append(held[-1].copy())
        p, base = new, None
    for h, s in zip(held, snapshots):
        assert np.array_equal(h, s)
    outputs = [ref() for ref in bases]
    # a dropped param's array came back as a later step's param
    assert len({id(b) for b in outputs}) < len(outputs)


def test_recycling_keeps_the_result_bit_for_bit(monkeypatch):
    monkeypatch.setattr(common, "SLICE", 64)
    runs = []
    for recycle in (0, 1 << 62):
        monkeypatch.setattr(common, "RECYCLE_BYTES", recycle)
        monkeypatch.setattr(common, "_spares", [])
        runs.append(_run(oracle.SPECS["adamw"], 64, monkeypatch, steps=5))
    (p1, s1), (p2, s2) = runs
    assert all(np.array_equal(a, b) for a, b in zip(p1[0], p2[0]))
    for sa, sb in zip(s1.params[0], s2.params[0]):
        assert all(np.array_equal(sa[k], sb[k]) for k in sa)


def test_idle_spares_are_capped_and_the_oldest_let_go(monkeypatch):
    """At most SPARE_BYTES of dropped outputs are kept idle, the newest; a held one is always kept
    (it is in use, not idle), and a dropped one of the asked size is handed out again."""
    monkeypatch.setattr(common, "RECYCLE_BYTES", 0)
    monkeypatch.setattr(common, "SPARE_BYTES", 2 * 100 * 8)
    monkeypatch.setattr(common, "_spares", [])
    held = common._output(100)
    a, b, c = (common._output(100) for _ in range(3))  # held at once: three new arrays, oldest first
    ids = [id(a), id(b), id(c)]
    del a, b, c
    other = common._output(50)  # no spare of that size: a new one; of the three idle, the oldest goes
    assert [id(x) for x in common._spares] == [id(held), ids[1], ids[2], id(other)]
    assert id(common._output(100)) == ids[2]
