"""Lion (Chen et al. 2023). torch has none; our FusedLion and, where DeepSpeed
is installed, its CPU Lion op are the targets.

DeepSpeedCPULion (deepspeed/ops/lion/cpu_lion.py, ops/csrc/includes/cpu_lion.h,
read from 0.19.8): state["step"] per param, created lazily; lr, betas, weight
decay passed to the kernel as float; the update's sign is put on -lr with the
sign bit of c (`-copysign(lr, c)`, so c = +0 steps down and -0 up), decay
p *= 1 - lr*wd before it; an `exp_avg_sq` it never uses is allocated too.
"""
from . import CompareRecord

CONFIGS = {
    "wd0": {"lr": 1e-4, "weight_decay": 0.0},
    "wd0.1": {"lr": 1e-3, "weight_decay": 0.1},
    "betas": {"lr": 3e-4, "betas": (0.95, 0.98), "weight_decay": 0.1},
    "maximize": {"lr": 1e-3, "weight_decay": 0.1, "maximize": True},
    # the reference implementation's defaults (google/automl lion_pytorch.py, lucidrains/lion-pytorch)
    "defaults": {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 0.0},
}
# zero_grads: exactly-zero grads make c exactly 0 on the first step, where
# sign(0) conventions differ; lr0 with decay shows whether decay uses lr.
PLAN = (("wd0.1", "single", "normal"), ("wd0", "two_groups", "tiny_grads"),
        ("wd0.1", "empty_group", "large_decay"), ("betas", "rank_skew", "small_params"),
        ("wd0.1", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("wd0.1", "scalar", "lr0"), ("betas", "many_shapes", "tiny_grads"),
        ("wd0", "scalar", "lr0_zero_grads"), ("wd0.1", "single", "zero_grads"),
        ("defaults", "single", "zero_grads"), ("wd0.1", "blocks", "zero_grads"))


def deepspeed_lion_targets() -> list:
    from oracle.lion import DEEPSPEED_LION, DEFAULTS

    from ..targets.base import Target
    from ..targets.deepspeed import load_op, op_unavailable
    from ..targets.bitsandbytes_torchao import make_factory

    def requires(device: str):
        if device != "cpu":
            return "DeepSpeed CPU Lion runs on cpu only"
        return op_unavailable("cpu_lion")

    factory = make_factory("deepspeed.ops.lion.DeepSpeedCPULion", {"lr", "betas", "weight_decay"}, "DeepSpeed",
                           DEFAULTS)

    def make(groups, defaults):
        load_op("cpu_lion")  # under fused.build_lock (see targets.deepspeed._make), then cached
        return factory(groups, defaults)

    return [Target(name="deepspeed.cpu_lion", optimizer="lion", make=make, convention=DEEPSPEED_LION,
                   devices=("cpu",), compute="float32", state_dtype="float32", requires=requires,
                   no_dtensor="DeepSpeed's CPU op reads each param's raw storage (a DTensor param crashed the rank "
                              "with SIGSEGV)",
                   notes="DeepSpeedCPULion: copysign sign, per-param int counter, float32 hyperparameters")]


RECORDS = (CompareRecord("lion", CONFIGS, PLAN, {"lr": 1e-3, "weight_decay": 0.1},
                         extra_targets=deepspeed_lion_targets),)
