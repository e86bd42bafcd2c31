"""Known finding torch-compiled-adam-lr0-nan (reports/known.toml).

torch.optim.Adam / AdamW with their step compiled (torch.compile(opt.step), CPU inductor) take the
capturable form of the update, which folds the learning rate into the denominator
(denom = sqrt(v) / (sqrt(bc2) * step_size) + eps / step_size, step_size = lr / bc1): with lr = 0 and an
element whose grad is exactly zero (m = v = 0) that is 0 / (0/0 + eps/0) = NaN, where eager torch
(forloop) leaves the param unchanged. The same form as pytorch/pytorch #126514 (capturable Adam
divides by lr). lr = 0 is what a warm-up schedule starts from.

Exit 0: the defect reproduces (compiled NaN, eager finite); 1: it does not. Plain torch (needs a C++
compiler for inductor); run with `python reports/known/torch_compiled_adam_lr0_nan.py`.
"""
import sys

import torch


def one_step(cls, compiled):
    torch._dynamo.reset()
    p = torch.tensor([0.5, -1.0, 2.0, 0.25]).requires_grad_()
    opt = cls([p], lr=0.0)
    p.grad = torch.tensor([0.1, 0.0, -0.2, 0.0])      # two exactly-zero grad elements
    step = torch.compile(opt.step) if compiled else opt.step
    step()
    return int((~torch.isfinite(p.detach())).sum())


results = {}
for cls in (torch.optim.Adam, torch.optim.AdamW):
    results[cls.__name__] = (one_step(cls, True), one_step(cls, False))
    print(f"{cls.__name__}: compiled {results[cls.__name__][0]} of 4 non-finite, eager {results[cls.__name__][1]} of 4")
sys.exit(0 if all(c > 0 and e == 0 for c, e in results.values()) else 1)
