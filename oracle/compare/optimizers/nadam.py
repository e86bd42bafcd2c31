"""NAdam (torch.optim.NAdam): L2 and decoupled decay each get a config, and so do the momentum
schedule's psi and maximize; the regimes are Adam's (eps placement, decay form, lr = 0 where v = 0)."""
from . import CompareRecord

CONFIGS = {
    "wd0": {"lr": 2e-3, "weight_decay": 0.0},
    "wd0.1": {"lr": 1e-2, "weight_decay": 0.1},
    "decoupled": {"lr": 1e-2, "weight_decay": 0.1, "decoupled_weight_decay": True},
    "maximize": {"lr": 2e-3, "weight_decay": 0.1, "maximize": True},
    # a fast schedule: mu_t moves away from b1/2 within the 20 steps, so its form shows
    "psi": {"lr": 3e-3, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1, "momentum_decay": 0.2},
    # torch.optim.NAdam's signature, run unchanged in every dtype (eps = 1e-8 is 0 in float16)
    "defaults": {"lr": 2e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "momentum_decay": 4e-3},
}
PLAN = (("wd0.1", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("decoupled", "empty_group", "large_decay"), ("wd0.1", "rank_skew", "small_params"),
        ("psi", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("decoupled", "scalar", "lr0"), ("psi", "many_shapes", "tiny_grads"),
        ("wd0.1", "grad_none", "large_decay"), ("wd0", "scalar", "lr0_zero_grads"),
        ("defaults", "single", "zero_grads"))

RECORDS = (CompareRecord("nadam", CONFIGS, PLAN, {"lr": 1e-2, "weight_decay": 0.1},
                         torch_class="torch.optim.NAdam"),)
