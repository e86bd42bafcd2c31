"""Complex params as a dtype axis of the engine: which cases exist, how complex tensors are made and
read back ((re, im) pairs in float64), errors in ULPs of each component's own format and magnitude,
which targets take complex params, and a wrong complex implementation failing while torch passes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import oracle
from oracle.compare.checking import cases as C
from oracle.compare.checking.case_run import run_case
from oracle.compare.checking.guards import PAD, allocate
from oracle.compare.measuring.checks import CheckResult, compare_tensor, same_bits
from oracle.compare.measuring.readback import read, to_numpy, to_tensor
from oracle.compare.optimizers import record
from oracle.compare.registry import builtin_targets
from oracle.mutants import target_for
from oracle.mutants.optimizers.adam_complex import TorchComplexAdam, Torch59998ComplexSquare
from oracle.storage import quantum, round_to

WITH_COMPLEX = sorted(n for n, s in oracle.SPECS.items() if s.complex_form is not None)
WITHOUT = sorted(n for n, s in oracle.SPECS.items() if s.complex_form is None)


def target(name):
    return next(t for t in builtin_targets() if t.name == name)


# --- cases -----------------------------------------------------------------------------------------

def test_complex64_runs_by_default_and_complex128_on_request():
    assert "complex64" in C.DTYPES and "complex128" not in C.DTYPES
    assert C.find_case("adam/c128/wd0.1/single/normal").dtype == "complex128"


@pytest.mark.parametrize("name", WITH_COMPLEX)
def test_an_optimizer_with_a_complex_form_gets_its_first_plan_row_and_a_decay_row(name):
    plan = record(name).plan
    got = [(c.config, c.layout, c.regime) for c in C.cases(name, ("complex64",))]
    assert got[0] == plan[0]
    assert len(got) <= 2 and set(got) <= set(plan)
    assert len(got) == 1 or got[1][2] == "large_decay"
    assert all(c.name.split("/")[1] == "c64" for c in C.cases(name, ("complex64",)))


@pytest.mark.parametrize("name", WITHOUT)
def test_an_optimizer_without_a_complex_form_has_no_complex_case(name):
    assert C.cases(name, ("complex64", "complex128")) == []


def test_complex_inputs_are_float32_pairs():
    case = C.cases("adam", ("complex64",))[0]
    shapes = C.LAYOUTS[case.layout]["groups"][0]
    params, grads = C.initial_params(case, 0)[0], C.grads_at(case, 0, 1)[0]
    for shape, p, g in zip(shapes, params, grads):
        assert p.shape == g.shape == (*shape, 2)
        assert np.array_equal(round_to(p, "float32"), p) and np.array_equal(round_to(g, "float32"), g)
        assert np.any(p[..., 1] != 0) and np.any(g[..., 1] != 0)  # imaginary parts are drawn too


# --- tensors in and out --------------------------------------------------------------------------

def test_readback_gives_re_im_pairs_exactly():
    pairs = np.array([[1.5, -2.0], [0.1, 3e-8]])
    t = to_tensor(pairs, torch.complex64)
    assert t.dtype == torch.complex64 and t.shape == (2,)
    assert t[1].imag.item() == np.float32(3e-8)
    assert np.array_equal(to_numpy(t), round_to(pairs, "float32"))
    assert to_numpy(to_tensor(np.zeros((0, 2)), torch.complex128)).shape == (0, 2)


def test_snapshot_of_torch_adam_on_complex_params():
    p = to_tensor(np.array([[1.0, 2.0], [3.0, -4.0]]), torch.complex64).requires_grad_()
    p.grad = to_tensor(np.array([[0.5, -0.25], [0.0, 1.0]]), torch.complex64)
    opt = torch.optim.Adam([p], lr=0.1)
    opt.step()
    snap = read(opt)
    assert snap.dtypes[0][0] == {"param": "complex64", "exp_avg": "complex64", "exp_avg_sq": "complex64"}
    v = snap.state[0][0]["exp_avg_sq"]
    assert v.shape == (2, 2)
    # torch keeps (1 - beta2) * (re^2, im^2), one float32 rounding each
    assert np.array_equal(v, round_to(0.001 * np.array([[0.25, 0.0625], [0.0, 1.0]]), "float32"))


def test_bits_of_complex128_tensors_compare_per_component():
    a = torch.tensor([1.0 + 2.0j, complex(-0.0, 0.0)], dtype=torch.complex128)
    assert same_bits(a, a.clone())
    assert not same_bits(a, torch.tensor([1.0 + 2.0j, 0.0 + 0.0j], dtype=torch.complex128))  # -0.0 vs 0.0


def test_a_guard_around_a_complex_tensor_sees_a_write_outside_it():
    view, guard = allocate(np.ones((3, 2)), torch.complex64, "cpu", "param")
    assert view.dtype == torch.complex64 and guard.changed() == []
    with torch.no_grad():
        guard.buffer[PAD + 3] = 5.0  # the element just past the view
    assert guard.changed() == [3]


# --- ULPs per component ------------------------------------------------------------------------------

def test_errors_are_ulps_of_each_component_at_its_own_magnitude():
    """A small imaginary part off by one float32 ULP of itself is 1 ULP, not a fraction of the ULP of
    |z| or of the real part: each component is a float32 of its own."""
    assert quantum(3e-3, "complex64") == quantum(3e-3, "float32")
    expected = np.array([[1.0, 3e-3]])
    got = expected.copy()
    got[0, 1] += float(quantum(3e-3, "float32"))
    res = CheckResult("lockstep")
    compare_tensor(res, 1, "param", expected, got, expected, 0.5 * quantum(expected, "float32"), "complex64")
    assert not res.passed
    finding = res.findings[0]
    assert finding.index == (0, 1) and finding.error_ulps == 1.0 and finding.bound_ulps == 0.5


# --- targets ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", WITH_COMPLEX)
def test_torch_forloop_and_foreach_take_complex_and_fused_does_not(name):
    for t in builtin_targets():
        if t.optimizer == name and t.name.startswith(f"torch.{name}."):
            takes = t.name.endswith((".forloop", ".foreach"))
            assert ("complex64" in t.dtypes) == takes, t.name


def test_a_target_without_complex_skips_saying_so():
    case = C.cases("adam", ("complex64",))[0]
    r = run_case(target("torch.adam.fused"), case, 0)
    assert r.status == "skip" and "does not support complex64" in r.reason


def test_torch_passes_and_the_complex_square_mutant_fails():
    """torch's forloop and a correct complex Adam pass the complex case; the mutant that forms v from
    the complex square g*g (pytorch #59998) fails lockstep on exp_avg_sq at step 1. On a real case the
    mutant is the control's code, and passes."""
    case = C.cases("adam", ("complex64",))[0]
    assert run_case(target("torch.adam.forloop"), case, 0).status == "pass"
    assert run_case(target_for(TorchComplexAdam), case, 0).status == "pass"
    bad = run_case(target_for(Torch59998ComplexSquare), case, 0)
    assert bad.status == "fail"
    found = bad.checks["lockstep"].findings
    assert any("exp_avg_sq" in f.tensor and f.step == 1 for f in found)
    real = next(c for c in C.cases("adam", ("float32",)) if c.config == case.config and c.layout == case.layout)
    assert run_case(target_for(Torch59998ComplexSquare), real, 0).status == "pass"
