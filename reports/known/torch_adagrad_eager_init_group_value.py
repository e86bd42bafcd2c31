"""Known finding torch-adagrad-eager-init-group-value (reports/known.toml).

torch.optim.Adagrad.__init__ creates `sum` eagerly for every param, filled with the constructor's
initial_accumulator_value, and ignores a param group's own initial_accumulator_value -- which is
nevertheless kept in param_groups and saved in checkpoints (torch/optim/adagrad.py, Adagrad.__init__).

Exit 0: the defect reproduces (the group's sum starts at the constructor value); 1: it does not.
Plain torch; run with `python reports/known/torch_adagrad_eager_init_group_value.py`.
"""
import sys

import torch

a = torch.zeros(4, requires_grad=True)
b = torch.zeros(4, requires_grad=True)
opt = torch.optim.Adagrad([{"params": [a]}, {"params": [b], "initial_accumulator_value": 0.5}],
                          lr=0.1, initial_accumulator_value=0.1)
group_value = opt.param_groups[1]["initial_accumulator_value"]
got = opt.state[b]["sum"] if "sum" in opt.state[b] else None
print(f"torch {torch.__version__}: group 1 declares initial_accumulator_value={group_value}; "
      f"its sum after construction: {None if got is None else got.tolist()}")
reproduced = got is not None and torch.all(got == 0.1).item() and group_value == 0.5
print("the defect reproduces (sum filled with the constructor's 0.1)" if reproduced
      else "the defect does NOT reproduce (sum follows the group's value or is created lazily)")
sys.exit(0 if reproduced else 1)
