"""Known finding bnb-noncontiguous-grad-replaced (reports/known.toml).

bitsandbytes' optimizers start every update with `p.grad = p.grad.contiguous()`
(bitsandbytes/optim/optimizer.py:538, Optimizer2State.update_step, Adam/AdamW; :704,
Optimizer1State.update_step, Adagrad). A non-contiguous grad -- a view into a larger gradient buffer,
as data-parallel wrappers and flat-buffer optimizers lay grads out -- is replaced by a fresh copy:
after step() p.grad is no longer the tensor the caller put there, so the next backward accumulates
into the copy and the buffer the caller reduces or zeroes no longer holds the param's grad.

For Adam32bit, AdamW32bit and Adagrad32bit on the CPU backend: a grad buffer `flat` of 16 elements,
p.grad = flat[::2] (stride 2), one step at lr 0.1. Exit 0 (reproduces): for every optimizer p.grad
is a different tensor, no longer a view of `flat`; 1 otherwise.
"""
import sys

import torch
import bitsandbytes as bnb

OPTIMIZERS = (("Adam32bit", bnb.optim.Adam32bit), ("AdamW32bit", bnb.optim.AdamW32bit),
              ("Adagrad32bit", bnb.optim.Adagrad32bit))
replaced_everywhere = True
for name, cls in OPTIMIZERS:
    p = torch.nn.Parameter(torch.zeros(8))
    flat = torch.ones(16)
    grad = flat[::2]
    assert not grad.is_contiguous() and grad.data_ptr() == flat.data_ptr()
    p.grad = grad
    opt = cls([p], lr=0.1)
    opt.step()
    same_object = p.grad is grad
    still_a_view = p.grad.data_ptr() == flat.data_ptr()
    replaced_everywhere &= not same_object and not still_a_view
    print(f"{name}: p.grad is the caller's tensor after step(): {same_object}; "
          f"p.grad still a view of the grad buffer: {still_a_view}")
print(f"bitsandbytes {bnb.__version__}: " + ("the defect reproduces (non-contiguous grads are replaced by copies)"
                                             if replaced_everywhere else "the defect does NOT reproduce everywhere"))
sys.exit(0 if replaced_everywhere else 1)
