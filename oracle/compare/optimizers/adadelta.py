"""Adadelta (torch.optim.Adadelta): lr away from 1 in most configs, so a step that ignores lr or
folds it into the accumulated delta shows; exactly-zero grads keep delta at 0 and tiny grads put
eps at first order in both roots."""
from . import CompareRecord

CONFIGS = {
    "wd0": {"lr": 0.5},
    "wd0.1": {"lr": 0.5, "weight_decay": 0.1},
    "rho": {"lr": 0.3, "rho": 0.5, "eps": 1e-4, "weight_decay": 0.1},
    "maximize": {"lr": 0.5, "weight_decay": 0.1, "maximize": True},
    # torch.optim.Adadelta's signature (the paper's lr = 1)
    "defaults": {"lr": 1.0, "rho": 0.9, "eps": 1e-6, "weight_decay": 0.0},
}
PLAN = (("wd0.1", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("wd0.1", "empty_group", "large_decay"), ("rho", "rank_skew", "small_params"),
        ("wd0.1", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("wd0.1", "scalar", "lr0"), ("rho", "many_shapes", "tiny_grads"),
        ("rho", "grad_none", "large_decay"), ("wd0", "scalar", "lr0_zero_grads"),
        ("defaults", "single", "zero_grads"))

RECORDS = (CompareRecord("adadelta", CONFIGS, PLAN, {"lr": 0.5, "weight_decay": 0.1},
                         torch_class="torch.optim.Adadelta"),)
