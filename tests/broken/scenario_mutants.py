"""Deliberately broken optimizers and wrappers for the scenario tests, each
wrong in exactly one way, on top of one correct per-group-counter AdamW.

GroupAdamW is correct: apex/TransformerEngine conventions for the counter
(group["step"], advanced on every step() for every group, empty groups
included), torch AdamW's update (decoupled decay, eps outside), fp32 math,
fp32 moments whatever the param dtype (the param rounded once on store), a
checkpoint load that keeps the moments fp32, and a grad-scaling interface
step(inv_scale=, found_inf=). Each mutant flips one switch.
"""
import torch

from oracle.compare.targets.master_weights import MasterWeights
from oracle.adam import AdamConvention


class GroupAdamW(torch.optim.Optimizer):
    ORACLE_OPTIMIZER = "adamw"
    ORACLE_CONVENTION = AdamConvention(decay="decoupled", counter="group")
    ORACLE_OPTIONS = frozenset()
    ORACLE_COMPUTE = "float32"

    skip_empty_before_counter = False  # TE #1986: empty groups never get a counter
    cast_state_on_load = False         # torch's default load: state cast to the param dtype
    honor_found_inf = True
    write_to_copy = False              # update a p.contiguous() copy
    grad_as_workspace = False          # the update is written into p.grad
    float32_counter = False            # counter kept as a float32 tensor
    stale_counter_on_empty_shards = False  # TE #1986's counter skip, judged on this rank's shards

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def _advance(self, group):
        old = group.get("step")
        if self.float32_counter:
            group["step"] = (torch.tensor(0.0, dtype=torch.float32) if old is None else old) + 1
            return int(group["step"].item())
        group["step"] = (0 if old is None else old) + 1
        return group["step"]

    @torch.no_grad()
    def step(self, closure=None, inv_scale=1.0, found_inf=False):
        if found_inf and self.honor_found_inf:
            return None
        for group in self.param_groups:
            if self.skip_empty_before_counter and not group["params"]:
                continue
            if self.stale_counter_on_empty_shards and not any(_local(p).numel() for p in group["params"]):
                t = (group.get("step") or 0) + 1  # the (empty) update is formed, the counter not stored
            else:
                t = self._advance(group)
            b1, b2 = group["betas"]
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    st["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                g = p.grad.float() * inv_scale
                dest = p.contiguous() if self.write_to_copy else p
                pf = dest.float() * (1 - lr * wd)
                m = st["exp_avg"].mul_(b1).add_(g, alpha=1 - b1)
                v = st["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
                update = (lr / bc1) * m / (v.sqrt() / bc2 ** 0.5 + eps)
                dest.copy_(pf - update)
                if self.grad_as_workspace:
                    p.grad.copy_(update)
        return None

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        if self.cast_state_on_load:
            return
        # torch's loader casts floating state to the param's dtype: keep the saved fp32 moments
        params = [p for g in self.param_groups for p in g["params"]]
        for idx, saved in state_dict["state"].items():
            p = params[idx]
            for key, val in saved.items():
                if isinstance(val, torch.Tensor) and val.is_floating_point():
                    self.state[p][key] = val.to(device=p.device).clone()


def _local(p):
    """This rank's shard of a DTensor param (the tensor itself otherwise)."""
    return p.to_local() if hasattr(p, "to_local") else p


class EmptyShardGroupNoCounter(GroupAdamW):
    """The counter skip of TE #1986 under FSDP2: where all of a group's params
    have empty shards on this rank (fewer rows than ranks), the counter advance
    is skipped, as a kernel guarded by "any local elements?" would. The state
    stays the same on every rank (so collectives still match); only the counter
    that rank holds, and saves, falls behind."""
    stale_counter_on_empty_shards = True


class EmptyGroupNoCounter(GroupAdamW):
    """TransformerEngine FusedAdam before #1986: the empty-group skip comes before the counter."""
    skip_empty_before_counter = True


class CastStateOnLoad(GroupAdamW):
    """fp32 moments for bf16 params, loaded back through torch's default cast to the param dtype."""
    cast_state_on_load = True


class IgnoresFoundInf(GroupAdamW):
    honor_found_inf = False


class UpdatesContiguousCopy(GroupAdamW):
    """Writes the update into p.contiguous(): a temporary when p is not contiguous."""
    write_to_copy = True


class GradAsWorkspace(GroupAdamW):
    """Writes the update term into p.grad (as DeepSpeedCPUAdagrad's scalar tail does)."""
    grad_as_workspace = True


class Float32Counter(GroupAdamW):
    """A float32 counter: 2**24 + 1 rounds back to 2**24, so it stops counting there."""
    float32_counter = True


class ZeroGradStepWrapper(MasterWeights):
    """DeepSpeed ZeRO-0 FP16/BF16 wrappers before #8910: the constructor calls
    step() with zero grads to allocate state, advancing counters and applying
    AdamW decay before training."""

    def __init__(self, optimizer):
        super().__init__(optimizer)
        for masters in self.master_groups:
            for m in masters:
                m.grad = torch.zeros_like(m)
        self.optimizer.step()
        for masters in self.master_groups:
            for m in masters:
                m.grad = None


class NoStateMigrationWrapper(MasterWeights):
    """Leaves eager state keyed by (and in the dtype of) the low-precision model params."""

    @staticmethod
    def _migrate(state, p, m):
        return dict(state)


class StaleLr(GroupAdamW):
    """Reads each group's lr once, at its first step, and keeps using it: what a
    compiled step with the lr baked into its graph and no guard on it would do."""

    def step(self, *args, **kwargs):
        current = [g["lr"] for g in self.param_groups]
        for g in self.param_groups:
            g.setdefault("first_lr", g["lr"])
            g["lr"] = g["first_lr"]
        try:
            return super().step(*args, **kwargs)
        finally:
            for g, lr in zip(self.param_groups, current):
                g["lr"] = lr
