"""SGD with momentum (torch.optim.SGD): the buffer's first step, nesterov,
dampening and decay each get a config; regimes with grads absent on some
steps and lr = 0 show whether the buffer advances without a grad."""
from . import CompareRecord

CONFIGS = {
    "plain": {"lr": 1e-2},
    "momentum": {"lr": 1e-2, "momentum": 0.9},
    "dampening": {"lr": 1e-2, "momentum": 0.9, "dampening": 0.3},
    "nesterov": {"lr": 1e-2, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1},
    "wd0.1": {"lr": 1e-2, "momentum": 0.9, "weight_decay": 0.1},
    "maximize": {"lr": 1e-2, "momentum": 0.9, "maximize": True},
    # torch.optim.SGD's signature (lr = 1e-3 since torch 2.6)
    "defaults": {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0},
}
PLAN = (("wd0.1", "single", "normal"), ("momentum", "two_groups", "tiny_grads"),
        ("wd0.1", "empty_group", "large_decay"), ("dampening", "rank_skew", "small_params"),
        ("nesterov", "zero_numel_last", "normal"), ("maximize", "grad_none", "zero_grads"),
        ("plain", "scalar", "lr0"), ("nesterov", "many_shapes", "tiny_grads"),
        ("dampening", "grad_none", "large_decay"), ("momentum", "scalar", "lr0_zero_grads"),
        # weight decay with momentum = 0 (every other decay row has momentum): exposes decay
        # applied only inside the momentum branch (ml-explore/mlx #440, MLX440DecayOnlyWithMomentum)
        ("plain", "single", "large_decay"),
        ("defaults", "single", "zero_grads"))

RECORDS = (CompareRecord("sgd", CONFIGS, PLAN, {"lr": 1e-2, "momentum": 0.9, "weight_decay": 0.1},
                         torch_class="torch.optim.SGD",
                         torch_fused_no_dtensor="torch registers no DTensor sharding strategy for aten._fused_sgd_ "
                                                "(NotImplementedError under FSDP2)"),)
