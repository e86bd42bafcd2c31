"""ASGD (torch.optim.ASGD): lambd large enough that the step-size schedule moves within 20 steps,
t0 small enough that averaging starts within them (the default t0 = 1e6 keeps ax a copy of p);
grads missing on some steps make per-param counters, and so per-param eta and mu, part."""
from . import CompareRecord

CONFIGS = {
    "wd0": {"lr": 1e-2, "lambd": 0.5, "t0": 5.0},
    "wd0.1": {"lr": 1e-2, "lambd": 0.5, "t0": 5.0, "weight_decay": 0.1},
    "alpha": {"lr": 5e-2, "lambd": 0.1, "alpha": 0.5, "t0": 2.0, "weight_decay": 0.1},
    "maximize": {"lr": 1e-2, "lambd": 0.5, "t0": 5.0, "weight_decay": 0.1, "maximize": True},
    # torch.optim.ASGD's signature
    "defaults": {"lr": 1e-2, "lambd": 1e-4, "alpha": 0.75, "t0": 1e6, "weight_decay": 0.0},
}
PLAN = (("wd0.1", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("wd0.1", "empty_group", "large_decay"), ("alpha", "rank_skew", "small_params"),
        ("wd0.1", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("wd0.1", "scalar", "lr0"), ("alpha", "many_shapes", "tiny_grads"),
        ("alpha", "grad_none", "large_decay"), ("wd0", "scalar", "lr0_zero_grads"),
        ("defaults", "single", "zero_grads"))

RECORDS = (CompareRecord("asgd", CONFIGS, PLAN, {"lr": 1e-2, "lambd": 0.5, "t0": 5.0, "weight_decay": 0.1},
                         torch_class="torch.optim.ASGD"),)
