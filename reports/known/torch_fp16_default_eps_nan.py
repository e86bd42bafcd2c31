"""Known finding torch-fp16-default-eps-nan (reports/known.toml).

torch.optim Adam/AdamW/Adamax/RMSprop (forloop, foreach) and Adagrad (forloop, foreach, and the CPU fused kernel's
vectorized body: 64 elements here; a 3-element tensor takes its float32 scalar tail) on float16 params
compute in float16: the default eps (1e-8 for Adam, Adamax and RMSprop, 1e-10 for Adagrad) is below half of float16's smallest
subnormal (2^-24 = 5.96e-8) and rounds to 0, so an element whose grad is exactly zero divides
0 by sqrt(0) + 0 and the param becomes NaN after one step, with finite inputs and default
hyperparameters (pytorch/pytorch #147437 asks for a precision-aware eps).

Exit 0: the defect reproduces (NaN for every listed optimizer and path); 1: it does not.
Plain torch; run with `python reports/known/torch_fp16_default_eps_nan.py`.
"""
import sys

import torch

reproduced = {}
for name, cls, paths in (("Adam", torch.optim.Adam, ("forloop", "foreach")),
                         ("AdamW", torch.optim.AdamW, ("forloop", "foreach")),
                         ("Adamax", torch.optim.Adamax, ("forloop", "foreach")),
                         ("RMSprop", torch.optim.RMSprop, ("forloop", "foreach")),
                         ("Adagrad", torch.optim.Adagrad, ("forloop", "foreach", "fused"))):
    for path in paths:
        flags = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[path]
        p = torch.linspace(-2.0, 2.0, 64, dtype=torch.float16).requires_grad_()
        opt = cls([p], **flags)                       # every hyperparameter at its default
        p.grad = torch.linspace(0.5, -0.5, 64, dtype=torch.float16)
        p.grad[::4] = 0.0                             # exactly-zero grad elements
        opt.step()
        bad = int((~torch.isfinite(p.detach())).sum())
        reproduced[(name, path)] = bad > 0
        print(f"{name} {path}: {bad} of {p.numel()} params non-finite after one step")
print(f"torch {torch.__version__}: "
      + ("the defect reproduces" if all(reproduced.values()) else "the defect does NOT reproduce everywhere"))
sys.exit(0 if all(reproduced.values()) else 1)
