"""Known finding deepspeed-cpu-adam-reload-diverges (reports/known.toml).

DeepSpeedCPUAdam keeps beta1^t and beta2^t as float32 running products inside its C++ optimizer
object (Adam_Optimizer::IncrementStep, ops/csrc/includes/cpu_adam.h:71-93), not in the state dict
(state_dict() holds only step, exp_avg, exp_avg_sq). A fresh optimizer that loads a checkpoint taken
at step 20 jumps from step 0 to 21 and recomputes beta^21 with std::pow, so its bias corrections
differ from the uninterrupted run's running product and the continuation is not the same run.

The script trains fp32 params 25 steps straight, and 20 steps -> state_dict -> a new
DeepSpeedCPUAdam over a copy of the params -> load_state_dict -> 5 more steps, with identical grads.
Exit 0 (reproduces): the two final params are not bit-identical; 1: they are.
Needs DeepSpeed's cpu_adam op (built on first use into $TORCH_EXTENSIONS_DIR); DS_ACCELERATOR cpu.
"""
import copy
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.ops.adam import DeepSpeedCPUAdam  # noqa: E402

HP = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, adamw_mode=True)
torch.manual_seed(0)
init = torch.randn(128) * 1e-3
grads = [torch.randn(128) for _ in range(25)]

straight = torch.nn.Parameter(init.clone())
opt = DeepSpeedCPUAdam([straight], **HP)
for g in grads:
    straight.grad = g.clone()
    opt.step()

p = torch.nn.Parameter(init.clone())
opt = DeepSpeedCPUAdam([p], **HP)
for g in grads[:20]:
    p.grad = g.clone()
    opt.step()
saved = copy.deepcopy(opt.state_dict())
print("state_dict keys of the param's state:", sorted(saved["state"][0]))
q = torch.nn.Parameter(p.detach().clone())
opt2 = DeepSpeedCPUAdam([q], **HP)
opt2.load_state_dict(saved)
for g in grads[20:]:
    q.grad = g.clone()
    opt2.step()

diff = (q.detach() != straight.detach())
print(f"after 25 steps, reloaded at 20 vs uninterrupted: {int(diff.sum())} of {diff.numel()} elements differ, "
      f"max |difference| {(q.detach() - straight.detach()).abs().max().item():.3g}")
ok = bool(diff.any())
print(f"deepspeed {deepspeed.__version__}: "
      + ("the defect reproduces (the reloaded run is a different run)" if ok else "the defect does NOT reproduce"))
sys.exit(0 if ok else 1)
