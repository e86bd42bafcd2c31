"""The oracle's boundary: no torch on import, and bad input refused with a message that names
the group (or the convention field)."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import oracle
from oracle import OptState
from oracle.adagrad import AdagradConvention
from oracle.adam import AdamConvention
from oracle.lamb import LambConvention
from oracle.lion import LionConvention
from oracle.sgd import SGDConvention

ROOT = Path(__file__).resolve().parents[1]


def test_import_does_not_import_torch():
    code = "import oracle, oracle.storage, sys; assert 'torch' not in sys.modules, 'oracle imported torch'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def good():
    params = [[np.ones(3)], [np.ones(2), np.ones(())]]
    grads = [[np.ones(3)], [np.ones(2), np.ones(())]]
    return params, grads


NAMES = ["adam", "adamw", "adagrad", "lamb", "sgd", "lion"]
BAD_HPARAMS = [
    ("lr", -1e-3), ("lr", math.nan), ("eps", -1e-8), ("eps", math.nan), ("weight_decay", -0.1),
    ("betas", (0.9, 1.0)), ("betas", (-0.1, 0.999)), ("betas", (1.5, 0.999)), ("betas", (0.9, math.nan)),
    ("lr_decay", -0.1), ("initial_accumulator_value", -1.0), ("max_grad_norm", -1.0), ("max_coeff", -1.0),
    ("momentum", -0.1), ("momentum", math.nan), ("dampening", math.nan),
    # regressions (hostile review): bools are not numbers, infinities are not hyperparameters
    ("lr", True), ("lr", math.inf), ("lr", 10 ** 400), ("eps", math.inf), ("weight_decay", math.inf),
    ("weight_decay", False), ("betas", (True, 0.999)), ("betas", None), ("lr_decay", math.inf),
    ("max_grad_norm", math.inf), ("max_coeff", math.inf),
    ("amsgrad", "yes"), ("maximize", 1), ("grad_averaging", "False"),
]
APPLIES = {"betas": {"adam", "adamw", "lamb", "lion"}, "lr_decay": {"adagrad"}, "initial_accumulator_value": {"adagrad"},
           "max_grad_norm": {"lamb"}, "max_coeff": {"lamb"}, "eps": {"adam", "adamw", "adagrad", "lamb"},
           "momentum": {"sgd"}, "dampening": {"sgd"}, "amsgrad": {"adam", "adamw"},
           "maximize": {"adam", "adamw", "adagrad", "sgd", "lion"}, "grad_averaging": {"lamb"}}


@pytest.mark.parametrize("name,key,value", [(n, k, v) for k, v in BAD_HPARAMS for n in NAMES
                                             if n in APPLIES.get(k, NAMES)])
def test_bad_hyperparameter_names_the_group(name, key, value):
    params, grads = good()
    hps = [{}, {key: value}]
    with pytest.raises(ValueError, match=rf"group 1\b.*{key.split('[')[0]}"):
        oracle.step(name, params, grads, OptState.empty(params), hps)


@pytest.mark.parametrize("name", NAMES)
def test_grad_shape_mismatch(name):
    params, grads = good()
    grads[1][1] = np.ones(2)
    with pytest.raises(ValueError, match=r"group 1 param 1: grad shape"):
        oracle.step(name, params, grads, OptState.empty(params), [{}, {}])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("where", ["param", "grad"])
def test_complex_refused(name, where):
    """A complex param with a real grad, or the reverse: refused by name. An optimizer without a
    complex form refuses any complex value; one with it (tests/test_oracle_complex.py) refuses the
    mismatch, as torch requires a grad of its param's dtype."""
    params, grads = good()
    if where == "param":
        params[1][0] = params[1][0] + 1j
    else:
        grads[1][0] = grads[1][0] * 1j
    takes = oracle.SPECS[name].complex_form is not None
    with pytest.raises(ValueError, match=r"group 1 param 0: a (real|complex) param needs" if takes else
                       r"group 1 param 0: complex"):
        oracle.step(name, params, grads, OptState.empty(params), [{}, {}])


@pytest.mark.parametrize("name", NAMES)
def test_structure_mismatch(name):
    params, grads = good()
    with pytest.raises(ValueError, match=r"group 1: 2 params, 1 grads"):
        oracle.step(name, params, [grads[0], grads[1][:1]], OptState.empty(params), [{}, {}])
    with pytest.raises(ValueError, match=r"group count differs"):
        oracle.step(name, params, grads, OptState.empty(params), [{}])


@pytest.mark.parametrize("cls,field", [(AdamConvention, "decay"), (AdamConvention, "eps_mode"),
                                       (AdamConvention, "counter"), (AdagradConvention, "decay"),
                                       (AdagradConvention, "eps_mode"), (AdagradConvention, "counter"),
                                       (LambConvention, "decay"), (LambConvention, "bias_correction"),
                                       (LambConvention, "trust"), (LambConvention, "counter"),
                                       (SGDConvention, "decay"), (SGDConvention, "first_step"),
                                       (SGDConvention, "counter"), (LionConvention, "sign_zero"),
                                       (LionConvention, "counter")])
def test_unknown_convention_value(cls, field):
    with pytest.raises(ValueError, match=rf"{field} must be one of"):
        cls(**{field: "bogus"})


def test_unknown_optimizer_name():
    params, grads = good()
    with pytest.raises(ValueError, match=r"unknown optimizer 'no_such_optimizer'.*adagrad"):
        oracle.step("no_such_optimizer", params, grads, OptState.empty(params), [{}, {}])


@pytest.mark.parametrize("name", NAMES)
def test_numpy_scalar_hyperparameters_accepted(name):
    params, grads = good()
    hp = {"lr": np.float32(1e-2), "weight_decay": np.float64(0.1), "eps": np.float32(1e-6)}
    hp = {k: v for k, v in hp.items() if k in oracle.SPECS[name].defaults}  # SGD and Lion have no eps
    new, _ = oracle.step(name, params, grads, OptState.empty(params), [hp, hp])
    assert all(np.all(np.isfinite(p)) for group in new for p in group)


# --------------------------------------------------------------------- hostile-review regressions

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("key,hint", [("lrr", "lr"), ("weight_decy", "weight_decay"), ("foreach", None),
                                      ("capturable", None), ("params", None)])
def test_unknown_hyperparameter_key_is_refused(name, key, hint):
    """A typo used to be ignored: `lrr` ran with the default lr. validate()
    (and so step()) names the group and the key, and the closest known key."""
    params, grads = good()
    want = rf"^group 1: unknown hyperparameter '{key}'" + (rf"; did you mean '{hint}'\?" if hint else r" \(")
    with pytest.raises(ValueError, match=want):
        oracle.step(name, params, grads, OptState.empty(params), [{}, {key: 0.1}])
    with pytest.raises(ValueError, match=want):
        oracle.SPECS[name].validate([{}, {key: 0.1}])


@pytest.mark.parametrize("name", NAMES)
def test_every_default_key_is_accepted(name):
    spec = oracle.SPECS[name]
    [hp] = spec.validate([dict(spec.defaults)])
    assert hp.keys() == spec.defaults.keys()
    with pytest.raises(ValueError, match=r"^group 0: hyperparameters must be a dict, got list"):
        spec.validate([[("lr", 0.1)]])


BAD_COUNTERS = [1.5, -1, -1.0, True, "3", math.nan, math.inf, 2 ** 53, 2 ** 63 - 1, None, np.array([3])]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("value", BAD_COUNTERS, ids=repr)
def test_bad_group_counter_is_refused(name, value):
    """step=1.5 or a counter <= -1 used to run (t = 0: bias corrections 0, NaN params)."""
    params, grads = good()
    state = OptState.empty(params)
    state.group_step[1] = value
    with pytest.raises(ValueError, match=r"^group 1: group_step="):
        oracle.step(name, params, grads, state, [{}, {}])


@pytest.mark.parametrize("value", BAD_COUNTERS, ids=repr)
def test_bad_param_counter_is_refused(value):
    params, grads = good()
    state = OptState.empty(params)
    state.params[1][1] = {"step": value}
    with pytest.raises(ValueError, match=r"^group 1 param 1: state 'step'="):
        oracle.step("adamw", params, grads, state, [{}, {}])


@pytest.mark.parametrize("name", NAMES)
def test_integral_counters_of_any_type_give_the_same_step(name):
    """ints, NumPy ints, integral floats (torch keeps per-param counters as
    float tensors) and 0-d arrays: one counter, one result, returned as int."""
    params, grads = good()
    results = []
    for three in (3, np.int64(3), 3.0, np.float32(3.0), np.array(3)):
        state = OptState.empty(params)
        state.group_step = [three, three]
        state.params = [[{"step": three} for _ in ps] for ps in params]
        new, st = oracle.step(name, params, grads, state, [{}, {}])
        assert all(type(c) is int for c in st.group_step)
        assert all(type(e["step"]) is int for sts in st.params for e in sts if "step" in e)
        results.append(new)
    for other in results[1:]:
        for a, b in zip(sum(results[0], []), sum(other, [])):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_float32_state_params_and_grads_are_computed_in_float64(name):
    """A float32 moment used to pull the whole update down to float32 (NumPy's
    promotion keeps float32 * Python float in float32)."""
    rng = np.random.default_rng(0)
    params = [[rng.standard_normal(5)]]
    grads = [[rng.standard_normal(5)]]
    _, state = oracle.step(name, params, grads, OptState.empty(params), [{}])
    f32_state = state.copy()
    f32_state.params[0][0] = {k: (v.astype(np.float32) if k != "step" else v) for k, v in state.params[0][0].items()}
    f64_state = f32_state.copy()
    f64_state.params[0][0] = {k: (v.astype(np.float64) if k != "step" else v) for k, v in f32_state.params[0][0].items()}
    p32, g32 = [[params[0][0].astype(np.float32)]], [[grads[0][0].astype(np.float32)]]
    p64, g64 = [[p32[0][0].astype(np.float64)]], [[g32[0][0].astype(np.float64)]]
    new_a, st_a = oracle.step(name, p32, g32, f32_state, [{}])
    new_b, st_b = oracle.step(name, p64, g64, f64_state, [{}])
    assert new_a[0][0].dtype == np.float64
    np.testing.assert_array_equal(new_a[0][0], new_b[0][0])
    for k, v in st_a.params[0][0].items():
        if k != "step":
            assert v.dtype == np.float64, k
            np.testing.assert_array_equal(v, st_b.params[0][0][k])
    # the caller's float32 state is not modified
    assert all(v.dtype == np.float32 for k, v in f32_state.params[0][0].items() if k != "step")


def test_error_carrying_arrays_pass_through_unconverted():
    """as_float64 leaves objects with their own __array_function__ (the
    comparison's error-bounded arrays) alone, state included."""
    from oracle.common import canonical_state
    from oracle.compare.measuring.errmodel import Bounded
    b = Bounded(np.ones(3), None, 2.0 ** -24)
    state = OptState([2], [[{"exp_avg": b, "exp_avg_sq": b, "step": 2.0}]])
    out = canonical_state(state)
    assert type(out.params[0][0]["exp_avg"]) is Bounded
    assert out.params[0][0]["step"] == 2 and type(out.params[0][0]["step"]) is int
    params, grads = [[Bounded(np.ones(3), None, 2.0 ** -24)]], [[Bounded(np.full(3, 0.5), None, 2.0 ** -24)]]
    new, _ = oracle.step("adamw", params, grads, OptState.empty(params), [{}])
    assert type(new[0][0]) is Bounded


@pytest.mark.parametrize("what,value,match", [
    ("state", ["a", "b"], r"^group 1 param 0: state 'exp_avg': not a float array"),
    ("state", np.ones(2) * 1j, r"^group 1 param 0: state 'exp_avg': expected a real float array"),
    ("state", None, r"^group 1 param 0: state 'exp_avg' shape \(\) != param shape \(2,\)"),
    ("entry", 3, r"^group 1 param 0: state must be a dict, got int"),
    ("param", ["a", "b"], r"^group 1 param 0: not a float array"),
])
def test_unconvertible_arrays_are_named(what, value, match):
    params, grads = good()
    state = OptState.empty(params)
    if what == "state":
        state.params[1][0] = {"exp_avg": value, "exp_avg_sq": np.ones(2)}
    elif what == "entry":
        state.params[1][0] = value
    else:
        params[1][0] = value
    with pytest.raises(ValueError, match=match):
        oracle.step("adamw", params, grads, state, [{}, {}])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("inv_scale", [math.nan, math.inf, 0.0, -1.0, True, "2"], ids=repr)
def test_bad_inv_scale_is_refused(name, inv_scale):
    params, grads = good()
    with pytest.raises(ValueError, match=r"^scaling: inv_scale=.* must be a finite number > 0"):
        oracle.step(name, params, grads, OptState.empty(params), [{}, {}], scaling=oracle.GradScaling(inv_scale))
    with pytest.raises(ValueError, match=r"^scaling: inv_scale="):  # on a skipped step too
        oracle.step(name, params, grads, OptState.empty(params), [{}, {}],
                    scaling=oracle.GradScaling(inv_scale, found_inf=True))


def test_import_oracle_needs_no_pytest():
    """`import oracle` (the README's main job) must work where pytest is not installed: the
    registry reads which modules define SPECS without importing the pytest plugin."""
    import subprocess
    import sys
    code = "import sys; sys.modules['pytest'] = None; import oracle; print(sorted(oracle.SPECS))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "sgd" in done.stdout and "lion" in done.stdout
