"""Known finding bnb-noncontiguous-param-replaced (reports/known.toml).

bitsandbytes' optimizers start every update with `p.data = p.data.contiguous()` (and the same for
p.grad) (bitsandbytes/optim/optimizer.py:536-538, Optimizer2State.update_step, Adam/AdamW; :702-704,
Optimizer1State.update_step, Adagrad). For a non-contiguous param -- a transposed weight, or any view
into a larger buffer -- this rebinds the param to a fresh copy: the param object is updated, but its
storage is no longer the one it was created on, so every other view of that storage (a tied weight,
the flat buffer it lives in) keeps the old values and goes stale.

For Adam32bit, AdamW32bit and Adagrad32bit on the CPU backend: a buffer `base` of shape (4, 6), the
param is Parameter(base.t()) (shares base's storage), one step at lr 0.1 with a grad of ones.
Exit 0 (reproduces): for every optimizer the param now lives in different storage and `base` did not
receive the update; 1 otherwise.
"""
import sys

import torch
import bitsandbytes as bnb

OPTIMIZERS = (("Adam32bit", bnb.optim.Adam32bit), ("AdamW32bit", bnb.optim.AdamW32bit),
              ("Adagrad32bit", bnb.optim.Adagrad32bit))
replaced_everywhere = True
for name, cls in OPTIMIZERS:
    base = torch.zeros(4, 6)
    p = torch.nn.Parameter(base.t())
    assert not p.is_contiguous() and p.data_ptr() == base.data_ptr()
    ptr = p.data_ptr()
    opt = cls([p], lr=0.1)
    p.grad = torch.ones(6, 4)
    opt.step()
    moved = p.data_ptr() != ptr
    base_updated = bool((base != 0).any())
    param_updated = bool((p.detach() != 0).any())
    replaced_everywhere &= moved and param_updated and not base_updated
    print(f"{name}: param updated: {param_updated}; param storage replaced: {moved}; "
          f"the buffer it was a view of received the update: {base_updated}")
print(f"bitsandbytes {bnb.__version__}: " + ("the defect reproduces (non-contiguous params are replaced, "
                                             "views go stale)" if replaced_everywhere
                                             else "the defect does NOT reproduce everywhere"))
sys.exit(0 if replaced_everywhere else 1)
