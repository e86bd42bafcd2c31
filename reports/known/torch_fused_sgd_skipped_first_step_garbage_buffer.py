"""torch's fused SGD with momentum: a first step skipped by found_inf (as GradScaler drives it)
leaves the momentum buffers uninitialized, and the next real step builds on that garbage.

torch/optim/sgd.py (_fused_sgd) allocates the first step's buffers with torch.empty_like and lets
the kernel fill them; with found_inf set the kernel skips everything, but the buffers stay in
the state, so the following step is no longer a "first step" and reads uninitialized memory.
A skipped step must change nothing. Exit 0 when the defect reproduces, 1 when it does not.

What uninitialized memory holds depends on the allocator's history: a fresh page from the OS is
zero, and a zero buffer hides the defect (0.9 * 0 + g is the right first buffer). So the script
does not wait for garbage to appear: it shows, on every machine, that (a) the skipped step left a
buffer in the state and (b) the next step reads that buffer's contents, by writing a sentinel into
it, which a correct optimizer would never look at.
"""
import sys

import torch

SENTINEL = 1.0e30


def run(skip_first: bool, sentinel: bool):
    torch.manual_seed(0)
    p = torch.randn(4096, requires_grad=True)
    g1, g2 = torch.randn(4096), torch.randn(4096)
    opt = torch.optim.SGD([p], lr=0.01, momentum=0.9, fused=True)
    left = False
    if skip_first:
        p.grad = g1
        opt.grad_scale, opt.found_inf = torch.tensor(1.0), torch.tensor(1.0)  # this step is skipped
        opt.step()
        del opt.grad_scale, opt.found_inf
        left = opt.state[p].get("momentum_buffer") is not None
        if left and sentinel:
            opt.state[p]["momentum_buffer"].fill_(SENTINEL)  # stands for whatever empty_like returned
    p.grad = g2
    opt.step()
    return left, p.detach(), opt.state[p]["momentum_buffer"]


def main() -> int:
    left, p_skip, buf_skip = run(True, sentinel=True)
    _, p_ref, buf_ref = run(False, sentinel=False)
    _, _, buf_garbage = run(True, sentinel=False)
    bad = int((buf_skip != buf_ref).sum())
    print(f"torch {torch.__version__} fused SGD(momentum=0.9): a found_inf-skipped first step "
          f"{'left' if left else 'did not leave'} a momentum_buffer in the state; with {SENTINEL:g} in it, the next "
          f"real step gives {bad} of 4096 buffer elements and {int((p_skip != p_ref).sum())} params that differ "
          f"from a run without the skipped step. Without the sentinel, this run's own uninitialized memory "
          f"changed {int((buf_garbage != buf_ref).sum())} of 4096 (allocator-dependent, may be 0)")
    return 0 if left and bad else 1


if __name__ == "__main__":
    sys.exit(main())
