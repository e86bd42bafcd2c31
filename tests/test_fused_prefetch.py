"""The CPU kernels' software prefetch is a speed choice only: on or off, every optimizer's params and
state come out bit for bit the same, on one thread or two. It is on by default except on AMD (where
it measured slower, csrc/cpu_kernels.cpp), and FUSED_CPU_PREFETCH=0|1 overrides the default.
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fused
from fused import _ext

REPO = Path(__file__).resolve().parent.parent
# Within a piece (256), across pieces and chunks (64Ki), and large enough for the parallel path
# (4 chunks) and LAMB's chunked tensors.
SIZES = [3, 1000, 2 ** 16 + 17, 2 ** 18 + 5]
HYPER = {"adamw": dict(lr=1e-2, weight_decay=0.01), "adam": dict(lr=1e-2, weight_decay=0.01),
         "adagrad": dict(lr=1e-2, weight_decay=0.01), "lamb": dict(lr=1e-2, weight_decay=0.01),
         "sgd": dict(lr=1e-2, momentum=0.9, weight_decay=0.01), "lion": dict(lr=1e-3, weight_decay=0.01)}


@pytest.fixture
def prefetch_restored():
    ext = _ext.cpu()
    before = ext.prefetch()
    yield ext
    ext.prefetch(int(before))


def stepped(name: str, params: list[torch.Tensor], grads: list[list[torch.Tensor]], threads: int):
    cls, flags = fused.OPTIMIZERS[name]
    ps = [p.clone().requires_grad_() for p in params]
    opt = cls(ps, **flags, **HYPER[name])
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for step_grads in grads:
            for p, g in zip(ps, step_grads):
                p.grad = g.clone()
            opt.step()
    finally:
        torch.set_num_threads(before)
    return [p.detach() for p in ps], copy.deepcopy(opt.state_dict()["state"])


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns (NaNs and signed zeros compared exactly)."""
    ints = {4: torch.int32, 2: torch.int16, 8: torch.int64}
    return t.view(ints[t.element_size()]) if t.is_floating_point() and t.dim() > 0 else t


def assert_same_bits(a, b):
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(bits(a), bits(b))
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same_bits(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_bits(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(fused.OPTIMIZERS))
def test_prefetch_on_and_off_give_the_same_bits(prefetch_restored, name, threads):
    gen = torch.Generator().manual_seed(7)
    params = [torch.randn(n, generator=gen) for n in SIZES]
    grads = [[torch.randn(n, generator=gen) * 1e-2 for n in SIZES] for _ in range(3)]
    results = {}
    for on in (1, 0):
        prefetch_restored.prefetch(on)
        assert prefetch_restored.prefetch() is bool(on)
        results[on] = stepped(name, params, grads, threads)
    assert_same_bits(results[1], results[0])
    # The steps moved every param: the comparison is of updated values, not of the inputs.
    assert all(not torch.equal(p, q) for p, q in zip(results[1][0], params))


def vendor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def prefetch_in_child(env_value: str | None) -> bool:
    env = {k: v for k, v in os.environ.items() if k != "FUSED_CPU_PREFETCH"}
    if env_value is not None:
        env["FUSED_CPU_PREFETCH"] = env_value
    done = subprocess.run([sys.executable, "-c", "from fused import _ext; print(_ext.cpu().prefetch())"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return {"True": True, "False": False}[done.stdout.strip().splitlines()[-1]]


def test_default_is_off_on_amd_only_and_the_environment_overrides_it():
    if sys.platform != "linux" or not vendor():
        pytest.skip("needs /proc/cpuinfo to know the vendor")
    assert prefetch_in_child(None) is (vendor() != "AuthenticAMD")
    assert prefetch_in_child("0") is False
    assert prefetch_in_child("1") is True
    # Anything else is not an override: the vendor default stands.
    assert prefetch_in_child("yes") is (vendor() != "AuthenticAMD")
