"""The CUDA path: against the CPU path, capturable mode under CUDA graph
capture and replay, and a tensor over 2^31 elements. Skipped without CUDA."""
from __future__ import annotations

import pytest
import torch

from fused import FusedAdagrad, FusedAdam, FusedLAMB

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SHAPES = [(0,), (37, 5), (70000,), (0,), (3, 4, 5), (0,)]  # zero-numel first, between and last


def params_on(device, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen).to(dtype).to(device).requires_grad_() for s in SHAPES]


def grads_for(params, seed):
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(p.dtype).to(p.device)


CASES = [
    (FusedAdam, dict(lr=1e-2, weight_decay=0.1)),
    (FusedAdam, dict(lr=1e-2, weight_decay=0.1, adam_w_mode=False)),
    (FusedAdagrad, dict(lr=0.1, weight_decay=0.1, lr_decay=0.01, initial_accumulator_value=0.125)),
    (FusedAdagrad, dict(lr=0.1, weight_decay=0.1, adagrad_w_mode=True)),
    (FusedLAMB, dict(lr=1e-2, weight_decay=0.1)),
]


@pytest.mark.parametrize("moment_dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].__name__}-{sorted(c[1].items())}")
def test_cuda_matches_cpu(case, dtype, moment_dtype):
    cls, kwargs = case
    results = {}
    for device in ("cpu", "cuda"):
        params = params_on(device, dtype)
        opt = cls([{"params": params[:3]}, {"params": []}, {"params": params[3:]}], moment_dtype=moment_dtype,
                  **kwargs)
        for s in range(4):
            grads_for(params, s)
            opt.step(inv_scale=0.5)
        results[device] = ([p.detach().cpu() for p in params],
                           [{k: v.cpu() for k, v in opt.state[p].items()} for p in params])
    (cpu_p, cpu_s), (gpu_p, gpu_s) = results["cpu"], results["cuda"]
    # Elementwise math is the same code with the same roundings on both sides
    # (no FMA contraction, IEEE sqrt and division), and the scalars are made
    # on the host by the same function, so Adam and Adagrad agree exactly.
    # LAMB's norms are summed in a different order: ratios differ by ~1e-15
    # relative, which can flip a float32 rounding: allow 2 float32 ULPs.
    exact = cls is not FusedLAMB
    for i, (a, b) in enumerate(zip(cpu_p, gpu_p)):
        if exact:
            assert torch.equal(a, b), f"param {i}"
        else:
            torch.testing.assert_close(b.float(), a.float(), rtol=2 * 2.0**-23, atol=1e-7, msg=f"param {i}")
    for i, (a, b) in enumerate(zip(cpu_s, gpu_s)):
        assert a.keys() == b.keys()
        for k in a:
            if exact:
                assert torch.equal(a[k], b[k]), f"param {i} {k}"
            else:
                torch.testing.assert_close(b[k].float(), a[k].float(), rtol=2 * 2.0**-23, atol=1e-7)


@pytest.mark.parametrize("cls", [FusedAdam, FusedAdagrad], ids=["FusedAdam", "FusedAdagrad"])
def test_capturable_graph_replay_matches_eager(cls):
    def make():
        params = params_on("cuda", torch.bfloat16)
        opt = cls(params, lr=torch.tensor(1e-2, device="cuda"), weight_decay=0.1, capturable=True)
        return params, opt

    steps = 5
    found = [0.0, 0.0, 1.0, 0.0, 0.0]  # one overflowing step in the middle
    eager_params, eager = make()
    for s in range(steps):
        grads_for(eager_params, s)
        eager.step(inv_scale=torch.tensor(0.5, device="cuda"), found_inf=torch.tensor(found[s], device="cuda"))

    params, opt = make()
    grads_for(params, 0)
    inv_scale = torch.tensor(0.5, device="cuda")
    found_inf = torch.tensor(found[0], device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up step: state and device counters are created here
        opt.step(inv_scale=inv_scale, found_inf=found_inf)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step(inv_scale=inv_scale, found_inf=found_inf)
    for s in range(1, steps):
        grads_for_static = params_on("cuda", torch.bfloat16)  # fresh grads copied into the static ones
        grads_for(grads_for_static, s)
        for p, q in zip(params, grads_for_static):
            p.grad.copy_(q.grad)
        found_inf.fill_(found[s])
        graph.replay()
    torch.cuda.synchronize()
    assert int(opt.param_groups[0]["step"]) == int(eager.param_groups[0]["step"]) == 4
    for p, q in zip(params, eager_params):
        assert torch.equal(p.detach(), q.detach())
        for k, v in eager.state[q].items():
            assert torch.equal(opt.state[p][k], v), k


def test_tensor_over_2_to_the_31_elements():
    n = 2**31 + 1024
    # param bf16 (2 B), grad bf16 (2 B), fp32 master + 2 fp32 moments (12 B) per element
    need = n * 16 + (1 << 30)
    free, _ = torch.cuda.mem_get_info()
    if free < need:
        pytest.skip(f"needs {need / 2**30:.0f} GiB free on the GPU, {free / 2**30:.0f} GiB free")
    p = torch.zeros(n, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    p.grad = torch.ones(n, dtype=torch.bfloat16, device="cuda")
    FusedAdam([p], lr=0.5).step()
    # lr/bc1 * m/(sqrt(v)/sqrt(bc2)+eps) = lr * 1/(1+eps) on the first step: every element moves to -0.5.
    tail = p.detach()[-4096:].float()
    assert torch.all(tail == -0.5), tail.unique()
    assert torch.all(p.detach()[:4096].float() == -0.5)
    assert int((p.detach() != -0.5).sum()) == 0
