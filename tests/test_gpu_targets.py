"""CUDA-only adapters (oracle.compare.targets.gpu): on CPU, listing and skipping; on a
CUDA machine (tox -e gpu), one fp32 case per available target must not crash."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from oracle.compare.targets import gpu as G
from oracle.compare.checking.cases import cases
from oracle.compare.checking.case_run import run_case

THIRD_PARTY = ("apex", "amp_C", "transformer_engine", "transformer_engine_torch", "deepspeed")
EXPECTED = {
    "torch.adam.foreach_capturable", "torch.adam.fused_capturable", "torch.adamw.foreach_capturable",
    "torch.adamw.fused_capturable", "apex.fused_adam.adamw", "apex.fused_adam.adam",
    "apex.fused_adam.adamw.capturable", "apex.fused_adam.adam.capturable", "apex.fused_lamb",
    "apex.fused_adagrad", "apex.fused_adagrad.w", "te.fused_adam.adamw", "te.fused_adam.adam",
    "te.fused_adam.adamw.master", "te.fused_adam.adamw.capturable", "te.fused_adam.adamw.capturable_master",
    "te.fused_adam.adamw.bf16_moments", "deepspeed.fused_adam.cuda.adamw", "deepspeed.fused_adam.cuda.adam",
    "deepspeed.fused_lamb.cuda",
}


def test_every_gpu_target_is_listed_with_a_convention():
    targets = G.gpu_targets()
    names = [t.name for t in targets]
    assert len(names) == len(set(names))
    assert set(names) == EXPECTED
    for t in targets:
        assert t.devices == ("cuda",), t.name
        assert t.convention is not None and t.make is not None, t.name
        assert t.notes, t.name
        assert t.convention.counter in ("param", "group"), t.name


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only skip path")
def test_unavailable_on_a_cpu_machine_gives_reasons_without_raising():
    for t in G.gpu_targets():
        r = t.unavailable("cuda")
        assert isinstance(r, str) and r, t.name
        assert "does not run on cpu" in t.unavailable("cpu")
        assert isinstance(t.requires("cuda"), str)  # the target's own check, called directly
        res = run_case(t, cases(t.optimizer, dtypes=("float32",))[0], 0, device="cuda")
        assert res.status == "skip" and res.reason


def test_requires_never_raises_for_odd_devices():
    for t in G.gpu_targets():
        for dev in ("cpu", "meta", "cuda:7"):
            r = t.requires(dev)
            assert r is None or isinstance(r, str)


def test_importing_and_listing_imports_no_third_party_library():
    code = ("import sys; from oracle.compare.targets.gpu import gpu_targets; ts = gpu_targets(); "
            "[t.notes for t in ts]; "
            f"bad = [m for m in sys.modules if m.split('.')[0] in {THIRD_PARTY!r}]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_translation_refuses_what_a_library_lacks():
    from oracle.compare.targets.bitsandbytes_torchao import translate
    assert translate({"lr": 1, "amsgrad": False, "foreach": None, "maximize": False}, {"lr"}, "x", "d") == {"lr": 1}
    with pytest.raises(ValueError, match="amsgrad"):
        translate({"amsgrad": True}, {"lr"}, "apex FusedAdam", "defaults")
    with pytest.raises(ValueError, match="grad_averaging"):
        translate({"grad_averaging": False}, {"lr"}, "DeepSpeed FusedLamb", "defaults")
    with pytest.raises(ValueError, match="bias_correction"):
        translate({"bias_correction": False}, {"lr"}, "bitsandbytes", "defaults")


# --- on a CUDA machine ---------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gpu_target_runs_one_fp32_case(name):
    t = next(t for t in G.gpu_targets() if t.name == name)
    reason = t.unavailable("cuda")
    if reason:
        pytest.skip(reason)
    dtype = "bfloat16" if "float32" not in t.dtypes else "float32"
    case = cases(t.optimizer, dtypes=(dtype,))[0]
    res = run_case(t, case, 0, device="cuda")
    assert res.status != "error", f"{name} {case.name}: {res.reason}\n" + \
        "\n".join(c.note for c in res.checks.values() if c.note)
