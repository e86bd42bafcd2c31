"""The mutation gate (python -m oracle.mutants) in the test suite: every CPU mutant
is killed by the check its catalog entry expects, at the tensor, step and case it
names; every control and torch reference passes (no false positives).

The gate runs once per session (about a minute on 2 cores). GPU-only mutants run
under tox -e gpu (pytest -m gpu).
"""
from __future__ import annotations

import io
import os

import pytest
import torch

from oracle.mutants import controls, killmatrix as K, mutants
from oracle.mutants.wrappers import WRAPPER_MUTANTS

ENTRIES = K.entries()
CPU_MUTANTS = [e for e in ENTRIES if e.kind.endswith("mutant") and not e.gpu_only and not e.undeclared_only]
GPU_MUTANTS = [e for e in ENTRIES if e.kind.endswith("mutant") and e.gpu_only]
CONTROLS = [e for e in ENTRIES if not e.kind.endswith("mutant")]

# Mutants whose blind spot needs a change in a file this catalog does not own; the
# change is proposed in docs/mutants.md. strict: when the suite catches them the xfail
# turns into a failure, so the marker is removed with the fix.
PENDING: dict = {}

# the gate (a session fixture, two processes of its own) runs once, on one xdist worker
pytestmark = pytest.mark.xdist_group("mutants")


# session, not module: under xdist --dist loadgroup a worker may run other modules' tests between
# these, and a module fixture would then be torn down and the gate run again (it was, twice per CI run)
# A mutant runs the cases that can show its expected finding first and stops once it is shown
# (stop="expected": the verdict and the assertions below are those of a full run, which
# `python -m oracle.mutants` makes for the committed kill matrix's counts); controls and
# references run every case.
@pytest.fixture(scope="session")
def gate():
    rows = K.run_all([e for e in ENTRIES if not e.gpu_only and not e.undeclared_only], jobs=2, stop="expected")
    return {r.entry.name: r for r in rows}


def test_the_gate_runs_on_one_worker(request):
    """Under --dist loadgroup (CI) this module's tests carry their group in their ids, which is what
    sends them all to one worker, so the gate runs once (tests/conftest.py)."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run under pytest-xdist --dist loadgroup")
    assert request.node.nodeid.endswith("@mutants"), request.node.nodeid


def test_catalog_is_complete():
    entries = [e for e in ENTRIES if e.kind.endswith("mutant")]  # not `mutants`: the function is called below
    assert len(entries) >= 35 and len(CPU_MUTANTS) >= 35
    assert len({e.name for e in ENTRIES}) == len(ENTRIES)
    for e in entries:
        assert e.provenance and e.description and len(e.expect) == 4, e.name
        if e.undeclared_only:  # derived from oracle.forms: the form's own citation says who ships it
            assert e.provenance.startswith("oracle.forms: "), e.name
            continue
        assert any(ch.isdigit() for ch in e.provenance), f"{e.name}: provenance needs an issue/PR number"
    bases = set(controls())
    for cls in mutants():
        assert issubclass(cls, torch.optim.Optimizer)
        base = next(b for b in cls.__mro__[1:] if b in bases)
        assert cls.ORACLE_CONVENTION == base.ORACLE_CONVENTION, f"{cls.__name__} must declare its base's convention"
    assert {w.INNER for w in WRAPPER_MUTANTS} <= bases


def test_every_optimizer_has_a_control_and_a_mutant():
    """Each optimizer of the specification has a correct base and at least one mutant
    (SGD and Lion: the first-step buffer, nesterov, sign(0), decay form and order)."""
    import oracle
    correct = {cls.ORACLE_OPTIMIZER for cls in controls()}
    broken = {cls.ORACLE_OPTIMIZER for cls in mutants()}
    assert set(oracle.SPECS) <= correct, set(oracle.SPECS) - correct
    assert set(oracle.SPECS) <= broken, set(oracle.SPECS) - broken
    assert sum(cls.ORACLE_OPTIMIZER == "sgd" for cls in mutants()) >= 5
    assert sum(cls.ORACLE_OPTIMIZER == "lion" for cls in mutants()) >= 4


@pytest.mark.parametrize("entry", CONTROLS, ids=lambda e: e.name)
def test_controls_pass(gate, entry):
    row = gate[entry.name]
    assert row.verdict in ("pass", "known defect"), (row.caught, row.first)
    assert row.cases >= 10
    if entry.kind == "control":
        assert row.verdict == "pass", row.known


@pytest.mark.parametrize("entry", [pytest.param(e, marks=pytest.mark.xfail(strict=True, reason=PENDING[e.name]))
                                   if e.name in PENDING else e for e in CPU_MUTANTS], ids=lambda e: e.name)
def test_mutant_is_killed_where_expected(gate, entry):
    row = gate[entry.name]
    check, tensor, step, case = entry.expect
    assert row.verdict == "killed", f"{entry.name} survived: the suite has a blind spot"
    assert check in row.caught, f"{entry.name}: caught by {sorted(row.caught)}, not by {check}"
    found = row.findings[check]
    assert any(K.finding_matches(f, tensor, step, case) for f in found), found
    assert K.shows_expected(row)
    assert row.first_case and row.first.get("check")
    numeric = [f for fs in row.findings.values() for f in fs if isinstance(f.get("error_ulps"), float)]
    assert all(f["error_ulps"] > f["bound_ulps"] for f in numeric if isinstance(f.get("bound_ulps"), float))


def test_gate_exit_status_follows_the_matrix(gate, tmp_path, monkeypatch):
    rows = list(gate.values())
    assert K.ok(rows) == (not K.summary(rows)["survived"] and not K.summary(rows)["false_positives"])
    # the command itself, on a small selection: a killed mutant and a control -> 0; a survivor -> 1
    assert K.main(["--only", "TE1986EmptyGroupCounter", "--only", "GroupAdamW", "--scenarios", "none",
                   "--report-dir", str(tmp_path), "--quiet", "--jobs", "1"]) == 0
    text = (tmp_path / "kill_matrix.md").read_text()
    assert "TE1986EmptyGroupCounter" in text and "TransformerEngine #1986" in text
    # a selection without --report-dir writes nowhere (it once rewrote the committed kill matrix)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert K.main(["--only", "BNB1185ContiguousGrads", "--scenarios", "none", "--quiet",
                   "--jobs", "1"]) == 1  # the matrix alone has no non-contiguous grads
    assert list(elsewhere.iterdir()) == []


def test_only_the_whole_gate_writes_the_committed_kill_matrix():
    args = K.parser().parse_args
    assert K.default_report_dir(args([])) == os.path.join("reports", "mutants")
    assert K.default_report_dir(args(["--undeclared"])) == os.path.join("reports", "mutants", "undeclared")
    for selection in (["--only", "TE*"], ["--scenarios", "none"], ["--seed", "1"], ["--steps", "5"]):
        assert K.default_report_dir(args(selection)) is None, selection


@pytest.mark.slow
def test_inference_explains_no_mutant(gate):
    """The gate as an outside user's optimizer meets it (--undeclared): every mutant's conventions are
    inferred, not declared, and it is still killed; every control still passes. A convention preset
    that matches a mutant's behaviour would let inference explain the defect away (the catalog once
    had SGD's dampened first step and Lion's bare copysign, and two mutants survived). Where inference
    settles on the declared conventions the declared gate's row is reused: its cases would run alike."""
    rows = K.run_all([e for e in ENTRIES if not e.gpu_only], jobs=2, undeclared=True, declared=gate, stop="killed")
    survived = [(r.entry.name, r.inferred) for r in rows if r.entry.kind.endswith("mutant")
                and r.verdict not in ("killed", "legitimate undeclared")]
    assert not survived, survived
    # every deviation the forms catalog names is committed by one mutant (oracle.mutants.deviations)
    # and none passes: inference may name the deviation (a failing "deviation" row), never excuse it
    deviating = [r for r in rows if r.entry.kind == "deviation-mutant"]
    assert len(deviating) >= 15 and all(r.verdict == "killed" for r in deviating)
    # killed by a check, never by crashing (they once raised at every step, and "killed" proved nothing)
    assert not [(r.entry.name, r.first) for r in deviating if "error" in r.caught]
    # passed undeclared only where the mutant says why its behaviour is then legitimate, and only in
    # a configuration inference calls legitimate; the declared gate still kills each
    legit = [r for r in rows if r.verdict == "legitimate undeclared"]
    assert all(getattr(r.entry.cls, "LEGITIMATE_UNDECLARED", "") for r in legit)
    assert all(gate[r.entry.name].verdict == "killed" for r in legit)
    wrong = [(r.entry.name, r.verdict, r.inferred) for r in rows
             if not r.entry.kind.endswith("mutant") and r.verdict not in ("pass", "known defect")]
    assert not wrong, wrong
    assert all(r.inferred for r in rows if r.entry.kind == "mutant"), "a plain mutant was judged without inference"


@pytest.mark.gpu
@pytest.mark.parametrize("entry", GPU_MUTANTS, ids=lambda e: e.name)
def test_gpu_only_mutants(entry):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if entry.name == "DS7640Int32Sizes":
        _large_tensor_tail(entry)
        return
    row = K.run_entry(entry, device="cuda")
    check, tensor, step, case = entry.expect
    assert row.verdict == "killed" and check in row.caught, (row.caught, row.first)


def _large_tensor_tail(entry, n=2**31 + 4099):
    """DS7640: one tensor past 2**31 elements; its tail must move like its head.
    (The case matrix has no such tensor: this is the stand-in until a large-tensor
    scenario takes any target.)"""
    free, _ = torch.cuda.mem_get_info()
    if free < 100 * 2**30:
        pytest.skip(f"needs ~100 GiB free GPU memory, {free / 2**30:.0f} GiB free")
    p = torch.nn.Parameter(torch.ones(n, dtype=torch.bfloat16, device="cuda"))
    p.grad = torch.full_like(p, 0.5)
    opt = entry.cls([p], lr=1e-2)
    opt.step()
    head, tail = p.detach()[:8].float(), p.detach()[-8:].float()
    assert not torch.equal(head, tail), "tail (past 2**31) not updated like the head"


def test_an_undeclared_run_reuses_a_declared_row_only_when_judged_alike(monkeypatch):
    """The shortcut test_inference_explains_no_mutant takes: reuse needs the same convention, compute,
    state dtype and masters, which is all that inference changes about a target."""
    from dataclasses import replace

    entry = next(e for e in ENTRIES if e.name == "GroupAdamW")
    target = entry.target()
    declared = K.Row(entry, verdict="pass", cases=-7)
    monkeypatch.setattr(K, "undeclared_target", lambda e, device, seed: (e.target(), "inferred label"))
    row = K.run_entry(entry, undeclared=True, declared_row=declared)
    assert (row.cases, row.verdict, row.inferred) == (-7, "pass", "inferred label")
    assert K.judged_alike(target, entry.target())
    changed = {"convention": replace(target.convention, eps_mode="inside"),
               "compute": "storage" if target.compute == "float32" else "float32",
               "state_dtype": "param" if target.state_dtype == "float32" else "float32", "masters": not target.masters}
    for name, value in changed.items():
        assert not K.judged_alike(replace(target, **{name: value}), target), name


def test_an_undeclared_run_of_an_entry_without_a_class_reuses_the_declared_row(monkeypatch):
    """A library's own target (a reference) or a wrapper has nothing to infer: undeclared, its cases are
    the declared run's, so that row is taken as it is; without one, the cases run."""
    entry = next(e for e in ENTRIES if e.kind == "reference" and not e.gpu_only)
    assert entry.cls is None
    monkeypatch.setattr(K, "undeclared_target", lambda *a: pytest.fail("nothing to infer"))
    declared = K.Row(entry, verdict="known defect", cases=-7)
    row = K.run_entry(entry, undeclared=True, declared_row=declared)
    assert (row.cases, row.verdict, row.inferred) == (-7, "known defect", declared.inferred)
    ran = K.run_entry(entry, undeclared=True, stop="killed", scenario_names=[])
    assert ran.cases > 0


def test_a_mutant_stops_early_with_the_verdict_of_a_full_run():
    """stop="expected" and stop="killed" (the gate fixtures above) change how many cases a mutant runs,
    never its verdict (test_gate_exit_status_follows_the_matrix runs this mutant in full); "expected"
    ends only once the expected finding is shown; a control runs every case whatever the stop."""
    from oracle.compare.running.driver import jobs_for
    mutant = next(e for e in ENTRIES if e.name == "TE1986EmptyGroupCounter")
    control = next(e for e in ENTRIES if e.name == "GroupAdamW")
    planned = len(jobs_for(control.target(), K.MATRIX_DTYPES, 20, [0], None, (), matrix=True)) \
        + len(jobs_for(control.target(), K.DEFAULTS_DTYPES, 20, [0], "*/defaults/*", (), matrix=True))
    expected = K.run_entry(mutant, scenario_names=[], stop="expected")
    killed = K.run_entry(mutant, scenario_names=[], stop="killed")
    assert expected.verdict == killed.verdict == "killed"
    assert K.shows_expected(expected) and expected.cases < planned and killed.cases < planned
    assert expected.first_case.split("/")[3] == "empty_group"  # the cases that can show it ran first
    assert set(killed.caught.values()) == {1}  # stopped after the first failing case
    assert killed.cases <= expected.cases  # which ran first, as under "expected"
    assert K.run_entry(control, scenario_names=[], stop="killed").cases == planned
    with pytest.raises(ValueError, match="stop must be one of"):
        K.run_entry(mutant, stop="sometimes")


def test_deviation_mutants_step_as_their_deviation():
    """Each deviation mutant (oracle.mutants.deviations) steps 2-D and 1-D params without raising and
    moves them as the float64 oracle does under its deviation convention (the oracle is its step: this
    checks the plumbing around it, which once raised at every step)."""
    import numpy as np
    import oracle
    from oracle.common import OptState
    from oracle.mutants.deviations import DEVIATION_MUTANTS
    assert len(DEVIATION_MUTANTS) >= 15
    rng = np.random.default_rng(0)
    for cls in DEVIATION_MUTANTS:
        spec = oracle.SPECS[cls.ORACLE_OPTIMIZER]
        start = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
        grads = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
        params = [torch.nn.Parameter(torch.tensor(x, dtype=torch.float64)) for x in start]
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g)
        hps = dict(spec.defaults, lr=1e-2, **({"weight_decay": 0.1} if "weight_decay" in spec.defaults else {}))
        opt = cls(params, **hps)
        opt.step()
        want, _ = spec.step([start], [grads], OptState.empty([start]), [hps], cls.DEVIATION_CONVENTION)
        for p, w in zip(params, want[0]):
            np.testing.assert_allclose(p.detach().numpy(), np.asarray(w), rtol=1e-12, atol=1e-15, err_msg=cls.__name__)
        assert any(not np.array_equal(p.detach().numpy(), x) for p, x in zip(params, start)), cls.__name__
        # its state survives a checkpoint as the matrix's round trip takes one (weights_only)
        buf = io.BytesIO()
        torch.save(opt.state_dict(), buf)
        buf.seek(0)
        opt.load_state_dict(torch.load(buf, weights_only=True))
