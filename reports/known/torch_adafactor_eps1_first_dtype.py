"""Known finding torch-adafactor-eps1-first-param-dtype (reports/known.toml).

With eps=(None, eps2), the default, torch.optim.Adafactor means eps1 = torch.finfo(param.dtype).eps
for each param. Both paths set it once per step() call instead: the forloop path rebinds eps1 inside
its loop over params (`if eps1 is None: eps1 = torch.finfo(param.dtype).eps`), so every later param
of the group uses the first param's format epsilon; the foreach path does the same with the first
dtype bucket's. In a group mixing bfloat16 and float32 params one of them is clamped at the
other's epsilon (bfloat16's 7.8e-3 against float32's 1.2e-7): its update depends on which param
(forloop) or dtype bucket (foreach) comes first, not on its own format.

Exit 0: the defect reproduces on both paths; 1: it does not.
Plain torch; run with `python reports/known/torch_adafactor_eps1_first_dtype.py`.
"""
import sys

import torch


def make():
    """a bfloat16 param listed before a float32 one, both with grads"""
    b = torch.linspace(-1, 1, 6, dtype=torch.bfloat16).reshape(2, 3).requires_grad_()
    w = torch.linspace(-2, 2, 12).reshape(4, 3).requires_grad_()
    # small grads: the second moments sit below bf16's eps1**2 and above float32's
    b.grad = torch.full((2, 3), 1e-3, dtype=torch.bfloat16)
    w.grad = torch.full((4, 3), 1e-3)
    return [b, w]


def stepped(groups_of, foreach: bool) -> list:
    params = make()
    for group in groups_of(params):
        torch.optim.Adafactor(group, lr=0.01, foreach=foreach).step()
    return [p.detach().float() for p in params]


reproduced = True
for foreach in (False, True):
    apart = stepped(lambda ps: [[p] for p in ps], foreach)   # each param its own optimizer
    together = stepped(lambda ps: [ps], foreach)              # one group, bf16 first
    diffs = [(a - t).abs().max().item() for a, t in zip(apart, together)]
    differs = any(d > 0 for d in diffs)
    reproduced &= differs
    print(f"torch {torch.__version__} Adafactor foreach={foreach}: max |apart - together| "
          f"bf16 param {diffs[0]:.3g}, float32 param {diffs[1]:.3g} ({'differs' if differs else 'identical'})")
print("the defect reproduces" if reproduced else "the defect does NOT reproduce (eps1 follows each param's dtype)")
sys.exit(0 if reproduced else 1)
