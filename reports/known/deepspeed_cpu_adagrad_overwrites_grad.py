"""Known finding deepspeed-cpu-adagrad-overwrites-grad (reports/known.toml).

DeepSpeedCPUAdagrad's scalar loop (the elements after the last full SIMD block, or every element
of a small param) stores the update term -lr*g'/(sqrt(v)+eps) into the gradient's memory
(ops/csrc/adagrad/cpu_adagrad.cpp:49-50, "STORE UPDATE TERM TO GRAD'S MEMORY"), so p.grad no longer
holds the gradient after step(): gradient clipping/logging/accumulation afterwards see the update.

One step on a 5-element fp32 param (entirely in the scalar tail) and a 37-element one (32 SIMD
elements + 5 tail elements whatever the vector width: 16 floats with AVX-512, 8 with AVX2; 40 elements
have no tail at all under AVX2, and the defect then hides) at lr 0.01.
Exit 0 (reproduces): p.grad changed in both; 1 otherwise.
Needs DeepSpeed's cpu_adagrad op (built on first use into $TORCH_EXTENSIONS_DIR); DS_ACCELERATOR cpu.
"""
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad  # noqa: E402

torch.manual_seed(0)
reproduced = True
for n in (5, 37):
    p = torch.nn.Parameter(torch.randn(n))
    g = torch.randn(n)
    p.grad = g.clone()
    DeepSpeedCPUAdagrad([p], lr=0.01).step()
    changed = p.grad != g
    reproduced &= bool(changed.any())
    k = int(changed.nonzero()[0]) if changed.any() else 0
    print(f"{n} elements: step() changed p.grad in {int(changed.sum())} of {n} elements "
          f"(element {k}: grad {g[k].item():.6g} -> {p.grad[k].item():.6g}, the update term -lr*g/sqrt(g^2))")
print(f"deepspeed {deepspeed.__version__}: " + ("the defect reproduces (p.grad overwritten)" if reproduced
                                                else "the defect does NOT reproduce"))
sys.exit(0 if reproduced else 1)
