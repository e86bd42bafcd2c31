"""Known deviation deepspeed-cpu-lion-copysign (reports/known.toml).

DeepSpeedCPULion takes the sign of Lion's interpolation c = beta1*m + (1 - beta1)*g with
copysign (ops/csrc/includes/cpu_lion.h, 0.19.8), so sign(0) = +1 or -1: an element whose c is
exactly 0 (a zero grad before any momentum) moves by lr every step. Lion (Chen et al. 2023,
Algorithm 2, sign as in the reference implementation google/automl lion_pytorch.py: torch.sign, 0 at
0) leaves it where it is. A deviation (oracle/lion.py FORMS sign_zero).

One step at lr 0.1, weight decay 0, on a 40-element float32 param whose grad is 0 on every other
element. Exit 0 (reproduces): the zero-grad elements moved by lr (Lion: not at all); 1 otherwise.
Needs DeepSpeed's cpu_lion op (built on first use into $TORCH_EXTENSIONS_DIR); DS_ACCELERATOR cpu.
"""
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.ops.lion import DeepSpeedCPULion  # noqa: E402

LR = 0.1
p0 = torch.linspace(-1.0, 1.0, 40)
p = torch.nn.Parameter(p0.clone())
g = torch.linspace(0.5, -0.5, 40)
g[::2] = 0.0
p.grad = g
DeepSpeedCPULion([p], lr=LR, weight_decay=0.0).step()
moved = (p.detach() - p0).abs()[::2]
print(f"deepspeed {deepspeed.__version__} DeepSpeedCPULion: zero-grad elements moved by "
      f"{moved.min().item():.6g}..{moved.max().item():.6g} (Lion: 0; copysign: lr = {LR})")
sys.exit(0 if torch.allclose(moved, torch.full_like(moved, LR), rtol=1e-6, atol=0) else 1)
