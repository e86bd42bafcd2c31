"""torch.optim.Muon with bfloat16 params and nesterov=False divides its momentum buffer in place.

_single_tensor_muon passes the buffer itself to _zeropower_via_newtonschulz when nesterov is off
(`update = ... if nesterov else buf`), which takes `ortho_grad = grad.bfloat16()`: for a bfloat16
buffer that is the same tensor, not a copy, and `ortho_grad.div_(norm)` (on it or on its transposed
view) then overwrites the buffer with buf / ||buf||_F. The next step's momentum starts from the
normalized buffer: the buffer and the trajectory differ from the same run in float32 (where
.bfloat16() copies) from step 1. With nesterov=True the NS input is a new tensor and nothing aliases.
Exit 0 when the defect reproduces, 1 when it does not.
"""
import sys

import torch


def buffer_after_one_step(dtype, nesterov, shape):
    torch.manual_seed(0)
    p = torch.randn(shape, dtype=dtype, requires_grad=True)
    g = (torch.randn(shape) * 0.1).to(dtype)
    p.grad = g.clone()
    opt = torch.optim.Muon([p], lr=0.02, momentum=0.9, nesterov=nesterov)
    opt.step()
    buf = opt.state[p]["momentum_buffer"].double()
    want = 0.1 * g.double()  # lerp(0, g, 1 - 0.9): the buffer must be (1 - mu) * g
    return float((buf - want).abs().max() / want.abs().max())


def main() -> int:
    reproduced = False
    for shape in ((8, 16), (16, 8)):
        for dtype in (torch.float32, torch.bfloat16):
            for nesterov in (True, False):
                off = buffer_after_one_step(dtype, nesterov, shape)
                print(f"{shape} {str(dtype):15s} nesterov={nesterov!s:5s}: buffer off (1-mu)*g by {off:.3g} (relative)")
                if dtype == torch.bfloat16 and not nesterov and off > 0.5:
                    reproduced = True
                elif off > 1e-2:
                    print("  unexpected: only bf16 without nesterov should be off")
                    return 1
    return 0 if reproduced else 1


if __name__ == "__main__":
    sys.exit(main())
