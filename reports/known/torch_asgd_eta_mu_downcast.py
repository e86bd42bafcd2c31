"""Known defect torch-asgd-eta-mu-downcast (reports/known.toml).

torch.optim.ASGD keeps eta (the step size of the next step) and mu (the averaging weight) as
float32 scalar tensors, whatever the param's dtype. Optimizer.load_state_dict casts every floating
state entry except "step" to the param's dtype (_process_value_according_to_param_policy), so after
a checkpoint reload a bfloat16 or float16 param's eta and mu are bfloat16/float16, and every later
eta is stored rounded there: the resumed run's params and ax do not continue the uninterrupted run.
The same mechanism as torch-nadam-mu-product-downcast.

Five steps on a bfloat16 param, state_dict() into a fresh ASGD, then twenty more steps on both.
Exit 0 (reproduces): the reloaded eta is no longer float32 and the two runs' p or ax differ; 1 otherwise.
"""
import sys

import torch


def run(opt, p, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)
        opt.step()


torch.manual_seed(0)
init = torch.randn(64, dtype=torch.bfloat16)
hp = {"lr": 0.1, "lambd": 0.5, "t0": 2.0, "foreach": False}
p = torch.nn.Parameter(init.clone())
opt = torch.optim.ASGD([p], **hp)
run(opt, p, 5, 1)
q = torch.nn.Parameter(p.detach().clone())
resumed = torch.optim.ASGD([q], **hp)
resumed.load_state_dict(opt.state_dict())
before, after = opt.state[p]["eta"], resumed.state[q]["eta"]
run(opt, p, 20, 2)
run(resumed, q, 20, 2)
differ = int(((opt.state[p]["ax"] != resumed.state[q]["ax"]) | (p != q)).sum())
print(f"torch {torch.__version__} ASGD, bfloat16 param: eta {before.dtype} before the reload, {after.dtype} "
      f"after it; p or ax differs from the uninterrupted run in {differ} of 64 elements after 20 more steps")
sys.exit(0 if after.dtype != before.dtype and differ > 0 else 1)
