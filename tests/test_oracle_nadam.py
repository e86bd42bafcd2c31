"""The NAdam oracle (oracle/nadam.py) against torch.optim.NAdam's forloop path in float64.

20 free-running steps (tests/torch_lockstep.py): exactly-zero grad elements, a param without a grad
on some steps, several shapes (0-d and 0-numel), two or three groups (one of them empty), every
option (L2 and decoupled decay, maximize, momentum_decay, betas), agreement to 1e-13 relative, the
counters and mu_product included. The foreach form (eps_mode="outside") is the same update.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import oracle
from oracle.nadam import DEFAULTS, TORCH_NADAM_FOREACH, NAdamConvention
from tests.torch_lockstep import TOL, lockstep

BASE = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1, "momentum_decay": 4e-3}
CONFIGS = {
    "l2": [BASE, {**BASE, "weight_decay": 0.0}],
    "decoupled": [{**BASE, "decoupled_weight_decay": True}, {**BASE, "decoupled_weight_decay": True, "lr": 3e-3}],
    "maximize": [{**BASE, "maximize": True}, {**BASE, "maximize": True, "decoupled_weight_decay": True}],
    "schedule": [{**BASE, "momentum_decay": 0.5, "betas": (0.8, 0.95), "eps": 1e-6},
                 {**BASE, "momentum_decay": 0.0, "weight_decay": 0.5}],
    "empty_group": [BASE, {**BASE, "lr": 5e-2}, {**BASE, "weight_decay": 0.0}],
}
SIZES = {"empty_group": [5, 0, 4]}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_matches_torch_float64_forloop(config):
    worst = lockstep(torch.optim.NAdam, "nadam", CONFIGS[config], SIZES.get(config, [5, 4]))
    assert worst <= TOL


def test_foreach_form_is_the_same_update():
    assert lockstep(torch.optim.NAdam, "nadam", CONFIGS["l2"], [5, 4], conv=TORCH_NADAM_FOREACH) <= TOL


def test_torch_defaults_are_the_specs():
    import inspect
    sig = inspect.signature(torch.optim.NAdam).parameters
    for key, value in DEFAULTS.items():
        assert sig[key].default == value, key


def test_zero_grads_move_only_by_decay_and_momentum():
    """A grad that is exactly 0 from the first step leaves m = v = 0: the update is 0/eps = 0."""
    p = [[np.array([1.5, -2.0])]]
    out, state = oracle.step("nadam", p, [[np.zeros(2)]], None, [{"lr": 0.1}])
    np.testing.assert_array_equal(out[0][0], p[0][0])
    assert state.params[0][0]["step"] == 1 and state.params[0][0]["mu_product"] < 1


@pytest.mark.parametrize("bad,match", [
    ({"lr": -1.0}, "group 1: lr"),
    ({"eps": -1e-8}, "group 1: eps"),
    ({"betas": (1.0, 0.999)}, r"group 1: betas\[0\]"),
    ({"betas": (0.9, -0.1)}, r"group 1: betas\[1\]"),
    ({"weight_decay": -0.1}, "group 1: weight_decay"),
    ({"momentum_decay": -1.0}, "group 1: momentum_decay"),
    ({"momentum_decay": math.nan}, "group 1: momentum_decay"),
    ({"decoupled_weight_decay": "yes"}, "group 1: decoupled_weight_decay"),
    ({"momentum": 0.9}, "group 1: unknown hyperparameter 'momentum'"),
])
def test_validation_names_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        oracle.step("nadam", [[np.ones(2)], [np.ones(2)]], [[np.ones(2)], [np.ones(2)]], None, [{}, bad])


def test_torch_refuses_what_the_oracle_refuses():
    for bad in ({"lr": -1.0}, {"eps": -1e-8}, {"betas": (1.0, 0.999)}, {"weight_decay": -0.1},
                {"momentum_decay": -1.0}):
        with pytest.raises(ValueError):
            torch.optim.NAdam([torch.zeros(1)], **bad)


def test_unknown_convention_values():
    with pytest.raises(ValueError, match="eps_mode"):
        NAdamConvention(eps_mode="inside")
    with pytest.raises(ValueError, match="counter"):
        NAdamConvention(counter="step")


def test_a_wrong_convention_is_caught():
    """The comparison can fail: a per-group counter parts from torch once a param misses a grad."""
    with pytest.raises(AssertionError):
        lockstep(torch.optim.NAdam, "nadam", CONFIGS["l2"], [5, 4], conv=NAdamConvention(counter="group"))
