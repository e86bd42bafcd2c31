"""The Rprop oracle (oracle/rprop.py) against torch.optim.Rprop's forloop path in float64.

20 free-running steps (tests/torch_lockstep.py): exactly-zero grad elements (sign 0: the step size
stays), a param without a grad on some steps, several shapes (0-d and 0-numel), two or three groups
(one empty), maximize, other etas, step-size bounds that both bind; agreement to 1e-13 relative, the
state (prev, step_size) and counters included.
"""
from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch

import oracle
from oracle.rprop import DEFAULTS, RPROP_MINUS, RpropConvention
from tests.torch_lockstep import TOL, lockstep

BASE = {"lr": 1e-2, "etas": (0.5, 1.2), "step_sizes": (1e-6, 50.0)}
CONFIGS = {
    "defaults": [BASE, {**BASE, "lr": 3e-3}],
    "maximize": [{**BASE, "maximize": True}, BASE],
    "etas": [{**BASE, "etas": (0.3, 1.5)}, {**BASE, "etas": (0.9, 1.01)}],
    # both bounds bind within 20 steps: the step grows to 0.05 and shrinks to 1e-3
    "bounds": [{**BASE, "lr": 0.04, "step_sizes": (1e-3, 0.05)}, {**BASE, "lr": 1.0, "step_sizes": (0.5, 2.0)}],
    "empty_group": [BASE, {**BASE, "lr": 5e-2}, {**BASE, "maximize": True}],
}
SIZES = {"empty_group": [5, 0, 4]}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_matches_torch_float64_forloop(config):
    assert lockstep(torch.optim.Rprop, "rprop", CONFIGS[config], SIZES.get(config, [5, 4])) <= TOL


def test_a_wrong_convention_is_caught():
    with pytest.raises(AssertionError):
        lockstep(torch.optim.Rprop, "rprop", CONFIGS["defaults"], [5, 4], conv=RPROP_MINUS)


def test_torch_defaults_are_the_specs():
    sig = inspect.signature(torch.optim.Rprop).parameters
    for key, value in DEFAULTS.items():
        assert tuple(sig[key].default) == value if isinstance(value, tuple) else sig[key].default == value, key


def test_sign_flip_shrinks_and_holds():
    """Hand-worked: +1, +1, -1, -1 on one element with lr 0.1: steps 0.1, 0.12, shrink to 0.06 with
    no move (iRprop-: g zeroed), then sign(g*0) = 0 keeps 0.06 and moves by it."""
    p, state, moved = [[np.array([0.0])]], oracle.OptState.empty([[np.zeros(1)]]), []
    for g in (1.0, 1.0, -1.0, -1.0):
        out, state = oracle.step("rprop", p, [[np.array([g])]], state, [{"lr": 0.1}])
        moved.append(float(out[0][0][0] - p[0][0][0]))
        p = out
    np.testing.assert_allclose(moved, [-0.1, -0.12, 0.0, 0.06], rtol=1e-15)


@pytest.mark.parametrize("bad,match", [
    ({"lr": -1.0}, "group 1: lr"),
    ({"etas": (1.0, 1.2)}, r"group 1: etas\[0\]"),
    ({"etas": (0.0, 1.2)}, r"group 1: etas\[0\]"),
    ({"etas": (0.5, 1.0)}, r"group 1: etas\[1\]"),
    ({"etas": (0.5, math.inf)}, r"group 1: etas\[1\]"),
    ({"step_sizes": (1.0, 0.5)}, "group 1: step_sizes"),
    ({"step_sizes": (-1.0, 0.5)}, r"group 1: step_sizes\[0\]"),
    ({"etas": (0.5,)}, "group 1: etas must be a pair"),
    ({"momentum": 0.9}, "group 1: unknown hyperparameter 'momentum'"),
])
def test_validation_names_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        oracle.step("rprop", [[np.ones(2)], [np.ones(2)]], [[np.ones(2)], [np.ones(2)]], None, [{}, bad])


def test_torch_refuses_the_etas_the_oracle_refuses():
    for etas in ((1.0, 1.2), (0.0, 1.2), (0.5, 1.0)):
        with pytest.raises(ValueError):
            torch.optim.Rprop([torch.zeros(1)], etas=etas)


def test_unknown_convention_values():
    with pytest.raises(ValueError, match="form"):
        RpropConvention(form="irprop+")
