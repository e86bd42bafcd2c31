"""Known finding pytorch-optimizer-lamb-fp16-reciprocal-nan (reports/known.toml).

pytorch-optimizer 4.1.0's Lamb takes its foreach path by default (optimizer/lamb.py, _step_foreach),
which forms the Adam update as m * (1 / (sqrt(v) + eps)) instead of m / (sqrt(v) + eps). On float16
params with the default eps = 1e-6, an element whose grad is exactly zero has v = 0, so the
reciprocal is 1/1e-6 ~ 1e6 > 65504: it overflows to inf, and inf * m = inf * 0 = NaN. The NaN
enters ||u||, the trust ratio becomes NaN, and every element of the param becomes NaN after one
step, with finite inputs and default hyperparameters. The per-param path (foreach=False) divides
and stays finite, so the two paths of the same class disagree.

Exit 0: the defect reproduces (foreach NaN, foreach=False finite); 1: it does not.
Needs pytorch-optimizer (pip install --no-deps 'pytorch-optimizer>=4.1,<4.2').
"""
import sys

import torch
from pytorch_optimizer import Lamb


def one_step(foreach):
    p = torch.linspace(-2.0, 2.0, 64, dtype=torch.float16).requires_grad_()
    opt = Lamb([p], foreach=foreach)                   # every hyperparameter at its default
    p.grad = torch.linspace(0.5, -0.5, 64, dtype=torch.float16)
    p.grad[::4] = 0.0                                  # exactly-zero grad elements
    opt.step()
    return int((~torch.isfinite(p.detach())).sum())


default_path, per_param = one_step(None), one_step(False)
print(f"Lamb default (foreach) path: {default_path} of 64 params non-finite after one step")
print(f"Lamb foreach=False:          {per_param} of 64 params non-finite after one step")
sys.exit(0 if default_path > 0 and per_param == 0 else 1)
