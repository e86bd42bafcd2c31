"""Adamax (torch.optim.Adamax): tiny grads and exactly-zero grads expose where eps sits (inside
the running max or in the division); grads missing on some steps a per-param counter."""
from . import CompareRecord

CONFIGS = {
    "wd0": {"lr": 2e-3},
    "wd0.1": {"lr": 2e-3, "weight_decay": 0.1},
    "betas": {"lr": 1e-2, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1},
    "maximize": {"lr": 2e-3, "weight_decay": 0.1, "maximize": True},
    # torch.optim.Adamax's signature: eps = 1e-8 (0 in float16), so an element whose grads are all
    # exactly zero divides 0 by max(0, 0 + eps)
    "defaults": {"lr": 2e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0},
}
PLAN = (("wd0.1", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("wd0.1", "empty_group", "large_decay"), ("betas", "rank_skew", "small_params"),
        ("wd0.1", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("wd0.1", "scalar", "lr0"), ("betas", "many_shapes", "tiny_grads"),
        ("betas", "grad_none", "large_decay"), ("wd0", "scalar", "lr0_zero_grads"),
        ("defaults", "single", "zero_grads"))

RECORDS = (CompareRecord("adamax", CONFIGS, PLAN, {"lr": 2e-3, "weight_decay": 0.1},
                         torch_class="torch.optim.Adamax"),)
