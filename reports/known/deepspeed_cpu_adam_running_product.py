"""Known finding deepspeed-cpu-adam-running-product-bias-correction (reports/known.toml).

DeepSpeedCPUAdam (and FusedAdam on the CPU accelerator, which calls the same ds_adam_step) forms the
bias corrections 1 - beta1^t and 1/sqrt(1 - beta2^t) from beta^t kept as a float32 RUNNING PRODUCT
(Adam_Optimizer::IncrementStep, ops/csrc/includes/cpu_adam.h:71-106): beta2^t is rounded once per
step and then loses most of its digits in 1 - beta2^t (catastrophic cancellation at beta2 = 0.999),
so the update is off by tens of float32 ULPs from Adam with the same float32 hyperparameters.

The script runs DeepSpeedCPUAdam for 4 steps on fp32 params (lr 1e-3, betas (0.9, 0.999), eps 1e-8,
no decay; positive grads so p never crosses zero) and compares each step, from DeepSpeed's own state
before that step, with float64 Adam using the float32-rounded hyperparameters and
  (a) the exact power beta^t                         -- what Adam defines,
  (b) the float32 running product fl(fl(beta)*...)   -- what IncrementStep keeps.
Exit 0 (reproduces): DeepSpeed is > 10 float32 ULPs from (a) at some step and within 4 ULPs of (b)
at every step; 1 otherwise. Needs DeepSpeed's cpu_adam op (built on first use into
$TORCH_EXTENSIONS_DIR); DS_ACCELERATOR defaults to cpu here.
"""
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.ops.adam import DeepSpeedCPUAdam  # noqa: E402

torch.manual_seed(0)
n = 256
p = torch.nn.Parameter(torch.zeros(n))
opt = DeepSpeedCPUAdam([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, adamw_mode=True)
b1, b2, lr, eps = (float(np.float32(x)) for x in (0.9, 0.999, 1e-3, 1e-8))
run1 = run2 = np.float32(1.0)
worst_exact, worst_running = 0.0, 0.0
for t in range(1, 5):
    g = torch.rand(n) + 0.5
    p0 = p.detach().double().numpy().copy()
    st = opt.state.get(p, {})
    m0 = st["exp_avg"].double().numpy().copy() if st else np.zeros(n)
    v0 = st["exp_avg_sq"].double().numpy().copy() if st else np.zeros(n)
    p.grad = g.clone()
    opt.step()
    gd = g.double().numpy()
    m, v = b1 * m0 + (1 - b1) * gd, b2 * v0 + (1 - b2) * gd * gd
    run1, run2 = np.float32(run1 * np.float32(b1)), np.float32(run2 * np.float32(b2))
    got = p.detach().double().numpy()
    ulp = np.spacing(np.abs(got).astype(np.float32)).astype(np.float64)

    def err(bt1, bt2):
        ref = p0 - lr / (1 - bt1) * m / (np.sqrt(v) / np.sqrt(1 - bt2) + eps)
        return float(np.max(np.abs(got - ref) / ulp))
    e_exact, e_running = err(b1 ** t, b2 ** t), err(float(run1), float(run2))
    worst_exact, worst_running = max(worst_exact, e_exact), max(worst_running, e_running)
    print(f"step {t}: DeepSpeedCPUAdam vs Adam with exact beta^t: {e_exact:6.1f} ULP; "
          f"vs Adam with the float32 running product: {e_running:4.1f} ULP")
ok = worst_exact > 10 and worst_running <= 4
print(f"deepspeed {deepspeed.__version__}: "
      + ("the defect reproduces (bias corrections follow the float32 running product)" if ok
         else "the defect does NOT reproduce"))
sys.exit(0 if ok else 1)
