"""Convention inference (oracle.compare.inference.infer): an optimizer that declares nothing is judged fairly,
and inference never explains a defect away."""
import json
import os
from dataclasses import replace

import pytest
import torch

from oracle.compare.inference import infer as I
from oracle.compare.cli import main
from oracle.compare.registry import builtin_targets
from oracle.compare.targets.declare import ENV, Candidate, apply, imported
from oracle.compare.targets.user_impl import load_impl

TORCH = [("torch.optim:AdamW", "adamw"), ("torch.optim:Adam", "adam"), ("torch.optim:Adagrad", "adagrad")]


def builtin(name):
    return next(t for t in builtin_targets() if t.name == name)


@pytest.mark.parametrize("spec,optimizer", TORCH)
def test_torch_classes_are_inferred_as_torch_forloop(spec, optimizer):
    """torch's own classes, undeclared, come out with exactly the conventions the built-in
    torch.<opt>.forloop target declares (convention, arithmetic, state dtype, float32 counter)."""
    inf = I.infer(load_impl(spec, optimizer=optimizer, inferred=False))
    assert inf.chosen is not None, inf.lines()
    ref = builtin(f"torch.{optimizer}.forloop")
    judged = apply(load_impl(spec, optimizer=optimizer, inferred=False), inf.chosen)
    assert judged.convention == ref.convention
    assert (judged.compute, judged.state_dtype, judged.masters) == (ref.compute, ref.state_dtype, ref.masters)
    assert judged.convention.counter_format == "float32"  # found by the long-horizon probe
    text = "\n".join(inf.lines())
    assert "ORACLE_COMPUTE = 'storage'" in text and "counter_format='float32'" in text


def test_a_counter_the_update_reads_at_the_horizon_is_still_found_float32():
    """torch ASGD's update reads t at 2**24 (eta and mu move by 1/t), so its saturated float32 counter
    also fails the values at that horizon, not only the counters; inference still finds it, and comes
    out with the built-in torch.asgd targets' conventions. (Not in TORCH above: every bf16/fp16 row of
    ASGD fails the known torch-asgd-eta-mu-downcast, so the every-dtype sweep cannot pass there.)"""
    inf = I.infer(load_impl("torch.optim:ASGD", optimizer="asgd", inferred=False))
    assert inf.chosen is not None, inf.lines()
    judged = apply(load_impl("torch.optim:ASGD", optimizer="asgd", inferred=False), inf.chosen)
    assert judged.convention == builtin("torch.asgd.forloop").convention
    assert judged.convention.counter_format == "float32"


def test_a_known_defect_of_the_target_is_no_evidence(monkeypatch):
    """torch Muon's bf16 nesterov=False probes fail under every candidate by a listed torch defect
    (torch-muon-bf16-buffer-normalized-in-place): those probes tell no form from another, so inference
    still finds the built-in torch.muon.forloop's conventions, bf16 arithmetic included. With the
    known-findings file switched off the same probes count, and nothing explains the class."""
    from oracle.compare.checking import known
    inf = I.infer(load_impl("torch.optim:Muon", optimizer="muon", inferred=False))
    assert inf.chosen is not None, inf.lines()
    judged = apply(load_impl("torch.optim:Muon", optimizer="muon", inferred=False), inf.chosen)
    ref = builtin("torch.muon.forloop")
    assert judged.convention == ref.convention and judged.compute == ref.compute == "storage"
    monkeypatch.setenv(known.ENV, "none")
    assert I.infer(load_impl("torch.optim:Muon", optimizer="muon", inferred=False)).chosen is None


def test_declared_axes_win(monkeypatch):
    """A class that declares its arithmetic keeps it: inference only fills what is not declared."""
    class Declared(torch.optim.AdamW):
        ORACLE_OPTIMIZER = "adamw"
        ORACLE_COMPUTE = "float32"
    from oracle.compare.targets.user_impl import declared_axes, from_object
    target = from_object(Declared, "x:Declared", inferred=False)
    inf = I.infer(target, declared=declared_axes(Declared))
    # float32 arithmetic is not what torch's forloop does on bf16: no candidate may change it
    assert inf.chosen is None and inf.nearest.compute == "float32"
    assert any("bf16" in p.name or "fp16" in p.name for p in inf.separating)


def test_a_defect_is_not_explained_away():
    """An off-by-one counter is no form of AdamW and no known deviation: inference names the nearest
    form and the probes that separate it."""
    inf = I.infer(load_impl("tests.broken.adamw:OffByOneAdamW", optimizer="adamw", inferred=False))
    assert inf.chosen is None
    assert inf.separating and all(p.finding for p in inf.separating)
    assert "NO known convention explains it" in inf.lines()[0]
    assert inf.to_json()["candidate"]["explained"] is False


def test_a_deviation_is_found_only_after_every_form_and_named_as_one():
    """eps inside the sqrt (the eps hyperparameter used as optax's eps_root) is a deviation: inference
    tries every legitimate form first, then finds it, and says it is one."""
    import oracle
    from oracle import forms
    inf = I.infer(load_impl("tests.broken.adamw:EpsInsideAdamW", optimizer="adamw", inferred=False))
    assert inf.chosen is not None and inf.chosen.convention.eps_mode == "inside"
    assert forms.kind(oracle.SPECS["adamw"], inf.chosen.convention) == forms.DEVIATION
    assert inf.tried > len(I.conventions_for("adamw"))  # every legitimate candidate was tried first
    assert any("DEVIATION" in line and "eps_root" in line for line in inf.lines())


def test_candidate_round_trips_through_the_environment(monkeypatch):
    cand = Candidate("torch.adamw", builtin("torch.adamw.forloop").convention, "storage", "param", False)
    monkeypatch.setenv(ENV, json.dumps({"m:X": cand.to_json()}))
    assert imported("m:X") == cand and imported("m:Y") is None


def test_teach_names_the_single_axis_that_explains_a_failing_row():
    """torch's forloop AdamW judged as float32 arithmetic fails in bf16; the row says storage
    arithmetic would explain it, and how to declare that."""
    from oracle.compare.checking.cases import find_case
    target = replace(builtin("torch.adamw.forloop"), compute="float32")
    hint = I.teach(target, find_case("adamw/bf16/wd0.1/single/normal"), 0, "cpu")
    assert "storage-dtype arithmetic" in hint and "ORACLE_COMPUTE = 'storage'" in hint


def test_teach_finds_nothing_for_a_defect():
    from oracle.compare.checking.cases import find_case
    target = load_impl("tests.broken.adamw:OffByOneAdamW", optimizer="adamw", inferred=False)
    assert I.teach(target, find_case("adamw/fp32/wd0.1/single/normal"), 0, "cpu") == ""


@pytest.mark.slow
@pytest.mark.parametrize("spec,optimizer", TORCH)
def test_undeclared_torch_class_passes_every_dtype_and_scenario(tmp_path, spec, optimizer, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    # the default sweep: every dtype and every scenario but the opt-in multi-process wrappers
    code = main(["--impl", spec, "--optimizer", optimizer, "--report-dir", str(tmp_path), "--quiet"])
    doc = json.loads((tmp_path / "report.json").read_text())
    bad = [(r["case"], r["reason"]) for r in doc["results"] if r["status"] in ("fail", "error")]
    assert code == 0, bad[:3]
    assert {r["dtype"] for r in doc["results"] if r["status"] == "pass"} >= {"float32", "bfloat16", "float16"}
    [found] = doc["inferred"]
    assert found["explained"] and found["candidate"]["compute"] == "storage"
    # the workers judged bf16/fp16 by the exported inference (under --no-infer those rows fail:
    # test_no_infer_keeps_the_declarations); the export lasted only as long as the run
    assert ENV not in os.environ


def test_no_infer_keeps_the_declarations(tmp_path):
    code = main(["--impl", "torch.optim:AdamW", "--optimizer", "adamw", "--no-infer", "--report-dir", str(tmp_path),
                 "--quiet", "--scenario", "none", "--case", "adamw/bf16/wd0.1/single/normal"])
    doc = json.loads((tmp_path / "report.json").read_text())
    assert code == 1 and "inferred" not in doc
    assert "declare ORACLE_COMPUTE = 'storage' if intended" in doc["results"][0]["reason"]


def test_an_earlier_runs_inference_does_not_judge_the_next(tmp_path):
    """main() in one process (a test suite, a notebook): the first run's inference must not leak into
    a later --no-infer run (it did: CI ran this file after an inferring test in the same worker)."""
    import os

    from oracle.compare.targets.declare import ENV
    argv = ["--impl", "torch.optim:AdamW", "--optimizer", "adamw", "--quiet", "--scenario", "none",
            "--case", "adamw/bf16/wd0.1/single/normal"]
    assert main([*argv, "--report-dir", str(tmp_path / "a")]) == 0  # inferred: storage arithmetic
    assert ENV not in os.environ
    assert main([*argv, "--no-infer", "--report-dir", str(tmp_path / "b")]) == 1  # judged as declared


def test_the_catalog_is_derived_from_the_specs_and_the_library_modules(monkeypatch):
    """No list names optimizers: each spec brings its presets, each target module declaring PRESETS
    brings its library's, and an optimizer with none is still a candidate by its reference form."""
    from dataclasses import replace

    import oracle
    from oracle.compare.targets import conventions
    whole = conventions.catalog()
    for spec in oracle.SPECS.values():
        assert {n for n, (o, _) in whole.items() if o == spec.name} >= set(spec.presets), spec.name
    libraries = {m.__name__.rsplit(".", 1)[1] for m in conventions.library_modules()}
    assert libraries == {"deepspeed", "bitsandbytes_torchao", "gpu"}
    assert whole["torch.adagrad"] == whole["bitsandbytes.adagrad"]  # same convention: the spec's name wins
    assert conventions.named("adagrad", whole["torch.adagrad"][1]) == "torch.adagrad"
    bare = replace(oracle.SPECS["sgd"], presets={})
    monkeypatch.setitem(oracle.SPECS, "sgd", bare)
    conventions._catalog.cache_clear()
    try:
        sgd = {n: c for n, (o, c) in conventions.catalog().items() if o == "sgd"}
        assert sgd == {"sgd.reference": bare.reference}
    finally:
        conventions._catalog.cache_clear()


def _wrong_and_right(name="torch.adamw.forloop"):
    right = builtin(name)
    return replace(right, convention=replace(right.convention, decay="l2")), right


def test_a_verdict_only_run_stops_at_its_first_failing_step_with_the_same_verdict():
    """run_case's fail_fast (inference's probes, teach): a wrong convention fails at the same first
    step as the full run, which goes on to every step; a right one runs to the end, the same row."""
    from oracle.compare.checking import cases as C
    from oracle.compare.checking.case_run import run_case
    wrong, right = _wrong_and_right()
    case = C.find_case("adamw/fp32/wd0.1/single/normal", 20)
    full, fast = (run_case(wrong, case, 0, "cpu", checks=I.PROBE_CHECKS, fail_fast=f) for f in (False, True))
    assert full.status == fast.status == "fail"
    first = min(f.step for c in full.checks.values() for f in c.findings if f.step is not None)
    assert max(fast.checks["lockstep"].series) == first < max(full.checks["lockstep"].series) == case.steps
    ok_full, ok_fast = (run_case(right, case, 0, "cpu", checks=I.PROBE_CHECKS, fail_fast=f) for f in (False, True))
    assert ok_full.status == ok_fast.status == "pass"
    assert ok_fast.checks["lockstep"].series == ok_full.checks["lockstep"].series


def test_a_verdict_only_probe_that_listed_defects_account_for_is_judged_on_the_full_run(monkeypatch):
    """Whether listed defects account for every failing check can only be told from the whole run
    (a later step may fail an unlisted check): such a probe is run again in full."""
    wrong, _ = _wrong_and_right()
    case = I.probe_cases(wrong, ("float32",))[0]
    seen = []
    real = I.known_defects

    def listed(target, name, res):
        seen.append(max(res.checks["lockstep"].series))
        return "listed"
    monkeypatch.setattr(I, "known_defects", listed)
    probe = I.run_probe(wrong, case, 0, "cpu", verdict_only=True)
    assert probe.skipped and probe.finding == "listed"
    assert len(seen) == 2 and seen[0] < seen[1] == case.steps  # the early stop, then the full run
    monkeypatch.setattr(I, "known_defects", real)
    assert not I.run_probe(wrong, case, 0, "cpu", verdict_only=True).passed


def _inferred(spec, monkeypatch, screen: bool) -> dict:
    monkeypatch.setattr(I, "SCREEN", screen)
    d = I.infer(load_impl(spec, optimizer="adamw", inferred=False)).to_json()
    d.pop("seconds")
    return d


@pytest.mark.parametrize("spec", ["tests.broken.adamw:OffByOneAdamW", "torch.optim:AdamW"])
def test_the_screen_changes_no_inference(spec, monkeypatch):
    """Candidates rejected on a recorded run (infer.Screen) are exactly those their own runs reject:
    the inference, the separating probes and the probe count are the same with and without it."""
    assert _inferred(spec, monkeypatch, True) == _inferred(spec, monkeypatch, False)


class NoisyAdamW(torch.optim.AdamW):
    """A correct AdamW plus noise from torch's generator, never seeded by the run: no two runs agree."""

    def step(self, closure=None):
        out = super().step(closure)
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    p.add_(torch.randn_like(p) * 1e-3)
        return out


def test_the_screen_records_only_a_run_that_repeats_itself():
    """A candidate is judged on a recorded run only where the target repeats its run bit for bit: a
    target that does not (noise from an unseeded generator) is never screened, its candidates run for
    real; a correct deterministic one is recorded, a wrong convention fails on it and a right one
    passes, each as its own run says."""
    from oracle.compare.checking.case_run import run_case
    wrong, right = _wrong_and_right()
    case = I.probe_cases(right, ("float32",))[0]
    screen = I.Screen(0, "cpu")
    assert screen.recording(right, case) is not None
    rejected = screen.judge(wrong, case)
    assert rejected is not None and not rejected.passed and rejected.finding
    assert not I.run_probe(wrong, case, 0, "cpu", verdict_only=True).passed  # its own run agrees
    assert screen.judge(right, case).passed and I.run_probe(right, case, 0, "cpu", verdict_only=True).passed
    noisy = replace(right, name="noisy", make=lambda groups, defaults: NoisyAdamW(groups, **defaults))
    record: list = []
    run_case(noisy, case, 0, "cpu", checks=I.PROBE_CHECKS, record=record)
    assert len(record) == 1 + case.steps + 1  # it runs and is recorded; only its second run differs
    assert I.Screen(0, "cpu").recording(noisy, case) is None


@pytest.mark.parametrize("spec", ["tests.broken.adamw:OffByOneAdamW", "torch.optim:AdamW",
                                  "oracle.mutants.catalog:TE1986EmptyGroupCounter",
                                  "oracle.mutants.catalog:Apex1728Bf16NoMaster"])
def test_a_replayed_probe_reaches_its_own_runs_verdict(spec):
    """Probe by probe, candidate by candidate (both stages: float32 conventions, then the precision
    axes on bf16/fp16 probes): the verdict on the recorded run is the verdict of the candidate's own
    run, failing where it fails, passing where it passes."""
    target = load_impl(spec, optimizer="adamw", inferred=False)
    screen = I.Screen(0, "cpu")
    judged = {True: 0, False: 0}
    convs = I.conventions_for("adamw")[:24] + I.deviations_for("adamw")[:8]
    for dtypes, cands in ((("float32",), [Candidate(n, c, "float32", "param", False) for n, c in convs]),
                          (("bfloat16", "float16"), [Candidate("torch.adamw", target.convention, *axes)
                                                     for axes in I.PRECISIONS])):
        for case in I.probe_cases(target, dtypes)[:6]:
            for cand in cands:
                t = apply(target, cand)
                replayed = screen.judge(t, case)
                if replayed is None:
                    continue
                own = I.run_probe(t, case, 0, "cpu", verdict_only=True)
                assert (replayed.passed, replayed.skipped) == (own.passed, own.skipped), (cand.label(), case.name)
                judged[replayed.passed] += 1
    assert judged[True] >= 5 and judged[False] >= 50, judged  # both verdicts were reached on recordings


class LateNanAdamW(torch.optim.AdamW):
    """A correct AdamW until its third step, which leaves a NaN in its first param."""

    def step(self, closure=None):
        out = super().step(closure)
        self._steps = getattr(self, "_steps", 0) + 1
        if self._steps == 3:
            with torch.no_grad():
                self.param_groups[0]["params"][0].view(-1)[0] = float("nan")
        return out


def test_a_run_that_fails_finite_is_not_judged_on_a_recording():
    """finite and bounds read only the target's run: a recording that fails one is not used (every
    candidate's own run reports where, first), while the same target's other cases are judged on theirs."""
    _, right = _wrong_and_right()
    nan = replace(right, name="late-nan", make=lambda groups, defaults: LateNanAdamW(groups, **defaults))
    case = I.probe_cases(right, ("float32",))[0]
    probe = I.run_probe(nan, case, 0, "cpu")
    assert not probe.passed and "finite" in probe.finding
    assert I.Screen(0, "cpu").recording(nan, case) is None
    assert I.Screen(0, "cpu").recording(right, case) is not None
