"""torch's fused SGD with momentum raises when a param gets its first grad after the others
already have momentum buffers (a param frozen for the first steps, a conditional branch).

torch/optim/sgd.py (_fused_sgd) treats the step as a first step only when every buffer is
None; otherwise it passes the None buffer of the late param to torch._fused_sgd_, which raises
TypeError ("expected Tensor as element 1 in argument 2, but got NoneType"). forloop and foreach
create the late buffer. Exit 0 when the defect reproduces, 1 when it does not.
"""
import sys

import torch


def run(fused: bool) -> str:
    a = torch.randn(8, requires_grad=True)
    b = torch.randn(8, requires_grad=True)
    opt = torch.optim.SGD([a, b], lr=0.01, momentum=0.9, fused=fused)
    a.grad = torch.randn(8)  # step 1: b has no grad (frozen)
    opt.step()
    a.grad, b.grad = torch.randn(8), torch.randn(8)  # step 2: b's first grad
    try:
        opt.step()
    except Exception as exc:  # noqa: BLE001 - the defect is the exception
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def main() -> int:
    fused, forloop = run(True), run(False)
    print(f"torch {torch.__version__} SGD(momentum=0.9) late first grad: fused -> {fused}; forloop -> {forloop}")
    return 0 if fused != "ok" and forloop == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
