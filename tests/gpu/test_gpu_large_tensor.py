"""FusedAdam on one tensor of more than 2**31 elements: its last elements must be updated too.

A kernel or launcher that indexes with 32-bit integers wraps past 2**31 - 1: the tail is left
untouched, or the wrong elements are written. The check probes three windows of the big tensor
(the head, both sides of element 2**31, the last K elements) and compares them with
  - a small FusedAdam run on exactly those elements (Adam is elementwise, so the same kernel math
    must give the same bits, step after step), and
  - after step 1, float64 arithmetic: at step 1 every Adam convention gives
    p1 = p0 - lr*wd*p0 - lr * g/(|g| + eps) in exact arithmetic (m_hat = g, v_hat = g**2),
    so torch's and apex's decay and eps placements agree up to float32 rounding.
Needs about 35 GiB of free GPU memory (param, grad and two float32 moments of 8 GiB each);
skipped, saying so, where there is no CUDA device or not enough free memory.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

N = 2**31 + 2**20 + 3  # over 2**31 elements, not a multiple of any power-of-two chunk; windows apart
K = 4096  # probe window width
HP = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1}
WINDOWS = [(0, K), (2**31 - K, 2**31 + K), (N - K, N)]
NEED_BYTES = int(4 * N * 4 * 1.05) + 2**31  # p, g, m, v in float32, 5% + 2 GiB for the rest


@pytest.fixture
def big_cuda_memory():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    free, _ = torch.cuda.mem_get_info()
    if free < NEED_BYTES:
        pytest.skip(f"needs {NEED_BYTES / 2**30:.1f} GiB of free GPU memory, {free / 2**30:.1f} GiB free")
    yield
    torch.cuda.empty_cache()


def assert_same(big_probe, small, idx, what):
    """Bit equality, naming the first differing global index and the size of the difference."""
    diff = big_probe != small
    if diff.any():
        first = int(diff.nonzero()[0])
        worst = float((big_probe.double() - small.double()).abs().max())
        raise AssertionError(
            f"{what}: {int(diff.sum())} of {diff.numel()} probed elements differ from the small run; "
            f"first at global index {int(idx[first])} (big {float(big_probe[first])!r} vs small "
            f"{float(small[first])!r}); greatest |difference| {worst:.3g}")


def test_fused_adam_updates_every_element_of_a_tensor_over_2_31_elements(big_cuda_memory):
    from fused import FusedAdam

    gen = torch.Generator(device="cuda").manual_seed(0)
    big = torch.nn.Parameter(torch.empty(N, device="cuda").uniform_(0.5, 1.5, generator=gen))
    big.grad = torch.empty(N, device="cuda").uniform_(-1.0, 1.0, generator=gen)
    idx = torch.cat([torch.arange(a, b, device="cuda") for a, b in WINDOWS])
    p0 = big.detach()[idx].clone()
    small = torch.nn.Parameter(p0.clone())
    small.grad = big.grad[idx].clone()

    opt_big = FusedAdam([big], adam_w_mode=True, **HP)
    opt_small = FusedAdam([small], adam_w_mode=True, **HP)

    for step in (1, 2):
        opt_big.step()
        opt_small.step()
        torch.cuda.synchronize()
        probe = big.detach()[idx]
        assert_same(probe, small.detach(), idx, f"step {step}")
        if step == 1:
            unchanged = probe == p0
            assert not unchanged.any(), (
                f"step 1 left {int(unchanged.sum())} probed elements unchanged, first at global index "
                f"{int(idx[unchanged.nonzero()[0]])} (the last index is {N - 1})")
            p64, g64 = p0.double(), small.grad.double()
            lr, wd, eps = HP["lr"], HP["weight_decay"], HP["eps"]
            expected = p64 - lr * wd * p64 - lr * g64 / (g64.abs() + eps)
            # rtol 5e-7: about 4 float32 ULPs of p in [0.5, 1.5]; the conventions differ by ~1 ULP here.
            torch.testing.assert_close(probe.double(), expected, rtol=5e-7, atol=0.0,
                                       msg=lambda m: f"step 1 against float64: {m}")
    del opt_big, opt_small, big, small
