"""Known finding deepspeed-fused-adam-cpu-last-param-counter (reports/known.toml).

FusedAdam.step() (ops/adam/fused_adam.py:148-193) creates state["step"] for every param but, after
the loop over the group's params, increments `state["step"]` of the LAST param with a grad only,
and does so once per dtype present in the group; that one counter is passed to the kernel for all
params. On the CPU accelerator (FusedAdam built from ops/csrc/cpu/adam/fused_adam.cpp) the other
params' counters stay 0 (a checkpoint of them is wrong), and a group mixing bf16 and fp32 params
advances the counter twice per step, so the bias correction of step 1 uses t = 2.

Two fp32 params, 3 steps; then a bf16 + fp32 group, 3 steps.
Exit 0 (reproduces): counters are [0, 3] and [0, 6]; 1 otherwise.
Needs DeepSpeed's fused_adam op (built on first use into $TORCH_EXTENSIONS_DIR); DS_ACCELERATOR cpu.
"""
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.ops.adam import FusedAdam  # noqa: E402

got = []
for dtypes in ((torch.float32, torch.float32), (torch.bfloat16, torch.float32)):
    ps = [torch.nn.Parameter(torch.ones(8, dtype=d)) for d in dtypes]
    opt = FusedAdam(ps, lr=1e-3)
    for _ in range(3):
        for p in ps:
            p.grad = torch.full_like(p, 0.5)
        opt.step()
    counters = [int(opt.state[p]["step"]) for p in ps]
    got.append(counters)
    print(f"params {[str(d).removeprefix('torch.') for d in dtypes]}: state['step'] after 3 steps = {counters} "
          f"(expected [3, 3])")
reproduced = got == [[0, 3], [0, 6]]
print(f"deepspeed {deepspeed.__version__}: " + ("the defect reproduces (only the last param's counter advances)"
                                                if reproduced else "the defect does NOT reproduce"))
sys.exit(0 if reproduced else 1)
