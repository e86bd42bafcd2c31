"""RAdam (torch.optim.RAdam): L2 and decoupled decay, maximize and other betas each get a config.
Every case runs 20 steps, so the unrectified warmup (rho_t <= 5: steps 1-5 at beta2 = 0.999 and at
0.99) and the rectified branch both show."""
from . import CompareRecord

CONFIGS = {
    "wd0": {"lr": 1e-3, "weight_decay": 0.0},
    "wd0.1": {"lr": 1e-2, "weight_decay": 0.1},
    "decoupled": {"lr": 1e-2, "weight_decay": 0.1, "decoupled_weight_decay": True},
    "maximize": {"lr": 1e-3, "weight_decay": 0.1, "maximize": True},
    "betas": {"lr": 3e-3, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1},
    # torch.optim.RAdam's signature, run unchanged in every dtype (eps = 1e-8 is 0 in float16)
    "defaults": {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0},
}
PLAN = (("wd0.1", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("decoupled", "empty_group", "large_decay"), ("wd0.1", "rank_skew", "small_params"),
        ("betas", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("decoupled", "scalar", "lr0"), ("betas", "many_shapes", "tiny_grads"),
        ("wd0.1", "grad_none", "large_decay"), ("wd0", "scalar", "lr0_zero_grads"),
        ("defaults", "single", "zero_grads"))

RECORDS = (CompareRecord("radam", CONFIGS, PLAN, {"lr": 1e-2, "weight_decay": 0.1},
                         torch_class="torch.optim.RAdam"),)
