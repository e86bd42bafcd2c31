"""Known finding torch-fused-cpu-strided-writes-outside-view (reports/known.toml).

torch's CPU fused Adam/AdamW/Adagrad kernels walk a param as if it were contiguous: on a strided view
(every other element of a buffer, stride 2) they write into the gaps between the view's elements,
memory that belongs to whatever else lives in that buffer, and read the gaps as grads/state. The
forloop path leaves the gaps alone.

Exit 0: the defect reproduces (fused writes a gap for every optimizer); 1: it does not.
Plain torch; run with `python reports/known/torch_fused_cpu_strided_writes_outside_view.py`.
"""
import sys

import torch

GUARD = -31.0
reproduced = {}
for name, cls in (("Adam", torch.optim.Adam), ("AdamW", torch.optim.AdamW), ("Adagrad", torch.optim.Adagrad)):
    for path, flags in (("forloop", {"foreach": False}), ("fused", {"fused": True})):
        buf = torch.full((14,), GUARD)
        p = buf[::2]                                  # 7 elements, stride 2: the odd offsets are gaps
        with torch.no_grad():
            p.copy_(torch.linspace(-1.0, 1.0, 7))
        p.requires_grad_()
        opt = cls([p], lr=0.1, **flags)
        p.grad = torch.linspace(0.5, -0.5, 7)
        opt.step()
        gaps = buf[1::2]
        written = int((gaps != GUARD).sum())
        if path == "fused":
            reproduced[name] = written > 0
        print(f"{name} {path}: {written} of {gaps.numel()} gap element(s) between the view's elements changed")
print(f"torch {torch.__version__}: "
      + ("the defect reproduces" if all(reproduced.values()) else "the defect does NOT reproduce everywhere"))
sys.exit(0 if all(reproduced.values()) else 1)
