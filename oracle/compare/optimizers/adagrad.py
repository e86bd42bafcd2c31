"""Adagrad."""
from . import CompareRecord

CONFIGS = {
    "wd0": {"lr": 1e-2},
    "wd0.1": {"lr": 1e-2, "weight_decay": 0.1},
    "lr_decay": {"lr": 1e-1, "lr_decay": 0.05},
    "init_acc": {"lr": 1e-2, "initial_accumulator_value": 0.1, "weight_decay": 0.1},
    "maximize": {"lr": 1e-2, "maximize": True},
    # torch.optim.Adagrad's signature: a zero initial accumulator and eps = 1e-10 (0 in float16), so an
    # element whose grads are all exactly zero divides 0 by sqrt(0) + eps
    "defaults": {"lr": 1e-2, "lr_decay": 0.0, "weight_decay": 0.0, "initial_accumulator_value": 0.0,
                 "eps": 1e-10},
}
PLAN = (("wd0.1", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("wd0.1", "empty_group", "large_decay"), ("lr_decay", "rank_skew", "small_params"),
        ("init_acc", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("wd0.1", "scalar", "lr0"), ("init_acc", "many_shapes", "tiny_grads"),
        ("defaults", "single", "zero_grads"))

RECORDS = (
    # torch's fused Adagrad on bf16/fp16 params deviates from "fp32 math, round
    # on store" by up to 16 bf16 ULPs in `sum` at step 1 with wd = 0.1
    # (measured: adagrad/bf16/wd0.1/single/normal, seed 0), as if the L2-decayed
    # grad and the accumulator were rounded to the param dtype mid-update, so it
    # is judged as a path computing in the storage dtype.
    CompareRecord("adagrad", CONFIGS, PLAN, {"lr": 1e-2, "weight_decay": 0.1},
                  torch_class="torch.optim.Adagrad", torch_fused_compute="storage",
                  torch_fused_no_dtensor="torch registers no DTensor sharding strategy for aten._fused_adagrad_ "
                                         "(NotImplementedError under FSDP2)"),
)
