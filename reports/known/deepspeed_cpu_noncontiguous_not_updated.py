"""Known finding deepspeed-cpu-noncontiguous-not-updated (reports/known.toml).

DeepSpeed's CPU optimizer kernels run on `.contiguous()` copies of the param, grad and state
(ds_adam_step, ops/csrc/adam/cpu_adam_impl.cpp:256-259; ds_adagrad_step, adagrad/cpu_adagrad.cpp:
187-189; ds_lion_step, lion/cpu_lion_impl.cpp:202-204) and never copy back. For a non-contiguous
param (a transposed weight) the copy is a temporary: the update is silently lost while
state["step"] advances. FusedAdam on the CPU accelerator calls the same ds_adam_step.

For DeepSpeedCPUAdam, DeepSpeedCPUAdagrad, DeepSpeedCPULion and FusedAdam (CPU build): one step on
Parameter(torch.ones(6, 4).t()) with a grad of ones.
Exit 0 (reproduces): no optimizer changed any element of the param; 1 otherwise.
Needs DeepSpeed's cpu_adam, cpu_adagrad, cpu_lion and fused_adam ops (built on first use into
$TORCH_EXTENSIONS_DIR); DS_ACCELERATOR defaults to cpu.
"""
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad  # noqa: E402
from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam  # noqa: E402
from deepspeed.ops.lion import DeepSpeedCPULion  # noqa: E402

OPTIMIZERS = (("DeepSpeedCPUAdam", lambda ps: DeepSpeedCPUAdam(ps, lr=0.1)),
              ("DeepSpeedCPUAdagrad", lambda ps: DeepSpeedCPUAdagrad(ps, lr=0.1)),
              ("DeepSpeedCPULion", lambda ps: DeepSpeedCPULion(ps, lr=0.1)),
              ("FusedAdam (CPU)", lambda ps: FusedAdam(ps, lr=0.1)))
lost_everywhere = True
for name, make in OPTIMIZERS:
    p = torch.nn.Parameter(torch.ones(6, 4).t())
    assert not p.is_contiguous()
    opt = make([p])
    p.grad = torch.ones(4, 6)
    opt.step()
    changed = int((p.detach() != 1).sum())
    steps = {k: v for k, v in opt.state[p].items() if k == "step"}
    lost_everywhere &= changed == 0
    print(f"{name}: one step at lr 0.1 on a transposed param changed {changed} of {p.numel()} elements; "
          f"state {steps}")
print(f"deepspeed {deepspeed.__version__}: " + ("the defect reproduces (the update is lost)" if lost_everywhere
                                                else "the defect does NOT reproduce everywhere"))
sys.exit(0 if lost_everywhere else 1)
