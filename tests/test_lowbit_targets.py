"""Low-bit optimizer targets beyond the CPU matrix (oracle.compare.targets.lowbit): torchao's AdamW8bit
with bf16 stochastic rounding judged by the `rounding` check on the real library, and the CUDA forms of
the bitsandbytes and torchao targets, which on a machine without CUDA are listed, skip with a reason
and are what the GPU pipeline's compare step selects."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from oracle.compare.checking.case_run import run_case
from oracle.compare.checking.cases import cases
from oracle.compare.registry import find
from oracle.compare.reporting import report, schema
from oracle.compare.targets.lowbit import TORCHAO_SUBSET, lowbit_targets

ROOT = Path(__file__).resolve().parent.parent
CUDA_NAMES = {"bnb.adam8bit.cuda", "bnb.adamw8bit.cuda", "bnb.lion8bit.cuda", "bnb.paged_adamw8bit.cuda",
              "torchao.adamw8bit.cuda", "torchao.adamw4bit.cuda", "torchao.adamwfp8.cuda",
              "torchao.adamw8bit.sr.cuda"}
SR_CASE = "adamw/bf16/wd0.1/single/normal"


def _case(name: str):
    return next(c for c in cases("adamw", ("bfloat16",)) if c.name == name)


def _usable(target) -> None:
    reason = target.unavailable("cpu")
    if reason:
        pytest.skip(reason)


# --- stochastic rounding on the real library -----------------------------------------------------

def test_the_sr_target_is_declared_for_bf16_only():
    t = find("torchao.adamw8bit.sr")
    assert t.rounding == "stochastic" and t.dtypes == ("bfloat16",) and t.subset == TORCHAO_SUBSET
    assert all(o.rounding == "nearest" for o in lowbit_targets() if not o.name.startswith("torchao.adamw8bit.sr"))


def test_torchaos_stochastic_rounding_passes_both_checks(tmp_path):
    t = find("torchao.adamw8bit.sr")
    _usable(t)
    res = run_case(t, _case(SR_CASE), 0)
    doc = report.write(str(tmp_path), [res], ["python", "-m", "oracle.compare"], True, "cpu")
    assert schema.load(tmp_path / "report.json")["results"][0]["checks"]["rounding"]["note"] == \
        doc["results"][0]["checks"]["rounding"]["note"]  # the rounding check's row is valid report.json
    assert res.status == "pass", res.reason
    rounding = res.checks["rounding"]
    assert rounding.compared > 3000  # every param element at every step, judged by its neighbours
    assert "group(s)" in rounding.note and "0 of" in rounding.note.splitlines()[-1]  # the test ran, rejected none
    assert "roundtrip" in res.checks and res.checks["roundtrip"].passed  # seeded: a reload continues alike


def test_the_same_library_rounding_to_nearest_fails_the_distribution_test():
    """torchao.adamw8bit (nearest rounding) declared stochastic: every stored value is a neighbour, so
    only the distribution test can tell, and does."""
    t = replace(find("torchao.adamw8bit"), name="torchao.adamw8bit.declared_sr", rounding="stochastic")
    _usable(t)
    res = run_case(t, _case(SR_CASE), 0)
    assert res.status == "fail"
    failing = [k for k, c in res.checks.items() if not c.passed]
    assert failing == ["rounding"], failing
    assert all(f.step is None and "not stochastic rounding" in f.detail for f in res.checks["rounding"].findings)


# --- CUDA forms --------------------------------------------------------------------------------

def test_cuda_forms_are_listed_for_cuda_only():
    cuda = [t for t in lowbit_targets() if t.devices == ("cuda",)]
    assert {t.name for t in cuda} == CUDA_NAMES
    for t in cuda:
        assert t.in_default, t.name  # the GPU pipeline names no --target
        assert "on CUDA" in t.notes, t.name
        cpu = find(t.name.removesuffix(".cuda")) if t.name != "bnb.paged_adamw8bit.cuda" else None
        if cpu is not None:
            assert [(q.name, q.fmt) for q in t.quantized] == [(q.name, q.fmt) for q in cpu.quantized], t.name
            assert t.rounding == cpu.rounding and t.dtypes == cpu.dtypes, t.name
    assert find("bnb.adamw8bit.cuda").convention.decay == "decoupled_after"  # read from kernels.cu


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only skip path")
def test_cuda_forms_skip_with_a_reason_without_cuda():
    for name in sorted(CUDA_NAMES):
        t = find(name)
        assert t.unavailable("cuda") == "CUDA is not available", name
        assert "does not run on cpu" in t.unavailable("cpu"), name
        assert isinstance(t.requires("cuda"), str) and t.requires("meta")  # never raises
        res = run_case(t, cases(t.optimizer, dtypes=(t.dtypes[0],))[0], 0, device="cuda")
        assert res.status == "skip" and res.reason == "CUDA is not available", name


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only skip path")
def test_the_gpu_pipelines_compare_step_selects_them(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_suite
    argv = next(a for name, a, _ in gpu_suite.steps(tmp_path, sys.executable) if name == "compare")
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    # without CUDA every selected target is unavailable: a usage error listing each with its reason
    assert out.returncode == 2, out.stdout + out.stderr
    listed = {line.strip().split(":")[0]: line for line in out.stderr.splitlines() if line.startswith("  ")}
    for name in CUDA_NAMES:
        assert name in listed and "CUDA is not available" in listed[name], name
    assert "torchao.adamw8bit" not in listed  # the CPU torchao targets stay out of default sweeps


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(CUDA_NAMES))
def test_cuda_form_runs_one_case(name):
    t = find(name)
    reason = t.unavailable("cuda")
    if reason:
        pytest.skip(reason)
    case = next(c for c in cases(t.optimizer, dtypes=(t.dtypes[-1] if t.rounding == "stochastic" else "float32",))
                if t.outside_subset(c.name) is None)
    res = run_case(t, case, 0, device="cuda")
    assert res.status != "error", f"{name} {case.name}: {res.reason}"
