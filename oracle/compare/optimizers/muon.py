"""Muon (torch.optim.Muon): 2-D params only (oracle.spec.shaped gives every layout's and scenario's
shapes to it as matrices: a vector as a tall matrix, so torch's transposition is taken). Tiny grads
put the Frobenius norm near eps (clamp or add); exactly-zero grads make rows and columns of zeros
(and an all-zero grad at lr = 0 divides 0 by eps); nesterov off and the match_rms_adamw lr scaling
each get a config; fewer NS steps and the classic quintic coefficients are hyperparameters torch
takes.

Detection power: torch iterates in bfloat16, and the bound derived for that (the error model's matmul
rule through the iteration) is sound but grows with every NS step: a 10% deviation of the lr scaling
shows through 0 steps, 25-29% through 1 step, none through 2 or more (docs/oracle.md, "Matrix
products"). The configs that judge the update itself therefore run one NS step; the library's own
defaults (five steps) are judged on the momentum buffer, finiteness and the scenarios."""
from . import CompareRecord

CONFIGS = {
    "plain": {"lr": 0.02, "ns_steps": 1},
    "decay": {"lr": 0.02, "weight_decay": 0.1, "ns_steps": 1},
    "no_nesterov": {"lr": 0.02, "momentum": 0.9, "nesterov": False, "weight_decay": 0.1, "ns_steps": 1},
    "match_rms": {"lr": 0.01, "adjust_lr_fn": "match_rms_adamw", "weight_decay": 0.1, "ns_steps": 1},
    # one step of the classic quintic (15/8, -10/8, 3/8)
    "ns": {"lr": 0.02, "ns_steps": 1, "ns_coefficients": (1.875, -1.25, 0.375)},
    # torch.optim.Muon's signature (five steps of Jordan's coefficients)
    "defaults": {"lr": 1e-3, "weight_decay": 0.1, "momentum": 0.95, "nesterov": True, "eps": 1e-7, "ns_steps": 5},
}
PLAN = (("decay", "single", "normal"), ("plain", "two_groups", "tiny_grads"),
        ("match_rms", "empty_group", "large_decay"), ("no_nesterov", "rank_skew", "small_params"),
        ("decay", "zero_numel_last", "normal"), ("ns", "grad_none", "zero_grads"),
        ("plain", "scalar", "lr0"), ("match_rms", "many_shapes", "tiny_grads"),
        ("no_nesterov", "grad_none", "large_decay"), ("ns", "scalar", "lr0_zero_grads"),
        ("defaults", "single", "zero_grads"))

RECORDS = (CompareRecord("muon", CONFIGS, PLAN, {"lr": 0.02, "weight_decay": 0.1, "ns_steps": 1},
                         torch_class="torch.optim.Muon"),)
