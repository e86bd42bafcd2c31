"""RMSprop (torch.optim.RMSprop): plain, centered and with momentum, each with its own config;
tiny grads expose where eps sits (outside or inside the root), exactly-zero grads a centered
variance of 0, and lr = 0 a momentum buffer that must still advance."""
from . import CompareRecord

CONFIGS = {
    "wd0": {"lr": 1e-2},
    "wd0.1": {"lr": 1e-2, "weight_decay": 0.1},
    "centered": {"lr": 1e-2, "centered": True, "weight_decay": 0.1},
    "momentum": {"lr": 1e-2, "momentum": 0.9, "weight_decay": 0.1},
    "centered_momentum": {"lr": 1e-2, "alpha": 0.9, "centered": True, "momentum": 0.5},
    "maximize": {"lr": 1e-2, "momentum": 0.9, "weight_decay": 0.1, "maximize": True},
    # torch.optim.RMSprop's signature: eps = 1e-8 (0 in float16), so an element whose grads are all
    # exactly zero divides 0 by sqrt(0) + eps
    "defaults": {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8, "weight_decay": 0.0, "momentum": 0.0},
}
PLAN = (("wd0.1", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("wd0.1", "empty_group", "large_decay"), ("centered", "rank_skew", "small_params"),
        ("centered_momentum", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("momentum", "scalar", "lr0"), ("centered", "many_shapes", "tiny_grads"),
        ("momentum", "grad_none", "large_decay"), ("centered_momentum", "scalar", "lr0_zero_grads"),
        ("centered", "single", "zero_grads"), ("defaults", "single", "zero_grads"))

RECORDS = (CompareRecord("rmsprop", CONFIGS, PLAN, {"lr": 1e-2, "momentum": 0.9, "weight_decay": 0.1},
                         torch_class="torch.optim.RMSprop"),)
