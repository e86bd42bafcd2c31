"""torch's CPU fused SGD leaves bfloat16 and float16 params unchanged.

torch.optim.SGD(fused=True) on the CPU computes the momentum buffer but never writes the update
into a bf16/fp16 param: every element keeps its old value, while the forloop path moves them
(float32 params are updated correctly). Its momentum buffer is not even deterministic: two
identical bf16 runs of 23 steps end with different buffers (as if uninitialized memory were
read), which the checkpoint scenario sees as a reload that changes the continuation.
Exit 0 when the defect reproduces, 1 when it does not.
"""
import sys

import torch


def step_once(dtype, fused, **kw):
    torch.manual_seed(0)
    p0 = torch.randn(4096, dtype=dtype)
    p = p0.clone().requires_grad_()
    p.grad = torch.randn(4096, dtype=dtype) * 0.1
    torch.optim.SGD([p], lr=0.01, fused=fused, **kw).step()
    return int((p.detach() == p0).sum())


def buffer_after(steps: int):
    torch.manual_seed(0)
    p = torch.randn(32, dtype=torch.bfloat16, requires_grad=True)
    grads = [torch.randn(32, dtype=torch.bfloat16) * 0.1 for _ in range(steps)]
    opt = torch.optim.SGD([p], lr=1e-2, momentum=0.9, weight_decay=0.1, fused=True)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    return opt.state[p]["momentum_buffer"]


def main() -> int:
    runs = [buffer_after(23) for _ in range(3)]
    print(f"fused SGD bf16, three identical 23-step runs: buffers differ in "
          f"{int((runs[0] != runs[1]).sum())} and {int((runs[0] != runs[2]).sum())} of 32 elements")
    reproduced = False
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for kw in ({"momentum": 0.0}, {"momentum": 0.9, "weight_decay": 0.1}):
            fused, forloop = step_once(dtype, True, **kw), step_once(dtype, False, **kw)
            print(f"torch {torch.__version__} SGD({kw}) {dtype}: params left unchanged by one step: "
                  f"fused {fused} of 4096, forloop {forloop} of 4096")
            reproduced |= dtype != torch.float32 and fused == 4096 and forloop < 4096
    return 0 if reproduced else 1


if __name__ == "__main__":
    sys.exit(main())
