"""Known finding torch-fp16-default-eps-nan-nadam-radam (reports/known.toml).

torch-fp16-default-eps-nan seen in torch.optim.NAdam and RAdam (forloop, foreach): on float16 params
they compute in float16, where the default eps = 1e-8 rounds to 0, so an element whose grad is exactly
zero divides 0 by sqrt(0) + 0. NAdam does so from its first step; RAdam's forloop once its rectified
branch starts (rho_t > 5: step 6 at the default beta2), where sqrt(1 - b2^t)/(sqrt(v) + eps) is inf and
m/bc1 = 0; RAdam's foreach from its first step, since it forms 1/(sqrt(v) + eps) = inf for every step and
multiplies it by a rectification of 0 on the unrectified ones.
pytorch/pytorch #147437 asks for a precision-aware eps.

Exit 0: the defect reproduces (NaN for every listed optimizer and path); 1: it does not.
Plain torch; run with `python reports/known/torch_fp16_default_eps_nan_nadam_radam.py`.
"""
import sys

import torch

reproduced = {}
for name, cls, steps_by_path in (("NAdam", torch.optim.NAdam, (1, 1)), ("RAdam", torch.optim.RAdam, (6, 1))):
    for (path, foreach), steps in zip((("forloop", False), ("foreach", True)), steps_by_path):
        p = torch.linspace(-2.0, 2.0, 64, dtype=torch.float16).requires_grad_()
        opt = cls([p], foreach=foreach)               # every hyperparameter at its default
        for _ in range(steps):
            p.grad = torch.linspace(0.5, -0.5, 64, dtype=torch.float16)
            p.grad[::4] = 0.0                         # exactly-zero grad elements
            opt.step()
        bad = int((~torch.isfinite(p.detach())).sum())
        reproduced[(name, path)] = bad > 0
        print(f"{name} {path}: {bad} of {p.numel()} params non-finite after {steps} step(s)")
print(f"torch {torch.__version__}: "
      + ("the defect reproduces" if all(reproduced.values()) else "the defect does NOT reproduce everywhere"))
sys.exit(0 if all(reproduced.values()) else 1)
