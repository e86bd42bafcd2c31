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
]
APPLIES = {"betas": {"adam", "adamw", "lamb", "lion"}, "lr_decay": {"adagrad"}, "initial_accumulator_value": {"adagrad"},
           "max_grad_norm": {"lamb"}, "max_coeff": {"lamb"}, "eps": {"adam", "adamw", "adagrad", "lamb"},
           "momentum": {"sgd"}, "dampening": {"sgd"}}


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
    params, grads = good()
    if where == "param":
        params[1][0] = params[1][0] + 1j
    else:
        grads[1][0] = grads[1][0] * 1j
    with pytest.raises(ValueError, match=r"group 1 param 0: complex"):
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
    new, _ = oracle.step(name, params, grads, OptState.empty(params), [hp, hp])
    assert all(np.all(np.isfinite(p)) for group in new for p in group)
