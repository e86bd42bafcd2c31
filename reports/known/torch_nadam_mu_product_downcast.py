"""Known defect torch-nadam-mu-product-downcast (reports/known.toml).

torch.optim.NAdam keeps mu_product (the running product of the momentum schedule, which the step
divides by through 1 - mu_product) as a float32 scalar tensor, whatever the param's dtype.
Optimizer.load_state_dict casts every floating state entry except "step" to the param's dtype
(_process_value_according_to_param_policy), so after a checkpoint reload a bfloat16 or float16
param's mu_product is bfloat16/float16 and every later product is rounded there: a resumed run
does not continue the uninterrupted one. The moments exp_avg/exp_avg_sq are in the param's dtype
from the start, so only mu_product changes.

Five steps on a bfloat16 param, state_dict() into a fresh NAdam. Exit 0 (reproduces): the
reloaded mu_product is no longer float32; 1 otherwise.
"""
import sys

import torch

torch.manual_seed(0)
p = torch.nn.Parameter(torch.randn(16, dtype=torch.bfloat16))
opt = torch.optim.NAdam([p], lr=1e-2)
for _ in range(5):
    p.grad = torch.randn_like(p)
    opt.step()
before = opt.state[p]["mu_product"]
fresh = torch.optim.NAdam([p], lr=1e-2)
fresh.load_state_dict(opt.state_dict())
after = fresh.state[p]["mu_product"]
print(f"torch {torch.__version__} NAdam, bfloat16 param: mu_product {before.dtype} {before.item()!r} before "
      f"the reload, {after.dtype} {after.item()!r} after it")
sys.exit(0 if after.dtype != before.dtype else 1)
