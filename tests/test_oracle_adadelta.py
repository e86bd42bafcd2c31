"""The Adadelta oracle (oracle/adadelta.py) against torch.optim.Adadelta in float64, forloop and
foreach (tests/oracle_vs_torch.py: zero grads, a grad missing on some steps, empty and several
groups), with and without decay and maximize, and its validation."""
from __future__ import annotations

import itertools

import pytest

import oracle
from tests.oracle_vs_torch import TOL, run, torch_defaults


def configs():
    for wd, maximize in itertools.product((0.0, 0.1), (False, True)):
        g0 = {"lr": 1.0, "rho": 0.9, "eps": 1e-6, "weight_decay": wd, "maximize": maximize}
        # the second group differs in every hyperparameter; the third is empty
        g1 = {"lr": 0.3, "rho": 0.5, "eps": 1e-3, "weight_decay": 0.1 - wd, "maximize": not maximize}
        yield [g0, g1, None]


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
def test_matches_torch_float64(foreach):
    worst = max(run("adadelta", groups, foreach=foreach, seed=k) for k, groups in enumerate(configs()))
    print(f"\nadadelta foreach={foreach}: worst relative error vs torch float64 {worst:.3g}")
    assert worst <= TOL


def test_torch_defaults_are_the_specs():
    assert oracle.SPECS["adadelta"].defaults == torch_defaults("adadelta")


@pytest.mark.parametrize("bad, match", [
    ({"lr": -1.0}, r"group 1: lr=-1.0 must be >= 0"),
    ({"rho": 1.5}, r"group 1: rho=1.5 must be \[0.0, 1.0\)"),
    ({"eps": float("inf")}, r"group 1: eps=inf"),
    ({"weight_decay": -0.1}, r"group 1: weight_decay=-0.1"),
    ({"maximize": "no"}, r"group 1: maximize='no' must be True or False"),
])
def test_validation_names_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        oracle.SPECS["adadelta"].validate([{}, bad])
