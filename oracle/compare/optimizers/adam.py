"""Adam and AdamW: one matrix, two records (L2 vs decoupled decay)."""
from . import CompareRecord

CONFIGS = {
    "wd0": {"lr": 1e-3, "weight_decay": 0.0},
    "wd0.1": {"lr": 1e-2, "weight_decay": 0.1},
    "amsgrad": {"lr": 1e-2, "weight_decay": 0.1, "amsgrad": True},
    "maximize": {"lr": 1e-3, "weight_decay": 0.1, "maximize": True},
    "betas": {"lr": 3e-3, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1},
}
PLAN = (("wd0.1", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("wd0.1", "empty_group", "large_decay"), ("wd0.1", "rank_skew", "small_params"),
        ("amsgrad", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("wd0.1", "scalar", "lr0"), ("betas", "many_shapes", "tiny_grads"),
        ("amsgrad", "grad_none", "large_decay"), ("wd0", "scalar", "lr0_zero_grads"),
        # blockwise-quantized state (8-bit optimizers): moments spanning decades, exact zeros
        ("wd0.1", "blocks", "zero_grads"))
SCENARIO = {"lr": 1e-2, "weight_decay": 0.1}

# The library defaults (torch.optim.Adam / AdamW signatures), run unchanged in every dtype: eps = 1e-8
# rounds to 0 in float16 and AdamW's 1 - lr*wd = 1 - 1e-5 rounds to 1 in bfloat16 and float16
# (oracle.compare.checking.hazards); exactly-zero grad elements make m = v = 0, where an eps lost to rounding
# gives 0/0.
ADAM_DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
ADAMW_DEFAULTS = {**ADAM_DEFAULTS, "weight_decay": 1e-2}
DEFAULTS_ROWS = (("defaults", "single", "zero_grads"),)

RECORDS = (
    CompareRecord("adam", {**CONFIGS, "defaults": ADAM_DEFAULTS}, PLAN + DEFAULTS_ROWS, SCENARIO,
                  torch_class="torch.optim.Adam"),
    CompareRecord("adamw", {**CONFIGS, "defaults": ADAMW_DEFAULTS}, PLAN + DEFAULTS_ROWS, SCENARIO,
                  torch_class="torch.optim.AdamW"),
)
