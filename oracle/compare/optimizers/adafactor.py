"""Adafactor (torch.optim.Adafactor): lr = 1e-2 is the relative step size's cap (rho_t = lr while
t <= 1/lr^2), so the params' own RMS sets the step. Every layout has 2-D params (factored: row and
column state) next to 1-D and 0-D ones (unfactored); eps1 large enough to act in its own config,
exactly-zero grads meet the clamps, small params the eps2 floor, and d = 1 clips the first steps."""
from . import CompareRecord

CONFIGS = {
    "wd0": {"lr": 1e-2, "eps": (1e-3, 1e-3)},
    "wd0.1": {"lr": 1e-2, "eps": (1e-3, 1e-3), "weight_decay": 0.1},
    # eps1 near the grads' RMS: the clamps of mean(r) and v_hat (torch) or eps1 inside g^2 (the paper) show
    "eps1": {"lr": 1e-2, "eps": (3e-2, 1e-3), "weight_decay": 0.1},
    # a slower beta2 schedule and a clip threshold that rarely acts
    "schedule": {"lr": 1e-2, "beta2_decay": -0.5, "eps": (1e-3, 1e-3), "d": 4.0, "weight_decay": 0.1},
    "maximize": {"lr": 1e-2, "eps": (1e-3, 1e-3), "weight_decay": 0.1, "maximize": True},
    # torch.optim.Adafactor's signature: eps1 = None, the param dtype's machine epsilon
    "defaults": {"lr": 1e-2, "beta2_decay": -0.8, "eps": (None, 1e-3), "d": 1.0, "weight_decay": 0.0},
}
PLAN = (("wd0.1", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("wd0.1", "empty_group", "large_decay"), ("schedule", "rank_skew", "small_params"),
        ("wd0.1", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("eps1", "scalar", "lr0"), ("schedule", "many_shapes", "tiny_grads"),
        ("eps1", "grad_none", "zero_grads"), ("wd0", "scalar", "lr0_zero_grads"),
        ("defaults", "single", "zero_grads"), ("defaults", "many_shapes", "small_params"),
        ("wd0.1", "blocks", "normal"))

RECORDS = (CompareRecord("adafactor", CONFIGS, PLAN, {"lr": 1e-2, "eps": (1e-3, 1e-3), "weight_decay": 0.1},
                         torch_class="torch.optim.Adafactor"),)
