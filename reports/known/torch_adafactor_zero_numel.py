"""Known findings torch-adafactor-zero-numel and torch-adafactor-zero-numel-irregular (reports/known.toml).

torch.optim.Adafactor divides by the square root of a param's element count on the host
(alpha = max(eps2, p.norm(2).item() / (p.numel() ** 0.5)) * rho_t, and again for RMS(update)):
for a param with no elements that is 0.0 / 0.0 in Python, and step() raises ZeroDivisionError on
both the forloop and the foreach path -- for the whole optimizer, not only the empty param. Every
other torch.optim optimizer steps past an empty param.

Exit 0: the defect reproduces on both paths; 1: it does not.
Plain torch; run with `python reports/known/torch_adafactor_zero_numel.py`.
"""
import sys

import torch

raised = {}
for foreach in (False, True):
    w = torch.ones(3, 2, requires_grad=True)
    empty = torch.zeros(0, requires_grad=True)
    opt = torch.optim.Adafactor([w, empty], foreach=foreach)
    w.grad, empty.grad = torch.full((3, 2), 0.1), torch.zeros(0)
    try:
        opt.step()
        raised[foreach] = None
    except ZeroDivisionError as exc:
        raised[foreach] = str(exc)
    print(f"torch {torch.__version__} Adafactor foreach={foreach}: "
          f"{'raised ZeroDivisionError: ' + raised[foreach] if raised[foreach] else 'stepped'}")
reproduced = all(raised.values())
print("the defect reproduces" if reproduced else "the defect does NOT reproduce (an empty param is stepped past)")
sys.exit(0 if reproduced else 1)
