"""Known finding deepspeed-cpu-reload-casts-fp32-state (reports/known.toml).

DeepSpeedCPUAdam, DeepSpeedCPUAdagrad and DeepSpeedCPULion keep their moments in float32 for
bfloat16/float16 params (fp32_optimizer_states=True by default; ops/adam/cpu_adam.py step(),
ops/adagrad/cpu_adagrad.py, ops/lion/cpu_lion.py) but inherit torch.optim.Optimizer.load_state_dict,
which casts every floating-point state tensor except "step" to the param's dtype
(torch/optim/optimizer.py, _process_value_according_to_param_policy). After a save/load round trip
the moments are bf16/fp16 and the continuation differs from the uninterrupted run.

For each optimizer and dtype: 3 steps, state_dict -> new optimizer over a copy of the params ->
load_state_dict; print the state dtypes before and after, then 2 more steps on both and compare state and params.
Exit 0 (reproduces): every optimizer's fp32 state comes back in the param dtype for both dtypes;
1 otherwise. Needs DeepSpeed's cpu_adam, cpu_adagrad and cpu_lion ops (built on first use into
$TORCH_EXTENSIONS_DIR); DS_ACCELERATOR defaults to cpu.
"""
import copy
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad  # noqa: E402
from deepspeed.ops.adam import DeepSpeedCPUAdam  # noqa: E402
from deepspeed.ops.lion import DeepSpeedCPULion  # noqa: E402

OPTIMIZERS = (("DeepSpeedCPUAdam", lambda ps: DeepSpeedCPUAdam(ps, lr=1e-3, weight_decay=0.1, adamw_mode=True)),
              ("DeepSpeedCPUAdagrad", lambda ps: DeepSpeedCPUAdagrad(ps, lr=1e-2)),
              ("DeepSpeedCPULion", lambda ps: DeepSpeedCPULion(ps, lr=1e-3, weight_decay=0.1)))
torch.manual_seed(0)
init = torch.randn(64)
grads = [torch.randn(64) for _ in range(5)]
cast_everywhere = True
for dtype in (torch.bfloat16, torch.float16):
    for name, make in OPTIMIZERS:
        p = torch.nn.Parameter(init.to(dtype))
        opt = make([p])
        for g in grads[:3]:
            p.grad = g.to(dtype)
            opt.step()
        before = {k: v.dtype for k, v in opt.state[p].items() if torch.is_tensor(v) and v.is_floating_point()}
        q = torch.nn.Parameter(p.detach().clone())
        opt2 = make([q])
        opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
        after = {k: v.dtype for k, v in opt2.state[q].items() if torch.is_tensor(v) and v.is_floating_point()}
        for g in grads[3:]:
            p.grad, q.grad = g.to(dtype), g.to(dtype)
            opt.step()
            opt2.step()
        cast = [k for k, d in before.items() if d == torch.float32 and after.get(k) == dtype]
        cast_everywhere &= bool(cast)
        differ = int((p.detach() != q.detach()).sum())
        state_differ = sum(int((opt.state[p][k].float() != opt2.state[q][k].float()).sum()) for k in before)
        print(f"{name} on {str(dtype).removeprefix('torch.')} params: state before save "
              f"{ {k: str(d).removeprefix('torch.') for k, d in before.items()} }, after load "
              f"{ {k: str(d).removeprefix('torch.') for k, d in after.items()} }; "
              f"2 steps later {state_differ} state and {differ} param elements differ from the uninterrupted run")
print(f"deepspeed {deepspeed.__version__}: " + ("the defect reproduces (fp32 state cast to the param dtype on load)"
                                                if cast_everywhere else "the defect does NOT reproduce everywhere"))
sys.exit(0 if cast_everywhere else 1)
