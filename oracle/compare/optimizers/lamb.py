"""LAMB (torch has none: apex's FusedLAMB defines the default convention)."""
from . import CompareRecord

CONFIGS = {
    "wd0.01": {"lr": 1e-2, "weight_decay": 0.01},
    "wd0": {"lr": 1e-2, "weight_decay": 0.0},
    "clip": {"lr": 1e-2, "weight_decay": 0.1, "max_grad_norm": 0.05},
    # max_grad_norm = 0 means "no clipping" (the paper and apex's documentation); apex's kernel divides
    # by G/0 instead and zeroes every grad (oracle.lamb zero_max_grad_norm): observable only here
    "clip0": {"lr": 1e-2, "weight_decay": 0.01, "max_grad_norm": 0.0},
    "no_averaging": {"lr": 1e-3, "weight_decay": 0.1, "grad_averaging": False},
    # apex FusedLAMB's signature (eps = 1e-6 is an fp16 subnormal with 4 significant bits)
    "defaults": {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": 0.01, "max_grad_norm": 1.0},
}
PLAN = (("wd0.01", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("clip", "empty_group", "large_decay"), ("wd0.01", "rank_skew", "small_params"),
        ("no_averaging", "zero_numel_last", "normal"), ("clip", "grad_none", "zero_grads"),
        ("wd0.01", "scalar", "lr0"), ("wd0", "many_shapes", "small_params"),
        ("defaults", "single", "zero_grads"), ("clip0", "two_groups", "normal"))

RECORDS = (CompareRecord("lamb", CONFIGS, PLAN, {"lr": 1e-2, "weight_decay": 0.01}),)
