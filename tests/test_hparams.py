"""Hyperparameter validation is written once (oracle/hparams.py, from the roles each spec declares):
the oracle's validate and our fused constructors refuse the same values with the same message."""
from __future__ import annotations

import math

import pytest
import torch

import fused
import oracle

# a fused class's hyperparameter -> bad values; each must be refused alike by its oracle spec
BAD = {"lr": [-1.0, math.inf, math.nan, True, "0.1", 10 ** 400], "eps": [-1e-8, math.nan],
       "weight_decay": [-0.1, math.inf], "betas": [(1.0, 0.9), (0.9, -0.1), (0.9,), None, (math.nan, 0.9)],
       "lr_decay": [-1.0], "initial_accumulator_value": [-1.0], "momentum": [-0.5], "dampening": [math.nan],
       "max_grad_norm": [-1.0]}


def _message(fn) -> str:
    with pytest.raises(ValueError) as info:
        fn()
    return str(info.value)


@pytest.mark.parametrize("name", sorted(fused.OPTIMIZERS))
def test_fused_and_oracle_refuse_alike(name):
    cls, fixed = fused.OPTIMIZERS[name]
    spec = oracle.SPECS[cls.SPEC]
    checked = 0
    for key, values in BAD.items():
        if key not in spec.defaults or key not in cls.__init__.__code__.co_varnames:
            continue
        for value in values:
            ours = _message(lambda: cls([{"params": [torch.zeros(2)]}, {"params": [torch.zeros(2)], key: value}],
                                         **fixed))
            spec_says = _message(lambda: spec.validate([{}, {key: value}]))
            assert ours == spec_says, (key, value)
            assert ours.startswith("group 1: ") and key in ours
            checked += 1
    assert checked >= 5, f"{name}: only {checked} bad values apply"
