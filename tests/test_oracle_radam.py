"""The RAdam oracle (oracle/radam.py) against torch.optim.RAdam's forloop path in float64.

20 free-running steps (tests/torch_lockstep.py), so both the unrectified warmup (rho_t <= 5: steps
1-5 at beta2 = 0.999; longer at beta2 = 0.99) and the rectified branch run: exactly-zero grad
elements, a param without a grad on some steps, several shapes (0-d and 0-numel), two or three
groups (one empty), L2 and decoupled decay, maximize, other betas; agreement to 1e-13 relative.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import oracle
from oracle.radam import DEFAULTS, NO_WARMUP_STEP_RADAM, RAdamConvention, rectification
from tests.torch_lockstep import TOL, lockstep

BASE = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1}
CONFIGS = {
    "l2": [BASE, {**BASE, "weight_decay": 0.0}],
    "decoupled": [{**BASE, "decoupled_weight_decay": True}, {**BASE, "decoupled_weight_decay": True, "lr": 3e-3}],
    "maximize": [{**BASE, "maximize": True}, {**BASE, "maximize": True, "decoupled_weight_decay": True}],
    "betas": [{**BASE, "betas": (0.8, 0.99), "eps": 1e-6}, {**BASE, "betas": (0.0, 0.9), "weight_decay": 0.5}],
    "empty_group": [BASE, {**BASE, "lr": 5e-2}, {**BASE, "weight_decay": 0.0}],
}
SIZES = {"empty_group": [5, 0, 4]}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_matches_torch_float64_forloop(config):
    assert lockstep(torch.optim.RAdam, "radam", CONFIGS[config], SIZES.get(config, [5, 4])) <= TOL


def test_both_branches_run():
    """Steps 1-5 are unrectified at beta2 = 0.999 and step 6 is rectified (rho_6 = 5.99...)."""
    assert [rectification(0.999, t) is None for t in range(1, 8)] == [True] * 5 + [False] * 2


def test_a_wrong_convention_is_caught():
    with pytest.raises(AssertionError):
        lockstep(torch.optim.RAdam, "radam", CONFIGS["l2"], [5, 4], conv=NO_WARMUP_STEP_RADAM)


def test_torch_defaults_are_the_specs():
    sig = inspect.signature(torch.optim.RAdam).parameters
    for key, value in DEFAULTS.items():
        assert sig[key].default == value, key


def test_warmup_skip_leaves_params_until_rectified():
    p = [[np.array([1.5, -2.0])]]
    state = oracle.OptState.empty(p)
    for _ in range(5):
        out, state = oracle.SPECS["radam"].step(p, [[np.ones(2)]], state, [{"lr": 0.1}], NO_WARMUP_STEP_RADAM)
        np.testing.assert_array_equal(out[0][0], p[0][0])
    out, _ = oracle.SPECS["radam"].step(p, [[np.ones(2)]], state, [{"lr": 0.1}], NO_WARMUP_STEP_RADAM)
    assert np.all(out[0][0] < p[0][0])


@pytest.mark.parametrize("bad,match", [
    ({"lr": -1.0}, "group 1: lr"),
    ({"eps": -1e-8}, "group 1: eps"),
    ({"betas": (1.0, 0.999)}, r"group 1: betas\[0\]"),
    ({"betas": (0.9, 1.0)}, r"group 1: betas\[1\]"),
    ({"weight_decay": -0.1}, "group 1: weight_decay"),
    ({"decoupled_weight_decay": 1}, "group 1: decoupled_weight_decay"),
    ({"momentum_decay": 0.1}, "group 1: unknown hyperparameter 'momentum_decay'"),
])
def test_validation_names_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        oracle.step("radam", [[np.ones(2)], [np.ones(2)]], [[np.ones(2)], [np.ones(2)]], None, [{}, bad])


def test_torch_refuses_what_the_oracle_refuses():
    for bad in ({"lr": -1.0}, {"eps": -1e-8}, {"betas": (1.0, 0.999)}, {"betas": (0.9, 1.0)},
                {"weight_decay": -0.1}):
        with pytest.raises(ValueError):
            torch.optim.RAdam([torch.zeros(1)], **bad)


def test_unknown_convention_values():
    with pytest.raises(ValueError, match="warmup"):
        RAdamConvention(warmup="adam")
