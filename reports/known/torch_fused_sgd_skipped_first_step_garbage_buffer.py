"""torch's fused SGD with momentum: a first step skipped by found_inf (as GradScaler drives it)
leaves the momentum buffers uninitialized, and the next real step builds on that garbage.

torch/optim/sgd.py (_fused_sgd) allocates the first step's buffers with torch.empty_like and lets
the kernel fill them; with found_inf set the kernel skips everything, but the buffers stay in
the state, so the following step is no longer a "first step" and reads uninitialized memory.
A skipped step must change nothing. Exit 0 when the defect reproduces, 1 when it does not.
"""
import sys

import torch


def run(skip_first: bool):
    junk = torch.full((4096,), 3.0e38)  # freed memory the allocator may hand to empty_like next
    del junk
    torch.manual_seed(0)
    p = torch.randn(4096, requires_grad=True)
    g1, g2 = torch.randn(4096), torch.randn(4096)
    opt = torch.optim.SGD([p], lr=0.01, momentum=0.9, fused=True)
    if skip_first:
        p.grad = g1
        opt.grad_scale, opt.found_inf = torch.tensor(1.0), torch.tensor(1.0)  # this step is skipped
        opt.step()
        del opt.grad_scale, opt.found_inf
    p.grad = g2
    opt.step()
    return p.detach(), opt.state[p]["momentum_buffer"]


def main() -> int:
    p_skip, buf_skip = run(True)
    p_ref, buf_ref = run(False)
    bad = int((buf_skip != buf_ref).sum())
    print(f"torch {torch.__version__} fused SGD(momentum=0.9): after a skipped first step and one real step, "
          f"{bad} of 4096 momentum_buffer elements and {int((p_skip != p_ref).sum())} params differ from a run "
          f"without the skipped step; max |buffer difference| = {float((buf_skip - buf_ref).abs().max()):.3g}")
    return 0 if bad else 1


if __name__ == "__main__":
    sys.exit(main())
