"""The ASGD oracle (oracle/asgd.py) against torch.optim.ASGD in float64, forloop and foreach
(tests/oracle_vs_torch.py: zero grads, a grad missing on some steps, empty and several groups),
with decay, maximize and averaging that starts within the run (t0 = 3), and its validation.
torch keeps step, eta and mu in its scalar dtype: float64 here (the default dtype is set so),
so eta and mu are compared at float64 agreement too."""
from __future__ import annotations

import itertools

import pytest
import torch

import oracle
from tests.oracle_vs_torch import TOL, run, torch_defaults


@pytest.fixture(autouse=True)
def float64_scalars():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def configs():
    for wd, maximize in itertools.product((0.0, 0.1), (False, True)):
        g0 = {"lr": 1e-2, "lambd": 0.5, "alpha": 0.75, "t0": 3.0, "weight_decay": wd, "maximize": maximize}
        # the second group differs in every hyperparameter; the third is empty
        g1 = {"lr": 0.1, "lambd": 1e-4, "alpha": 0.5, "t0": 1e6, "weight_decay": 0.1 - wd, "maximize": not maximize}
        yield [g0, g1, None]


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
def test_matches_torch_float64(foreach):
    worst = max(run("asgd", groups, foreach=foreach, seed=k) for k, groups in enumerate(configs()))
    print(f"\nasgd foreach={foreach}: worst relative error vs torch float64 {worst:.3g}")
    assert worst <= TOL


def test_torch_defaults_are_the_specs():
    assert oracle.SPECS["asgd"].defaults == torch_defaults("asgd")


@pytest.mark.parametrize("bad, match", [
    ({"lr": -1.0}, r"group 1: lr=-1.0 must be >= 0"),
    ({"lambd": float("nan")}, r"group 1: lambd=nan"),
    ({"alpha": -0.5}, r"group 1: alpha=-0.5"),
    ({"t0": float("inf")}, r"group 1: t0=inf"),
    ({"weight_decay": -1.0}, r"group 1: weight_decay=-1.0"),
    ({"lamdb": 1e-4}, r"group 1: unknown hyperparameter 'lamdb'; did you mean 'lambd'"),
])
def test_validation_names_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        oracle.SPECS["asgd"].validate([{}, bad])
