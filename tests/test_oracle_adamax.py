"""The Adamax oracle (oracle/adamax.py) against torch.optim.Adamax in float64, forloop and foreach
(tests/oracle_vs_torch.py: zero grads, a grad missing on some steps, empty and several groups),
with and without decay and maximize, and its validation."""
from __future__ import annotations

import itertools

import pytest

import oracle
from oracle.adamax import KERAS_ADAMAX
from tests.oracle_vs_torch import TOL, run, torch_defaults


def configs():
    for wd, maximize in itertools.product((0.0, 0.1), (False, True)):
        g0 = {"lr": 2e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": wd, "maximize": maximize}
        # the second group differs in every hyperparameter; the third is empty
        g1 = {"lr": 1e-2, "betas": (0.8, 0.9), "eps": 1e-2, "weight_decay": 0.1 - wd, "maximize": not maximize}
        yield [g0, g1, None]


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
def test_matches_torch_float64(foreach):
    worst = max(run("adamax", groups, foreach=foreach, seed=k) for k, groups in enumerate(configs()))
    print(f"\nadamax foreach={foreach}: worst relative error vs torch float64 {worst:.3g}")
    assert worst <= TOL


def test_torch_defaults_are_the_specs():
    assert oracle.SPECS["adamax"].defaults == torch_defaults("adamax")


def test_eps_outside_the_max_differs_from_torch():
    """The comparison can fail: the paper's max with eps in the division is far from torch's form."""
    with pytest.raises(AssertionError, match="relative error"):
        run("adamax", [{"eps": 1e-2}], conv=KERAS_ADAMAX, steps=2)


@pytest.mark.parametrize("bad, match", [
    ({"lr": -1.0}, r"group 1: lr=-1.0 must be >= 0"),
    ({"betas": (0.9, 1.0)}, r"group 1: betas\[1\]=1.0 must be \[0.0, 1.0\)"),
    ({"betas": (0.9,)}, r"group 1: betas must be a pair"),
    ({"eps": -1e-8}, r"group 1: eps=-1e-08"),
    ({"weight_decay": float("nan")}, r"group 1: weight_decay=nan"),
    ({"maximize": 1}, r"group 1: maximize=1 must be True or False"),
])
def test_validation_names_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        oracle.SPECS["adamax"].validate([{}, bad])
