"""Rprop (torch.optim.Rprop): the step-size bounds, the etas and maximize each get a config. Rprop
has no eps and no decay: its tiny-grads and large-decay regimes judge the signs of tiny grads and a
large lr; zero grads keep the step size (sign 0); lr = 0 starts every step size at 0, which the first
step clamps up to step_size_min (the params move by it)."""
from . import CompareRecord

CONFIGS = {
    "plain": {"lr": 1e-2},
    "etas": {"lr": 1e-2, "etas": (0.3, 1.5)},
    # both bounds bind within 20 steps
    "bounds": {"lr": 4e-2, "step_sizes": (1e-3, 0.05)},
    "maximize": {"lr": 1e-2, "maximize": True},
    # torch.optim.Rprop's signature
    "defaults": {"lr": 1e-2, "etas": (0.5, 1.2), "step_sizes": (1e-6, 50.0)},
}
PLAN = (("plain", "single", "normal"), ("etas", "two_groups", "tiny_grads"),
        ("bounds", "empty_group", "large_decay"), ("plain", "rank_skew", "small_params"),
        ("bounds", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("plain", "scalar", "lr0"), ("etas", "many_shapes", "tiny_grads"),
        ("maximize", "grad_none", "large_decay"), ("bounds", "scalar", "lr0_zero_grads"),
        ("defaults", "single", "zero_grads"))

RECORDS = (CompareRecord("rprop", CONFIGS, PLAN, {"lr": 1e-2, "etas": (0.5, 1.2)},
                         torch_class="torch.optim.Rprop"),)
