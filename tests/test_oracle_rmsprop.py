"""The RMSprop oracle (oracle/rmsprop.py) against torch.optim.RMSprop in float64, forloop and
foreach (tests/oracle_vs_torch.py: zero grads, a grad missing on some steps, empty and several
groups), over every combination of its switches, and its validation."""
from __future__ import annotations

import itertools

import pytest

import oracle
from oracle.rmsprop import KERAS_RMSPROP
from tests.oracle_vs_torch import TOL, run, torch_defaults


def configs():
    for centered, momentum, wd, maximize in itertools.product((False, True), (0.0, 0.9), (0.0, 0.1), (False, True)):
        g0 = {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8, "centered": centered, "momentum": momentum,
              "weight_decay": wd, "maximize": maximize}
        # the second group differs in every hyperparameter; the third is empty
        g1 = {"lr": 3e-3, "alpha": 0.9, "eps": 1e-3, "centered": not centered, "momentum": 0.5 - momentum / 2,
              "weight_decay": 0.1 - wd, "maximize": not maximize}
        yield [g0, g1, None]


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
def test_matches_torch_float64(foreach):
    worst = max(run("rmsprop", groups, foreach=foreach, seed=k) for k, groups in enumerate(configs()))
    print(f"\nrmsprop foreach={foreach}: worst relative error vs torch float64 {worst:.3g}")
    assert worst <= TOL


def test_torch_defaults_are_the_specs():
    assert oracle.SPECS["rmsprop"].defaults == torch_defaults("rmsprop")


def test_eps_inside_differs_from_torch():
    """The comparison can fail: eps inside the root is far from torch's form at eps = 1e-3."""
    with pytest.raises(AssertionError, match="relative error"):
        run("rmsprop", [{"eps": 1e-3}], conv=KERAS_RMSPROP, steps=2)


@pytest.mark.parametrize("bad, match", [
    ({"lr": -1.0}, r"group 1: lr=-1.0 must be >= 0"),
    ({"alpha": 1.0}, r"group 1: alpha=1.0 must be \[0.0, 1.0\)"),
    ({"eps": float("nan")}, r"group 1: eps=nan"),
    ({"momentum": -0.1}, r"group 1: momentum=-0.1"),
    ({"weight_decay": float("inf")}, r"group 1: weight_decay=inf"),
    ({"centered": "yes"}, r"group 1: centered='yes' must be True or False"),
    ({"alhpa": 0.9}, r"group 1: unknown hyperparameter 'alhpa'; did you mean 'alpha'"),
])
def test_validation_names_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        oracle.SPECS["rmsprop"].validate([{}, bad])
