"""Known finding torch-fused-cpu-noncontiguous (reports/known.toml).

torch's CPU fused Adam/AdamW/Adagrad kernels pair the elements of a param, its grad and its state by
memory offset. When their strides differ -- here a transposed (non-contiguous) param with a
contiguous grad -- each grad element updates the wrong param element. The forloop path is the
reference: both paths compute in float32 on float32 params, so they agree to a few ULPs.

Exit 0: the defect reproduces (fused differs from forloop for every optimizer); 1: it does not.
Plain torch; run with `python reports/known/torch_fused_cpu_noncontiguous.py`.
"""
import sys

import torch

torch.manual_seed(0)
base = torch.randn(3, 5, dtype=torch.float32)
grad = torch.randn(5, 3, dtype=torch.float32)   # contiguous, the shape of the transposed param
reproduced = {}
for name, cls, kw in (("Adam", torch.optim.Adam, {}), ("AdamW", torch.optim.AdamW, {"weight_decay": 0.0}),
                      ("Adagrad", torch.optim.Adagrad, {})):
    out = {}
    for path, flags in (("forloop", {"foreach": False}), ("fused", {"fused": True})):
        p = base.clone().t().requires_grad_()    # a non-contiguous leaf: strides (1, 5)
        assert not p.is_contiguous()
        opt = cls([p], lr=0.1, **kw, **flags)
        p.grad = grad.clone()
        opt.step()
        out[path] = p.detach().clone()
    err = (out["fused"] - out["forloop"]).abs().max().item()
    reproduced[name] = err > 1e-3  # a correct fused step is within a few float32 ULPs of forloop (~1e-6)
    print(f"{name}: fused=True vs foreach=False on a transposed param, max |difference| after one step at "
          f"lr 0.1 = {err:.3g} -> {'DEFECT' if reproduced[name] else 'agree'}")
print(f"torch {torch.__version__}: "
      + ("the defect reproduces" if all(reproduced.values()) else "the defect does NOT reproduce everywhere"))
sys.exit(0 if all(reproduced.values()) else 1)
